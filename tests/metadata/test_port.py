"""The MetadataStore port's contract, on every backend (memory, sqlite and etcd: see conftest.py)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quasar.metadata import (
    AlreadyExistsError,
    BadVersionError,
    Delete,
    InvalidArgumentError,
    InvalidPathError,
    MetadataStore,
    MetadataStoreClosedError,
    NotFoundError,
    Notification,
    NotificationType,
    Put,
    check_path,
    decode_json,
    decode_segment,
    encode_json,
    encode_segment,
)

from .conftest import Backend

CREATED, MODIFIED, DELETED, CHILDREN = (
    NotificationType.CREATED,
    NotificationType.MODIFIED,
    NotificationType.DELETED,
    NotificationType.CHILDREN_CHANGED,
)


async def settle() -> None:
    """Let notifications scheduled with call_soon / call_soon_threadsafe run."""
    for _ in range(5):
        await asyncio.sleep(0.01)


async def test_put_get_versions_and_times(store: MetadataStore):
    assert await store.get("/a/b") is None
    assert not await store.exists("/a/b")
    first = await store.put("/a/b", b"one")
    assert (first.path, first.version, first.ephemeral) == ("/a/b", 0, False)
    assert first.creation_time_ms == first.modification_time_ms > 0
    await asyncio.sleep(0.002)
    second = await store.put("/a/b", b"two")
    assert second.version == 1 and second.creation_time_ms == first.creation_time_ms
    assert second.modification_time_ms >= first.modification_time_ms
    got = await store.get("/a/b")
    assert got is not None and got.value == b"two" and got.stat == second
    assert await store.exists("/a/b")
    assert not await store.exists("/a")  # an intermediate "directory" holds no value


async def test_compare_and_set(store: MetadataStore):
    created = await store.put("/k", b"v0", -1)
    assert created.version == 0
    with pytest.raises(AlreadyExistsError):
        await store.put("/k", b"again", -1)
    assert (await store.put("/k", b"v1", 0)).version == 1
    with pytest.raises(BadVersionError) as lost:
        await store.put("/k", b"stale", 0)
    assert not isinstance(lost.value, AlreadyExistsError)
    with pytest.raises(BadVersionError):
        await store.put("/missing", b"x", 3)  # a version is expected: the path must exist
    got = await store.get("/k")
    assert got is not None and got.value == b"v1" and got.stat.version == 1
    assert await store.get("/missing") is None


async def test_concurrent_cas_increments_lose_nothing(store: MetadataStore):
    await store.put("/counter", encode_json(0))

    async def increment() -> None:
        for _ in range(50):
            current = await store.get("/counter")
            assert current is not None
            try:
                await store.put("/counter", encode_json(decode_json("/counter", current.value) + 1),
                                current.stat.version)  # fmt: skip
                return
            except BadVersionError:
                continue
        raise AssertionError("no increment won in 50 tries")

    await asyncio.gather(*(increment() for _ in range(8)))
    final = await store.get("/counter")
    assert final is not None and decode_json("/counter", final.value) == 8 and final.stat.version == 8


async def test_delete_with_and_without_version(store: MetadataStore):
    await store.put("/d", b"x")
    await store.put("/d", b"y")
    with pytest.raises(BadVersionError):
        await store.delete("/d", 0)
    assert await store.exists("/d")
    await store.delete("/d", 1)
    assert not await store.exists("/d")
    with pytest.raises(NotFoundError):
        await store.delete("/d")
    await store.put("/d", b"z")
    assert (await store.put("/d", b"z2")).version == 1  # versions restart after a delete
    await store.delete("/d")
    assert await store.get("/d") is None


async def test_children_include_intermediate_directories(store: MetadataStore):
    for path in ("/r/a", "/r/a/x/deep", "/r/a-b", "/r/a-b/y", "/r/b/only/below", "/r/c", "/rr/z", "/r!"):
        await store.put(path, b"")
    assert await store.get_children("/r") == ["a", "a-b", "b", "c"]
    assert await store.get_children("/r/a") == ["x"]
    assert await store.get_children("/r/b") == ["only"]
    assert await store.get_children("/r/c") == []
    assert await store.get_children("/nothing") == []
    assert await store.get_children("/") == ["r", "r!", "rr"]
    await store.delete("/r/a")
    assert await store.get_children("/r") == ["a", "a-b", "b", "c"]  # /r/a/x/deep keeps "a" listed
    await store.delete("/r/a/x/deep")
    assert await store.get_children("/r") == ["a-b", "b", "c"]


async def test_encoded_names_are_one_segment(store: MetadataStore):
    names = ["persistent://public/default/t", "a/b", "a%2Fb", "ünïcode ☃", "."]
    for name in names:
        await store.put(f"/ml/{encode_segment(name)}", name.encode())
    children = await store.get_children("/ml")
    assert sorted(decode_segment(child) for child in children) == sorted(names)
    assert len(children) == len(names)


async def test_delete_recursive(store: MetadataStore):
    for path in ("/t", "/t/a", "/t/a/b", "/t/c", "/t-sibling", "/t0"):
        await store.put(path, b"1")
    await store.delete_recursive("/t")
    for path in ("/t", "/t/a", "/t/a/b", "/t/c"):
        assert not await store.exists(path)
    assert await store.exists("/t-sibling") and await store.exists("/t0")
    await store.delete_recursive("/t")  # nothing there: no error
    assert await store.get_children("/") == ["t-sibling", "t0"]


async def test_multi_is_all_or_nothing(store: MetadataStore):
    await store.put("/m/a", b"a0")
    await store.put("/m/gone", b"g")
    with pytest.raises(BadVersionError):
        await store.multi([Put("/m/new", b"n"), Delete("/m/gone"), Put("/m/a", b"a1", 7)])
    assert await store.get_children("/m") == ["a", "gone"]
    with pytest.raises(NotFoundError):
        await store.multi([Put("/m/new", b"n"), Delete("/m/absent", 0)])
    assert not await store.exists("/m/new")
    results = await store.multi(
        [Put("/m/new", b"n", -1), Delete("/m/gone", 0), Delete("/m/absent"), Put("/m/a", b"a1", 0),
         Put("/m/a", b"a2", 1)]
    )  # fmt: skip
    assert [None if r is None else (r.path, r.version) for r in results] == [
        ("/m/new", 0), None, None, ("/m/a", 1), ("/m/a", 2)
    ]  # fmt: skip
    assert await store.get_children("/m") == ["a", "new"]
    got = await store.get("/m/a")
    assert got is not None and got.value == b"a2"
    assert await store.multi([]) == []


async def test_notifications(store: MetadataStore):
    seen: list[Notification] = []
    store.register_listener(seen.append)
    await store.put("/n/a", b"1")
    await store.put("/n/a", b"2")
    await store.multi([Put("/n/b", b"1"), Delete("/n/a")])
    await store.delete_recursive("/n")
    with pytest.raises(AlreadyExistsError):
        await store.multi([Put("/n/c", b""), Put("/n/c", b"", -1)])
    await settle()
    assert [(n.type, n.path) for n in seen] == [
        (CREATED, "/n/a"),
        (CHILDREN, "/n"),
        (MODIFIED, "/n/a"),
        (CREATED, "/n/b"),
        (CHILDREN, "/n"),
        (DELETED, "/n/a"),
        (CHILDREN, "/n"),
        (DELETED, "/n/b"),
        (CHILDREN, "/n"),
    ]  # the failed multi notified nothing


async def test_listener_errors_do_not_stop_others(store: MetadataStore):
    seen: list[str] = []

    def broken(_: Notification) -> None:
        raise RuntimeError("listener bug")

    store.register_listener(broken)
    store.register_listener(lambda n: seen.append(n.path))
    await store.put("/x", b"")
    await settle()
    assert seen == ["/x", "/"]


async def test_ephemeral_paths_go_with_the_session(backend: Backend, store: MetadataStore):
    stat = await store.put("/owners/broker-1", b"me", ephemeral=True)
    await store.put("/owners/durable", b"kept")
    assert stat.ephemeral
    got = await store.get("/owners/broker-1")
    assert got is not None and got.stat.ephemeral
    store = await backend.reopen(store)
    assert await store.get_children("/owners") == ["durable"]
    assert not await store.exists("/owners/broker-1")


async def test_durable_across_reopen(backend: Backend, store: MetadataStore):
    await store.multi([Put(f"/k/{i}", encode_json({"i": i})) for i in range(30)])
    await store.put("/k/3", encode_json("changed"))
    await store.delete("/k/7")
    store = await backend.reopen(store)
    children = await store.get_children("/k")
    assert len(children) == 29 and "7" not in children
    got = await store.get("/k/3")
    assert got is not None and decode_json("/k/3", got.value) == "changed" and got.stat.version == 1


async def test_closed_store_raises(store: MetadataStore):
    await store.put("/a", b"")
    await store.close()
    await store.close()  # idempotent
    for call in (store.get("/a"), store.exists("/a"), store.get_children("/"), store.put("/a", b""),
                 store.delete("/a"), store.delete_recursive("/a"), store.multi([Put("/b", b"")])):  # fmt: skip
        with pytest.raises(MetadataStoreClosedError):
            await call


@pytest.mark.parametrize("path", ["", "a", "a/b", "/a/", "//a", "/a//b", None, 5, b"/a"])
async def test_invalid_paths(store: MetadataStore, path: object):
    for call in (store.get, store.exists, store.get_children, store.delete, store.delete_recursive):
        with pytest.raises(InvalidPathError):
            await call(path)  # type: ignore[operator]
    with pytest.raises(InvalidPathError):
        await store.put(path, b"")  # type: ignore[arg-type]
    with pytest.raises(InvalidPathError):
        await store.multi([Put(path, b"")])  # type: ignore[arg-type]


async def test_invalid_arguments(store: MetadataStore):
    with pytest.raises(InvalidPathError):
        await store.put("/", b"root holds no value")
    for value in ("text", None, 5, {"a": 1}):
        with pytest.raises(InvalidArgumentError):
            await store.put("/v", value)  # type: ignore[arg-type]
    for version in (-2, 1.0, "0", True):
        with pytest.raises(InvalidArgumentError):
            await store.put("/v", b"", version)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await store.delete("/v", version)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await store.multi([("/v", b"")])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError):
        await store.multi("/v")  # type: ignore[arg-type]
    assert (await store.put("/v", bytearray(b"ok"))).version == 0  # bytes-like values are copied to bytes
    got = await store.get("/v")
    assert got is not None and got.value == b"ok" and type(got.value) is bytes
    assert await store.get_children("/") == ["v"]  # nothing of the refused calls was written


def test_json_and_segment_codecs():
    assert decode_json("/p", encode_json({"a": [1, 2.5, None, "x"]})) == {"a": [1, 2.5, None, "x"]}
    assert encode_json({"b": 1}) == b'{"b":1}'
    with pytest.raises(Exception, match="JSON"):
        encode_json(float("nan"))
    with pytest.raises(Exception, match="not valid JSON"):
        decode_json("/p", b"{not json")
    assert encode_segment("persistent://p/d/t") == "persistent%3A%2F%2Fp%2Fd%2Ft"
    assert decode_segment(encode_segment("100%/x")) == "100%/x"
    with pytest.raises(InvalidPathError):
        encode_segment("")


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(value=_json, name=st.text(min_size=1, max_size=30))
def test_codecs_round_trip(value: object, name: str):
    assert decode_json("/p", encode_json(value)) == value
    segment = encode_segment(name)
    assert "/" not in segment and decode_segment(segment) == name
    check_path("/ml/" + segment)
