"""DispatchRequest: what the consume queues and the index need to know about one record."""

from __future__ import annotations

from typing import NamedTuple

from rocketstore.codec.commitlog_record import DecodedRecord
from rocketstore.codec.java_hash import tags_code
from rocketstore.codec.properties import decode_properties
from rocketstore.message import PROPERTY_DELAY, SCHEDULE_TOPIC, schedule_tags_code

__all__ = ["DispatchRequest", "dispatch_request_from_record"]


class DispatchRequest(NamedTuple):
    physical_offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    tags_code: int
    store_timestamp: int
    sys_flag: int
    keys: str | None
    uniq_key: str | None


def dispatch_request_from_record(
    rec: DecodedRecord, segment_start: int, delay_levels_ms: tuple[int, ...]
) -> DispatchRequest:
    """Re-derive a record's dispatch information from its bytes (recovery, foreign stores)."""
    props = decode_properties(rec.properties)
    if rec.topic == SCHEDULE_TOPIC and PROPERTY_DELAY in props:
        code = schedule_tags_code(props[PROPERTY_DELAY], rec.store_timestamp, delay_levels_ms)
    else:
        code = tags_code(props.get("TAGS"))
    return DispatchRequest(
        segment_start + rec.position,
        rec.total_size,
        rec.topic,
        rec.queue_id,
        rec.queue_offset,
        code,
        rec.store_timestamp,
        rec.sys_flag,
        props.get("KEYS"),
        props.get("UNIQ_KEY"),
    )
