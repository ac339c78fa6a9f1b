"""Disk full and I/O errors (STORE.md §6, §7): faults are injected by monkeypatching the system
calls the store makes (``os.posix_fallocate`` when a segment is created, ``MappedFile.sync`` when
it is flushed, ``os.replace`` when the checkpoint is replaced), and once on a real, small tmpfs.

What must hold: a failed put reports it (CREATE_MAPPED_FILE_FAILED) and leaves nothing visible,
neither before nor after a reopen; a failed background service (flush, checkpoint, dispatch) is
reported in ``store.failure``, puts are refused from then on, reads keep working and ``close()``
raises the error instead of swallowing it; after the fault is gone, a reopen finds every
acknowledged message and queue offsets continue densely.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rocketstore import (
    FlushDiskType,
    GetStatus,
    Message,
    MessageExt,
    MessageStore,
    PutMessageResult,
    PutStatus,
    StoreConfig,
)
from rocketstore.storage.mapped_file import MappedFile

SEG = 65536
# The small filesystems here are nearly full on purpose: reclamation (which would rightly delete
# old segments of a disk this full) is kept out of these tests of write errors.
CFG = StoreConfig(
    commitlog_segment_size=SEG,
    consume_queue_entries=40,
    index_hash_slots=64,
    index_max_entries=256,
    disk_max_used_space_ratio=100,
    disk_clean_forcibly_ratio=100,
    disk_warning_ratio=100,
)
QUEUES = [("TopicA", 0), ("TopicA", 1), ("TopicB", 0)]
BODY = 300
FAILED = PutStatus.CREATE_MAPPED_FILE_FAILED
REFUSED = PutStatus.SERVICE_NOT_AVAILABLE

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd (Linux)")


# --- helpers ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Acked:
    topic: str
    queue_id: int
    queue_offset: int
    phys: int
    body: bytes
    key: str


class MessageMaker:
    """Numbers for unique keys and bodies across a test."""

    def __init__(self) -> None:
        self.n = 0

    def messages(self, count: int, prefix: str) -> list[Message]:
        out = []
        for _ in range(count):
            i = self.n
            self.n += 1
            topic, qid = QUEUES[i % len(QUEUES)]
            body = (f"{prefix}-{i:06d}-".encode() * 40)[:BODY]
            out.append(Message(topic, body, tags="T", keys=[f"{prefix}{i:06d}"], queue_id=qid))
        return out


def _acked(msgs: list[Message], results: list[PutMessageResult]) -> list[Acked]:
    assert len(msgs) == len(results)
    return [
        Acked(m.topic, m.queue_id, r.queue_offset, r.physical_offset, m.body, m.keys[0])
        for m, r in zip(msgs, results)
        if r.status is PutStatus.PUT_OK
    ]


def _put_ok(store: MessageStore, msgs: list[Message]) -> list[Acked]:
    results = store.put_messages(msgs)
    assert [r.status for r in results] == [PutStatus.PUT_OK] * len(msgs)
    return _acked(msgs, results)


def _read_queue(store: MessageStore, topic: str, qid: int) -> list[MessageExt]:
    out: list[MessageExt] = []
    offset = 0
    while True:
        res = store.get_message("g", topic, qid, offset, 32)
        if res.status is not GetStatus.FOUND:
            assert res.status in (
                GetStatus.OFFSET_OVERFLOW_ONE,
                GetStatus.NO_MESSAGE_IN_QUEUE,
                GetStatus.NO_MATCHED_LOGIC_QUEUE,
            ), res.status
            return out
        out.extend(res.messages)
        offset = res.next_begin_offset


def _queue_maxes(store: MessageStore) -> dict[tuple[str, int], int]:
    return {q: store.max_offset_in_queue(*q) for q in QUEUES}


def _check_exactly(store: MessageStore, acked: list[Acked], *, keys: bool = True) -> None:
    """Every queue holds exactly the acknowledged messages, densely numbered, bodies intact."""
    assert store.wait_dispatched(10)
    for topic, qid in QUEUES:
        want = sorted((a for a in acked if (a.topic, a.queue_id) == (topic, qid)), key=lambda a: a.phys)
        assert [a.queue_offset for a in want] == list(range(len(want))), "acknowledged offsets are dense"
        got = _read_queue(store, topic, qid)
        assert [(m.queue_offset, m.physical_offset) for m in got] == [(a.queue_offset, a.phys) for a in want]
        assert [m.body for m in got] == [a.body for a in want]
        assert store.max_offset_in_queue(topic, qid) == len(want)
    if keys:
        for a in acked[:: max(1, len(acked) // 40)] + acked[-5:]:
            assert [m.physical_offset for m in store.query_message(a.topic, a.key)] == [a.phys], a.key


def _check_by_offset(store: MessageStore, acked: list[Acked]) -> None:
    """Reads straight from the commitlog (no dispatch needed)."""
    for a in acked:
        m = store.look_message_by_offset(a.phys)
        assert m is not None and m.body == a.body, a.phys


def _wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


def _errno_of(exc: BaseException | None) -> int | None:
    return exc.errno if isinstance(exc, OSError) else None


class FallocateFault:
    """ENOSPC from ``os.posix_fallocate`` for files whose path ``matches``, while ``active``.

    ``MappedFile`` reserves a new segment's blocks with posix_fallocate precisely so that a full
    disk fails there (and not with a SIGBUS on a later write through the mapping); failing it is
    what a full disk does, on the put path and in the background pre-allocation alike.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, matches: Callable[[str], bool]) -> None:
        self.active = False
        self.hits: list[str] = []
        real = os.posix_fallocate

        def fallocate(fd: int, offset: int, length: int) -> None:
            path = os.readlink(f"/proc/self/fd/{fd}")
            if self.active and matches(path):
                self.hits.append(path)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
            real(fd, offset, length)

        monkeypatch.setattr(os, "posix_fallocate", fallocate)


