"""Concurrency: many writers, readers racing writers, the store lock, and dispatch visibility."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, PutStatus, StoreConfig, StoreLockedError
from rocketstore.results import GetStatus, PutMessageResult

CFG = StoreConfig(
    commitlog_segment_size=65536, consume_queue_entries=40, index_hash_slots=64, index_max_entries=256
)
MESSAGE_MAGIC = -626843481
BLANK_MAGIC = -875286124
TOPIC_A = "ConcA"
TOPIC_B = "ConcB"


# --- self-checking bodies ----------------------------------------------------------------------
def make_body(kind: str, tid: int, seq: int) -> bytes:
    head = f"{kind}|{tid:02d}|{seq:06d}|"
    digest = hashlib.sha256(head.encode()).hexdigest()[:24]
    return f"{head}{digest}|{'x' * (seq % 37)}".encode()


def check_body(body: bytes) -> tuple[str, int, int]:
    """(kind, thread, sequence) of a body made by make_body; AssertionError if it is damaged."""
    text = body.decode()
    kind, tid, seq, digest, pad = text.split("|")
    head = f"{kind}|{tid}|{seq}|"
    assert digest == hashlib.sha256(head.encode()).hexdigest()[:24], f"damaged body {body!r}"
    assert pad == "x" * (int(seq) % 37), f"damaged body {body!r}"
    return kind, int(tid), int(seq)


def route(tid: int, seq: int) -> tuple[str, int]:
    if seq % 5 == 4:
        return TOPIC_B, 0
    return TOPIC_A, (seq + tid) % 4


def make_message(kind: str, tid: int, seq: int) -> Message:
    topic, qid = route(tid, seq)
    keys = [f"k-{kind}-{tid}-{seq}"] if seq % 10 == 0 else []
    return Message(topic=topic, body=make_body(kind, tid, seq), tags=f"T{seq % 3}", keys=keys, queue_id=qid)


def run_threads(targets: list[Callable[[], None]]) -> None:
    """Run targets at once; re-raise the first exception any of them raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(targets))

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                barrier.wait()
                fn()
            except BaseException as exc:
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a thread did not finish"
    if errors:
        raise errors[0]


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    bodies: list[bytes] = []
    offset = 0
    end = store.max_offset_in_queue(topic, queue_id)
    while offset < end:
        res = store.get_message("g", topic, queue_id, offset, 32)
        assert res.status is GetStatus.FOUND, (topic, queue_id, offset, res.status)
        assert res.next_begin_offset == offset + len(res.messages)
        for i, m in enumerate(res.messages):
            assert (m.topic, m.queue_id, m.queue_offset) == (topic, queue_id, offset + i)
            bodies.append(m.body)
        offset = res.next_begin_offset
    return bodies


def walk_commitlog(root: Path) -> list[tuple[int, int, int]]:
    """(PHYSICALOFFSET, TOTALSIZE, QUEUEOFFSET) of every record, parsed from byte 0 of each segment."""
    out = []
    for seg in sorted((root / "commitlog").iterdir()):
        buf = seg.read_bytes()
        start = int(seg.name)
        pos = 0
        while pos + 8 <= len(buf):
            total, magic = struct.unpack_from(">ii", buf, pos)
            if magic == BLANK_MAGIC:
                assert total == len(buf) - pos
                break
            if total == 0 and magic == 0:
                break
            assert magic == MESSAGE_MAGIC, f"{seg.name}@{pos}: magic {magic:#x}"
            qo, phys = struct.unpack_from(">qq", buf, pos + 20)
            assert phys == start + pos
            out.append((phys, total, qo))
            pos += total
    return out


# --- 1. many writers ---------------------------------------------------------------------------
SINGLE_THREADS = 8
SINGLE_PUTS = 2000
BATCH_THREADS = 2
BATCHES = 20
BATCH = 50


