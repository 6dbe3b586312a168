"""Command-line options shared by ``quasar perf produce`` and ``quasar perf consume``.

Option letters follow ``pulsar-perf`` (``-u`` service URL, ``-t`` number of topics, ``-time`` test duration,
``-m`` number of messages, ``-r`` rate, ``-s`` size, ``-b`` / ``-bm`` batching, ``-z`` compression, ``-o``
max outstanding, ``-st`` / ``-sp`` / ``-q`` for subscriptions). Like ``pulsar-perf``, a run with ``-t N`` (N > 1)
uses topics ``TOPIC-0 .. TOPIC-(N-1)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from quasar.cli.perf_clients import CLIENTS, PerfClient, probe_service_url
from quasar.cli.perf_stats import HdrLog

__all__ = ["common_options", "open_client", "open_hdr_log", "topic_names"]

F = TypeVar("F", bound=Callable[..., Any])


def topic_names(topic: str, num_topics: int) -> list[str]:
    """The topics of a run: ``[topic]`` for one topic, else ``topic-0 .. topic-(n-1)`` (``pulsar-perf``).

    Raises:
        ValueError: ``num_topics`` < 1 or ``topic`` is empty.
    """
    if not topic:
        raise ValueError("topic must not be empty")
    if num_topics < 1:
        raise ValueError(f"num_topics must be >= 1, got {num_topics}")
    return [topic] if num_topics == 1 else [f"{topic}-{i}" for i in range(num_topics)]


def common_options(func: F) -> F:
    """The options both commands take: topic argument, service URL, topics, duration, count, client, token,
    histogram file."""
    decorators = [
        click.argument("topic"),
        click.option(
            "-u", "--service-url", default="pulsar://127.0.0.1:6650", show_default=True,
            help="Pulsar service URL of the broker.",
        ),
        click.option(
            "-t", "--num-topic", "--num-topics", "num_topics", type=click.IntRange(1, 10_000), default=1,
            show_default=True, help="Number of topics (TOPIC-0 .. TOPIC-N-1 when above 1).",
        ),
        click.option(
            "-time", "--test-duration", "--time", "--duration", "test_duration", type=click.FloatRange(min=0),
            default=0, show_default=True, help="Stop after this many seconds; 0 = no time limit.",
        ),
        click.option(
            "-m", "--num-messages", type=click.IntRange(min=0), default=0, show_default=True,
            help="Stop after this many messages in total; 0 = no count limit.",
        ),
        click.option(
            "--client", "client_kind", type=click.Choice(CLIENTS), default="pulsar", show_default=True,
            help="pulsar = the official pulsar-client package, quasar = Quasar's own client.",
        ),
        click.option("--auth-token", default=None, help="JWT for token authentication (AuthenticationToken)."),
        click.option(
            "--histogram-file", type=click.Path(dir_okay=False, writable=True), default=None,
            help="Write the latency histograms (us, one per second) to this HdrHistogram log file.",
        ),
    ]  # fmt: skip
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def open_client(client_kind: str, service_url: str, auth_token: str | None) -> PerfClient:
    """Check that the broker answers on TCP, then create the client.

    Raises:
        click.ClickException: bad URL or broker unreachable (exit status 1 with the reason).
    """
    try:
        probe_service_url(service_url)
    except (ValueError, ConnectionError) as exc:
        raise click.ClickException(str(exc)) from None
    try:
        return PerfClient(client_kind, service_url, auth_token=auth_token)
    except ImportError:
        raise click.ClickException(
            "--client pulsar needs the official pulsar-client package (pip install pulsar-client); "
            "or use --client quasar"
        ) from None
    except Exception as exc:  # noqa: BLE001 - the official client has its own exception types
        raise click.ClickException(f"cannot create a {client_kind} client for {service_url}: {exc}") from None


def open_hdr_log(path: str | None) -> HdrLog | None:
    """Open the ``--histogram-file`` (None without one).

    Raises:
        click.ClickException: the file cannot be written (exit status 1 with the reason).
    """
    if path is None:
        return None
    try:
        return HdrLog.create(path)
    except OSError as exc:
        raise click.ClickException(f"cannot write the histogram file: {exc}") from None