def _commitlog_file_from(min_offset: int) -> Callable[[str], bool]:
    def matches(path: str) -> bool:
        parent, _, name = path.rpartition("/")
        return parent.endswith("/commitlog") and int(name.split(".")[0]) >= min_offset

    return matches


def _record_size(store: MessageStore, counter: MessageMaker) -> tuple[int, list[Acked]]:
    acked = _put_ok(store, counter.messages(1, "f"))
    m = store.look_message_by_offset(acked[0].phys)
    assert m is not None
    return m.store_size, acked


def _fill(store: MessageStore, counter: MessageMaker, size: int, fit: int, past: int = 0) -> list[Acked]:
    """Single puts until the log is past ``past`` and its last segment has room for exactly
    ``fit`` more records of ``size`` bytes (each record also needs 8 spare bytes at the end)."""
    acked: list[Acked] = []

    def room() -> int:
        return SEG - store.max_phy_offset() % SEG

    while store.max_phy_offset() < past or room() >= (fit + 1) * size + 8:
        acked += _put_ok(store, counter.messages(1, "f"))
    assert fit * size + 8 <= room() < (fit + 1) * size + 8
    assert store.wait_dispatched(10)  # queue max offsets are compared with these
    return acked


def _commitlog_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "commitlog").iterdir())


# (batch size, how many of its records still fit in the current segment)
ROLLS = [(1, 0), (5, 2), (50, 3)]
ROLL_IDS = ["single", "batch-5", "batch-50"]


# --- 1. ENOSPC when a commitlog segment is created ----------------------------------------------------------


