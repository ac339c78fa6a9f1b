"""The JSON files under ``{root}/config``, in the shapes RocketMQ 4.9's broker writes them.

``topics.json``::

    {"dataVersion": {"counter": 3, "timestamp": 1700000000000},
     "topicConfigTable": {"TopicA": {"topicName": "TopicA", "readQueueNums": 4, "writeQueueNums": 4,
                                     "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                     "order": false}}}

``consumerOffset.json``: ``{"offsetTable": {"TopicA@groupA": {"0": 12, "1": 5}}}``
``delayOffset.json``: ``{"offsetTable": {"4": 10}}`` (delay level -> offset in its schedule queue),
plus ``rocketstoreCommitLogOffset``: the commitlog's end when rocketstore wrote the file.
``subscriptionGroup.json`` (only written, as a master's answer to its slaves)::

    {"dataVersion": {...}, "subscriptionGroupTable": {"G": {"groupName": "G", "consumeEnable": true,
     "retryMaxTimes": 16, ...}}}

RocketMQ writes these with fastjson, which leaves integer map keys unquoted (``{0:12}``): not
JSON. They are read either way; they are written as standard JSON (quoted keys), which fastjson
reads back into the same integer keys.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rocketstore.errors import CorruptDataError
from rocketstore.limits import MAX_OFFSET, MAX_QUEUE_ID

__all__ = [
    "PERM_READ",
    "PERM_WRITE",
    "TopicConfig",
    "bad_entries_text",
    "decode_delay_offsets",
    "decode_json",
    "decode_offsets",
    "decode_topic_table",
    "decode_topics",
    "encode_delay_offsets",
    "encode_offsets",
    "encode_subscription_groups",
    "encode_topics",
]

PERM_WRITE = 0x2
PERM_READ = 0x4
# rocketstore's extra field in delayOffset.json (fastjson ignores fields it does not know)
_DELAY_MARK = "rocketstoreCommitLogOffset"
# a JSON string (left alone), or an unquoted integer key as fastjson writes them: `{0:12,` / `,3:`
_STRING_OR_BARE_KEY = re.compile(r'("(?:[^"\\]|\\.)*")|([{,]\s*)(-?\d+)(\s*:)')
# an integer map key: ASCII digits only (int() would also take '²'-like digits of other scripts)
_INT_KEY = re.compile(r"-?[0-9]{1,19}", re.ASCII)
_INT64_MIN = -(1 << 63)
# a topic has at most one queue per queue id
_MAX_QUEUES = MAX_QUEUE_ID + 1


def bad_entries_text(path: str, skipped: list[str], shown: int = 3) -> str:
    """One line for the entries a decode left out (``skipped``: its problems, each starting
    with ``path``): how many, that the next write drops them, and the first ``shown``."""
    n = len(skipped)
    listed = "; ".join(problem.removeprefix(f"{path}: ") for problem in skipped[:shown])
    more = f"; and {n - shown} more" if n > shown else ""
    one = n == 1
    return (
        f"{path}: {n} bad entr{'y' if one else 'ies'} left out "
        f"(the next write drops {'it' if one else 'them'}): {listed}{more}"
    )


@dataclass(frozen=True, slots=True)
class TopicConfig:
    topic: str
    read_queues: int = 4
    write_queues: int = 4
    perm: int = PERM_READ | PERM_WRITE
    order: bool = False
    sys_flag: int = 0
    filter_type: str = "SINGLE_TAG"

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queues,
            "topicFilterType": self.filter_type,
            "topicName": self.topic,
            "topicSysFlag": self.sys_flag,
            "writeQueueNums": self.write_queues,
        }


def decode_json(text: str, what: str) -> dict[str, Any]:
    """Parse one of the config files, fastjson's bare integer keys included."""
    try:
        value = json.loads(_STRING_OR_BARE_KEY.sub(_quote_bare_key, text))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, an int of too many digits, deep nesting
        raise CorruptDataError(f"{what}: not valid JSON: {exc}", path=what) from None
    if not isinstance(value, dict):
        raise CorruptDataError(f"{what}: expected a JSON object, got {type(value).__name__}", path=what)
    return value


def _quote_bare_key(m: re.Match[str]) -> str:
    if m.group(1) is not None:
        return m.group(1)
    return f'{m.group(2)}"{m.group(3)}"{m.group(4)}'


def _table(doc: dict[str, Any], key: str, what: str) -> dict[str, Any]:
    table = doc.get(key, {})
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise CorruptDataError(f"{what}: {key!r} must be an object")
    return table


