"""Fixtures that run ``quasar cluster up`` as a subprocess (see :mod:`quasar.testing.cluster_process`).

``cluster_factory(data_dir=None, brokers=3, nameservers=2, start=True, **kwargs)`` makes a
:class:`ClusterProcess` (by default over ``tmp_path/cluster``); every one it made is stopped at teardown,
``cluster up`` first and then, by PID, any member it left. When a test fails, the tail of ``cluster up``'s
stderr and of each member's log is appended to the report. ``needs_etcd`` skips a test when the ``etcd``
binary is not on PATH.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from quasar.testing.cluster_process import ClusterProcess
from quasar.testing.subprocess_harness import stderr_sections

ClusterFactory = Callable[..., ClusterProcess]

_CLUSTERS = pytest.StashKey[list[ClusterProcess]]()

needs_etcd = pytest.mark.skipif(
    shutil.which("etcd") is None, reason="etcd is not installed (Debian/Ubuntu: apt-get install etcd-server)"
)


@pytest.fixture
def cluster_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ClusterFactory]:
    made: list[ClusterProcess] = []
    request.node.stash[_CLUSTERS] = made

    def make(
        *,
        data_dir: Path | None = None,
        brokers: int = 3,
        nameservers: int = 2,
        start: bool = True,
        **kwargs: object,
    ) -> ClusterProcess:
        directory = data_dir if data_dir is not None else tmp_path / "cluster"
        process = ClusterProcess(directory, brokers, nameservers, **kwargs)  # type: ignore[arg-type]
        made.append(process)
        return process.start() if start else process

    yield make
    for process in made:
        process.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:
        clusters = item.stash.get(_CLUSTERS, [])
        report.sections += stderr_sections(clusters, "cluster up")
        for process in clusters:
            logs = process.data_dir / "logs"
            for log in sorted(logs.glob("*.log")) if logs.is_dir() else []:
                lines = log.read_text(errors="replace").splitlines()[-15:]
                report.sections.append((f"member log {log.name}", "\n".join(lines) or "(empty)"))
    return report
