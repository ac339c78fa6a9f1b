"""A read-only open of a crashed store reads what recovery would keep and changes no byte."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig, StoreReadOnlyError
from tests.conftest import FIXTURE_CONFIG, copy_fixture

CFG = StoreConfig(
    commitlog_segment_size=65536, consume_queue_entries=40, index_hash_slots=64, index_max_entries=256
)


def snapshot(root: Path) -> dict[str, tuple[str, float]]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime)
    return out


def test_readonly_open_of_a_damaged_store_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as store:
        results = store.put_messages(
            [Message(topic="T", body=b"m" * 400, keys=[f"k{i}"]) for i in range(400)]
        )
        store.wait_dispatched()
    cut = results[300].physical_offset + 7  # tear record 300
    seg = root / "commitlog" / f"{cut - cut % 65536:020d}"
    data = bytearray(seg.read_bytes())
    data[cut % 65536 :] = bytes(len(data) - cut % 65536)
    seg.write_bytes(data)
    (root / "abort").touch()
    before = snapshot(root)
    torn_segment_end = cut - cut % 65536 + 65536
    after = [r for r in results if r.physical_offset >= torn_segment_end]
    assert after, "the tear must be in a segment older than the last"
    with MessageStore.open(root, CFG, readonly=True) as store:
        # the torn stretch is stepped over (the last segment holds data): the later records stay
        assert store.max_phy_offset() == results[-1].physical_offset + results[-1].wrote_bytes
        rep = store.recovery
        assert rep is not None and [(d.start, d.end) for d in rep.stepped_over] == [
            (results[300].physical_offset, torn_segment_end)
        ]
        assert store.look_message_by_offset(results[299].physical_offset) is not None
        assert store.look_message_by_offset(results[300].physical_offset) is None
        assert store.look_message_by_offset(after[0].physical_offset) is not None
        with pytest.raises(StoreReadOnlyError):
            store.put_message(Message(topic="T", body=b"x"))
    assert snapshot(root) == before


def test_readonly_open_of_the_rocketmq_crash_fixture_writes_nothing(tmp_path: Path) -> None:
    root = copy_fixture("store-sample-crash", tmp_path)
    before = snapshot(root)
    with MessageStore.open(root, FIXTURE_CONFIG, readonly=True) as store:
        assert store.abnormal_shutdown_detected
        assert store.max_phy_offset() == 583102
        assert store.get_message("g", "TopicA", 0, 0, 1).messages[0].queue_offset == 0
    assert snapshot(root) == before