def _int(value: Any, what: str, low: int = _INT64_MIN, high: int = MAX_OFFSET) -> int:
    """``value`` if it is an integer in [low, high] (a Java long by default), else CorruptDataError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise CorruptDataError(f"{what}: expected an integer, got {value!r:.80}")
    if not low <= value <= high:
        raise CorruptDataError(f"{what}: {value} is out of range {low}..{high}")
    return value


def decode_topics(text: str, what: str = "topics.json") -> tuple[dict[str, TopicConfig], int]:
    """The topic table and the data version counter."""
    doc = decode_json(text, what)
    version = doc.get("dataVersion") or {}
    counter = version.get("counter", 0) if isinstance(version, dict) else 0
    topics = decode_topic_table(_table(doc, "topicConfigTable", what), what)
    return topics, _int(counter, f"{what}: dataVersion.counter")


def decode_topic_table(table: dict[str, Any], what: str) -> dict[str, TopicConfig]:
    """A ``topicConfigTable`` object (``topics.json``, a broker's registration) as TopicConfigs."""
    topics: dict[str, TopicConfig] = {}
    for name, raw in table.items():
        if not isinstance(raw, dict):
            raise CorruptDataError(f"{what}: topic {name!r} must be an object")
        topics[name] = TopicConfig(
            topic=str(raw.get("topicName", name)),
            read_queues=_int(raw.get("readQueueNums", 4), f"{what}: {name}.readQueueNums", 0, _MAX_QUEUES),
            write_queues=_int(raw.get("writeQueueNums", 4), f"{what}: {name}.writeQueueNums", 0, _MAX_QUEUES),
            perm=_int(raw.get("perm", PERM_READ | PERM_WRITE), f"{what}: {name}.perm"),
            order=bool(raw.get("order", False)),
            sys_flag=_int(raw.get("topicSysFlag", 0), f"{what}: {name}.topicSysFlag"),
            filter_type=str(raw.get("topicFilterType", "SINGLE_TAG")),
        )
    return topics


def encode_topics(topics: dict[str, TopicConfig], counter: int, timestamp: int) -> bytes:
    doc = {
        "dataVersion": {"counter": counter, "timestamp": timestamp},
        "topicConfigTable": {name: topics[name].to_json() for name in sorted(topics)},
    }
    return json.dumps(doc, indent=1).encode()


def decode_offsets(
    text: str, what: str = "consumerOffset.json", skipped: list[str] | None = None
) -> dict[tuple[str, str], dict[int, int]]:
    """``(topic, group) -> {queue id: offset}``; keys are ``topic@group`` on disk. An offset is
    an integer in 0..2^63-1 and a queue id one in 0..65535. A bad entry (a key without ``@``,
    a queue id or offset of another type or range) is CorruptDataError, or, when ``skipped``
    is given, left out and described there: the file's other offsets still count. A file that
    is not a JSON object with an ``offsetTable`` object is CorruptDataError either way."""
    result: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in _table(decode_json(text, what), "offsetTable", what).items():
        topic, sep, group = key.partition("@")
        if not sep or not isinstance(queues, dict):
            _bad_entry(skipped, f"{what}: bad entry {key!r:.200} (want 'topic@group': {{queue: offset}})")
            continue
        entry: dict[int, int] = {}
        for q, v in queues.items():
            try:
                queue_id = _int_key(q, f"{what}: {key!r:.200} queue id", 0, _MAX_QUEUES - 1)
                entry[queue_id] = _int(v, f"{what}: {key!r:.200} queue {q!r:.80}", 0)
            except CorruptDataError as exc:
                _bad_entry(skipped, str(exc))
        if entry or not queues:
            result[(topic, group)] = entry
    return result


def _bad_entry(skipped: list[str] | None, problem: str) -> None:
    if skipped is None:
        raise CorruptDataError(problem)
    skipped.append(problem)


def _int_key(key: str, what: str, low: int = _INT64_MIN, high: int = MAX_OFFSET) -> int:
    """A map key that must be an integer (queue id, delay level), as an int."""
    if not _INT_KEY.fullmatch(key):
        raise CorruptDataError(f"{what} {key!r:.80} is not an integer")
    return _int(int(key), what, low, high)


def encode_offsets(table: dict[tuple[str, str], dict[int, int]]) -> bytes:
    doc = {
        "offsetTable": {
            f"{topic}@{group}": {str(q): off for q, off in sorted(queues.items())}
            for (topic, group), queues in sorted(table.items())
        }
    }
    return json.dumps(doc, indent=1).encode()


def encode_subscription_groups(groups: list[str], counter: int, timestamp: int) -> bytes:
    """subscriptionGroup.json with RocketMQ 4.9's default configuration for each of ``groups``
    (SubscriptionGroupConfig's defaults: what its broker creates for a group it first hears of)."""
    table = {
        name: {
            "brokerId": 0,
            "consumeBroadcastEnable": True,
            "consumeEnable": True,
            "consumeFromMinEnable": True,
            "groupName": name,
            "notifyConsumerIdsChangedEnable": True,
            "retryMaxTimes": 16,
            "retryQueueNums": 1,
            "whichBrokerWhenConsumeSlowly": 1,
        }
        for name in sorted(groups)
    }
    doc = {"dataVersion": {"counter": counter, "timestamp": timestamp}, "subscriptionGroupTable": table}
    return json.dumps(doc, indent=1).encode()


def decode_delay_offsets(
    text: str, what: str = "delayOffset.json", skipped: list[str] | None = None
) -> tuple[dict[int, int], int]:
    """delay level -> queue offset of the next message to deliver, and the commitlog offset
    rocketstore noted at the write (0 in RocketMQ's files, which have no such field). A bad
    level or offset is CorruptDataError, or, when ``skipped`` is given, left out (a bad mark
    read as 0) and described there."""
    doc = decode_json(text, what)
    offsets: dict[int, int] = {}
    for level, off in _table(doc, "offsetTable", what).items():
        try:
            offsets[_int_key(level, f"{what}: delay level")] = _int(off, f"{what}: level {level}")
        except CorruptDataError as exc:
            _bad_entry(skipped, str(exc))
    try:
        mark = _int(doc.get(_DELAY_MARK, 0), f"{what}: {_DELAY_MARK}")
    except CorruptDataError as exc:
        _bad_entry(skipped, str(exc))
        mark = 0
    return offsets, mark


def encode_delay_offsets(offsets: dict[int, int], physical_mark: int | None = None) -> bytes:
    """delayOffset.json; without ``physical_mark`` RocketMQ's own shape (a master's answer to
    GET_ALL_DELAY_OFFSET)."""
    doc: dict[str, Any] = {"offsetTable": {str(k): v for k, v in sorted(offsets.items())}}
    if physical_mark is not None:
        doc[_DELAY_MARK] = physical_mark
    return json.dumps(doc, indent=1).encode()
