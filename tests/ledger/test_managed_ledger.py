"""ManagedLedger: add/read across rollover, last-confirmed visibility, failures, recovery."""

import asyncio

import pytest

from quasar.ledger.config import ManagedLedgerConfig
from quasar.ledger.cursor_store import CursorStore
from quasar.ledger.errors import (
    InvalidEntryError,
    ManagedLedgerAlreadyClosedError,
    ManagedLedgerError,
    ManagedLedgerFencedError,
    ManagedLedgerFlushTimeoutError,
    ManagedLedgerStorageError,
    ManagedLedgerTerminatedError,
    MetadataError,
    TooManyRequestsError,
)
from quasar.ledger.factory import ManagedLedgerFactory
from quasar.ledger.ledger_id_allocator import LedgerIdAllocator
from quasar.ledger.managed_ledger import ManagedLedger
from quasar.ledger.paths import ledger_table_path
from quasar.ledger.position import EARLIEST, Position
from quasar.metadata.port import encode_json
from quasar.testing.fake_store import FakeMessageStore, FakeMetadataStore, FakeStoreError, PutStatus
from tests.ledger.conftest import stored_json

TOPIC = "persistent://public/default/t1"


async def add_all(ledger, count, prefix=b"m"):
    return [await ledger.add_entry(prefix + str(i).encode()) for i in range(count)]


async def test_add_and_read_across_rollover(any_env):
    ledger = await any_env.factory.open(TOPIC)
    positions = await add_all(ledger, 8)
    ids = sorted({p.ledger_id for p in positions})
    assert len(ids) == 3  # 3 + 3 + 2 entries
    assert [p.entry_id for p in positions] == [0, 1, 2, 0, 1, 2, 0, 1]
    assert [p.ledger_id for p in positions] == [ids[0]] * 3 + [ids[1]] * 3 + [ids[2]] * 2
    assert positions == sorted(positions)
    assert ledger.last_confirmed_entry == positions[-1]
    assert ledger.number_of_entries == 8 and ledger.total_size == sum(len(f"m{i}") for i in range(8))

    entries = ledger.read_entries(ledger.first_position, 100)
    assert [e.position for e in entries] == positions
    assert [bytes(e.data) for e in entries] == [b"m%d" % i for i in range(8)]
    assert isinstance(entries[0].data, memoryview)
    assert [e.queue_offset for e in entries] == list(range(8))

    # a position past a ledger's end reads from the next ledger's first entry
    assert [e.position for e in ledger.read_entries(Position(ids[0], 3), 2)] == positions[3:5]
    assert ledger.next_valid_position(positions[2]) == positions[3]
    assert ledger.previous_position(positions[3]) == positions[2]
    assert ledger.next_valid_position(positions[-1]) == Position(ids[2], 2)
    assert bytes(ledger.get_entry(positions[4]).data) == b"m4"
    assert ledger.get_entry(Position(ids[0], 3)) is None
    assert ledger.get_entry(Position(ids[2], 2)) is None
    assert [r.entries for r in ledger.ledgers[:2]] == [3, 3]


async def test_concurrent_adds_get_positions_in_call_order(env):
    ledger = await env.factory.open(TOPIC)
    env.store.delay(0.01)
    positions = await asyncio.gather(*(ledger.add_entry(b"x%d" % i) for i in range(7)))
    assert positions == sorted(positions)
    assert [p.entry_id for p in positions] == [0, 1, 2, 0, 1, 2, 0]
    assert [bytes(e.data) for e in ledger.read_entries(EARLIEST, 10)] == [b"x%d" % i for i in range(7)]


