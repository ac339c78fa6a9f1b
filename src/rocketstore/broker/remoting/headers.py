"""Custom headers <-> ``extFields`` (REMOTING.md §2): the typed reading of a request's fields,
the text a response's fields are written as, and SEND_MESSAGE_V2's one-letter names.

Java writes every non-null field of a header object as ``toString()`` text under its exact
field name and reads them back leniently. Here a handler reads what it needs with ``text``,
``number``, ``flag``; a required field that is missing or not a number refuses the request
with SYSTEM_ERROR naming the field (where Java's broker would fail later with an NPE, which
the client also receives as SYSTEM_ERROR). ``to_ext`` writes a response header the Java way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

from rocketstore.broker.remoting.codes import ResponseCode
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.codec.java_number import parse_java_int, parse_java_long

__all__ = [
    "SEND_V2_NAMES",
    "PullHeader",
    "SendMessageHeader",
    "flag",
    "number",
    "optional_number",
    "text",
    "to_ext",
]


def text(ext: Mapping[str, str], name: str) -> str:
    """A required string field."""
    value = ext.get(name)
    if value is None:
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"the custom field {name} is null")
    return value


def optional_number(ext: Mapping[str, str], name: str, *, java_int: bool = False) -> int | None:
    """An optional integer field (None when absent): decimal digits in a Java long's range, or
    an int's when ``java_int`` (the header field is an ``Integer``), as Java's broker parses
    them; anything else refuses the request naming the field."""
    value = ext.get(name)
    if value is None:
        return None
    n = parse_java_int(value) if java_int else parse_java_long(value)
    if n is None:
        kind = "int" if java_int else "long"
        raise RequestRefused(
            ResponseCode.SYSTEM_ERROR, f"the custom field {name} is {value!r:.40}, not a Java {kind}"
        )
    return n


def number(ext: Mapping[str, str], name: str, *, java_int: bool = False) -> int:
    """A required integer field (see ``optional_number``)."""
    value = optional_number(ext, name, java_int=java_int)
    if value is None:
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"the custom field {name} is null")
    return value


def flag(ext: Mapping[str, str], name: str) -> bool:
    """A boolean field as Java's ``Boolean.parseBoolean`` reads it: "true" in any case, else false."""
    value = ext.get(name)
    return value is not None and value.lower() == "true"


def to_ext(**fields: object) -> dict[str, str]:
    """Response header fields as Java writes them: None omitted, booleans "true"/"false"."""
    out: dict[str, str] = {}
    for name, value in fields.items():
        if value is None:
            continue
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        else:
            out[name] = str(value)
    return out


# SendMessageRequestHeaderV2's names of SendMessageRequestHeader's fields (REMOTING.md §2.3)
SEND_V2_NAMES: Final = {
    "producerGroup": "a",
    "topic": "b",
    "defaultTopic": "c",
    "defaultTopicQueueNums": "d",
    "queueId": "e",
    "sysFlag": "f",
    "bornTimestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsumeTimes": "j",
    "unitMode": "k",
    "maxReconsumeTimes": "l",
    "batch": "m",
    "bname": "n",
}


_SEND_V1_NAMES: Final = {name: name for name in SEND_V2_NAMES}
# the names in SendMessageHeader's field order
_SEND_V2_KEYS: Final = tuple(SEND_V2_NAMES.values())
_SEND_V1_KEYS: Final = tuple(SEND_V2_NAMES)


