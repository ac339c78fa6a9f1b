"""A sent protobuf ``Message`` as a rocketstore ``Message``: RocketMQ 5's own mapping onto a 4.9
record (BROKER.md §6), with the checks that refuse a bad message before anything is stored.

=========================  ==========================================================
protobuf                   record
=========================  ==========================================================
message_id                 ``UNIQ_KEY`` (the client's id: consumers see it again)
tag / keys                 ``TAGS`` / ``KEYS`` (joined by spaces)
user_properties            properties; a name RocketMQ uses itself is refused
message_group              ``__SHARDINGKEY``: the store puts a group in one queue
delivery_timestamp         ``TIMER_DELIVER_MS`` (ms, nanos cut): a timer message, delivered at
                           that time (docs/timers.md), as RocketMQ 5's proxy sends it
TRANSACTION                ``TRAN_MSG=true``, ``PGROUP`` = topic (kept back as a half: see
                           broker/transactions.py), ``CHECK_IMMUNITY_TIME_IN_SECONDS``
delivery_attempt           ``RECONSUME_TIME``
born_host / born_timestamp ``__BORNHOST`` / ``BORN_TIMESTAMP``; the record's born host is
                           the peer's address, its born time the client's
trace_context              ``TRACE_CONTEXT``
body_encoding GZIP         sysflag COMPRESSED (the body stays as sent)
=========================  ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from rocketstore.broker.grpc.status import Code, StatusError
from rocketstore.broker.transactions import (
    PROPERTY_CHECK_IMMUNITY,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION,
)
from rocketstore.codec.commitlog_record import SYSFLAG_COMPRESSED
from rocketstore.codec.message_batch import BatchEntry, EncodedBatch, encode_batch_body
from rocketstore.codec.properties import encode_properties
from rocketstore.message import Message
from rocketstore.prepare import stored_properties
from rocketstore.protocol import definition_pb2
from rocketstore.topics import PROPERTY_SHARDING_KEY

__all__ = ["SYSTEM_PROPERTIES", "SentMessage", "as_batch_of_one", "to_store_message"]

MessageType: Any = definition_pb2.MessageType
Encoding: Any = definition_pb2.Encoding

PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
PROPERTY_RECONSUME_TIME: Final = "RECONSUME_TIME"
PROPERTY_BORN_HOST: Final = "__BORNHOST"
PROPERTY_BORN_TIMESTAMP: Final = "BORN_TIMESTAMP"
PROPERTY_TRACE_CONTEXT: Final = "TRACE_CONTEXT"

# RocketMQ's MessageConst.STRING_HASH_SET (5.x): names a user property may not take
SYSTEM_PROPERTIES: Final = frozenset(
    [
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "MSG_REGION",
        "TRACE_ON",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "__STARTDELIVERTIME",
        "TRANSACTION_PREPARED_QUEUE_OFFSET",
        "TRANSACTION_CHECK_TIMES",
        "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "__SHARDINGKEY",
        "__BORNHOST",
        "CLUSTER",
        "MSG_TYPE",
        "REPLY_TO_CLIENT",
        "CORRELATION_ID",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "INSTANCE_ID",
        "TIMER_DELIVER_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "TIMER_OUT_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_DEL_UNIQKEY",
        "BORN_TIMESTAMP",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "1ST_POP_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "INNER_MULTI_DISPATCH",
        "INNER_MULTI_QUEUE_OFFSET",
        "TRACE_CONTEXT",
        "FORWARD_QID",
        "INNER_NUM",
    ]
)
_MAX_PROPERTY_TEXT = 16 * 1024  # RocketMQ proxy's maxUserPropertySize
_MESSAGE_TYPES = frozenset(
    (
        MessageType.MESSAGE_TYPE_UNSPECIFIED,
        MessageType.NORMAL,
        MessageType.FIFO,
        MessageType.DELAY,
        MessageType.TRANSACTION,
    )
)
_ENCODINGS = frozenset((Encoding.ENCODING_UNSPECIFIED, Encoding.IDENTITY, Encoding.GZIP))
# looked up once: each attribute of a protobuf enum wrapper costs a Python call per message
_TRANSACTION: Final = int(MessageType.TRANSACTION)
_GZIP: Final = int(Encoding.GZIP)


def _has_separator(text: str) -> bool:
    """Whether ``text`` holds a character a record's property text uses to separate entries."""
    return "\x01" in text or "\x02" in text


def _enum_name(enum: Any, value: int) -> str:
    try:
        return f"{enum.Name(value)} ({value})"
    except ValueError:
        return str(value)


@dataclass(slots=True)
class SentMessage:
    """One message of a SendMessage request, ready for the store."""

    message: Message
    client_message_id: str
    transactional: bool


def _timestamp_ms(ts: Any, name: str, code: Code) -> int:
    """``ts`` in ms; StatusError ``code`` when that is more than a Java long holds (RocketMQ's
    proxy fails its own conversion there), which no store field could keep."""
    ms = int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000
    if not -(1 << 63) <= ms < 1 << 63:
        raise StatusError(
            code, f"{name} {int(ts.seconds)} s is past what a 64-bit count of milliseconds holds"
        )
    return ms


