"""Receipt handles: the text a pop consumer gets with each message and gives back to ack it.

RocketMQ 5's layout (``ExtraInfoUtil``), nine fields joined by single spaces::

    startOffset retrieveTime invisibleTime reviveQueueId topicType brokerName queueId offset commitLogOffset

``startOffset`` is the queue offset the receive began at in that queue, ``retrieveTime`` the pop
time (epoch ms), ``invisibleTime`` how long the message stays invisible from then (ms),
``reviveQueueId`` (this broker has one pop log, no revive queues) a 31-bit digest of the group
and topic the handle was handed to (``pop.binding``: a handle serves only them), ``topicType`` 0
for the subscribed topic and 1 for the group's retry topic ``%RETRY%{group}_{topic}``,
``brokerName`` the broker that handed it out, ``queueId``/``offset`` the message's queue and queue
offset, ``commitLogOffset`` where its record starts. A handle carries everything an ack needs,
so it stays valid across a broker restart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from rocketstore.errors import InvalidReceiptHandleError

__all__ = ["NORMAL_TOPIC", "RETRY_TOPIC", "ReceiptHandle"]

NORMAL_TOPIC: Final = 0
RETRY_TOPIC: Final = 1
_FIELDS: Final = (
    "startOffset",
    "retrieveTime",
    "invisibleTime",
    "reviveQueueId",
    "topicType",
    "brokerName",
    "queueId",
    "offset",
    "commitLogOffset",
)
_BROKER_NAME: Final = re.compile(r"[A-Za-z0-9_.:-]{1,127}")
# a well-formed handle in one match; anything else takes the field-by-field path that names the fault
_WELL_FORMED: Final = re.compile(
    r"([0-9]{1,18}) ([0-9]{1,18}) ([0-9]{1,18}) ([0-9]{1,9}) ([01]) ([A-Za-z0-9_.:-]{1,127}) "
    r"([0-9]{1,9}) ([0-9]{1,18}) ([0-9]{1,18})"
)
_INT64_MAX: Final = (1 << 63) - 1
_INT32_MAX: Final = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    start_offset: int
    retrieve_time: int
    invisible_time: int
    revive_queue_id: int
    topic_type: int
    broker_name: str
    queue_id: int
    offset: int
    commitlog_offset: int

    def encode(self) -> str:
        return (
            f"{self.start_offset} {self.retrieve_time} {self.invisible_time} {self.revive_queue_id} "
            f"{self.topic_type} {self.broker_name} {self.queue_id} {self.offset} {self.commitlog_offset}"
        )

    @classmethod
    def decode(cls, text: object) -> ReceiptHandle:
        """The handle ``text`` stands for; InvalidReceiptHandleError naming the first bad field."""
        if not isinstance(text, str):
            raise InvalidReceiptHandleError(text, f"a receipt handle is a str, not {type(text).__name__}")
        match = _WELL_FORMED.fullmatch(text)
        if match is not None:
            start, retrieve, invisible, revive_qid, topic_type, broker, queue_id, offset, phys = (
                match.groups()
            )
            if int(start) <= int(offset):
                return cls(
                    int(start),
                    int(retrieve),
                    int(invisible),
                    int(revive_qid),
                    int(topic_type),
                    broker,
                    int(queue_id),
                    int(offset),
                    int(phys),
                )
        return cls._decode_fields(text)

    @classmethod
    def _decode_fields(cls, text: str) -> ReceiptHandle:
        parts = text.split(" ")
        if len(parts) != len(_FIELDS):
            raise InvalidReceiptHandleError(
                text, f"want {len(_FIELDS)} fields separated by single spaces, found {len(parts)}"
            )
        numbers: list[int] = []
        for name, part in zip(_FIELDS, parts):
            if name == "brokerName":
                if not _BROKER_NAME.fullmatch(part):
                    raise InvalidReceiptHandleError(text, f"brokerName {part!r} is not a broker name")
                continue
            if not part.isascii() or not part.isdigit():
                raise InvalidReceiptHandleError(text, f"{name} {part!r} is not a non-negative integer")
            value = int(part)
            limit = _INT32_MAX if name in ("queueId", "reviveQueueId", "topicType") else _INT64_MAX
            if value > limit:
                raise InvalidReceiptHandleError(text, f"{name} {value} is out of range")
            numbers.append(value)
        start, retrieve, invisible, revive_qid, topic_type, queue_id, offset, phys = numbers
        if topic_type not in (NORMAL_TOPIC, RETRY_TOPIC):
            raise InvalidReceiptHandleError(
                text, f"topicType {topic_type} is neither 0 (topic) nor 1 (retry)"
            )
        if start > offset:
            raise InvalidReceiptHandleError(text, f"startOffset {start} is past the offset {offset}")
        return cls(start, retrieve, invisible, revive_qid, topic_type, parts[5], queue_id, offset, phys)
