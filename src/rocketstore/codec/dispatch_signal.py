"""The dispatch signal file (``{root}/.dispatch-seq``): how far a writer's dispatch has got.

Not a RocketMQ file (RocketMQ ignores it; a store without it is read as before). The writing
process rewrites it after every dispatch pass; followers in other processes map it read-only
and poll it to learn that queues grew, without re-reading any queue. 64 bytes, little-endian::

    pos  size  field
    0    4     magic b"RSDS"
    4    4     version (1)
    8    8     generation: the writer's open time in ns, new at every open of a writer
    16   8     dispatched_to, copy A: every record below this commitlog offset is in its
               consume queue and the index
    24   8     sequence: bumped at every publication
    32   8     dispatched_to, copy B
    40   8     the writer's commitlog segment size   \
    48   4     its consume-queue entries per file      | its geometry, written at open (zero
    52   4     its index hash slots                    | from a writer that did not record it)
    56   4     its index max entries                 /
    60   4     queue changes: a number that changes whenever the writer makes or deletes a
               consume queue (0: a writer that does not count them)

The geometry lets a follower opened on a store with no segments yet map the files the writer
then creates at their size (``geometry.fit_geometry`` reads it for kinds with no files).

A publication writes bytes 8..40 at once, after the queue changes when they changed; a reader
that finds copy A != copy B caught it half written and reads again. The writer publishes only
after the pass's queue and index bytes are in place, so a reader that reads ``dispatched_to``
first and the queues after sees every entry below it whole (stores become visible in program
order on x86-64 TSO; on weaker machines the GIL's atomic operations on both sides order them).
A follower that sees the queue changes change lists the queue directories again; a writer's
queue made in a pass is counted before that pass's publication.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

__all__ = [
    "SIGNAL_SIZE",
    "DispatchSignal",
    "SignalGeometry",
    "decode_geometry",
    "decode_signal",
    "encode_header",
    "encode_progress",
    "encode_queue_changes",
]

SIGNAL_SIZE: Final = 64
_MAGIC: Final = b"RSDS"
_VERSION: Final = 1
_HEADER = struct.Struct("<4sI")
_PROGRESS = struct.Struct("<QqQq")  # generation, dispatched_to A, sequence, dispatched_to B
_PROGRESS_AT: Final = 8
_GEOMETRY = struct.Struct("<QIII")  # segment size, queue entries, index slots, index entries
_GEOMETRY_AT: Final = 40
_QUEUE_CHANGES = struct.Struct("<I")
_QUEUE_CHANGES_AT: Final = 60
assert _HEADER.size == 8 and _PROGRESS.size == 32 and _GEOMETRY_AT + _GEOMETRY.size <= _QUEUE_CHANGES_AT
assert _QUEUE_CHANGES_AT + _QUEUE_CHANGES.size == SIGNAL_SIZE


class DispatchSignal(NamedTuple):
    generation: int
    dispatched_to: int
    sequence: int
    queue_changes: int = 0


class SignalGeometry(NamedTuple):
    """The writer's geometry, named as ``StoreConfig``'s settings."""

    commitlog_segment_size: int
    consume_queue_entries: int
    index_hash_slots: int
    index_max_entries: int


def encode_header(geometry: SignalGeometry) -> tuple[tuple[int, bytes], tuple[int, bytes]]:
    """(position, bytes) of what a writer writes at open: the magic and version, and its
    geometry. The last publication stays until the writer's first: followers keep serving what
    it covered meanwhile (a new file is all zeros there: no progress)."""
    return (0, _HEADER.pack(_MAGIC, _VERSION)), (_GEOMETRY_AT, _GEOMETRY.pack(*geometry))


def encode_progress(generation: int, dispatched_to: int, sequence: int) -> tuple[int, bytes]:
    """(position, bytes) of one publication."""
    return _PROGRESS_AT, _PROGRESS.pack(generation, dispatched_to, sequence, dispatched_to)


def encode_queue_changes(changes: int) -> tuple[int, bytes]:
    """(position, bytes) of the writer's queue changes (kept to 32 bits: only a change matters)."""
    return _QUEUE_CHANGES_AT, _QUEUE_CHANGES.pack(changes & 0xFFFFFFFF)


def decode_signal(data: bytes) -> DispatchSignal | None:
    """The publication in ``data`` (the file's first 64 bytes); None when the file is not a
    signal file or a publication was caught half written (read again)."""
    if len(data) < SIGNAL_SIZE or _HEADER.unpack_from(data) != (_MAGIC, _VERSION):
        return None
    generation, first, sequence, second = _PROGRESS.unpack_from(data, _PROGRESS_AT)
    if first != second:
        return None
    (queue_changes,) = _QUEUE_CHANGES.unpack_from(data, _QUEUE_CHANGES_AT)
    return DispatchSignal(generation, first, sequence, queue_changes)


def decode_geometry(data: bytes) -> SignalGeometry | None:
    """The writer's geometry in ``data`` (the file's first 64 bytes); None when the file is not a
    signal file or its writer did not record one."""
    if len(data) < SIGNAL_SIZE or _HEADER.unpack_from(data) != (_MAGIC, _VERSION):
        return None
    geometry = SignalGeometry(*_GEOMETRY.unpack_from(data, _GEOMETRY_AT))
    return geometry if all(geometry) else None
