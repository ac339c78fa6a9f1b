"""``MessageStore.read_batch``: the columnar bulk read agrees with ``get_message`` message for message."""

from __future__ import annotations

import zlib
from pathlib import Path

from rocketstore import ManualClock, Message, MessageStore, StoreConfig

CFG = StoreConfig(
    commitlog_segment_size=16384, consume_queue_entries=40, index_hash_slots=64, index_max_entries=256
)


def fill(root: Path) -> MessageStore:
    store = MessageStore.open(root, CFG, clock=ManualClock(1_700_000_000_000))
    msgs = [
        Message(
            "T", f"body-{i}-".encode() * (1 + i % 7), tags=f"tag{i % 3}", queue_id=i % 3, born_timestamp=i
        )
        for i in range(300)
    ]
    for i in range(0, 300, 50):
        assert all(r.ok for r in store.put_messages(msgs[i : i + 50]))
    store.put_message(Message("T", b"", queue_id=0))  # an empty body
    assert store.wait_dispatched(10)
    return store


def test_batches_equal_get_message(tmp_path: Path) -> None:
    with fill(tmp_path / "s") as store:
        for q in range(3):
            offset, got = 0, []
            while True:
                batch = store.read_batch("T", q, offset, 7)
                if len(batch) == 0:
                    assert batch.next_offset == offset == store.max_offset_in_queue("T", q)
                    break
                for i in range(len(batch)):
                    got.append(
                        (
                            int(batch.queue_offsets[i]),
                            int(batch.physical_offsets[i]),
                            int(batch.tags_codes[i]),
                            int(batch.born_timestamps[i]),
                            int(batch.store_timestamps[i]),
                            bytes(batch.body_at(i)),
                        )
                    )
                offset = batch.next_offset
            want = []
            o = 0
            while True:
                res = store.get_message("g", "T", q, o, 32)
                if not res.messages:
                    break
                want += [
                    (
                        m.queue_offset,
                        m.physical_offset,
                        m.tags_code,
                        m.born_timestamp,
                        m.store_timestamp,
                        m.body,
                    )
                    for m in res.messages
                ]
                o = res.next_begin_offset
            assert got == want and len(got) == store.max_offset_in_queue("T", q)
            assert sum(zlib.crc32(g[5]) for g in got) == sum(zlib.crc32(w[5]) for w in want)


def test_without_bodies_and_past_the_ends(tmp_path: Path) -> None:
    with fill(tmp_path / "s") as store:
        batch = store.read_batch("T", 1, 0, 1000, bodies=False)
        assert len(batch) == 40 and len(batch.body) == 0  # one consume-queue segment: 40 entries
        assert list(batch.body_offsets) == [0] * 41 and batch.next_offset == 40
        assert len(store.read_batch("T", 1, 10_000, 5)) == 0
        assert len(store.read_batch("Nope", 0, 0, 5)) == 0


def test_a_reclaimed_head_is_skipped(tmp_path: Path) -> None:
    root = tmp_path / "s"
    fill(root).close()
    # delete the oldest commitlog segment by hand (as reclamation would) and reopen
    oldest = sorted((root / "commitlog").iterdir())[0]
    oldest.unlink()
    with MessageStore.open(root, CFG) as store:
        first = store.min_offset_in_queue("T", 0)
        batch = store.read_batch("T", 0, 0, 10)
        assert len(batch) > 0 and int(batch.queue_offsets[0]) == first


def test_a_batch_stops_before_a_record_whose_magic_code_is_not_a_messages(tmp_path: Path) -> None:
    """What a queue entry points at must be a message record: its size alone is not enough (a
    follower beside a live writer relies on it too)."""
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as store:
        results = store.put_messages([Message("T", f"m{i}".encode(), queue_id=0) for i in range(3)])
    segment = root / "commitlog" / f"{0:020d}"
    with MessageStore.open(root, CFG, readonly=True) as store:
        assert len(store.read_batch("T", 0, 0)) == 3
        # damaged after the open's recovery looked (the mapping sees the file's pages)
        with segment.open("r+b") as f:
            f.seek(results[1].physical_offset + 4)
            f.write(b"\x00\x00\x00\x01")
        assert len(store.read_batch("T", 0, 0)) == 1