def test_concurrent_puts_are_dense_distinct_and_intact(tmp_path: Path) -> None:
    root = tmp_path / "s"
    singles: dict[int, list[tuple[Message, PutMessageResult]]] = {}
    batches: dict[int, list[list[tuple[Message, PutMessageResult]]]] = {}

    def single_writer(tid: int) -> Callable[[], None]:
        def run() -> None:
            out = []
            for seq in range(SINGLE_PUTS):
                m = make_message("s", tid, seq)
                out.append((m, store.put_message(m)))
            singles[tid] = out

        return run

    def batch_writer(tid: int) -> Callable[[], None]:
        def run() -> None:
            out = []
            for b in range(BATCHES):
                msgs = [make_message("b", tid, b * BATCH + i) for i in range(BATCH)]
                out.append(list(zip(msgs, store.put_messages(msgs))))
            batches[tid] = out

        return run

    with MessageStore.open(root, CFG) as store:
        run_threads(
            [single_writer(t) for t in range(SINGLE_THREADS)]
            + [batch_writer(100 + t) for t in range(BATCH_THREADS)]
        )
        assert store.wait_dispatched(60)
        assert store.dispatch_behind_bytes == 0

        pairs = [p for out in singles.values() for p in out] + [
            p for out in batches.values() for batch in out for p in batch
        ]
        assert len(pairs) == SINGLE_THREADS * SINGLE_PUTS + BATCH_THREADS * BATCHES * BATCH
        assert all(r.status is PutStatus.PUT_OK for _, r in pairs)
        assert len({r.physical_offset for _, r in pairs}) == len(pairs)

        per_queue: dict[tuple[str, int], dict[int, bytes]] = defaultdict(dict)
        for m, r in pairs:
            assert (r.topic, r.queue_id) == (m.topic, m.queue_id)
            per_queue[(r.topic, r.queue_id)][r.queue_offset] = m.body
        assert set(per_queue) == {(TOPIC_A, q) for q in range(4)} | {(TOPIC_B, 0)}
        for key, by_offset in per_queue.items():
            n = sum(1 for _, r in pairs if (r.topic, r.queue_id) == key)
            assert sorted(by_offset) == list(range(n)), f"{key}: queue offsets are not dense"

        # program order: each thread's puts land in increasing positions
        for out in singles.values():
            phys = [r.physical_offset for _, r in out]
            assert phys == sorted(phys)
        # a batch is appended under one lock: increasing, and consecutive in each of its queues
        for out in batches.values():
            for batch in out:
                phys = [r.physical_offset for _, r in batch]
                assert phys == sorted(phys)
                seen: dict[tuple[str, int], list[int]] = defaultdict(list)
                for _, r in batch:
                    seen[(r.topic, r.queue_id)].append(r.queue_offset)
                for qos in seen.values():
                    assert qos == list(range(qos[0], qos[0] + len(qos)))

        # everything reads back intact through the queues ...
        for (topic, qid), by_offset in per_queue.items():
            assert store.max_offset_in_queue(topic, qid) == len(by_offset)
            bodies = read_queue(store, topic, qid)
            assert bodies == [by_offset[i] for i in range(len(by_offset))]
            for b in bodies:
                check_body(b)
        # ... and by physical offset
        for m, r in pairs:
            ext = store.look_message_by_offset(r.physical_offset)
            assert ext is not None, r
            assert ext.body == m.body
            assert (ext.topic, ext.queue_id, ext.queue_offset, ext.store_size) == (
                r.topic,
                r.queue_id,
                r.queue_offset,
                r.wrote_bytes,
            )
        # the index was built concurrently with the puts
        for m, r in pairs[::97]:
            for k in m.keys:
                assert [x.physical_offset for x in store.query_message(m.topic, k)] == [r.physical_offset]

    records = walk_commitlog(root)
    assert sorted((p, s, q) for p, s, q in records) == sorted(
        (r.physical_offset, r.wrote_bytes, r.queue_offset) for _, r in pairs
    )


