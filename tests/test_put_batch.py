"""MessageStore.put_batch: messages of one topic given as columns, stored all or none.

What is checked is what can be observed: the bytes put_batch leaves on disk (byte for byte those
put_messages / put_message leave for the same messages), the columns it returns, what reads,
lookups, ``verify_store`` and a reopen see afterwards, and the errors it raises (naming the first
bad message) with nothing written.
"""

from __future__ import annotations

import array
import itertools
import random
import re
import struct
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import (
    FlushDiskType,
    GetStatus,
    InvalidMessageError,
    ManualClock,
    Message,
    MessageExt,
    MessageStore,
    PutBatchResult,
    PutMessageResult,
    PutStatus,
    StoreClosedError,
    StoreConfig,
    StoreReadOnlyError,
)
from rocketstore.verify import verify_store
from tests.test_store_api import BLANK_MAGIC, CFG, HEX_UPPER, SEG, T0, drain

_TRANSIENT = (".creating", ".tmp")


# --- helpers ------------------------------------------------------------------------------------------


def open_store(path: Path, cfg: StoreConfig = CFG, clock: ManualClock | None = None) -> MessageStore:
    return MessageStore.open(path, cfg, clock=clock or ManualClock(T0))


def files_under(root: Path, sub: str) -> dict[str, bytes]:
    """Every file under ``root/sub`` (relative path -> bytes), files being created excluded."""
    base = root / sub
    if not base.is_dir():
        return {}
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(base.rglob("*"))
        if p.is_file() and not p.name.endswith(_TRANSIENT)
    }


def assert_same_files(a: Path, b: Path, sub: str) -> None:
    """The files under ``sub`` of two stores are byte-identical. A commitlog segment present in
    one store only (pre-created in the background for the next roll) must be all zero."""
    fa, fb = files_under(a, sub), files_under(b, sub)
    for name in sorted(fa.keys() | fb.keys()):
        if name in fa and name in fb:
            assert fa[name] == fb[name], f"{name} differs"
        else:
            assert sub == "commitlog", f"{name} exists in one store only"
            only = fa.get(name, fb.get(name, b""))
            assert only.count(0) == len(only), f"{name} exists in one store only and holds data"


