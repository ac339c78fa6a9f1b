"""DispatchRequest: what the consume queues and the index need to know about one record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from rocketstore.codec.commitlog_record import DecodedRecord
from rocketstore.codec.java_hash import tags_code
from rocketstore.codec.properties import decode_properties
from rocketstore.codec.text_column import TextColumn
from rocketstore.message import PROPERTY_DELAY, SCHEDULE_TOPIC, schedule_tags_code

__all__ = ["DispatchBatch", "DispatchRequest", "dispatch_request_from_record"]


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


@dataclass(slots=True)
class DispatchBatch:
    """Dispatch information of a batch appended in one piece, as columns (all queued records:
    no transactions, no delay). Record i is of topic ``topics[topic_ids[i]]``; ``keys`` and
    ``uniq_keys`` hold its KEYS text and UNIQ_KEY (empty: none). Consume queues take it per
    queue in bulk, the index per batch."""

    physical_offsets: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]
    topics: list[str]
    topic_ids: npt.NDArray[np.int64]
    queue_ids: npt.NDArray[np.int64]
    queue_offsets: npt.NDArray[np.int64]
    tags_codes: npt.NDArray[np.int64]
    store_timestamps: npt.NDArray[np.int64]
    sys_flags: npt.NDArray[np.int64]
    keys: TextColumn
    uniq_keys: TextColumn

    def __len__(self) -> int:
        return len(self.physical_offsets)

    @property
    def end_offset(self) -> int:
        return int(self.physical_offsets[-1] + self.sizes[-1])

    @classmethod
    def concat(cls, batches: Sequence[DispatchBatch]) -> DispatchBatch:
        """Consecutive batches as one (the dispatcher takes what piled up in one pass)."""
        if len(batches) == 1:
            return batches[0]
        topic_index: dict[str, int] = {}
        renumbered = []
        for b in batches:
            ids = np.array([topic_index.setdefault(t, len(topic_index)) for t in b.topics], dtype=np.int64)
            renumbered.append(ids[b.topic_ids])

        def joined(name: str) -> npt.NDArray[np.int64]:
            return np.concatenate([getattr(b, name) for b in batches])

        return cls(
            joined("physical_offsets"),
            joined("sizes"),
            list(topic_index),
            np.concatenate(renumbered),
            joined("queue_ids"),
            joined("queue_offsets"),
            joined("tags_codes"),
            joined("store_timestamps"),
            joined("sys_flags"),
            TextColumn.concat([b.keys for b in batches]),
            TextColumn.concat([b.uniq_keys for b in batches]),
        )

    def requests(self) -> list[DispatchRequest]:
        """The same information one request per record."""
        topics = self.topics
        return [
            DispatchRequest(phy, size, topics[t], qid, qo, code, ts, flag, keys, uniq)
            for phy, size, t, qid, qo, code, ts, flag, keys, uniq in zip(
                self.physical_offsets.tolist(),
                self.sizes.tolist(),
                self.topic_ids.tolist(),
                self.queue_ids.tolist(),
                self.queue_offsets.tolist(),
                self.tags_codes.tolist(),
                self.store_timestamps.tolist(),
                self.sys_flags.tolist(),
                self.keys.to_list(),
                self.uniq_keys.to_list(),
            )
        ]


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
