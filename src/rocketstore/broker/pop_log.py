"""The pop log's records: what pop consumers were handed and what they are done with.

The pop log is a topic of the store itself, ``rmq_sys_ROCKETSTORE_POP_LOG`` (one queue), so its
records get the store's flush policy, group commit and recovery (RocketMQ 5 keeps its pop
checkpoints and acks the same way, in ``rmq_sys_REVIVE_LOG_{cluster}``; the name differs because
the bodies do: RocketMQ's are JSON it would try to parse). One store message per batch; its body,
big-endian::

    0   u8    version, 1
    1   u8    kind: 1 IN_FLIGHT (these messages are handed out and invisible until their deadline;
              a later IN_FLIGHT record of the same message replaces it), 2 RESOLVED (these messages
              are done: acked, re-put into the retry topic, or dead-lettered), 3 POSITION (the
              group starts reading these queues, which it never read before, at these offsets)
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

A message is named by (group, topic, topic type, queue id, queue offset).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from rocketstore.errors import CorruptDataError

__all__ = ["FLAG_FIFO", "InFlightEntry", "LogKind", "PopLogRecord", "ResolvedEntry", "decode", "encode"]

VERSION: Final = 1
FLAG_FIFO: Final = 0x1
_HEAD: Final = struct.Struct(">BBBH")
assert _HEAD.size == 5
_U16: Final = struct.Struct(">H")
_U32: Final = struct.Struct(">I")
_IN_FLIGHT: Final = struct.Struct(">BBiqqqqi")
assert _IN_FLIGHT.size == 42
_RESOLVED: Final = struct.Struct(">Biq")
assert _RESOLVED.size == 13


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
    resolved: tuple[ResolvedEntry, ...] = ()  # RESOLVED: the messages; POSITION: the queues' offsets


def encode(
    kind: LogKind,
    group: str,
    topic: str,
    entries: Sequence[tuple[int, ...]],
    *,
    max_attempts: int = 0,
) -> bytes:
    """A record's body; ``entries`` are the fields of InFlightEntry (IN_FLIGHT) or ResolvedEntry
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
