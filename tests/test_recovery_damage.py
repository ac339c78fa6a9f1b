"""Recovery from damaged store files (STORE.md §2, §4, §7).

Whatever the damage, recovery keeps every record before it, drops everything from it on (from
the commitlog, the consume queues and the index), says what it found (``store.recovery``), and
leaves a store that works: new puts continue every queue's offsets densely and read back, by
queue and by key, before and after another reopen.

Damage is applied to a cleanly closed store; re-creating ``abort`` makes the next open take the
abnormal (crash) path, leaving it absent simulates an unclean stop whose abort file was lost.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import struct
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rocketstore import GetStatus, ManualClock, Message, MessageExt, MessageStore, PutStatus, StoreConfig
from rocketstore.codec import index_layout
from rocketstore.codec.checkpoint import Checkpoint, encode_checkpoint
from rocketstore.recovery import RecoveryReport
from tests.conftest import FIXTURES, copy_fixture, fixture_clock
from tests.live_writer import LiveWriter

SEG = 65536
CFG = StoreConfig(
    commitlog_segment_size=SEG, consume_queue_entries=40, index_hash_slots=64, index_max_entries=256
)
CQ_ENTRY = 20
TOPICS = ("TopicA", "TopicB")
QUEUE_IDS = (0, 1, 2)
QUEUES = [(t, q) for t in TOPICS for q in QUEUE_IDS]
T0 = 1_700_000_000_000
STEP_MS = 300  # store-time step between messages: the data spans many seconds (abnormal start matters)
N_MESSAGES = 420  # about 2.6 commitlog segments, 4 index files (2 keys per message, 255 per file)
MAX_TIME = (1 << 63) - 1


@dataclass(frozen=True)
class Rec:
    """One message as written, and where it went."""

    topic: str
    queue_id: int
    queue_offset: int
    phys: int
    size: int
    body: bytes
    tags: str
    key: str
    uniq: str
    props_start: int  # global offset of the first byte of the PROPERTIES string

    @property
    def end(self) -> int:
        return self.phys + self.size


@dataclass(frozen=True)
class Pristine:
    root: Path
    recs: list[Rec]
    end_time: int  # a store time after every record


def _body(rng: random.Random, n: int) -> bytes:
    return bytes(rng.randrange(1, 256) for _ in range(n))  # no zero byte: any zeroing changes the CRC


def _message(i: int, rng: random.Random, key_prefix: str = "k") -> Message:
    topic, qid = QUEUES[i % len(QUEUES)]
    return Message(
        topic,
        _body(rng, rng.randrange(60, 420)),
        tags=f"T{i % 3}",
        keys=[f"{key_prefix}{i:04d}"],
        queue_id=qid,
    )


def _write_store(root: Path, n: int, seed: int) -> Pristine:
    rng = random.Random(seed)
    clock = ManualClock(T0)
    msgs = [_message(i, rng) for i in range(n)]
    with MessageStore.open(root, CFG, clock=clock) as store:
        i = 0
        while i < n:
            # mostly single puts, some small and some columnar (>= 16) batches
            size = rng.choice((1, 1, 1, 4, 20))
            chunk = msgs[i : i + size]
            results = store.put_messages(chunk)
            assert all(r.status is PutStatus.PUT_OK for r in results)
            clock.advance(STEP_MS)
            i += len(chunk)
        assert store.wait_dispatched(10)
        recs = []
        for m in msgs:
            hits = store.query_message(m.topic, m.keys[0])
            assert len(hits) == 1
            ext = hits[0]
            props_len = len(ext.record.properties.encode())
            recs.append(
                Rec(
                    m.topic,
                    m.queue_id,
                    ext.queue_offset,
                    ext.physical_offset,
                    ext.store_size,
                    m.body,
                    m.tags or "",
                    m.keys[0],
                    ext.uniq_key or "",
                    ext.physical_offset + ext.store_size - props_len,
                )
            )
    recs.sort(key=lambda r: r.phys)
    return Pristine(root, recs, clock.now_ms() + 60_000)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    p = _write_store(tmp_path_factory.mktemp("pristine") / "store", N_MESSAGES, seed=7)
    segments = sorted((p.root / "commitlog").iterdir())
    assert len(segments) >= 3, "the sample must span several commitlog segments"
    assert len(list((p.root / "index").iterdir())) >= 3, "and several index files"
    return p


def _copy(p: Pristine, dest: Path) -> Path:
    root = dest / "store"
    shutil.copytree(p.root, root)
    return root


def _segments(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def _last_segment(root: Path) -> Path:
    return _segments(root)[-1]


def _zero_from(root: Path, global_offset: int) -> int:
    """Zero the commitlog from ``global_offset`` to its end (a torn tail: files keep their size,
    later segments become all zero). Returns the first byte that actually changed, which is
    where the damage starts as recovery can see it."""
    first_changed = None
    for seg in _segments(root):
        base = int(seg.name)
        if base + SEG <= global_offset:
            continue
        data = bytearray(seg.read_bytes())
        pos = max(0, global_offset - base)
        if first_changed is None:
            nz = next((i for i in range(pos, SEG) if data[i]), None)
            if nz is not None:
                first_changed = base + nz
        data[pos:] = bytes(SEG - pos)
        seg.write_bytes(data)
    return first_changed if first_changed is not None else 1 << 62


def _patch_commitlog(root: Path, global_offset: int, patch: bytes) -> None:
    for seg in _segments(root):
        base = int(seg.name)
        if base <= global_offset < base + SEG:
            with open(seg, "r+b") as f:
                f.seek(global_offset - base)
                f.write(patch)
            return
    raise AssertionError(f"no segment holds {global_offset}")


def _read_queue(store: MessageStore, topic: str, qid: int) -> list[MessageExt]:
    out: list[MessageExt] = []
    offset = 0
    while True:
        res = store.get_message("g", topic, qid, offset, 32)
        if res.status is not GetStatus.FOUND:
            assert res.status in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE), res.status
            return out
        assert res.next_begin_offset > offset
        out.extend(res.messages)
        offset = res.next_begin_offset


def _open(root: Path, end_time: int, cfg: StoreConfig = CFG) -> MessageStore:
    return MessageStore.open(root, cfg, clock=ManualClock(end_time))


def _split(recs: list[Rec], cut: int) -> tuple[list[Rec], list[Rec]]:
    """Records that end at or before ``cut`` survive; the one it falls in and all later ones go."""
    return [r for r in recs if r.end <= cut], [r for r in recs if r.end > cut]


BLANK_MAGIC = -875286124


def _expected_end(root: Path, kept: list[Rec]) -> int:
    """Where the log must end after recovery: right after the last kept record, or at the start
    of the next segment when a BLANK record closes that record's segment and the next file exists."""
    end = max((r.end for r in kept), default=0)
    seg_start = end - end % SEG
    seg = root / "commitlog" / f"{seg_start:020d}"
    if seg.exists():
        with open(seg, "rb") as f:
            f.seek(end - seg_start)
            head = f.read(8)
        nxt = root / "commitlog" / f"{seg_start + SEG:020d}"
        if len(head) == 8 and struct.unpack(">ii", head)[1] == BLANK_MAGIC and nxt.exists():
            return seg_start + SEG
    return end


def _check_content(store: MessageStore, kept: list[Rec], gone: list[Rec], end: int) -> None:
    """The store holds exactly ``kept`` (intact, through queues, offsets and keys), nothing of ``gone``."""
    assert store.wait_dispatched(10)
    assert store.max_phy_offset() == end
    per_queue: dict[tuple[str, int], list[Rec]] = {q: [] for q in QUEUES}
    by_key: dict[tuple[str, str], list[int]] = {}
    for r in kept:
        per_queue[(r.topic, r.queue_id)].append(r)
        by_key.setdefault((r.topic, r.key), []).append(r.phys)
    for (topic, qid), want in per_queue.items():
        assert store.max_offset_in_queue(topic, qid) == len(want), (topic, qid)
        got = _read_queue(store, topic, qid)
        assert [m.queue_offset for m in got] == list(range(len(want)))
        assert [m.physical_offset for m in got] == [r.phys for r in want]
        assert [m.body for m in got] == [r.body for r in want]
        assert [m.tags for m in got] == [r.tags for r in want]
    for (topic, key), phys in by_key.items():
        hits = store.query_message(topic, key)
        assert [m.physical_offset for m in hits] == sorted(phys, reverse=True), key
    for r in kept:
        if r.uniq:
            by_uniq = store.query_by_uniq_key(r.topic, r.uniq)
            assert by_uniq is not None and by_uniq.physical_offset == r.phys
    index = store._index
    assert index is not None
    for r in gone:
        if r.phys >= end:
            assert store.look_message_by_offset(r.phys) is None
        if (r.topic, r.key) not in by_key:
            assert store.query_message(r.topic, r.key) == [], r.key
        assert store.query_by_uniq_key(r.topic, r.uniq) is None
        # not even a stale candidate: no index entry may point past the end of the log
        assert [p for p in index.lookup(r.topic, r.key, 0, MAX_TIME) if p >= end] == [], r.key


