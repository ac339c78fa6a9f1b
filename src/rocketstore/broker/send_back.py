"""Messages a consumer could not consume, sent back to the broker (RocketMQ 4's
CONSUMER_SEND_MSG_BACK, ``SendMessageProcessor.consumerSendMsgBack``): where the copy goes and what
it carries.

A copy goes to ``%RETRY%<group>`` (one queue), delayed by the level the consumer asked for, or by
level ``3 + reconsume times`` when it left the choice to the broker (0): the first retry comes
after 10 s, each later one a level later. Once the message was already redelivered
``max_reconsume_times`` times, or when the consumer asks for a negative level, it goes to
``%DLQ%<group>`` (one queue) undelayed instead. The copy keeps the body as stored (compressed
stays compressed), flag, tags, keys, UNIQ_KEY and user properties, born time and host; its
RECONSUMETIMES is one more; ``RETRY_TOPIC`` names the topic it was first sent to and
``ORIGIN_MESSAGE_ID`` the first delivery's offset message id.

Protocol-free: the remoting adapter and any other one share it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rocketstore.broker.pop_copies import (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    consumer_copy,
    dlq_topic,
)
from rocketstore.codec.commitlog_record import SYSFLAG_COMPRESSED, SYSFLAG_MULTI_TAGS
from rocketstore.message import Message, MessageExt

__all__ = [
    "DEFAULT_MAX_RECONSUME_TIMES",
    "PROPERTY_ORIGIN_MESSAGE_ID",
    "PROPERTY_RETRY_TOPIC",
    "SendBack",
    "dlq_topic",
    "retry_topic",
    "send_back",
]

DEFAULT_MAX_RECONSUME_TIMES: Final = 16  # a subscription group's retryMaxTimes
FIRST_RETRY_DELAY_LEVEL: Final = 3  # 10 s
# the body's compression: bit 0 and the compression type in bits 8-10
_KEPT_SYSFLAG: Final = SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS | 0x700


def retry_topic(group: str) -> str:
    """A remoting consumer group's retry topic (RocketMQ 4's; RocketMQ 5's pop adds the topic)."""
    return f"%RETRY%{group}"


@dataclass(frozen=True)
class SendBack:
    message: Message
    dead_letter: bool


def send_back(msg: MessageExt, group: str, delay_level: int, max_reconsume_times: int) -> SendBack:
    """The copy of ``msg`` to store for ``group`` (see the module docstring)."""
    dead = msg.reconsume_times >= max_reconsume_times or delay_level < 0
    if dead:
        topic, level = dlq_topic(group), 0
    else:
        topic = retry_topic(group)
        level = delay_level if delay_level > 0 else FIRST_RETRY_DELAY_LEVEL + msg.reconsume_times
    copy = consumer_copy(msg, topic, msg.reconsume_times + 1, delay_level=level, kept_sys_flag=_KEPT_SYSFLAG)
    props = copy.properties
    assert isinstance(props, dict)
    props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
    props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.msg_id)
    return SendBack(copy, dead)
