"""Client tests reuse the real-broker fixtures of tests/interop (``broker``, ``broker_factory``), and run on both
event loops quasar.client supports:

* every ``async def`` test runs once on asyncio's default loop and once on uvloop (ids ``[asyncio]`` /
  ``[uvloop]``), through pytest-asyncio's ``pytest_asyncio_loop_factories`` hook (pytest-asyncio >= 1.x; the
  older ``event_loop_policy`` fixture override is deprecated there);
* every blocking-facade test against a real broker (a plain ``def`` test using ``broker`` or ``broker_factory``)
  runs with the facade's loop thread on each loop (the ``facade_loop`` fixture, same ids). The facade's default
  is uvloop where installed (:func:`quasar.client.sync_loop.new_event_loop`).

Where uvloop is not installed both sets run on asyncio only.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping

import pytest

from quasar.client import sync_loop
from tests.interop.conftest import broker, broker_factory, pytest_runtest_makereport  # noqa: F401

LoopFactory = Callable[[], asyncio.AbstractEventLoop]

LOOP_FACTORIES: dict[str, LoopFactory] = {"asyncio": asyncio.new_event_loop}
try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
    pass
else:
    LOOP_FACTORIES["uvloop"] = uvloop.new_event_loop

_BROKER_FIXTURES = frozenset({"broker", "broker_factory"})


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, LoopFactory]:
    return LOOP_FACTORIES


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if inspect.iscoroutinefunction(metafunc.function) or not _BROKER_FIXTURES & set(metafunc.fixturenames):
        return
    metafunc.fixturenames.append("facade_loop")
    metafunc.parametrize("facade_loop", list(LOOP_FACTORIES), indirect=True)


@pytest.fixture
def facade_loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The blocking facade's loop thread runs on the loop named by the parameter; returns that name."""
    name: str = request.param
    monkeypatch.setattr(sync_loop, "new_event_loop", LOOP_FACTORIES[name])
    return name
