"""LedgerIdAllocator: blocks reserved with compare-and-set before use, refilled in the background, never
waiting in ``allocate`` and never handing out an id twice (across restarts and concurrent allocators)."""

import asyncio

import pytest

from quasar.ledger.errors import MetadataError
from quasar.ledger.ledger_id_allocator import LedgerIdAllocator
from quasar.ledger.paths import LEDGER_ID_COUNTER_PATH
from quasar.metadata.port import encode_json
from quasar.testing.fake_store import FakeMetadataStore
from tests.ledger.conftest import stored_json


async def settle():
    for _ in range(10):
        await asyncio.sleep(0)


async def test_blocks_are_reserved_before_use_and_refilled_in_the_background():
    metadata = FakeMetadataStore()
    allocator = LedgerIdAllocator(metadata, block_size=4)
    await allocator.start()
    assert await stored_json(metadata, LEDGER_ID_COUNTER_PATH) == 5  # [1, 5) reserved before any id is used
    assert [allocator.allocate(), allocator.allocate()] == [1, 2]  # half used: the refill starts
    assert [allocator.allocate(), allocator.allocate()] == [3, 4]
    assert allocator.allocate() is None  # the refill has not landed: no waiting, the caller retries later
    await settle()
    # the block ran out before the refill landed: that refill (and the next ones) reserve 4x as many ids
    assert await stored_json(metadata, LEDGER_ID_COUNTER_PATH) == 5 + 16
    assert allocator.allocate() == 5
    await allocator.close()


async def test_blocks_grow_when_a_burst_of_rollovers_runs_them_out():
    # after a restart every loaded topic's first publish starts a new ledger: thousands of ids at once
    metadata = FakeMetadataStore()
    allocator = LedgerIdAllocator(metadata, block_size=100)
    await allocator.start()
    delayed = 0
    for _ in range(50):  # 50 metadata round trips, 200 rollovers asked within each
        delayed += sum(allocator.allocate() is None for _ in range(200))
        await settle()
    assert delayed <= 200  # fixed blocks of 100 would delay about half of them: ~5,000
    await allocator.close()


async def test_ids_are_never_reused_after_a_restart_or_by_concurrent_allocators():
    metadata = FakeMetadataStore()
    first = LedgerIdAllocator(metadata, block_size=3)
    await first.start()
    assert first.allocate() == 1
    await first.close()  # e.g. a crash: the rest of the block is a gap
    second, third = LedgerIdAllocator(metadata, block_size=3), LedgerIdAllocator(metadata, block_size=3)
    await asyncio.gather(second.start(), third.start())  # both read the same version: one CAS retries
    ids = [second.allocate(), second.allocate(), third.allocate(), third.allocate()]
    assert None not in ids and len(set(ids)) == 4 and min(ids) >= 4
    await asyncio.gather(second.close(), third.close())


async def test_allocate_async_waits_for_a_reservation():
    metadata = FakeMetadataStore()
    allocator = LedgerIdAllocator(metadata, block_size=1)
    await allocator.start()
    assert allocator.allocate() == 1
    assert allocator.allocate() is None
    assert await allocator.allocate_async() == 2
    await allocator.close()


async def test_failures_and_a_malformed_counter_raise_metadata_error():
    metadata = FakeMetadataStore()
    metadata.fail_writes(1)
    with pytest.raises(MetadataError):
        await LedgerIdAllocator(metadata).start()
    await metadata.put(LEDGER_ID_COUNTER_PATH, encode_json("junk"))
    with pytest.raises(MetadataError, match="malformed"):
        await LedgerIdAllocator(metadata).start()
    with pytest.raises(ValueError):
        LedgerIdAllocator(metadata, block_size=0)


async def test_a_failed_refill_is_logged_and_allocate_keeps_returning_none(caplog):
    metadata = FakeMetadataStore()
    allocator = LedgerIdAllocator(metadata, block_size=2)
    await allocator.start()
    metadata.fail_writes(1)
    assert allocator.allocate() == 1  # starts the refill, which fails
    await settle()
    assert "cannot reserve ledger ids" in caplog.text
    assert allocator.allocate() == 2
    assert allocator.allocate() is None  # no retry storm: the next attempt waits a while
    assert await allocator.allocate_async() == 3  # an explicit wait reserves at once
    await allocator.close()
