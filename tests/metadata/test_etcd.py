"""EtcdMetadataStore specifics, on real etcd processes: changes by other stores and processes are notified,
ephemeral paths go with their session (close, crash, lease expiry or revocation), session events, an etcd that
is down or frozen, several endpoints, foreign values, and the ``open_metadata_store`` URLs.

The shared ``etcd_server`` (conftest) serves the tests that leave etcd running; tests that stop or pause etcd
start their own (``own_etcd``). Every wait is bounded in time and count; every process started is stopped.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aetcd
import pytest

from quasar.metadata import (
    MetadataStoreError,
    MetadataStoreUnavailableError,
    Notification,
    NotificationType,
    Put,
    SessionEvent,
)
from quasar.metadata.etcd import EtcdMetadataStore
from quasar.metadata.memory import MemoryMetadataStore
from quasar.metadata.sqlite import SqliteMetadataStore
from quasar.metadata.stores import open_metadata_store, parse_etcd_url
from quasar.testing.etcd import EtcdProcess, etcd_available

from .conftest import NO_ETCD, unique_prefix

pytestmark = pytest.mark.skipif(not etcd_available(), reason=NO_ETCD)

CREATED, MODIFIED, DELETED, CHILDREN = (
    NotificationType.CREATED,
    NotificationType.MODIFIED,
    NotificationType.DELETED,
    NotificationType.CHILDREN_CHANGED,
)

#: A second process: opens a store (lease TTL 2 s), writes a durable and an ephemeral path, says "ready", then
#: waits for stdin; the test SIGKILLs it, so its lease is never revoked and must expire at etcd.
CHILD = """
import asyncio, sys
from quasar.metadata.etcd import EtcdMetadataStore

async def main():
    store = await EtcdMetadataStore.open(sys.argv[1], prefix=sys.argv[2], session_ttl_s=2)
    await store.put("/proc/durable", b"d")
    await store.put("/proc/ephemeral", b"e", ephemeral=True)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

asyncio.run(main())
"""


async def eventually(check: Callable[[], Awaitable[bool] | bool], what: str, timeout_s: float = 10.0) -> None:
    """Poll ``check`` every 50 ms until it is true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / 0.05) + 1):
        result = check()
        if await result if isinstance(result, Awaitable) else result:
            return
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {timeout_s} s: {what}")


async def answers(store: EtcdMetadataStore) -> bool:
    """Whether ``store`` reaches etcd now."""
    try:
        await store.get("/")
    except MetadataStoreUnavailableError:
        return False
    return True