@pytest.mark.parametrize(("batch", "fit"), ROLLS, ids=ROLL_IDS)
def test_enospc_on_segment_roll_fails_the_put_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int, fit: int
) -> None:
    """The put whose records need a new segment gets CREATE_MAPPED_FILE_FAILED for every message
    (also when the roll falls in the middle of a batch, on the per-message and on the columnar
    path); nothing before is damaged, nothing of it becomes visible; once space is back the same
    put succeeds and queue offsets continue with no gap and no reuse."""
    root = tmp_path / "store"
    fault = FallocateFault(monkeypatch, _commitlog_file_from(SEG))
    counter = MessageMaker()
    with MessageStore.open(root, CFG) as store:
        size, acked = _record_size(store, counter)
        acked += _fill(store, counter, size, fit)
    # reopened: nothing is pre-allocated, so the roll creates the segment on the put path
    store = MessageStore.open(root, CFG)
    try:
        assert _commitlog_names(root) == [f"{0:020d}"]
        fault.active = True
        before_phy, before_queues = store.max_phy_offset(), _queue_maxes(store)
        msgs = counter.messages(batch, "b")
        results = store.put_messages(msgs)
        assert [r.status for r in results] == [FAILED] * batch
        assert all(r.physical_offset == -1 and r.msg_id is None for r in results)
        assert fault.hits, "the fault was not hit: the test did not exercise a segment creation"
        assert store.failure is None  # a failed put, not a failed store
        assert store.max_phy_offset() == before_phy
        assert _queue_maxes(store) == before_queues
        assert _commitlog_names(root) == [f"{0:020d}"], "no half-created segment is left behind"
        _check_exactly(store, acked)
        for m in msgs:
            assert store.query_message(m.topic, m.keys[0]) == []
        # still full: still refused, still nothing visible
        assert [r.status for r in store.put_messages(msgs)] == [FAILED] * batch
        assert store.max_phy_offset() == before_phy
        fault.active = False
        results = store.put_messages(msgs)
        assert [r.status for r in results] == [PutStatus.PUT_OK] * batch
        new = _acked(msgs, results)
        for a in new:  # continue each queue exactly where it was
            assert a.queue_offset == before_queues[(a.topic, a.queue_id)] + sum(
                1 for b in new if (b.topic, b.queue_id) == (a.topic, a.queue_id) and b.phys < a.phys
            )
        acked += new
        acked += _put_ok(store, counter.messages(7, "after"))
        _check_exactly(store, acked)
    finally:
        store.close()
    with MessageStore.open(root, CFG) as again:
        assert not again.abnormal_shutdown_detected
        _check_exactly(again, acked)


@pytest.mark.parametrize(("batch", "fit"), ROLLS, ids=ROLL_IDS)
def test_failed_put_leaves_nothing_behind_for_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int, fit: int
) -> None:
    """The records of a put that returned CREATE_MAPPED_FILE_FAILED must not come back at the next
    open: recovery reads the segment's bytes, not the in-memory write position, so whatever the
    failed put copied into the segment before the roll failed (its first records, the BLANK) must
    not be left there as valid records. A producer told "failed" retries; a resurrected copy
    would be a duplicate, with queue offsets the store never acknowledged."""
    root = tmp_path / "store"
    fault = FallocateFault(monkeypatch, _commitlog_file_from(SEG))
    counter = MessageMaker()
    with MessageStore.open(root, CFG) as store:
        size, acked = _record_size(store, counter)
        acked += _fill(store, counter, size, fit)
    fault.active = True
    with MessageStore.open(root, CFG) as store:
        before_phy, before_queues = store.max_phy_offset(), _queue_maxes(store)
        msgs = counter.messages(batch, "b")
        assert [r.status for r in store.put_messages(msgs)] == [FAILED] * batch
    for abnormal in (False, True):
        if abnormal:
            (root / "abort").touch()  # and the same after a crash
        with MessageStore.open(root, CFG) as again:
            assert again.abnormal_shutdown_detected == abnormal
            assert again.max_phy_offset() == before_phy
            assert _queue_maxes(again) == before_queues
            for m in msgs:
                assert again.query_message(m.topic, m.keys[0]) == [], m.keys[0]
            _check_exactly(again, acked)


@pytest.mark.parametrize(("batch", "fit"), ROLLS, ids=ROLL_IDS)
def test_enospc_in_background_preallocation_then_on_the_put_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int, fit: int
) -> None:
    """A fresh store: segment 1 is pre-allocated in the background; when the log rolls into it the
    allocator is asked for segment 2 and fails (disk full), and so does the put that needs it.
    Same guarantees as on the put path; the background failure does not lose data either."""
    root = tmp_path / "store"
    fault = FallocateFault(monkeypatch, _commitlog_file_from(2 * SEG))
    fault.active = True
    counter = MessageMaker()
    store = MessageStore.open(root, CFG)
    try:
        size, acked = _record_size(store, counter)
        acked += _fill(store, counter, size, fit, past=SEG)
        assert _wait_for(lambda: bool(fault.hits)), "the background pre-allocation was never tried"
        hits_before = len(fault.hits)
        assert _commitlog_names(root) == [f"{0:020d}", f"{SEG:020d}"]
        before_phy, before_queues = store.max_phy_offset(), _queue_maxes(store)
        msgs = counter.messages(batch, "b")
        assert [r.status for r in store.put_messages(msgs)] == [FAILED] * batch
        assert len(fault.hits) > hits_before, "the put path did not try to create the segment"
        assert store.max_phy_offset() == before_phy and _queue_maxes(store) == before_queues
        _check_exactly(store, acked)
        fault.active = False
        results = store.put_messages(msgs)
        assert [r.status for r in results] == [PutStatus.PUT_OK] * batch
        acked += _acked(msgs, results)
        acked += _put_ok(store, counter.messages(7, "after"))
        _check_exactly(store, acked)
    finally:
        # whether close() may complain here is the business of the next test
        with contextlib.suppress(OSError):
            store.close()
    with MessageStore.open(root, CFG) as again:
        _check_exactly(again, acked)


