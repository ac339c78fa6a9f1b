"""The store's lifecycle (STORE.md §9, §1): reclaiming disk (triggers, age, forced cleaning, the disk-full
flag, consume queues and index following the commitlog, readers holding segments, restarts in the middle),
topics.json, consumerOffset.json and runtime_info.

Time and the disk are injected: a ManualClock that starts at the real time (segment ages come from the
files' mtimes) and a probe returning whatever used fraction a test sets. The cleaner's own thread is
stopped right after open (see ``open_store``): every round in these tests is one the test runs itself.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from rocketstore import (
    CorruptDataError,
    GetStatus,
    InvalidArgumentError,
    InvalidMessageError,
    ManualClock,
    Message,
    MessageExt,
    MessageStore,
    PutMessageResult,
    PutStatus,
    ReclaimReport,
    RocketStoreError,
    StoreClosedError,
    StoreConfig,
    StoreConfigError,
    StoreReadOnlyError,
    TopicConfig,
)
from rocketstore.storage.mapped_file import MappedFile
from rocketstore.storage.mapped_file_queue import MappedFileQueue
from tests.conftest import FIXTURE_CONFIG, FIXTURES, copy_fixture, fixture_clock

SEG = 4096  # commitlog segment: ~15 records each
CQ_ENTRIES = 8  # consume-queue segment: 8 entries (160 B)
HOUR_MS = 3_600_000
AGE_MS = 72 * HOUR_MS + 10 * 60_000  # older than the default file_reserved_time (72 h)
FORCIBLY_MS = 5_000  # destroy_mapped_file_interval_forcibly in these tests


def local_hour(ms: int) -> int:
    return time.localtime(ms / 1000).tm_hour


def java_hash(s: str) -> int:
    """Java's String.hashCode, written independently of the package (ASCII strings only here)."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@pytest.fixture