def non_commitlog_entries(root: Path) -> dict[str, bytes]:
    """Every file of a store but its commitlog segments and the checkpoint, with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.parent.name != "commitlog" and p.name not in ("checkpoint", "lock")
    }


def read_queue(store: MessageStore, topic: str, qid: int) -> list[MessageExt]:
    """Every message of a queue via repeated get_message calls."""
    out: list[MessageExt] = []
    offset = 0
    for _ in range(100_000):
        res = store.get_message("g", topic, qid, offset, 32)
        if res.status is not GetStatus.FOUND:
            break
        assert res.next_begin_offset > offset
        out.extend(res.messages)
        offset = res.next_begin_offset
    return out


def read_queue_batches(store: MessageStore, topic: str, qid: int) -> tuple[list[int], list[bytes]]:
    """(physical offsets, bodies) of a queue via repeated read_batch calls."""
    phys: list[int] = []
    bodies: list[bytes] = []
    offset = 0
    end = store.max_offset_in_queue(topic, qid)
    while offset < end:
        batch = store.read_batch(topic, qid, offset, 1000)
        assert batch.next_offset > offset
        assert batch.queue_offsets.tolist() == list(range(offset, offset + len(batch)))
        phys.extend(batch.physical_offsets.tolist())
        bodies.extend(bytes(batch.body_at(i)) for i in range(len(batch)))
        offset = batch.next_offset
    return phys, bodies


def split_keys(text: str | None) -> list[str]:
    return text.split(" ") if text else []


# --- 1. byte identity with put_messages / put_message ----------------------------------------------------

# tags may hold spaces (they are not split); keys may not. Neither may hold \x01 / \x02 (separators);
# \x00 and lone surrogates are left out (not UTF-8 text a producer sends).
TAG_TEXT = st.one_of(
    st.text(
        alphabet=st.characters(codec="utf-8", blacklist_characters="\x00\x01\x02"),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from(["TagA", "тег", "标签 B", "🏷️"]),
)
KEY = st.one_of(
    st.text(
        alphabet=st.characters(codec="utf-8", blacklist_characters="\x00\x01\x02 "),
        min_size=1,
        max_size=10,
    ),
    st.sampled_from(["order-1", "ключ", "键", "🔑"]),
)
KEYS_TEXT = st.one_of(st.none(), st.lists(KEY, min_size=1, max_size=3).map(" ".join))


@dataclass
class Case:
    topic: str
    bodies: list[bytes]
    body_kind: str  # how put_batch is handed the bodies: bytes, bytearray or memoryview
    queue_ids: int | list[int] | None
    tags: str | list[str | None] | None
    keys: list[str | None] | None
    flag: int
    born: int | None
    chunks: list[int]  # put_batch calls: how many messages each
    segment_size: int


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(st.integers(1, 60))
    bodies = draw(st.lists(st.one_of(st.just(b""), st.binary(max_size=700)), min_size=n, max_size=n))
    queue_ids: int | list[int] | None = draw(
        st.one_of(
            st.none(),
            st.integers(0, 1023),
            st.lists(st.integers(0, 5) | st.integers(0, 1023), min_size=n, max_size=n),
        )
    )
    tags: str | list[str | None] | None = draw(
        st.one_of(st.none(), TAG_TEXT, st.lists(st.none() | TAG_TEXT, min_size=n, max_size=n))
    )
    keys = draw(st.none() | st.lists(KEYS_TEXT, min_size=n, max_size=n))
    chunks: list[int] = []
    left = n
    while left:
        size = min(left, draw(st.sampled_from([left, left, 1, 3, 16, 20])))
        chunks.append(size)
        left -= size
    return Case(
        topic=draw(st.sampled_from(["T", "Topic_1", "a-b_c%d|e"])),
        bodies=bodies,
        body_kind=draw(st.sampled_from(["bytes", "bytearray", "memoryview"])),
        queue_ids=queue_ids,
        tags=tags,
        keys=keys,
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        born=draw(st.none() | st.integers(0, 2**62)),
        chunks=chunks,
        segment_size=draw(st.sampled_from([4096, 8192, SEG])),
    )


def _rows(value: Any, start: int, stop: int) -> Any:
    """A per-message column's slice; one value for all (or None) stays as it is."""
    return value[start:stop] if isinstance(value, list) else value


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases())
def test_put_batch_writes_the_bytes_put_messages_writes(case: Case) -> None:
    cfg = StoreConfig(
        commitlog_segment_size=case.segment_size,
        consume_queue_entries=8,  # consume-queue files roll too
        index_hash_slots=64,
        index_max_entries=512,
        generate_uniq_key=False,
    )
    wrap: Callable[[bytes], bytes | bytearray | memoryview] = {
        "bytes": bytes,
        "bytearray": bytearray,
        "memoryview": memoryview,
    }[case.body_kind]
    with tempfile.TemporaryDirectory() as tmp:
        root_batch, root_msgs, root_single = Path(tmp, "batch"), Path(tmp, "msgs"), Path(tmp, "single")
        clocks = [ManualClock(T0), ManualClock(T0), ManualClock(T0)]
        batch_store = open_store(root_batch, cfg, clocks[0])
        msgs_store = open_store(root_msgs, cfg, clocks[1])
        single_store = open_store(root_single, cfg, clocks[2])
        try:
            start = 0
            for size in case.chunks:
                stop = start + size
                tags = _rows(case.tags, start, stop)
                keys = _rows(case.keys, start, stop)
                result = batch_store.put_batch(
                    case.topic,
                    [wrap(b) for b in case.bodies[start:stop]],
                    queue_ids=_rows(case.queue_ids, start, stop),
                    tags=tags,
                    keys=keys,
                    flag=case.flag,
                    born_timestamp=case.born,
                )
                assert result.status is PutStatus.PUT_OK and len(result) == size
                qids = result.queue_ids.tolist()
                if isinstance(case.queue_ids, int):
                    assert qids == [case.queue_ids] * size
                elif isinstance(case.queue_ids, list):
                    assert qids == case.queue_ids[start:stop]
                msgs = [
                    Message(
                        case.topic,
                        case.bodies[start + j],
                        tags=tags[j] if isinstance(tags, list) else tags,
                        keys=split_keys(keys[j] if keys is not None else None),
                        queue_id=qids[j],
                        flag=case.flag,
                        born_timestamp=case.born,
                    )
                    for j in range(size)
                ]
                results = msgs_store.put_messages(msgs)
                singles = [single_store.put_message(m) for m in msgs]
                for got in (results, singles):
                    assert [r.status for r in got] == [PutStatus.PUT_OK] * size
                    assert [r.physical_offset for r in got] == result.physical_offsets.tolist()
                    assert [r.queue_offset for r in got] == result.queue_offsets.tolist()
                    assert [r.wrote_bytes for r in got] == result.sizes.tolist()
                    assert [r.store_timestamp for r in got] == [result.store_timestamp] * size
                    assert [r.msg_id for r in got] == [result.msg_id(j) for j in range(size)]
                    assert [r.queue_id for r in got] == qids
                # index files are named by the clock when dispatch creates them: let it catch up
                for store in (batch_store, msgs_store, single_store):
                    drain(store)
                for clock in clocks:
                    clock.advance(7)
                start = stop
        finally:
            batch_store.close()
            msgs_store.close()
            single_store.close()
        assert files_under(root_batch, "commitlog")
        for other in (root_msgs, root_single):
            for sub in ("commitlog", "consumequeue", "index"):
                assert_same_files(root_batch, other, sub)


# --- 2. generated UNIQ_KEYs and KEYS are indexed ---------------------------------------------------------


def test_uniq_keys_are_distinct_and_found_and_keys_are_indexed(tmp_path: Path) -> None:
    keys: list[str | None] = [f"k{i}" if i % 3 else None for i in range(50)]
    keys[0] = "alpha beta"
    keys[1] = "ключ"
    keys[2] = "键 🔑"
    bodies = [f"body-{i}".encode() for i in range(50)]
    with open_store(tmp_path) as store:
        r = store.put_batch("Uq", bodies, keys=keys, tags="t")
        assert r.ok and len(r) == 50
        uniqs = [r.uniq_key(i) for i in range(50)]
        assert all(u is not None and len(u) == 32 and set(u) <= HEX_UPPER for u in uniqs)
        assert len(set(uniqs)) == 50
        # a second batch gets fresh ids
        r2 = store.put_batch("Uq", [b"again"], keys=["k4"])
        assert r2.uniq_key(0) not in uniqs
        drain(store)
        for i, u in enumerate(uniqs):
            assert u is not None
            found = store.query_by_uniq_key("Uq", u)
            assert found is not None
            assert (found.physical_offset, found.body, found.uniq_key) == (
                int(r.physical_offsets[i]),
                bodies[i],
                u,
            )
        for key in ("alpha", "beta"):
            assert [m.body for m in store.query_message("Uq", key)] == [b"body-0"]
        assert [m.body for m in store.query_message("Uq", "ключ")] == [b"body-1"]
        assert [m.body for m in store.query_message("Uq", "键")] == [b"body-2"]
        assert [m.body for m in store.query_message("Uq", "🔑")] == [b"body-2"]
        assert store.query_message("Uq", "alpha beta") == []  # the KEYS text is not one key
        # newest first, across the two batches
        assert [m.body for m in store.query_message("Uq", "k4")] == [b"again", b"body-4"]
        assert [m.body for m in store.query_message("Uq", "k4", max_num=1)] == [b"again"]
        m0 = store.look_message_by_offset(int(r.physical_offsets[0]))
        assert m0 is not None
        assert (m0.keys, m0.tags, m0.uniq_key) == (["alpha", "beta"], "t", uniqs[0])
        m3 = store.look_message_by_offset(int(r.physical_offsets[3]))
        assert m3 is not None and m3.keys == [] and "KEYS" not in m3.properties


