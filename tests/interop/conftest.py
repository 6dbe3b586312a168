"""Fixtures that run a real ``quasar standalone`` subprocess (see :mod:`quasar.testing.broker_process`).

``broker``: a started broker on free ports over ``tmp_path/data``; SIGTERM (then SIGKILL) at teardown.
``broker_factory``: ``broker_factory(extra_args=(...), data_dir=..., start=True, **BrokerProcess kwargs)``
for tests that need broker options, several brokers, restarts on the same data directory or ``kill()``
(kill -9); every broker it made is stopped at teardown. When a test fails, the tail of each of its brokers'
stderr is appended to the failure report.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from quasar.testing.broker_process import BrokerProcess
from quasar.testing.subprocess_harness import stderr_sections

if TYPE_CHECKING:
    from tests.interop.test_bad_input import RawConnection

BrokerFactory = Callable[..., BrokerProcess]

_BROKERS = pytest.StashKey[list[BrokerProcess]]()


@pytest.fixture
def broker_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerFactory]:
    made: list[BrokerProcess] = []
    request.node.stash[_BROKERS] = made

    def make(
        *,
        extra_args: tuple[str, ...] = (),
        data_dir: Path | None = None,
        start: bool = True,
        **kwargs: object,
    ) -> BrokerProcess:
        directory = data_dir if data_dir is not None else tmp_path / f"data{len(made) or ''}"
        process = BrokerProcess(directory, extra_args=extra_args, **kwargs)  # type: ignore[arg-type]
        made.append(process)
        return process.start() if start else process

    yield make
    for process in made:
        process.stop()


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:
        report.sections += stderr_sections(item.stash.get(_BROKERS, []), "broker")
    return report


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[Callable[[], RawConnection]]:
    """``raw()`` opens a hand-driven Pulsar connection (``test_bad_input.RawConnection``) to ``broker``; every
    one is closed at teardown."""
    from tests.interop.test_bad_input import RawConnection  # a test module: imported when the fixture is used

    opened: list[RawConnection] = []

    def connect() -> RawConnection:
        conn = RawConnection(broker.service_url)
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        conn.close()
