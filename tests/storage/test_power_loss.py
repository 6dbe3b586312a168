"""Power-loss tests: the broker's data directory on :mod:`tests.storage.lazyfs`, a FUSE file system that keeps
written data in memory until it is fsynced and drops the rest at a simulated power cut (Jepsen's LazyFS
approach). A SIGKILL alone cannot catch a receipt sent before its entry reached the disk, because the page
cache outlives the killed process; here it does not.

One cut: SIGSTOP the broker (and wait until every thread is stopped) -> ``cut`` the file system (unsynced
data dropped, every later write ignored) -> take the receipts the client has seen -> SIGKILL the broker ->
unmount -> mount a fresh lazyfs process over the durable state -> restart the broker on it -> read the topic
from the earliest position and check every receipted message (sequence number, payload, message id).

- SYNC_FLUSH (the default): no receipted message may be lost, over ten cuts; every message read back is in
  order and read once.
- ASYNC_FLUSH: a receipt is sent before the flush, so cuts must lose some; the test asserts that they do,
  which proves the set-up can see a loss.
- SYNC_FLUSH with ``lazyfs --posix-sizes`` (a new file's size is durable only through its own fsync, POSIX's
  letter): no receipted message lost either, and the broker restarts every time (it found a new index file
  whose directory entry was fsynced before its size; ``IndexFile`` now fsyncs a file it creates).

A receipted message is one whose send callback reported success before the cut: the receipts are taken
when the file system answers ``cut`` (a receipt still on the wire then is left out, although the broker sent
it after its fsync). Lost = a receipted sequence number missing after a restart, or read back with another
payload or message id.

The first two tests exercise the ``lazyfs`` file system alone: data and entries survive a cut only when
synced. Skipped (with the reason) without /dev/fuse, ``fusermount3`` (Debian ``fuse3``), ``mfusepy`` or
``pulsar-client``. ``QUASAR_POWER_SEED`` replays a run (the seed is in every assertion message);
``QUASAR_LAZYFS_POSIX_SIZES=1`` runs the SYNC and ASYNC tests with ``--posix-sizes`` too.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from quasar.testing.broker_process import BrokerProcess
from tests.storage.lazyfs_process import LazyFSProcess, unavailable_reason

_UNAVAILABLE = unavailable_reason()
pytestmark = pytest.mark.skipif(_UNAVAILABLE is not None, reason=_UNAVAILABLE or "")

TOPIC = "persistent://public/default/power-loss"
SETTINGS = """
commit_log_file_size = 262144
mapped_file_size_consume_queue = 2000
max_hash_slot_num = 1024
max_index_num = 4096
managed_ledger_max_entries_per_ledger = 400
managed_ledger_min_ledger_rollover_time_ms = 0
"""
"""Small commit log segments, consume queue files and ledgers, so that rounds roll files (new files, directory
fsyncs, pre-allocation) and ledgers (metadata writes) while the cuts happen."""

MAX_MESSAGES_PER_ROUND = 4000
"""A bound on each round's publishing besides its time (the reads after every restart grow with the total)."""
POSIX_SIZES = os.environ.get("QUASAR_LAZYFS_POSIX_SIZES") == "1"
"""Run the broker tests with ``lazyfs.py --posix-sizes`` (see its docstring)."""
MAX_IN_FLIGHT = 200
"""Messages sent and not yet answered, at most: always some in flight when the power goes."""


# -- the file system itself -------------------------------------------------------------------------------------


@pytest.fixture
def lazyfs(tmp_path: Path) -> Iterator[LazyFSProcess]:
    fs = LazyFSProcess(tmp_path / "backing", tmp_path / "mnt", tmp_path / "logs")
    try:
        yield fs.start()
    finally:
        fs.close()


