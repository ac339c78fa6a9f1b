"""The pop log: what pop consumers were handed and what they are done with, in ``{store}/poplog``.

A file of rocketstore's own (not RocketMQ's), owned by this module: appended to by ``PopLog``,
replayed at open (``PopLog.open`` returns its records), flushed under the store's flush policy
(SYNC_FLUSH: ``append`` returns once the bytes are fsynced, concurrent appends sharing one
fsync; ASYNC_FLUSH: ``flush`` by the pop service's background loop) and compacted by rewriting
it (``compact_when_due``). Big-endian throughout::

    file     8 bytes  magic ``RSPOPLG1``, then frames to the end
    frame    u32      length L of the record
             u32      CRC-32 (zlib) of the record
             L bytes  the record

A frame that runs past the end of the file or fails its CRC ends the log: it is a write a crash
cut short (or damage), and ``open`` truncates the file there, saying how many bytes it cut.

A record (the same bytes the pop log topic of rocketstore 0.x held, one record per message)::

    0   u8    version, 1
    1   u8    kind: 1 IN_FLIGHT (these messages are handed out and invisible until their deadline;
              a later IN_FLIGHT record of the same message replaces it), 2 RESOLVED (these messages
              are done: acked, re-put into the retry topic, or dead-lettered), 3 POSITION (the
              group's cursor in these queues is at least this offset: everything below it was
              handed out; a group that never committed an offset of a queue starts there)
    2   u8    reserved, 0
    3   u16   max attempts (IN_FLIGHT; 0 in RESOLVED)
    5   u16   length G of the consumer group, then G bytes UTF-8
        u16   length T of the topic, then T bytes UTF-8
        u32   entry count N, then N entries:
              IN_FLIGHT  u8 topic type (0 topic, 1 retry topic), u8 flags (bit 0 FIFO: when it
                         expires it comes back in place, not through the retry topic), i32 queue id,
                         i64 queue offset, i64 commitlog offset, i64 retrieve time ms,
                         i64 deadline ms, i32 attempt (42 bytes)
              RESOLVED, POSITION   u8 topic type, i32 queue id, i64 queue offset (13 bytes)

A message is named by (group, topic, topic type, queue id, queue offset). Replaying the records
in order gives the state: the messages in flight, and a cursor per queue (the highest POSITION
offset, or in-flight offset + 1, seen).

Compaction replays the log up to its end at the time, writes that state as records (POSITION
records of every queue's cursor, IN_FLIGHT records of every message in flight) followed by the
frames appended meanwhile into ``poplog.tmp``, fsyncs it and renames it over ``poplog``
(``storage.paths.atomic_write``): a crash leaves the old log or the new one. Acks are dropped
only together with the IN_FLIGHT records they resolve, and cursors keep everything acked from
coming back.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
import threading
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from rocketstore.errors import CorruptDataError, StoreLockedError, StoreWriteError
from rocketstore.results import PutStatus
from rocketstore.storage.paths import atomic_write, open_store_file, read_store_file, store_file_exists

__all__ = [
    "FLAG_FIFO",
    "InFlightEntry",
    "LogKind",
    "PopLog",
    "PopLogRecord",
    "ResolvedEntry",
    "decode",
    "encode",
    "frame",
    "read",
    "snapshot",
]

log = logging.getLogger(__name__)

VERSION: Final = 1
FLAG_FIFO: Final = 0x1
MAGIC: Final = b"RSPOPLG1"
_FRAME: Final = struct.Struct(">II")
_HEAD: Final = struct.Struct(">BBBH")
assert _HEAD.size == 5
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_IN_FLIGHT: Final = struct.Struct(">BBiqqqqi")
assert _IN_FLIGHT.size == 42
_RESOLVED: Final = struct.Struct(">Biq")
assert _RESOLVED.size == 13
_MAX_RECORD: Final = 1 << 30  # a length above this is damage, not a record

# paths of the pop logs open in this process: two writers of one file would interleave frames
_open_logs: set[str] = set()
_open_logs_lock = threading.Lock()


class LogKind(enum.IntEnum):
    IN_FLIGHT = 1
    RESOLVED = 2
    POSITION = 3


@dataclass(frozen=True, slots=True)
class InFlightEntry:
    topic_type: int
    flags: int
    queue_id: int
    offset: int
    commitlog_offset: int
    retrieve_ms: int
    deadline_ms: int
    attempt: int


@dataclass(frozen=True, slots=True)
class ResolvedEntry:
    topic_type: int
    queue_id: int
    offset: int


@dataclass(frozen=True, slots=True)
class PopLogRecord:
    kind: LogKind
    group: str
    topic: str
    max_attempts: int
    in_flight: tuple[InFlightEntry, ...] = ()
    resolved: tuple[ResolvedEntry, ...] = ()  # RESOLVED: the messages; POSITION: the queues' cursors


# --- records ---------------------------------------------------------------------------------------
def encode(
    kind: LogKind,
    group: str,
    topic: str,
    entries: Sequence[tuple[int, ...]],
    *,
    max_attempts: int = 0,
) -> bytes:
    """A record; ``entries`` are the fields of InFlightEntry (IN_FLIGHT) or ResolvedEntry
    (RESOLVED, POSITION), in order."""
    entry = _IN_FLIGHT if kind is LogKind.IN_FLIGHT else _RESOLVED
    g, t = group.encode(), topic.encode()
    return b"".join(
        (
            _HEAD.pack(VERSION, kind, 0, max_attempts),
            _U16.pack(len(g)),
            g,
            _U16.pack(len(t)),
            t,
            _U32.pack(len(entries)),
            *(entry.pack(*e) for e in entries),
        )
    )


def decode(body: bytes | memoryview) -> PopLogRecord:
    """The record in ``body``; CorruptDataError (offset = position in the body) when it is not one."""
    view = memoryview(body)
    if len(view) < _HEAD.size:
        raise CorruptDataError(f"pop log record of {len(view)} bytes is shorter than its header", offset=0)
    version, kind, _, max_attempts = _HEAD.unpack_from(view, 0)
    if version != VERSION:
        raise CorruptDataError(f"pop log record version {version}, want {VERSION}", offset=0)
    if kind not in LogKind.__members__.values():
        raise CorruptDataError(f"pop log record kind {kind} is unknown", offset=1)
    pos = _HEAD.size
    names = []
    for what in ("group", "topic"):
        if pos + 2 > len(view):
            raise CorruptDataError(f"pop log record ends before its {what}", offset=pos)
        (n,) = _U16.unpack_from(view, pos)
        pos += 2
        if pos + n > len(view):
            raise CorruptDataError(f"pop log record's {what} of {n} bytes runs past its end", offset=pos)
        try:
            names.append(bytes(view[pos : pos + n]).decode())
        except UnicodeDecodeError:
            raise CorruptDataError(f"pop log record's {what} is not UTF-8", offset=pos) from None
        pos += n
    if pos + 4 > len(view):
        raise CorruptDataError("pop log record ends before its entry count", offset=pos)
    (count,) = _U32.unpack_from(view, pos)
    pos += 4
    entry = _IN_FLIGHT if kind == LogKind.IN_FLIGHT else _RESOLVED
    if len(view) - pos != count * entry.size:
        raise CorruptDataError(
            f"pop log record holds {len(view) - pos} bytes of entries, want {count} x {entry.size}",
            offset=pos,
        )
    fields = list(entry.iter_unpack(view[pos:]))
    group, topic = names
    if kind == LogKind.IN_FLIGHT:
        return PopLogRecord(
            LogKind.IN_FLIGHT,
            group,
            topic,
            max_attempts,
            in_flight=tuple(InFlightEntry(*f) for f in fields),
        )
    return PopLogRecord(LogKind(kind), group, topic, 0, resolved=tuple(ResolvedEntry(*f) for f in fields))


def frame(record: bytes) -> bytes:
    """``record`` framed for the file: its length and CRC, then itself."""
    return _FRAME.pack(len(record), zlib.crc32(record)) + record


def _frames(data: memoryview, start: int) -> tuple[list[memoryview], int]:
    """The records of the whole frames in ``data`` from ``start``, and where they end."""
    records = []
    pos, end = start, len(data)
    while pos + _FRAME.size <= end:
        length, crc = _FRAME.unpack_from(data, pos)
        body_end = pos + _FRAME.size + length
        if length > _MAX_RECORD or body_end > end:
            break
        body = data[pos + _FRAME.size : body_end]
        if zlib.crc32(body) != crc:
            break
        records.append(body)
        pos = body_end
    return records, pos


def _decode_all(bodies: Iterable[memoryview], path: Path) -> list[PopLogRecord]:
    out = []
    for body in bodies:
        try:
            out.append(decode(body))
        except CorruptDataError as exc:  # a whole frame, CRC right: written so by some version
            log.error("%s: a record is skipped, not one this version reads (%s)", path, exc)
    return out


def snapshot(records: Iterable[PopLogRecord]) -> list[bytes]:
    """The state ``records`` replay to, as records: POSITION records of every queue's cursor, then
    IN_FLIGHT records of every message in flight (per group, topic and max attempts)."""
    in_flight: dict[tuple[str, str, int, int, int], tuple[int, InFlightEntry]] = {}
    cursors: dict[tuple[str, str], dict[tuple[int, int], int]] = {}
    for record in records:
        pair = (record.group, record.topic)
        queues = cursors.setdefault(pair, {})
        if record.kind is LogKind.IN_FLIGHT:
            for e in record.in_flight:
                in_flight[(record.group, record.topic, e.topic_type, e.queue_id, e.offset)] = (
                    record.max_attempts,
                    e,
                )
                where = (e.topic_type, e.queue_id)
                queues[where] = max(queues.get(where, 0), e.offset + 1)
        elif record.kind is LogKind.RESOLVED:
            for r in record.resolved:
                in_flight.pop((record.group, record.topic, r.topic_type, r.queue_id, r.offset), None)
        else:
            for r in record.resolved:
                where = (r.topic_type, r.queue_id)
                queues[where] = max(queues.get(where, 0), r.offset)
    out = [
        encode(LogKind.POSITION, group, topic, [(t, q, cursor) for (t, q), cursor in sorted(queues.items())])
        for (group, topic), queues in cursors.items()
        if queues
    ]
    held: dict[tuple[str, str, int], list[tuple[int, ...]]] = {}
    for (group, topic, *_), (max_attempts, e) in sorted(in_flight.items(), key=lambda item: item[0]):
        held.setdefault((group, topic, max_attempts), []).append(
            (
                e.topic_type,
                e.flags,
                e.queue_id,
                e.offset,
                e.commitlog_offset,
                e.retrieve_ms,
                e.deadline_ms,
                e.attempt,
            )
        )
    out += [
        encode(LogKind.IN_FLIGHT, group, topic, entries, max_attempts=max_attempts)
        for (group, topic, max_attempts), entries in held.items()
    ]
    return out


def read(path: Path) -> list[PopLogRecord]:
    """The records of the pop log at ``path``, read only (a torn tail is left where it is):
    for looking at a log, not for opening it."""
    data = read_store_file(path)
    if data is None:
        raise FileNotFoundError(f"{path}: no pop log there")
    if data[: len(MAGIC)] != MAGIC:
        raise CorruptDataError(
            f"not a pop log: it begins {data[:8]!r}, not {MAGIC!r}", path=str(path), offset=0
        )
    bodies, _ = _frames(memoryview(data), len(MAGIC))
    return _decode_all(bodies, path)


# --- the file ----------------------------------------------------------------------------------------
class PopLog:
    """The open pop log (see the module docstring). Thread-safe. ``sync``: append returns once its
    frames are fsynced (SYNC_FLUSH); else ``flush`` fsyncs what was appended (ASYNC_FLUSH)."""

    def __init__(self, path: Path, fd: int, size: int, *, file_mode: int, sync: bool) -> None:
        self.path = path
        self._fd = fd
        self._size = size  # the end of the last whole frame: where the next one goes
        self._file_mode = file_mode
        self._sync = sync
        self._lock = threading.Lock()  # the fd, the size and the write counters
        self._sync_lock = threading.Lock()  # one fsync at a time (group commit); taken before _lock
        # one compaction at a time, taken before the others: a second would read the old file
        # through a descriptor the first closes (and whose number a new file may take)
        self._compact_lock = threading.Lock()
        self._written = 0  # appends made
        self._synced = 0  # appends known on disk
        self._compacted_size = size  # the file's size after the last compaction (or at open)
        self._failed: OSError | None = None  # a write or fsync failed: nothing more is taken

    @classmethod
    def open(
        cls, path: Path, *, file_mode: int, sync: bool, initial: Sequence[bytes] = ()
    ) -> tuple[PopLog, list[PopLogRecord]]:
        """Open the log at ``path`` and its records; a missing log is created holding ``initial``
        (records: a migration's). A torn tail is cut off (see the module docstring).
        StoreLockedError when this process has the log open already."""
        key = os.path.realpath(path)
        with _open_logs_lock:
            if key in _open_logs:
                raise StoreLockedError(str(path), "its pop log is open by another PopService of this process")
            _open_logs.add(key)
        try:
            if not store_file_exists(path):
                atomic_write(path, MAGIC + b"".join(frame(r) for r in initial), file_mode)
            fd = open_store_file(path, writable=True)
            try:
                data = _read_all(fd)
                if data[: len(MAGIC)] != MAGIC:
                    raise CorruptDataError(
                        f"not a pop log: it begins {bytes(data[:8])!r}, not {MAGIC!r}",
                        path=str(path),
                        offset=0,
                    )
                bodies, end = _frames(memoryview(data), len(MAGIC))
                if end < len(data):
                    log.warning(
                        "%s: cut %d bytes after offset %d: a torn or damaged write",
                        path,
                        len(data) - end,
                        end,
                    )
                    os.ftruncate(fd, end)
                    os.fsync(fd)
                records = _decode_all(bodies, path)
            except BaseException:
                os.close(fd)
                raise
        except BaseException:
            with _open_logs_lock:
                _open_logs.discard(key)
            raise
        return cls(path, fd, end, file_mode=file_mode, sync=sync), records

    @property
    def size(self) -> int:
        return self._size

    def append(self, records: Sequence[bytes]) -> None:
        """Append ``records`` in one write; with ``sync``, return once they are on disk.
        StoreWriteError when the write or the fsync fails (the log takes nothing more then)."""
        data = b"".join(frame(r) for r in records)
        with self._lock:
            self._check()
            try:
                _write_at(self._fd, data, self._size)
            except OSError as exc:
                # nothing is appended after a partial frame: the log takes nothing more, and the
                # next open cuts it off
                self._fail(exc, "write")
                raise self._error() from exc
            self._size += len(data)
            self._written += 1
            mine = self._written
        if self._sync:
            self._sync_through(mine)

    def flush(self) -> None:
        """fsync what was appended (the ASYNC_FLUSH policy's background flush, and at close)."""
        with self._lock:
            mine = self._written
        self._sync_through(mine)

    def _sync_through(self, count: int) -> None:
        with self._sync_lock:
            if self._synced >= count:
                return  # another append's fsync covered ours
            with self._lock:
                self._check()
                fd, written = self._fd, self._written
            try:
                os.fsync(fd)
            except OSError as exc:
                with self._lock:
                    self._fail(exc, "fsync")
                raise self._error() from exc
            self._synced = written

    def compact_when_due(self, min_bytes: int) -> None:
        """Compact once the log passed ``min_bytes`` and doubled since it was last compacted (or
        opened)."""
        with self._compact_lock:
            size = self._size
            if size > min_bytes and size > 2 * self._compacted_size:
                self._compact()

    def _compact(self) -> None:
        """Rewrite the log as its state plus what was appended meanwhile (see the docstring).
        Appends wait only for the final write of the new file."""
        with self._lock:
            self._check()
            fd, end = self._fd, self._size
        data = _read_all(fd, end)
        bodies, stop = _frames(memoryview(data), len(MAGIC))
        if stop != end:
            raise CorruptDataError(
                f"pop log frames end at {stop}, the log at {end}", path=str(self.path), offset=stop
            )
        state = b"".join(frame(r) for r in snapshot(_decode_all(bodies, self.path)))
        with self._sync_lock, self._lock:
            self._check()
            tail = os.pread(self._fd, self._size - end, end) if self._size > end else b""
            new = MAGIC + state + tail
            try:
                atomic_write(self.path, new, self._file_mode)
                new_fd = open_store_file(self.path, writable=True)
            except OSError as exc:  # the old log is intact and still open: appends go on there
                self._compacted_size = self._size  # tried again once it doubled, not every round
                raise StoreWriteError(
                    f"{self.path}: compaction failed: {exc}", PutStatus.SERVICE_NOT_AVAILABLE
                ) from exc
            os.close(self._fd)
            self._fd = new_fd
            log.info("%s compacted: %d bytes -> %d", self.path, self._size, len(new))
            self._size = self._compacted_size = len(new)
            self._synced = self._written  # the new file was fsynced whole

    def close(self) -> None:
        """fsync and close; the log may be opened again afterwards."""
        try:
            if self._failed is None:
                self.flush()
        finally:
            with self._lock:
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1
            with _open_logs_lock:
                _open_logs.discard(os.path.realpath(self.path))

    def _check(self) -> None:
        if self._fd < 0:
            raise StoreWriteError(f"{self.path} is closed", PutStatus.SERVICE_NOT_AVAILABLE)
        if self._failed is not None:
            raise self._error()

    def _fail(self, exc: OSError, what: str) -> None:
        if self._failed is None:
            log.error(
                "%s: %s failed (%s): the pop log takes nothing more until a restart", self.path, what, exc
            )
            self._failed = exc

    def _error(self) -> StoreWriteError:
        return StoreWriteError(
            f"{self.path}: the pop log failed ({self._failed}); restart once the cause is fixed",
            PutStatus.SERVICE_NOT_AVAILABLE,
        )


def _read_all(fd: int, end: int | None = None) -> bytes:
    """The file's bytes up to ``end`` (default: its size now)."""
    if end is None:
        end = os.fstat(fd).st_size
    parts = []
    pos = 0
    while pos < end:
        chunk = os.pread(fd, min(end - pos, 1 << 24), pos)
        if not chunk:
            break
        parts.append(chunk)
        pos += len(chunk)
    return b"".join(parts)


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
