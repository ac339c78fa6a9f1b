"""Turning a ``Message`` into an encoded record, outside the append lock.

Everything that does not depend on the record's place in the log is done here: validation,
the delay-level rewrite to ``SCHEDULE_TOPIC_XXXX``, the properties string, the UNIQ_KEY, the
body CRC and the whole byte image. Under the lock only the queue offset, physical offset and
store timestamp are patched in (``codec.commitlog_record.patch_positions``).

Validation (STORE.md §2.2) rejects with ``InvalidMessageError`` before anything is written:
topics of 1..127 characters of ``[A-Za-z0-9_%|-]`` (so no topic can name a path outside the
store), reserved system topics, bodies over ``max_message_size``, properties over 32767 bytes,
keys with spaces, and properties that cannot be read back.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from rocketstore.clock import Clock
from rocketstore.codec.commitlog_record import (
    END_FILE_MIN_BLANK_LENGTH,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_COMPRESSED,
    SYSFLAG_MULTI_TAGS,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TX_MASK,
    TX_COMMIT,
    TX_NOT,
    RecordTemplate,
    encode_message,
    store_timestamp_position,
)
from rocketstore.codec.host import parse_host
from rocketstore.codec.java_hash import tags_code
from rocketstore.codec.message_id import UniqKeyGenerator
from rocketstore.codec.properties import encode_properties, validate_property
from rocketstore.config import StoreConfig
from rocketstore.errors import InvalidMessageError
from rocketstore.message import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    Message,
)
from rocketstore.results import PutStatus

__all__ = ["MessageEncoder", "PreparedMessage", "validate_topic"]

_TOPIC_PATTERN = re.compile(r"[%|A-Za-z0-9_-]{1,127}")
SYSTEM_TOPIC_PREFIX: Final = "RMQ_SYS_"
_RESERVED_PROPERTIES = frozenset(
    (
        PROPERTY_KEYS,
        PROPERTY_TAGS,
        PROPERTY_UNIQ_KEY,
        PROPERTY_DELAY,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
    )
)
_USER_SYSFLAG_BITS: Final = SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS | SYSFLAG_TX_MASK
_MAX_PROPERTIES_BYTES: Final = 32767
_MAX_QUEUE_ID: Final = 65535
_INT32 = range(-(1 << 31), 1 << 31)


def validate_topic(topic: object, *, allow_system: bool = False) -> str:
    """Return ``topic`` if it may be stored (and used as a directory name), else raise."""
    if not isinstance(topic, str) or not _TOPIC_PATTERN.fullmatch(topic):
        raise InvalidMessageError(
            f"invalid topic {topic!r}: topics are 1-127 characters of letters, digits, '_', '-', '%', '|'",
            PutStatus.MESSAGE_ILLEGAL,
        )
    if not allow_system and (topic == SCHEDULE_TOPIC or topic.startswith(SYSTEM_TOPIC_PREFIX)):
        raise InvalidMessageError(
            f"topic {topic!r} is reserved for the store itself", PutStatus.MESSAGE_ILLEGAL
        )
    return topic


@dataclass(slots=True)
class PreparedMessage:
    """A message encoded and ready to append; ``record`` lacks only the three lock-time fields."""

    record: bytes
    topic: str
    queue_id: int
    sys_flag: int
    tags_code: int
    delay_ms: int  # > 0 for SCHEDULE_TOPIC_XXXX: tagsCode is then store time + delay_ms
    keys: str | None
    uniq_key: str | None
    timestamp_position: int  # where STORETIMESTAMP sits in the record


class MessageEncoder:
    """Validates and encodes messages for one store. Thread-safe (no mutable state but the id counter)."""

    def __init__(self, config: StoreConfig, clock: Clock) -> None:
        self._config = config
        self._clock = clock
        self._store_addr, self._store_port = parse_host(config.store_host)
        self._store_v6 = SYSFLAG_STOREHOST_V6 if len(self._store_addr) == 16 else 0
        self._max_body = config.max_message_size
        self._max_record = min(
            config.max_message_size, config.commitlog_segment_size - END_FILE_MIN_BLANK_LENGTH
        )
        self._delay_levels = config.delay_levels_ms
        self._uniq = UniqKeyGenerator() if config.generate_uniq_key else None
        self._valid_topics: dict[str, bytes] = {}
        self._templates: dict[str, RecordTemplate] = {}
        self._tag_properties: dict[str | None, tuple[bytes, int]] = {}
        self._valid_system_topics: dict[str, bytes] = {}

    def prepare_many(self, msgs: Sequence[Message]) -> list[PreparedMessage]:
        """Every message prepared, or an InvalidMessageError for the first bad one (nothing kept).

        Messages without keys, properties, delay, own UNIQ_KEY, born host or sysflag (the common
        shape of a batch) take a lean path: cached topic and tags, UNIQ_KEYs reserved in bulk,
        one ``RecordTemplate.encode`` each. Others go through ``prepare``.
        """
        out: list[PreparedMessage] = []
        uniqs = self._uniq.take(len(msgs)) if self._uniq is not None else None
        templates = self._templates
        tag_props = self._tag_properties
        max_body = self._max_body
        max_record = self._max_record
        now = self._clock.now_ms()
        for i, m in enumerate(msgs):
            try:
                if (
                    type(m) is not Message
                    or m.properties
                    or m.keys
                    or m.delay_level
                    or m.born_host is not None
                    or m.sys_flag
                    or m.uniq_key is not None
                ):
                    out.append(self.prepare(m))
                    continue
                topic, body, queue_id, flag = m.topic, m.body, m.queue_id, m.flag
                template = templates.get(topic)
                if template is None:
                    template = templates[topic] = RecordTemplate(
                        validate_topic(topic).encode(),
                        self._store_addr,
                        self._store_port,
                        self._store_addr,
                        self._store_port,
                    )
                if type(body) is not bytes and not isinstance(body, (bytearray, memoryview)):
                    raise InvalidMessageError(
                        f"body must be bytes, not {type(body).__name__}", PutStatus.MESSAGE_ILLEGAL
                    )
                if len(body) > max_body:
                    raise InvalidMessageError(
                        f"body of {len(body)} bytes exceeds max_message_size {max_body}",
                        PutStatus.MESSAGE_ILLEGAL,
                    )
                if type(queue_id) is not int or not 0 <= queue_id <= _MAX_QUEUE_ID:
                    raise InvalidMessageError(
                        f"queue_id must be an int in 0..{_MAX_QUEUE_ID}, not {queue_id!r}",
                        PutStatus.MESSAGE_ILLEGAL,
                    )
                if type(flag) is not int or not -0x80000000 <= flag <= 0x7FFFFFFF:
                    raise InvalidMessageError(
                        f"flag must be a 32-bit int, not {flag!r}", PutStatus.MESSAGE_ILLEGAL
                    )
                tags = m.tags
                cached = tag_props.get(tags)
                if cached is None:
                    if tags is not None:
                        self._check_property(PROPERTY_TAGS, tags)
                    cached = tag_props[tags] = (
                        encode_properties({PROPERTY_TAGS: tags}).encode() if tags is not None else b"",
                        tags_code(tags),
                    )
                props, code = cached
                uniq = uniqs[i] if uniqs is not None else None
                if uniq is not None:
                    props = (props + b"\x02UNIQ_KEY\x01" if props else b"UNIQ_KEY\x01") + uniq.encode()
                born_ts = now if m.born_timestamp is None else m.born_timestamp
                record, sys_flag = template.encode(body, props, queue_id, flag, 0, born_ts)
                if len(record) > max_record:
                    raise InvalidMessageError(
                        f"record of {len(record)} bytes exceeds the limit of {max_record} "
                        "(max_message_size, and a commitlog segment less 8 bytes)",
                        PutStatus.MESSAGE_SIZE_EXCEEDED,
                    )
                out.append(
                    PreparedMessage(
                        record, topic, queue_id, sys_flag, code, 0, None, uniq, template.timestamp_position
                    )
                )
            except InvalidMessageError as exc:
                raise InvalidMessageError(f"message {i} of the batch: {exc}", exc.status) from None
            except struct.error as exc:
                raise InvalidMessageError(
                    f"message {i} of the batch: a field is out of range: {exc}", PutStatus.MESSAGE_ILLEGAL
                ) from None
        return out

    def prepare(self, msg: Message, *, internal: bool = False) -> PreparedMessage:
        if not isinstance(msg, Message):
            raise InvalidMessageError(
                f"expected a Message, got {type(msg).__name__}", PutStatus.MESSAGE_ILLEGAL
            )
        topic = msg.topic
        topics = self._valid_system_topics if internal else self._valid_topics
        topic_bytes = topics.get(topic)
        if topic_bytes is None:
            topic_bytes = topics[validate_topic(topic, allow_system=internal)] = topic.encode()
        body = msg.body
        if not isinstance(body, (bytes, bytearray, memoryview)):
            raise InvalidMessageError(
                f"body must be bytes, not {type(body).__name__}", PutStatus.MESSAGE_ILLEGAL
            )
        if len(body) > self._max_body:
            raise InvalidMessageError(
                f"body of {len(body)} bytes exceeds max_message_size {self._max_body}",
                PutStatus.MESSAGE_ILLEGAL,
            )
        queue_id = msg.queue_id
        if type(queue_id) is not int or not 0 <= queue_id <= _MAX_QUEUE_ID:
            raise InvalidMessageError(
                f"queue_id must be an int in 0..{_MAX_QUEUE_ID}, not {queue_id!r}", PutStatus.MESSAGE_ILLEGAL
            )
        sys_flag = msg.sys_flag
        if type(sys_flag) is not int or sys_flag & ~_USER_SYSFLAG_BITS:
            raise InvalidMessageError(
                f"sys_flag {sys_flag!r}: only the compressed (0x1), multi-tags (0x2) and transaction (0xC) "
                "bits can be set",
                PutStatus.MESSAGE_ILLEGAL,
            )
        if msg.flag not in _INT32:
            raise InvalidMessageError(
                f"flag must be a 32-bit int, not {msg.flag!r}", PutStatus.MESSAGE_ILLEGAL
            )

        props: dict[str, str] = {}
        keys_text = None
        if msg.keys:
            keys = [msg.keys] if isinstance(msg.keys, str) else msg.keys
            for k in keys:
                if not isinstance(k, str) or not k or " " in k or "\x01" in k or "\x02" in k:
                    raise InvalidMessageError(
                        f"key {k!r}: keys are non-empty strings without spaces or \\x01/\\x02",
                        PutStatus.MESSAGE_ILLEGAL,
                    )
            keys_text = props[PROPERTY_KEYS] = " ".join(keys)
        tags = msg.tags
        if tags is not None:
            self._check_property(PROPERTY_TAGS, tags)
            props[PROPERTY_TAGS] = tags
        if msg.properties:
            check = self._check_property
            for name, value in msg.properties.items():
                if name in _RESERVED_PROPERTIES and not internal:
                    raise InvalidMessageError(
                        f"property {name!r} is set by the store from the Message fields",
                        PutStatus.MESSAGE_ILLEGAL,
                    )
                check(name, value)
                props[name] = value
        uniq = msg.uniq_key
        if uniq is None and not internal:
            uniq = self._uniq.next() if self._uniq is not None else None
        if uniq is not None:
            self._check_property(PROPERTY_UNIQ_KEY, uniq)
            props[PROPERTY_UNIQ_KEY] = uniq

        delay_ms = 0
        level = msg.delay_level
        if level and (sys_flag & SYSFLAG_TX_MASK) in (TX_NOT, TX_COMMIT):
            if type(level) is not int or level < 0:
                raise InvalidMessageError(
                    f"delay_level must be a non-negative int, not {level!r}", PutStatus.MESSAGE_ILLEGAL
                )
            level = min(level, len(self._delay_levels))
            props[PROPERTY_REAL_TOPIC] = topic
            props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
            props[PROPERTY_DELAY] = str(level)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
            topic_bytes = topic.encode()
            delay_ms = self._delay_levels[level - 1]

        props_bytes = encode_properties(props).encode() if props else b""
        if len(props_bytes) > _MAX_PROPERTIES_BYTES:
            raise InvalidMessageError(
                f"properties take {len(props_bytes)} bytes, more than {_MAX_PROPERTIES_BYTES}",
                PutStatus.PROPERTIES_SIZE_EXCEEDED,
            )

        if msg.born_host is None:
            born_addr, born_port = self._store_addr, self._store_port
        else:
            try:
                born_addr, born_port = parse_host(msg.born_host)
            except ValueError as exc:
                raise InvalidMessageError(f"born_host: {exc}", PutStatus.MESSAGE_ILLEGAL) from None
        sys_flag |= self._store_v6 | (SYSFLAG_BORNHOST_V6 if len(born_addr) == 16 else 0)
        born_ts = self._clock.now_ms() if msg.born_timestamp is None else msg.born_timestamp

        try:
            record = encode_message(
                body=body,
                topic=topic_bytes,
                properties=props_bytes,
                queue_id=queue_id,
                flag=msg.flag,
                sys_flag=sys_flag,
                born_timestamp=born_ts,
                born_addr=born_addr,
                born_port=born_port,
                store_addr=self._store_addr,
                store_port=self._store_port,
            )
        except struct.error as exc:
            raise InvalidMessageError(f"a field is out of range: {exc}", PutStatus.MESSAGE_ILLEGAL) from None
        if len(record) > self._max_record:
            raise InvalidMessageError(
                f"record of {len(record)} bytes exceeds the limit of {self._max_record} "
                "(max_message_size, and a commitlog segment less 8 bytes)",
                PutStatus.MESSAGE_SIZE_EXCEEDED,
            )
        return PreparedMessage(
            record,
            topic,
            queue_id,
            sys_flag,
            0 if delay_ms else tags_code(tags),
            delay_ms,
            keys_text,
            uniq,
            store_timestamp_position(sys_flag),
        )

    @staticmethod
    def _check_property(name: str, value: str) -> None:
        try:
            validate_property(name, value)
        except ValueError as exc:
            raise InvalidMessageError(str(exc), PutStatus.MESSAGE_ILLEGAL) from None