def _write_file(path: Path, data: bytes, *, fsync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_lazyfs_keeps_only_what_was_synced(lazyfs: LazyFSProcess):
    """The file system is real: data and directory entries survive a cut only when fsynced (mmap pages when
    msynced), reads see unsynced data before the cut, and nothing written after the cut survives."""
    mnt = lazyfs.mountpoint
    _write_file(mnt / "durable", b"D" * 5000, fsync=True)
    _write_file(mnt / "unsynced", b"U" * 5000, fsync=False)
    _write_file(mnt / "grown", b"G" * 100, fsync=True)
    _write_file(mnt / "shrunk", b"S" * 9000, fsync=True)
    _write_file(mnt / "doomed", b"X" * 10, fsync=True)
    fd = os.open(mnt / "mapped", os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 4 * 4096)
    os.posix_fallocate(fd, 0, 4 * 4096)
    mapping = mmap.mmap(fd, 4 * 4096)
    mapping[0:6] = b"synced"
    mapping.flush()  # msync(MS_SYNC): WRITE + FSYNC
    mapping[8192:8200] = b"unsynced"
    _fsync_dir(mnt)  # every entry above is durable from here on (the data only where fsynced)

    with open(mnt / "grown", "ab") as grown:
        grown.write(b"+" * 50)  # not synced
    os.truncate(mnt / "shrunk", 10)  # not synced
    os.unlink(mnt / "doomed")  # the directory is not synced again
    (mnt / "sub").mkdir()
    _write_file(mnt / "sub" / "orphan", b"O" * 10, fsync=True)  # its entries are never synced
    _write_file(mnt / "late", b"L", fsync=True)  # neither is this entry

    # before the cut every change is visible (reads come from the in-memory overlay)
    assert (mnt / "unsynced").read_bytes() == b"U" * 5000
    assert (mnt / "grown").read_bytes() == b"G" * 100 + b"+" * 50
    assert (mnt / "shrunk").read_bytes() == b"S" * 10
    assert mapping[8192:8200] == b"unsynced"
    assert os.pread(fd, 8, 8192) == b"unsynced"
    assert not (mnt / "doomed").exists()
    assert (mnt / "sub" / "orphan").read_bytes() == b"O" * 10

    dropped = lazyfs.cut()
    assert dropped["dirty_bytes"] > 0 and dropped["unsynced_dirs"] >= 1, dropped
    os.pwrite(fd, b"after the cut", 0)  # accepted and ignored, like everything after the cut
    os.fsync(fd)
    mapping.close()
    os.close(fd)
    lazyfs.unmount()
    lazyfs.start()

    assert sorted(p.name for p in mnt.iterdir()) == [
        "doomed",
        "durable",
        "grown",
        "mapped",
        "shrunk",
        "unsynced",
    ]
    assert (mnt / "durable").read_bytes() == b"D" * 5000
    assert (mnt / "unsynced").read_bytes() == b""  # entry durable, data never synced
    assert (mnt / "grown").read_bytes() == b"G" * 100
    assert (mnt / "shrunk").read_bytes() == b"S" * 9000
    assert (mnt / "doomed").read_bytes() == b"X" * 10
    mapped = (mnt / "mapped").read_bytes()
    assert len(mapped) == 4 * 4096  # the size was synced with the msync
    assert mapped[0:6] == b"synced"
    assert mapped[8192:8200] == bytes(8)


def test_lazyfs_directory_fsync_and_rename(lazyfs: LazyFSProcess):
    """A rename is durable once the directory is fsynced; a new directory needs its parent fsynced too."""
    mnt = lazyfs.mountpoint
    (mnt / "a").mkdir()
    _write_file(mnt / "a" / "f.tmp", b"v1", fsync=True)
    os.rename(mnt / "a" / "f.tmp", mnt / "a" / "f")
    _fsync_dir(mnt / "a")
    _fsync_dir(mnt)
    _write_file(mnt / "a" / "g.tmp", b"v2", fsync=True)
    os.replace(mnt / "a" / "g.tmp", mnt / "a" / "f")  # not synced: v1 stays
    with pytest.raises(OSError) as error:
        os.rmdir(mnt / "a")
    assert error.value.errno == errno.ENOTEMPTY
    lazyfs.cut()
    lazyfs.unmount()
    lazyfs.start()
    assert sorted(p.name for p in (mnt / "a").iterdir()) == ["f"]
    assert (mnt / "a" / "f").read_bytes() == b"v1"


@pytest.mark.parametrize("posix_sizes", [False, True], ids=["ext4-sizes", "posix-sizes"])
def test_lazyfs_new_file_linked_by_directory_fsync(tmp_path: Path, posix_sizes: bool):
    """A file created, sized with ftruncate and written but never fsynced, whose directory is fsynced: durable
    at its ftruncate size as zeros (ext4), or empty with ``--posix-sizes``; its written bytes are lost either
    way."""
    fs = LazyFSProcess(tmp_path / "backing", tmp_path / "mnt", tmp_path / "logs", posix_sizes=posix_sizes)
    try:
        mnt = fs.start().mountpoint
        fd = os.open(mnt / "index", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.ftruncate(fd, 3 * 4096)
        os.pwrite(fd, b"header", 0)
        os.close(fd)
        _fsync_dir(mnt)
        fs.cut()
        fs.unmount()
        fs.start()
        assert (mnt / "index").read_bytes() == (b"" if posix_sizes else bytes(3 * 4096))
    finally:
        fs.close()


# -- the broker under power cuts ----------------------------------------------------------------------------------

try:
    import pulsar
except ImportError:  # the file system tests above still run
    pulsar = None
needs_pulsar = pytest.mark.skipif(pulsar is None, reason="pulsar-client is not installed")


def payload_for(seq: int) -> bytes:
    """A deterministic payload of 10..~1100 bytes whose first 9 bytes are the sequence number."""
    digest = hashlib.sha256(seq.to_bytes(8, "big")).digest()
    return f"{seq:09d}|".encode() + digest * (seq % 35)


def _new_client(broker: BrokerProcess) -> pulsar.Client:
    assert broker.service_url is not None
    return pulsar.Client(
        broker.service_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def _close_quietly(client: pulsar.Client) -> None:
    try:
        client.close()
    except pulsar.PulsarException:  # the broker is gone, which is the point
        pass


def _wait_stopped(pid: int, timeout_s: float = 5.0) -> bool:
    """True once every thread of ``pid`` is stopped (a thread inside a FUSE request stops when the file
    system answers it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            states = []
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/stat", encoding="ascii", errors="replace") as stat_file:
                    states.append(stat_file.read().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:
            continue
        if all(state in "TtZX" for state in states):
            return True
        time.sleep(0.005)
    return False


@dataclass
class Round:
    """What one cut saw."""

    sent: int
    receipted: int
    dropped: dict[str, int]
    stopped: bool


def _publish_then_cut(
    broker: BrokerProcess,
    fs: LazyFSProcess,
    first_seq: int,
    run_s: float,
    max_messages: int,
    receipts: dict[int, tuple[int, int]],
) -> tuple[Round, int]:
    """Publish from ``first_seq`` on for ``run_s`` seconds or ``max_messages`` messages, whichever ends first
    (up to MAX_IN_FLIGHT are unanswered then), then cut the power under the broker. Adds the receipts seen
    before the cut to ``receipts``; returns the round and the next sequence number."""
    pid = broker.pid
    assert pid is not None
    seen: dict[int, tuple[int, int]] = {}
    lock = threading.Lock()
    stop = threading.Event()
    in_flight = threading.Semaphore(MAX_IN_FLIGHT)
    next_seq = [first_seq]
    client = _new_client(broker)
    producer = client.create_producer(
        TOPIC,
        batching_enabled=False,
        block_if_queue_full=True,  # never blocks: the semaphore keeps fewer messages pending than the queue holds
        max_pending_messages=2 * MAX_IN_FLIGHT,
        send_timeout_millis=30_000,
    )

    def on_receipt(seq: int, result: object, message_id: pulsar.MessageId) -> None:
        in_flight.release()
        if result == pulsar.Result.Ok:
            with lock:
                seen[seq] = (message_id.ledger_id(), message_id.entry_id())

    def publish() -> None:
        seq = first_seq
        while not stop.is_set() and seq < first_seq + max_messages:
            if not in_flight.acquire(timeout=0.05):
                continue
            try:
                producer.send_async(
                    payload_for(seq), lambda r, m, s=seq: on_receipt(s, r, m), partition_key=f"key-{seq % 11}"
                )
            except pulsar.PulsarException:
                in_flight.release()
                break
            seq += 1
            next_seq[0] = seq

    publisher = threading.Thread(target=publish, name="power-loss-publisher", daemon=True)
    publisher.start()
    try:
        publisher.join(run_s)
        os.kill(pid, signal.SIGSTOP)
        stopped = _wait_stopped(pid)
        dropped = fs.cut()
        with lock:
            kept = dict(seen)
        broker.kill()  # SIGKILL ends a stopped process too
    finally:
        stop.set()
        publisher.join(30)
        _close_quietly(client)
    receipts.update(kept)
    return Round(next_seq[0] - first_seq, len(kept), dropped, stopped), next_seq[0]


def _keep_backlog(broker: BrokerProcess) -> None:
    """A durable subscription at the start, so that no closed ledger is trimmed."""
    client = _new_client(broker)
    try:
        client.subscribe(TOPIC, "keeper", initial_position=pulsar.InitialPosition.Earliest).close()
    finally:
        _close_quietly(client)


def _read_all(broker: BrokerProcess, deadline: float) -> list[tuple[int, tuple[int, int], bytes]]:
    """Every message of the topic from the earliest position: (sequence number, message id, payload)."""
    client = _new_client(broker)
    found = []
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        while reader.has_message_available():
            if time.monotonic() > deadline:
                raise AssertionError(f"reading the topic took too long ({len(found)} messages read)")
            message = reader.read_next(timeout_millis=10_000)
            data = message.data()
            message_id = message.message_id()
            found.append((int(data[:9]), (message_id.ledger_id(), message_id.entry_id()), data))
        reader.close()
    finally:
        _close_quietly(client)
    return found


@dataclass
class Outcome:
    seed: int
    rounds: list[Round] = field(default_factory=list)
    receipted: int = 0
    lost: set[int] = field(default_factory=set)
    disorder: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"seed {self.seed}: {len(self.lost)} of {self.receipted} receipted messages lost over "
            f"{len(self.rounds)} cuts in {self.seconds:.1f} s (sent/receipted/dropped by lazyfs per cut: "
            + ", ".join(f"{r.sent}/{r.receipted}/{r.dropped.get('dirty_bytes', 0)}B" for r in self.rounds)
            + ")"
        )


def _check(outcome: Outcome, receipts: dict[int, tuple[int, int]], found: list) -> None:
    """Record lost receipted messages (missing, or another payload or id) and order/duplicate violations."""
    seqs = [seq for seq, _, _ in found]
    if seqs != sorted(set(seqs)):
        outcome.disorder.append(f"after cut {len(outcome.rounds)}: out of order or duplicated")
    by_seq = {seq: (message_id, data) for seq, message_id, data in found}
    for seq, message_id in receipts.items():
        if by_seq.get(seq) != (message_id, payload_for(seq)):
            outcome.lost.add(seq)
    outcome.receipted = len(receipts)


def _power_cut_rounds(
    tmp_path: Path, settings: str, cuts: int, seed: int, budget_s: float, *, posix_sizes: bool = POSIX_SIZES
) -> Outcome:
    """Start lazyfs and the broker on it, then ``cuts`` times: publish, cut, remount, restart, read and check.
    Stops early (fewer rounds) once ``budget_s`` is spent."""
    rng = random.Random(seed)
    started = time.monotonic()
    deadline = started + budget_s
    outcome = Outcome(seed)
    config = tmp_path / "broker.toml"
    config.write_text(settings)
    fs = LazyFSProcess(tmp_path / "backing", tmp_path / "mnt", tmp_path / "logs", posix_sizes=posix_sizes)
    broker = BrokerProcess(
        fs.mountpoint,
        extra_args=("--config", str(config)),
        log_dir=tmp_path / "logs",
        startup_timeout_s=60,
    )
    receipts: dict[int, tuple[int, int]] = {}
    seq = 0
    try:
        fs.start()
        broker.start()
        _keep_backlog(broker)
        for _ in range(cuts):
            if time.monotonic() > deadline:
                break
            run_s, max_messages = rng.uniform(0.2, 1.0), rng.randint(300, MAX_MESSAGES_PER_ROUND)
            cut, seq = _publish_then_cut(broker, fs, seq, run_s, max_messages, receipts)
            outcome.rounds.append(cut)
            fs.unmount()
            fs.start()  # the reboot: a fresh process over the durable state only
            broker.start()  # recovers from what survived
            _check(outcome, receipts, _read_all(broker, deadline + 30))
    finally:
        broker.kill()
        fs.close()
        outcome.seconds = time.monotonic() - started
    print(outcome.summary())
    return outcome


def _seed() -> int:
    return int(os.environ.get("QUASAR_POWER_SEED") or random.randrange(2**32))


@pytest.mark.slow
@pytest.mark.interop
@needs_pulsar
def test_sync_flush_loses_no_receipted_message_over_ten_power_cuts(tmp_path: Path):
    outcome = _power_cut_rounds(tmp_path, 'flush_disk_type = "SYNC_FLUSH"\n' + SETTINGS, 10, _seed(), 120)
    assert len(outcome.rounds) == 10, outcome.summary()
    assert all(r.stopped for r in outcome.rounds), outcome.summary()
    assert outcome.receipted > 10 * 50, outcome.summary()  # the load was real
    assert not outcome.disorder, f"{outcome.disorder}; {outcome.summary()}"
    assert not outcome.lost, f"first lost: {sorted(outcome.lost)[:10]}; {outcome.summary()}"


@pytest.mark.slow
@pytest.mark.interop
@needs_pulsar
def test_async_flush_loses_receipted_messages_at_power_cuts(tmp_path: Path):
    """The proof that the set-up can fail: ASYNC_FLUSH receipts before the flush, so cuts lose messages (a
    flush every 100 ms: rounds keep most of their messages and lose the unflushed tail)."""
    settings = 'flush_disk_type = "ASYNC_FLUSH"\nflush_interval_commit_log_ms = 100\n' + SETTINGS
    outcome = _power_cut_rounds(tmp_path, settings, 4, _seed(), 60)
    assert outcome.receipted > 4 * 50, outcome.summary()
    assert len(outcome.lost) > 0, outcome.summary()


@pytest.mark.slow
@pytest.mark.interop
@needs_pulsar
def test_sync_flush_power_cuts_with_posix_sizes(tmp_path: Path):
    """As the SYNC test, on a file system that keeps a file's size only when the file itself is fsynced."""
    outcome = _power_cut_rounds(
        tmp_path, 'flush_disk_type = "SYNC_FLUSH"\n' + SETTINGS, 3, _seed(), 45, posix_sizes=True
    )
    assert not outcome.lost, f"first lost: {sorted(outcome.lost)[:10]}; {outcome.summary()}"