def test_background_preallocation_failure_does_not_make_close_unclean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pre-allocation is an optimisation: when it fails (disk full) the put path creates the segment
    itself and reports its own failure (CREATE_MAPPED_FILE_FAILED). Once space is back and puts
    succeed again, nothing is wrong with the store, so close() must shut it down cleanly: final
    flush, checkpoint, abort file removed, and the next open takes the normal path."""
    root = tmp_path / "store"
    fault = FallocateFault(monkeypatch, _commitlog_file_from(2 * SEG))
    fault.active = True
    counter = MessageMaker()
    store = MessageStore.open(root, CFG)
    try:
        size, acked = _record_size(store, counter)
        acked += _fill(store, counter, size, 0, past=SEG)
        assert _wait_for(lambda: bool(fault.hits))
        assert store.put_message(counter.messages(1, "b")[0]).status is FAILED
        fault.active = False
        acked += _put_ok(store, counter.messages(10, "after"))
        assert store.failure is None
    except BaseException:
        with contextlib.suppress(Exception):
            store.close()
        raise
    store.close()  # must not raise: nothing failed that was not already reported and resolved
    assert not (root / "abort").exists()
    with MessageStore.open(root, CFG) as again:
        assert not again.abnormal_shutdown_detected
        _check_exactly(again, acked)


# --- 2. EIO on flush ---------------------------------------------------------------------------------------


class SyncFault:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.active = False
        self.hits = 0
        real = MappedFile.sync

        def sync(mf: MappedFile) -> None:
            if self.active:
                self.hits += 1
                raise OSError(errno.EIO, os.strerror(errno.EIO), str(mf.path))
            real(mf)

        monkeypatch.setattr(MappedFile, "sync", sync)


@pytest.mark.parametrize(
    "flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH], ids=["async", "sync"]
)
def test_eio_on_flush_fails_the_store_loudly_and_loses_nothing_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush: FlushDiskType
) -> None:
    """fdatasync fails with EIO: the failure is reported in store.failure, later puts get
    SERVICE_NOT_AVAILABLE, reads still work, close() raises the EIO (never swallowed) and leaves
    the abort file; with the fault gone, the next open recovers every acknowledged message.
    SYNC_FLUSH: the put waiting for the failed flush is not acknowledged (FLUSH_DISK_TIMEOUT),
    promptly, without waiting out sync_flush_timeout."""
    root = tmp_path / "store"
    cfg = CFG.replace(flush_disk_type=flush, flush_interval=20, flush_consume_queue_interval=20)
    fault = SyncFault(monkeypatch)
    counter = MessageMaker()
    store = MessageStore.open(root, cfg)
    maybe: list[Acked] = []  # written, not acknowledged: may or may not be there after a reopen
    try:
        acked = _put_ok(store, counter.messages(30, "a"))
        assert store.wait_dispatched(10)
        fault.active = True
        if flush is FlushDiskType.SYNC_FLUSH:
            msgs = counter.messages(1, "w")
            t0 = time.monotonic()
            res = store.put_messages(msgs)
            assert time.monotonic() - t0 < cfg.sync_flush_timeout / 1000 / 2
            assert res[0].status is PutStatus.FLUSH_DISK_TIMEOUT
            maybe += [
                Acked(
                    msgs[0].topic,
                    msgs[0].queue_id,
                    res[0].queue_offset,
                    res[0].physical_offset,
                    msgs[0].body,
                    msgs[0].keys[0],
                )
            ]
        else:
            for _ in range(20):  # async: acknowledged before the flush; ~12 KB wakes the flusher
                msgs = counter.messages(2, "w")
                acked += _acked(msgs, store.put_messages(msgs))
                if store.failure is not None:
                    break
        assert _wait_for(lambda: store.failure is not None), "the flush error was not reported"
        assert fault.hits > 0
        assert _errno_of(store.failure) == errno.EIO
        assert [r.status for r in store.put_messages(counter.messages(1, "x"))] == [REFUSED]
        assert [r.status for r in store.put_messages(counter.messages(20, "x"))] == [REFUSED] * 20
        _check_by_offset(store, acked)
        assert store.wait_dispatched(10)
        _check_exactly(store, acked + maybe)
    except BaseException:
        with contextlib.suppress(Exception):
            store.close()
        raise
    with pytest.raises(OSError) as raised:
        store.close()
    assert raised.value.errno == errno.EIO
    assert (root / "abort").exists(), "a store that could not flush did not shut down cleanly"
    fault.active = False
    with MessageStore.open(root, cfg) as again:
        assert again.abnormal_shutdown_detected
        _check_exactly(again, acked + maybe)
        acked += maybe
        res = again.put_message(Message("TopicA", b"after", keys=["after-eio"], queue_id=0))
        assert res.status is PutStatus.PUT_OK
        assert res.queue_offset == sum(1 for a in acked if (a.topic, a.queue_id) == ("TopicA", 0))


# --- 3. the checkpoint cannot be written -------------------------------------------------------------------


def test_checkpoint_write_failure_is_a_store_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint is replaced atomically (write a temp file, fsync, rename). When that fails
    (ENOSPC on the rename here) the store reports it as a failure, refuses puts, keeps serving
    reads, close() raises it; after a reopen without the fault every message is there."""
    root = tmp_path / "store"
    cfg = CFG.replace(flush_consume_queue_interval=20)
    active = False
    hits = []
    real_replace = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str], **kw: object) -> None:
        if active and Path(dst).name == "checkpoint":
            hits.append(dst)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        real_replace(src, dst, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", replace)
    counter = MessageMaker()
    store = MessageStore.open(root, cfg)
    try:
        acked = _put_ok(store, counter.messages(40, "a"))
        active = True
        acked += _put_ok(store, counter.messages(5, "b"))
        assert _wait_for(lambda: store.failure is not None), "the checkpoint failure was not reported"
        assert hits
        assert _errno_of(store.failure) == errno.ENOSPC
        assert [r.status for r in store.put_messages(counter.messages(3, "x"))] == [REFUSED] * 3
        _check_exactly(store, acked)
    except BaseException:
        with contextlib.suppress(Exception):
            store.close()
        raise
    with pytest.raises(OSError) as raised:
        store.close()
    assert raised.value.errno == errno.ENOSPC
    active = False
    with MessageStore.open(root, cfg) as again:
        assert again.abnormal_shutdown_detected
        _check_exactly(again, acked)
    assert len((root / "checkpoint").read_bytes()) == 4096


# --- 4. a consume-queue segment cannot be created -----------------------------------------------------------


@pytest.mark.parametrize("case", ["new-queue", "queue-roll"])
def test_enospc_creating_a_consume_queue_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """The dispatcher cannot create a consume-queue file (the first of a new queue, or the next
    one of a queue, in the middle of a batch): reported via store.failure, puts refused after,
    reads of what was dispatched still work, nothing crashes or hangs; close() raises; a reopen
    with space back rebuilds the queues from the commitlog, every message readable by queue."""
    root = tmp_path / "store"
    fault = FallocateFault(monkeypatch, lambda path: "/consumequeue/" in path)
    counter = MessageMaker()
    store = MessageStore.open(root, CFG)
    try:
        acked = _put_ok(store, counter.messages(3 * 38, "a"))  # 38 entries in each queue
        assert store.wait_dispatched(10)
        fault.active = True
        # a waiter already waiting when dispatch fails is told at once, not at its timeout
        waited: list[bool] = []
        waiter = threading.Thread(target=lambda: waited.append(store.wait_dispatched(600)))
        if case == "new-queue":
            msg = Message("TopicC", b"to a queue that does not exist yet", keys=["c0"], queue_id=5)
            res = store.put_message(msg)
            assert res.status is PutStatus.PUT_OK  # the commitlog took it: acknowledged
            extra = [Acked("TopicC", 5, res.queue_offset, res.physical_offset, msg.body, "c0")]
        else:
            msgs = counter.messages(30, "r")  # 10 more per queue: past entry 40 of each
            acked += _put_ok(store, msgs)
            extra = []
        waiter.start()
        assert _wait_for(lambda: store.failure is not None), "the dispatch failure was not reported"
        waiter.join(60)
        assert waited == [False], "wait_dispatched slept through the dispatch failure"
        assert fault.hits
        assert _errno_of(store.failure) == errno.ENOSPC
        assert not store.wait_dispatched(1)
        assert [r.status for r in store.put_messages(counter.messages(2, "x"))] == [REFUSED] * 2
        _check_by_offset(store, acked + extra)
        for topic, qid in QUEUES:  # what was dispatched before is still served
            got = _read_queue(store, topic, qid)
            assert len(got) >= 38
            assert [m.body for m in got[:38]] == [
                a.body for a in acked if (a.topic, a.queue_id) == (topic, qid)
            ][:38]
    except BaseException:
        with contextlib.suppress(Exception):
            store.close()
        raise
    with pytest.raises(OSError) as raised:
        store.close()
    assert raised.value.errno == errno.ENOSPC
    fault.active = False
    with MessageStore.open(root, CFG) as again:
        assert again.abnormal_shutdown_detected
        _check_exactly(again, acked)
        for a in extra:
            got = again.get_message("g", a.topic, a.queue_id, 0, 32)
            assert got.status is GetStatus.FOUND
            assert [(m.physical_offset, m.body) for m in got.messages] == [(a.phys, a.body)]
            assert [m.physical_offset for m in again.query_message(a.topic, a.key)] == [a.phys]
        more = _put_ok(again, counter.messages(6, "z"))
        _check_exactly(again, acked + more)


# --- 5. a real full filesystem -----------------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for the test (root and mount permission needed, else skipped)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    try:
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot run mount to create a small filesystem: {exc}")
    if r.returncode != 0:
        pytest.skip(f"mounting a 2 MiB tmpfs is not permitted here: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        gc.collect()  # drop message views that keep segments mapped
        if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=20).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=20)


