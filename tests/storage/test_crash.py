"""SIGKILL a process that appends with put_and_wait: every confirmed record must survive, intact."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from .conftest import open_store, run_writer_until_killed

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from quasar.storage import MessageStore, StoreConfig

    def body(i):
        return f"crash-{i:06d}|".encode() * (1 + i % 9)

    async def main(root):
        store = MessageStore(StoreConfig(root_dir=Path(root), commit_log_file_size=8192,
                                         consume_queue_file_size=CQ_SIZE, flush_consume_queue_interval_ms=20,
                                         flush_consume_queue_thorough_interval_ms=50))
        store.open()
        await store.start()
        print("ready", flush=True)
        i = 0
        while True:
            batch = [store.put_and_wait("crash/topic", n % 3, body(n)) for n in range(i, i + 8)]
            for n, result in zip(range(i, i + 8), await asyncio.gather(*batch)):
                assert result.status.name == "PUT_OK", result
                print(n, result.queue_offset, result.commit_log_offset, result.wrote_bytes, flush=True)
            i += 8

    asyncio.run(main(sys.argv[1]))
    """
)


def body(i: int) -> bytes:
    return f"crash-{i:06d}|".encode() * (1 + i % 9)


@pytest.mark.parametrize(
    ("cq_size", "confirmations"),
    # 20 units per file; 3,000 units per file, reserved in growing steps (4 KiB, 8 KiB, 16 KiB: ~500 units
    # per queue cross two of them)
    [(400, 400), (60_000, 1_500)],
)
def test_sigkill_loses_no_confirmed_record(tmp_path: Path, cq_size: int, confirmations: int):
    root = tmp_path / "store"
    script = WRITER.replace("CQ_SIZE", str(cq_size))
    confirmed = run_writer_until_killed(tmp_path, script, root, confirmations)

    assert (root / "abort").exists()
    assert len(list((root / "commitlog").iterdir())) > 3  # several segments were written
    store = open_store(root, commit_log_file_size=8192, consume_queue_file_size=cq_size)
    assert store.last_exit_ok is False
    for n, queue_offset, commit_log_offset, size in confirmed:
        message = store.get_by_offset(commit_log_offset, size)
        assert bytes(message.body) == body(n)
        assert message.queue_offset == queue_offset
        by_queue = store.get("crash/topic", n % 3, queue_offset, 1)
        assert by_queue.messages[0].commit_log_offset == commit_log_offset
    for queue_id in range(3):  # consume queues are continuous and point at whole records
        result = store.get("crash/topic", queue_id, 0, 100_000, max_bytes=1 << 30)
        assert [m.queue_offset for m in result.messages] == list(
            range(store.max_queue_offset("crash/topic", queue_id))
        )
    store.close_sync()