def _put_new(store: MessageStore, kept: list[Rec], gone: list[Rec], tag: str) -> list[Rec]:
    """New puts continue every queue's offsets densely and are found by queue and by key (fresh
    keys, and keys of cut messages reused). Returns them."""
    counts = Counter((r.topic, r.queue_id) for r in kept)
    rng = random.Random(tag)
    msgs = [
        Message(t, _body(rng, 100 + 37 * j), tags="N", keys=[f"{tag}-n{j}"], queue_id=q)
        for j, (t, q) in enumerate(QUEUES * 2)
    ]
    reuse = {r.key: r for r in gone[:3] + gone[-2:]}
    msgs += [
        Message(r.topic, _body(rng, 80), tags="N", keys=[r.key], queue_id=r.queue_id) for r in reuse.values()
    ]
    new: list[Rec] = []
    for m in msgs:
        res = store.put_message(m)
        assert res.status is PutStatus.PUT_OK
        assert res.queue_offset == counts[(m.topic, m.queue_id)], (m.topic, m.queue_id)  # dense, no reuse
        counts[(m.topic, m.queue_id)] += 1
        new.append(
            Rec(
                m.topic,
                m.queue_id,
                res.queue_offset,
                res.physical_offset,
                res.wrote_bytes,
                m.body,
                "N",
                m.keys[0],
                "",
                0,
            )
        )
    assert store.wait_dispatched(10)
    for r in new:
        got = store.get_message("g", r.topic, r.queue_id, r.queue_offset, 1)
        assert got.status is GetStatus.FOUND
        assert got.messages[0].physical_offset == r.phys and got.messages[0].body == r.body
        # the index is not blind to records written after recovery, wherever they landed
        assert [m.physical_offset for m in store.query_message(r.topic, r.key)] == [r.phys], r.key
    for (topic, qid), n in counts.items():
        assert store.max_offset_in_queue(topic, qid) == n
    return new


@contextlib.contextmanager
def _recovered(root: Path, p: Pristine, kept: list[Rec], gone: list[Rec], tag: str) -> Iterator[MessageStore]:
    """Open the damaged store for the caller's checks of the recovery report, then (if they pass)
    verify it with ``_verify_recovered``; on a failure the store is closed all the same."""
    store = _open(root, p.end_time)
    try:
        yield store
    except BaseException:
        with contextlib.suppress(Exception):
            store.close()
        raise
    _verify_recovered(store, root, p, kept, gone, tag)


def _verify_recovered(
    store: MessageStore, root: Path, p: Pristine, kept: list[Rec], gone: list[Rec], tag: str
) -> None:
    """Content right after recovery, new puts, clean close, clean reopen with everything there."""
    end = _expected_end(root, kept)
    try:
        assert all(r.phys >= end for r in gone)
        _check_content(store, kept, gone, end)
        new = _put_new(store, kept, gone, tag)
        end_after = store.max_phy_offset()
    finally:
        store.close()
    assert not (root / "abort").exists()
    with _open(root, p.end_time + 3_600_000) as again:
        assert not again.abnormal_shutdown_detected
        assert again.recovery is not None and again.recovery.stop != "corrupt"
        _check_content(again, sorted(kept + new, key=lambda r: r.phys), gone, end_after)


# --- 1. a cut (zeroed) tail ------------------------------------------------------------------------------


def _last_segment_recs(p: Pristine) -> tuple[int, list[Rec]]:
    base = int(_last_segment(p.root).name)
    return base, [r for r in p.recs if r.phys >= base]


def _body_start(r: Rec) -> int:
    return r.props_start - 2 - len(r.topic) - 1 - len(r.body)


