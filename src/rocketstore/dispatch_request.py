"""DispatchRequest: what the consume queues and the index need to know about one record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

import numpy as np
import numpy.typing as npt

from rocketstore.codec.commitlog_record import SYSFLAG_TX_MASK, TX_PREPARED, TX_ROLLBACK
from rocketstore.codec.text_column import TextColumn

__all__ = ["DispatchBatch", "DispatchRequest", "gets_queue_entry"]


@overload
def gets_queue_entry(sys_flags: int) -> bool: ...
@overload
def gets_queue_entry(sys_flags: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]: ...
def gets_queue_entry(sys_flags: Any) -> Any:
    """Whether a record (or each of a column of them) gets a consume-queue entry: all but the
    PREPARED and ROLLBACK records of transactions, as RocketMQ's dispatch."""
    tx = sys_flags & SYSFLAG_TX_MASK
    return (tx != TX_PREPARED) & (tx != TX_ROLLBACK)


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
    """Dispatch information of consecutive records, as columns: a batch appended in one piece,
    or records parsed in bulk (``dispatch_columns``: a replica's, recovery's). Record i is of
    topic ``topics[topic_ids[i]]``; ``keys`` and ``uniq_keys`` hold its KEYS text and UNIQ_KEY
    (empty: none). Consume queues take it per queue in bulk (PREPARED and ROLLBACK records get
    no entry), the index per batch."""

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

    def queue_runs(self) -> tuple[npt.NDArray[np.int64], list[int]]:
        """The records that get a consume-queue entry, grouped by queue (each queue's in log
        order): their row numbers, and where each queue's run of them starts and ends
        (``rows[bounds[k]:bounds[k + 1]]`` are one queue's)."""
        keys = (self.topic_ids << 32) | (self.queue_ids & 0xFFFFFFFF)
        queued = gets_queue_entry(self.sys_flags)
        if queued.all():  # the usual batch: no transaction halves to leave out
            rows = np.argsort(keys, kind="stable")
        else:
            kept = np.flatnonzero(queued)
            rows = kept[np.argsort(keys[kept], kind="stable")]
        ordered = keys[rows]
        runs = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        return rows, [0, *runs.tolist(), len(rows)] if len(rows) else [0]

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
