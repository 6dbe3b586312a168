"""EpochFile and find_consistent_point (RocketMQ 5 EpochFileCache)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quasar.storage import StoreLoadError
from quasar.storage.epoch_file import EpochEntry, EpochFile, find_consistent_point

E = EpochEntry


def test_append_load_and_atomic_rewrite(tmp_path: Path):
    path = tmp_path / "epoch"
    epochs = EpochFile(path)
    epochs.load()  # missing file: empty
    assert epochs.entries == [] and epochs.last is None and not path.exists()
    epochs.append(1, 0)
    epochs.append(3, 500)
    epochs.append(4, 500)  # an empty epoch: a master replaced before it wrote
    assert epochs.entries == [E(1, 0), E(3, 500), E(4, 500)]
    for bad in ((4, 600), (2, 900), (5, 499), (-1, 900), (5, -3), (True, 900), (2**31, 900)):
        with pytest.raises(ValueError):
            epochs.append(*bad)
    assert epochs.last == E(4, 500)
    (tmp_path / "epoch.tmp").write_text("a torn rewrite")
    again = EpochFile(path)
    again.load()
    assert again.entries == epochs.entries
    assert not (tmp_path / "epoch.tmp").exists()
    assert epochs.end_offset(1, 900) == 500
    assert epochs.end_offset(3, 900) == 500
    assert epochs.end_offset(4, 900) == 900
    assert epochs.end_offset(2, 900) == -1


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"garbage\n",
        b"quasar-epoch 1\n1-0\ncrc 1\n",
        b"quasar-epoch 1\n1-0\n",
        b"quasar-epoch 2\ncrc 0\n",
    ],
)
def test_bad_files_are_refused(tmp_path: Path, content: bytes):
    (tmp_path / "epoch").write_bytes(content)
    with pytest.raises(StoreLoadError):
        EpochFile(tmp_path / "epoch").load()


def test_unordered_entries_are_refused(tmp_path: Path):
    import zlib

    body = b"quasar-epoch 1\n2-0\n1-10\n"
    (tmp_path / "epoch").write_bytes(body + b"crc %d\n" % zlib.crc32(body))
    with pytest.raises(StoreLoadError):
        EpochFile(tmp_path / "epoch").load()


def test_truncate_from(tmp_path: Path):
    epochs = EpochFile(tmp_path / "epoch")
    for epoch, start in ((1, 0), (2, 100), (3, 250), (5, 250)):
        epochs.append(epoch, start)
    assert epochs.truncate_from(300) == []
    assert epochs.truncate_from(250) == [E(3, 250), E(5, 250)]  # start >= offset: dropped
    reloaded = EpochFile(tmp_path / "epoch")
    reloaded.load()
    assert reloaded.entries == [E(1, 0), E(2, 100)]
    assert epochs.truncate_from(101) == []
    assert epochs.truncate_from(0) == [E(1, 0), E(2, 100)]
    assert epochs.entries == []


def test_find_consistent_point_cases():
    history = [E(1, 0), E(2, 100), E(3, 300)]
    # the same history: the shorter side's end
    assert find_consistent_point(history, 500, history, 500) == 500
    assert find_consistent_point(history, 450, history, 500) == 450
    # remote ahead with a newer epoch: local ends inside epoch 3
    assert find_consistent_point(history, 400, [*history, E(4, 600)], 900) == 400
    # local ahead (an old master that wrote past the new master's start)
    assert find_consistent_point([*history, E(4, 600)], 900, history, 500) == 500
    # diverged tail after a failover: the old master kept writing epoch 3 up to 700, the new one was elected at
    # 550 (epoch 4): the consistent point is where epoch 3 ends on the new master
    old_master = history
    new_master = [*history, E(4, 550)]
    assert find_consistent_point(old_master, 700, new_master, 800) == 550
    # the old master was itself elected at epoch 4 with another start: epoch 3 is the newest common one
    assert find_consistent_point([*history, E(4, 620)], 700, new_master, 800) == 550
    # same epoch number with a different start is not common
    assert find_consistent_point([E(1, 0), E(2, 90)], 200, [E(1, 0), E(2, 100)], 200) == 90
    # no common epoch
    assert find_consistent_point([E(2, 0)], 100, [E(1, 0)], 100) == -1
    assert find_consistent_point([], 0, history, 500) == -1
    assert find_consistent_point(history, 500, [], 0) == -1


@st.composite
def histories(draw):
    """Two epoch lists sharing a prefix, each then diverging with its own epochs and starts. The two sides'
    divergent epochs never coincide (side 0 takes the parity of epoch + 1 past the prefix, side 1 the other):
    an epoch is one election, so two brokers never hold the same epoch number from different masters (a shared
    (epoch, start) pair drawn by chance on both sides would be a common epoch the generator did not mean)."""
    common = draw(st.integers(0, 4))
    entries, epoch, start = [], 0, 0
    for _ in range(common):
        epoch += draw(st.integers(1, 3))
        start += draw(st.integers(0, 100))
        entries.append(E(epoch, start))
    sides = []
    for k in range(2):
        side, side_epoch, side_start = list(entries), epoch + k - 1, start
        for _ in range(draw(st.integers(0, 3))):
            side_epoch += 2 * draw(st.integers(1, 2))
            side_start += draw(st.integers(1, 100))
            side.append(E(side_epoch, side_start))
        side_max = side_start + draw(st.integers(0, 100))
        sides.append((side, side_max))
    return sides


def _ends(entries, max_offset):
    return {
        e.epoch: (e.start_offset, (entries[i + 1].start_offset if i + 1 < len(entries) else max_offset))
        for i, e in enumerate(entries)
    }


@given(histories())
def test_find_consistent_point_property(sides):
    (local, local_max), (remote, remote_max) = sides
    point = find_consistent_point(local, local_max, remote, remote_max)
    assert point == find_consistent_point(remote, remote_max, local, local_max)  # symmetric
    local_ends, remote_ends = _ends(local, local_max), _ends(remote, remote_max)
    common = [e for e in local if e.epoch in remote_ends and remote_ends[e.epoch][0] == e.start_offset]
    if not common:
        assert point == -1
        return
    newest = common[-1]
    assert point == min(local_ends[newest.epoch][1], remote_ends[newest.epoch][1])
    assert 0 <= point <= min(local_max, remote_max)
    # truncating both sides there leaves the same epoch list up to the point
    assert [e for e in local if e.start_offset < point] == [e for e in remote if e.start_offset < point]


@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 50)), max_size=8), st.integers(0, 400))
def test_truncate_and_reload_property(tmp_path_factory: pytest.TempPathFactory, steps, cut):
    path = tmp_path_factory.mktemp("epochs") / "epoch"
    epochs = EpochFile(path)
    epoch = start = 0
    for epoch_step, start_step in steps:
        epoch += epoch_step
        start += start_step
        epochs.append(epoch, start)
    before = epochs.entries
    dropped = epochs.truncate_from(cut)
    assert epochs.entries + dropped == before
    assert all(e.start_offset < cut for e in epochs.entries)
    assert all(e.start_offset >= cut for e in dropped)
    reloaded = EpochFile(path)
    reloaded.load()
    assert reloaded.entries == (epochs.entries if path.exists() else [])
