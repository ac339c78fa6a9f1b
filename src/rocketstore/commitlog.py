"""CommitLog: every message of every topic, appended in one sequence of segment files."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from rocketstore.clock import Clock
from rocketstore.codec.commitlog_record import (
    END_FILE_MIN_BLANK_LENGTH,
    SYSFLAG_TX_MASK,
    TX_PREPARED,
    TX_ROLLBACK,
    decode_record,
    encode_blank,
    patch_positions,
    patch_positions_many,
    store_timestamp_position,
)
from rocketstore.codec.commitlog_scan import (
    copy_spans,
    gather_records,
    message_starts,
    next_record_start,
    plain_run,
    store_timestamps,
)
from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE, decode_entry
from rocketstore.codec.host import parse_host
from rocketstore.config import StoreConfig
from rocketstore.dispatch_columns import dispatch_batch
from rocketstore.dispatch_request import DispatchBatch, DispatchRequest
from rocketstore.errors import CorruptDataError
from rocketstore.jit import kernel
from rocketstore.message import MessageExt
from rocketstore.prepare import PreparedBatch, PreparedMessage
from rocketstore.results import PutMessageResult, PutStatus
from rocketstore.storage.mapped_file import MappedFile
from rocketstore.storage.mapped_file_queue import Allocator, MappedFileQueue

__all__ = ["CommitLog"]

log = logging.getLogger(__name__)
_NOT_DISPATCHED_TO_QUEUE = (TX_PREPARED, TX_ROLLBACK)
_PUT_OK = PutStatus.PUT_OK
# one record for CommitLog._append_rows: start in the blob, length, topic, queue id, sysflag, where
# its store timestamp sits, tags code, delay (ms, 0: none), KEYS, UNIQ_KEY
_Row = tuple[int, int, str, int, int, int, int, int, str | None, str | None]
# Tuple constructors without the NamedTuple __new__ frame: the batch loop builds two per message.
_request = partial(tuple.__new__, DispatchRequest)
_result = partial(tuple.__new__, PutMessageResult)
# A replica's bytes parsed per dispatcher round at most: queues and index then follow the log
# in steps of tens of milliseconds instead of a segment's worth at once.
_REPLICA_PARSE_STEP = 4 << 20


@kernel(cache=True)
def _queue_ranks(
    queues: npt.NDArray[np.int64], count: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Each message's place among the batch's messages of its queue (queues numbered densely
    below ``count``), and how many messages each queue gets."""
    counts = np.zeros(count, dtype=np.int64)
    rank = np.empty(len(queues), dtype=np.int64)
    for i in range(len(queues)):
        rank[i] = counts[queues[i]]
        counts[queues[i]] += 1
    return rank, counts


class _SegmentRun(NamedTuple):
    """Consume-queue entries that fall in one segment, and what ``gather_records`` read of them."""

    buf: memoryview  # the segment's view
    positions: npt.NDArray[np.int64]  # of the records in the segment
    born: npt.NDArray[np.int64]
    stored: npt.NDArray[np.int64]
    body_at: npt.NDArray[np.int64]
    body_len: npt.NDArray[np.int64]
    readable: int  # how many, from the first, are whole records of the right size
    in_segment: int  # how many of the entries lie in the segment
    origin: tuple[Path, int]  # the segment's file and commitlog offset


