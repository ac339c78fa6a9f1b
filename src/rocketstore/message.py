"""Messages as producers give them (``Message``) and as the store returns them (``MessageExt``)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from rocketstore.codec.commitlog_record import SYSFLAG_TX_MASK, DecodedRecord, body_span, decode_record
from rocketstore.codec.host import format_host
from rocketstore.codec.java_hash import tags_code as _tags_code
from rocketstore.codec.message_id import encode_offset_msg_id
from rocketstore.codec.properties import decode_properties
from rocketstore.errors import CorruptDataError

__all__ = [
    "PROPERTY_DELAY",
    "PROPERTY_KEYS",
    "PROPERTY_REAL_QUEUE_ID",
    "PROPERTY_REAL_TOPIC",
    "PROPERTY_TAGS",
    "PROPERTY_TIMER_DELAY_MS",
    "PROPERTY_TIMER_DELAY_SEC",
    "PROPERTY_TIMER_DELIVER_MS",
    "PROPERTY_TIMER_DEL_UNIQKEY",
    "PROPERTY_TIMER_DEQUEUE_MS",
    "PROPERTY_TIMER_ENQUEUE_MS",
    "PROPERTY_TIMER_OUT_MS",
    "PROPERTY_TIMER_ROLL_TIMES",
    "PROPERTY_UNIQ_KEY",
    "PROPERTY_WAIT",
    "RESERVED_PROPERTIES",
    "SCHEDULE_TOPIC",
    "TIMER_TOPIC",
    "TOPIC_PATTERN",
    "Message",
    "MessageExt",
    "schedule_tags_code",
    "split_keys",
    "waits_for_store",
]

PROPERTY_KEYS: Final = "KEYS"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
PROPERTY_DELAY: Final = "DELAY"
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID: Final = "REAL_QID"
PROPERTY_WAIT: Final = "WAIT"
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
# RocketMQ 5's timer messages (TIMER.md): asked for by one of three properties, kept in this topic
# (queue 0) until due; see rocketstore.timer
TIMER_TOPIC: Final = "rmq_sys_wheel_timer"
PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS: Final = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS: Final = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS: Final = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_ROLL_TIMES: Final = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_DEL_UNIQKEY: Final = "TIMER_DEL_UNIQKEY"
# Written by the store from a Message's own fields (keys, tags, uniq_key, delay_level): a Message
# may not carry them in ``properties``, and a delivered delayed message gets them from its fields.
RESERVED_PROPERTIES: Final = frozenset(
    (
        PROPERTY_KEYS,
        PROPERTY_TAGS,
        PROPERTY_UNIQ_KEY,
        PROPERTY_DELAY,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
    )
)
# RocketMQ's topic rule; it also keeps every topic a safe directory name.
TOPIC_PATTERN: Final = re.compile(r"[%|A-Za-z0-9_-]{1,127}")


def split_keys(text: str | None) -> list[str]:
    """The keys of a KEYS property: separated by spaces (RocketMQ's KEY_SEPARATOR), the empty
    ones skipped, as dispatch indexes them."""
    return [k for k in text.split(" ") if k] if text else []


def waits_for_store(msgs: Sequence[Message]) -> bool:
    """Whether a put of ``msgs`` waits to be durable under SYNC_FLUSH or as a SYNC_MASTER: unless
    every one says WAIT=false (RocketMQ's isWaitStoreMsgOK)."""
    return not all(m.properties and m.properties.get(PROPERTY_WAIT) == "false" for m in msgs)


def schedule_tags_code(
    delay_property: str | None, store_timestamp: int, delay_levels_ms: tuple[int, ...]
) -> int:
    """tagsCode of a SCHEDULE_TOPIC_XXXX record: its delivery time (RocketMQ's computeDeliverTimestamp)."""
    try:
        level = int(delay_property) if delay_property else 0
    except ValueError:
        level = 0
    level = min(level, len(delay_levels_ms))
    if level <= 0:
        return store_timestamp + 1000
    return store_timestamp + delay_levels_ms[level - 1]


@dataclass(slots=True)
class Message:
    """A message to store.

    ``keys`` are indexed (``topic#key``) and must not contain spaces. ``sys_flag`` carries the
    transaction type (0, 0x4 PREPARED, 0x8 COMMIT, 0xC ROLLBACK) and the compressed / multi-tags
    bits; the host bits are set by the store. ``prepared_transaction_offset`` is the commitlog
    offset of the half message a COMMIT record completes (0 for every other message).
    ``born_timestamp`` and ``born_host`` default to the store time and the store host.
    ``uniq_key`` is generated when None and the store's ``generate_uniq_key`` is on.
    ``queue_id`` (default None) lets the store pick the queue, as a RocketMQ producer does: by
    the ``__SHARDINGKEY`` property when there is one, else round robin over the topic's queues
    (see ``MessageStore.put_messages``). ``reconsume_times`` is the record's RECONSUMETIMES
    field: how often the message was delivered again (retries).
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: Sequence[str] = ()
    properties: Mapping[str, str] | None = None
    queue_id: int | None = None
    flag: int = 0
    delay_level: int = 0
    uniq_key: str | None = None
    born_timestamp: int | None = None
    born_host: str | None = None
    sys_flag: int = 0
    prepared_transaction_offset: int = 0
    reconsume_times: int = 0
    deliver_at: datetime | int | None = None


class MessageExt:
    """A stored message, decoded lazily from the record bytes (no copy until a field is read).

    Holding a MessageExt keeps its segment mapped: the buffer is a view of the segment's mmap.
    Every field of the record is available; ``tags_code`` is the consume-queue code when the
    message was read through its queue.
    """

    __slots__ = ("_body", "_buf", "_delay_levels", "_origin", "_pos", "_props", "_rec", "_tags_code")

    def __init__(
        self,
        buf: memoryview | bytes,
        pos: int = 0,
        tags_code: int | None = None,
        record: DecodedRecord | None = None,
        delay_levels_ms: tuple[int, ...] = (),
        body_span: tuple[int, int] | None = None,
        origin: tuple[os.PathLike[str], int] | None = None,
    ) -> None:
        self._buf = buf
        self._origin = origin  # (segment file, commitlog offset of buf[0]): named by decode errors
        self._body = body_span  # (start in buf, length) when the reader found it already
        self._pos = pos
        self._rec = record
        self._props: dict[str, str] | None = None
        self._tags_code = tags_code
        self._delay_levels = delay_levels_ms

    @property
    def record(self) -> DecodedRecord:
        rec = self._rec
        if rec is None:
            try:
                rec = self._rec = decode_record(self._buf, self._pos)
            except CorruptDataError as exc:
                raise self._located(exc) from None
        return rec

    def _located(self, exc: CorruptDataError) -> CorruptDataError:
        """``exc`` naming the segment file and the record's commitlog offset, when known."""
        if self._origin is None:
            return exc
        path, base = self._origin
        return CorruptDataError(exc.reason, path=os.fspath(path), offset=base + self._pos)

    # --- record fields ------------------------------------------------------------------
    @property
    def topic(self) -> str:
        return self.record.topic

    @property
    def queue_id(self) -> int:
        return self.record.queue_id

    @property
    def queue_offset(self) -> int:
        return self.record.queue_offset

    @property
    def physical_offset(self) -> int:
        return self.record.physical_offset

    @property
    def store_size(self) -> int:
        return self.record.total_size

    @property
    def sys_flag(self) -> int:
        return self.record.sys_flag

    @property
    def flag(self) -> int:
        return self.record.flag

    @property
    def body_crc(self) -> int:
        return self.record.body_crc

    @property
    def reconsume_times(self) -> int:
        return self.record.reconsume_times

    @property
    def prepared_transaction_offset(self) -> int:
        return self.record.prepared_transaction_offset

    @property
    def born_timestamp(self) -> int:
        return self.record.born_timestamp

    @property
    def born_host(self) -> str:
        rec = self.record
        return format_host(rec.born_addr, rec.born_port)

    @property
    def store_timestamp(self) -> int:
        return self.record.store_timestamp

    @property
    def store_host(self) -> str:
        rec = self.record
        return format_host(rec.store_addr, rec.store_port)

    @property
    def msg_id(self) -> str:
        rec = self.record
        return encode_offset_msg_id(rec.store_addr, rec.store_port, rec.physical_offset)

    @property
    def record_view(self) -> memoryview:
        """The stored record, as it lies in the commitlog, without copying it (what a RocketMQ
        pull response carries: RocketMQ's clients decode these bytes)."""
        size = int.from_bytes(self._buf[self._pos : self._pos + 4], "big", signed=True)
        if size <= 0 or self._pos + size > len(self._buf):
            raise self._located(
                CorruptDataError(f"record size {size} does not fit its buffer", offset=self._pos)
            )
        return memoryview(self._buf)[self._pos : self._pos + size]

    @property
    def body_view(self) -> memoryview:
        """The body without copying it."""
        start, length = self._body_span()
        return memoryview(self._buf)[start : start + length]

    @property
    def body(self) -> bytes:
        start, length = self._body_span()
        return bytes(self._buf[start : start + length])

    def _body_span(self) -> tuple[int, int]:
        span = self._body
        if span is not None:
            return span
        rec = self._rec
        if rec is not None:
            return rec.body_start, rec.body_len
        try:
            span = self._body = body_span(self._buf, self._pos)
        except CorruptDataError as exc:
            raise self._located(exc) from None
        return span

    @property
    def transaction_type(self) -> int:
        return self.record.sys_flag & SYSFLAG_TX_MASK

    # --- properties ---------------------------------------------------------------------
    @property
    def properties(self) -> dict[str, str]:
        props = self._props
        if props is None:
            props = self._props = decode_properties(self.record.properties)
        return props

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(PROPERTY_KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")

    @property
    def tags_code(self) -> int:
        """The consume-queue tagsCode: java_hash(tags), or the delivery time of a delayed message."""
        if self._tags_code is None:
            props = self.properties
            if self.topic == SCHEDULE_TOPIC and PROPERTY_DELAY in props and self._delay_levels:
                self._tags_code = schedule_tags_code(
                    props[PROPERTY_DELAY], self.store_timestamp, self._delay_levels
                )
            else:
                self._tags_code = _tags_code(props.get(PROPERTY_TAGS))
        return self._tags_code

    def to_dict(self, *, body: bool = True) -> dict[str, Any]:
        """Every field as plain Python values (body as bytes)."""
        d: dict[str, Any] = {name: getattr(self, name) for name in _EXPORTED}
        if body:
            d["body"] = self.body
        return d

    def __repr__(self) -> str:
        try:
            return (
                f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, physical_offset={self.physical_offset}, "
                f"msg_id={self.msg_id!r}, body={self.record.body_len} bytes)"
            )
        except Exception as exc:  # a corrupt record still gets a readable repr
            return f"MessageExt(<undecodable at {self._pos}: {exc}>)"


_EXPORTED: Final = (
    "topic",
    "queue_id",
    "queue_offset",
    "physical_offset",
    "store_size",
    "msg_id",
    "sys_flag",
    "flag",
    "body_crc",
    "reconsume_times",
    "prepared_transaction_offset",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "store_host",
    "properties",
    "keys",
    "tags",
    "uniq_key",
    "tags_code",
)
