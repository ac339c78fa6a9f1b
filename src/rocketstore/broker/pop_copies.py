"""The messages pop consumption stores again: retry copies and dead letters (RocketMQ 5's names).

An expired message is re-put into ``%RETRY%{group}_{topic}`` queue 0 (PopReviveService.reviveRetry),
one out of attempts into ``%DLQ%{group}`` queue 0. Both copies keep the body, tags, keys, UNIQ_KEY
(so clients see the same message id), properties and born fields; RECONSUMETIMES is the number of
deliveries so far.
"""

from __future__ import annotations

from typing import Final

from rocketstore.codec.commitlog_record import SYSFLAG_COMPRESSED, SYSFLAG_MULTI_TAGS
from rocketstore.message import RESERVED_PROPERTIES, Message, MessageExt

__all__ = [
    "PROPERTY_DLQ_ORIGIN_MESSAGE_ID",
    "PROPERTY_DLQ_ORIGIN_TOPIC",
    "PROPERTY_FIRST_POP_TIME",
    "PROPERTY_ORIGIN_MESSAGE_ID",
    "PROPERTY_RETRY_TOPIC",
    "consumer_copy",
    "dead_letter",
    "dlq_topic",
    "retry_copy",
    "retry_topic",
]

PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROPERTY_FIRST_POP_TIME: Final = "1ST_POP_TIME"
PROPERTY_DLQ_ORIGIN_TOPIC: Final = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID: Final = "DLQ_ORIGIN_MESSAGE_ID"


def retry_topic(group: str, topic: str) -> str:
    """Where a group's expired messages of ``topic`` are re-put (RocketMQ 5 pop's retry topic)."""
    return f"%RETRY%{group}_{topic}"


def dlq_topic(group: str) -> str:
    return f"%DLQ%{group}"


def retry_copy(msg: MessageExt, group: str, topic: str, deliveries: int, first_pop_ms: int) -> Message:
    """``msg`` (of ``topic``, or of its retry topic) for the retry topic: ``RETRY_TOPIC`` (the
    subscribed topic), ``ORIGIN_MESSAGE_ID`` and ``1ST_POP_TIME`` set unless it has them."""
    copy = consumer_copy(msg, retry_topic(group, topic), deliveries)
    props = copy.properties
    assert isinstance(props, dict)
    props.setdefault(PROPERTY_RETRY_TOPIC, topic)
    props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.uniq_key or msg.msg_id)
    props.setdefault(PROPERTY_FIRST_POP_TIME, str(first_pop_ms))
    return copy


def dead_letter(msg: MessageExt, group: str, topic: str, deliveries: int) -> Message:
    """``msg`` for ``%DLQ%{group}``, with ``DLQ_ORIGIN_TOPIC`` and ``DLQ_ORIGIN_MESSAGE_ID``."""
    copy = consumer_copy(msg, dlq_topic(group), deliveries)
    props = copy.properties
    assert isinstance(props, dict)
    props[PROPERTY_DLQ_ORIGIN_TOPIC] = topic
    props[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] = msg.uniq_key or msg.msg_id
    return copy


# the body's compression (and the multi-tags bit) travel with a copy
_KEPT_SYSFLAG = SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS


def consumer_copy(
    msg: MessageExt,
    topic: str,
    reconsume_times: int,
    *,
    delay_level: int = 0,
    kept_sys_flag: int = _KEPT_SYSFLAG,
) -> Message:
    """A consumed message re-put for a retry or a dead letter: the body as stored, flag, tags,
    keys, UNIQ_KEY, user properties, born time and host; ``sys_flag`` bits beyond
    ``kept_sys_flag`` dropped."""
    props = {k: v for k, v in msg.properties.items() if k not in RESERVED_PROPERTIES}
    return Message(
        topic,
        msg.body,
        tags=msg.tags,
        keys=msg.keys,
        properties=props,
        queue_id=0,
        flag=msg.flag,
        uniq_key=msg.uniq_key,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        sys_flag=msg.sys_flag & kept_sys_flag,
        reconsume_times=reconsume_times,
        delay_level=delay_level,
    )