def _every_record(offsets: npt.NDArray[np.int64], _: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    return np.ones(len(offsets), dtype=bool)


def _end_of(item: DispatchRequest | DispatchBatch) -> int:
    if isinstance(item, DispatchBatch):
        return item.end_offset
    return item.physical_offset + item.size


class _AppendScope:
    """``with log._appending:`` holds the append lock and, if the append fails, undoes whatever
    it made visible. One instance per log, reused: the lock serializes its users."""

    __slots__ = ("_log", "_undo")

    def __init__(self, log: CommitLog) -> None:
        self._log = log
        self._undo = (0, 0)

    def __enter__(self) -> None:
        log = self._log
        log._lock.acquire()
        log.begin_time_in_lock = log._clock.monotonic()
        self._undo = log._position()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        log = self._log
        try:
            if exc_type is not None:
                log._restore(self._undo)
        finally:
            log.begin_time_in_lock = 0.0
            log._lock.release()


class CommitLog:
    """The append-only log (STORE.md §2, §6).

    Invariants: records never span segments (a record that does not fit, with 8 bytes to
    spare, is preceded by a BLANK record filling the segment); store timestamps never
    decrease; ``topic_queue_table[(topic, queue_id)]`` is the next queue offset of each queue,
    and queue offsets are dense per queue (PREPARED and ROLLBACK records take offset 0 and do
    not advance it).

    Thread safety: ``append`` serializes writers on one lock; readers are lock-free and see
    only bytes below a segment's wrote position, which moves after the bytes are in place.
    Every appended record is also queued, in log order, for the dispatcher
    (``take_dispatch_requests``) so that dispatch does not parse what was just written.
    """

    def __init__(
        self,
        directory: Path,
        config: StoreConfig,
        clock: Clock,
        *,
        allocator: Allocator | None = None,
        readonly: bool = False,
    ) -> None:
        self.config = config
        self._clock = clock
        self.files = MappedFileQueue(
            directory, config.commitlog_segment_size, allocator=allocator, readonly=readonly, keep_fds=True
        )
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._pending: list[DispatchRequest | DispatchBatch] = []
        self._last_store_timestamp = 0
        addr, port = parse_host(config.store_host)
        self.id_prefix = (addr + port.to_bytes(4, "big")).hex().upper()
        self.begin_time_in_lock = 0.0  # monotonic time the current append took the lock, 0 when idle
        self._appending = _AppendScope(self)
        self._replica_parsed_to: int | None = None  # append_raw: where the next unparsed record starts
        self._replica_more = False  # whole records wait past _replica_parsed_to (a replica's)

    # --- geometry ------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """The first readable offset (-1 when the log is empty, as in RocketMQ)."""
        first = self.files.first
        return first.from_offset if first is not None else -1

    @property
    def max_offset(self) -> int:
        return self.files.max_offset

    # --- writing -------------------------------------------------------------------------
    def append(self, batch: list[PreparedMessage]) -> list[PutMessageResult]:
        """Append prepared records under one lock acquisition.

        A batch is patched in a private buffer and copied into the segment in one piece per
        segment it touches. Raises OSError if a segment cannot be created; then nothing of the
        batch is visible and no queue offset is used.
        """
        if len(batch) == 1:
            return [self.append_one(batch[0])]
        blob = bytearray().join([p.record for p in batch])
        starts = itertools.accumulate((len(p.record) for p in batch), initial=0)
        rows = [
            (start, len(p.record), p.topic, p.queue_id, p.sys_flag, p.timestamp_position, p.tags_code,
             p.delay_ms, p.keys, p.uniq_key)
            for start, p in zip(starts, batch)
        ]  # fmt: skip
        phys, queue_offsets, now = self._append_rows(memoryview(blob), rows)
        prefix = self.id_prefix
        return [
            _result((_PUT_OK, p.topic, p.queue_id, ph, qo, now, len(p.record), prefix))
            for p, ph, qo in zip(batch, phys, queue_offsets)
        ]

    def append_few(self, batch: PreparedBatch) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
        """``append_batch`` for a few records (a broker's round of one to a few sends): a Python
        step per record, as ``append`` takes them, which for a few costs less than the columns;
        the records are patched in the batch's own blob, with no copy of each. Same returns and
        failure guarantee as ``append_batch``."""
        topics, keys, uniqs = batch.topics, batch.keys, batch.uniq_keys
        columns = (
            batch.starts,
            batch.lengths,
            batch.topic_ids,
            batch.queue_ids,
            batch.sys_flags,
            batch.tags_codes,
        )
        rows = [
            (start, length, topics[t], q, flag, store_timestamp_position(flag), code, 0, keys[i], uniqs[i])
            for i, (start, length, t, q, flag, code) in enumerate(zip(*(c.tolist() for c in columns)))
        ]
        phys, queue_offsets, now = self._append_rows(batch.blob.data, rows)
        return np.array(phys, dtype=np.int64), np.array(queue_offsets, dtype=np.int64), now

    def _append_rows(self, blob: memoryview, rows: list[_Row]) -> tuple[list[int], list[int], int]:
        """``append``'s and ``append_few``'s step per record, under the append lock: each row's
        record (at its start in ``blob``, back to back) gets its queue offset, physical offset
        and store time patched in and a dispatch request; ``blob`` is copied in one piece per
        segment. Returns (physical offsets, queue offsets, store timestamp)."""
        phys_out: list[int] = []
        queue_out: list[int] = []
        requests: list[DispatchRequest] = []
        advanced: dict[tuple[str, int], int] = {}
        table = self.topic_queue_table
        with self._appending:
            now = self._stamp()
            mf = self._segment_for(rows[0][1])
            run_start = rows[0][0]  # start in blob of the bytes not yet copied
            seg_pos = mf.wrote_position  # where blob[run_start] goes in the segment
            for start, length, topic, queue_id, flag, stamp_at, tags_code, delay_ms, keys, uniq in rows:
                pos = seg_pos + (start - run_start)
                if pos + length + END_FILE_MIN_BLANK_LENGTH > mf.size:
                    self._copy_run(mf, seg_pos, blob[run_start:start], now)
                    mf = self._roll(mf)
                    run_start, seg_pos, pos = start, mf.wrote_position, mf.wrote_position
                phys = mf.from_offset + pos
                if flag & SYSFLAG_TX_MASK in _NOT_DISPATCHED_TO_QUEUE:
                    qo = 0
                else:
                    key = (topic, queue_id)
                    qo = advanced.get(key, -1)
                    if qo < 0:
                        qo = table.get(key, 0)
                    advanced[key] = qo + 1
                patch_positions(blob, start, stamp_at, qo, phys, now)
                code = now + delay_ms if delay_ms else tags_code
                requests.append(_request((phys, length, topic, queue_id, qo, code, now, flag, keys, uniq)))
                phys_out.append(phys)
                queue_out.append(qo)
            self._copy_run(mf, seg_pos, blob[run_start : rows[-1][0] + rows[-1][1]], now)
            table.update(advanced)
            self._pending.extend(requests)
        return phys_out, queue_out, now

    def append_batch(self, batch: PreparedBatch) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
        """Append a columnar batch: queue offsets assigned, positions patched with numpy, one
        copy per segment touched, and one ``DispatchBatch`` for the dispatcher. Returns
        (physical offsets, queue offsets, store timestamp). Same failure guarantee as ``append``."""
        n = len(batch)
        starts, lengths, blob = batch.starts, batch.lengths, batch.blob
        ends = starts + lengths
        table = self.topic_queue_table
        phys = np.empty(n, dtype=np.int64)
        # Each message's rank within its queue is known before the lock; under it, only one
        # table lookup per queue.
        width = int(batch.queue_ids.max()) + 1
        dense = batch.topic_ids * width + batch.queue_ids
        rank, counts = _queue_ranks(dense, len(batch.topics) * width)
        queue_keys = np.flatnonzero(counts)
        counts = counts[queue_keys]
        topics = batch.topics
        keys = [(topics[k // width], k % width) for k in queue_keys.tolist()]
        with self._appending:
            bases = np.fromiter((table.get(k, 0) for k in keys), dtype=np.int64, count=len(keys))
            base_of = np.zeros(len(topics) * width, dtype=np.int64)
            base_of[queue_keys] = bases
            queue_offsets = base_of[dense] + rank
            now = self._stamp()
            mf = self.files.last_for_append()
            i = 0
            while i < n:
                # records i..k-1 fit when they end within the room left before the BLANK reserve
                room = mf.size - mf.wrote_position - END_FILE_MIN_BLANK_LENGTH
                k = int(np.searchsorted(ends, starts[i] + room, side="right"))
                if k <= i:
                    mf = self._roll(mf)
                    continue
                phys[i:k] = starts[i:k] + (mf.from_offset + mf.wrote_position - int(starts[i]))
                patch_positions_many(blob, starts[i:k], queue_offsets[i:k], phys[i:k], now)
                self._copy_run(mf, mf.wrote_position, blob.data[int(starts[i]) : int(ends[k - 1])], now)
                i = k
            table.update(zip(keys, (bases + counts).tolist()))
            self._pending.append(
                DispatchBatch(
                    phys,
                    lengths,
                    topics,
                    batch.topic_ids,
                    batch.queue_ids,
                    queue_offsets,
                    batch.tags_codes,
                    np.full(n, now, dtype=np.int64),
                    batch.sys_flags,
                    batch.keys,
                    batch.uniq_keys,
                )
            )
        return phys, queue_offsets, now

    def append_one(self, p: PreparedMessage) -> PutMessageResult:
        record = p.record
        length = len(record)
        with self._appending:
            now = self._stamp()
            mf = self.files.last
            if mf is None or mf.wrote_position + length + END_FILE_MIN_BLANK_LENGTH > mf.size:
                mf = self._segment_for(length)
            pos = mf.wrote_position
            phys = mf.from_offset + pos
            if p.sys_flag & SYSFLAG_TX_MASK in _NOT_DISPATCHED_TO_QUEUE:
                qo = 0
            else:
                key = (p.topic, p.queue_id)
                table = self.topic_queue_table
                qo = table.get(key, 0)
                table[key] = qo + 1
            patch_positions(record, 0, p.timestamp_position, qo, phys, now)  # then one copy
            mf.write_at(pos, record)
            mf.wrote_position = pos + length
            mf.last_store_timestamp = now
            code = now + p.delay_ms if p.delay_ms else p.tags_code
            self._pending.append(
                _request((phys, length, p.topic, p.queue_id, qo, code, now, p.sys_flag, p.keys, p.uniq_key))
            )
        return _result((_PUT_OK, p.topic, p.queue_id, phys, qo, now, length, self.id_prefix))

    def append_raw(self, offset: int, data: bytes | memoryview) -> None:
        """A replica's append: ``data``, bytes of its master's log from ``offset``, at the end of
        this log (the first segment of an empty log is created at ``offset``, which must then be a
        segment boundary). The records in it are parsed later, in bulk, by the dispatcher
        (``take_dispatch_requests``), so the receiving thread only writes. Raises ValueError when
        ``offset`` does not continue the log or ``data`` does not fit in the segment (the master's
        segments are of another size); nothing is written then."""
        with self._appending:
            last = self.files.last
            if last is None:
                if offset % self.files.file_size:
                    raise ValueError(
                        f"the first bytes of an empty replica must start a segment; offset {offset} "
                        f"is not a multiple of commitlog_segment_size {self.files.file_size}"
                    )
            elif offset != self.max_offset:
                raise ValueError(f"bytes from offset {offset} do not continue the log at {self.max_offset}")
            mf = self.files.last_for_append(offset)
            if len(data) > mf.size - mf.wrote_position:
                raise ValueError(
                    f"{len(data)} bytes from offset {offset} do not fit in segment {mf.path.name} "
                    f"({mf.size - mf.wrote_position} bytes left): do both stores use the same "
                    f"commitlog_segment_size?"
                )
            if not data:
                return
            if self._replica_parsed_to is None:
                self._replica_parsed_to = offset
            mf.write_at(mf.wrote_position, data)
            mf.wrote_position += len(data)

    def prepare_replica(self) -> None:
        """Load the compiled code a replica's records are parsed with (0.2 s here, more under
        load), so the first frames do not wait for it while the master writes on."""
        none = np.zeros(0, dtype=np.int64)
        dispatch_batch(b"", none, none, 0, self.config.delay_levels_ms)

    def _parse_replicated(self, limit: int) -> None:
        """Queue for the dispatcher the records that ``append_raw`` completed below ``limit``, in
        columnar passes of at most ``_REPLICA_PARSE_STEP`` bytes (a record cut by the end of the
        bytes received waits for the rest). Only the dispatcher calls it; appends go on
        meanwhile."""
        parsed = self._replica_parsed_to
        if parsed is None:
            return
        stop = min(limit, parsed + _REPLICA_PARSE_STEP)
        start = parsed
        while parsed < stop:
            # up to the segment's end at most: a BLANK whose tail is still to come moves parsing
            # past the segment (catch_up reads only the bytes received)
            segment_end = self.files.next_segment_start(parsed)
            batch, reached = self.catch_up(parsed, min(segment_end, stop), _every_record)
            if reached <= parsed == start and stop < min(segment_end, limit):  # a record over a step
                batch, reached = self.catch_up(parsed, min(segment_end, limit), _every_record)
            if batch is not None:
                mf = self.files.find(parsed)
                if mf is not None:
                    mf.last_store_timestamp = max(mf.last_store_timestamp, int(batch.store_timestamps[-1]))
                with self._lock:
                    self._pending.append(batch)
            if reached <= parsed:
                break  # a record cut by the end of the data: the next bytes complete it
            parsed = reached
        self._replica_parsed_to = parsed
        # stopped by the step, not by a cut record: the dispatcher must not count what is left as done
        self._replica_more = stop < limit and parsed > start

    def read_raw(self, offset: int, limit: int) -> bytes:
        """At most ``limit`` readable bytes from ``offset`` up to the end of its segment's data
        (what a master ships to a replica; empty when there is nothing there)."""
        mf = self.files.find(offset)
        if mf is None:
            return b""
        buf = mf.buf  # before the availability check: see MappedFile.delete_when_unread
        if not mf.available:
            return b""
        pos = offset - mf.from_offset
        end = min(mf.read_position, pos + limit)
        if end <= pos:
            return b""
        mf.check_intact(end)
        return bytes(buf[pos:end])

    def _stamp(self) -> int:
        now = self._clock.now_ms()
        if now < self._last_store_timestamp:
            now = self._last_store_timestamp
        self._last_store_timestamp = now
        return now

    def _segment_for(self, length: int) -> MappedFile:
        """The segment the next record of ``length`` bytes goes in, rolling past a full one."""
        mf = self.files.last_for_append()
        if mf.wrote_position + length + END_FILE_MIN_BLANK_LENGTH > mf.size:
            mf = self._roll(mf)
        return mf

    def _roll(self, mf: MappedFile) -> MappedFile:
        """Close ``mf`` with a BLANK record (unless it is exactly full) and return the next segment."""
        if not mf.is_full:
            pos = mf.wrote_position
            mf.write_at(pos, encode_blank(mf.size - pos))
            mf.wrote_position = mf.size
        return self.files.last_for_append()

    @staticmethod
    def _copy_run(mf: MappedFile, seg_pos: int, data: memoryview, now: int) -> None:
        if data:
            mf.write_at(seg_pos, data)
            mf.wrote_position = seg_pos + len(data)
            mf.last_store_timestamp = now

    def _position(self) -> tuple[int, int]:
        """Where the log ends now: (number of segments, wrote position of the last)."""
        last = self.files.last
        return len(self.files.files), last.wrote_position if last is not None else 0

    def _restore(self, position: tuple[int, int]) -> None:
        """Undo a failed append: later segments emptied, the last one back at its old end."""
        count, wrote = position
        files = self.files.files
        for mf in files[count:]:
            mf.rewind(0)
        if count:
            files[count - 1].rewind(wrote)

    def take_dispatch_requests(self, limit: int) -> tuple[list[DispatchRequest | DispatchBatch], int | None]:
        """What was appended since the last call, in log order, ending at or below ``limit``
        (the readable end of the log: with a transient pool, appended is not yet readable), and
        the commitlog offset of the oldest record still waiting (None when none): one taking of
        the append lock a dispatch round. A replica's records are parsed here, by the
        dispatcher, from what ``append_raw`` wrote."""
        if self._replica_parsed_to is not None:
            self._parse_replicated(limit)
        with self._lock:
            pending = self._pending
            n = len(pending)
            if n and _end_of(pending[-1]) > limit:
                n = 0
                while _end_of(pending[n]) <= limit:
                    n += 1
                self._pending = pending[n:]
            else:
                self._pending = []
        if n == len(pending):
            return pending, self._replica_parsed_to if self._replica_more else None
        first = pending[n]
        if isinstance(first, DispatchBatch):
            return pending[:n], int(first.physical_offsets[0])
        return pending[:n], first.physical_offset

    @property
    def replica_backlog(self) -> bool:
        """Whether a replica's received records wait to be parsed past the step just taken."""
        return self._replica_more

    # --- reading -------------------------------------------------------------------------
    def message_at(
        self, offset: int, size: int | None = None, tags_code: int | None = None
    ) -> MessageExt | None:
        """The record at global ``offset`` (None if the offset is outside the readable log)."""
        mf = self.files.find(offset)
        if mf is None:
            return None
        buf = mf.buf  # before the availability check: see MappedFile.delete_when_unread
        if not mf.available:
            return None
        pos = offset - mf.from_offset
        if size is None:
            if pos + 4 > mf.read_position:
                return None
            mf.check_intact(pos + 4)
            size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
        if size <= 0 or pos + size > mf.read_position:
            return None
        mf.check_intact(pos + size)
        return MessageExt(
            buf[pos : pos + size],
            0,
            tags_code,
            delay_levels_ms=self.config.delay_levels_ms,
            origin=(mf.path, offset),
        )

    def messages_at(
        self,
        physical_offsets: npt.NDArray[np.int64],
        sizes: npt.NDArray[np.int64],
        tags_codes: npt.NDArray[np.int64],
    ) -> list[MessageExt]:
        """``message_at`` for consecutive consume-queue entries (log order) of one segment, with
        every record checked and its body found by one compiled pass: the readable ones from the
        first on (a reader calls ``message_at`` for the rest, to learn why they are not)."""
        run = self._readable_run(physical_offsets, sizes)
        if run is None:
            return []
        ok, delays = run.readable, self.config.delay_levels_ms
        return [
            MessageExt(run.buf, pos, code, delay_levels_ms=delays, body_span=span, origin=run.origin)
            for pos, code, span in zip(
                run.positions[:ok].tolist(),
                tags_codes[:ok].tolist(),
                zip(run.body_at[:ok].tolist(), run.body_len[:ok].tolist()),
            )
        ]

    def gather(
        self, physical_offsets: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64], with_bodies: bool
    ) -> tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64], bytearray, npt.NDArray[np.int64]]:
        """Columns of the records at ``physical_offsets`` (in log order), segment by segment:
        (how many from the first are readable, born timestamps, store timestamps, bodies back to
        back, body offsets). Stops at the first record that is missing or does not match its size."""
        n = len(physical_offsets)
        born = np.empty(n, dtype=np.int64)
        stored = np.empty(n, dtype=np.int64)
        body_at = np.empty(n, dtype=np.int64)
        body_len = np.zeros(n, dtype=np.int64)
        pieces: list[tuple[memoryview, int, int]] = []  # (segment view, first, last) of each run
        done = 0
        while done < n:
            run = self._readable_run(physical_offsets[done:], sizes[done:])
            if run is None:
                break
            ok = run.readable
            born[done : done + ok], stored[done : done + ok] = run.born[:ok], run.stored[:ok]
            body_at[done : done + ok], body_len[done : done + ok] = run.body_at[:ok], run.body_len[:ok]
            pieces.append((run.buf, done, done + ok))
            done += ok
            if ok < run.in_segment:
                break
        offsets = np.zeros(done + 1, dtype=np.int64)
        if with_bodies:
            np.cumsum(body_len[:done], out=offsets[1:])
        bodies = bytearray(int(offsets[-1]))
        if with_bodies:
            for buf, first, last in pieces:
                copy_spans(buf, body_at[first:last], body_len[first:last], bodies, int(offsets[first]))
        return done, born[:done], stored[:done], bodies, offsets

    def plain_records(
        self, entries: memoryview, max_count: int, max_bytes: int
    ) -> tuple[memoryview, npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """The records a plain read takes, listed by consume-queue ``entries`` (as stored): the
        first ``max_count`` at most and as many as fit in ``max_bytes`` (the first always), as
        (the view of the first one's segment, their positions in it, their sizes); None when
        one of them is not a readable record of that segment. A pull copies them as stored."""
        if len(entries) < CQ_ENTRY_SIZE:
            return None
        mf = self.files.find(decode_entry(entries)[0])
        if mf is None:
            return None
        buf = mf.buf  # before the availability check: see MappedFile.delete_when_unread
        if not mf.available:
            return None
        limit = min(mf.read_position, mf.intact_end())
        run = plain_run(entries, max_count, max_bytes, buf, mf.from_offset, limit)
        return None if run is None else (buf, *run)

    def _readable_run(
        self, physical_offsets: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64]
    ) -> _SegmentRun | None:
        """The records of the segment holding the first of ``physical_offsets`` (a run in log
        order), checked by ``gather_records``; None when that segment is gone or going."""
        if not len(physical_offsets):
            return None
        mf = self.files.find(int(physical_offsets[0]))
        if mf is None:
            return None
        buf = mf.buf  # before the availability check: see MappedFile.delete_when_unread
        if not mf.available:
            return None
        end = int(np.searchsorted(physical_offsets, mf.from_offset + mf.size, side="left"))
        local = physical_offsets[:end] - mf.from_offset
        return _SegmentRun(
            buf,
            local,
            # records past a truncation are not readable: the caller's message_at says why
            *gather_records(buf, local, sizes[:end], min(mf.read_position, mf.intact_end())),
            end,
            (mf.path, mf.from_offset),
        )

    def store_timestamp_at(self, offset: int) -> int:
        """Store time of the record at ``offset`` (-1 if unreadable)."""
        msg = self.message_at(offset)
        if msg is None:
            return -1
        try:
            return msg.store_timestamp
        except Exception:
            return -1

    def catch_up(
        self,
        start: int,
        end: int,
        needed: Callable[[npt.NDArray[np.int64], npt.NDArray[np.int64]], npt.NDArray[np.bool_]],
    ) -> tuple[DispatchBatch | None, int]:
        """Dispatch information of the records of one segment from ``start`` (below ``end``)
        for which ``needed(offsets, store_timestamps)`` is true, read in columns (None when there
        are none), and the offset reached. Records not needed are never decoded: re-dispatch
        after a restart skips what the queues and index hold."""
        mf = self.files.find(start)
        if mf is None or start >= end:
            return None, start
        base = mf.from_offset
        buf = mf.buf
        seg_end = min(mf.read_position, end - base)
        mf.check_intact(min(seg_end + 8, mf.size))  # message_starts reads 8 bytes past the records
        local, stopped, blank = message_starts(buf, start - base, seg_end)
        reached = base + mf.size if blank else base + stopped
        if not blank and stopped < seg_end and base + mf.size < end:
            # damage recovery stepped over in an older segment: so does dispatch
            resume = next_record_start(buf, stopped + 1, seg_end, base)
            log.warning(
                "dispatch steps over commitlog bytes %d..%d: no valid record there", reached, base + resume
            )
            reached = base + resume if resume < seg_end else base + mf.size
        sizes = np.diff(local, append=stopped)
        wanted = needed(local + base, store_timestamps(buf, local))
        batch, damaged = dispatch_batch(buf, local[wanted], sizes[wanted], base, self.config.delay_levels_ms)
        for pos in damaged.tolist():
            try:
                decode_record(buf, pos, seg_end)
            except CorruptDataError as exc:
                # its length and magic hold (message_starts walked past it): the next record is intact
                log.error("dispatch skips the damaged record at commitlog offset %d: %s", base + pos, exc)
                continue
            # the columnar pass refused a record the decoder takes: a disagreement between the two
            # readers, reported rather than stopping dispatch for the whole store
            log.error(
                "dispatch skips the record at commitlog offset %d: the columnar parser refused it, "
                "the record decoder did not (please report this store)",
                base + pos,
            )
        # a BLANK ends the segment, wherever ``end`` falls in it
        return (batch if len(batch) else None), (reached if blank else min(reached, end))

    def dispatch_requests(self, start: int, end: int | None = None) -> Iterator[DispatchRequest]:
        """Dispatch information re-derived from the bytes of ``[start, end)``, record by record
        (up to the first BLANK-less end of data or damaged record)."""
        stop = self.max_offset if end is None else end
        while start < stop:
            batch, reached = self.catch_up(start, stop, _every_record)
            if batch is not None:
                yield from batch.requests()
            if reached <= start:
                return
            start = reached

    def close(self) -> None:
        self.files.close()
