"""Client tests reuse the real-broker fixtures of tests/interop (``broker``, ``broker_factory``)."""

from tests.interop.conftest import broker, broker_factory, pytest_runtest_makereport  # noqa: F401