def test_no_uniq_keys_when_the_store_generates_none(tmp_path: Path) -> None:
    with open_store(tmp_path, CFG.replace(generate_uniq_key=False)) as store:
        r = store.put_batch("NoUq", [b"a", b"b"], keys=["ka", None])
        assert r.ok
        assert [r.uniq_key(0), r.uniq_key(1)] == [None, None]
        drain(store)
        m = store.look_message_by_offset(int(r.physical_offsets[0]))
        assert m is not None and m.uniq_key is None and m.properties == {"KEYS": "ka"}
        assert [x.body for x in store.query_message("NoUq", "ka")] == [b"a"]


# --- 3. the result's columns -------------------------------------------------------------------------------


def test_result_columns_match_what_was_stored(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with open_store(tmp_path, clock=clock) as store:
        pre = store.put_messages(
            [Message("Cols", f"pre{i}".encode(), queue_id=i % 2) for i in range(7)]
        )  # q0: 4 messages, q1: 3
        assert all(p.ok for p in pre)
        before = store.max_phy_offset()
        clock.advance(1234)
        qids = [0, 1, 2, 1, 0, 0, 2, 1, 3, 0] * 3
        bodies = [bytes([i]) * (i * 7) for i in range(len(qids))]
        r = store.put_batch("Cols", bodies, queue_ids=qids, tags=["a", None, "b"] * 10, flag=-5)
        assert isinstance(r, PutBatchResult)
        assert (r.status, r.ok, r.topic, len(r)) == (PutStatus.PUT_OK, True, "Cols", 30)
        assert r.store_timestamp == T0 + 1234
        phys = r.physical_offsets.tolist()
        sizes = r.sizes.tolist()
        assert phys[0] == before
        assert all(b > a for a, b in itertools.pairwise(phys))
        assert all(phys[i + 1] == phys[i] + sizes[i] for i in range(len(phys) - 1))  # no roll here
        assert store.max_phy_offset() == phys[-1] + sizes[-1]
        assert r.queue_ids.tolist() == qids
        already = {0: 4, 1: 3, 2: 0, 3: 0}
        for q in range(4):
            offsets = [int(r.queue_offsets[i]) for i in range(len(qids)) if qids[i] == q]
            assert offsets == list(range(already[q], already[q] + qids.count(q)))
        drain(store)
        for i in range(len(qids)):
            m = store.look_message_by_offset(phys[i])
            assert m is not None
            assert (m.body, m.store_size, m.queue_id, m.queue_offset) == (
                bodies[i],
                sizes[i],
                qids[i],
                int(r.queue_offsets[i]),
            )
            assert (m.flag, m.born_timestamp, m.store_timestamp) == (-5, T0 + 1234, T0 + 1234)
            assert m.tags == ["a", None, "b"][i % 3]
            msg_id = r.msg_id(i)
            assert msg_id is not None and len(msg_id) == 32 and set(msg_id) <= HEX_UPPER
            assert m.msg_id == msg_id
            by_id = store.view_message_by_id(msg_id)
            assert by_id is not None and by_id.body == bodies[i] and by_id.physical_offset == phys[i]
            one = r[i]
            assert isinstance(one, PutMessageResult)
            assert one == PutMessageResult(
                PutStatus.PUT_OK,
                "Cols",
                qids[i],
                phys[i],
                int(r.queue_offsets[i]),
                T0 + 1234,
                sizes[i],
                r.id_prefix,
            )
            assert one.ok and one.msg_id == msg_id
        # the consume queues hold the batch after what was there
        for q in range(4):
            got = read_queue(store, "Cols", q)
            expected = [b for b, qq in zip(bodies, qids) if qq == q]
            assert [m.body for m in got[already[q] :]] == expected
            assert [m.physical_offset for m in got[already[q] :]] == [
                p for p, qq in zip(phys, qids) if qq == q
            ]
            batch = store.read_batch("Cols", q, already[q])
            assert batch.sizes.tolist() == [s for s, qq in zip(sizes, qids) if qq == q]
        # a put after the batch continues where it ended
        nxt = store.put_message(Message("Cols", b"next", queue_id=3))
        assert (nxt.physical_offset, nxt.queue_offset) == (phys[-1] + sizes[-1], qids.count(3))


def test_negative_indices_of_a_result_agree(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        r = store.put_batch("Neg", [b"a", b"b", b"c"])
        assert r[-1] == r[2]
        assert r.msg_id(-1) == r.msg_id(2)
        assert r.uniq_key(-1) == r.uniq_key(2)


# --- 4. queue choice ---------------------------------------------------------------------------------------


def test_round_robin_over_the_topics_queues_continues_across_calls(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        assert store.config.default_topic_queue_nums == 4
        a = store.put_batch("RR", [b"a"] * 6)
        assert a.queue_ids.tolist() == [0, 1, 2, 3, 0, 1]
        assert a.queue_offsets.tolist() == [0, 0, 0, 0, 1, 1]
        b = store.put_batch("RR", [b"b"] * 3)
        assert b.queue_ids.tolist() == [2, 3, 0]
        assert b.queue_offsets.tolist() == [1, 1, 2]
        # single puts that name no queue share the round robin
        single = store.put_message(Message("RR", b"s", queue_id=None))
        assert single.queue_id == 1
        c = store.put_batch("RR", [b"c"] * 2, queue_ids=None)
        assert c.queue_ids.tolist() == [2, 3]
        assert store.topic_configs()["RR"].write_queues == 4
        drain(store)
        assert [store.max_offset_in_queue("RR", q) for q in range(4)] == [3, 3, 3, 3]
        assert store.topics() == {"RR": [0, 1, 2, 3]}
        # a topic created with 3 queues spreads over 3
        store.create_topic("RR3", 3)
        d = store.put_batch("RR3", [b"d"] * 7)
        assert d.queue_ids.tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_one_queue_for_all_and_per_message_queue_columns(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        one = store.put_batch("QA", [b"x"] * 5, queue_ids=2)
        assert one.queue_ids.tolist() == [2] * 5
        assert one.queue_offsets.tolist() == [0, 1, 2, 3, 4]
        assert store.topic_configs()["QA"].write_queues == 4
        per_row: list[Sequence[int] | np.ndarray[Any, Any]] = [
            np.array([1, 0, 1, 7], dtype=np.int64),
            np.array([1, 0, 1, 7], dtype=np.int32),
            np.array([1, 0, 1, 7], dtype=np.uint16),
            [1, 0, 1, 7],
            (1, 0, 1, 7),
        ]
        for k, column in enumerate(per_row):
            r = store.put_batch("QN", [b"y"] * 4, queue_ids=column)
            assert r.ok
            assert r.queue_ids.dtype == np.int64
            assert r.queue_ids.tolist() == [1, 0, 1, 7]
            assert r.queue_offsets.tolist() == [2 * k, k, 2 * k + 1, k]
        # a queue beyond the default count widens a new topic, as put_messages does
        assert store.topic_configs()["QN"].write_queues == 8
        drain(store)
        assert store.max_offset_in_queue("QA", 2) == 5
        assert [store.max_offset_in_queue("QN", q) for q in (0, 1, 7)] == [5, 10, 5]
        assert [m.body for m in read_queue(store, "QN", 7)] == [b"y"] * 5


# --- 5. a batch that rolls commitlog segments --------------------------------------------------------------


def test_batch_rolls_segments_in_the_middle(tmp_path: Path) -> None:
    rng = random.Random(5)
    n = 1000
    bodies = [rng.randbytes(rng.randint(100, 300)) for _ in range(n)]
    qids = np.array([rng.randrange(3) for _ in range(n)], dtype=np.int64)
    keys: list[str | None] = [f"key{i}" if i % 10 == 0 else None for i in range(n)]
    cfg = CFG.replace(consume_queue_entries=300)
    with open_store(tmp_path, cfg) as store:
        pre = store.put_messages([Message("Roll", b"p" * 500, queue_id=q % 3) for q in range(60)])
        start = store.max_phy_offset()
        assert start % SEG > 0 and start < SEG  # the first segment is partly used
        r = store.put_batch("Roll", bodies, queue_ids=qids, keys=keys, tags="rolling")
        assert r.ok and len(r) == n
        phys, sizes = r.physical_offsets.tolist(), r.sizes.tolist()
        ends = [p + s for p, s in zip(phys, sizes)]
        assert phys[0] == start
        assert all(b > a for a, b in itertools.pairwise(phys))
        assert ends[-1] > 4 * SEG  # several segments
        for p, e in zip(phys, ends):
            assert p // SEG == (e - 1) // SEG, "a record spans segments"
        rolls = [i for i in range(1, n) if phys[i] // SEG != phys[i - 1] // SEG]
        assert len(rolls) >= 4
        for i in rolls:
            assert phys[i] % SEG == 0  # the next segment starts with a record
            assert phys[i] == ends[i - 1] or SEG - ends[i - 1] % SEG >= 8  # room for a BLANK record
        drain(store)
        for q in range(3):
            got_phys, got_bodies = read_queue_batches(store, "Roll", q)
            expected = [i for i in range(n) if qids[i] == q]
            assert got_phys[20:] == [phys[i] for i in expected]
            assert got_bodies[20:] == [bodies[i] for i in expected]
            msgs = read_queue(store, "Roll", q)
            assert [m.body for m in msgs[20:]] == [bodies[i] for i in expected]
            assert [m.queue_offset for m in msgs] == list(range(20 + len(expected)))
        for i in (0, 10, rolls[0] - 1 - (rolls[0] - 1) % 10, 990):
            assert [m.physical_offset for m in store.query_message("Roll", f"key{i}")] == [phys[i]]
        max_phy = store.max_phy_offset()
        max_queues = [store.max_offset_in_queue("Roll", q) for q in range(3)]
        assert max_phy == ends[-1]
        assert max_queues == [20 + int((qids == q).sum()) for q in range(3)]
    # every segment the batch left ends with a BLANK record filling it
    for i in rolls:
        end = ends[i - 1]
        seg_start = end - end % SEG
        data = (tmp_path / "commitlog" / f"{seg_start:020d}").read_bytes()
        size, magic = struct.unpack_from(">iI", data, end - seg_start)
        assert (size, magic) == (SEG - (end - seg_start), BLANK_MAGIC)
    report = verify_store(tmp_path, cfg)
    assert report.clean, report.damage
    assert report.records == n + len(pre)
    assert report.queue_entries == n + len(pre)
    assert report.commitlog_range == (0, max_phy)
    with open_store(tmp_path, cfg) as again:
        assert again.max_phy_offset() == max_phy
        assert [again.max_offset_in_queue("Roll", q) for q in range(3)] == max_queues
        _, got_bodies = read_queue_batches(again, "Roll", 1)
        assert got_bodies[20:] == [bodies[i] for i in range(n) if qids[i] == 1]
        nxt = again.put_batch("Roll", [b"after"], queue_ids=0)
        assert (int(nxt.physical_offsets[0]), int(nxt.queue_offsets[0])) == (max_phy, max_queues[0])


# --- 6. refusals: the row is named and nothing is written ---------------------------------------------------

GOOD = [f"b{i}".encode() for i in range(10)]


def _with(i: int, value: Any, base: Sequence[Any] = GOOD) -> list[Any]:
    rows = list(base)
    rows[i] = value
    return rows


_NONE_KEYS: list[str | None] = [None] * 10

# (id, call, text the error must contain, status)
REFUSALS: list[tuple[str, Callable[[MessageStore], object], str, PutStatus]] = [
    (
        "body over max_message_size",
        lambda s: s.put_batch("Good", _with(5, b"x" * 1001)),
        "message 5 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "record over max_message_size",
        lambda s: s.put_batch("Good", _with(7, b"x" * 990)),
        "message 7 of the batch",
        PutStatus.MESSAGE_SIZE_EXCEEDED,
    ),
    (
        "str body",
        lambda s: s.put_batch("Good", _with(3, "text")),
        "message 3 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "None body",
        lambda s: s.put_batch("Good", _with(9, None)),
        "message 9 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "double space in keys",
        lambda s: s.put_batch("Good", GOOD, keys=_with(4, "a  b", _NONE_KEYS)),
        "message 4 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "leading space in keys",
        lambda s: s.put_batch("Good", GOOD, keys=_with(6, " a", _NONE_KEYS)),
        "message 6 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "trailing space in keys",
        lambda s: s.put_batch("Good", GOOD, keys=_with(9, "a ", _NONE_KEYS)),
        "message 9 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "trailing space in the first keys",
        lambda s: s.put_batch("Good", GOOD, keys=["a ", "b", *_NONE_KEYS[2:]]),
        "message 0 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "only a space",
        lambda s: s.put_batch("Good", GOOD, keys=_with(2, " ", ["k"] * 10)),
        "message 2 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "empty key after non-ASCII keys",
        lambda s: s.put_batch("Good", GOOD, keys=["ключ", None, "键 🔑", "ä  b", *_NONE_KEYS[4:]]),
        "message 3 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "\\x01 in keys",
        lambda s: s.put_batch("Good", GOOD, keys=_with(1, "a\x01b", ["ok"] * 10)),
        "message 1 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "\\x02 in keys",
        lambda s: s.put_batch("Good", GOOD, keys=_with(8, "ключ\x02", ["ключ"] * 10)),
        "message 8 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "\\x02 in a per-message tag",
        lambda s: s.put_batch("Good", GOOD, tags=_with(3, "t\x02", ["ok", None] * 5)),
        "message 3 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "\\x02 in the tag for all",
        lambda s: s.put_batch("Good", GOOD, tags="t\x02"),
        "message 0 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "\\x01 in a repeated tag",
        lambda s: s.put_batch("Good", GOOD, tags=[None] * 6 + ["x\x01"] * 4),
        "message 6 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "empty tag",
        lambda s: s.put_batch("Good", GOOD, tags=_with(5, "", ["t"] * 10)),
        "message 5 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "queue id 70000",
        lambda s: s.put_batch("Good", GOOD, queue_ids=_with(4, 70000, [0] * 10)),
        "message 4 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "negative queue id",
        lambda s: s.put_batch("Good", GOOD, queue_ids=np.array(_with(2, -1, [1] * 10))),
        "message 2 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "queue id 70000 for all",
        lambda s: s.put_batch("Good", GOOD, queue_ids=70000),
        "message 0 of the batch",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "queue_ids too short",
        lambda s: s.put_batch("Good", GOOD, queue_ids=[0] * 9),
        "queue_ids",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "queue_ids too long",
        lambda s: s.put_batch("Good", GOOD, queue_ids=np.zeros(11, dtype=np.int64)),
        "queue_ids",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "float queue_ids",
        lambda s: s.put_batch("Good", GOOD, queue_ids=[0.0] * 10),  # type: ignore[list-item]
        "queue_ids",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    ("flag 2**31", lambda s: s.put_batch("Good", GOOD, flag=2**31), "flag", PutStatus.MESSAGE_ILLEGAL),
    (
        "flag below int32",
        lambda s: s.put_batch("Good", GOOD, flag=-(2**31) - 1),
        "flag",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    ("flag 2**70", lambda s: s.put_batch("Good", GOOD, flag=2**70), "flag", PutStatus.MESSAGE_ILLEGAL),
    (
        "born_timestamp 2**64",
        lambda s: s.put_batch("Good", GOOD, born_timestamp=2**64),
        "born_timestamp",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    ("topic with a space", lambda s: s.put_batch("bad topic", GOOD), "topic", PutStatus.MESSAGE_ILLEGAL),
    ("empty topic", lambda s: s.put_batch("", GOOD), "topic", PutStatus.MESSAGE_ILLEGAL),
    ("topic of 128", lambda s: s.put_batch("x" * 128, GOOD), "topic", PutStatus.MESSAGE_ILLEGAL),
    ("path topic", lambda s: s.put_batch("../evil", GOOD), "topic", PutStatus.MESSAGE_ILLEGAL),
    (
        "schedule topic",
        lambda s: s.put_batch("SCHEDULE_TOPIC_XXXX", GOOD),
        "reserved",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    ("system topic", lambda s: s.put_batch("RMQ_SYS_X", GOOD), "reserved", PutStatus.MESSAGE_ILLEGAL),
    (
        "tags too short",
        lambda s: s.put_batch("Good", GOOD, tags=["t"] * 9),
        "9 tags for 10 bodies",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "tags too long",
        lambda s: s.put_batch("Good", GOOD, tags=["t"] * 11),
        "11 tags for 10 bodies",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "keys too short",
        lambda s: s.put_batch("Good", GOOD, keys=["k"] * 9),
        "9 keys for 10 bodies",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "keys too long",
        lambda s: s.put_batch("Good", GOOD, keys=["k"] * 11),
        "11 keys for 10 bodies",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "int key",
        lambda s: s.put_batch("Good", GOOD, keys=_with(3, 7, _NONE_KEYS)),
        "keys",
        PutStatus.MESSAGE_ILLEGAL,
    ),
    (
        "int tag",
        lambda s: s.put_batch("Good", GOOD, tags=_with(3, 7, ["t"] * 10)),
        "tags",
        PutStatus.MESSAGE_ILLEGAL,
    ),
]


@pytest.mark.parametrize(
    ("call", "text", "status"),
    [(c, t, s) for _, c, t, s in REFUSALS],
    ids=[name for name, _, _, _ in REFUSALS],
)
def test_refused_batch_names_the_row_and_writes_nothing(
    tmp_path: Path, call: Callable[[MessageStore], object], text: str, status: PutStatus
) -> None:
    root = tmp_path / "store"
    cfg = CFG.replace(max_message_size=1000)
    with open_store(root, cfg) as store:
        store.put_messages([Message("Good", b"ok", queue_id=q, keys=["g"]) for q in range(4)])
        drain(store)
        before_phy = store.max_phy_offset()
        before_queues = [store.max_offset_in_queue("Good", q) for q in range(4)]
        before_topics = store.topics()
        before_configs = store.topic_configs()
        before_files = non_commitlog_entries(root)
        with pytest.raises(InvalidMessageError) as info:
            call(store)
        assert text in str(info.value)
        assert info.value.status is status
        drain(store)
        assert store.max_phy_offset() == before_phy
        assert [store.max_offset_in_queue("Good", q) for q in range(4)] == before_queues
        assert store.topics() == before_topics
        assert store.topic_configs() == before_configs
        assert non_commitlog_entries(root) == before_files
        segment = (root / "commitlog" / f"{0:020d}").read_bytes()
        assert segment[before_phy:] == bytes(SEG - before_phy)
        assert [p.name for p in tmp_path.iterdir()] == ["store"]
        # the store takes the next good batch where it was
        r = store.put_batch("Good", [b"after"], queue_ids=1)
        assert (int(r.physical_offsets[0]), int(r.queue_offsets[0])) == (before_phy, before_queues[1])


def test_first_bad_row_is_named_when_several_are_bad(tmp_path: Path) -> None:
    with open_store(tmp_path, CFG.replace(max_message_size=1000)) as store:
        bodies = _with(6, b"x" * 1001, _with(4, b"y" * 2000))
        with pytest.raises(InvalidMessageError, match="message 4 of the batch"):
            store.put_batch("Many", bodies)
        keys = _with(7, "a\x01", _with(2, "b  c", _NONE_KEYS))
        with pytest.raises(InvalidMessageError, match="message 2 of the batch"):
            store.put_batch("Many", GOOD, keys=keys)
        assert store.max_phy_offset() == 0


ROW = re.compile(r"message (\d+) of the batch")

# keys and tags made of a few letters, a non-ASCII one, spaces and the two separators: many bad,
# many good; put_messages with the same messages is the reference for which row is bad
KEYS_FUZZ = st.none() | st.text(alphabet="ab é键 \x01\x02", min_size=1, max_size=6)
TAGS_FUZZ = st.none() | st.text(alphabet="ab é\x01\x02", min_size=0, max_size=4)


def _bad_row(call: Callable[[], object]) -> int | None:
    """The row an InvalidMessageError names (-1: it names none); None when nothing is raised."""
    try:
        call()
    except InvalidMessageError as exc:
        m = ROW.search(str(exc))
        return int(m.group(1)) if m else -1
    return None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    column=st.sampled_from(["keys", "tags"]),
    keys=st.lists(KEYS_FUZZ, min_size=24, max_size=24),
    tags=st.lists(TAGS_FUZZ, min_size=24, max_size=24),
    n=st.sampled_from([1, 5, 24]),  # put_messages encodes batches of 16 and more in columns
)
def test_keys_and_tags_are_refused_exactly_when_put_messages_refuses_them(
    column: str, keys: list[str | None], tags: list[str | None], n: int
) -> None:
    keys, tags = keys[:n], tags[:n]
    bodies = [f"m{i}".encode() for i in range(n)]
    with (
        tempfile.TemporaryDirectory() as tmp,
        open_store(Path(tmp, "s"), CFG.replace(generate_uniq_key=False)) as store,
    ):
        if column == "keys":
            msgs = [Message("F", b, keys=split_keys(k), queue_id=0) for b, k in zip(bodies, keys)]
            batch_row = _bad_row(lambda: store.put_batch("F", bodies, queue_ids=0, keys=keys))
        else:
            msgs = [Message("F", b, tags=t, queue_id=0) for b, t in zip(bodies, tags)]
            batch_row = _bad_row(lambda: store.put_batch("F", bodies, queue_ids=0, tags=tags))
        if batch_row is not None:
            assert store.max_phy_offset() == 0
        msgs_row = _bad_row(lambda: store.put_messages(msgs))
        assert batch_row == msgs_row
        if batch_row is None:
            drain(store)
            got = read_queue(store, "F", 0)
            assert [m.body for m in got] == bodies * 2
            assert [m.properties for m in got[:n]] == [m.properties for m in got[n:]]


def test_the_first_bad_row_is_named_whatever_its_problem(tmp_path: Path) -> None:
    with open_store(tmp_path, CFG.replace(max_message_size=1000)) as store:
        keys = _with(2, "a  b", _NONE_KEYS)
        tags = _with(5, "t\x01", [None] * 10)
        msgs = [Message("T", b, keys=split_keys(k), tags=t) for b, k, t in zip(GOOD, keys, tags)]
        assert _bad_row(lambda: store.put_messages(msgs)) == 2
        assert _bad_row(lambda: store.put_batch("T", GOOD, keys=keys, tags=tags)) == 2
        assert _bad_row(lambda: store.put_batch("T", _with(6, b"y" * 1001), keys=keys)) == 2
        assert store.max_phy_offset() == 0


def test_topic_without_write_permission_is_refused(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.create_topic("ReadOnlyTopic", 2, perm=4)
        for queue_ids in (None, 0, [0, 1]):
            with pytest.raises(InvalidMessageError, match="not writable") as info:
                store.put_batch("ReadOnlyTopic", [b"a", b"b"], queue_ids=queue_ids)
            assert info.value.status is PutStatus.MESSAGE_ILLEGAL
        assert store.max_phy_offset() == 0
        assert store.topics() == {}


def test_full_disk_refuses_the_batch_with_a_status(tmp_path: Path) -> None:
    ratio = [0.5]
    store = MessageStore.open(tmp_path, CFG, clock=ManualClock(T0), disk_usage=lambda _path: ratio[0])
    with store:
        assert store.put_batch("Full", [b"before"], queue_ids=0).ok
        drain(store)
        before = store.max_phy_offset()
        ratio[0] = 0.95
        store.reclaim(manual=False)  # a round of the clean service notices the disk
        assert store.disk_full
        r = store.put_batch("Full", [b"a", b"b", b"c"], queue_ids=[0, 1, 0])
        assert r.status is PutStatus.DISK_FULL and not r.ok and len(r) == 3
        assert r.physical_offsets.tolist() == [-1, -1, -1]
        assert r.queue_offsets.tolist() == [-1, -1, -1]
        assert r.msg_id(0) is None
        drain(store)
        assert store.max_phy_offset() == before
        assert [store.max_offset_in_queue("Full", q) for q in (0, 1)] == [1, 0]
        ratio[0] = 0.5
        store.reclaim(manual=False)
        again = store.put_batch("Full", [b"after"], queue_ids=0)
        assert again.ok and (int(again.physical_offsets[0]), int(again.queue_offsets[0])) == (before, 1)


def test_closed_store_raises(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.close()
    with pytest.raises(StoreClosedError):
        store.put_batch("C", [b"x"])
    with pytest.raises(StoreClosedError):
        store.put_batch("C", [])


def test_bytes_bytearray_and_memoryview_bodies_in_one_batch(tmp_path: Path) -> None:
    backing = bytearray(b"0123456789")
    bodies: list[bytes | bytearray | memoryview] = [
        b"plain",
        bytearray(b"mutable"),
        memoryview(b"viewed"),
        memoryview(backing)[2:6],
        memoryview(array.array("i", [1, 2])),  # 2 items of 4 bytes: 8 bytes of body
        b"",
    ]
    with open_store(tmp_path) as store:
        r = store.put_batch("Kinds", bodies, queue_ids=0)
        backing[:] = b"XXXXXXXXXX"  # the batch copied what it was given
        drain(store)
        got = [m.body for m in read_queue(store, "Kinds", 0)]
        assert got == [b"plain", b"mutable", b"viewed", b"2345", array.array("i", [1, 2]).tobytes(), b""]
        looked = [store.look_message_by_offset(p) for p in r.physical_offsets.tolist()]
        assert [m.body if m is not None else None for m in looked] == got


def test_concurrent_batches_are_each_stored_contiguously(tmp_path: Path) -> None:
    per_thread, batches, size = 4, 15, 12
    results: list[tuple[int, int, PutBatchResult]] = []
    singles: list[PutMessageResult] = []
    lock = threading.Lock()
    with open_store(tmp_path) as store:

        def batch_writer(w: int) -> None:
            for c in range(batches):
                bodies = [f"{w}-{c}-{j}".encode() for j in range(size)]
                r = store.put_batch("Conc", bodies, queue_ids=0, keys=[f"w{w}c{c}"] * size)
                with lock:
                    results.append((w, c, r))

        def single_writer() -> None:
            for i in range(60):
                r = store.put_message(Message("Conc", f"s{i}".encode(), queue_id=0))
                with lock:
                    singles.append(r)

        threads = [threading.Thread(target=batch_writer, args=(w,)) for w in range(per_thread)]
        threads.append(threading.Thread(target=single_writer))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = per_thread * batches * size + len(singles)
        offsets = sorted(
            [o for _, _, r in results for o in r.queue_offsets.tolist()] + [s.queue_offset for s in singles]
        )
        assert offsets == list(range(total))
        drain(store)
        got = read_queue(store, "Conc", 0)
        assert len(got) == total
        assert [m.queue_offset for m in got] == list(range(total))
        for w, c, r in results:
            assert r.ok
            first = int(r.queue_offsets[0])
            assert r.queue_offsets.tolist() == list(range(first, first + size))  # not interleaved
            assert [m.body for m in got[first : first + size]] == [
                f"{w}-{c}-{j}".encode() for j in range(size)
            ]
            assert [m.physical_offset for m in got[first : first + size]] == r.physical_offsets.tolist()
        assert len(store.query_message("Conc", "w3c7")) == size


# --- 7. an empty batch --------------------------------------------------------------------------------------


def test_empty_batch_returns_an_empty_result_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with open_store(root) as store:
        store.put_batch("E", [b"x"], queue_ids=0)
        drain(store)
        before_phy = store.max_phy_offset()
        before_files = non_commitlog_entries(root)
        variants: list[dict[str, Any]] = [
            {},
            {"queue_ids": 1},
            {"queue_ids": []},
            {"tags": "t"},
            {"keys": []},
        ]
        for kwargs in variants:
            r = store.put_batch("E", [], **kwargs)
            assert isinstance(r, PutBatchResult)
            assert (len(r), r.status, r.topic) == (0, PutStatus.PUT_OK, "E")
            assert len(r.physical_offsets) == len(r.queue_offsets) == len(r.sizes) == len(r.queue_ids) == 0
        r = store.put_batch("New", [], queue_ids=np.array([], dtype=np.int64))
        assert len(r) == 0
        drain(store)
        assert store.max_phy_offset() == before_phy
        assert store.topics() == {"E": [0]}
        assert "New" not in store.topic_configs()
        assert non_commitlog_entries(root) == before_files
        with pytest.raises(InvalidMessageError):  # the topic is still checked
            store.put_batch("bad topic", [])


def test_empty_batch_to_a_new_topic_with_round_robin_creates_nothing(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with open_store(root) as store:
        store.put_batch("E", [b"x"], queue_ids=0)
        drain(store)
        before_files = non_commitlog_entries(root)
        r = store.put_batch("Fresh", [])
        assert len(r) == 0 and r.ok
        assert "Fresh" not in store.topic_configs()
        assert non_commitlog_entries(root) == before_files


# --- 8. a read-only store -----------------------------------------------------------------------------------


def test_read_only_store_refuses_with_an_error_and_writes_nothing(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.put_batch("RO", [b"one", b"two"], queue_ids=0, keys=["rk", None])
    before = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with MessageStore.open(tmp_path, CFG, readonly=True, clock=ManualClock(T0)) as ro:
        for topic, queue_ids in (("RO", 0), ("RO", None), ("Unknown", None), ("Unknown", [3, 1])):
            with pytest.raises(StoreReadOnlyError, match="is open read-only: puts need"):
                ro.put_batch(topic, [b"a", b"b"], queue_ids=queue_ids, tags="t", keys=["k", None])
        with pytest.raises(StoreReadOnlyError):  # whatever the batch holds: no put can succeed
            ro.put_batch("RO", [b"a", "b"])  # type: ignore[list-item]
        assert ro.max_offset_in_queue("RO", 0) == 2
        assert ro.topics() == {"RO": [0]}
        assert [m.body for m in ro.get_message("g", "RO", 0, 0).messages] == [b"one", b"two"]
    after = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before
    with open_store(tmp_path) as store:
        r = store.put_batch("RO", [b"three"], queue_ids=0)
        assert r.ok and int(r.queue_offsets[0]) == 2


# --- 9. SYNC_FLUSH -----------------------------------------------------------------------------------------


def test_sync_flush_batch_is_durable_when_put_returns(tmp_path: Path) -> None:
    cfg = CFG.replace(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    clock = ManualClock(T0)
    with open_store(tmp_path, cfg, clock) as store:
        small = store.put_batch("Sync", [b"x" * 300] * 10, keys=[f"s{i}" for i in range(10)])
        assert small.status is PutStatus.PUT_OK
        end = int(small.physical_offsets[-1] + small.sizes[-1])
        assert store._commitlog.files.flushed_where >= end
        assert store.runtime_info()["remainHowManyDataToFlush"] == 0
        clock.advance(50)
        big = store.put_batch("Sync", [b"y" * 500] * 400, queue_ids=1)  # rolls segments
        assert big.status is PutStatus.PUT_OK
        end = int(big.physical_offsets[-1] + big.sizes[-1])
        assert end > 2 * SEG
        assert store._commitlog.files.flushed_where >= end
        assert store.runtime_info()["remainHowManyDataToFlush"] == 0
        store.wait_dispatched()
    with open_store(tmp_path, cfg, clock) as store:
        physic, logics, index = store.checkpoint
        assert physic == big.store_timestamp == T0 + 50
        assert logics == big.store_timestamp
        assert index == big.store_timestamp  # every record has a UNIQ_KEY: all are indexed
        assert store.max_phy_offset() == end
        assert store.max_offset_in_queue("Sync", 1) == 400 + int((small.queue_ids == 1).sum())


def test_argument_shapes_that_are_easy_to_get_wrong(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        before = store.max_phy_offset()
        # a str for keys would otherwise be taken one character per body
        with pytest.raises(InvalidMessageError, match="not a str"):
            store.put_batch("T", [b"x", b"y"], keys="ab")
        with pytest.raises(InvalidMessageError, match="message 1 of the batch"):
            store.put_batch("T", [b"x", b"y"], tags=["a", "b\ud800"])
        with pytest.raises(InvalidMessageError):
            store.put_batch("T", [b"x"], queue_ids=True)
        assert store.max_phy_offset() == before
        r = store.put_batch("T", [b"x", b"y"], queue_ids=np.int64(2))
        assert r.ok and r.queue_ids.tolist() == [2, 2]
        with pytest.raises(InvalidMessageError, match="not valid text"):
            store.put_message(Message("T", b"x", tags="a\ud800"))


def test_born_timestamps_one_per_message(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as store:
        borns = np.array([1_600_000_000_000 + i for i in range(20)], dtype=np.int64)
        r = store.put_batch("Born", [b"x"] * 20, queue_ids=0, born_timestamp=borns)
        assert r.ok
        drain(store)
        got = [store.look_message_by_offset(int(p)) for p in r.physical_offsets]
        assert [m.born_timestamp for m in got if m is not None] == borns.tolist()
        before = store.max_phy_offset()
        with pytest.raises(InvalidMessageError, match="born_timestamp"):
            store.put_batch("Born", [b"x"] * 3, born_timestamp=[1, 2])
        with pytest.raises(InvalidMessageError, match="born_timestamp"):
            store.put_batch("Born", [b"x"] * 2, born_timestamp=[1.5, 2.5])  # type: ignore[list-item]
        assert store.max_phy_offset() == before
