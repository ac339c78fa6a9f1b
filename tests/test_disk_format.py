"""On-disk format: what RocketMQ 4.9.8 would load from a rocketstore directory must be exact.

The layouts are checked twice over: with raw ``struct`` against STORE.md (so the tests do not
merely mirror the implementation) and, where convenient, with the ``rocketstore.codec`` modules
that own the formats. The index checks use a reference model (entries in put order, 255 per
file, per-slot chains) that is validated against the index files RocketMQ 4.9.8 itself wrote.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import stat
import struct
import time
import zlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from rocketstore import ManualClock, Message, MessageStore, PutStatus, StoreConfig
from rocketstore.codec import consume_queue_entry, index_layout
from rocketstore.codec.checkpoint import decode_checkpoint
from rocketstore.codec.commitlog_record import SegmentScan
from rocketstore.codec.java_hash import index_key_hash
from rocketstore.codec.java_hash import java_hash as codec_java_hash
from rocketstore.errors import StoreConfigError
from rocketstore.results import GetStatus, PutMessageResult
from tests.conftest import FIXTURES, fixture_clock

# --- geometry and constants (STORE.md) -----------------------------------------------------------
SEGMENT = 65536
CQ_ENTRIES = 40
CQ_FILE = CQ_ENTRIES * 20  # 800
SLOTS = 64
INDEX_MAX = 256
INDEX_FILE = 40 + SLOTS * 4 + INDEX_MAX * 20  # 5416
CFG = StoreConfig(
    commitlog_segment_size=SEGMENT,
    consume_queue_entries=CQ_ENTRIES,
    index_hash_slots=SLOTS,
    index_max_entries=INDEX_MAX,
)
MESSAGE_MAGIC = -626843481  # 0xDAA320A7
BLANK_MAGIC = -875286124  # 0xCBD43194
START_MS = 1_700_000_000_000


# --- reference implementations written from the spec ------------------------------------------
def java_hash(s: str) -> int:
    """Java's String.hashCode: h = 31*h + c over UTF-16 code units, signed 32-bit."""
    raw = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(raw), 2):
        h = (31 * h + int.from_bytes(raw[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def tags_code_ref(tags: str | None) -> int:
    return java_hash(tags) if tags else 0


def index_hash_ref(key: str) -> int:
    h = java_hash(key)
    return 0 if h == -(1 << 31) else abs(h)


def decode_props(raw: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in raw.decode("utf-8").split("\x02"):
        name, sep, value = entry.partition("\x01")
        if sep and name and value:
            out[name] = value
    return out


@dataclass(frozen=True)
class RawRecord:
    position: int  # in its segment
    total: int
    magic: int
    crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_ts: int
    born_addr: bytes
    born_port: int
    store_ts: int
    store_addr: bytes
    store_port: int
    reconsume: int
    prepared: int
    body: bytes
    topic: str
    props: dict[str, str]
    props_raw: bytes


def parse_record(buf: bytes, pos: int) -> RawRecord:
    """A 4.x MESSAGE record at ``buf[pos:]``, field by field as STORE.md §2.1 lists them."""
    total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts = struct.unpack_from(
        ">iiiiiqqiq", buf, pos
    )
    assert magic == MESSAGE_MAGIC, f"bad magic {magic:#x} at {pos}"
    p = pos + 48
    born_len = 16 if sys_flag & 0x10 else 4
    born_addr = buf[p : p + born_len]
    (born_port, store_ts) = struct.unpack_from(">iq", buf, p + born_len)
    p += born_len + 12
    store_len = 16 if sys_flag & 0x20 else 4
    store_addr = buf[p : p + store_len]
    (store_port, reconsume, prepared, body_len) = struct.unpack_from(">iiqi", buf, p + store_len)
    p += store_len + 20
    body = buf[p : p + body_len]
    p += body_len
    topic_len = buf[p]
    topic = buf[p + 1 : p + 1 + topic_len].decode("utf-8")
    p += 1 + topic_len
    (props_len,) = struct.unpack_from(">h", buf, p)
    props = buf[p + 2 : p + 2 + props_len]
    p += 2 + props_len
    formula = (
        4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + (born_len + 4)
        + 8
        + (store_len + 4)
        + 4
        + 8
        + 4
        + body_len
        + 1
        + topic_len
        + 2
        + props_len
    )
    assert total == formula == p - pos, f"TOTALSIZE {total} at {pos}, the parts sum to {formula}"
    return RawRecord(
        pos,
        total,
        magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        phys,
        sys_flag,
        born_ts,
        born_addr,
        born_port,
        store_ts,
        store_addr,
        store_port,
        reconsume,
        prepared,
        body,
        topic,
        decode_props(props),
        props,
    )


@dataclass
class SegmentWalk:
    start: int  # global offset of byte 0
    records: list[RawRecord]
    data_end: int  # position just past the last record
    blank: int | None  # TOTALSIZE of the closing BLANK record, None if the data ends in zeros


def walk_segment(path: Path) -> SegmentWalk:
    """Parse a commitlog segment from byte 0 with nothing but the spec."""
    buf = path.read_bytes()
    assert len(buf) == SEGMENT, f"{path.name} is {len(buf)} bytes"
    start = int(path.name)
    pos = 0
    records: list[RawRecord] = []
    blank = None
    while pos + 8 <= len(buf):
        total, magic = struct.unpack_from(">ii", buf, pos)
        if magic == BLANK_MAGIC:
            blank = total
            assert total == len(buf) - pos, f"{path.name}: BLANK at {pos} says {total}, {len(buf) - pos} left"
            break
        if total == 0 and magic == 0:
            break
        rec = parse_record(buf, pos)
        assert rec.physical_offset == start + pos, f"{path.name}@{pos}: PHYSICALOFFSET {rec.physical_offset}"
        records.append(rec)
        pos += total
    if blank is None:
        assert buf[pos:] == bytes(len(buf) - pos), f"{path.name}: non-zero bytes after the data at {pos}"
    else:
        assert len(buf) - pos >= 8, "a BLANK record needs 8 bytes"
    return SegmentWalk(start, records, pos, blank)


def walk_commitlog(root: Path) -> list[SegmentWalk]:
    """Every segment parsed from byte 0; checks the roll rule between consecutive segments."""
    paths = sorted((root / "commitlog").iterdir())
    walks = [walk_segment(p) for p in paths]
    for cur, nxt in itertools.pairwise(walks):
        assert cur.blank is not None, f"segment {cur.start} is followed by another but ends in zeros"
        assert nxt.records, f"segment {nxt.start} follows a BLANK but holds no record"
        # the BLANK was written because the next record did not fit with 8 bytes to spare
        assert nxt.records[0].total + 8 > cur.blank
    if walks:
        assert walks[-1].blank is None, "the last segment must end in zeros, not a BLANK record"
    return walks


def all_records(walks: Sequence[SegmentWalk]) -> list[RawRecord]:
    return [r for w in walks for r in w.records]


def cq_entry(root: Path, topic: str, queue_id: int, queue_offset: int) -> tuple[int, int, int]:
    """The consume-queue entry of ``queue_offset``, read from the right segment file with struct."""
    logical = queue_offset * 20
    seg = root / "consumequeue" / topic / str(queue_id) / f"{logical - logical % CQ_FILE:020d}"
    data = seg.read_bytes()
    offset, size, tags = struct.unpack_from(">qiq", data, logical % CQ_FILE)
    return offset, size, tags


def index_name(ms: int) -> str:
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms / 1000)) + f"{ms % 1000:03d}"


@dataclass
class IndexFileView:
    name: str
    header: tuple[int, int, int, int, int, int]
    slots: tuple[int, ...]
    entries: list[tuple[int, int, int, int]]


def read_index_file(path: Path) -> IndexFileView:
    data = path.read_bytes()
    assert len(data) == INDEX_FILE, f"{path.name} is {len(data)} bytes"
    header = struct.unpack_from(">qqqqii", data, 0)
    slots = struct.unpack_from(f">{SLOTS}i", data, 40)
    entries = [struct.unpack_from(">iqii", data, 40 + SLOTS * 4 + n * 20) for n in range(INDEX_MAX)]
    return IndexFileView(path.name, header, slots, entries)


def check_index_structure(view: IndexFileView) -> dict[int, list[int]]:
    """Slot chains of one file: strictly decreasing, right slot, every entry in exactly one chain."""
    count = view.header[5]
    hash_slot_count = view.header[4]
    assert 1 <= count <= INDEX_MAX
    assert view.entries[0] == (0, 0, 0, 0), "entry 0 is never used"
    for n in range(count, INDEX_MAX):
        assert view.entries[n] == (0, 0, 0, 0), f"{view.name}: entry {n} past indexCount {count} is not zero"
    assert sum(1 for s in view.slots if s != 0) == hash_slot_count
    chains: dict[int, list[int]] = {}
    visited: list[int] = []
    for slot, head in enumerate(view.slots):
        if head == 0:
            continue
        chain = []
        n = head
        while n != 0:
            assert 0 < n < count, f"{view.name}: slot {slot} chain reaches entry {n} (indexCount {count})"
            assert not chain or n < chain[-1], f"{view.name}: chain of slot {slot} does not strictly decrease"
            key_hash, _, _, prev = view.entries[n]
            assert key_hash % SLOTS == slot
            chain.append(n)
            n = prev
        chains[slot] = chain
        visited.extend(chain)
    assert sorted(visited) == list(range(1, count)), f"{view.name}: entries not in exactly one chain"
    return chains


def check_index_model(views: Sequence[IndexFileView], keyed: Sequence[tuple[str, int, int]]) -> None:
    """The files hold exactly ``keyed`` ("topic#key", phyOffset, storeTs) in order, 255 per file."""
    chunks = [keyed[i : i + INDEX_MAX - 1] for i in range(0, len(keyed), INDEX_MAX - 1)]
    assert [v.header[5] for v in views] == [len(c) + 1 for c in chunks]
    prev_end_ts = 0
    for view, chunk in zip(views, chunks):
        begin_ts, end_ts, begin_phy, end_phy, slot_count, _ = view.header
        first, last = chunk[0], chunk[-1]
        assert (begin_ts, end_ts, begin_phy, end_phy) == (first[2], last[2], first[1], last[1]), view.name
        newest_in_slot: dict[int, int] = {}
        for n, (key, phy, ts) in enumerate(chunk, 1):
            key_hash = index_hash_ref(key)
            slot = key_hash % SLOTS
            # a new file starts from the previous file's endTimestamp until its first put
            base = prev_end_ts if n == 1 else chunk[0][2]
            diff = 0 if base <= 0 else min(max((ts - base) // 1000, 0), 0x7FFFFFFF)
            expected = (key_hash, phy, diff, newest_in_slot.get(slot, 0))
            assert view.entries[n] == expected, f"{view.name} entry {n} ({key}): {view.entries[n]}"
            newest_in_slot[slot] = n
        assert view.slots == tuple(newest_in_slot.get(s, 0) for s in range(SLOTS))
        assert slot_count == len(newest_in_slot)
        check_index_structure(view)
        prev_end_ts = chunk[-1][2]


def keyed_entries(records: Sequence[RawRecord]) -> list[tuple[str, int, int]]:
    """Index keys in the order RocketMQ's buildIndex puts them: UNIQ_KEY, then each KEYS key."""
    out = []
    for r in records:
        keys = [r.props["UNIQ_KEY"]] if "UNIQ_KEY" in r.props else []
        keys += [k for k in r.props.get("KEYS", "").split(" ") if k]
        out.extend((f"{r.topic}#{k}", r.physical_offset, r.store_ts) for k in keys)
    return out


def file_snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[Any]:
    """Every message of a queue through get_message, checking offsets are dense."""
    out: list[Any] = []
    offset = 0
    end = store.max_offset_in_queue(topic, queue_id)
    while offset < end:
        res = store.get_message("g", topic, queue_id, offset, 32)
        assert res.status is GetStatus.FOUND, (topic, queue_id, offset, res.status)
        for i, m in enumerate(res.messages):
            assert m.queue_offset == offset + i
        out.extend(res.messages)
        offset = res.next_begin_offset
    return out


# --- the workload ------------------------------------------------------------------------------
TAGS = ["Tag0", "标签0", "😀", "TagLongName-xyz", None]
ROUTES = [
    ("TopicA", 0),
    ("TopicA", 1),
    ("TopicA", 2),
    ("TopicA", 3),
    ("TopicB", 0),
    ("TopicB", 1),
    ("TopicA", 0),
    ("TopicB", 0),
    ("TopicC_x-1", 0),
]


def make_messages(n: int, seed: int, *, uniq: bool = False) -> list[Message]:
    rng = random.Random(seed)
    msgs = []
    for i in range(n):
        topic, qid = ROUTES[i % len(ROUTES)]
        body = f"m{seed}-{i:05d}|".encode() + rng.randbytes(rng.randrange(20, 1800))
        keys: list[str] = []
        if i % 4:
            keys.append(f"key-{i}")
            if i % 3 == 0:
                keys.append(f"grp-{i % 7}")
        msgs.append(
            Message(
                topic=topic,
                body=body,
                tags=TAGS[i % len(TAGS)],
                keys=keys,
                queue_id=qid,
                flag=i % 3,
                properties={"userProp": f"v{i}"} if i % 5 == 0 else None,
                # IPv6 born hosts early on only: later big batches take the columnar batch path
                born_host="[fe80::1:2:3:4]:40001" if i % 11 == 0 and i < 120 else None,
                uniq_key=f"UNIQ{seed:04d}{i:024d}" if uniq and i % 2 == 0 else None,
            )
        )
    return msgs


CHUNKS = [1, 1, 7, 1, 13, 3, 50, 1, 16, 24]


def chunked(msgs: Sequence[Message]) -> Iterator[list[Message]]:
    i = 0
    k = 0
    while i < len(msgs):
        size = CHUNKS[k % len(CHUNKS)]
        yield list(msgs[i : i + size])
        i += size
        k += 1


@dataclass
class Written:
    root: Path
    msgs: list[Message]
    results: list[PutMessageResult]
    start_ms: int
    end_ms: int


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    """365 messages over 3 topics / 7 queues, single and batch puts, a moving clock; store closed."""
    root = tmp_path_factory.mktemp("written") / "store"
    clock = ManualClock(START_MS)
    msgs = make_messages(365, seed=1)
    results: list[PutMessageResult] = []
    with MessageStore.open(root, CFG, clock=clock) as store:
        for chunk in chunked(msgs):
            if len(chunk) == 1:
                results.append(store.put_message(chunk[0]))
            else:
                results.extend(store.put_messages(chunk))
            clock.advance(737)
        assert store.wait_dispatched(10)
    assert all(r.status is PutStatus.PUT_OK for r in results)
    return Written(root, msgs, results, START_MS, clock.now_ms())


# --- 0. the reference hash itself --------------------------------------------------------------
def test_reference_java_hash_matches_jvm_values() -> None:
    # Values computed by the JVM (RocketMQ's fixture tagsCodes, and well-known String.hashCode values)
    known = {
        "Tag0": 2598902,
        "Tag4": 2598906,
        "标签0": 26572473,
        "标签1": 26572474,
        "hello": 99162322,
        "": 0,
        "😀": 1772899,
        "polygenelubricants": -(1 << 31),
    }
    for s, h in known.items():
        assert java_hash(s) == h, s
        assert codec_java_hash(s) == h, s
    assert index_key_hash("polygenelubricants") == 0  # abs(Integer.MIN_VALUE) is mapped to 0
    assert tags_code_ref("TagLongName-xyz") < 0  # the workload has a tag with a negative code


# --- 1. layout ---------------------------------------------------------------------------------
def test_layout_after_close(written: Written) -> None:
    root = written.root
    # commitlog: 20-digit names, exact size, contiguous from 0, no leftover pre-allocated segment
    cl = sorted((root / "commitlog").iterdir())
    assert all(re.fullmatch(r"\d{20}", p.name) for p in cl), [p.name for p in cl]
    assert [int(p.name) for p in cl] == [i * SEGMENT for i in range(len(cl))]
    assert all(p.stat().st_size == SEGMENT for p in cl)
    end = max(r.physical_offset + r.wrote_bytes for r in written.results)
    assert len(cl) >= 4, "the workload is meant to span several segments"
    assert int(cl[-1].name) < end <= int(cl[-1].name) + SEGMENT, "an unused segment was left behind"

    # consume queues: one directory per (topic, queue), 800-byte contiguous segments
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for r in written.results:
        counts[(r.topic, r.queue_id)] += 1
    cq_root = root / "consumequeue"
    found = {(t.name, int(q.name)) for t in cq_root.iterdir() for q in t.iterdir()}
    assert found == set(counts)
    for (topic, qid), n in counts.items():
        files = sorted((cq_root / topic / str(qid)).iterdir())
        assert [p.name for p in files] == [f"{i * CQ_FILE:020d}" for i in range(-(-n * 20 // CQ_FILE))]
        assert all(p.stat().st_size == CQ_FILE for p in files)

    # index: 17-digit local-time names, 5416 bytes each, in creation order
    idx = sorted((root / "index").iterdir())
    assert len(idx) >= 2
    for p in idx:
        assert re.fullmatch(r"\d{17}", p.name), p.name
        datetime.strptime(p.name[:14], "%Y%m%d%H%M%S")  # a real date and time
        assert p.stat().st_size == INDEX_FILE
        assert index_name(written.start_ms) <= p.name <= index_name(written.end_ms + 1000)

    # checkpoint: 4096 bytes, three big-endian longs, zeros after them
    cp = (root / "checkpoint").read_bytes()
    assert len(cp) == 4096
    assert cp[24:] == bytes(4096 - 24)
    stamps = struct.unpack_from(">qqq", cp, 0)
    first_ts = min(r.store_timestamp for r in written.results)
    last_ts = max(r.store_timestamp for r in written.results)
    for v in stamps:
        assert first_ts <= v <= last_ts, stamps
    assert decode_checkpoint(cp).physic_msg_timestamp == stamps[0]

    assert (root / "lock").read_bytes() == b"lock"
    assert not (root / "abort").exists()
    assert not [p for p in root.rglob("*") if p.name.endswith((".creating", ".tmp"))]


# --- 2. consume queues -------------------------------------------------------------------------
def test_consume_queue_entries(written: Written) -> None:
    root = written.root
    by_queue: dict[tuple[str, int], list[PutMessageResult]] = defaultdict(list)
    for msg, r in zip(written.msgs, written.results):
        entry = cq_entry(root, r.topic, r.queue_id, r.queue_offset)
        assert entry == (r.physical_offset, r.wrote_bytes, tags_code_ref(msg.tags)), (msg.topic, r)
        # the codec agrees with the raw layout
        logical = r.queue_offset * 20
        seg = root / "consumequeue" / r.topic / str(r.queue_id) / f"{logical - logical % CQ_FILE:020d}"
        assert consume_queue_entry.decode_entry(seg.read_bytes(), logical % CQ_FILE) == entry
        by_queue[(r.topic, r.queue_id)].append(r)
    codes = {cq_entry(root, r.topic, r.queue_id, r.queue_offset)[2] for r in written.results}
    assert {0, 2598902, tags_code_ref("TagLongName-xyz")} <= codes  # no tag, Tag0, a sign-extended code

    for (topic, qid), rs in by_queue.items():
        assert sorted(r.queue_offset for r in rs) == list(range(len(rs)))
        n = len(rs)
        last_seg = root / "consumequeue" / topic / str(qid) / f"{(n - 1) * 20 // CQ_FILE * CQ_FILE:020d}"
        tail_from = (n * 20) % CQ_FILE or CQ_FILE
        data = last_seg.read_bytes()
        assert data[tail_from:] == bytes(CQ_FILE - tail_from), f"{topic}/{qid}: bytes after the last entry"
        # entries of one queue point forward in the commitlog
        phys = [cq_entry(root, topic, qid, i)[0] for i in range(n)]
        assert phys == sorted(phys)
    assert any(len(rs) * 20 % CQ_FILE for rs in by_queue.values()), "some queue must end mid-file"
    assert any(len(rs) * 20 % CQ_FILE == 0 for rs in by_queue.values()), "some queue must fill its file"


# --- 3. commitlog records ----------------------------------------------------------------------
def test_commitlog_records_parse_from_every_segment_start(written: Written) -> None:
    walks = walk_commitlog(written.root)
    assert sum(1 for w in walks if w.blank is not None) >= 3
    records = all_records(walks)
    expected = sorted(zip(written.msgs, written.results), key=lambda mr: mr[1].physical_offset)
    assert len(records) == len(expected)
    for rec, (msg, res) in zip(records, expected):
        assert rec.physical_offset == res.physical_offset
        assert rec.total == res.wrote_bytes
        assert rec.magic == MESSAGE_MAGIC
        assert rec.queue_offset == res.queue_offset
        assert (rec.topic, rec.queue_id) == (msg.topic, msg.queue_id)
        assert rec.body == msg.body
        assert rec.crc == zlib.crc32(msg.body) & 0x7FFFFFFF
        assert rec.flag == msg.flag
        assert rec.store_ts == res.store_timestamp
        assert rec.sys_flag == (0x10 if msg.born_host else 0)
        if msg.born_host:
            fe80 = bytes.fromhex("fe800000000000000001000200030004")
            assert (rec.born_addr, rec.born_port) == (fe80, 40001)
        assert (rec.store_addr, rec.store_port) == (bytes([127, 0, 0, 1]), 10911)
        assert rec.props.get("TAGS") == msg.tags
        assert not rec.props_raw.endswith(b"\x02"), "4.9 writes properties without a trailing separator"
        assert rec.props.get("KEYS") == (" ".join(msg.keys) or None)
        assert re.fullmatch(r"[0-9A-F]{32}", rec.props["UNIQ_KEY"])
        if msg.properties:
            assert rec.props["userProp"] == msg.properties["userProp"]
        # the result's offsetMsgId encodes store host + physical offset (§2.6)
        msg_id = bytes([127, 0, 0, 1]) + struct.pack(">iq", 10911, rec.physical_offset)
        assert res.msg_id == msg_id.hex().upper()
    stamps = [r.store_ts for r in records]
    assert stamps == sorted(stamps), "store timestamps must not decrease along the log"
    last = walks[-1]
    assert last.start + last.data_end == max(r.physical_offset + r.wrote_bytes for r in written.results)
    # the codec's scanner agrees on where each segment's data stops
    for w in walks:
        scan = SegmentScan((written.root / "commitlog" / f"{w.start:020d}").read_bytes(), check_crc=True)
        assert [r.position for r in scan] == [r.position for r in w.records]
        assert scan.stop == ("blank" if w.blank is not None else "end_of_data")


@pytest.mark.parametrize("mode", ["single", "small-batches", "one-batch"])
@pytest.mark.parametrize("spare", [8, 7])
def test_roll_keeps_eight_bytes_for_the_blank_record(tmp_path: Path, mode: str, spare: int) -> None:
    """A record goes in a segment iff it leaves at least 8 bytes; else a BLANK fills the rest (§2.3)."""
    overhead = 88 + 1 + len("TopicA") + 2  # no properties: no tags, keys or UNIQ_KEY
    remaining = 5000  # what is left after the fillers and the big record
    sizes = [1000] * 16 + [SEGMENT - 16 * 1000 - remaining, remaining - spare, 500]
    msgs = [
        Message("TopicA", bytes([i % 251]) * (size - overhead), queue_id=0) for i, size in enumerate(sizes)
    ]
    with MessageStore.open(tmp_path / "s", CFG.replace(generate_uniq_key=False)) as store:
        if mode == "single":
            results = [store.put_message(m) for m in msgs]
        elif mode == "small-batches":
            results = [r for i in range(0, len(msgs), 3) for r in store.put_messages(msgs[i : i + 3])]
        else:
            results = store.put_messages(msgs)
        assert store.wait_dispatched(10)
        assert [len(m.body) for m in read_queue(store, "TopicA", 0)] == [len(m.body) for m in msgs]
    assert [r.wrote_bytes for r in results] == sizes
    test_at = SEGMENT - remaining
    if spare == 8:  # fits, exactly 8 bytes left; the next record rolls over a BLANK of 8
        expected_tail = [test_at, SEGMENT]
        blank = 8
    else:  # one byte too many: BLANK of all 5000 bytes, the record opens the next segment
        expected_tail = [SEGMENT, SEGMENT + sizes[-2]]
        blank = remaining
    assert [r.physical_offset for r in results[-2:]] == expected_tail
    walks = walk_commitlog(tmp_path / "s")
    assert len(walks) == 2
    assert walks[0].blank == blank


def test_transaction_and_delay_records(tmp_path: Path) -> None:
    """PREPARED/ROLLBACK: QUEUEOFFSET 0, no queue entry (§2.4); delays: SCHEDULE_TOPIC_XXXX (§8)."""
    clock = ManualClock(START_MS)
    with MessageStore.open(tmp_path / "s", CFG.replace(generate_uniq_key=False), clock=clock) as store:
        flags = [0, 0x4, 0, 0xC, 0x8]
        results = [
            store.put_message(Message("TopicA", f"tx{i}".encode(), queue_id=1, sys_flag=f))
            for i, f in enumerate(flags)
        ]
        d1 = store.put_message(Message("TopicA", b"later", tags="TagD", queue_id=1, delay_level=3))
        clock.advance(5)
        d2 = store.put_message(Message("TopicB", b"much later", queue_id=2, delay_level=99))
        assert store.wait_dispatched(10)
        assert store.max_offset_in_queue("TopicA", 1) == 3
    records = {r.physical_offset: r for r in all_records(walk_commitlog(tmp_path / "s"))}
    assert [records[r.physical_offset].queue_offset for r in results] == [0, 0, 1, 0, 2]
    assert [records[r.physical_offset].sys_flag for r in results] == flags
    assert [r.queue_offset for r in results] == [0, 0, 1, 0, 2]
    root = tmp_path / "s"
    queued = [results[0], results[2], results[4]]
    for qo, r in enumerate(queued):
        assert cq_entry(root, "TopicA", 1, qo) == (r.physical_offset, r.wrote_bytes, 0)
    cq = (root / "consumequeue" / "TopicA" / "1" / f"{0:020d}").read_bytes()
    assert cq[60:] == bytes(CQ_FILE - 60)

    rec = records[d1.physical_offset]
    assert (rec.topic, rec.queue_id, rec.queue_offset) == ("SCHEDULE_TOPIC_XXXX", 2, 0)
    assert {k: rec.props[k] for k in ("REAL_TOPIC", "REAL_QID", "DELAY", "TAGS")} == {
        "REAL_TOPIC": "TopicA",
        "REAL_QID": "1",
        "DELAY": "3",
        "TAGS": "TagD",
    }
    assert cq_entry(root, "SCHEDULE_TOPIC_XXXX", 2, 0) == (
        d1.physical_offset,
        d1.wrote_bytes,
        rec.store_ts + 10_000,
    )
    rec = records[d2.physical_offset]  # level 99 is clamped to the last level, 2h
    assert (rec.topic, rec.queue_id, rec.props["DELAY"]) == ("SCHEDULE_TOPIC_XXXX", 17, "18")
    assert cq_entry(root, "SCHEDULE_TOPIC_XXXX", 17, 0) == (
        d2.physical_offset,
        d2.wrote_bytes,
        rec.store_ts + 7_200_000,
    )


def test_ipv6_store_host_record_layout(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", CFG.replace(store_host="[::1]:10911")) as store:
        r = store.put_message(Message("TopicA", b"v6", tags="Tag0", queue_id=0))
        r2 = store.put_message(Message("TopicA", b"v4 born", born_host="10.1.2.3:999", queue_id=0))
        assert store.wait_dispatched(10)
    rec, rec2 = all_records(walk_commitlog(tmp_path / "s"))
    loopback6 = bytes(15) + b"\x01"
    assert rec.sys_flag == 0x30 and rec2.sys_flag == 0x20
    assert (rec.store_addr, rec.store_port) == (loopback6, 10911)
    assert (rec2.born_addr, rec2.born_port) == (bytes([10, 1, 2, 3]), 999)
    assert r.msg_id == (loopback6 + struct.pack(">iq", 10911, r.physical_offset)).hex().upper()
    assert r2.physical_offset == r.wrote_bytes


# --- 4. index files ----------------------------------------------------------------------------
def test_index_files_match_the_reference_model(written: Written) -> None:
    root = written.root
    records = all_records(walk_commitlog(root))
    keyed = keyed_entries(records)
    assert len(keyed) > 2 * (INDEX_MAX - 1), "the workload is meant to fill more than two index files"
    views = [read_index_file(p) for p in sorted((root / "index").iterdir())]
    check_index_model(views, keyed)
    assert any(e[2] > 0 for v in views for e in v.entries), "timeDiff should be exercised"
    # the codec reads the same header
    for v in views:
        h = index_layout.decode_header((root / "index" / v.name).read_bytes())
        assert (
            h.begin_timestamp,
            h.end_timestamp,
            h.begin_phy_offset,
            h.end_phy_offset,
            h.hash_slot_count,
            h.index_count,
        ) == v.header

    # every topic#key can be found by walking the chain of its slot, with the right phyOffset
    for key, phy, _ in keyed:
        key_hash = index_hash_ref(key)
        hits = []
        for v in views:
            n = v.slots[key_hash % SLOTS]
            while n:
                kh, p, _, prev = v.entries[n]
                if kh == key_hash:
                    hits.append(p)
                n = prev
        assert phy in hits, key

    # and through the API, which compares the real topic and key
    with MessageStore.open(root, CFG, readonly=True) as store:
        for msg, res in zip(written.msgs, written.results):
            for k in msg.keys:
                found = {m.physical_offset for m in store.query_message(msg.topic, k)}
                assert res.physical_offset in found
                for m in store.query_message(msg.topic, k):
                    assert m.topic == msg.topic and k in m.keys


def test_index_entries_per_message(tmp_path: Path) -> None:
    cfg = CFG.replace(generate_uniq_key=False)
    clock = ManualClock(START_MS)
    with MessageStore.open(tmp_path / "s", cfg, clock=clock) as store:

        def count() -> int:
            assert store.wait_dispatched(10)
            return sum(h["indexCount"] - 1 for _, h in store.index_headers())

        store.put_message(Message("TopicA", b"no keys", queue_id=0))
        assert count() == 0
        store.put_message(Message("TopicA", b"two keys", keys=["a1", "a2"], queue_id=0))
        assert count() == 2
        r = store.put_message(
            Message(
                "TopicA",
                b"uniq and two keys",
                keys=["b1", "b2"],
                uniq_key="0A0B0C0D0E0F00112233445566778899",
                queue_id=0,
            )
        )
        assert count() == 5
        clock.advance(2500)
        r2 = store.put_message(Message("TopicB", b"one key", keys=["a1"], queue_id=0))
        assert count() == 6
        hits = store.query_message("TopicA", "0A0B0C0D0E0F00112233445566778899")
        assert [m.physical_offset for m in hits] == [r.physical_offset]
        assert [m.physical_offset for m in store.query_message("TopicB", "a1")] == [r2.physical_offset]
        assert len(store.query_message("TopicA", "a1")) == 1
    (view,) = [read_index_file(p) for p in sorted((tmp_path / "s" / "index").iterdir())]
    assert view.header[5] == 7
    assert view.header[0] == START_MS and view.header[1] == START_MS + 2500
    records = all_records(walk_commitlog(tmp_path / "s"))
    keyed = keyed_entries(records)
    assert [k for k, _, _ in keyed] == [
        "TopicA#a1",
        "TopicA#a2",
        "TopicA#0A0B0C0D0E0F00112233445566778899",
        "TopicA#b1",
        "TopicA#b2",
        "TopicB#a1",
    ]
    check_index_model([view], keyed)
    assert view.entries[6][2] == 2  # timeDiff in seconds since beginTimestamp


def test_full_index_file_rolls_to_a_new_one(tmp_path: Path) -> None:
    cfg = CFG.replace(generate_uniq_key=False)
    with MessageStore.open(tmp_path / "s", cfg, clock=ManualClock(START_MS)) as store:
        # 85 messages x 3 keys = 255 keys: exactly one full file
        store.put_messages(
            [Message("TopicA", b"x", keys=[f"k{i}", f"l{i}", f"m{i}"], queue_id=0) for i in range(85)]
        )
        assert store.wait_dispatched(10)
        assert [h["indexCount"] for _, h in store.index_headers()] == [256]
        store.put_message(Message("TopicA", b"y", keys=["n"], queue_id=0))
        assert store.wait_dispatched(10)
        assert [h["indexCount"] for _, h in store.index_headers()] == [256, 2]
    views = [read_index_file(p) for p in sorted((tmp_path / "s" / "index").iterdir())]
    assert len(views) == 2 and views[0].name < views[1].name
    check_index_model(views, keyed_entries(all_records(walk_commitlog(tmp_path / "s"))))


# --- 5. reopen, and single puts == batch puts --------------------------------------------------
def write_deterministic(root: Path, msgs: Sequence[Message], *, batch: bool) -> list[PutMessageResult]:
    clock = ManualClock(START_MS)
    cfg = CFG.replace(generate_uniq_key=False)
    results: list[PutMessageResult] = []
    with MessageStore.open(root, cfg, clock=clock) as store:
        for chunk in chunked(msgs):
            if batch:
                results.extend(store.put_messages(chunk))
            else:
                results.extend(store.put_message(m) for m in chunk)
            assert store.wait_dispatched(10)  # index files are named by the clock: name them before it moves
            clock.advance(1100)
    assert all(r.status is PutStatus.PUT_OK for r in results)
    return results


def test_single_and_batch_puts_write_identical_bytes(tmp_path: Path) -> None:
    msgs = make_messages(400, seed=5, uniq=True)
    single = write_deterministic(tmp_path / "single", msgs, batch=False)
    batch = write_deterministic(tmp_path / "batch", msgs, batch=True)
    assert [(r.physical_offset, r.queue_offset, r.store_timestamp) for r in single] == [
        (r.physical_offset, r.queue_offset, r.store_timestamp) for r in batch
    ]
    a, b = file_snapshot(tmp_path / "single"), file_snapshot(tmp_path / "batch")
    assert sorted(a) == sorted(b)
    for d in ("commitlog", "consumequeue", "index"):
        names = [n for n in a if n.startswith(d + os.sep)]
        assert names, d
        for name in names:
            assert a[name] == b[name], f"{name} differs between single and batch puts"
    # a batch crossed a segment boundary somewhere: more than one segment, each with records
    assert len([n for n in a if n.startswith("commitlog")]) >= 4


def test_reopened_store_reads_back_everything(tmp_path: Path) -> None:
    msgs = make_messages(400, seed=5, uniq=True)
    root = tmp_path / "s"
    results = write_deterministic(root, msgs, batch=True)
    before = file_snapshot(root)
    expected: dict[tuple[str, int], list[tuple[Message, PutMessageResult]]] = defaultdict(list)
    for m, r in zip(msgs, results):
        expected[(m.topic, m.queue_id)].append((m, r))
    with MessageStore.open(root, CFG.replace(generate_uniq_key=False)) as store:
        assert store.max_phy_offset() == max(r.physical_offset + r.wrote_bytes for r in results)
        for (topic, qid), pairs in expected.items():
            assert store.max_offset_in_queue(topic, qid) == len(pairs)
            got = read_queue(store, topic, qid)
            assert len(got) == len(pairs)
            for ext, (m, r) in zip(got, pairs):
                assert ext.body == m.body
                assert (ext.physical_offset, ext.queue_offset, ext.store_timestamp) == (
                    r.physical_offset,
                    r.queue_offset,
                    r.store_timestamp,
                )
                assert ext.tags == m.tags and ext.keys == list(m.keys) and ext.flag == m.flag
                assert ext.uniq_key == m.uniq_key
                assert ext.msg_id == r.msg_id
                assert ext.tags_code == tags_code_ref(m.tags)
                if m.properties:
                    assert ext.properties["userProp"] == m.properties["userProp"]
        for m, r in zip(msgs, results):
            for k in [*m.keys, *([m.uniq_key] if m.uniq_key else [])]:
                assert r.physical_offset in {x.physical_offset for x in store.query_message(m.topic, k)}
    after = file_snapshot(root)
    for name, data in before.items():
        if name.startswith(("commitlog", "consumequeue", "index")):
            assert after[name] == data, f"reopening and reading changed {name}"


# --- 6. RocketMQ's own store -------------------------------------------------------------------
def copy_fixture(name: str, dest: Path) -> Path:
    src = FIXTURES / name
    shutil.copytree(src, dest)
    for dirpath, dirnames, filenames in os.walk(dest):
        for n in [*dirnames, *filenames]:
            p = Path(dirpath) / n
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    Path(dest).chmod(Path(dest).stat().st_mode | stat.S_IWUSR)
    return dest


def load_expected(name: str) -> list[dict[str, Any]]:
    path = FIXTURES / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _none(v: Any) -> Any:
    return None if v in (None, "null") else v


def check_fixture_message(ext: Any, d: dict[str, Any]) -> None:
    body = d["body_utf8"].encode() if "body_utf8" in d else bytes.fromhex(d["body_hex"])
    assert ext.body == body
    assert (ext.topic, ext.queue_id, ext.queue_offset) == (d["topic"], d["queueId"], d["queueOffset"])
    assert (ext.physical_offset, ext.store_size) == (d["phyOffset"], d["storeSize"])
    assert ext.sys_flag == d["sysFlag"] and ext.flag == d["flag"] and ext.body_crc == d["bodyCRC"]
    assert ext.reconsume_times == d["reconsumeTimes"]
    assert ext.prepared_transaction_offset == d["preparedTxOffset"]
    assert (ext.born_timestamp, ext.store_timestamp) == (d["bornTs"], d["storeTs"])
    # (the oracle prints IPv6 hosts as "[a:b:..:h:port", without the closing bracket)
    assert [ext.born_host, ext.store_host] == [d["bornHost"], d["storeHost"]]
    assert ext.msg_id == d["msgId"]
    assert ext.properties == d["props"]
    assert ext.tags_code == d["cq"]["tagsCode"]


def test_rocketmq_index_files_match_the_reference_model() -> None:
    """The index model used above is the one RocketMQ 4.9.8 follows (its own files)."""
    expected = load_expected("store-sample.expected.jsonl")
    src = FIXTURES / "store-sample"
    keyed = []
    for d in expected:
        if d["kind"] != "clrec":
            continue
        keys = [u] if (u := _none(d["uniqKey"])) else []
        keys += [k for k in (_none(d["keys"]) or "").split(" ") if k]
        keyed.extend((f"{d['topic']}#{k}", d["offset"], d["storeTs"]) for k in keys)
    views = [read_index_file(p) for p in sorted((src / "index").iterdir())]
    check_index_model(views, keyed)
    listed = [d for d in expected if d["kind"] == "index_file"]
    assert [(v.name, v.header) for v in views] == [
        (
            d["name"],
            (
                d["beginTs"],
                d["endTs"],
                d["beginPhyOffset"],
                d["endPhyOffset"],
                d["hashSlotCount"],
                d["indexCount"],
            ),
        )
        for d in listed
    ]


def test_rocketmq_store_sample_is_read_and_extended(tmp_path: Path) -> None:
    root = copy_fixture("store-sample", tmp_path / "store")
    expected = load_expected("store-sample.expected.jsonl")
    clrecs = [d for d in expected if d["kind"] == "clrec"]
    fixture_msgs = [d for d in expected if d["kind"] == "msg"]
    queues = {(d["topic"], d["queueId"]): d["maxOffset"] for d in expected if d["kind"] == "queue"}
    (max_phy,) = [d["maxPhyOffset"] for d in expected if d["kind"] == "info" and "maxPhyOffset" in d]

    # our spec walker reads RocketMQ's commitlog exactly as RocketMQ lists it
    walks = walk_commitlog(root)
    old = all_records(walks)
    assert [
        (r.physical_offset, r.total, r.topic, r.queue_id, r.queue_offset, r.sys_flag, r.store_ts) for r in old
    ] == [
        (d["offset"], d["size"], d["topic"], d["queueId"], d["queueOffset"], d["sysFlag"], d["storeTs"])
        for d in clrecs
    ]
    original = file_snapshot(root)
    last_old_seg = sorted(n for n in original if n.startswith("commitlog"))[-1]

    def check_old(store: MessageStore) -> None:
        by_queue: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        for d in fixture_msgs:
            by_queue[(d["topic"], d["queueId"])].append(d)
        for (topic, qid), ds in by_queue.items():
            ds.sort(key=lambda d: d["queueOffset"])
            res = [store.get_message("g", topic, qid, d["queueOffset"], 1) for d in ds]
            for r, d in zip(res, ds):
                assert r.status is GetStatus.FOUND, (topic, qid, d["queueOffset"])
                check_fixture_message(r.messages[0], d)
        for d in fixture_msgs[::7]:
            ext = store.look_message_by_offset(d["phyOffset"])
            assert ext is not None
            check_fixture_message(ext, {**d, "cq": {"tagsCode": ext.tags_code}})

    clock = ManualClock(max(d["storeTs"] for d in clrecs) + 20_000)  # before any delayed message is due
    rng = random.Random(7)
    new_msgs = [
        Message(
            topic=f"Topic{'ABC'[i % 3]}",
            body=f"new-{i:03d}|".encode() + rng.randbytes(1100),
            tags=TAGS[i % len(TAGS)],
            keys=[f"new-key-{i}"],
            queue_id=(i // 3) % 4,
        )
        for i in range(50)
    ]
    with MessageStore.open(root, CFG, clock=clock) as store:
        assert not store.abnormal_shutdown_detected
        assert store.max_phy_offset() == max_phy
        for (topic, qid), mx in queues.items():
            assert store.max_offset_in_queue(topic, qid) == mx, (topic, qid)
        check_old(store)
        results = []
        for i, m in enumerate(new_msgs):
            results.append(store.put_message(m))
            if i % 10 == 9:
                clock.advance(1500)
        assert all(r.status is PutStatus.PUT_OK for r in results)
        assert store.wait_dispatched(10)

    assert not (root / "abort").exists()
    assert (root / "lock").read_bytes() == b"lock"
    # queue offsets continue where RocketMQ's queues ended
    per_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
    for r in results:
        per_queue[(r.topic, r.queue_id)].append(r.queue_offset)
    for key, qos in per_queue.items():
        assert qos == list(range(queues[key], queues[key] + len(qos))), key

    # every segment still parses from byte 0; RocketMQ's records are untouched
    walks = walk_commitlog(root)
    records = all_records(walks)
    assert len(walks) > 5, "the new messages were meant to roll into a new segment"
    assert records[: len(old)] == old
    assert [(r.physical_offset, r.total, r.queue_offset, r.body) for r in records[len(old) :]] == [
        (r.physical_offset, r.wrote_bytes, r.queue_offset, m.body) for m, r in zip(new_msgs, results)
    ]
    assert results[0].physical_offset == max_phy
    now = file_snapshot(root)
    for name, data in original.items():
        if name.startswith("commitlog") and name != last_old_seg:
            assert now[name] == data, name
    assert (
        now[last_old_seg][: max_phy - int(Path(last_old_seg).name)]
        == original[last_old_seg][: max_phy - int(Path(last_old_seg).name)]
    )
    for m, r in zip(new_msgs, results):
        assert cq_entry(root, r.topic, r.queue_id, r.queue_offset) == (
            r.physical_offset,
            r.wrote_bytes,
            tags_code_ref(m.tags),
        )
    # the index continues RocketMQ's last file, by the same rules
    index_views = [read_index_file(p) for p in sorted((root / "index").iterdir())]
    check_index_model(index_views, keyed_entries(records))

    with MessageStore.open(root, CFG, clock=clock) as store:
        check_old(store)
        for m, r in zip(new_msgs, results):
            got = store.get_message("g", r.topic, r.queue_id, r.queue_offset, 1)
            assert got.status is GetStatus.FOUND
            assert got.messages[0].body == m.body
            assert got.messages[0].physical_offset == r.physical_offset
            assert [x.physical_offset for x in store.query_message(m.topic, m.keys[0])] == [r.physical_offset]
        for (topic, qid), qos in per_queue.items():
            assert store.max_offset_in_queue(topic, qid) == queues[(topic, qid)] + len(qos)


def test_opening_and_closing_a_rocketmq_store_leaves_its_data_files_alone(tmp_path: Path) -> None:
    root = copy_fixture("store-sample", tmp_path / "store")
    before = file_snapshot(root)
    # (a clock at the fixture's time: delivering its due delayed messages would rightly write)
    with MessageStore.open(root, CFG, clock=fixture_clock("store-sample")) as store:
        assert store.wait_dispatched(10)
    after = file_snapshot(root)
    data_files = [n for n in before if n.startswith(("commitlog", "consumequeue", "index"))]
    assert data_files
    assert [n for n in after if n.startswith(("commitlog", "consumequeue", "index"))] == data_files
    for name in data_files:
        assert after[name] == before[name], f"{name} changed"


def test_rocketmq_queries_return_rocketmq_hits(tmp_path: Path) -> None:
    root = copy_fixture("store-sample", tmp_path / "store")
    expected = load_expected("store-sample.expected.jsonl")
    queries = [d for d in expected if d["kind"] == "query"]
    assert queries
    with MessageStore.open(root, CFG, readonly=True) as store:
        for q in queries:
            hits = store.query_message(q["topic"], q["key"])
            got = {(m.queue_id, m.queue_offset, m.physical_offset) for m in hits}
            want = {(h["queueId"], h["queueOffset"], h["phyOffset"]) for h in q["results"]}
            assert got == want, (q["topic"], q["key"])


# --- 7. geometry mismatch ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "directory", "actual", "configured"),
    [
        ({"commitlog_segment_size": 131072}, "commitlog", SEGMENT, 131072),
        ({"consume_queue_entries": 80}, "consumequeue", CQ_FILE, 1600),
        ({"index_max_entries": 512}, "index", INDEX_FILE, 40 + SLOTS * 4 + 512 * 20),
        ({"index_hash_slots": 128}, "index", INDEX_FILE, 40 + 128 * 4 + INDEX_MAX * 20),
    ],
)
def test_geometry_mismatch_is_refused_and_changes_nothing(
    tmp_path: Path, changes: dict[str, int], directory: str, actual: int, configured: int
) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as store:
        results = store.put_messages(make_messages(30, seed=3))
        assert store.wait_dispatched(10)
    before = file_snapshot(root)
    with pytest.raises(StoreConfigError) as info:
        MessageStore.open(root, CFG.replace(**changes))
    text = str(info.value)
    names = {p.name for p in (root / directory).rglob("*") if p.is_file()}
    assert any(n in text for n in names), f"the error does not name a {directory} file: {text}"
    assert str(actual) in text and str(configured) in text, text
    assert file_snapshot(root) == before
    assert not (root / "abort").exists()
    # the failed open let go of the store: the right geometry opens it, with everything there
    with MessageStore.open(root, CFG) as store:
        assert store.max_phy_offset() == max(r.physical_offset + r.wrote_bytes for r in results)
        assert store.look_message_by_offset(results[-1].physical_offset) is not None