def _cut_positions(p: Pristine) -> list[tuple[str, int]]:
    """38 cut points in the last segment: its start, record boundaries, inside the size and magic
    fields, inside headers, inside bodies, after the last record, and seeded random points before
    the properties (a cut inside PROPERTIES has its own test: the format cannot see it)."""
    base, last = _last_segment_recs(p)
    assert len(last) > 40
    picks = [last[-1], last[-2], last[-5], last[-17], last[len(last) // 2], last[0]]
    out: list[tuple[str, int]] = [("segment-start", base), ("after-last-record", last[-1].end)]
    for i, r in enumerate(picks):
        out += [
            (f"boundary-{i}", r.phys),
            (f"in-size-{i}", r.phys + 3),
            (f"in-magic-{i}", r.phys + 6),
            (f"in-header-{i}", r.phys + 20 + 7 * i),
            (f"in-body-{i}", _body_start(r) + len(r.body) // 2),
        ]
    rng = random.Random(1234)
    for i in range(6):
        r = rng.choice(last)
        out.append((f"random-{i}", rng.randrange(r.phys, r.props_start)))
    return out


N_CUTS = 38


def test_cut_positions_are_varied(pristine: Pristine) -> None:
    positions = _cut_positions(pristine)
    assert len(positions) == N_CUTS
    assert len({pos for _, pos in positions}) >= N_CUTS - 2


@pytest.mark.parametrize("case", range(N_CUTS))
def test_tail_cut_keeps_every_record_before_it(pristine: Pristine, tmp_path: Path, case: int) -> None:
    """Zero the last segment from a point on (abort present: the crash path). Every record that
    ends before the first changed byte survives intact; the rest is gone from everywhere."""
    name, pos = _cut_positions(pristine)[case]
    root = _copy(pristine, tmp_path)
    cut = _zero_from(root, pos)
    (root / "abort").touch()
    kept, gone = _split(pristine.recs, cut)
    with _recovered(root, pristine, kept, gone, f"cut{case}") as store:
        rep = store.recovery
        assert rep is not None and rep.abnormal, name
        assert rep.end_offset == _expected_end(root, kept), name
        if gone:
            assert rep.stop in ("corrupt", "end_of_data"), name
            assert (rep.damage is not None) == (rep.stop == "corrupt"), name


def test_tail_cut_inside_properties_keeps_the_records_before(pristine: Pristine, tmp_path: Path) -> None:
    """A cut inside the PROPERTIES of the last record. The 4.x format has no checksum over the
    properties (BODYCRC covers the body only, as in RocketMQ 4.9), so zeroing their tail keeps
    every length field consistent and the record may pass recovery with damaged properties.
    What must hold either way: everything before it is intact and readable, the damaged record's
    body and topic are intact if it is kept, and the store works afterwards."""
    _base, last = _last_segment_recs(pristine)
    target = last[-1]
    pos = target.props_start + 12
    root = _copy(pristine, tmp_path)
    cut = _zero_from(root, pos)
    assert target.phys < cut < target.end
    (root / "abort").touch()
    kept, gone = _split(pristine.recs, cut)
    assert gone == [target]
    with _open(root, pristine.end_time) as store:
        rep = store.recovery
        assert rep is not None
        assert store.wait_dispatched(10)
        assert rep.end_offset in (target.phys, target.end)
        for r in kept[-30:]:
            m = store.look_message_by_offset(r.phys)
            assert m is not None and m.body == r.body and m.keys == [r.key]
        if rep.end_offset == target.end:
            m = store.look_message_by_offset(target.phys)
            assert m is not None and m.body == target.body and m.topic == target.topic
            assert m.properties != {"TAGS": target.tags, "KEYS": target.key, "UNIQ_KEY": target.uniq}
        res = store.put_message(
            Message(target.topic, b"after", keys=["after-props-cut"], queue_id=target.queue_id)
        )
        assert res.status is PutStatus.PUT_OK
        assert res.physical_offset == rep.end_offset
        assert store.wait_dispatched(10)
        assert [m.body for m in store.query_message(target.topic, "after-props-cut")] == [b"after"]


# --- 2. flipped bytes in one of the last records ---------------------------------------------------------


def _flip(root: Path, offset: int, xor: int) -> None:
    for seg in _segments(root):
        base = int(seg.name)
        if base <= offset < base + SEG:
            with open(seg, "r+b") as f:
                f.seek(offset - base)
                b = f.read(1)[0]
                f.seek(offset - base)
                f.write(bytes([b ^ xor]))
            return
    raise AssertionError(f"no segment holds {offset}")


# (what, where in the record, xor, a word the damage report must contain)
FLIPS = [
    ("body-byte", "body", 0xFF, "CRC"),
    ("totalsize-low-byte", 3, 0x01, "TOTALSIZE"),
    ("totalsize-high-byte", 1, 0x40, "TOTALSIZE"),
    ("totalsize-sign-bit", 0, 0x80, "TOTALSIZE"),
    ("magic-byte", 5, 0xFF, "magic"),
    ("topic-length-byte", "topic-length", None, "TOPICLENGTH"),
]


@pytest.mark.parametrize("abort", [True, False], ids=["abort", "no-abort"])
@pytest.mark.parametrize(("what", "where", "xor", "word"), FLIPS, ids=[f[0] for f in FLIPS])
def test_flipped_byte_stops_recovery_at_the_damaged_record(
    pristine: Pristine, tmp_path: Path, what: str, where: int | str, xor: int | None, word: str, abort: bool
) -> None:
    """A flipped byte in the third-last record (CRC checked on recover): recovery stops there with
    stop == "corrupt", says what was wrong, keeps everything before and drops it and all after."""
    _, last = _last_segment_recs(pristine)
    target = last[-3]
    root = _copy(pristine, tmp_path)
    if where == "body":
        _flip(root, _body_start(target) + len(target.body) // 3, 0xFF)
    elif where == "topic-length":
        # 127 is a legal TOPICLENGTH; it just does not fit this record
        _patch_commitlog(root, _body_start(target) + len(target.body), bytes([0x7F]))
    else:
        assert isinstance(where, int) and xor is not None
        _flip(root, target.phys + where, xor)
    if abort:
        (root / "abort").touch()
    kept, gone = (
        [r for r in pristine.recs if r.phys < target.phys],
        [r for r in pristine.recs if r.phys >= target.phys],
    )
    with _recovered(root, pristine, kept, gone, f"flip-{what}-{abort}") as store:
        rep = store.recovery
        assert rep is not None and rep.abnormal == abort
        assert rep.stop == "corrupt", what
        assert rep.damage is not None and word in rep.damage, rep.damage
        assert rep.end_offset == target.phys


def test_flipped_body_byte_goes_unnoticed_without_crc_check(pristine: Pristine, tmp_path: Path) -> None:
    """check_crc_on_recover=False: a flipped body byte passes recovery (every length still adds up),
    the record and everything after it are kept, and the damaged body is served as stored.
    This is why the check is on by default (STORE.md §11)."""
    _, last = _last_segment_recs(pristine)
    target = last[-3]
    root = _copy(pristine, tmp_path)
    at = len(target.body) // 3
    _flip(root, _body_start(target) + at, 0xFF)
    (root / "abort").touch()
    cfg = CFG.replace(check_crc_on_recover=False)
    damaged_body = bytearray(target.body)
    damaged_body[at] ^= 0xFF
    recs = [Rec(**{**r.__dict__, "body": bytes(damaged_body)}) if r is target else r for r in pristine.recs]
    with _open(root, pristine.end_time, cfg) as store:
        rep = store.recovery
        assert rep is not None and rep.abnormal
        assert rep.stop != "corrupt" and rep.damage is None
        assert rep.end_offset == pristine.recs[-1].end
        _check_content(store, recs, [], rep.end_offset)
        m = store.look_message_by_offset(target.phys)
        assert m is not None and m.body != target.body and m.body == bytes(damaged_body)
    # the same store opened with the check on does see it
    (root / "abort").touch()
    with _open(root, pristine.end_time + 1000) as store:
        assert store.recovery is not None and store.recovery.stop == "corrupt"
        assert store.recovery.end_offset == target.phys


# --- 3. damaged consume queues ---------------------------------------------------------------------------


def _queue_file(root: Path, topic: str, qid: int, queue_offset: int) -> tuple[Path, int]:
    seg_bytes = CFG.consume_queue_entries * CQ_ENTRY
    logic = queue_offset * CQ_ENTRY
    return root / "consumequeue" / topic / str(qid) / f"{logic - logic % seg_bytes:020d}", logic % seg_bytes


def _queue_bytes(root: Path, topic: str, qid: int) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((root / "consumequeue" / topic / str(qid)).iterdir()))


def _damaged_queue_target(p: Pristine) -> Rec:
    """The last message of a queue that is not the queue of the last record of the log: after
    a normal restart, dispatch resumes near the end of the log, not at this message."""
    _, last = _last_segment_recs(p)
    target = last[-4]
    assert (target.topic, target.queue_id) != (last[-1].topic, last[-1].queue_id)
    assert all((r.topic, r.queue_id) != (target.topic, target.queue_id) for r in last[-3:])
    return target


CQ_DAMAGE = {
    # the queue's last entry torn: only its commitlog offset made it (size 0: invalid)
    "partial-8-bytes": lambda entry: entry[:8] + bytes(12),
    # the queue's last entry replaced by 12 bytes of garbage (offset -1: invalid)
    "garbage-12-bytes": lambda entry: b"\xff" * 12 + bytes(8),
}


@pytest.mark.parametrize("abort", [True, False], ids=["abort", "no-abort"])
@pytest.mark.parametrize("damage", list(CQ_DAMAGE))
def test_torn_consume_queue_entry_is_cut_and_rebuilt(
    pristine: Pristine, tmp_path: Path, damage: str, abort: bool
) -> None:
    """The last entry of a consume queue is a half-written entry: recovery cuts it (reported in
    queue_bytes_damaged) and re-dispatch writes the right entry again from the commitlog, so the
    queue file ends up byte-identical to the undamaged one (tagsCode included)."""
    target = _damaged_queue_target(pristine)
    root = _copy(pristine, tmp_path)
    path, pos = _queue_file(root, target.topic, target.queue_id, target.queue_offset)
    data = bytearray(path.read_bytes())
    data[pos : pos + CQ_ENTRY] = CQ_DAMAGE[damage](bytes(data[pos : pos + CQ_ENTRY]))
    path.write_bytes(data)
    if abort:
        (root / "abort").touch()
    want = _queue_bytes(pristine.root, target.topic, target.queue_id)
    with _recovered(root, pristine, pristine.recs, [], f"cq-{damage}-{abort}") as store:
        rep = store.recovery
        assert rep is not None and rep.abnormal == abort
        assert rep.queue_bytes_damaged > 0
        assert rep.stop != "corrupt"
        assert store.wait_dispatched(10)
        assert store.max_offset_in_queue(target.topic, target.queue_id) == target.queue_offset + 1
        assert _queue_bytes(root, target.topic, target.queue_id)[: len(want)] == want


def test_garbage_after_the_last_consume_queue_entry_is_cut(pristine: Pristine, tmp_path: Path) -> None:
    """12 bytes of garbage after a complete queue (a torn write of an entry that never was)."""
    target = _damaged_queue_target(pristine)
    root = _copy(pristine, tmp_path)
    path, pos = _queue_file(root, target.topic, target.queue_id, target.queue_offset + 1)
    if not path.exists():  # the next entry would open a new queue segment: create it as a crash would
        path.write_bytes(bytes(CFG.consume_queue_entries * CQ_ENTRY))
    data = bytearray(path.read_bytes())
    data[pos : pos + 12] = bytes(range(200, 212))
    path.write_bytes(data)
    (root / "abort").touch()
    with _recovered(root, pristine, pristine.recs, [], "cq-garbage-after") as store:
        rep = store.recovery
        assert rep is not None and rep.queue_bytes_damaged > 0
        assert store.wait_dispatched(10)
        assert store.max_offset_in_queue(target.topic, target.queue_id) == target.queue_offset + 1


def test_zeroed_last_consume_queue_entries_are_rebuilt(pristine: Pristine, tmp_path: Path) -> None:
    """The last three entries of a queue never reached the disk (zeros) before a crash: recovery
    sees no damage (zeros are the end of a queue) but re-dispatch restores them."""
    target = _damaged_queue_target(pristine)
    root = _copy(pristine, tmp_path)
    for qo in range(target.queue_offset - 2, target.queue_offset + 1):
        path, pos = _queue_file(root, target.topic, target.queue_id, qo)
        data = bytearray(path.read_bytes())
        data[pos : pos + CQ_ENTRY] = bytes(CQ_ENTRY)
        path.write_bytes(data)
    (root / "abort").touch()
    want = _queue_bytes(pristine.root, target.topic, target.queue_id)
    with _recovered(root, pristine, pristine.recs, [], "cq-zeroed") as store:
        rep = store.recovery
        assert rep is not None and rep.abnormal
        assert rep.queue_bytes_damaged == 0
        assert store.wait_dispatched(10)
        assert store.max_offset_in_queue(target.topic, target.queue_id) == target.queue_offset + 1
        assert _queue_bytes(root, target.topic, target.queue_id)[: len(want)] == want


# --- 4. a zeroed checkpoint ------------------------------------------------------------------------------


def test_checkpoint_start_point_is_after_the_first_segment(pristine: Pristine, tmp_path: Path) -> None:
    """Control for the next test: with its real checkpoint, abnormal recovery starts past segment 0
    (the sample's store times span many seconds), so a scan from 0 is the checkpoint's doing."""
    root = _copy(pristine, tmp_path)
    (root / "abort").touch()
    with _open(root, pristine.end_time) as store:
        assert store.recovery is not None and store.recovery.abnormal
        assert store.recovery.scan_start > 0


@pytest.mark.parametrize("lost", ["checkpoint", "checkpoint-queues-index"])
def test_zero_checkpoint_with_abort_scans_from_the_first_segment(
    pristine: Pristine, tmp_path: Path, lost: str
) -> None:
    """A checkpoint of 4096 zero bytes says nothing is known flushed: abnormal recovery scans the
    whole log from the first segment. With the consume queues and index lost as well (all
    queue files zeroed, index files deleted) everything is rebuilt from the commitlog."""
    root = _copy(pristine, tmp_path)
    (root / "checkpoint").write_bytes(bytes(4096))
    if lost == "checkpoint-queues-index":
        for f in (root / "consumequeue").rglob("*"):
            if f.is_file():
                f.write_bytes(bytes(f.stat().st_size))
        for f in (root / "index").iterdir():
            f.unlink()
    (root / "abort").touch()
    with _recovered(root, pristine, pristine.recs, [], f"cp-{lost}") as store:
        rep = store.recovery
        assert rep is not None and rep.abnormal
        assert rep.scan_start == 0
        assert rep.records_scanned == len(pristine.recs)
        assert rep.stop != "corrupt" and rep.end_offset == pristine.recs[-1].end
        assert rep.reput_from == 0 or lost == "checkpoint"


@pytest.mark.parametrize("abort", [True, False], ids=["abort", "no-abort"])
def test_checkpoint_truncated_to_zero_bytes_is_rebuilt(
    pristine: Pristine, tmp_path: Path, abort: bool
) -> None:
    """A checkpoint of 0 bytes (truncated, then a crash) is ignored, not refused: its times count
    as 0 (so after a crash the whole log is scanned), the report says so, the next flush writes
    it whole again."""
    root = _copy(pristine, tmp_path)
    (root / "checkpoint").write_bytes(b"")
    if abort:
        (root / "abort").touch()
    with _recovered(root, pristine, pristine.recs, [], f"cp-empty-{abort}") as store:
        rep = store.recovery
        assert rep is not None and rep.abnormal is abort
        assert len(rep.rebuilt) == 1 and "checkpoint (0 bytes, not 4096)" in rep.rebuilt[0]
        assert rep.scan_start == 0 or not abort
    assert (root / "checkpoint").stat().st_size == 4096


def _queue_segments(root: Path, topic: str, qid: int) -> list[Path]:
    return sorted((root / "consumequeue" / topic / str(qid)).iterdir())


@pytest.mark.parametrize("damage", ["newest-emptied", "first-emptied", "gap"])
@pytest.mark.parametrize("abort", [True, False], ids=["abort", "no-abort"])
def test_damaged_consume_queue_segments_are_rebuilt(
    pristine: Pristine, tmp_path: Path, damage: str, abort: bool
) -> None:
    """A consume-queue segment emptied (truncated to 0), or one after a missing segment (the
    newest deleted under a writer that then rolled to the next), holds nothing the commitlog
    does not: open drops it and every later one of its queue, reports them, and re-dispatch
    writes the queue again, byte for byte."""
    root = _copy(pristine, tmp_path)
    topic, qid = QUEUES[0]
    segments = _queue_segments(root, topic, qid)
    assert len(segments) == 2
    want = _queue_bytes(root, topic, qid)
    size = segments[0].stat().st_size
    if damage == "newest-emptied":
        segments[1].write_bytes(b"")
        dropped = segments[1:]
    elif damage == "first-emptied":
        segments[0].write_bytes(b"")
        dropped = segments
    else:
        segments[1].unlink()
        rolled = segments[1].with_name(f"{int(segments[1].name) + size:020d}")
        rolled.write_bytes(bytes(size))
        dropped = [rolled]
    if abort:
        (root / "abort").touch()
    with _recovered(root, pristine, pristine.recs, [], f"cq-{damage}-{abort}") as store:
        rep = store.recovery
        assert rep is not None
        assert [line.split(" ")[0] for line in rep.rebuilt] == [str(p) for p in dropped]
        assert store.wait_dispatched(10)
        assert _queue_bytes(root, topic, qid)[: len(want)] == want


@pytest.mark.parametrize(
    "damage", ["newest-segment-deleted", "every-segment-deleted", "queue-dir-deleted", "topic-dir-deleted"]
)
@pytest.mark.parametrize("abort", [False, True], ids=["clean", "crash"])
def test_deleted_newest_consume_queue_files_are_rebuilt(
    pristine: Pristine, tmp_path: Path, damage: str, abort: bool
) -> None:
    """A queue's newest segment deleted (its older ones full: no gap shows), every segment or
    the queue's or topic's directory deleted, after a clean stop or a crash: nothing in what is
    left looks damaged, the queue is only short. Open finds the records no queue holds, reports
    each such queue, and re-dispatch writes it again byte for byte: every message reads back
    through its queue, with its offset."""
    root = _copy(pristine, tmp_path)
    topic, qid = QUEUES[0]
    segments = _queue_segments(root, topic, qid)
    assert len(segments) == 2
    wants = {q: _queue_bytes(root, *q) for q in QUEUES}
    if damage == "newest-segment-deleted":
        segments[1].unlink()
        hit = [(topic, qid)]
    elif damage == "every-segment-deleted":
        for seg in segments:
            seg.unlink()
        hit = [(topic, qid)]
    elif damage == "queue-dir-deleted":
        shutil.rmtree(segments[0].parent)
        hit = [(topic, qid)]
    else:
        shutil.rmtree(segments[0].parent.parent)
        hit = [q for q in QUEUES if q[0] == topic]
    if abort:
        (root / "abort").touch()
    with _recovered(root, pristine, pristine.recs, [], f"cq-gone-{damage}-{abort}") as store:
        rep = store.recovery
        assert rep is not None
        assert [line.split(":")[0] for line in rep.rebuilt] == [f"consume queue {t}/{q}" for t, q in hit]
        assert store.wait_dispatched(10)
        for q in QUEUES:
            assert _queue_bytes(root, *q)[: len(wants[q])] == wants[q], q


@pytest.mark.parametrize("damage", ["newest-segment", "queue-dir"])
def test_queue_files_deleted_under_a_live_writer_then_a_crash_are_rebuilt(
    tmp_path: Path, damage: str
) -> None:
    """The newest segment of a queue, or its directory, deleted under a running writer (which
    goes on writing the deleted file), then the writer killed: the next open rebuilds the queue
    from the commitlog, every message of it in order, and reports it."""
    root = tmp_path / "store"
    writer = LiveWriter(root, CFG)
    writer.put("T", 60, queues=1)  # two segments of 40 entries, durable
    writer.close()
    writer = LiveWriter(root, CFG)
    try:
        segments = _queue_segments(root, "T", 0)
        assert len(segments) == 2
        if damage == "newest-segment":
            segments[1].unlink()
        else:
            shutil.rmtree(segments[0].parent)
        writer.put("T", 10, queues=1)
    finally:
        writer.kill()
    assert (root / "abort").exists()
    with MessageStore.open(root, CFG) as store:
        rep = store.recovery
        assert rep is not None and rep.abnormal
        assert [line.split(":")[0] for line in rep.rebuilt] == ["consume queue T/0"]
        assert store.wait_dispatched(10)
        got = _read_queue(store, "T", 0)
        assert [m.queue_offset for m in got] == list(range(70))
        assert [m.body for m in got] == [f"T-{i}".encode() for i in [*range(60), *range(10)]]


def _old_queue_store(root: Path) -> tuple[list[bytes], int]:
    """A store whose queue OldTopic/0 (90 entries: segments of 40, 40, 10) is written first, then
    more than three commitlog segments of another topic: its records lie before the stretch a
    clean open scans. Returns its bodies and the store time after the last record."""
    clock = ManualClock(T0)
    bodies = [b"old-%03d-" % i + bytes(200) for i in range(90)]
    with MessageStore.open(root, CFG, clock=clock) as store:
        results = store.put_messages([Message("OldTopic", body, queue_id=0) for body in bodies])
        assert all(r.status is PutStatus.PUT_OK for r in results)
        for _ in range(5):
            clock.advance(STEP_MS)
            store.put_messages([Message("NewTopic", bytes(1000), queue_id=0) for _ in range(60)])
        assert store.wait_dispatched(10)
    assert len(_segments(root)) >= 5
    return bodies, clock.now_ms() + 60_000


@pytest.mark.parametrize("abort", [False, True], ids=["clean", "crash"])
def test_deleted_newest_segment_of_a_queue_older_than_the_scanned_log_is_rebuilt(
    tmp_path: Path, abort: bool
) -> None:
    """A queue whose records all lie before the commitlog segments a clean open scans, its
    newest segment deleted: the older segment before it is full, so the queue may go on past it;
    open looks for its records from its end, rebuilds it and reports it."""
    root = tmp_path / "store"
    bodies, end_time = _old_queue_store(root)
    segments = _queue_segments(root, "OldTopic", 0)
    assert [p.stat().st_size for p in segments] == [40 * CQ_ENTRY] * 3
    segments[2].unlink()
    if abort:
        (root / "abort").touch()
    with _open(root, end_time) as store:
        rep = store.recovery
        assert rep is not None
        assert rep.rebuilt == (
            "consume queue OldTopic/0: entries at queue offsets 80..89 missing for records the commitlog "
            "holds (its newest segment or directory deleted)",
        )
        assert store.wait_dispatched(10)
        got = _read_queue(store, "OldTopic", 0)
        assert [m.queue_offset for m in got] == list(range(90))
        assert [m.body for m in got] == bodies
        assert len(_read_queue(store, "NewTopic", 0)) == 300
    with _open(root, end_time) as again:
        assert again.recovery is not None and again.recovery.rebuilt == ()
        assert len(_read_queue(again, "OldTopic", 0)) == 90


@pytest.mark.parametrize("deleted", ["newest", "every"])
@pytest.mark.parametrize("abort", [False, True], ids=["clean", "crash"])
def test_deleted_index_files_are_rebuilt(
    pristine: Pristine, tmp_path: Path, abort: bool, deleted: str
) -> None:
    """The newest index file deleted (the one before it is full), or every one: every key is
    found again after open."""
    root = _copy(pristine, tmp_path)
    files = sorted((root / "index").iterdir())
    for f in files[-1:] if deleted == "newest" else files:
        f.unlink()
    full_end = _index_headers(root)[-1][2] if deleted == "newest" else 0
    if abort:
        (root / "abort").touch()
    with _recovered(root, pristine, pristine.recs, [], f"index-gone-{deleted}-{abort}") as store:
        rep = store.recovery
        assert rep is not None
        if deleted == "newest":
            assert rep.rebuilt == (
                f"index: {files[-2]} is full and the commitlog goes on past its last record (the index file "
                f"after it deleted): indexed again from {full_end}",
            )
        else:
            assert rep.rebuilt == (
                "index: no index file left for the commitlog's records: indexed again from 0",
            )


def test_a_queue_ending_exactly_at_a_full_segment_reports_nothing_rebuilt(tmp_path: Path) -> None:
    """A queue whose last segment is exactly full may lack the next one; the log is checked
    from its end, finds nothing missing, and the open reports nothing."""
    root = tmp_path / "store"
    with MessageStore.open(root, CFG, clock=ManualClock(T0)) as store:
        store.put_messages([Message("T", b"m%d" % i, queue_id=0) for i in range(80)])
        store.put_messages([Message("U", b"u%d" % i, queue_id=0) for i in range(10)])
        assert store.wait_dispatched(10)
    assert [p.stat().st_size for p in _queue_segments(root, "T", 0)] == [40 * CQ_ENTRY] * 2
    with MessageStore.open(root, CFG, clock=ManualClock(T0)) as store:
        assert store.recovery is not None and store.recovery.rebuilt == ()
        assert store.max_offset_in_queue("T", 0) == 80 and store.max_offset_in_queue("U", 0) == 10


def test_entries_past_a_cut_log_go_when_the_queue_ends_with_an_empty_segment(tmp_path: Path) -> None:
    """A queue whose last segment is full can also have the next one, empty: made for the next
    entry, whose bytes a power cut kept from the disk. When the log's tail was lost too, the
    full segment's entries past the new end must go even so; kept, they would point at the
    next records stored there. Every queue offset then reads back its own message."""
    root = tmp_path / "store"
    with MessageStore.open(root, CFG, clock=ManualClock(T0)) as store:
        put = store.put_messages([Message("T", b"m%d" % i, queue_id=0) for i in range(80)])
        assert store.wait_dispatched(10)
    segments = _queue_segments(root, "T", 0)
    assert [p.stat().st_size for p in segments] == [40 * CQ_ENTRY] * 2
    (segments[-1].parent / f"{80 * CQ_ENTRY:020d}").write_bytes(bytes(40 * CQ_ENTRY))
    _zero_from(root, put[70].physical_offset)
    (root / "abort").touch()
    with MessageStore.open(root, CFG, clock=ManualClock(T0 + 1000)) as store:
        assert store.recovery is not None and store.recovery.end_offset == put[70].physical_offset
        assert store.max_offset_in_queue("T", 0) == 70
        more = store.put_messages([Message("T", b"n%d" % i, queue_id=0) for i in range(5)])
        assert [r.queue_offset for r in more] == [70, 71, 72, 73, 74]
        assert store.wait_dispatched(10)
        got = [m.body for m in _read_queue(store, "T", 0)]
    assert got == [b"m%d" % i for i in range(70)] + [b"n%d" % i for i in range(5)]


@pytest.mark.parametrize("abort", [False, True], ids=["clean", "crash"])
def test_healthy_store_reports_nothing_rebuilt(pristine: Pristine, tmp_path: Path, abort: bool) -> None:
    root = _copy(pristine, tmp_path)
    if abort:
        (root / "abort").touch()
    with _recovered(root, pristine, pristine.recs, [], f"healthy-{abort}") as store:
        rep = store.recovery
        assert rep is not None and rep.rebuilt == ()


# --- 5. unclean stop whose abort file is missing -----------------------------------------------------------


@pytest.mark.parametrize("damage", ["cut-at-boundary", "cut-in-body", "crc"])
def test_missing_abort_normal_recovery_still_cuts_damaged_tail(
    pristine: Pristine, tmp_path: Path, damage: str
) -> None:
    """No abort file (lost after an unclean stop): the normal path, which scans the last three
    segments, still finds the damaged tail, cuts it and keeps everything before."""
    _, last = _last_segment_recs(pristine)
    target = last[-7]
    root = _copy(pristine, tmp_path)
    if damage == "cut-at-boundary":
        cut = _zero_from(root, target.phys)
    elif damage == "cut-in-body":
        cut = _zero_from(root, _body_start(target) + 5)
    else:
        _flip(root, _body_start(target) + 5, 0x55)
        cut = target.phys + 1
    assert not (root / "abort").exists()
    kept, gone = _split(pristine.recs, cut)
    assert gone[0] is target
    with _recovered(root, pristine, kept, gone, f"noabort-{damage}") as store:
        rep = store.recovery
        assert rep is not None and not rep.abnormal and not store.abnormal_shutdown_detected
        assert rep.end_offset == target.phys
        assert rep.stop == ("end_of_data" if damage == "cut-at-boundary" else "corrupt")
        assert rep.queue_entries_dropped == len(gone)


# --- 6. the index after a cut ----------------------------------------------------------------------------


def _index_headers(root: Path) -> list[tuple[str, int, int, int]]:
    """(name, beginPhyOffset, endPhyOffset, indexCount) of each index file, oldest first."""
    out = []
    for f in sorted((root / "index").iterdir()):
        _, _, begin, end, _, count = struct.unpack(">qqqqii", f.read_bytes()[:40])
        out.append((f.name, begin, end, count))
    return out


def test_index_split_record_keeps_all_its_keys_after_a_cut(tmp_path: Path) -> None:
    """A record whose two keys (UNIQ_KEY, KEYS) were split between two index files (the first
    filled up in between) survives a cut of a later record: after recovery, the newest index file
    (holding its second key and the cut record) is gone, and re-indexing must index that record
    again, not skip it as already indexed. Every key of every surviving record is found."""
    cfg = CFG.replace(index_max_entries=8)  # 7 usable entries: 2 keys per message split every 3.5
    clock = ManualClock(T0)
    root = tmp_path / "store"
    keys = [f"s{i}" for i in range(5)]
    with MessageStore.open(root, cfg, clock=clock) as store:
        for k in keys:
            assert (
                store.put_message(Message("TopicA", b"body-" + k.encode(), keys=[k])).status
                is PutStatus.PUT_OK
            )
            clock.advance(10)
        assert store.wait_dispatched(10)
        phys = {k: store.query_message("TopicA", k)[0].physical_offset for k in keys}
    headers = _index_headers(root)
    # message s3's UNIQ_KEY is the 7th entry of file 1, its KEYS key the 1st of file 2
    assert [h[3] for h in headers] == [8, 4]
    assert headers[0][2] == headers[1][1] == phys["s3"]
    last_end = phys["s4"] + 1
    _zero_from(root, phys["s4"] + 30)  # cut inside s4
    (root / "abort").touch()
    with MessageStore.open(root, cfg, clock=ManualClock(T0 + 60_000)) as store:
        assert store.recovery is not None and store.recovery.end_offset == phys["s4"] < last_end
        assert store.wait_dispatched(10)
        for k in keys[:4]:
            assert [m.physical_offset for m in store.query_message("TopicA", k)] == [phys[k]], k
        assert store.query_message("TopicA", "s4") == []


@pytest.mark.parametrize("where", ["inside-newest-index-file", "before-newest-index-file"])
def test_index_after_cut_finds_survivors_and_new_records_not_cut_ones(
    pristine: Pristine, tmp_path: Path, where: str
) -> None:
    """A cut inside the range of the newest index file, or before it (the newest file is then
    wholly past the cut and the one before straddles it): the keys of surviving records are all
    found, those of cut records are not (no stale entry), and records written after recovery are
    indexed, with new keys and with the keys of cut records, although they reuse the commitlog
    offsets the cut records had (an index that still believed it had indexed up to the old end
    would skip them)."""
    headers = _index_headers(pristine.root)
    newest_begin = headers[-1][1]
    after = [r for r in pristine.recs if r.phys > newest_begin]
    before = [r for r in pristine.recs if r.phys < newest_begin]
    target = after[len(after) // 2] if where == "inside-newest-index-file" else before[-20]
    root = _copy(pristine, tmp_path)
    cut = _zero_from(root, _body_start(target) + 1)
    (root / "abort").touch()
    kept, gone = _split(pristine.recs, cut)
    assert gone[0] is target
    with _recovered(root, pristine, kept, gone, f"index-{where}") as store:
        assert store.recovery is not None and store.recovery.end_offset == target.phys


# --- 7. a pre-allocated, all-zero last segment -----------------------------------------------------------


@pytest.mark.parametrize("abort", [True, False], ids=["abort", "no-abort"])
def test_preallocated_zero_segment_is_deleted_or_ignored(
    pristine: Pristine, tmp_path: Path, abort: bool
) -> None:
    """After a crash the next segment, pre-allocated in the background, is an all-zero file.
    Recovery deletes (or ignores) it; the log continues where the data ends, rolls normally
    into new segments later, and all of it survives a reopen."""
    root = _copy(pristine, tmp_path)
    last = _last_segment(root)
    spare = last.parent / f"{int(last.name) + SEG:020d}"
    spare.write_bytes(bytes(SEG))
    if abort:
        (root / "abort").touch()
    end = pristine.recs[-1].end
    store = _open(root, pristine.end_time)
    try:
        rep = store.recovery
        assert rep is not None and rep.abnormal == abort
        assert rep.end_offset == end and store.max_phy_offset() == end
        assert rep.stop != "corrupt"
        if rep.segments_deleted:
            assert rep.segments_deleted == 1 and not spare.exists()
        _check_content(store, pristine.recs, [], end)
        # write past the next two segment boundaries
        rng = random.Random(99)
        counts = Counter((r.topic, r.queue_id) for r in pristine.recs)
        new = []
        while store.max_phy_offset() < int(last.name) + 2 * SEG + 1000:
            i = len(new)
            t, q = QUEUES[i % len(QUEUES)]
            m = Message(t, _body(rng, 900), tags="N", keys=[f"roll-{i}"], queue_id=q)
            res = store.put_message(m)
            assert res.status is PutStatus.PUT_OK and res.queue_offset == counts[(t, q)]
            counts[(t, q)] += 1
            new.append(
                Rec(
                    t,
                    q,
                    res.queue_offset,
                    res.physical_offset,
                    res.wrote_bytes,
                    m.body,
                    "N",
                    m.keys[0],
                    "",
                    0,
                )
            )
        assert new[0].phys == end
        _check_content(store, pristine.recs + new, [], store.max_phy_offset())
        end_after = store.max_phy_offset()
    finally:
        store.close()
    with _open(root, pristine.end_time + 3_600_000) as again:
        assert not again.abnormal_shutdown_detected
        assert again.recovery is not None and again.recovery.segments_deleted == 0
        _check_content(again, pristine.recs + new, [], end_after)


# --- 8. RocketMQ 4.9.8's own crash sample ----------------------------------------------------------------

CRASH_END = 583102
ZERO_SEGMENT = "00000000000000589824"


def _fixture_rows(name: str) -> list[dict[str, Any]]:
    path = FIXTURES / f"{name}.expected.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _crash_copy(dest: Path) -> Path:
    return copy_fixture("store-sample-crash", dest)


def _snapshot(store: MessageStore, clrecs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out = []
    for rec in clrecs:
        m = store.look_message_by_offset(rec["offset"])
        assert m is not None, rec["offset"]
        # RocketMQ shows "" for a record without properties, "null" for one without KEYS
        raw_keys = m.properties.get("KEYS")
        keys = raw_keys if raw_keys is not None else ("null" if m.properties else "")
        assert (m.store_size, m.topic, m.queue_id, m.queue_offset, m.sys_flag, m.store_timestamp, keys) == (
            rec["size"],
            rec["topic"],
            rec["queueId"],
            rec["queueOffset"],
            rec["sysFlag"],
            rec["storeTs"],
            rec["keys"],
        ), rec["offset"]
        assert (m.uniq_key or "null") == rec["uniqKey"]
        out.append((m.physical_offset, m.msg_id, m.body, tuple(sorted(m.properties.items()))))
    return out


def test_rocketmq_crash_sample_recovers_and_reopens_identically(tmp_path: Path) -> None:
    """RocketMQ 4.9.8 halted with abort present and a pre-allocated all-zero newest segment:
    the abnormal path is taken, every record up to 583102 reads back as RocketMQ read it, the
    zero segment is removed, every queue matches RocketMQ's, and a clean reopen sees the same."""
    rows = _fixture_rows("store-sample-crash")
    clrecs = [r for r in rows if r["kind"] == "clrec"]
    queues = {
        (r["topic"], r["queueId"]): (r["minOffset"], r["maxOffset"]) for r in rows if r["kind"] == "queue"
    }
    msgs = [r for r in rows if r["kind"] == "msg"]
    assert clrecs and queues and msgs
    assert clrecs[-1]["offset"] + clrecs[-1]["size"] == CRASH_END
    root = _crash_copy(tmp_path)
    assert (root / "abort").exists() and (root / "commitlog" / ZERO_SEGMENT).exists()
    clock = fixture_clock("store-sample-crash")  # its delayed messages stay undelivered, as in RocketMQ
    with MessageStore.open(root, CFG, clock=clock) as store:
        rep = store.recovery
        assert rep is not None and rep.abnormal and store.abnormal_shutdown_detected
        assert rep.end_offset == CRASH_END and store.max_phy_offset() == CRASH_END
        assert rep.stop != "corrupt" and rep.damage is None
        assert rep.segments_deleted == 1
        assert not (root / "commitlog" / ZERO_SEGMENT).exists()
        assert store.wait_dispatched(10)
        first = _snapshot(store, clrecs)
        for (topic, qid), (lo, hi) in queues.items():
            assert (store.min_offset_in_queue(topic, qid), store.max_offset_in_queue(topic, qid)) == (lo, hi)
        for row in msgs:
            got = store.get_message("g", row["topic"], row["queueId"], row["queueOffset"], 1)
            assert got.status is GetStatus.FOUND
            m = got.messages[0]
            assert m.physical_offset == row["cq"]["phy"] and m.tags_code == row["cq"]["tagsCode"]
            body = row["body_utf8"].encode() if "body_utf8" in row else bytes.fromhex(row["body_hex"])
            assert m.body == body
        assert store.look_message_by_offset(CRASH_END) is None
    assert not (root / "abort").exists()
    with MessageStore.open(root, CFG, clock=clock) as again:
        rep = again.recovery
        assert rep is not None and not rep.abnormal and not again.abnormal_shutdown_detected
        assert rep.end_offset == CRASH_END and rep.segments_deleted == 0
        assert again.wait_dispatched(10)
        assert _snapshot(again, clrecs) == first
        for (topic, qid), (lo, hi) in queues.items():
            assert (again.min_offset_in_queue(topic, qid), again.max_offset_in_queue(topic, qid)) == (lo, hi)
    assert sorted(p.name for p in (root / "commitlog").iterdir())[-1] < ZERO_SEGMENT


# --- 9. damage in two segments: no recovery cuts below what an earlier one accepted ---------------------


def _damage_record(root: Path, r: Rec, how: str) -> None:
    if how == "crc":
        _flip(root, _body_start(r) + len(r.body) // 2, 0x5A)
    else:  # a TOTALSIZE that runs past the segment: nothing after it can be found by lengths
        _flip(root, r.phys + 1, 0x40)


@pytest.mark.parametrize("second_abort", [False, True], ids=["then-normal", "then-abnormal"])
@pytest.mark.parametrize("first_abort", [True, False], ids=["abnormal", "normal"])
@pytest.mark.parametrize("old_damage", ["crc", "totalsize"])
def test_damage_in_two_segments_never_cuts_below_an_accepted_recovery(
    pristine: Pristine, tmp_path: Path, old_damage: str, first_abort: bool, second_abort: bool
) -> None:
    """A damaged record in the first segment and one in the last. The first open cuts the last
    segment at its damage (the RocketMQ way) and steps over the older one (reported, everything
    after it kept); puts are acknowledged; the next open, whatever segment it scans from, cuts
    nothing: every valid record and every acknowledged message reads back."""
    _, last = _last_segment_recs(pristine)
    new_target = last[-3]
    first_seg = [r for r in pristine.recs if r.end <= SEG]
    old_target = first_seg[len(first_seg) // 2]
    root = _copy(pristine, tmp_path)
    _damage_record(root, old_target, old_damage)
    _damage_record(root, new_target, "crc")
    valid = [r for r in pristine.recs if r is not old_target and r.phys < new_target.phys]
    if first_abort:
        (root / "abort").touch()
    store = _open(root, pristine.end_time)
    try:
        rep = store.recovery
        assert rep is not None and rep.abnormal == first_abort
        assert rep.stop == "corrupt" and rep.end_offset == new_target.phys
        if rep.scan_start == 0:
            assert [d.start for d in rep.stepped_over] == [old_target.phys]
            assert rep.stepped_over[0].end == old_target.end
        acked = _put_new(store, [*valid, old_target], [new_target, *last[-2:]], f"two-{old_damage}")
    finally:
        store.close()
    if second_abort:
        (root / "abort").touch()
        (root / "checkpoint").write_bytes(bytes(4096))  # and scan from the first segment
    with _open(root, pristine.end_time + 3_600_000) as again:
        rep = again.recovery
        assert rep is not None and rep.abnormal == second_abort
        assert rep.stop != "corrupt"
        assert rep.end_offset == acked[-1].end
        assert [d.start for d in rep.stepped_over] == [old_target.phys]
        assert again.wait_dispatched(10)
        for r in valid + acked:
            m = again.look_message_by_offset(r.phys)
            assert m is not None and m.body == r.body, r.phys
        for r in acked:
            got = again.get_message("g", r.topic, r.queue_id, r.queue_offset, 1)
            assert got.status is GetStatus.FOUND and got.messages[0].physical_offset == r.phys
            assert [m.physical_offset for m in again.query_message(r.topic, r.key)] == [r.phys]


# --- 10. a zero-filled consume-queue segment between valid ones: a hole, rebuilt ----------------------


def _fixture_queue(topic: str, qid: int) -> list[dict[str, Any]]:
    rows = [
        r
        for r in _fixture_rows("store-sample")
        if r["kind"] == "msg" and r["topic"] == topic and r["queueId"] == qid
    ]
    return sorted(rows, key=lambda r: r["queueOffset"])


@pytest.mark.parametrize("abort", [False, True], ids=["normal", "abnormal"])
def test_zero_filled_consume_queue_file_of_the_fixture_is_rebuilt(tmp_path: Path, abort: bool) -> None:
    """RocketMQ's sample store with the first of TopicA/1's two queue files zero-filled: the
    hole is reported and rebuilt from the commitlog, every message of the queue reads back as
    RocketMQ listed it, and the queue file is byte-identical to RocketMQ's again."""
    root = copy_fixture("store-sample", tmp_path)
    qdir = root / "consumequeue" / "TopicA" / "1"
    first = sorted(qdir.iterdir())[0]
    want_bytes = first.read_bytes()
    first.write_bytes(bytes(len(want_bytes)))
    if abort:
        (root / "abort").touch()
    rows = _fixture_queue("TopicA", 1)
    assert len(rows) == 48
    with MessageStore.open(root, CFG, clock=fixture_clock("store-sample")) as store:
        rep = store.recovery
        assert rep is not None and rep.queue_holes == 40
        got = _read_queue(store, "TopicA", 1)
        assert [m.queue_offset for m in got] == [r["queueOffset"] for r in rows]
        assert [m.physical_offset for m in got] == [r["phyOffset"] for r in rows]
        for m, r in zip(got, rows):
            body = r["body_utf8"].encode() if "body_utf8" in r else bytes.fromhex(r["body_hex"])
            assert m.body == body and m.tags_code == r["cq"]["tagsCode"]
    assert first.read_bytes() == want_bytes


@pytest.mark.parametrize(("first", "count"), [(0, 40), (12, 9)], ids=["whole-file", "run-in-file"])
def test_zero_filled_middle_consume_queue_file_is_rebuilt(tmp_path: Path, first: int, count: int) -> None:
    """A queue of five files, entries of the second zero-filled (the whole file, or a run inside
    it; older than the three files a normal recovery walks): reported as a hole and rebuilt; new
    puts continue the queue."""
    root = tmp_path / "store"
    rng = random.Random(5)
    with _open(root, T0) as store:
        results = store.put_messages(
            [Message("TopicA", _body(rng, 50), tags="T", keys=[f"m{i}"], queue_id=0) for i in range(190)]
        )
        assert store.wait_dispatched(10)
    qdir = root / "consumequeue" / "TopicA" / "0"
    files = sorted(qdir.iterdir())
    assert len(files) == 5
    want = files[1].read_bytes()
    damaged = bytearray(want)
    damaged[first * CQ_ENTRY : (first + count) * CQ_ENTRY] = bytes(count * CQ_ENTRY)
    files[1].write_bytes(damaged)
    with _open(root, T0 + 1000) as store:
        rep = store.recovery
        assert rep is not None and not rep.abnormal and rep.queue_holes == count
        got = _read_queue(store, "TopicA", 0)
        assert [m.physical_offset for m in got] == [r.physical_offset for r in results]
        res = store.put_message(Message("TopicA", b"after", queue_id=0))
        assert res.status is PutStatus.PUT_OK and res.queue_offset == 190
    assert files[1].read_bytes() == want
    with _open(root, T0 + 2000) as store:
        assert store.recovery is not None and store.recovery.queue_holes == 0
        assert len(_read_queue(store, "TopicA", 0)) == 191


@pytest.mark.parametrize("abort", [False, True], ids=["normal", "abnormal"])
def test_a_hole_over_the_first_record_of_the_log_is_rebuilt(tmp_path: Path, abort: bool) -> None:
    """The first queue file of the queue that holds the log's first record (commitlog offset 0)
    zero-filled, a later one intact (a power cut after a kernel wrote back the later file's page
    and not the first's): a zero entry reads as "offset 0, size 0", which must not pass for an
    entry of the record at offset 0. Every entry is rebuilt, the first one included."""
    root = tmp_path / "store"
    rng = random.Random(7)
    with _open(root, T0) as store:
        results = store.put_messages(
            [Message("TopicA", _body(rng, 50), keys=[f"m{i}"], queue_id=i % 2) for i in range(120)]
        )
        assert store.wait_dispatched(10)
    assert results[0].physical_offset == 0 and results[0].queue_id == 0
    files = sorted((root / "consumequeue" / "TopicA" / "0").iterdir())
    assert len(files) == 2
    want = files[0].read_bytes()
    files[0].write_bytes(bytes(len(want)))
    if abort:
        (root / "abort").touch()
    with _open(root, T0 + 1000) as store:
        rep = store.recovery
        assert rep is not None and rep.abnormal is abort and rep.queue_holes == 40
        got = _read_queue(store, "TopicA", 0)
        assert [m.physical_offset for m in got] == [r.physical_offset for r in results[::2]]
        assert [m.queue_offset for m in got] == list(range(60))
    assert files[0].read_bytes() == want


# --- 11. index files of a commitlog that is not there ----------------------------------------------------


@pytest.mark.parametrize("commitlog", ["removed", "zero-filled"])
def test_index_files_without_their_commitlog_are_set_aside(tmp_path: Path, commitlog: str) -> None:
    """RocketMQ's sample store with its commitlog gone (or all zeros) but its index files left,
    the newest an empty one (as created when the one before filled up: its header carries that
    file's end on): they describe records that are not there, so recovery deletes them, and new
    puts are indexed and found by key (the stale files made them look indexed already)."""
    root = copy_fixture("store-sample", tmp_path)
    for seg in (root / "commitlog").iterdir():
        if commitlog == "removed":
            seg.unlink()
        else:
            seg.write_bytes(bytes(seg.stat().st_size))
    index_dir = root / "index"
    newest = sorted(index_dir.iterdir())[-1]
    end_phy, end_ts = 290087, 1795324328624
    header = index_layout.IndexHeader(end_ts, end_ts, end_phy, end_phy, 0, 1)
    empty = bytearray(newest.stat().st_size)
    empty[: index_layout.HEADER_SIZE] = index_layout.encode_header(header)
    (index_dir / f"{int(newest.name) + 1}").write_bytes(empty)
    with MessageStore.open(root, CFG, clock=fixture_clock("store-sample")) as store:
        # a zero-filled log ends where the scan (the last three segments) found nothing
        end = store.max_phy_offset()
        assert end == (0 if commitlog == "removed" else 2 * SEG)
        assert all(end_phy < end for _, _, end_phy, _ in _index_headers(root))
        res = store.put_message(Message("TopicA", b"fresh", keys=["fresh-key"], queue_id=0))
        assert res.status is PutStatus.PUT_OK and res.physical_offset == end
        assert store.wait_dispatched(10)
        assert [m.physical_offset for m in store.query_message("TopicA", "fresh-key")] == [end]
        assert store.query_message("TopicA", "key-33") == []


# --- 12. one damaged record does not keep a store shut ----------------------------------------------------


def test_a_damaged_record_does_not_stop_the_delayed_delivery_check_at_open(tmp_path: Path) -> None:
    """RocketMQ's sample store, opened when its delayed messages are due: the check for copies
    delivered before a crash reads the real queues' records after each schedule record, and one
    of them is damaged (an unknown magic code, in a segment recovery does not scan). The check
    logs it and goes on: the store opens, and the damaged record alone is unreadable."""
    root = copy_fixture("store-sample", tmp_path)
    msgs = [r for r in _fixture_rows("store-sample") if r["kind"] == "msg"]
    sched = min((r for r in msgs if r["topic"] == "SCHEDULE_TOPIC_XXXX"), key=lambda r: r["phyOffset"])
    real = (sched["props"]["REAL_TOPIC"], int(sched["props"]["REAL_QID"]))
    queue = sorted((r for r in msgs if (r["topic"], r["queueId"]) == real), key=lambda r: r["queueOffset"])
    victim = next(r for r in queue if sched["phyOffset"] < r["phyOffset"] < 2 * SEG)
    _flip(root, victim["phyOffset"] + 5, 0xFF)
    clock = fixture_clock("store-sample")
    clock.advance(86_400_000)  # every delayed message is due
    with MessageStore.open(root, CFG, clock=clock) as store:
        assert store.look_message_by_offset(victim["phyOffset"]) is None
        for r in queue:
            if r is not victim:
                m = store.look_message_by_offset(r["phyOffset"])
                assert m is not None and m.queue_offset == r["queueOffset"]


# --- 13. a power cut's torn, unflushed tail in an older segment ---------------------------------------


@contextlib.contextmanager
def _recovered_from_a_crash_flushed_to(
    root: Path, pristine: Pristine, until: int
) -> Iterator[tuple[MessageStore, RecoveryReport]]:
    """The store opened after a crash whose checkpoint says the log was flushed up to store time
    ``until``, recovered and dispatched, with its recovery's report."""
    (root / "checkpoint").write_bytes(encode_checkpoint(Checkpoint(until, until, until)))
    (root / "abort").touch()
    with _open(root, pristine.end_time) as store:
        rep = store.recovery
        assert rep is not None and rep.abnormal
        assert store.wait_dispatched(10)
        yield store, rep


def _queues_hold_only(store: MessageStore, kept: list[Rec]) -> None:
    """Every queue reads exactly the entries of the ``kept`` records, in order."""
    for topic, qid in QUEUES:
        got = [m.physical_offset for m in _read_queue(store, topic, qid)]
        assert got == [r.phys for r in kept if (r.topic, r.queue_id) == (topic, qid)]


def _reopened_holds(root: Path, pristine: Pristine, recs: list[Rec]) -> None:
    """A clean reopen ends the log after the last of ``recs`` and reads every one back."""
    with _open(root, pristine.end_time + 60_000) as again:
        rep = again.recovery
        assert rep is not None and not rep.abnormal and rep.end_offset == recs[-1].end
        for r in recs:
            m = again.look_message_by_offset(r.phys)
            assert m is not None and m.body == r.body, r.phys


def _store_time(root: Path, r: Rec) -> int:
    for seg in _segments(root):
        base = int(seg.name)
        if base <= r.phys < base + SEG:
            with open(seg, "rb") as f:
                f.seek(r.phys - base + 56)  # STORETIMESTAMP of a record with IPv4 hosts
                return int(struct.unpack(">q", f.read(8))[0])
    raise AssertionError(f"no segment holds {r.phys}")


@pytest.mark.parametrize("flushed", ["to-before-the-tear", "past-it"])
def test_a_torn_tail_in_an_older_segment_ends_the_log_when_it_was_not_flushed(
    pristine: Pristine, tmp_path: Path, flushed: str
) -> None:
    """A power cut leaves the unflushed end of the log written back in part, in no order: here
    a record of the second-last segment torn (its body never written back) and the records
    after it, in the last segment too, whole. When the checkpoint says the log was flushed only
    to before the torn record, nothing after it was flushed (flushes go in log order): the log
    ends there, as RocketMQ's recovery ends at the first invalid record, and no queue entry
    points into the damage. When it says the records after it were flushed, the damage is to
    flushed data: stepped over, the later records kept."""
    segments = _segments(pristine.root)
    base = int(segments[-2].name)
    in_segment = [r for r in pristine.recs if base <= r.phys and r.end <= base + SEG]
    torn = in_segment[len(in_segment) * 2 // 3]
    root = _copy(pristine, tmp_path)
    _patch_commitlog(root, _body_start(torn), bytes(len(torn.body)))
    if flushed == "to-before-the-tear":
        until = _store_time(root, torn) - 1
    else:  # past the last segment's first record; the scan (3 s before it) takes in the tear
        until = _store_time(root, next(r for r in pristine.recs if r.phys >= int(segments[-1].name))) + 1000
    kept, gone = _split(pristine.recs, torn.phys)
    with _recovered_from_a_crash_flushed_to(root, pristine, until) as (store, rep):
        if flushed == "past-it":
            assert [(d.start, d.end) for d in rep.stepped_over] == [(torn.phys, torn.end)]
            assert rep.end_offset == pristine.recs[-1].end
            assert store.look_message_by_offset(gone[1].phys) is not None
            return
        assert (rep.end_offset, rep.stop, rep.stepped_over) == (torn.phys, "corrupt", ())
        assert len(_segments(root)) == len(segments) - 1
        _queues_hold_only(store, kept)
        acked = _put_new(store, kept, gone, "torn-tail")
    _reopened_holds(root, pristine, kept + acked)


# --- 14. a power cut's lost page inside a record's properties -----------------------------------


@pytest.mark.parametrize("flushed", ["to-before-the-tear", "past-it"])
def test_a_lost_page_of_an_unflushed_records_properties_ends_the_log(
    pristine: Pristine, tmp_path: Path, flushed: str
) -> None:
    """A power cut can leave the page holding the end of a record's PROPERTIES unwritten while
    the page before it, with every length field and the whole body, reached the disk: the
    lengths add up and BODYCRC matches, and nothing else covers the properties (the 4.x
    format). A record stored after the checkpoint's flush time whose properties read as zeros
    from a page boundary on is that tear: the log ends before it (nothing after it was flushed
    either). Flushed records are not second-guessed: their pages reached the disk."""
    base = int(_segments(pristine.root)[-1].name)
    crossing = [
        r
        for r in pristine.recs[:-3]
        if r.phys >= base and (r.props_start - base) // 4096 != (r.end - 1 - base) // 4096
    ]
    torn = crossing[-1]
    page = base + (torn.end - 1 - base) // 4096 * 4096
    assert torn.props_start < page < torn.end
    root = _copy(pristine, tmp_path)
    _patch_commitlog(root, page, bytes(torn.end - page))
    if flushed == "to-before-the-tear":
        until = _store_time(root, torn) - 1
    else:
        until = _store_time(root, pristine.recs[-1]) + 1000
    kept, gone = _split(pristine.recs, torn.phys)
    with _recovered_from_a_crash_flushed_to(root, pristine, until) as (store, rep):
        if flushed == "past-it":
            assert (rep.end_offset, rep.damage) == (pristine.recs[-1].end, None)
            return
        assert (rep.end_offset, rep.stop) == (torn.phys, "corrupt")
        assert rep.damage is not None and "torn by a power cut" in rep.damage
        assert store.look_message_by_offset(torn.phys) is None
        _queues_hold_only(store, kept)
        acked = _put_new(store, kept, gone, "torn-properties")
    _reopened_holds(root, pristine, kept + acked)
