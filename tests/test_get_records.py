"""``MessageStore.get_records``: many reads in one call, each the same outcome as ``get_message``
(status, next begin offset, queue bounds) with its records byte for byte as stored."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rocketstore import (
    GetStatus,
    InvalidArgumentError,
    Message,
    MessageStore,
    RecordRead,
    StoreConfig,
)

# small segments and queue files: reads cross both
CFG = StoreConfig(
    commitlog_segment_size=16384,
    consume_queue_entries=40,
    index_hash_slots=64,
    index_max_entries=256,
    max_transfer_bytes_on_message_in_memory=2048,
)


def fill(root: Path) -> MessageStore:
    store = MessageStore.open(root, CFG)
    msgs = [
        Message("T", f"body-{i}-".encode() * (1 + i % 9), tags=f"tag{i % 3}", queue_id=i % 3)
        for i in range(400)
    ]
    for i in range(0, 400, 50):
        assert all(r.ok for r in store.put_messages(msgs[i : i + 50]))
    store.create_topic("Empty", 1)
    assert store.wait_dispatched(10)
    return store


def reads_of_every_kind() -> list[RecordRead]:
    reads = []
    for q in range(3):
        for offset in (0, 1, 5, 38, 39, 40, 41, 79, 80, 132, 133, 134, 500, -1):
            for max_msgs in (-1, 0, 1, 7, 32):
                reads.append(RecordRead("T", q, offset, max_msgs))
                reads.append(RecordRead("T", q, offset, max_msgs, "tag1 || tag2"))
        reads.append(RecordRead("T", q, 3, 32, "*"))
    reads += [RecordRead("Nope", 0, 0, 32), RecordRead("Empty", 0, 0, 32), RecordRead("T", 9, 0, 32)]
    return reads


def check_same_as_get_message(store: MessageStore, reads: list[RecordRead]) -> None:
    got = store.get_records(reads)
    assert len(got) == len(reads)
    assert got.starts[0] == 0 and got.starts[-1] == len(got.records)
    for i, (topic, queue_id, offset, max_msgs, tags) in enumerate(reads):
        want = store.get_message("g", topic, queue_id, offset, max_msgs, tags)
        assert got.statuses[i] is want.status, reads[i]
        assert (
            int(got.next_begin_offsets[i]),
            int(got.min_offsets[i]),
            int(got.max_offsets[i]),
            int(got.counts[i]),
        ) == (want.next_begin_offset, want.min_offset, want.max_offset, len(want.messages)), reads[i]
        records = bytes(got.records[got.starts[i] : got.starts[i + 1]])
        assert records == b"".join(bytes(m.record_view) for m in want.messages), reads[i]


def test_every_read_is_get_messages_with_its_records_as_stored(tmp_path: Path) -> None:
    with fill(tmp_path / "s") as store:
        reads = reads_of_every_kind()
        check_same_as_get_message(store, reads)
        found = store.get_records([RecordRead("T", 0, 0, 32)])
        # the transfer limit bounds a read's bytes, as get_message's
        assert found.statuses == [GetStatus.FOUND] and 0 < len(found.records) <= 2048
        assert 1 < int(found.counts[0]) < 32


def test_reads_of_a_reclaimed_segment_say_what_get_message_says(tmp_path: Path) -> None:
    with fill(tmp_path / "s") as store:
        old = time.time() - 80 * 3600  # past the 72 h file_reserved_time
        for path in (tmp_path / "s" / "commitlog").iterdir():
            os.utime(path, (old, old))
        assert store.reclaim().commitlog_segments_deleted > 0
        assert store.min_offset_in_queue("T", 0) > 0
        check_same_as_get_message(store, reads_of_every_kind())


def test_a_read_only_store_and_bad_arguments(tmp_path: Path) -> None:
    fill(tmp_path / "s").close()
    with MessageStore.open(tmp_path / "s", CFG, readonly=True) as store:
        check_same_as_get_message(store, reads_of_every_kind())
        with pytest.raises(InvalidArgumentError, match="queue_id"):
            store.get_records([RecordRead("T", "0", 0, 32)])  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="tags"):
            store.get_records([RecordRead("T", 0, 0, 32, ["a"])])  # type: ignore[arg-type]
        assert len(store.get_records([])) == 0


def test_in_memory_only_leaves_the_reads_that_may_touch_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on a machine whose memory holds only the log's last 8 KiB: a read whose first record
    lies before is not done (status None, nothing else), every other read is get_message's."""
    import rocketstore.read_path

    monkeypatch.setattr(rocketstore.read_path, "in_memory_bytes", lambda: 8192)
    with fill(tmp_path / "s") as store:
        reads = reads_of_every_kind()
        got = store.get_records(reads, in_memory_only=True)
        assert got.starts[-1] == len(got.records)
        in_memory_from = store.max_phy_offset() - 8192
        done = []
        for i, read in enumerate(reads):
            first = store.read_batch(read.topic, read.queue_id, read.offset, 1, bodies=False)
            on_disk = 0 <= read.offset < store.max_offset_in_queue(read.topic, read.queue_id) and (
                int(first.physical_offsets[0]) < in_memory_from
            )
            if got.statuses[i] is None:
                assert on_disk, read
                assert int(got.counts[i]) == got.starts[i + 1] - got.starts[i] == 0
                assert int(got.next_begin_offsets[i]) == int(got.max_offsets[i]) == 0
            else:
                assert not on_disk, read
                done.append(read)
        assert len(done) < len(reads) and any(r.offset >= 0 and r.offset < 130 for r in done)
        check_same_as_get_message(store, done)
        # without it, every read is done
        assert None not in store.get_records(reads).statuses