@dataclass(slots=True)
class SendMessageHeader:
    """SEND_MESSAGE (long names) and SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (one-letter names)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    unit_mode: bool
    max_reconsume_times: int | None
    batch: bool
    broker_name: str | None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str], *, v2: bool) -> SendMessageHeader:
        # every send reads this header: the fields in one pass, and on anything missing or not a
        # number the field-by-field reading below, which names the first bad field
        a, b, c, d, e, f, g, h, i, j, k, l_, m, n_ = _SEND_V2_KEYS if v2 else _SEND_V1_KEYS
        get = ext.get
        producer_group, topic, default_topic = get(a), get(b), get(c)
        if producer_group is not None and topic is not None and default_topic is not None:
            reconsume_text, max_reconsume_text = get(j), get(l_)
            unit_mode_text, batch_text = get(k), get(m)
            try:
                return cls(
                    producer_group,
                    topic,
                    default_topic,
                    int(get(d)),  # type: ignore[arg-type]  # None: TypeError, read again below
                    int(get(e)),  # type: ignore[arg-type]
                    int(get(f)),  # type: ignore[arg-type]
                    int(get(g)),  # type: ignore[arg-type]
                    int(get(h)),  # type: ignore[arg-type]
                    get(i, ""),
                    int(reconsume_text) if reconsume_text is not None else 0,
                    unit_mode_text is not None and unit_mode_text.lower() == "true",
                    int(max_reconsume_text) if max_reconsume_text is not None else None,
                    batch_text is not None and batch_text.lower() == "true",
                    get(n_),
                )
            except (TypeError, ValueError):
                pass
        return cls._from_ext_by_field(ext, v2=v2)

    @classmethod
    def _from_ext_by_field(cls, ext: Mapping[str, str], *, v2: bool) -> SendMessageHeader:
        n = SEND_V2_NAMES if v2 else _SEND_V1_NAMES
        return cls(
            producer_group=_text_as(ext, n["producerGroup"], "producerGroup"),
            topic=_text_as(ext, n["topic"], "topic"),
            default_topic=_text_as(ext, n["defaultTopic"], "defaultTopic"),
            default_topic_queue_nums=_number_as(ext, n["defaultTopicQueueNums"], "defaultTopicQueueNums"),
            queue_id=_number_as(ext, n["queueId"], "queueId"),
            sys_flag=_number_as(ext, n["sysFlag"], "sysFlag"),
            born_timestamp=_number_as(ext, n["bornTimestamp"], "bornTimestamp"),
            flag=_number_as(ext, n["flag"], "flag"),
            properties=ext.get(n["properties"], ""),
            reconsume_times=_optional_number_as(ext, n["reconsumeTimes"], "reconsumeTimes") or 0,
            unit_mode=flag(ext, n["unitMode"]),
            max_reconsume_times=_optional_number_as(ext, n["maxReconsumeTimes"], "maxReconsumeTimes"),
            batch=flag(ext, n["batch"]),
            broker_name=ext.get(n["bname"]),
        )

    def to_ext(self, *, v2: bool = True) -> dict[str, str]:
        """The header as a client writes it (tests, and forwarding)."""
        values = {
            "producerGroup": self.producer_group,
            "topic": self.topic,
            "defaultTopic": self.default_topic,
            "defaultTopicQueueNums": self.default_topic_queue_nums,
            "queueId": self.queue_id,
            "sysFlag": self.sys_flag,
            "bornTimestamp": self.born_timestamp,
            "flag": self.flag,
            "properties": self.properties,
            "reconsumeTimes": self.reconsume_times,
            "unitMode": self.unit_mode,
            "maxReconsumeTimes": self.max_reconsume_times,
            "batch": self.batch,
            "bname": self.broker_name,
        }
        return to_ext(**{(SEND_V2_NAMES[k] if v2 else k): v for k, v in values.items()})


def _text_as(ext: Mapping[str, str], key: str, field: str) -> str:
    value = ext.get(key)
    if value is None:
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"the custom field {field} ({key}) is null")
    return value


def _number_as(ext: Mapping[str, str], key: str, field: str) -> int:
    value = _optional_number_as(ext, key, field)
    if value is None:
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"the custom field {field} ({key}) is null")
    return value


def _optional_number_as(ext: Mapping[str, str], key: str, field: str) -> int | None:
    """A send header's number as ``from_ext``'s one pass reads it (the store checks its range)."""
    value = ext.get(key)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise RequestRefused(
            ResponseCode.SYSTEM_ERROR, f"the custom field {field} ({key}) is {value!r}, not an integer"
        ) from None


class PullHeader(NamedTuple):
    """A pull request's header fields as ``command.scan_consumer_request`` reads them (commitOffset and
    suspendTimeoutMillis 0 unless sysFlag asks for them)."""

    group: str
    topic: str
    queue_id: int
    offset: int
    max_msgs: int
    sys_flag: int
    commit_offset: int
    suspend_ms: int
    sub_version: int
    subscription: str | None
    expression_type: str | None
