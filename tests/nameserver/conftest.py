"""Async tests here run on asyncio's default loop and on uvloop (ids ``[asyncio]`` / ``[uvloop]``), as the
client's tests do, since ``quasar nameserver`` runs on uvloop.

``nameserver_factory``: real ``quasar nameserver`` subprocesses on free ports (see
:mod:`quasar.testing.nameserver_process`); every one it made is stopped by PID at teardown, and a failing
test's report carries the tail of each one's stderr."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from quasar.testing.nameserver_process import NameServerProcess
from quasar.testing.subprocess_harness import stderr_sections

NameServerFactory = Callable[..., NameServerProcess]

_NAMESERVERS = pytest.StashKey[list[NameServerProcess]]()

LoopFactory = Callable[[], asyncio.AbstractEventLoop]
LOOP_FACTORIES: dict[str, LoopFactory] = {"asyncio": asyncio.new_event_loop}
try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
    pass
else:
    LOOP_FACTORIES["uvloop"] = uvloop.new_event_loop


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, LoopFactory]:
    return LOOP_FACTORIES


@pytest.fixture
def nameserver_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[NameServerFactory]:
    made: list[NameServerProcess] = []
    request.node.stash[_NAMESERVERS] = made

    def make(*, start: bool = True, **kwargs: object) -> NameServerProcess:
        process = NameServerProcess(tmp_path / f"nameserver{len(made)}.logs", **kwargs)  # type: ignore[arg-type]
        made.append(process)
        return process.start() if start else process

    yield make
    for process in made:
        process.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:
        report.sections += stderr_sections(item.stash.get(_NAMESERVERS, []), "name server")
    return report