def dead_endpoint() -> str:
    """A loopback port nobody listens on (right now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
async def own_etcd(tmp_path: Path) -> AsyncIterator[EtcdProcess]:
    """A private etcd (for tests that stop or pause it), stopped at the end whatever happened."""
    process = EtcdProcess(tmp_path / "etcd")
    await asyncio.to_thread(process.start)
    try:
        yield process
    finally:
        await asyncio.to_thread(process.stop)


@pytest.fixture
async def stores(etcd_server: EtcdProcess) -> AsyncIterator[Callable[..., Awaitable[EtcdMetadataStore]]]:
    """Opens stores on the shared etcd under one fresh prefix; closes them all at the end."""
    prefix, opened = unique_prefix(), []

    async def open_store(**options: object) -> EtcdMetadataStore:
        store = await EtcdMetadataStore.open(etcd_server.endpoint, prefix=prefix, **options)  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        await store.close()


async def test_changes_by_another_store_are_notified(stores: Callable[..., Awaitable[EtcdMetadataStore]]):
    first, second = await stores(), await stores()
    seen: list[tuple[NotificationType, str]] = []
    first.register_listener(lambda n: seen.append((n.type, n.path)))
    await second.put("/shared/a", b"1")
    await second.put("/shared/a", b"2")
    await second.multi([Put("/shared/b", b""), Put("/shared/b", b"again")])
    await second.delete("/shared/a")
    expected = [(CREATED, "/shared/a"), (CHILDREN, "/shared"), (MODIFIED, "/shared/a"),
                (CREATED, "/shared/b"), (CHILDREN, "/shared"), (MODIFIED, "/shared/b"),  # one multi: coalesced
                (DELETED, "/shared/a"), (CHILDREN, "/shared")]  # fmt: skip
    await eventually(lambda: len(seen) >= len(expected), "the first store hears the second's changes")
    assert seen == expected
    got = await first.get("/shared/b")
    assert got is not None and got.value == b"again" and got.stat.version == 1  # two puts in one multi


async def test_changes_by_another_process_are_notified_and_its_ephemerals_expire_with_its_lease(
    etcd_server: EtcdProcess, stores: Callable[..., Awaitable[EtcdMetadataStore]]
):
    watcher = await stores()
    seen: list[Notification] = []
    watcher.register_listener(seen.append)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, etcd_server.endpoint, watcher.prefix,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        assert await asyncio.wait_for(child.stdout.readline(), 30) == b"ready\n"
        await eventually(
            lambda: Notification(CREATED, "/proc/ephemeral") in seen, "the child's puts are notified"
        )
        assert Notification(CREATED, "/proc/durable") in seen
        got = await watcher.get("/proc/ephemeral")
        assert got is not None and got.stat.ephemeral and not got.stat.created_by_self
        child.kill()  # a crash: nobody revokes the lease, etcd expires it after its TTL (2 s)
        await child.wait()
        await eventually(lambda: Notification(DELETED, "/proc/ephemeral") in seen, "the lease expires", 15)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert await watcher.get_children("/proc") == ["durable"]


async def test_ephemerals_vanish_at_once_when_their_store_closes(
    stores: Callable[..., Awaitable[EtcdMetadataStore]],
):
    owner, other = await stores(), await stores()
    await owner.put("/owners/broker-1", b"me", ephemeral=True)
    await other.put("/owners/broker-2", b"you", ephemeral=True)
    got = await other.get("/owners/broker-1")
    assert got is not None and got.stat.ephemeral and not got.stat.created_by_self
    mine = await other.get("/owners/broker-2")
    assert mine is not None and mine.stat.created_by_self
    await owner.close()  # revokes the lease: no wait for the TTL
    assert await other.get_children("/owners") == ["broker-2"]


async def test_session_lost_when_the_lease_is_revoked_elsewhere(
    etcd_server: EtcdProcess, stores: Callable[..., Awaitable[EtcdMetadataStore]]
):
    """etcd's own verdict: a keep-alive answered with TTL 0 (here: another client revoked the lease, as an
    operator or an expiry would) is SESSION_LOST; a new lease follows at once, SESSION_REESTABLISHED."""
    store = await stores(session_ttl_s=2)
    events: list[SessionEvent] = []
    store.register_session_listener(events.append)
    await store.put("/leader", b"me", ephemeral=True)
    old_lease = store.lease_id
    host, port = etcd_server.endpoint.split(":")
    async with aetcd.Client(host, int(port), timeout=5) as client:
        await client.revoke_lease(old_lease)
    await eventually(lambda: SessionEvent.SESSION_REESTABLISHED in events, "the session is re-established")
    assert events == [SessionEvent.SESSION_LOST, SessionEvent.SESSION_REESTABLISHED]
    assert store.lease_id not in (None, old_lease)
    assert not await store.exists("/leader")  # the owner re-creates it
    assert (await store.put("/leader", b"me", -1, ephemeral=True)).ephemeral


async def test_session_lost_when_etcd_is_frozen_longer_than_the_ttl(own_etcd: EtcdProcess):
    """SIGSTOP freezes etcd's lease timers too, so etcd itself would not expire the lease: the store decides on
    its own clock (no keep-alive answered for a whole TTL, counted from the last answered one's sending, so no
    later than etcd could expire it). Once etcd answers again it revokes the old lease, whose ephemeral keys
    therefore vanish even though etcd never expired it, and grants a new one."""
    store = await EtcdMetadataStore.open(own_etcd.endpoint, session_ttl_s=2, operation_timeout_s=0.5)
    try:
        events: list[SessionEvent] = []
        store.register_session_listener(events.append)
        seen: list[Notification] = []
        store.register_listener(seen.append)
        await store.put("/leader", b"me", ephemeral=True)
        own_etcd.pause()
        try:
            await eventually(lambda: SessionEvent.SESSION_LOST in events, "the session is given up", 10)
            with pytest.raises(MetadataStoreError):
                await store.put("/other", b"", -1, ephemeral=True)
        finally:
            own_etcd.resume()
        await eventually(lambda: SessionEvent.SESSION_REESTABLISHED in events, "a new lease after resume", 15)
        assert events == [SessionEvent.CONNECTION_LOST, SessionEvent.SESSION_LOST, SessionEvent.RECONNECTED,
                          SessionEvent.SESSION_REESTABLISHED]  # fmt: skip
        assert not await store.exists("/leader")
        await store.put("/leader", b"me again", ephemeral=True)
        await eventually(lambda: seen.count(Notification(CREATED, "/leader")) == 2, "the watch still runs")
    finally:
        await store.close()


async def test_calls_fail_in_bounded_time_while_etcd_is_down_and_work_after_restart(own_etcd: EtcdProcess):
    store = await EtcdMetadataStore.open(own_etcd.endpoint, prefix="/c", operation_timeout_s=1.0)
    try:
        events: list[SessionEvent] = []
        store.register_session_listener(events.append)
        await store.put("/kept", b"1")
        await asyncio.to_thread(own_etcd.stop)
        calls = [lambda: store.get("/kept"), lambda: store.put("/kept", b"2"), lambda: store.get_children("/"),
                 lambda: store.multi([Put("/m", b"")]), lambda: store.delete_recursive("/kept")]  # fmt: skip
        for call in calls:
            started = time.monotonic()
            with pytest.raises(MetadataStoreUnavailableError, match=own_etcd.endpoint):
                await call()
            assert time.monotonic() - started < 3.0
        assert events[:1] == [SessionEvent.CONNECTION_LOST]
        await asyncio.to_thread(own_etcd.start)  # same ports, same data
        await eventually(
            lambda: answers(store), "calls work again after etcd restarted (no latched failure)", 15
        )
        assert await store.get("/kept") is not None
        assert SessionEvent.RECONNECTED in events
        seen: list[Notification] = []
        store.register_listener(seen.append)
        other = await EtcdMetadataStore.open(own_etcd.endpoint, prefix="/c")
        try:
            await other.put("/after", b"")
        finally:
            await other.close()
        await eventually(
            lambda: Notification(CREATED, "/after") in seen, "the watch resumed after the restart", 15
        )
    finally:
        await store.close()


async def test_calls_to_a_frozen_etcd_time_out(own_etcd: EtcdProcess):
    store = await EtcdMetadataStore.open(own_etcd.endpoint, operation_timeout_s=0.5)
    try:
        own_etcd.pause()
        try:
            started = time.monotonic()
            with pytest.raises(MetadataStoreUnavailableError, match="no answer"):
                await store.get("/x")
            assert time.monotonic() - started < 2.0
        finally:
            own_etcd.resume()
        await eventually(lambda: answers(store), "answers after resume")
        assert await store.get("/x") is None
    finally:
        await store.close()


async def test_endpoints_are_tried_in_turn(etcd_server: EtcdProcess):
    dead = dead_endpoint()
    started = time.monotonic()
    with pytest.raises(MetadataStoreUnavailableError, match=dead):
        await EtcdMetadataStore.open([dead], operation_timeout_s=1.0)
    assert time.monotonic() - started < 3.0
    store = await EtcdMetadataStore.open(f"{dead},{etcd_server.endpoint}", prefix=unique_prefix())
    try:
        await store.put("/via-second", b"")
        assert await store.get_children("/") == ["via-second"]
        assert store.endpoints == [dead, etcd_server.endpoint]
    finally:
        await store.close()


async def test_values_written_by_other_etcd_clients_and_etcd_limits(
    etcd_server: EtcdProcess, stores: Callable[..., Awaitable[EtcdMetadataStore]]
):
    store = await stores()
    host, port = etcd_server.endpoint.split(":")
    async with aetcd.Client(host, int(port), timeout=5) as client:
        await client.put(f"{store.prefix}/foreign".encode(), b"raw")
        await client.put(f"{store.prefix}/foreign".encode(), b"raw2")
    got = await store.get("/foreign")
    assert got is not None and got.value == b"raw2" and got.stat.version == 1
    assert got.stat.creation_time_ms == 0  # etcd keeps no times: unknown
    assert (await store.put("/foreign", b"ours", 1)).version == 2
    with pytest.raises(MetadataStoreError, match="too many operations") as refused:
        await store.multi([Put(f"/big/{i}", b"") for i in range(200)])  # etcd's --max-txn-ops is 128
    assert not isinstance(refused.value, MetadataStoreUnavailableError)
    assert await store.get_children("/") == ["foreign"]


async def test_concurrent_unconditional_puts_from_two_stores_all_count(
    stores: Callable[..., Awaitable[EtcdMetadataStore]],
):
    first, second = await stores(), await stores()
    await asyncio.gather(*(store.put("/hot", b"x") for store in (first, second) for _ in range(20)))
    got = await first.get("/hot")
    assert got is not None and got.stat.version == 39  # 40 puts: lost commits were retried, none dropped


async def test_prefixes_keep_clusters_apart(etcd_server: EtcdProcess, tmp_path: Path):
    a = await open_metadata_store(
        f"{etcd_server.url}/cluster-a{unique_prefix()}", default_sqlite_path=tmp_path / "x"
    )
    b = await open_metadata_store(
        f"{etcd_server.url}/cluster-b{unique_prefix()}", default_sqlite_path=tmp_path / "x"
    )
    try:
        await a.put("/tenants/t", b"a")
        assert await b.get_children("/") == [] and await b.get("/tenants/t") is None
        assert await a.get_children("/") == ["tenants"]
    finally:
        await a.close()
        await b.close()


async def test_open_metadata_store_urls(etcd_server: EtcdProcess, tmp_path: Path):
    default = tmp_path / "default" / "metadata.db"
    for url, kind in [("sqlite", SqliteMetadataStore), ("sqlite://", SqliteMetadataStore),
                      (f"sqlite://{tmp_path}/abs.db", SqliteMetadataStore), ("memory://", MemoryMetadataStore),
                      (f"{etcd_server.url}{unique_prefix()}?session_ttl_s=3", EtcdMetadataStore)]:  # fmt: skip
        store = await open_metadata_store(url, default_sqlite_path=default)
        try:
            assert isinstance(store, kind), url
            await store.put("/probe", b"")
            if isinstance(store, EtcdMetadataStore):
                assert store.session_ttl_s == 3
        finally:
            await store.close()
    assert default.exists() and (tmp_path / "abs.db").exists()
    for bad in ["zk://h:2181", "sqlite://relative/path", "memory://x", "etcd://", "etcd://h:notaport",
                "etcd://h:1/p?bogus=1", "etcd://h:1?session_ttl_s=0", "etcd://h:1,,h:2", "rocksdb"]:  # fmt: skip
        with pytest.raises(ValueError):
            await open_metadata_store(bad, default_sqlite_path=default)


def test_parse_etcd_url():
    parsed = parse_etcd_url("etcd://h1:2379,[::1]:2380,h3/quasar-cluster-a/?operation_timeout_s=0.5")
    assert parsed.endpoints == ["h1:2379", "[::1]:2380", "h3"]
    assert (parsed.prefix, parsed.session_ttl_s, parsed.operation_timeout_s) == ("/quasar-cluster-a", 10, 0.5)
    assert parse_etcd_url("etcd://h:1").prefix == "" and parse_etcd_url("etcd://h:1/").prefix == ""
    with pytest.raises(ValueError, match="non-empty segments"):
        parse_etcd_url("etcd://h:1/a//b")