def clock() -> ManualClock:
    # real time: reclamation compares the clock with the segment files' mtimes
    return ManualClock(time.time_ns() // 1_000_000)


def make_config(clock: ManualClock, **changes: Any) -> StoreConfig:
    """Small geometry, no pauses between deletions, and a delete_when hour the tests never reach
    (the clock moves by at most a few hours past a multiple of 24 h from its start)."""
    quiet_hour = (local_hour(clock.now_ms()) + 12) % 24
    base = StoreConfig(
        commitlog_segment_size=SEG,
        consume_queue_entries=CQ_ENTRIES,
        index_hash_slots=16,
        index_max_entries=32,
        delete_commitlog_files_interval=0,
        delete_consume_queue_files_interval=0,
        clean_resource_interval=3_600_000,
        destroy_mapped_file_interval_forcibly=FORCIBLY_MS,
        delete_when=str(quiet_hour),
    )
    return base.replace(**changes)


class Disk:
    """The injected disk probe: the used fraction is whatever the test sets."""

    def __init__(self, ratio: float = 0.10) -> None:
        self.ratio = ratio
        self.asked: list[Path] = []

    def __call__(self, path: Path) -> float:
        self.asked.append(Path(path))
        return self.ratio


def open_store(
    root: Path, clock: ManualClock, cfg: StoreConfig, disk: Disk | None = None, *, quiet: bool = True
) -> MessageStore:
    """Open a store. ``quiet``: stop the cleaner's thread at once, so that rounds happen only when the
    test runs them (``store.reclaim()`` also wakes that thread: see test_one_reclaim_call_is_one_round)."""
    store = MessageStore.open(root, cfg, clock=clock, disk_usage=disk or Disk())
    if quiet:
        cleaner = store._cleaner
        assert cleaner is not None
        cleaner.stop()  # its final round runs now: at open there is nothing due
    return store


def service_round(store: MessageStore) -> ReclaimReport:
    """One round of the cleaning service as its thread runs it (no manual request)."""
    cleaner = store._cleaner
    assert cleaner is not None
    return cleaner.reclaim()


class Put(NamedTuple):
    result: PutMessageResult
    body: bytes
    key: str


def fill(
    store: MessageStore,
    segments: int,
    topic: str = "T",
    queues: int = 3,
    start: int = 0,
    clock: ManualClock | None = None,
) -> list[Put]:
    """Put messages (round robin over ``queues``, one KEYS key each) until the commitlog has
    ``segments`` segments, the last one about half full; wait until they are dispatched.
    With ``clock``: 1 ms passes after each put."""
    puts: list[Put] = []
    i = start
    while store.max_phy_offset() < (segments - 1) * SEG + SEG // 2:
        body = f"{topic}-{i}:".encode() + bytes([i % 251]) * 120
        key = f"key-{topic}-{i}"
        r = store.put_message(Message(topic, body, keys=[key], queue_id=i % queues))
        assert r.status is PutStatus.PUT_OK
        puts.append(Put(r, body, key))
        i += 1
        if clock is not None:
            clock.advance(1)
    assert store.wait_dispatched(5.0)
    assert store.max_phy_offset() < segments * SEG
    return puts


def segments_on_disk(root: Path, store: MessageStore) -> list[int]:
    """Start offsets of the commitlog segment files in use (not the pre-allocated next one)."""
    end = store.max_phy_offset()
    return sorted(
        int(p.name) for p in (root / "commitlog").iterdir() if p.name.isdigit() and int(p.name) < end
    )


def make_old(root: Path, clock: ManualClock, offsets: Iterable[int]) -> None:
    """Set these commitlog segments' last-modified time AGE_MS before the clock."""
    old_ns = (clock.now_ms() - AGE_MS) * 1_000_000
    for offset in offsets:
        os.utime(root / "commitlog" / f"{offset:020d}", ns=(old_ns, old_ns))


def make_young(root: Path, clock: ManualClock, offsets: Iterable[int]) -> None:
    """Set these commitlog segments' last-modified time to the clock's now."""
    now_ns = clock.now_ms() * 1_000_000
    for offset in offsets:
        os.utime(root / "commitlog" / f"{offset:020d}", ns=(now_ns, now_ns))


def queue_files(root: Path) -> set[str]:
    """Every consume-queue segment file, relative to the store root."""
    return {str(p.relative_to(root)) for p in (root / "consumequeue").rglob("*") if p.is_file()}


def read_queue(store: MessageStore, topic: str, qid: int, start: int) -> list[MessageExt]:
    """Every message of a queue from ``start`` to its max offset; every call must find messages."""
    out: list[MessageExt] = []
    offset = start
    end = store.max_offset_in_queue(topic, qid)
    while offset < end:
        res = store.get_message("g", topic, qid, offset, 32)
        assert res.status is GetStatus.FOUND, (topic, qid, offset, res.status)
        assert res.next_begin_offset > offset
        out.extend(res.messages)
        offset = res.next_begin_offset
    return out


def surviving(puts: list[Put], min_phy: int) -> list[Put]:
    return [p for p in puts if p.result.physical_offset >= min_phy]


def expected_queue_min(puts: list[Put], topic: str, qid: int, min_phy: int) -> int:
    """The queue offset of the first message of the queue still in the commitlog (the queue's max
    offset when none is)."""
    mine = [p.result for p in puts if p.result.topic == topic and p.result.queue_id == qid]
    alive = [r.queue_offset for r in mine if r.physical_offset >= min_phy]
    return min(alive) if alive else max(r.queue_offset for r in mine) + 1


def assert_queues_consistent(store: MessageStore, puts: list[Put], queues: int, topic: str = "T") -> None:
    """Queue min offsets point at the first message still in the commitlog, everything from there
    reads back with the body that was written, and below the min is OFFSET_TOO_SMALL."""
    min_phy = store.min_phy_offset()
    for qid in range(queues):
        qmin = expected_queue_min(puts, topic, qid, min_phy)
        assert store.min_offset_in_queue(topic, qid) == qmin, qid
        if qmin > 0:
            below = store.get_message("g", topic, qid, qmin - 1)
            assert below.status is GetStatus.OFFSET_TOO_SMALL
            assert below.next_begin_offset == qmin
        got = read_queue(store, topic, qid, qmin)
        want = [p for p in surviving(puts, min_phy) if p.result.topic == topic and p.result.queue_id == qid]
        assert [m.queue_offset for m in got] == [p.result.queue_offset for p in want]
        assert [m.body for m in got] == [p.body for p in want]
        assert [m.physical_offset for m in got] == [p.result.physical_offset for p in want]


# --- 1. age -----------------------------------------------------------------------------------------------


def test_only_segments_older_than_the_reserved_time_are_deleted(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        puts = fill(store, 8)
        segs = segments_on_disk(tmp_path, store)
        assert segs == [i * SEG for i in range(8)]
        # 0-2 old, 3 young, 4 old: deletion goes oldest first and stops at the first young one
        make_old(tmp_path, clock, [0, SEG, 2 * SEG, 4 * SEG])
        report = store.reclaim()
        assert report.triggered_by == ("manual",)
        assert not report.clean_immediately
        assert report.commitlog_segments_deleted == 3
        assert report.min_physical_offset == 3 * SEG
        assert segments_on_disk(tmp_path, store) == segs[3:]
        assert store.min_phy_offset() == 3 * SEG
        assert_queues_consistent(store, puts, 3)
        # the next (still armed) round: segment 4 is old but waits behind the young segment 3
        assert service_round(store).commitlog_segments_deleted == 0
        assert segments_on_disk(tmp_path, store) == segs[3:]


def test_a_segment_younger_than_the_reserved_time_by_a_minute_stays(
    tmp_path: Path, clock: ManualClock
) -> None:
    cfg = make_config(clock, file_reserved_time=1)
    with open_store(tmp_path, clock, cfg) as store:
        fill(store, 3)
        now_ns = clock.now_ms() * 1_000_000
        young_ns = now_ns - (HOUR_MS - 60_000) * 1_000_000  # 59 minutes old
        os.utime(tmp_path / "commitlog" / f"{0:020d}", ns=(young_ns, young_ns))
        assert store.reclaim().commitlog_segments_deleted == 0
        clock.advance(60_000)  # now exactly one hour old: expired
        assert service_round(store).commitlog_segments_deleted == 1
        assert segments_on_disk(tmp_path, store) == [SEG, 2 * SEG]


def test_the_newest_segment_survives_when_every_segment_is_expired(
    tmp_path: Path, clock: ManualClock
) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        puts = fill(store, 5)
        clock.advance(AGE_MS)
        report = store.reclaim()
        assert report.commitlog_segments_deleted == 4
        assert segments_on_disk(tmp_path, store) == [4 * SEG]
        assert service_round(store).commitlog_segments_deleted == 0
        assert store.min_phy_offset() == 4 * SEG
        assert_queues_consistent(store, puts, 3)
        # the store goes on: new messages land after the old ones and are readable
        more = fill(store, 6, start=len(puts))
        assert_queues_consistent(store, puts + more, 3)


def test_at_most_ten_segments_are_deleted_per_round(tmp_path: Path, clock: ManualClock) -> None:
    disk = Disk(0.86)  # forced cleaning: age does not matter
    with open_store(tmp_path, clock, make_config(clock), disk) as store:
        puts = fill(store, 16)
        report = service_round(store)
        assert report.triggered_by == ("disk",)
        assert report.clean_immediately
        assert report.commitlog_segments_deleted == 10
        assert segments_on_disk(tmp_path, store) == [i * SEG for i in range(10, 16)]
        assert_queues_consistent(store, puts, 3)
        report = service_round(store)
        assert report.commitlog_segments_deleted == 5
        assert segments_on_disk(tmp_path, store) == [15 * SEG]
        assert service_round(store).commitlog_segments_deleted == 0
        assert_queues_consistent(store, puts, 3)


def test_expired_segments_stay_when_nothing_triggers_a_round(tmp_path: Path, clock: ManualClock) -> None:
    disk = Disk(0.75)  # at the threshold, not above it
    with open_store(tmp_path, clock, make_config(clock), disk) as store:
        fill(store, 4)
        clock.advance(AGE_MS)
        report = service_round(store)
        assert report.triggered_by == ()
        assert report.commitlog_segments_deleted == 0
        assert not report.clean_immediately
        assert segments_on_disk(tmp_path, store) == [0, SEG, 2 * SEG, 3 * SEG]
        assert store.min_phy_offset() == 0
        assert store.min_offset_in_queue("T", 0) == 0
        assert tmp_path / "commitlog" in disk.asked


# --- 2. triggers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["single", "list"])
def test_hour_trigger(tmp_path: Path, clock: ManualClock, form: str) -> None:
    hour = local_hour(clock.now_ms() + AGE_MS)  # the hour the round will run at
    other = (hour + 7) % 24
    delete_when = f"{hour:02d}" if form == "single" else f"{other};{hour}"
    cfg = make_config(clock, delete_when=delete_when)
    with open_store(tmp_path, clock, cfg) as store:
        puts = fill(store, 5)
        clock.advance(AGE_MS)
        make_young(tmp_path, clock, [2 * SEG])
        report = service_round(store)
        assert report.triggered_by == ("time",)
        assert report.commitlog_segments_deleted == 2
        assert segments_on_disk(tmp_path, store) == [2 * SEG, 3 * SEG, 4 * SEG]
        assert_queues_consistent(store, puts, 3)


def test_no_hour_trigger_outside_delete_when(tmp_path: Path, clock: ManualClock) -> None:
    hour = local_hour(clock.now_ms() + AGE_MS)
    cfg = make_config(clock, delete_when=f"{(hour + 1) % 24};{(hour + 23) % 24}")
    with open_store(tmp_path, clock, cfg) as store:
        fill(store, 3)
        clock.advance(AGE_MS)
        report = service_round(store)
        assert report.triggered_by == ()
        assert segments_on_disk(tmp_path, store) == [0, SEG, 2 * SEG]
        clock.advance(HOUR_MS)  # the next hour is named
        report = service_round(store)
        assert report.triggered_by == ("time",)
        assert segments_on_disk(tmp_path, store) == [2 * SEG]


def test_disk_trigger_deletes_only_expired_segments(tmp_path: Path, clock: ManualClock) -> None:
    disk = Disk(0.80)  # above disk_max_used_space_ratio (75), below the clean-forcibly ratio (85)
    with open_store(tmp_path, clock, make_config(clock), disk) as store:
        puts = fill(store, 5)
        make_old(tmp_path, clock, [0, SEG])
        report = service_round(store)
        assert report.triggered_by == ("disk",)
        assert not report.clean_immediately
        assert not report.disk_full
        assert report.disk_used_ratio == 0.80
        assert report.commitlog_segments_deleted == 2
        assert segments_on_disk(tmp_path, store) == [2 * SEG, 3 * SEG, 4 * SEG]
        assert_queues_consistent(store, puts, 3)
        make_old(tmp_path, clock, [2 * SEG])
        disk.ratio = 0.70  # the disk trigger is gone: the old segment waits
        assert service_round(store).triggered_by == ()
        assert segments_on_disk(tmp_path, store) == [2 * SEG, 3 * SEG, 4 * SEG]
        disk.ratio = 0.76
        assert service_round(store).commitlog_segments_deleted == 1


def test_manual_trigger_stays_armed_for_twenty_rounds(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        fill(store, 6)
        first = store.reclaim()  # arms 20 rounds, this one included
        assert first.triggered_by == ("manual",)
        assert first.commitlog_segments_deleted == 0  # nothing is old yet
        reports = [service_round(store) for _ in range(19)]
        assert all(r.triggered_by == ("manual",) for r in reports)
        make_old(tmp_path, clock, [0])
        assert service_round(store).triggered_by == ()  # the 21st round: disarmed, the old segment stays
        assert segments_on_disk(tmp_path, store)[0] == 0
        assert store.reclaim().commitlog_segments_deleted == 1  # armed again
        # a later armed round deletes what has become old since
        make_old(tmp_path, clock, [SEG])
        report = service_round(store)
        assert report.triggered_by == ("manual",)
        assert report.commitlog_segments_deleted == 1
        assert segments_on_disk(tmp_path, store)[0] == 2 * SEG


def test_manual_rounds_follow_the_setting(tmp_path: Path, clock: ManualClock) -> None:
    cfg = make_config(clock, manual_delete_file_several_times=3)
    with open_store(tmp_path, clock, cfg) as store:
        fill(store, 2)
        triggers = [store.reclaim().triggered_by] + [service_round(store).triggered_by for _ in range(3)]
        assert triggers == [("manual",), ("manual",), ("manual",), ()]


def test_triggers_combine(tmp_path: Path, clock: ManualClock) -> None:
    hour = local_hour(clock.now_ms())
    disk = Disk(0.80)
    with open_store(tmp_path, clock, make_config(clock, delete_when=str(hour)), disk) as store:
        fill(store, 2)
        assert store.reclaim().triggered_by == ("time", "disk", "manual")


# --- 3. forced cleaning -----------------------------------------------------------------------------------


def test_forced_cleaning_above_85_percent_deletes_young_segments(tmp_path: Path, clock: ManualClock) -> None:
    disk = Disk(0.85)  # at the forcibly ratio: disk trigger, but age still matters
    with open_store(tmp_path, clock, make_config(clock), disk) as store:
        puts = fill(store, 6)
        report = service_round(store)
        assert report.triggered_by == ("disk",)
        assert not report.clean_immediately
        assert report.commitlog_segments_deleted == 0
        disk.ratio = 0.86
        report = service_round(store)
        assert report.clean_immediately
        assert not report.disk_full
        assert report.commitlog_segments_deleted == 5
        assert segments_on_disk(tmp_path, store) == [5 * SEG]
        assert_queues_consistent(store, puts, 3)


# --- 4. disk full -----------------------------------------------------------------------------------------


def test_disk_full_refuses_puts_and_reads_go_on(tmp_path: Path, clock: ManualClock) -> None:
    disk = Disk(0.10)
    with open_store(tmp_path, clock, make_config(clock), disk) as store:
        first = store.put_message(Message("T", b"before", queue_id=0))
        assert first.ok
        assert store.wait_dispatched(5.0)
        disk.ratio = 0.89  # forced cleaning, but not full
        assert not service_round(store).disk_full
        assert not store.disk_full
        disk.ratio = 0.91
        report = service_round(store)
        assert report.disk_full and report.clean_immediately
        assert store.disk_full
        assert store.runtime_info()["diskFull"] is True
        refused = store.put_message(Message("T", b"refused", queue_id=0))
        assert refused.status is PutStatus.DISK_FULL
        assert refused.physical_offset == -1
        batch = store.put_messages([Message("T", b"a", queue_id=0), Message("T", b"b", queue_id=1)])
        assert [r.status for r in batch] == [PutStatus.DISK_FULL] * 2
        assert store.max_phy_offset() == first.physical_offset + first.wrote_bytes
        got = store.get_message("g", "T", 0, 0)
        assert got.status is GetStatus.FOUND
        assert [m.body for m in got.messages] == [b"before"]
        assert store.look_message_by_offset(first.physical_offset) is not None
        # space comes back: puts wait for the next round to notice it
        disk.ratio = 0.50
        assert store.put_message(Message("T", b"too early", queue_id=0)).status is PutStatus.DISK_FULL
        report = service_round(store)
        assert not report.disk_full
        assert not store.disk_full
        assert store.runtime_info()["diskFull"] is False
        after = store.put_message(Message("T", b"after", queue_id=0))
        assert after.status is PutStatus.PUT_OK
        assert after.queue_offset == 1
        assert store.wait_dispatched(5.0)
        assert [m.body for m in store.get_message("g", "T", 0, 0).messages] == [b"before", b"after"]


# --- 5. after reclamation: queues and index follow --------------------------------------------------------


def test_queues_and_index_follow_the_commitlog(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        puts = fill(store, 12)
        uniq_keys = {p.key: look_uniq_key(store, p) for p in puts}
        index_before = store.index_headers()
        assert len(index_before) >= 6
        cq_before = queue_files(tmp_path)
        clock.advance(AGE_MS)
        report = store.reclaim()
        assert report.commitlog_segments_deleted == 10
        new_min = store.min_phy_offset()
        assert new_min == 10 * SEG == report.min_physical_offset

        # every message still in the commitlog reads back through its queue; below min: TOO_SMALL
        assert_queues_consistent(store, puts, 3)

        # consume-queue segments: gone exactly when their every entry points below the new min
        # (never a queue's newest segment)
        expected_cq = set()
        for qid in range(3):
            results = sorted(
                (p.result for p in puts if p.result.queue_id == qid), key=lambda r: r.queue_offset
            )
            n_segments = (len(results) + CQ_ENTRIES - 1) // CQ_ENTRIES
            for j in range(n_segments):
                last = results[min(len(results), (j + 1) * CQ_ENTRIES) - 1]
                if j == n_segments - 1 or last.physical_offset >= new_min:
                    expected_cq.add(f"consumequeue/T/{qid}/{j * CQ_ENTRIES * 20:020d}")
        cq_after = queue_files(tmp_path)
        assert cq_after == expected_cq
        assert report.queue_segments_deleted == len(cq_before - cq_after) > 0

        # index files: the leading ones whose endPhyOffset is below the new min are gone
        keep_from = next(
            (i for i, (_, h) in enumerate(index_before) if h["endPhyOffset"] >= new_min),
            len(index_before) - 1,
        )
        expected_index = [name for name, _ in index_before[keep_from:]]
        assert [name for name, _ in store.index_headers()] == expected_index
        assert sorted(p.name for p in (tmp_path / "index").iterdir()) == expected_index
        assert report.index_files_deleted == keep_from > 0

        # key queries: reclaimed messages are not found, surviving ones are
        for p in puts:
            found = store.query_message("T", p.key)
            if p.result.physical_offset < new_min:
                assert found == [], p.key
            else:
                assert [m.body for m in found] == [p.body], p.key
            by_uniq = store.query_by_uniq_key("T", uniq_keys[p.key])
            if p.result.physical_offset < new_min:
                assert by_uniq is None, p.key
            else:
                assert by_uniq is not None and by_uniq.body == p.body, p.key


def look_uniq_key(store: MessageStore, put: Put) -> str:
    """The UNIQ_KEY the store generated for a put."""
    msg = store.look_message_by_offset(put.result.physical_offset)
    assert msg is not None
    key = msg.uniq_key
    assert key is not None
    return key


def test_reclaiming_a_rocketmq_store(tmp_path: Path) -> None:
    """A store RocketMQ wrote: after its four older segments go, queue min offsets are where RocketMQ's
    records (the fixture's listing) say they must be, and two of its four index files go."""
    root = copy_fixture("store-sample", tmp_path)
    listing = [
        json.loads(line) for line in (FIXTURES / "store-sample.expected.jsonl").read_text().splitlines()
    ]
    records = [r for r in listing if r["kind"] == "clrec"]
    index_files = [r for r in listing if r["kind"] == "index_file"]
    disk = Disk(0.10)
    clock = fixture_clock("store-sample")
    cfg = FIXTURE_CONFIG.replace(delete_when=str((local_hour(clock.now_ms()) + 12) % 24))
    store = MessageStore.open(root, cfg, clock=clock, disk_usage=disk)
    try:
        assert store._cleaner is not None
        store._cleaner.stop()
        disk.ratio = 0.86  # forced: the fixture's files are only as old as the copy
        report = service_round(store)
        assert report.commitlog_segments_deleted == 4
        new_min = 4 * 65536
        assert store.min_phy_offset() == new_min
        for topic in ("TopicA", "TopicB", "TopicC"):
            for qid in range(4):
                mine = [r for r in records if r["topic"] == topic and r["queueId"] == qid]
                alive = [r for r in mine if r["offset"] >= new_min]
                want = alive[0]["queueOffset"] if alive else mine[-1]["queueOffset"] + 1
                assert store.min_offset_in_queue(topic, qid) == want, (topic, qid)
                got = read_queue(store, topic, qid, want)
                assert [m.physical_offset for m in got] == [r["offset"] for r in alive]
        kept = [f["name"] for f in index_files if f["endPhyOffset"] >= new_min]
        assert [name for name, _ in store.index_headers()] == kept
        assert report.index_files_deleted == len(index_files) - len(kept) == 2
        for r in records:
            if r["topic"] == "SCHEDULE_TOPIC_XXXX":
                continue
            key = r["keys"].split(" ")[0] if r["keys"] not in (None, "null", "") else None
            if key is not None:
                offsets = {m.physical_offset for m in store.query_message(r["topic"], key)}
                assert (r["offset"] in offsets) == (r["offset"] >= new_min), key
    finally:
        store.close()


# --- 6. a reader holding a segment ------------------------------------------------------------------------


def test_a_held_reader_view_delays_deletion_until_the_forcibly_interval(
    tmp_path: Path, clock: ManualClock
) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        puts = fill(store, 4)
        res = store.get_message("g", "T", 0, 0, 1)
        assert res.status is GetStatus.FOUND
        view = res.messages[0].body_view
        assert res.messages[0].physical_offset < SEG
        del res
        written = next(p.body for p in puts if p.result.queue_id == 0)
        assert bytes(view) == written

        clock.advance(AGE_MS)
        report = store.reclaim()
        assert report.commitlog_segments_deleted == 0  # the round stops at the segment being read
        assert segments_on_disk(tmp_path, store) == [0, SEG, 2 * SEG, 3 * SEG]
        assert store.min_phy_offset() == 0
        # the segment is no longer served to new readers
        again = store.get_message("g", "T", 0, 0)
        assert again.status in (GetStatus.FOUND, GetStatus.MESSAGE_WAS_REMOVING)
        assert all(m.physical_offset >= SEG for m in again.messages)
        del again
        assert store.look_message_by_offset(puts[0].result.physical_offset) is None

        clock.advance(FORCIBLY_MS - 1)
        assert service_round(store).commitlog_segments_deleted == 0
        assert (tmp_path / "commitlog" / f"{0:020d}").exists()
        clock.advance(1)
        report = service_round(store)
        assert report.commitlog_segments_deleted == 3
        assert segments_on_disk(tmp_path, store) == [3 * SEG]
        assert not (tmp_path / "commitlog" / f"{0:020d}").exists()
        # the reader's bytes outlive the file
        assert bytes(view) == written
        assert_queues_consistent(store, puts, 3)
        del view


def test_a_released_reader_lets_the_next_round_delete_at_once(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        puts = fill(store, 3)
        held = store.get_message("g", "T", 1, 0, 1).messages[0]
        clock.advance(AGE_MS)
        assert store.reclaim().commitlog_segments_deleted == 0
        body = held.body
        del held
        assert service_round(store).commitlog_segments_deleted == 2
        assert body == next(p.body for p in puts if p.result.queue_id == 1)
        assert segments_on_disk(tmp_path, store) == [2 * SEG]


def test_key_queries_keep_working_while_an_index_file_waits_for_its_reader(
    tmp_path: Path, clock: ManualClock
) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        puts = fill(store, 8)
        assert len(store.index_headers()) >= 4
        # a lazy query, suspended inside the oldest index file (and holding segment 0's message)
        pending = store.iter_query_message("T", puts[0].key)
        assert next(pending).body == puts[0].body
        clock.advance(AGE_MS)
        store.reclaim()
        clock.advance(FORCIBLY_MS)  # segment 0 goes anyway; the oldest index file is still being read
        report = service_round(store)
        assert report.commitlog_segments_deleted == 7
        last = puts[-1]
        assert [m.body for m in store.query_message("T", last.key)] == [last.body]
        del pending


def test_one_reclaim_call_is_one_round(tmp_path: Path, clock: ManualClock) -> None:
    store = open_store(tmp_path, clock, make_config(clock), quiet=False)
    try:
        fill(store, 16)
        clock.advance(AGE_MS)
        report = store.reclaim()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and len(segments_on_disk(tmp_path, store)) >= 6:
            time.sleep(0.01)  # give the woken thread time to run the extra round, if it does
        assert len(segments_on_disk(tmp_path, store)) == 6
        assert report.commitlog_segments_deleted == 10
    finally:
        store.close()


# --- 7. restarts ------------------------------------------------------------------------------------------


def test_restart_between_two_rounds_of_a_reclamation(tmp_path: Path, clock: ManualClock) -> None:
    cfg = make_config(clock)
    with open_store(tmp_path, clock, cfg) as store:
        puts = fill(store, 17)
        clock.advance(AGE_MS)
        assert store.reclaim().commitlog_segments_deleted == 10  # 6 more are due
    with open_store(tmp_path, clock, cfg) as store:
        assert store.recovery is not None and not store.recovery.abnormal
        assert store.min_phy_offset() == 10 * SEG
        assert segments_on_disk(tmp_path, store) == [i * SEG for i in range(10, 17)]
        assert_queues_consistent(store, puts, 3)
        report = store.reclaim()
        assert report.commitlog_segments_deleted == 6
        assert segments_on_disk(tmp_path, store) == [16 * SEG]
        assert_queues_consistent(store, puts, 3)
        more = fill(store, 18, start=len(puts))
        assert_queues_consistent(store, puts + more, 3)
    with open_store(tmp_path, clock, cfg) as store:
        assert store.min_phy_offset() == 16 * SEG
        assert_queues_consistent(store, puts + more, 3)


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_oldest_segment_unlinked_before_the_queues_were_cleaned(
    tmp_path: Path, clock: ManualClock, shutdown: str
) -> None:
    """As if the process died right after unlinking a segment: the queues and the index still point
    into it. Reopening must give a consistent store, and the next round cleans the rest."""
    cfg = make_config(clock)
    with open_store(tmp_path, clock, cfg) as store:
        puts = fill(store, 6)
        index_before = store.index_headers()
    (tmp_path / "commitlog" / f"{0:020d}").unlink()
    if shutdown == "crash":
        (tmp_path / "abort").touch()  # abnormal recovery
    with open_store(tmp_path, clock, cfg) as store:
        assert store.recovery is not None
        assert store.recovery.abnormal == (shutdown == "crash")
        assert store.min_phy_offset() == SEG
        assert_queues_consistent(store, puts, 3)
        gone = [p for p in puts if p.result.physical_offset < SEG]
        assert gone
        for p in gone:
            assert store.query_message("T", p.key) == []
            assert store.look_message_by_offset(p.result.physical_offset) is None
        # consume-queue segments that pointed only into the lost segment are gone after a round
        service_round(store)
        for qid in range(3):
            first = tmp_path / "consumequeue" / "T" / str(qid) / f"{0:020d}"
            results = [p.result for p in puts if p.result.queue_id == qid]
            assert first.exists() == (results[CQ_ENTRIES - 1].physical_offset >= SEG)
        kept = [n for n, h in index_before if h["endPhyOffset"] >= SEG]
        assert [n for n, _ in store.index_headers()] == kept
        # the store goes on
        more = fill(store, 7, start=len(puts))
        assert_queues_consistent(store, puts + more, 3)


def unflushed_log(directory: Path, *, keep_fds: bool, segments: int = 3) -> MappedFileQueue:
    """A log of ``segments`` full segments, none flushed yet (as the flusher finds them when a
    burst of puts filled them faster than its interval)."""
    directory.mkdir()
    mfq = MappedFileQueue(directory, SEG, keep_fds=keep_fds)
    for i in range(segments):
        mf = mfq.last_for_append()
        mf.write_at(0, bytes([i + 1]) * SEG)
        mf.wrote_position = SEG
    return mfq


def reclaim_oldest(mfq: MappedFileQueue) -> MappedFile:
    oldest = mfq.files[0]
    deleted = mfq.delete_oldest(
        lambda mf: mf is oldest, now_ms=0, forcibly_after_ms=0, max_files=1, pause=lambda: None
    )
    assert deleted == [oldest] and not oldest.path.exists()
    return oldest


@pytest.mark.parametrize("keep_fds", [True, False], ids=["commitlog", "consume-queue"])
def test_a_segment_reclaimed_after_the_flusher_picked_it_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_fds: bool
) -> None:
    """The flusher took the segment holding its flushed position; reclamation deleted it before the
    sync: the sync skips it (its bytes are gone with it) instead of failing the flush service, and
    the next flush still makes every later segment durable."""
    mfq = unflushed_log(tmp_path / "log", keep_fds=keep_fds)
    picked = mfq.find(mfq.flushed_where)  # what CommitLogFlushService.run_once holds
    assert picked is mfq.files[0]
    synced: list[int] = []
    real_fdatasync = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    reclaim_oldest(mfq)
    assert picked.flush() == SEG  # raised FileNotFoundError from the sync
    assert synced == []
    assert mfq.flush(0)
    live = mfq.files
    assert [mf.flushed_position for mf in live] == [SEG, SEG]
    assert mfq.flushed_where == mfq.max_offset == 3 * SEG
    assert sorted(synced) == sorted(os.stat(mf.path).st_ino for mf in live)


def test_a_segment_reclaimed_while_its_sync_runs_keeps_the_descriptor_until_the_sync_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reclamation closes a commitlog segment's kept descriptor: never under a sync using it (the
    sync would fail with EBADF, or sync whatever file took the number)."""
    mfq = unflushed_log(tmp_path / "log", keep_fds=True)
    oldest = mfq.files[0]
    real_fdatasync = os.fdatasync
    reclaimer: list[threading.Thread] = []

    def fdatasync(fd: int) -> None:
        if not reclaimer:  # the first sync is the oldest segment's: reclaim it right now
            thread = threading.Thread(target=reclaim_oldest, args=(mfq,))
            reclaimer.append(thread)
            thread.start()
            thread.join(0.5)  # it finishes here unless it waits for this sync
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    assert oldest.flush() == SEG
    reclaimer[0].join()
    assert not oldest.path.exists() and mfq.files[0].from_offset == SEG
    assert oldest._sync_fd is None
    assert mfq.flush(0)
    assert mfq.flushed_where == 3 * SEG


# --- 8. topics --------------------------------------------------------------------------------------------


def test_create_topic_writes_topics_json_in_rocketmq_shape(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        config = store.create_topic("T", queues=8)
        assert config == TopicConfig("T", 8, 8)
        doc = json.loads((tmp_path / "config" / "topics.json").read_text("utf-8"))
        assert set(doc) == {"dataVersion", "topicConfigTable"}
        assert doc["dataVersion"]["counter"] >= 1
        assert doc["dataVersion"]["timestamp"] == clock.now_ms()
        assert doc["topicConfigTable"] == {
            "T": {
                "topicName": "T",
                "readQueueNums": 8,
                "writeQueueNums": 8,
                "perm": 6,
                "order": False,
                "topicFilterType": "SINGLE_TAG",
                "topicSysFlag": 0,
            }
        }
        assert store.topic_configs() == {"T": config}
        assert store.create_topic("Ordered", 2, perm=4, order=True) == TopicConfig("Ordered", 2, 2, 4, True)
        doc = json.loads((tmp_path / "config" / "topics.json").read_text("utf-8"))
        assert doc["topicConfigTable"]["Ordered"]["perm"] == 4
        assert doc["topicConfigTable"]["Ordered"]["order"] is True
        assert not list((tmp_path / "config").glob("*.tmp"))


def test_create_topic_again_with_the_same_config_keeps_the_data_version(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "config" / "topics.json"
    with open_store(tmp_path, clock, make_config(clock)) as store:
        store.create_topic("T", 8)
        text = path.read_text("utf-8")
        counter = json.loads(text)["dataVersion"]["counter"]
        clock.advance(1000)
        store.create_topic("T", 8)
        assert path.read_text("utf-8") == text
        store.create_topic("T", 4)  # a change: written, the version moves by one
        doc = json.loads(path.read_text("utf-8"))
        assert doc["dataVersion"]["counter"] == counter + 1
        assert doc["topicConfigTable"]["T"]["writeQueueNums"] == 4
        assert store.topic_configs()["T"].write_queues == 4


def test_puts_without_a_queue_go_round_robin(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        store.create_topic("RR", 4)
        singles = [store.put_message(Message("RR", f"s{i}".encode(), queue_id=None)) for i in range(6)]
        batch = store.put_messages([Message("RR", f"b{i}".encode(), queue_id=None) for i in range(6)])
        results = singles + batch
        assert all(r.ok for r in results)
        assert [r.queue_id for r in results] == [i % 4 for i in range(12)]
        assert store.wait_dispatched(5.0)
        bodies = [f"s{i}".encode() for i in range(6)] + [f"b{i}".encode() for i in range(6)]
        for qid in range(4):
            assert store.max_offset_in_queue("RR", qid) == 3
            got = [m.body for m in store.get_message("g", "RR", qid, 0).messages]
            assert got == [b for b, r in zip(bodies, results) if r.queue_id == qid]
        # an explicit queue id is kept, and does not move the round robin
        assert store.put_message(Message("RR", b"x", queue_id=3)).queue_id == 3
        assert store.put_message(Message("RR", b"y", queue_id=None)).queue_id == 0


def test_a_message_names_no_queue_by_default_and_a_single_put_places_it_itself(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default is the store's choice, as for a RocketMQ producer; a single put to a known
    topic places its message without a trip through the batch put."""
    assert Message("RR", b"x").queue_id is None
    with open_store(tmp_path, clock, make_config(clock)) as store:
        store.create_topic("RR", 4)
        monkeypatch.setattr(store, "put_messages", None)  # a call would raise TypeError
        results = [store.put_message(Message("RR", f"s{i}".encode())) for i in range(8)]
        sharded = store.put_message(Message("RR", b"k", properties={"__SHARDINGKEY": "order-3"}))
        assert all(r.ok for r in [*results, sharded])
        assert [r.queue_id for r in results] == [0, 1, 2, 3, 0, 1, 2, 3]
        assert sharded.queue_id == abs(java_hash("order-3")) % 4
        monkeypatch.undo()
        assert store.wait_dispatched(5.0)
        assert [store.max_offset_in_queue("RR", q) for q in range(4)] == [
            2 + (q == sharded.queue_id) for q in range(4)
        ]


def test_round_robin_follows_the_write_queue_count(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        store.create_topic("Two", 2)
        assert [store.put_message(Message("Two", b"x", queue_id=None)).queue_id for _ in range(4)] == [
            0,
            1,
            0,
            1,
        ]


def test_sharding_key_picks_a_stable_queue(tmp_path: Path, clock: ManualClock) -> None:
    keys = [f"order-{i}" for i in range(24)] + ["polygenelubricants"]
    with open_store(tmp_path, clock, make_config(clock)) as store:
        store.create_topic("S", 4)
        seen: dict[str, set[int]] = {}
        for _ in range(3):
            for key in keys:
                r = store.put_message(
                    Message("S", key.encode(), properties={"__SHARDINGKEY": key}, queue_id=None)
                )
                assert r.ok
                seen.setdefault(key, set()).add(r.queue_id)
        for key, qids in seen.items():
            assert qids == {abs(java_hash(key)) % 4}, key
        assert java_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE: abs() stays in range
        assert len({q for qs in seen.values() for q in qs}) > 1
        assert store.wait_dispatched(5.0)
        # all messages of a key are in one queue, in put order
        q = next(iter(seen["order-3"]))
        bodies = [m.body for m in read_queue(store, "S", q, 0)]
        assert bodies.count(b"order-3") == 3


def test_a_put_to_an_unknown_topic_creates_it(tmp_path: Path, clock: ManualClock) -> None:
    cfg = make_config(clock)
    with open_store(tmp_path, clock, cfg) as store:
        assert store.put_message(Message("Auto", b"x", queue_id=None)).ok
        assert store.put_message(Message("Wide", b"x", queue_id=6)).ok
        assert store.put_message(Message("Narrow", b"x", queue_id=2)).ok
        configs = store.topic_configs()
        assert configs["Auto"] == TopicConfig("Auto", 4, 4)
        assert configs["Wide"] == TopicConfig("Wide", 7, 7)
        assert configs["Narrow"] == TopicConfig("Narrow", 4, 4)
        table = json.loads((tmp_path / "config" / "topics.json").read_text("utf-8"))["topicConfigTable"]
        assert set(table) == {"Auto", "Wide", "Narrow"}
    with open_store(tmp_path, clock, cfg.replace(default_topic_queue_nums=2)) as store:
        assert store.put_message(Message("Later", b"x", queue_id=None)).ok
        assert store.topic_configs()["Later"].write_queues == 2
        assert store.topic_configs()["Auto"].write_queues == 4


def test_topics_survive_reopen(tmp_path: Path, clock: ManualClock) -> None:
    cfg = make_config(clock)
    with open_store(tmp_path, clock, cfg) as store:
        store.create_topic("Kept", 6, perm=4, order=True)
        store.create_topic("Other", 1)
        before = store.topic_configs()
    with open_store(tmp_path, clock, cfg) as store:
        assert store.topic_configs() == before
        assert store.put_message(Message("Other", b"x", queue_id=None)).queue_id == 0


def test_topics_with_queues_on_disk_are_known_without_topics_json(tmp_path: Path, clock: ManualClock) -> None:
    cfg = make_config(clock)
    with open_store(tmp_path, clock, cfg) as store:
        for qid in (0, 5):
            assert store.put_message(Message("Disk", b"x", queue_id=qid)).ok
        assert store.wait_dispatched(5.0)
    (tmp_path / "config" / "topics.json").unlink()
    with open_store(tmp_path, clock, cfg) as store:
        assert store.topic_configs()["Disk"] == TopicConfig("Disk", 6, 6)
        assert not (tmp_path / "config" / "topics.json").exists()  # loading writes nothing
        assert store.put_message(Message("Disk", b"y", queue_id=None)).queue_id == 0


def test_topics_of_a_rocketmq_store_are_known(tmp_path: Path) -> None:
    root = copy_fixture("store-sample", tmp_path)
    with MessageStore.open(root, FIXTURE_CONFIG, clock=fixture_clock("store-sample")) as store:
        configs = store.topic_configs()
        for topic in ("TopicA", "TopicB", "TopicC"):
            assert configs[topic] == TopicConfig(topic, 4, 4)


ROCKETMQ_TOPICS_JSON = """{
\t"dataVersion":{
\t\t"counter":7,
\t\t"timestamp":1700000000000
\t},
\t"topicConfigTable":{
\t\t"TopicA":{
\t\t\t"order":false,
\t\t\t"perm":6,
\t\t\t"readQueueNums":4,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"TopicA",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":4
\t\t},
\t\t"Narrow":{
\t\t\t"order":true,
\t\t\t"perm":6,
\t\t\t"readQueueNums":8,
\t\t\t"topicFilterType":"MULTI_TAG",
\t\t\t"topicName":"Narrow",
\t\t\t"topicSysFlag":1,
\t\t\t"writeQueueNums":2
\t\t},
\t\t"ReadOnly":{
\t\t\t"order":false,
\t\t\t"perm":4,
\t\t\t"readQueueNums":1,
\t\t\t"topicFilterType":"SINGLE_TAG",
\t\t\t"topicName":"ReadOnly",
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":1
\t\t}
\t}
}"""


def test_a_topics_json_written_by_rocketmq_loads(tmp_path: Path, clock: ManualClock) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "topics.json").write_text(ROCKETMQ_TOPICS_JSON, "utf-8")
    with open_store(tmp_path, clock, make_config(clock)) as store:
        configs = store.topic_configs()
        assert configs == {
            "TopicA": TopicConfig("TopicA", 4, 4, 6, False, 0, "SINGLE_TAG"),
            "Narrow": TopicConfig("Narrow", 8, 2, 6, True, 1, "MULTI_TAG"),
            "ReadOnly": TopicConfig("ReadOnly", 1, 1, 4),
        }
        # round robin over the write queues
        picks = [store.put_message(Message("Narrow", b"x", queue_id=None)).queue_id for _ in range(4)]
        assert picks == [0, 1, 0, 1]
        store.create_topic("New", 1)
    doc = json.loads((tmp_path / "config" / "topics.json").read_text("utf-8"))
    assert doc["dataVersion"]["counter"] == 8  # the version goes on from RocketMQ's
    assert doc["topicConfigTable"]["Narrow"] == {
        "topicName": "Narrow",
        "readQueueNums": 8,
        "writeQueueNums": 2,
        "perm": 6,
        "order": True,
        "topicFilterType": "MULTI_TAG",
        "topicSysFlag": 1,
    }


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        '{"topicConfigTable": {"T": 3}}',
        '{"topicConfigTable": {"T": {"readQueueNums": "4"}}}',
    ],
)
def test_a_corrupt_topics_json_is_reported_at_open(tmp_path: Path, clock: ManualClock, text: str) -> None:
    path = tmp_path / "config" / "topics.json"
    path.parent.mkdir()
    path.write_text(text, "utf-8")
    with pytest.raises(CorruptDataError, match=r"topics\.json"):
        open_store(tmp_path, clock, make_config(clock))
    path.unlink()
    with open_store(tmp_path, clock, make_config(clock)) as store:  # released: opens once repaired
        assert store.topic_configs() == {}


@pytest.mark.parametrize(
    "name",
    [
        "",
        "bad topic",
        "a/b",
        "x" * 128,
        "T@g",
        "SCHEDULE_TOPIC_XXXX",
        "schedule_topic_xxxx",
        "RMQ_SYS_TRACE",
        "rmq_sys_ROCKETSTORE_POP_LOG",  # the system prefix in any case, as the broker refuses it
        "Rmq_Sys_X",
    ],
)
def test_invalid_topic_names_are_refused(tmp_path: Path, clock: ManualClock, name: str) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        with pytest.raises(InvalidMessageError):
            store.create_topic(name, 4)
        with pytest.raises(InvalidMessageError):
            store.put_message(Message(name, b"x", queue_id=None))
        assert store.topic_configs() == {}
    assert not (tmp_path / "config" / "topics.json").exists()


def test_the_stores_own_puts_use_system_topics_in_any_case(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        for topic in ("RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_wheel_timer"):
            assert store.put_messages([Message(topic, b"x", queue_id=0)], internal=True)[0].ok
        assert set(store.topic_configs()) == {"RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_wheel_timer"}


@pytest.mark.parametrize("queues", [-1, 1025])
def test_invalid_queue_counts_are_refused(tmp_path: Path, clock: ManualClock, queues: int) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        with pytest.raises(StoreConfigError):
            store.create_topic("T", queues)
        assert store.topic_configs() == {}
        assert store.create_topic("T", 1024).write_queues == 1024
        assert store.create_topic("U").write_queues == 4  # no count: default_topic_queue_nums


def test_zero_queues_are_refused(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store, pytest.raises(StoreConfigError):
        store.create_topic("T", 0)


def test_a_refused_create_topic_on_a_readonly_store_changes_nothing(
    tmp_path: Path, clock: ManualClock
) -> None:
    cfg = make_config(clock)
    with open_store(tmp_path, clock, cfg) as store:
        store.create_topic("T", 4)
    with MessageStore.open(tmp_path, cfg, clock=clock, readonly=True) as ro:
        with pytest.raises(StoreReadOnlyError):
            ro.create_topic("New", 4)
        with pytest.raises(StoreReadOnlyError):
            ro.create_topic("T", 8)
        assert ro.topic_configs() == {"T": TopicConfig("T", 4, 4)}


# --- 9. consumer offsets ----------------------------------------------------------------------------------


def test_commit_and_query_offsets(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        assert store.query_offset("g", "T", 0) == -1
        store.commit_offset("g", "T", 0, 12)
        store.commit_offset("g", "T", 1, 5)
        store.commit_offset("other", "T", 0, 3)
        assert store.query_offset("g", "T", 0) == 12
        store.commit_offset("g", "T", 0, 14)
        assert store.query_offset("g", "T", 0) == 14
        assert store.query_offset("g", "T", 2) == -1
        assert store.query_offset("g", "U", 0) == -1
        assert store.query_offset("other", "T", 0) == 3
        assert store.consumer_offsets() == {("T", "g"): {0: 14, 1: 5}, ("T", "other"): {0: 3}}
        table = store.consumer_offsets()
        table[("T", "g")][0] = 99  # a copy
        assert store.query_offset("g", "T", 0) == 14


@pytest.mark.parametrize("group", ["", "a@b"])
def test_offset_commits_of_invalid_groups_are_refused(tmp_path: Path, clock: ManualClock, group: str) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        with pytest.raises(StoreConfigError):
            store.commit_offset(group, "T", 0, 1)
        assert store.consumer_offsets() == {}


@pytest.mark.parametrize(
    "queue_id, offset, named",
    [
        (-1, 1, "queue_id must be in 0..65535, not -1"),
        (65536, 1, "queue_id must be in 0..65535, not 65536"),
        (1 << 64, 1, f"queue_id must be in 0..65535, not {1 << 64}"),
        (0, -1, "offset must be in 0..2^63-1, not -1"),
        (0, 1 << 63, f"offset must be in 0..2^63-1, not {1 << 63}"),
        (0, 1 << 64, f"offset must be in 0..2^63-1, not {1 << 64}"),
        (0, "12", "offset must be an int, not str '12'"),
        (0, 1.5, "offset must be an int, not float 1.5"),
        ("0", 1, "queue_id must be an int, not str '0'"),
    ],
)
def test_offset_commits_out_of_range_are_refused_naming_the_value(
    tmp_path: Path, clock: ManualClock, queue_id: Any, offset: Any, named: str
) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        with pytest.raises(InvalidArgumentError) as err:
            store.commit_offset("g", "T", queue_id, offset)
        assert str(err.value) == named
        store.commit_offset("g", "T", 65535, (1 << 63) - 1)  # the largest that are valid
        assert store.consumer_offsets() == {("T", "g"): {65535: (1 << 63) - 1}}
    with open_store(tmp_path, clock, make_config(clock)) as store:
        assert store.consumer_offsets() == {("T", "g"): {65535: (1 << 63) - 1}}


def test_offsets_are_written_at_close_as_standard_json(tmp_path: Path, clock: ManualClock) -> None:
    cfg = make_config(clock)
    path = tmp_path / "config" / "consumerOffset.json"
    with open_store(tmp_path, clock, cfg) as store:
        store.commit_offset("g", "TopicA", 0, 12)
        store.commit_offset("g", "TopicA", 1, 5)
        store.commit_offset("h", "TopicB", 3, 7)
    assert json.loads(path.read_text("utf-8")) == {
        "offsetTable": {"TopicA@g": {"0": 12, "1": 5}, "TopicB@h": {"3": 7}}
    }
    assert not list(path.parent.glob("*.tmp"))
    with open_store(tmp_path, clock, cfg) as store:
        assert store.consumer_offsets() == {("TopicA", "g"): {0: 12, 1: 5}, ("TopicB", "h"): {3: 7}}


def test_offsets_are_written_periodically(tmp_path: Path, clock: ManualClock) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    with open_store(tmp_path, clock, make_config(clock, flush_consumer_offset_interval=20)) as store:
        store.commit_offset("g", "T", 0, 42)
        deadline = time.monotonic() + 1.5
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        # what a crash now would leave: the file, complete
        assert json.loads(path.read_text("utf-8")) == {"offsetTable": {"T@g": {"0": 42}}}
        assert not list(path.parent.glob("*.tmp"))


@pytest.mark.parametrize(
    "text",
    [
        '{"offsetTable":{"TopicA@g":{0:12,1:5},"TopicB@h":{3:7}}}',
        '{\n\t"offsetTable":{\n\t\t"TopicA@g":{0:12,1:5\n\t\t},\n\t\t"TopicB@h":{\n\t\t\t3:7\n\t\t}\n\t}\n}',
        '{"offsetTable":{"TopicA@g":{"0":12,"1":5},"TopicB@h":{"3":7}},'
        '"dataVersion":{"counter":3,"timestamp":1700000000000}}',
    ],
    ids=["fastjson", "fastjson-pretty", "quoted-with-extra-fields"],
)
def test_an_offset_file_written_by_rocketmq_loads(tmp_path: Path, clock: ManualClock, text: str) -> None:
    cfg = make_config(clock)
    path = tmp_path / "config" / "consumerOffset.json"
    path.parent.mkdir()
    path.write_text(text, "utf-8")
    with open_store(tmp_path, clock, cfg) as store:
        assert store.consumer_offsets() == {("TopicA", "g"): {0: 12, 1: 5}, ("TopicB", "h"): {3: 7}}
        assert store.query_offset("g", "TopicA", 1) == 5
    assert path.read_text("utf-8") == text  # nothing committed: not rewritten


@pytest.mark.parametrize("text", ["{not json", "[]", '{"offsetTable": []}', ""])
def test_a_corrupt_offset_file_is_reported_at_open(tmp_path: Path, clock: ManualClock, text: str) -> None:
    cfg = make_config(clock)
    path = tmp_path / "config" / "consumerOffset.json"
    path.parent.mkdir()
    path.write_text(text, "utf-8")
    with pytest.raises(CorruptDataError) as err:
        open_store(tmp_path, clock, cfg)
    assert str(path) in str(err.value)
    assert not (tmp_path / "abort").exists()  # a failed open leaves no trace
    assert path.read_text("utf-8") == text
    path.unlink()
    with open_store(tmp_path, clock, cfg) as store:  # the lock was released
        assert store.consumer_offsets() == {}


BAD_OFFSET_ENTRIES = {
    "no-separator": {"0": 1},
    "T@bad-offsets": {
        "0": 1 << 64,  # what a client once stored through a pull's commit offset
        "1": -(1 << 64),
        "2": -1,
        "3": "12",
        "4": 1.5,
        "5": None,
        "6": [1],
        "7": {"x": 1},
        "8": True,
        "9": 7,  # the one good offset of the entry
    },
    "T@bad-queues": {str(1 << 64): 1, "-1": 2, "65536": 3, "zero": 4, "٣": 5, "": 6},
    "T@not-an-object": [1, 2],
    "Orders@billing": {"0": 12, "1": 5},
}


def test_bad_entries_of_the_offset_file_are_left_out_and_the_store_opens(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = make_config(clock)
    path = tmp_path / "config" / "consumerOffset.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"offsetTable": BAD_OFFSET_ENTRIES}), "utf-8")
    kept = {("Orders", "billing"): {0: 12, 1: 5}, ("T", "bad-offsets"): {9: 7}}
    logs = caplog.at_level("WARNING", logger="rocketstore.consumer.offset_store")
    with logs, open_store(tmp_path, clock, cfg) as store:
        assert store.consumer_offsets() == kept
        assert store.query_offset("billing", "Orders", 1) == 5
        assert store.query_offset("bad-offsets", "T", 0) == -1
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings  # one line for the whole file
    assert "17 bad entries left out (the next write drops them): " in warnings[0]
    assert str(1 << 64) in warnings[0] and warnings[0].endswith("; and 14 more")
    with MessageStore.open(tmp_path, cfg, clock=clock, readonly=True) as ro:
        assert ro.consumer_offsets() == kept
    # the writer's next write leaves them out of the file
    with open_store(tmp_path, clock, cfg) as store:
        store.commit_offset("billing", "Orders", 0, 13)
    assert json.loads(path.read_text("utf-8")) == {
        "offsetTable": {"Orders@billing": {"0": 13, "1": 5}, "T@bad-offsets": {"9": 7}}
    }


def test_bad_entries_of_the_delay_offset_file_are_left_out(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = make_config(clock)
    path = tmp_path / "config" / "delayOffset.json"
    path.parent.mkdir()
    text = json.dumps(
        {"offsetTable": {"1": 1 << 64, "2": "x", "x": 3, "4": 0}, "rocketstoreCommitLogOffset": "nope"}
    )
    path.write_text(text, "utf-8")
    logs = caplog.at_level("WARNING", logger="rocketstore.schedule")
    with logs, open_store(tmp_path, clock, cfg) as store:
        assert store.put_message(Message(topic="T", body=b"x", queue_id=0, delay_level=1)).ok
        store.wait_dispatched()
        assert store.delay_progress() == {1: (0, 1)}  # level 1's bad offset: from its first message
    assert [r.getMessage().split(": ", 1)[1] for r in caplog.records] == [
        f"4 bad entries left out (the next write drops them): level 1: {1 << 64} is out of range "
        "-9223372036854775808..9223372036854775807; level 2: expected an integer, got 'x'; "
        "delay level 'x' is not an integer; and 1 more"  # the same line as the offsets file's
    ]


def test_a_leftover_tmp_file_from_a_crash_is_ignored(tmp_path: Path, clock: ManualClock) -> None:
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "consumerOffset.json").write_text('{"offsetTable": {"T@g": {"0": 4}}}', "utf-8")
    (config_dir / "consumerOffset.json.tmp").write_text('{"offsetTable": {"T@g": {"0"', "utf-8")
    with open_store(tmp_path, clock, make_config(clock)) as store:
        assert store.query_offset("g", "T", 0) == 4
        store.commit_offset("g", "T", 0, 5)
    assert json.loads((config_dir / "consumerOffset.json").read_text("utf-8")) == {
        "offsetTable": {"T@g": {"0": 5}}
    }
    assert not (config_dir / "consumerOffset.json.tmp").exists()


def test_a_readonly_store_writes_no_config_file(tmp_path: Path, clock: ManualClock) -> None:
    cfg = make_config(clock)
    with open_store(tmp_path, clock, cfg) as store:
        store.create_topic("T", 2)
        store.commit_offset("g", "T", 0, 1)
        fill(store, 2)
    config_dir = tmp_path / "config"
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in config_dir.iterdir()}
    clock.advance(AGE_MS)
    with MessageStore.open(tmp_path, cfg, clock=clock, readonly=True, disk_usage=Disk(0.99)) as ro:
        assert ro.query_offset("g", "T", 0) == 1
        with pytest.raises(StoreReadOnlyError, match="is open read-only: offset commits need"):
            ro.commit_offset("g", "T", 0, 2)
        with pytest.raises(StoreReadOnlyError, match="topic changes"):
            ro.create_topic("New", 2)
        for msg in (Message("T", b"x"), Message("T", b"x", queue_id=1), Message("Unknown", b"x")):
            with pytest.raises(StoreReadOnlyError, match="puts need it opened without readonly=True"):
                ro.put_message(msg)
            with pytest.raises(StoreReadOnlyError):
                ro.put_messages([msg])
        with pytest.raises(StoreReadOnlyError, match="reclaims"):
            ro.reclaim()
        assert not ro.disk_full
        assert ro.query_offset("g", "T", 0) == 1
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in config_dir.iterdir()}
    assert after == before
    assert segments_after_close(tmp_path) == [0, SEG]


def segments_after_close(root: Path) -> list[int]:
    return sorted(int(p.name) for p in (root / "commitlog").iterdir() if p.name.isdigit())


def test_a_readonly_open_of_a_store_without_config_creates_nothing(
    tmp_path: Path, clock: ManualClock
) -> None:
    cfg = make_config(clock)
    with open_store(tmp_path, clock, cfg) as store:
        fill(store, 1)
    shutil.rmtree(tmp_path / "config", ignore_errors=True)
    with MessageStore.open(tmp_path, cfg, clock=clock, readonly=True) as ro:
        assert ro.consumer_offsets() == {}
        assert set(ro.topic_configs()) == {"T"}
    assert not (tmp_path / "config").exists()


def test_an_accepted_group_name_survives_a_restart(tmp_path: Path, clock: ManualClock) -> None:
    cfg = make_config(clock)
    with open_store(tmp_path, clock, cfg) as store:
        try:
            store.commit_offset("g,0:x", "T", 0, 5)
        except RocketStoreError:
            return  # refusing the name is a fine answer too
    with open_store(tmp_path, clock, cfg) as store:
        assert store.query_offset("g,0:x", "T", 0) == 5


def test_an_accepted_topic_name_survives_a_restart(tmp_path: Path, clock: ManualClock) -> None:
    cfg = make_config(clock)
    with open_store(tmp_path, clock, cfg) as store:
        try:
            store.commit_offset("g", "a@b", 0, 7)
        except RocketStoreError:
            return  # refusing the name is a fine answer too
    with open_store(tmp_path, clock, cfg) as store:
        assert store.query_offset("g", "a@b", 0) == 7


# --- 10. runtime_info -------------------------------------------------------------------------------------


RUNTIME_KEYS = {
    "putTps",
    "getFoundTps",
    "getMissTps",
    "putMessageTimesTotal",
    "commitLogDiskRatio",
    "consumeQueueDiskRatio",
    "commitLogMinOffset",
    "commitLogMaxOffset",
    "dispatchBehindBytes",
    "remainHowManyDataToFlush",
    "earliestMessageTimeStamp",
    "pageCacheLockTimeMills",
    "remainTransientStoreBufferNumbs",
    "diskFull",
    "delayedPending",
}


def test_runtime_info_reports_the_store_state(tmp_path: Path, clock: ManualClock) -> None:
    disk = Disk(0.42)
    with open_store(tmp_path, clock, make_config(clock), disk) as store:
        store._stats.stop()  # samples only when the test takes them
        info = store.runtime_info()
        assert set(info) >= RUNTIME_KEYS
        for key in ("putTps", "getFoundTps", "getMissTps"):
            rates = info[key]
            assert isinstance(rates, list) and len(rates) == 3
            assert all(isinstance(x, float) for x in rates)
        assert info["putMessageTimesTotal"] == 0
        assert info["commitLogMinOffset"] == store.min_phy_offset() == -1
        assert info["commitLogMaxOffset"] == 0
        assert info["earliestMessageTimeStamp"] == -1
        assert info["diskFull"] is False
        assert info["commitLogDiskRatio"] == 0.42
        assert info["delayedPending"] == {}

        first_time = clock.now_ms()
        puts = fill(store, 4, clock=clock)  # 1 ms per put
        clock.advance(10_000)
        store._stats.sample()
        assert store.get_message("g", "T", 0, 0).found
        assert store.get_message("g", "T", 0, 0).found
        assert store.get_message("g", "Nope", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        clock.advance(10_000)
        info = store.runtime_info()
        assert info["putMessageTimesTotal"] == len(puts)
        assert info["getMessageTimesTotalFound"] == 2
        assert info["commitLogMinOffset"] == store.min_phy_offset() == 0
        assert info["commitLogMaxOffset"] == store.max_phy_offset()
        assert info["dispatchBehindBytes"] == 0
        assert info["earliestMessageTimeStamp"] == first_time
        assert isinstance(info["remainHowManyDataToFlush"], int) and info["remainHowManyDataToFlush"] >= 0
        assert isinstance(info["pageCacheLockTimeMills"], int)
        assert info["remainTransientStoreBufferNumbs"] == 0
        put_tps, found_tps = info["putTps"], info["getFoundTps"]
        assert isinstance(put_tps, list) and isinstance(found_tps, list)
        assert put_tps[0] == 0.0  # nothing put in the last 10 s
        elapsed_s = (clock.now_ms() - first_time) / 1000  # since the only older sample
        assert put_tps[1] == put_tps[2] == round(len(puts) / elapsed_s, 1)
        assert found_tps[0] == round(2 / 10, 1)

        # after a reclamation and with the disk full
        disk.ratio = 0.95
        store.reclaim()
        refused = store.put_message(Message("T", b"x", queue_id=0))
        assert refused.status is PutStatus.DISK_FULL
        info = store.runtime_info()
        assert info["commitLogMinOffset"] == store.min_phy_offset() == 3 * SEG
        assert info["commitLogMaxOffset"] == store.max_phy_offset()
        assert info["putMessageTimesTotal"] == len(puts)  # refused puts do not count
        assert info["diskFull"] is True
        assert info["commitLogDiskRatio"] == 0.95
        first_left = min(p.result.store_timestamp for p in surviving(puts, 3 * SEG))
        assert first_left > first_time
        assert info["earliestMessageTimeStamp"] == first_left


def test_every_get_that_finds_nothing_counts_as_a_miss(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        assert store.put_message(Message("T", b"x", queue_id=0)).ok
        assert store.wait_dispatched(5.0)
        assert store.get_message("g", "T", 0, 0).found
        # a consumer that has caught up polls at the max offset: RocketMQ's commonest miss
        assert store.get_message("g", "T", 0, 1).status is GetStatus.OFFSET_OVERFLOW_ONE
        assert store.get_message("g", "T", 0, 5).status is GetStatus.OFFSET_OVERFLOW_BADLY
        assert store.get_message("g", "T", 7, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        info = store.runtime_info()
        assert info["getMessageTimesTotalFound"] == 1
        assert info["getMessageTimesTotalMiss"] == 3


def test_a_closed_store_refuses_lifecycle_calls(tmp_path: Path, clock: ManualClock) -> None:
    store = open_store(tmp_path, clock, make_config(clock))
    store.close()
    for call in (
        store.reclaim,
        store.runtime_info,
        store.topic_configs,
        store.consumer_offsets,
        lambda: store.create_topic("T", 4),
        lambda: store.commit_offset("g", "T", 0, 1),
        lambda: store.query_offset("g", "T", 0),
    ):
        with pytest.raises(StoreClosedError):
            call()


def test_a_topic_without_write_permission_refuses_puts(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, make_config(clock)) as store:
        store.create_topic("ReadOnlyTopic", 2, perm=4)
        with pytest.raises(InvalidMessageError, match="not writable"):
            store.put_message(Message("ReadOnlyTopic", b"x", queue_id=0))
        assert store.max_offset_in_queue("ReadOnlyTopic", 0) == 0
        store.create_topic("ReadOnlyTopic", 2, perm=6)
        assert store.put_message(Message("ReadOnlyTopic", b"x", queue_id=0)).ok
