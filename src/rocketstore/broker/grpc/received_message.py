"""A stored message as the protobuf ``Message`` a consumer (or a transaction check) receives
(BROKER.md §7): the original topic, the user's properties only, and the system properties
RocketMQ 5 derives from the record."""

from __future__ import annotations

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
from rocketstore.message import PROPERTY_DELAY, MessageExt
from rocketstore.protocol import definition_pb2
from rocketstore.topics import PROPERTY_SHARDING_KEY

__all__ = ["timestamp", "to_proto_message"]

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


def message_type_of(props: dict[str, str]) -> int:
    if props.get(PROPERTY_TRANSACTION) == "true":
        return _TRANSACTION
    if PROPERTY_DELAY in props or any(k.startswith("TIMER_") for k in props):
        return _DELAY
    if PROPERTY_SHARDING_KEY in props:
        return _FIFO
    return _NORMAL


def to_proto_message(
    msg: MessageExt,
    *,
    topic: str,
    receipt_handle: str = "",
    delivery_attempt: int = 0,
    dead_letter_queue: str | None = None,
) -> Any:
    """``msg`` as a protobuf Message of ``topic`` (the original topic, for retries and halves)."""
    props = msg.properties
    body = msg.body
    sp = definition_pb2.SystemProperties(
        message_id=props.get("UNIQ_KEY") or msg.msg_id,
        body_digest=definition_pb2.Digest(type=_MD5, checksum=hashlib.md5(body).hexdigest().upper()),
        body_encoding=_GZIP if msg.sys_flag & SYSFLAG_COMPRESSED else _IDENTITY,
        message_type=message_type_of(props),
        born_timestamp=timestamp(msg.born_timestamp),
        born_host=props.get(PROPERTY_BORN_HOST) or msg.born_host.rpartition(":")[0],
        store_timestamp=timestamp(msg.store_timestamp),
        store_host=msg.store_host,
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
    )
    tags = props.get("TAGS")
    if tags:
        sp.tag = tags
    keys = msg.keys
    if keys:
        sp.keys.extend(keys)
    group = props.get(PROPERTY_SHARDING_KEY)
    if group:
        sp.message_group = group
    deliver = props.get(PROPERTY_TIMER_DELIVER_MS)
    if deliver and deliver.isdigit():
        sp.delivery_timestamp.CopyFrom(timestamp(int(deliver)))
    trace = props.get(PROPERTY_TRACE_CONTEXT)
    if trace:
        sp.trace_context = trace
    if receipt_handle:
        sp.receipt_handle = receipt_handle
    if delivery_attempt:
        sp.delivery_attempt = delivery_attempt
    if dead_letter_queue:
        sp.dead_letter_queue.topic = dead_letter_queue
    return definition_pb2.Message(
        topic=definition_pb2.Resource(name=topic),
        system_properties=sp,
        body=body,
        user_properties={name: value for name, value in props.items() if name not in SYSTEM_PROPERTIES},
    )
