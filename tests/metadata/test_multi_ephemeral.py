"""``Put(..., ephemeral=True)`` inside ``multi`` (the port's contract, on every backend): the path is bound to
the session exactly as ``put(..., ephemeral=True)`` binds it, in the same all-or-nothing transaction as the
other operations (what a group's leader key created together with the group's state needs)."""

from __future__ import annotations

import pytest

from quasar.metadata import (
    AlreadyExistsError,
    BadVersionError,
    InvalidArgumentError,
    MetadataStore,
    Put,
)

from .conftest import Backend


async def test_multi_puts_an_ephemeral_path_with_a_durable_one(backend: Backend, store: MetadataStore):
    leader, state = await store.multi(
        [Put("/g/leader", b"me", -1, ephemeral=True), Put("/g/state", b"s", -1)]
    )
    assert leader is not None and leader.ephemeral and leader.version == 0
    assert state is not None and not state.ephemeral
    got = await store.get("/g/leader")
    assert got is not None and got.stat.ephemeral and got.stat.created_by_self
    store = await backend.reopen(store)  # the session ends: only the ephemeral path goes
    assert await store.get_children("/g") == ["state"]


async def test_a_failed_multi_leaves_no_ephemeral_path(backend: Backend, store: MetadataStore):
    await store.put("/g/state", b"s")
    with pytest.raises(BadVersionError):
        await store.multi([Put("/g/leader", b"me", -1, ephemeral=True), Put("/g/state", b"t", 5)])
    assert not await store.exists("/g/leader")
    await store.put("/g/leader", b"other", ephemeral=True)
    with pytest.raises(AlreadyExistsError):
        await store.multi([Put("/g/state", b"t", 0), Put("/g/leader", b"me", -1, ephemeral=True)])
    got = await store.get("/g/state")
    assert got is not None and got.value == b"s"


async def test_multi_rewrites_an_ephemeral_path_under_a_version_check(backend: Backend, store: MetadataStore):
    """A version-checked rewrite in the same transaction as another put: "the leader key is still the one I
    read" (the rewrite keeps the path ephemeral, so it still goes with the session)."""
    await store.multi([Put("/g/leader", b"me", -1, ephemeral=True), Put("/g/state", b"s", -1)])
    leader, _ = await store.multi([Put("/g/leader", b"me", 0, ephemeral=True), Put("/g/state", b"t", 0)])
    assert leader is not None and leader.version == 1 and leader.ephemeral
    with pytest.raises(BadVersionError):  # the version moved on: nothing of the multi is applied
        await store.multi([Put("/g/leader", b"me", 0, ephemeral=True), Put("/g/state", b"u", 1)])
    got = await store.get("/g/state")
    assert got is not None and got.value == b"t"
    store = await backend.reopen(store)
    assert await store.get_children("/g") == ["state"]


async def test_ephemeral_in_multi_is_a_bool(store: MetadataStore):
    with pytest.raises(InvalidArgumentError):
        await store.multi([Put("/g/leader", b"", ephemeral="yes")])  # type: ignore[arg-type]
