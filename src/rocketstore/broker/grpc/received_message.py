"""A stored message as the protobuf ``Message`` a consumer (or a transaction check) receives
(BROKER.md §7): the original topic, the user's properties only, and the system properties
RocketMQ 5 derives from the record."""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from google.protobuf import timestamp_pb2

from rocketstore.broker.grpc.sent_message import (
    PROPERTY_BORN_HOST,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRACE_CONTEXT,
    SYSTEM_PROPERTIES,
)
from rocketstore.broker.transactions import PROPERTY_TRANSACTION
from rocketstore.codec.commitlog_record import SYSFLAG_COMPRESSED
from rocketstore.codec.host import format_host
from rocketstore.message import PROPERTY_DELAY, MessageExt
from rocketstore.protocol import definition_pb2
from rocketstore.topics import PROPERTY_SHARDING_KEY

__all__ = ["message_fields", "timestamp", "to_proto_message"]

MessageType: Any = definition_pb2.MessageType
# looked up once: each attribute of a protobuf enum wrapper costs a Python call per message
_TRANSACTION: int = int(MessageType.TRANSACTION)
_DELAY: int = int(MessageType.DELAY)
_FIFO: int = int(MessageType.FIFO)
_NORMAL: int = int(MessageType.NORMAL)
_MD5: int = int(definition_pb2.DigestType.MD5)
_GZIP: int = int(definition_pb2.Encoding.GZIP)
_IDENTITY: int = int(definition_pb2.Encoding.IDENTITY)


def timestamp(ms: int) -> Any:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


# the store hosts of a broker's messages: a handful of (address, port) pairs
_host = functools.lru_cache(maxsize=64)(format_host)


def message_type_of(props: dict[str, str]) -> int:
    if props.get(PROPERTY_TRANSACTION) == "true":
        return _TRANSACTION
    if PROPERTY_DELAY in props:
        return _DELAY
    for name in props:
        if name.startswith("TIMER_"):
            return _DELAY
    if PROPERTY_SHARDING_KEY in props:
        return _FIFO
    return _NORMAL


def message_fields(
    msg: MessageExt,
    *,
    topic: str,
    receipt_handle: str = "",
    delivery_attempt: int = 0,
    dead_letter_queue: str | None = None,
) -> dict[str, Any]:
    """``msg`` as the fields of a protobuf Message of ``topic`` (the original topic, for
    retries and halves), nested as dicts: upb builds a message from them in C, about twice as
    fast as from submessage objects it would copy (``to_proto_message``; a receive puts them
    straight into its response)."""
    props = msg.properties
    rec = msg.record
    body = msg.body
    born, stored = rec.born_timestamp, rec.store_timestamp
    sp: dict[str, Any] = {
        "message_id": props.get("UNIQ_KEY") or msg.msg_id,
        "body_digest": {"type": _MD5, "checksum": hashlib.md5(body).hexdigest().upper()},
        "body_encoding": _GZIP if rec.sys_flag & SYSFLAG_COMPRESSED else _IDENTITY,
        "message_type": message_type_of(props),
        "born_timestamp": {"seconds": born // 1000, "nanos": (born % 1000) * 1_000_000},
        "born_host": props.get(PROPERTY_BORN_HOST) or msg.born_host.rpartition(":")[0],
        "store_timestamp": {"seconds": stored // 1000, "nanos": (stored % 1000) * 1_000_000},
        "store_host": _host(rec.store_addr, rec.store_port),
        "queue_id": rec.queue_id,
        "queue_offset": rec.queue_offset,
    }
    tags = props.get("TAGS")
    if tags:
        sp["tag"] = tags
    if "KEYS" in props:
        keys = msg.keys
        if keys:
            sp["keys"] = keys
    group = props.get(PROPERTY_SHARDING_KEY)
    if group:
        sp["message_group"] = group
    deliver = props.get(PROPERTY_TIMER_DELIVER_MS)
    if deliver and deliver.isdigit():
        ms = int(deliver)
        sp["delivery_timestamp"] = {"seconds": ms // 1000, "nanos": (ms % 1000) * 1_000_000}
    trace = props.get(PROPERTY_TRACE_CONTEXT)
    if trace:
        sp["trace_context"] = trace
    if receipt_handle:
        sp["receipt_handle"] = receipt_handle
    if delivery_attempt:
        sp["delivery_attempt"] = delivery_attempt
    if dead_letter_queue:
        sp["dead_letter_queue"] = {"topic": dead_letter_queue}
    return {
        "topic": {"name": topic},
        "system_properties": sp,
        "body": body,
        "user_properties": {name: value for name, value in props.items() if name not in SYSTEM_PROPERTIES},
    }


def to_proto_message(
    msg: MessageExt,
    *,
    topic: str,
    receipt_handle: str = "",
    delivery_attempt: int = 0,
    dead_letter_queue: str | None = None,
) -> Any:
    """``msg`` as a protobuf Message of ``topic`` (the original topic, for retries and halves)."""
    return definition_pb2.Message(
        **message_fields(
            msg,
            topic=topic,
            receipt_handle=receipt_handle,
            delivery_attempt=delivery_attempt,
            dead_letter_queue=dead_letter_queue,
        )
    )
