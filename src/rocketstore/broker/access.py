"""What a client may name: the one check every topic and consumer group in a request passes
(settings, routes, assignments, sends, transaction ends, receives, acks, invisible-time changes,
dead-letter forwards), whichever RPC carries it.

A name is refused (``RequestRefusedError``), in this order, when it is not a valid name, when it
is the broker's own (ILLEGAL_TOPIC / ILLEGAL_GROUP, as RocketMQ's proxy does), or when the
caller's account does not list it (FORBIDDEN; without an ACL file every valid name is allowed).

The broker's own topics, refused to every client in any letter case: ``SCHEDULE_TOPIC_XXXX``,
everything starting with ``RMQ_SYS_`` (the transaction and pop logs among them) and RocketMQ's
other system topics (TopicValidator's set). A group's retry topic ``%RETRY%{group}_{topic}`` is
read only through its group's receives of ``topic``, and written only by the broker; a
dead-letter topic ``%DLQ%{group}`` may be consumed (to look at or replay dead letters) but is
written only by the broker. Groups starting with ``%`` or ``CID_RMQ_SYS_`` (RocketMQ's system
groups, the pop log's ``CID_RMQ_SYS_ROCKETSTORE_POP`` among them) are refused.

A request that reaches a stored record rather than naming its topic (RocketMQ 4's view by id and
send-back, by commitlog offset) is checked against ``owning_topic``: the topic the record's data
belongs to.
"""

from __future__ import annotations

import enum
from typing import Final

from rocketstore.broker.auth import Account
from rocketstore.broker.transactions import HALF_TOPIC
from rocketstore.errors import Refusal, RequestRefusedError
from rocketstore.message import PROPERTY_REAL_TOPIC, SCHEDULE_TOPIC, TOPIC_PATTERN, MessageExt
from rocketstore.system_topics import is_system_topic

__all__ = ["Use", "check_group", "check_subscription", "check_topic", "owning_topic"]

_SYSTEM_GROUP_PREFIXES: Final = ("CID_RMQ_SYS_", "RMQ_SYS_")
_RETRY_PREFIX: Final = "%RETRY%"
_DLQ_PREFIX: Final = "%DLQ%"
# topics where the broker keeps records for another topic, named by their REAL_TOPIC
_HOLDING_TOPICS: Final = frozenset({SCHEDULE_TOPIC, HALF_TOPIC})


class Use(enum.Enum):
    """What a request does with a topic it names."""

    SEND = "send to"  # SendMessage, EndTransaction, RecallMessage, a producer's settings
    CONSUME = "consume from"  # routes, assignments, receives, acks, a consumer's settings


def check_topic(account: Account | None, topic: str, use: Use) -> str:
    """``topic`` if ``account`` (None: no ACL) may ``use`` it; RequestRefusedError ILLEGAL_TOPIC
    or FORBIDDEN naming why not."""
    if not isinstance(topic, str) or not TOPIC_PATTERN.fullmatch(topic):
        raise RequestRefusedError(Refusal.ILLEGAL_TOPIC, f"topic {topic!r} is not a valid topic name")
    upper = topic.upper()
    if is_system_topic(topic):
        raise RequestRefusedError(
            Refusal.ILLEGAL_TOPIC, f"topic {topic!r} is a system topic: clients may not use it"
        )
    if upper.startswith(_RETRY_PREFIX):
        raise RequestRefusedError(
            Refusal.ILLEGAL_TOPIC,
            f"topic {topic!r} is a retry topic: a group reads it through its receives of the topic",
        )
    if upper.startswith(_DLQ_PREFIX) and use is Use.SEND:
        raise RequestRefusedError(
            Refusal.ILLEGAL_TOPIC, f"topic {topic!r} is a dead-letter topic: only the broker writes it"
        )
    if account is not None and topic not in account.topics and "*" not in account.topics:
        raise RequestRefusedError(
            Refusal.FORBIDDEN, f"access key {account.access_key!r} may not {use.value} topic {topic!r}"
        )
    return topic


def check_group(account: Account | None, group: str) -> str:
    """``group`` if ``account`` (None: no ACL) may consume as it; RequestRefusedError
    ILLEGAL_GROUP or FORBIDDEN naming why not."""
    if (
        not isinstance(group, str)
        or not TOPIC_PATTERN.fullmatch(group)
        or group.startswith("%")
        or group.upper().startswith(_SYSTEM_GROUP_PREFIXES)
    ):
        raise RequestRefusedError(
            Refusal.ILLEGAL_GROUP, f"consumer group {group!r} is not a valid group name for a client"
        )
    if account is not None and group not in account.groups and "*" not in account.groups:
        raise RequestRefusedError(
            Refusal.FORBIDDEN, f"access key {account.access_key!r} may not use group {group!r}"
        )
    return group


def check_subscription(account: Account | None, group: str, topic: str) -> tuple[str, str]:
    """``check_group`` and ``check_topic`` (to consume) of a group reading a topic, and their
    retry topic ``%RETRY%{group}_{topic}`` must be a valid name too."""
    check_group(account, group)
    check_topic(account, topic, Use.CONSUME)
    if len(group) + len(topic) + len(_RETRY_PREFIX) + 1 > 127:
        raise RequestRefusedError(
            Refusal.ILLEGAL_GROUP,
            f"group {group!r} and topic {topic!r}: their retry topic would be longer than 127 characters",
        )
    return group, topic


def owning_topic(msg: MessageExt) -> str:
    """The topic whose data the stored record ``msg`` is: the ``REAL_TOPIC`` of a record the
    broker holds for a topic (a delayed message in SCHEDULE_TOPIC_XXXX, a transaction half),
    else its own topic. Who may read the record is who may consume that topic."""
    topic = msg.topic
    if topic in _HOLDING_TOPICS:
        real = msg.properties.get(PROPERTY_REAL_TOPIC)
        if real:
            return real
    return topic