async def test_last_confirmed_never_exposes_unflushed_entries(env):
    ledger = await env.factory.open(TOPIC)
    first = await ledger.add_entry(b"flushed")
    cursor = await ledger.open_cursor("sub", "latest")
    reader = ledger.new_non_durable_cursor(EARLIEST)
    wakeups = []
    ledger.add_entries_listener(lambda: wakeups.append(ledger.last_confirmed_entry))

    env.store.delay(0.3)
    pending = [asyncio.ensure_future(ledger.add_entry(b"slow%d" % i)) for i in range(2)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert env.store.max_queue_offset(TOPIC, 0) == 3  # written to the store...
    assert ledger.last_confirmed_entry == first  # ...but not confirmed
    assert [bytes(e.data) for e in ledger.read_entries(EARLIEST, 10)] == [b"flushed"]
    assert cursor.read_entries(10) == [] and not cursor.has_more_entries()
    assert [bytes(e.data) for e in reader.read_entries(10)] == [b"flushed"]
    assert ledger.get_entry(Position(first.ledger_id, 1)) is None
    assert cursor.number_of_entries_in_backlog == 0
    assert wakeups == []

    positions = await asyncio.gather(*pending)
    await asyncio.sleep(0)
    assert ledger.last_confirmed_entry == positions[-1]
    assert wakeups and wakeups[-1] == positions[-1]
    assert [bytes(e.data) for e in cursor.read_entries(10)] == [b"slow0", b"slow1"]
    assert cursor.number_of_entries_in_backlog == 2


async def test_listener_fires_once_per_flush_round(env):
    ledger = await env.factory.open(TOPIC)
    calls = []
    ledger.add_entries_listener(lambda: calls.append(1))
    env.store.pause_flush()
    pending = [asyncio.ensure_future(ledger.add_entry(b"e")) for _ in range(5)]
    await asyncio.sleep(0)
    env.store.resume_flush()
    await asyncio.gather(*pending)
    for _ in range(3):
        await asyncio.sleep(0)
    assert calls == [1]
    ledger.remove_entries_listener(calls.append)  # not registered: no error


@pytest.mark.parametrize(
    ("status", "error", "written"),
    [
        (PutStatus.SERVICE_NOT_AVAILABLE, ManagedLedgerStorageError, False),
        (PutStatus.CREATE_MAPPED_FILE_FAILED, ManagedLedgerStorageError, False),
        (PutStatus.OS_PAGE_CACHE_BUSY, TooManyRequestsError, False),
        (PutStatus.PROPERTIES_SIZE_EXCEEDED, InvalidEntryError, False),
        (PutStatus.FLUSH_DISK_TIMEOUT, ManagedLedgerFlushTimeoutError, True),
        (PutStatus.UNKNOWN_ERROR, ManagedLedgerStorageError, True),
    ],
)
async def test_put_failures_raise_mapped_errors_and_do_not_confirm(env, status, error, written):
    ledger = await env.factory.open(TOPIC)
    good = await ledger.add_entry(b"ok")
    env.store.fail_now(status)
    with pytest.raises(error) as info:
        await ledger.add_entry(b"bad")
    assert info.value.status == status.name
    assert ledger.last_confirmed_entry == good
    assert [bytes(e.data) for e in ledger.read_entries(EARLIEST, 10)] == [b"ok"]
    assert env.store.max_queue_offset(TOPIC, 0) == (2 if written else 1)
    # the ledger keeps working; a later flush covers the failed entry too (it is on disk: flush is a prefix)
    after = await ledger.add_entry(b"next")
    assert ledger.last_confirmed_entry == after
    assert after.entry_id == (2 if written else 1)


async def test_fail_after_and_too_large_entries(env):
    ledger = await env.factory.open(TOPIC)
    env.store.fail_after(2, PutStatus.SERVICE_NOT_AVAILABLE)
    await ledger.add_entry(b"a")
    await ledger.add_entry(b"b")
    with pytest.raises(ManagedLedgerStorageError):
        await ledger.add_entry(b"c")
    env.store.max_message_size = 10
    with pytest.raises(InvalidEntryError):
        await ledger.add_entry(b"y" * 11)
    assert ledger.number_of_entries == 2


async def test_ledger_row_is_durable_before_the_first_receipt_of_a_ledger(env):
    ledger = await env.factory.open(TOPIC)
    first = await add_all(ledger, 3)
    env.metadata.fail_writes(1)  # the new ledger's row cannot be written
    with pytest.raises(ManagedLedgerFencedError):
        await ledger.add_entry(b"in-new-ledger")
    assert ledger.is_fenced
    assert ledger.last_confirmed_entry == first[-1]  # flushed, but its ledger is not durable
    with pytest.raises(ManagedLedgerFencedError):
        await ledger.add_entry(b"refused")
    # reopening from durable state: the unreceipted entry falls into the last durable ledger
    reopened = await env.factory.open(TOPIC)
    assert reopened is not ledger
    assert [r.ledger_id for r in reopened.ledgers] == [first[0].ledger_id]
    assert reopened.last_confirmed_entry == Position(first[0].ledger_id, 3)


async def test_ledger_table_and_positions_survive_reopen(any_env):
    ledger = await any_env.factory.open(TOPIC)
    positions = await add_all(ledger, 5)
    table = [(r.ledger_id, r.first_queue_offset) for r in ledger.ledgers]
    factory = await any_env.restart()
    assert TOPIC in factory.names()
    reopened = await factory.open(TOPIC)
    assert [(r.ledger_id, r.first_queue_offset) for r in reopened.ledgers] == table
    assert reopened.last_confirmed_entry == positions[-1]
    assert [e.position for e in reopened.read_entries(EARLIEST, 10)] == positions
    assert [bytes(e.data) for e in reopened.read_entries(EARLIEST, 10)] == [b"m%d" % i for i in range(5)]
    assert reopened.total_size == sum(len(b"m%d" % i) for i in range(5))
    # a reopened managed ledger writes into a new ledger (Pulsar opens a new ledger on every load)
    new = await reopened.add_entry(b"after")
    assert new.ledger_id > positions[-1].ledger_id and new.entry_id == 0
    assert len({r.ledger_id for r in reopened.ledgers}) == len(reopened.ledgers)


async def test_crash_recovery_drops_unwritten_ledgers_and_keeps_receipted_positions():
    store, metadata = FakeMessageStore(), FakeMetadataStore()
    config = ManagedLedgerConfig(max_entries_per_ledger=2, min_ledger_rollover_time_ms=0)
    ledger = await ManagedLedger.open(TOPIC, store, metadata, config, LedgerIdAllocator(metadata))
    receipted = [await ledger.add_entry(b"r%d" % i) for i in range(3)]  # ledger A: 0,1; ledger B: 0
    store.pause_flush()
    pending = [asyncio.ensure_future(ledger.add_entry(b"lost%d" % i)) for i in range(3)]  # B:1, C:0, C:1
    for _ in range(5):
        await asyncio.sleep(0)  # the new ledger rows are written; the entries' flushes stay held
    assert len((await stored_json(metadata, ledger_table_path(TOPIC)))["ledgers"]) == 3  # C's row is durable
    store.crash()  # the unflushed entries vanish
    for task in pending:
        task.cancel()
    recovered = await ManagedLedger.open(TOPIC, store, metadata, config, LedgerIdAllocator(metadata))
    assert [r.ledger_id for r in recovered.ledgers] == sorted({p.ledger_id for p in receipted})
    assert [e.position for e in recovered.read_entries(EARLIEST, 10)] == receipted
    assert recovered.last_confirmed_entry == receipted[-1]
    again = await recovered.add_entry(b"again")
    assert again.ledger_id > receipted[-1].ledger_id
    assert [bytes(e.data) for e in recovered.read_entries(EARLIEST, 10)] == [b"r0", b"r1", b"r2", b"again"]


async def test_rollover_waits_for_the_minimum_rollover_time():
    now = [1_000_000]
    store, metadata = FakeMessageStore(), FakeMetadataStore()
    config = ManagedLedgerConfig(
        max_entries_per_ledger=2, min_ledger_rollover_time_ms=60_000, max_ledger_rollover_time_ms=600_000
    )
    ledger = await ManagedLedger.open(
        TOPIC, store, metadata, config, LedgerIdAllocator(metadata), clock_ms=lambda: now[0]
    )
    positions = [await ledger.add_entry(b"e") for _ in range(4)]
    assert len({p.ledger_id for p in positions}) == 1  # full, but younger than the minimum
    now[0] += 60_001
    rolled = await ledger.add_entry(b"e")
    assert rolled.ledger_id > positions[0].ledger_id and rolled.entry_id == 0
    now[0] += 600_000  # max rollover time reached with a single entry
    aged = await ledger.add_entry(b"e")
    assert aged.ledger_id > rolled.ledger_id


async def test_size_based_rollover():
    store, metadata = FakeMessageStore(), FakeMetadataStore()
    config = ManagedLedgerConfig(max_size_per_ledger_bytes=10, min_ledger_rollover_time_ms=0)
    ledger = await ManagedLedger.open(TOPIC, store, metadata, config, LedgerIdAllocator(metadata))
    positions = [await ledger.add_entry(b"12345") for _ in range(3)]
    assert [p.entry_id for p in positions] == [0, 1, 0]
    assert [r.size_bytes for r in ledger.ledgers] == [10, None]


async def test_ledger_ids_are_unique_across_ledgers_and_restarts(env):
    a = await env.factory.open("a")
    b = await env.factory.open("b")
    ids = [p.ledger_id for p in await add_all(a, 4)] + [p.ledger_id for p in await add_all(b, 4)]
    factory = await env.restart()
    c = await factory.open("c")
    ids.append(c.current_ledger_id)
    assert len(set(ids)) == 5 and max(ids) == c.current_ledger_id


async def test_find_newest_matching_is_a_binary_search(env):
    ledger = await env.factory.open(TOPIC)
    positions = [await ledger.add_entry(b"%03d" % i) for i in range(10)]
    assert ledger.find_newest_matching(lambda e: int(bytes(e.data)) < 7) == positions[6]
    assert ledger.find_newest_matching(lambda e: False) is None
    assert ledger.find_newest_matching(lambda e: True) == positions[-1]


async def test_closed_ledger_refuses_writes(env):
    ledger = await env.factory.open(TOPIC)
    await ledger.add_entry(b"x")
    await ledger.close()
    with pytest.raises(ManagedLedgerAlreadyClosedError):
        await ledger.add_entry(b"y")
    assert await env.factory.open(TOPIC) is not ledger  # reopened from durable state
    await env.factory.close()
    with pytest.raises(ManagedLedgerAlreadyClosedError):
        await env.factory.open(TOPIC)


async def test_retention_removed_head_is_skipped(env):
    ledger = await env.factory.open(TOPIC)
    positions = await add_all(ledger, 5)
    env.store.remove_before(TOPIC, 0, 2)
    assert ledger.first_position == positions[2]
    assert [e.position for e in ledger.read_entries(EARLIEST, 10)] == positions[2:]
    assert ledger.number_of_entries == 3
    assert ledger.get_entry(positions[0]) is None


async def test_factory_loads_names_at_start_and_names_are_encoded():
    metadata = FakeMetadataStore()
    table = {"ledgers": [{"ledger_id": 1, "first_queue_offset": 0, "created_ms": 0}]}
    await metadata.put(ledger_table_path("persistent://t/n/x"), encode_json(table))
    factory = ManagedLedgerFactory(FakeMessageStore(), metadata)
    with pytest.raises(ManagedLedgerError, match="not started"):
        await factory.open("y")
    await factory.start()
    assert factory.names() == ["persistent://t/n/x"]
    await factory.open("y/z")
    assert factory.names() == ["persistent://t/n/x", "y/z"]
    assert metadata.keys("/managed-ledgers") == [
        "/managed-ledgers/persistent%3A%2F%2Ft%2Fn%2Fx",
        "/managed-ledgers/y%2Fz",
    ]
    await factory.close()


async def test_concurrent_opens_share_one_open(env):
    ledgers = await asyncio.gather(*(env.factory.open("shared") for _ in range(5)))
    assert all(ledger is ledgers[0] for ledger in ledgers)
    writes = env.metadata.write_count
    cursors = await asyncio.gather(*(ledgers[0].open_cursor("sub", "earliest") for _ in range(5)))
    assert all(cursor is cursors[0] for cursor in cursors)
    assert env.metadata.write_count == writes + 1  # one write of the new cursor's state for all callers


class DryAllocator(LedgerIdAllocator):
    """An allocator whose reserved ids can be withheld, as when a background refill has not landed yet."""

    dry = False

    def allocate(self):
        return None if self.dry else super().allocate()


async def test_rollover_without_a_reserved_ledger_id_happens_at_a_later_add():
    store, metadata = FakeMessageStore(), FakeMetadataStore()
    config = ManagedLedgerConfig(max_entries_per_ledger=2, min_ledger_rollover_time_ms=0)
    allocator = DryAllocator(metadata)
    ledger = await ManagedLedger.open(TOPIC, store, metadata, config, allocator)
    first = [await ledger.add_entry(b"a") for _ in range(2)]
    allocator.dry = True  # the ledger is full, but no id is at hand: the add must not wait for one
    late = [ledger.add_entry_future(b"b") for _ in range(2)]
    assert [p.ledger_id for p in await asyncio.gather(*late)] == [first[0].ledger_id] * 2
    allocator.dry = False
    rolled = await ledger.add_entry(b"c")
    assert rolled.ledger_id > first[0].ledger_id and rolled.entry_id == 0
    assert [r.entries for r in ledger.ledgers] == [4, None]
    await ledger.close()
    await allocator.close()


async def test_metadata_failures_surface_as_metadata_error_and_are_not_cached(env):
    env.metadata.fail_writes(1)  # the new ledger's table cannot be written
    with pytest.raises(MetadataError) as info:
        await env.factory.open("new")
    assert isinstance(info.value.__cause__, FakeStoreError)
    ledger = await env.factory.open("new")
    assert "new" in env.factory.names()
    env.metadata.fail_writes(1)  # the new cursor's state cannot be written
    with pytest.raises(MetadataError):
        await ledger.open_cursor("sub")
    assert "sub" not in ledger.cursors
    assert (await ledger.open_cursor("sub")).name == "sub"
    with pytest.raises(ValueError):
        await ledger.open_cursor("")


async def test_a_cancelled_caller_does_not_cancel_a_shared_open(env):
    ledger = await env.factory.open(TOPIC)
    first = asyncio.ensure_future(ledger.open_cursor("sub"))
    second = asyncio.ensure_future(ledger.open_cursor("sub"))
    await asyncio.sleep(0)
    first.cancel()
    cursor = await second
    assert ledger.cursors["sub"] is cursor
    await ledger.close()
    with pytest.raises(ManagedLedgerAlreadyClosedError):
        await ledger.open_cursor("other")


async def test_deleting_a_cursor_is_not_undone_by_a_write_in_flight(env):
    ledger = await env.factory.open(TOPIC)
    positions = await add_all(ledger, 3)
    cursor = await ledger.open_cursor("sub", "earliest")
    cursor.mark_delete(positions[0])
    writing = asyncio.ensure_future(cursor.flush())
    await asyncio.sleep(0)  # the first write is in flight and holds the cursor's persist lock
    cursor.mark_delete(positions[1])  # dirty again
    await ledger.delete_cursor("sub")  # waits for the write in flight, then deletes
    assert writing.done()
    await cursor.flush()  # a late flush (e.g. the background flusher's round) writes nothing
    assert await stored_json(env.metadata, CursorStore(env.metadata, TOPIC).path("sub")) is None


async def test_add_entry_callback_answers_in_order_after_the_flush_never_inline(any_env):
    ledger = await any_env.factory.open(TOPIC)
    answers: list[tuple[Position | None, ManagedLedgerError | None]] = []
    for i in range(20):
        ledger.add_entry_callback(b"e%d" % i, lambda position, error: answers.append((position, error)))
    assert answers == []  # nothing before the flush, nothing inline
    await ledger.wait_idle()
    assert [error for _, error in answers] == [None] * 20
    positions = [position for position, _ in answers]
    assert positions == sorted(positions) and len(set(positions)) == 20
    assert ledger.last_confirmed_entry == positions[-1]
    await ledger.close()
    ledger.add_entry_callback(b"late", lambda position, error: answers.append((position, error)))
    assert len(answers) == 20  # the refusal comes on a later loop iteration too
    await asyncio.sleep(0)
    assert answers[-1][0] is None and isinstance(answers[-1][1], ManagedLedgerAlreadyClosedError)


async def test_close_waits_for_callback_adds_in_flight():
    store, metadata = FakeMessageStore(), FakeMetadataStore()
    allocator = LedgerIdAllocator(metadata)
    ledger = await ManagedLedger.open(TOPIC, store, metadata, ManagedLedgerConfig(), allocator)
    store.pause_flush()
    answers: list[ManagedLedgerError | None] = []
    ledger.add_entry_callback(b"x", lambda _position, error: answers.append(error))
    closing = asyncio.ensure_future(ledger.close())
    await asyncio.sleep(0.01)
    assert not closing.done() and answers == []
    store.resume_flush()
    await closing
    assert answers == [None]
    await allocator.close()


async def test_terminate_refuses_new_entries_for_good_and_survives_reopen(any_env):
    ledger = await any_env.factory.open(TOPIC)
    positions = await add_all(ledger, 3)
    in_flight = asyncio.ensure_future(ledger.add_entry(b"in flight"))
    await asyncio.sleep(0)  # the add has been put; termination waits for its flush
    assert await ledger.terminate() == (await in_flight)
    assert ledger.is_terminated and ledger.last_confirmed_entry == in_flight.result()
    with pytest.raises(ManagedLedgerTerminatedError):
        await ledger.add_entry(b"refused")
    assert await ledger.terminate() == in_flight.result()  # idempotent
    assert [e.position for e in ledger.read_entries(EARLIEST, 10)] == [*positions, in_flight.result()]
    factory = await any_env.restart()
    reopened = await factory.open(TOPIC)
    assert reopened.is_terminated and reopened.last_confirmed_entry == in_flight.result()
    with pytest.raises(ManagedLedgerTerminatedError):
        await reopened.add_entry(b"still refused")


async def test_terminate_of_an_empty_ledger_answers_entry_minus_one(env):
    ledger = await env.factory.open(TOPIC)
    last = await ledger.terminate()
    assert last.entry_id == -1 and last.ledger_id == ledger.ledgers[0].ledger_id
    assert (await stored_json(env.metadata, ledger_table_path(TOPIC)))["terminated"] is True
