"""Pick and open a metadata backend from a URL: what composition roots (``broker.app``, ``cli``) call for
``--metadata-store URL``.

URLs (Pulsar names its backends the same way: ``zk:``, ``etcd:``, ``rocksdb:``, ``memory:``)::

    sqlite                         the embedded default, at ``default_sqlite_path``
    sqlite:///abs/path/meta.db     SQLite at an absolute path (``sqlite://`` alone: the default path)
    memory://                      in-process dicts (tests, throw-away runs); nothing survives the process
    etcd://h:p[,h:p...][/prefix]   etcd v3, several endpoints allowed, an optional key prefix (namespace) so
                                   several clusters can share one etcd, e.g. etcd://h1:2379,h2:2379/quasar-a
        ?session_ttl_s=N           the session lease TTL in whole seconds (default 10)
        &operation_timeout_s=X     the bound on each etcd request in seconds (default 5)
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, unquote

from quasar.metadata.etcd import EtcdMetadataStore
from quasar.metadata.memory import MemoryMetadataStore
from quasar.metadata.port import MetadataStore
from quasar.metadata.sqlite import SqliteMetadataStore

__all__ = ["EtcdUrl", "open_metadata_store", "parse_etcd_url"]

_FORMS = "sqlite, sqlite:///abs/path, memory:// or etcd://host:port[,host:port...][/prefix]"


class EtcdUrl:
    """The parts of an ``etcd://`` URL: endpoints (``"host:port"``), prefix (``""`` or ``"/name"``) and options."""

    __slots__ = ("endpoints", "operation_timeout_s", "prefix", "session_ttl_s")

    def __init__(
        self, endpoints: list[str], prefix: str, session_ttl_s: int, operation_timeout_s: float
    ) -> None:
        self.endpoints = endpoints
        self.prefix = prefix
        self.session_ttl_s = session_ttl_s
        self.operation_timeout_s = operation_timeout_s

    def __repr__(self) -> str:
        return (f"EtcdUrl(endpoints={self.endpoints!r}, prefix={self.prefix!r}, session_ttl_s={self.session_ttl_s},"
                f" operation_timeout_s={self.operation_timeout_s})")  # fmt: skip


def parse_etcd_url(url: str) -> EtcdUrl:
    """Split ``etcd://h:p[,h:p...][/prefix][?session_ttl_s=N&operation_timeout_s=X]``; ValueError when malformed."""
    if not url.startswith("etcd://"):
        raise ValueError(f"not an etcd URL: {url!r} (etcd://host:port[,host:port...][/prefix])")
    rest, _, query = url[len("etcd://") :].partition("?")
    hosts, slash, prefix = rest.partition("/")
    endpoints = [host.strip() for host in hosts.split(",")]
    if not hosts or not all(endpoints):
        raise ValueError(f"an etcd URL names at least one host:port, got {url!r}")
    prefix = "/" + prefix.strip("/") if slash and prefix.strip("/") else ""
    if "//" in prefix:
        raise ValueError(f"an etcd key prefix has non-empty segments, got {prefix!r} in {url!r}")
    ttl, timeout = 10, 5.0
    for name, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
        try:
            if name == "session_ttl_s":
                ttl = int(value)
            elif name == "operation_timeout_s":
                timeout = float(value)
            else:
                raise ValueError(f"unknown etcd URL option {name!r} (session_ttl_s, operation_timeout_s)")
        except ValueError as exc:
            raise ValueError(f"{url!r}: {exc}") from None
    if ttl < 1 or not timeout > 0:
        raise ValueError(f"{url!r}: session_ttl_s is >= 1 and operation_timeout_s > 0")
    return EtcdUrl(endpoints, prefix, ttl, timeout)


async def open_metadata_store(url: str, *, default_sqlite_path: Path) -> MetadataStore:
    """Open the metadata store ``url`` names (forms in the module docstring).

    Raises:
        ValueError: ``url`` is none of the forms (the message lists them), or an etcd endpoint / option is
            malformed.
        MetadataStoreError: the backend could not be opened (etcd unreachable:
            :class:`~quasar.metadata.errors.MetadataStoreUnavailableError`).
    """
    text = url.strip()
    scheme, sep, rest = text.partition(":")
    scheme = scheme.lower()
    if scheme == "sqlite":
        if not sep or rest in ("", "//", "///"):
            return await SqliteMetadataStore.open(default_sqlite_path)
        if not rest.startswith("///"):
            raise ValueError(f"a SQLite metadata URL takes an absolute path, sqlite:///abs/path, got {url!r}")
        return await SqliteMetadataStore.open(Path(unquote(rest[2:])))
    if scheme == "memory" and rest in ("", "//", "///"):
        return MemoryMetadataStore()
    if scheme == "etcd" and rest.startswith("//"):
        parsed = parse_etcd_url("etcd" + text[len(scheme) :])
        return await EtcdMetadataStore.open(
            parsed.endpoints,
            prefix=parsed.prefix,
            session_ttl_s=parsed.session_ttl_s,
            operation_timeout_s=parsed.operation_timeout_s,
        )
    raise ValueError(f"unknown metadata store URL {url!r}: use {_FORMS}")