# --- 2. readers racing writers -----------------------------------------------------------------
def test_readers_see_a_gapless_prefix_while_writers_put(tmp_path: Path) -> None:
    writers_done = threading.Event()
    stop_readers = threading.Event()
    queues = [(TOPIC_A, 0), (TOPIC_A, 1), (TOPIC_B, 0)]
    reads: dict[int, dict[tuple[str, int], list[bytes]]] = {}
    read_during_writes: dict[int, int] = {}
    ok_statuses = {
        GetStatus.FOUND,
        GetStatus.OFFSET_OVERFLOW_ONE,
        GetStatus.NO_MESSAGE_IN_QUEUE,
        GetStatus.NO_MATCHED_LOGIC_QUEUE,
    }

    def writer(tid: int) -> Callable[[], None]:
        def run() -> None:
            for seq in range(1500):
                topic, _ = route(tid, seq)
                qid = 0 if topic == TOPIC_B else seq % 2
                m = Message(topic, make_body("w", tid, seq), tags="T", queue_id=qid)
                if seq % 50 == 0:
                    rs = store.put_messages([m, Message(topic, make_body("w", tid + 50, seq), queue_id=qid)])
                else:
                    rs = [store.put_message(m)]
                assert all(r.status is PutStatus.PUT_OK for r in rs)

        return run

    def reader(rid: int) -> Callable[[], None]:
        def run() -> None:
            got: dict[tuple[str, int], list[bytes]] = {q: [] for q in queues}
            during = 0
            while True:
                final_round = stop_readers.is_set()
                progressed = False
                for topic, qid in queues:
                    offset = len(got[(topic, qid)])
                    res = store.get_message(f"g{rid}", topic, qid, offset, 16)
                    assert res.status in ok_statuses, (topic, qid, offset, res.status)
                    if res.status is not GetStatus.FOUND:
                        continue
                    assert res.next_begin_offset == offset + len(res.messages)
                    for i, m in enumerate(res.messages):
                        where = (m.topic, m.queue_id, m.queue_offset)
                        assert where == (topic, qid, offset + i), f"gap or misplaced message at {where}"
                        check_body(m.body)
                        got[(topic, qid)].append(m.body)
                    progressed = True
                    if not writers_done.is_set():
                        during += len(res.messages)
                if final_round:
                    break
                if not progressed:
                    time.sleep(0.001)  # caught up: let the writers run
            reads[rid] = got
            read_during_writes[rid] = during

        return run

    def writers_then_signal() -> None:
        run_threads([writer(t) for t in range(4)])
        writers_done.set()

    with MessageStore.open(tmp_path / "s", CFG) as store:
        errors: list[BaseException] = []
        readers = [threading.Thread(target=_capture(reader(r), errors)) for r in range(2)]
        for t in readers:
            t.start()
        try:
            writers_then_signal()
            assert store.wait_dispatched(60)
        finally:
            stop_readers.set()
            for t in readers:
                t.join(120)
        assert not errors, errors[0]
        final = {q: read_queue(store, *q) for q in queues}
    assert sum(len(v) for v in final.values()) == 4 * 1500 + 4 * 30
    for rid, got in reads.items():
        for q in queues:
            assert got[q] == final[q][: len(got[q])], f"reader {rid} saw something that is not in {q}"
    # the readers did race the writers (the whole point of the test)
    assert sum(read_during_writes.values()) > 0


def _capture(fn: Callable[[], None], errors: list[BaseException]) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    return run


# --- 3. the store lock -------------------------------------------------------------------------
LOCK_SCRIPT = r"""
import sys
from rocketstore import MessageStore, StoreConfig
cfg = StoreConfig(commitlog_segment_size=65536, consume_queue_entries=40, index_hash_slots=64,
                  index_max_entries=256)
try:
    store = MessageStore.open(sys.argv[1], cfg)
except Exception as exc:
    print(type(exc).__name__, flush=True)
    sys.exit(3)
print("OPENED", flush=True)
if sys.argv[2] == "hold":
    sys.stdin.readline()
store.close()
print("CLOSED", flush=True)
"""


