"""The topics the store and the broker keep for themselves, and the tests that refuse them to
clients, all in any letter case (a topic's name is a directory's, and RocketMQ's own system
prefix is lower-case ``rmq_sys_``).

* ``reserved_by_store``: what the store refuses in a put that is not its own (``internal``):
  ``SCHEDULE_TOPIC_XXXX`` and every ``RMQ_SYS_*`` name (transaction halves and ops, the pop log,
  timers).
* ``sending_forbidden``: what a client may not send to (RocketMQ's
  ``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``, and every ``RMQ_SYS_*`` name).
* ``is_system_topic``: what a client may not create, delete, send to or consume from through the
  ACL'd doors (RocketMQ's ``TopicValidator.SYSTEM_TOPIC_SET``, and every ``RMQ_SYS_*`` name).
"""

from __future__ import annotations

from typing import Final

from rocketstore.message import SCHEDULE_TOPIC

__all__ = [
    "AUTO_CREATE_TOPIC",
    "BENCHMARK_TOPIC",
    "HALF_TOPIC",
    "OFFSET_MOVED_EVENT",
    "OP_TOPIC",
    "SELF_TEST_TOPIC",
    "SYSTEM_TOPIC_PREFIX",
    "TRACE_TOPIC",
    "is_system_topic",
    "reserved_by_store",
    "sending_forbidden",
]

SYSTEM_TOPIC_PREFIX: Final = "RMQ_SYS_"
HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
AUTO_CREATE_TOPIC: Final = "TBW102"
BENCHMARK_TOPIC: Final = "BenchmarkTest"
SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"

# in upper case; the RMQ_SYS_ names are covered by the prefix
_NOT_SENDABLE: Final = frozenset(
    t.upper() for t in (SCHEDULE_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SELF_TEST_TOPIC, OFFSET_MOVED_EVENT)
)
_SYSTEM: Final = _NOT_SENDABLE | frozenset(
    t.upper()
    for t in (
        AUTO_CREATE_TOPIC,
        BENCHMARK_TOPIC,
        "DefaultCluster",
        "DefaultHeartBeatSyncerTopic",
        "rocketmq_sys_trace_topic",
    )
)


def reserved_by_store(topic: str) -> bool:
    upper = topic.upper()
    return upper == SCHEDULE_TOPIC or upper.startswith(SYSTEM_TOPIC_PREFIX)


def sending_forbidden(topic: str) -> bool:
    upper = topic.upper()
    return upper in _NOT_SENDABLE or upper.startswith(SYSTEM_TOPIC_PREFIX)


def is_system_topic(topic: str) -> bool:
    upper = topic.upper()
    return upper in _SYSTEM or upper.startswith(SYSTEM_TOPIC_PREFIX)
