"""The options of the ``rocketstore`` Spark source and sink, in one place: which names exist, and
what Kafka's names mean here.

Spark hands a data source its options as a case-insensitive dict; a name not in ``OPTIONS`` is
refused with its name (a Kafka-only option such as ``kafka.bootstrap.servers`` included), so a
misspelt option never silently reads the whole store.

Kafka's names keep Kafka's meaning, a RocketMQ queue standing for a Kafka partition and its
queue offsets for the partition's offsets:

- ``subscribe`` (comma list), ``subscribePattern`` (a regular expression matched against the whole
  topic name) and ``assign`` (``{"topic": [queue ids]}``) choose the queues;
- ``startingOffsets`` / ``endingOffsets``: ``earliest``, ``latest`` or
  ``{"topic": {"queueId": offset}}`` where -2 means earliest and -1 latest;
- ``startingTimestamp`` and ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``
  (``{"topic": {"queueId": epoch ms}}``): each queue starts (ends) at its first message stored
  at or after the time.

System topics (``SCHEDULE_TOPIC_XXXX``, ``rmq_sys_wheel_timer`` and every ``RMQ_SYS_*`` in any
case, ``%RETRY%*``, ``%DLQ%*``) are read only when a topic option names them, or with
``includeSystemTopics=true``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from rocketstore.system_topics import reserved_by_store

__all__ = [
    "EARLIEST",
    "LATEST",
    "OPTIONS",
    "QueueKey",
    "assigned",
    "boolean",
    "broker_offsets_json",
    "check_known",
    "integer",
    "is_system_topic",
    "offsets_json",
    "text",
    "topic_pattern",
]

QueueKey = tuple[str, int]
EARLIEST: Final = -2  # Kafka's special offsets in a startingOffsets / endingOffsets JSON
LATEST: Final = -1

# every option the source and sink take, as documented in docs/spark.md
OPTIONS: Final = (
    "path",
    "paths",
    "brokers",
    # which rows
    "source",
    "topic",
    "topics",
    "queueIds",
    "subscribe",
    "subscribePattern",
    "assign",
    "includeSystemTopics",
    "startTime",
    "endTime",
    "startOffset",
    "endOffset",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "failOnDataLoss",
    # which columns
    "includeBody",
    "bodyAs",
    "includeHeaders",
    # how
    "minPartitions",
    "maxOffsetsPerTrigger",
    "maxMessagesPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    # writing
    "config",
    "lockTimeout",
    "checkpointLocation",
)
_KNOWN: Final = {name.lower(): name for name in OPTIONS}


def check_known(options: Mapping[str, Any]) -> None:
    unknown = sorted(k for k in options if str(k).lower() not in _KNOWN)
    if unknown:
        raise ValueError(
            f"the rocketstore source does not know option {', '.join(unknown)}; it takes {', '.join(OPTIONS)}"
        )


def is_system_topic(topic: str) -> bool:
    """The store's own topics (any case) and the retry and dead-letter topics of groups."""
    return reserved_by_store(topic) or topic.startswith(("%RETRY%", "%DLQ%"))


def text(options: Mapping[str, Any], name: str, default: str | None = None) -> str | None:
    value = options.get(name)
    return default if value is None else str(value)


def boolean(options: Mapping[str, Any], name: str, default: bool) -> bool:
    raw = text(options, name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name}={raw!r}: expected true or false")


def integer(options: Mapping[str, Any], name: str, minimum: int | None = None) -> int | None:
    raw = text(options, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option {name}={raw!r}: expected an integer") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"option {name}={raw!r}: expected an integer of at least {minimum}")
    return value


def topic_pattern(options: Mapping[str, Any]) -> re.Pattern[str] | None:
    raw = text(options, "subscribePattern")
    if raw is None:
        return None
    try:
        return re.compile(raw)
    except re.error as exc:
        raise ValueError(f"option subscribePattern={raw!r}: not a regular expression ({exc})") from None


def assigned(options: Mapping[str, Any]) -> frozenset[QueueKey] | None:
    """``assign``'s queues: ``{"topic": [queue ids]}``."""
    raw = text(options, "assign")
    if raw is None:
        return None
    given = _json(raw, "assign")
    if not isinstance(given, dict) or not all(
        isinstance(ids, list) and all(_is_int(q) and q >= 0 for q in ids) for ids in given.values()
    ):
        raise ValueError(f'option assign={raw!r}: expected {{"topic": [queue ids], ...}}')
    return frozenset((topic, int(q)) for topic, ids in given.items() for q in ids)


def offsets_json(name: str, raw: str) -> dict[QueueKey, int]:
    """``{"topic": {"queueId": number}}`` as {(topic, queue id): number}. Also takes the form
    this source's streaming checkpoints use, ``{"topic/queueId": offset}``."""
    given = _json(raw, name)
    bad = ValueError(f'option {name}={raw!r}: expected {{"topic": {{"queueId": number, ...}}, ...}}')
    if not isinstance(given, dict):
        raise bad
    found: dict[QueueKey, int] = {}
    for key, value in given.items():
        if isinstance(value, dict):
            for qid, number in value.items():
                if not (isinstance(qid, str) and qid.isdigit() and _is_int(number)):
                    raise bad
                found[(key, int(qid))] = int(number)
        elif _is_int(value) and value >= 0:
            topic, _, qid = key.rpartition("/")
            if not topic or not qid.isdigit():
                raise bad
            found[(topic, int(qid))] = int(value)
        else:
            raise bad
    return found


def broker_offsets_json(name: str, raw: str) -> dict[str, dict[QueueKey, int]] | None:
    """The form streaming checkpoints over several stores use, ``{"broker": {"topic/queueId":
    offset}}``, as {broker: {(topic, queue id): offset}}; None when ``raw`` is another form."""
    given = _json(raw, name)
    if not isinstance(given, dict) or not given:
        return None
    if not all(isinstance(v, dict) and v and all("/" in str(k) for k in v) for v in given.values()):
        return None
    return {str(broker): offsets_json(name, json.dumps(queues)) for broker, queues in given.items()}


def _json(raw: str, name: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        raise ValueError(f"option {name}={raw!r}: not valid JSON") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