def test_real_full_filesystem(small_tmpfs: Path) -> None:
    """Fill a real 2 MiB filesystem. The store runs out of space on whichever file it creates
    first (commitlog segment, consume queue, index, checkpoint): the put that hits it fails
    (CREATE_MAPPED_FILE_FAILED) or the store fails (ENOSPC in store.failure, puts refused);
    no crash, everything acknowledged reads back; after growing the filesystem, a reopen finds
    every acknowledged message in its queue and the store takes new puts."""
    root = small_tmpfs / "store"
    counter = MessageMaker()
    store = MessageStore.open(root, CFG)
    acked: list[Acked] = []
    statuses: set[PutStatus] = set()
    try:
        for _ in range(400):  # 2 MiB / (20 x ~400 B) is about 260 batches
            msgs = counter.messages(20, "m")
            results = store.put_messages(msgs)
            acked += _acked(msgs, results)
            statuses = {r.status for r in results}
            if statuses != {PutStatus.PUT_OK}:
                break
            if store.failure is not None:
                statuses = {r.status for r in store.put_messages(counter.messages(1, "x"))}
                break
        assert statuses and statuses <= {FAILED, REFUSED}, statuses
        assert len(statuses) == 1
        if REFUSED in statuses:
            assert _errno_of(store.failure) == errno.ENOSPC
        else:
            assert store.failure is None or _errno_of(store.failure) == errno.ENOSPC
        assert len(acked) > 1000
        _check_by_offset(store, acked)
    finally:
        try:
            store.close()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        gc.collect()
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_tmpfs)], check=True, timeout=20)
    with MessageStore.open(root, CFG) as again:
        _check_exactly(again, acked)
        per_queue = Counter((a.topic, a.queue_id) for a in acked)
        more = _put_ok(again, counter.messages(6, "after"))
        for a in more:
            assert a.queue_offset >= per_queue[(a.topic, a.queue_id)]
        _check_exactly(again, acked + more)
        del more
    gc.collect()