def other_process(path: Path, mode: str = "once") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LOCK_SCRIPT, str(path), mode],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_store_lock_in_process_and_across_processes(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = MessageStore.open(root, CFG)
    try:
        assert store.put_message(Message(TOPIC_A, b"held", queue_id=0)).status is PutStatus.PUT_OK
        with pytest.raises(StoreLockedError):
            MessageStore.open(root, CFG)
        # the refused open in this process must not have released the OS lock
        proc = other_process(root)
        assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
        assert proc.stdout.strip() == "StoreLockedError"
        # and the store that holds the lock still works
        assert store.put_message(Message(TOPIC_A, b"still held", queue_id=0)).status is PutStatus.PUT_OK
    finally:
        store.close()

    proc = other_process(root)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout.split() == ["OPENED", "CLOSED"]

    # the other way round: while another process holds the store, this one cannot open it
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_SCRIPT, str(root), "hold"],
        env=dict(os.environ),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "OPENED"
        with pytest.raises(StoreLockedError):
            MessageStore.open(root, CFG)
        holder.stdin.write("\n")
        holder.stdin.flush()
        out, err = holder.communicate(timeout=120)
        assert holder.returncode == 0, (out, err)
        assert out.strip() == "CLOSED"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()

    with MessageStore.open(root, CFG) as store:
        assert store.wait_dispatched(10)
        bodies = read_queue(store, TOPIC_A, 0)
        assert bodies == [b"held", b"still held"]
    assert (root / "lock").read_bytes() == b"lock"


def test_reopen_in_process_after_close(tmp_path: Path) -> None:
    root = tmp_path / "s"
    for i in range(3):
        with MessageStore.open(root, CFG) as store:
            store.put_message(Message(TOPIC_A, f"round {i}".encode(), queue_id=0))
        with pytest.raises(StoreLockedError), MessageStore.open(root, CFG), MessageStore.open(root, CFG):
            pass
    with MessageStore.open(root, CFG) as store:
        assert store.max_offset_in_queue(TOPIC_A, 0) == 3


# --- 4. wait_dispatched --------------------------------------------------------------------------
def test_wait_dispatched_makes_every_put_visible(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", CFG) as store:
        assert store.wait_dispatched(10) is True  # nothing to wait for
        assert store.dispatch_behind_bytes == 0
        counts: dict[tuple[str, int], int] = defaultdict(int)
        for rnd in range(30):
            msgs = [make_message("r", rnd, seq) for seq in range(rnd % 7 + 1)]
            results = store.put_messages(msgs) if rnd % 2 else [store.put_message(m) for m in msgs]
            assert store.wait_dispatched(10) is True
            assert store.dispatch_behind_bytes == 0
            for m, r in zip(msgs, results):
                counts[(r.topic, r.queue_id)] += 1
                got = store.get_message("g", r.topic, r.queue_id, r.queue_offset, 1)
                assert got.status is GetStatus.FOUND, (rnd, r)
                assert got.messages[0].body == m.body
                for k in m.keys:
                    assert [x.physical_offset for x in store.query_message(m.topic, k)] == [r.physical_offset]
            for (topic, qid), n in counts.items():
                assert store.max_offset_in_queue(topic, qid) == n


def test_wait_dispatched_while_writers_keep_putting(tmp_path: Path) -> None:
    done: list[tuple[Message, PutMessageResult]] = []
    finished = threading.Event()

    def writer() -> None:
        try:
            for seq in range(4000):
                m = make_message("c", 1, seq)
                done.append((m, store.put_message(m)))
        finally:
            finished.set()

    with MessageStore.open(tmp_path / "s", CFG) as store:
        t = threading.Thread(target=writer)
        t.start()
        checked = 0
        rounds = 0
        try:
            while not finished.is_set() or checked < len(done):
                n = len(done)  # every one of these puts returned before wait_dispatched is called
                assert store.wait_dispatched(10) is True
                for m, r in done[checked:n]:
                    got = store.get_message("g", r.topic, r.queue_id, r.queue_offset, 1)
                    assert got.status is GetStatus.FOUND, r
                    assert got.messages[0].body == m.body
                checked = n
                rounds += 1
                time.sleep(0.001)
        finally:
            t.join(120)
        assert checked == 4000 and rounds > 1
        assert store.wait_dispatched(10) is True
        assert store.dispatch_behind_bytes == 0