def to_store_message(
    msg: Any,
    *,
    peer_host: str | None,
    now_ms: int,
    max_body_size: int,
    max_delivery_ahead_ms: int,
) -> SentMessage:
    """``msg`` (a protobuf Message) as a store Message; StatusError names what is wrong with it.
    Its topic is the caller's to check (``access.check_topic``); every other field is checked
    here, before anything is written."""
    topic = msg.topic.name
    sp = msg.system_properties
    if sp.message_type not in _MESSAGE_TYPES:
        raise StatusError(
            Code.BAD_REQUEST,
            f"message_type {_enum_name(MessageType, sp.message_type)} is not one this broker takes "
            "(NORMAL, FIFO, DELAY, TRANSACTION)",
        )
    if sp.body_encoding not in _ENCODINGS:
        raise StatusError(
            Code.BAD_REQUEST,
            f"body_encoding {_enum_name(Encoding, sp.body_encoding)} is neither IDENTITY nor GZIP",
        )
    body = msg.body
    if not body:
        raise StatusError(Code.MESSAGE_BODY_EMPTY, "the message body is empty")
    if len(body) > max_body_size:
        raise StatusError(
            Code.MESSAGE_BODY_TOO_LARGE, f"message body of {len(body)} bytes exceeds {max_body_size} bytes"
        )
    message_id = sp.message_id
    if not message_id or _has_separator(message_id):
        raise StatusError(Code.ILLEGAL_MESSAGE_ID, f"message_id {message_id!r} is empty or not printable")
    tag = sp.tag or None
    if tag is not None and (not tag.strip() or "|" in tag or _has_separator(tag)):
        raise StatusError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is blank or holds '|'")
    keys = list(sp.keys)
    for key in keys:
        if not key or " " in key or _has_separator(key):
            raise StatusError(Code.ILLEGAL_MESSAGE_KEY, f"key {key!r} is empty or holds a space")
    props: dict[str, str] = {}
    size = 0
    for name, value in msg.user_properties.items():
        if name in SYSTEM_PROPERTIES:
            raise StatusError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {name!r} is a system property's name"
            )
        if not name or _has_separator(name) or _has_separator(value):
            raise StatusError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {name!r} is empty or not text")
        size += len(name) + len(value)
        props[name] = value
    if size > _MAX_PROPERTY_TEXT:
        raise StatusError(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"user properties of {size} characters exceed {_MAX_PROPERTY_TEXT}",
        )

    message_type = sp.message_type
    transactional = message_type == _TRANSACTION
    if sp.message_group:
        if transactional:
            raise StatusError(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a transactional message has no group"
            )
        props[PROPERTY_SHARDING_KEY] = sp.message_group
    if sp.HasField("delivery_timestamp"):
        if transactional:
            raise StatusError(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a transactional message has no delivery time"
            )
        deliver_ms = _timestamp_ms(sp.delivery_timestamp, "delivery_timestamp", Code.ILLEGAL_DELIVERY_TIME)
        wait = deliver_ms - now_ms
        if wait > max_delivery_ahead_ms:
            # The official Python client copies Message.delivery_timestamp into the seconds field
            # while its docstring asks for ms: a time in ms then reads as one 1000 times too far.
            seconds = int(sp.delivery_timestamp.seconds)
            hint = (
                f"; its seconds field {seconds} looks like milliseconds: give the time in seconds"
                if abs(seconds - now_ms) <= max_delivery_ahead_ms
                else ""
            )
            raise StatusError(
                Code.ILLEGAL_DELIVERY_TIME,
                f"delivery time {deliver_ms} is {wait} ms ahead: more than {max_delivery_ahead_ms} ms{hint}",
            )
        props[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)  # the store makes it a timer
    if transactional:
        props[PROPERTY_TRANSACTION] = "true"
        props[PROPERTY_PRODUCER_GROUP] = topic
        if sp.HasField("orphaned_transaction_recovery_duration"):
            props[PROPERTY_CHECK_IMMUNITY] = str(sp.orphaned_transaction_recovery_duration.seconds)
    if sp.delivery_attempt:
        props[PROPERTY_RECONSUME_TIME] = str(sp.delivery_attempt)
    if sp.born_host:
        props[PROPERTY_BORN_HOST] = sp.born_host
    born_ms = (
        _timestamp_ms(sp.born_timestamp, "born_timestamp", Code.BAD_REQUEST)
        if sp.HasField("born_timestamp")
        else now_ms
    )
    props[PROPERTY_BORN_TIMESTAMP] = str(born_ms)
    if sp.trace_context:
        props[PROPERTY_TRACE_CONTEXT] = sp.trace_context
    return SentMessage(
        Message(
            topic=topic,
            body=body,
            tags=tag,
            keys=keys,
            properties=props,
            uniq_key=message_id,
            born_timestamp=born_ms,
            born_host=peer_host,
            sys_flag=SYSFLAG_COMPRESSED if sp.body_encoding == _GZIP else 0,
        ),
        message_id,
        transactional,
    )


def as_batch_of_one(msg: Message, queue_id: int) -> EncodedBatch | None:
    """A plain sent message (no delivery time, not a transaction's half) as a producer's batch of
    one, the form the store's columnar put takes (``put_encoded_columns``, as the remoting door's
    sends: ``ColumnCommit``): its properties as the store writes a Message's
    (``stored_properties``), so its record is the one ``put_messages`` writes. None when the
    batch encoding cannot carry it as it is (a property the store would refuse, properties too
    long for the encoding, no born host, time or id): ``put_messages`` then names what is wrong
    or fills it in."""
    if msg.born_host is None or msg.born_timestamp is None or msg.uniq_key is None:
        return None
    assert isinstance(msg.body, bytes)  # (a protobuf's bytes field)
    try:
        props, _ = stored_properties(msg, msg.uniq_key)
        data = encode_batch_body([BatchEntry(0, msg.body, encode_properties(props))])
    except ValueError:  # (InvalidMessageError is one: a property the store refuses)
        return None
    return EncodedBatch(msg.topic, queue_id, data, msg.born_host, msg.born_timestamp, sys_flag=msg.sys_flag)