# --- 6. a full disk when a put must write the topic table ---------------------------------------------------


def test_enospc_writing_the_topic_table_fails_the_put_with_a_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put to a new topic must write config/topics.json first. On a full disk it raises
    StoreIOError (ENOSPC, naming the file), stores nothing and creates no topic; puts to known
    topics go on; once space returns the same put succeeds, and the store reopens clean."""
    from rocketstore.errors import RocketStoreError, StoreIOError
    from rocketstore.verify import verify_store

    root = tmp_path / "store"
    real_write = os.write
    full = threading.Event()

    def write(fd: int, data: bytes | memoryview) -> int:
        if full.is_set() and os.readlink(f"/proc/self/fd/{fd}").endswith("topics.json.tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    with MessageStore.open(root, CFG) as store:
        assert store.put_message(Message("Known", b"a", queue_id=0)).status is PutStatus.PUT_OK
        end = store.max_phy_offset()
        full.set()
        for put in (
            lambda: store.put_message(Message("Fresh", b"b", queue_id=0)),
            lambda: store.put_messages([Message("Fresh", b"b")]),
            lambda: store.put_batch("Fresh", [b"b"]),
        ):
            with pytest.raises(StoreIOError) as caught:
                put()
            assert isinstance(caught.value, RocketStoreError) and caught.value.errno == errno.ENOSPC
            assert caught.value.path == str(root / "config" / "topics.json")
        assert "Fresh" not in store.topic_configs() and store.max_phy_offset() == end
        assert not (root / "config" / "topics.json.tmp").exists()
        assert store.put_message(Message("Known", b"c", queue_id=0)).status is PutStatus.PUT_OK
        full.clear()
        assert store.put_message(Message("Fresh", b"d", queue_id=0)).status is PutStatus.PUT_OK
    with MessageStore.open(root, CFG) as store:
        assert "Fresh" in store.topic_configs()
        assert store.wait_dispatched(10) and store.max_offset_in_queue("Fresh", 0) == 1
    assert verify_store(root, CFG).clean


# --- 7. errors at open and close are the store's, with errno and path ---------------------------------------


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EMFILE, errno.EIO])
def test_open_failing_for_the_system_raises_a_store_error_with_errno_and_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """A full disk, too many open files or an I/O error while a store opens (here: opening any
    file under it) is a StoreIOError naming the errno and the path, not a raw OSError; the
    store opens once the fault is gone."""
    from rocketstore.errors import StoreIOError

    root = tmp_path / "store"
    MessageStore.open(root, CFG).close()
    real_open = os.open

    def failing_open(path: str | os.PathLike[str], flags: int, mode: int = 0o777, **kw: object) -> int:
        if str(path).startswith(str(root)) and not os.path.isdir(path):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, mode, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", failing_open)
    with pytest.raises(StoreIOError) as caught:
        MessageStore.open(root, CFG)
    assert caught.value.errno == code and caught.value.path.startswith(str(root))
    assert errno.errorcode[code] in str(caught.value)
    monkeypatch.undo()
    with MessageStore.open(root, CFG) as store:
        assert store.put_message(Message("TopicA", b"x", queue_id=0)).status is PutStatus.PUT_OK


def test_close_after_a_failed_service_raises_a_store_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flush fails (EIO): close() raises the failure as a StoreIOError (errno, path), not the
    raw OSError; the store reopens and holds what was acknowledged."""
    from rocketstore.errors import StoreIOError

    root = tmp_path / "store"
    store = MessageStore.open(root, CFG.replace(flush_disk_type=FlushDiskType.SYNC_FLUSH))
    assert store.put_message(Message("TopicA", b"kept", queue_id=0)).status is PutStatus.PUT_OK

    def failing_sync(self: MappedFile) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(MappedFile, "sync", failing_sync)
    status = store.put_message(Message("TopicA", b"lost?", queue_id=0)).status
    assert status is not PutStatus.PUT_OK
    assert _wait_for(lambda: store.failure is not None)
    with pytest.raises(StoreIOError) as caught:
        store.close()
    assert caught.value.errno == errno.EIO and caught.value.path == str(root)
    monkeypatch.undo()
    with MessageStore.open(root, CFG) as store:
        assert store.wait_dispatched(10)
        assert store.get_message("G", "TopicA", 0, 0, 4).messages[0].body == b"kept"
