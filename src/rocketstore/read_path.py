"""The read path: messages of a queue (one object each, or columns), lookups by offset and by
key, and a queue's times.

``MessageStore`` checks that it is open and its arguments' types, and hands every read to a
``MessageReader``; the reader gets its collaborators when the store is built and never reaches
back.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from rocketstore.codec.commitlog_scan import copy_spans
from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE, decode_entry
from rocketstore.codec.java_hash import tags_code
from rocketstore.commitlog import CommitLog
from rocketstore.config import StoreConfig
from rocketstore.consume_queue import ConsumeQueue, ConsumeQueueSet
from rocketstore.errors import CorruptDataError
from rocketstore.follow import FollowedQueues
from rocketstore.index import IndexService
from rocketstore.limits import MAX_OFFSET
from rocketstore.message import MessageExt
from rocketstore.results import GetMessageResult, GetStatus, MessageBatch, RecordRead, RecordsResult
from rocketstore.stats import StoreStats

__all__ = ["IN_MEMORY_RATIO", "MessageReader", "in_memory_bytes"]

log = logging.getLogger(__name__)
_MAX_FILTER_BYTES = 16000  # RocketMQ scans at most this much consume queue per get when filtering
# RocketMQ's accessMessageInMemoryMaxRatio (its default, percent as a fraction)
IN_MEMORY_RATIO: Final = 0.4


class _NotInMemory:
    """A read whose first record may have to come from the disk (``get_records``)."""


_NOT_IN_MEMORY: Final = _NotInMemory()


def in_memory_bytes() -> int:
    """How far back from the commitlog's end records are taken to be in memory, as RocketMQ's
    broker takes them (accessMessageInMemoryMaxRatio of physical memory): older ones may have
    to come from the disk."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = 1 << 30
    return int(memory * IN_MEMORY_RATIO)


class MessageReader:
    """The read path of a store, writable or read-only. Arguments are of the right types (the
    store checked them); reads take no lock."""

    def __init__(
        self,
        commitlog: CommitLog,
        queues: ConsumeQueueSet | FollowedQueues,
        index: IndexService | None,
        stats: StoreStats,
        config: StoreConfig,
    ) -> None:
        self._commitlog = commitlog
        self._queues = queues
        self._index = index
        self._stats = stats
        self.config = config
        self._in_memory = in_memory_bytes()

    # --- reading through queues ----------------------------------------------------------
    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        tags: str | Iterable[str] | None,
        transfer_limits: bool = True,
    ) -> GetMessageResult:
        """``MessageStore.get_message``, counted in the statistics."""
        result = self._get_message(topic, queue_id, offset, max_msgs, tags, transfer_limits)
        self._stats.count_get(len(result.messages))  # every call that finds nothing is a miss
        return result

    def _get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        tags: str | Iterable[str] | None,
        transfer_limits: bool,
    ) -> GetMessageResult:
        cq = self._queues.get(topic, queue_id)
        outside = _outside(cq, offset)
        if outside is not None:
            return outside
        assert cq is not None
        min_offset, max_offset = cq.min_offset, cq.max_offset
        # tagsCode first (from the entry, no record read), then the tags themselves (a hash collision)
        filter_codes, filter_names = _parse_tags(tags) or (None, None)
        entries = cq.entries(offset, max(_MAX_FILTER_BYTES // CQ_ENTRY_SIZE, max_msgs))
        if entries is None:
            return GetMessageResult(
                GetStatus.OFFSET_FOUND_NULL, cq.next_segment_offset(offset), min_offset, max_offset
            )
        status = GetStatus.NO_MATCHED_MESSAGE
        messages: list[MessageExt] = []
        total = 0
        if transfer_limits:
            max_bytes = self.config.max_transfer_bytes_on_message_in_memory
            max_count = min(max_msgs, self.config.max_transfer_count_on_message_in_memory)
        else:  # nothing is copied to build the result: only the count bounds it
            max_bytes, max_count = 1 << 62, max_msgs
        # entries below this commitlog offset point into a segment found reclaimed: stepped over
        # without looking each one up, as RocketMQ moves on to the next segment
        skip_below = -1
        message_at = self._commitlog.message_at
        n = len(entries)
        i = 0
        chunk_end = 0
        phys: list[int] = []
        sizes: list[int] = []
        codes: list[int] = []
        full = False
        if filter_codes is None:
            # the plain read: the entries that fit, checked and their bodies found in one pass
            head = _fitting(entries, max_count, max_bytes)
            sizes_head = head["size"].astype(np.int64)
            messages = self._commitlog.messages_at(
                head["offset"].astype(np.int64), sizes_head, head["tags_code"].astype(np.int64)
            )
            i = chunk_end = len(messages)
            total = int(sizes_head[:i].sum())
            if messages:
                status = GetStatus.FOUND
        # Entries become Python ints a chunk at a time: a plain read needs max_count of them, a
        # filtered one may scan up to RocketMQ's 16000 bytes of the queue.
        while i < n and not full and len(messages) < max_count:
            chunk = entries[chunk_end : chunk_end + max(max_count, 2 * chunk_end)]
            chunk_end += len(chunk)
            phys, sizes, codes = chunk["offset"].tolist(), chunk["size"].tolist(), chunk["tags_code"].tolist()
            base = i
            while i < chunk_end:
                j = i - base
                phy, size, code = phys[j], sizes[j], codes[j]
                if phy < skip_below:
                    i += 1
                    continue
                if messages and (len(messages) >= max_count or total + size > max_bytes):
                    full = True
                    break
                if filter_codes is not None and code not in filter_codes:
                    i += 1
                    continue
                msg = message_at(phy, size, code)
                if msg is None:
                    if not messages:
                        status = GetStatus.MESSAGE_WAS_REMOVING
                    skip_below = self._commitlog.files.next_segment_start(phy)
                    i += 1
                    continue
                if filter_names is not None and msg.tags not in filter_names:
                    i += 1
                    continue
                messages.append(msg)
                total += size
                status = GetStatus.FOUND
                skip_below = -1
                i += 1
        del entries
        return GetMessageResult(status, offset + i, min_offset, max_offset, messages)

    def get_records(self, reads: Sequence[RecordRead], in_memory_only: bool = False) -> RecordsResult:
        """``MessageStore.get_records``, counted in the statistics. A plain read (no tags) whose
        records are all readable in one segment is copied with no Python object per record; any
        other is ``get_message``'s, its records joined."""
        n = len(reads)
        statuses: list[GetStatus | None] = []
        # with in_memory_only, reads from before here are not done (RocketMQ's rule)
        in_memory_from = self._commitlog.max_offset - self._in_memory if in_memory_only else 0
        bounds = np.zeros((4, n), dtype=np.int64)  # next begin offset, min, max, count
        # what to copy, read by read: a segment's (view, positions, sizes), or records as bytes
        pieces: list[tuple[memoryview, npt.NDArray[np.int64], npt.NDArray[np.int64]] | bytes] = []
        lengths = np.zeros(n, dtype=np.int64)
        for i, (topic, queue_id, offset, max_msgs, tags) in enumerate(reads):
            found = self._plain_records(topic, queue_id, offset, max_msgs, tags, in_memory_from)
            if isinstance(found, _NotInMemory) or (
                found is None
                and in_memory_from > 0
                and self._first_record_at(topic, queue_id, offset) < in_memory_from
            ):
                statuses.append(None)
                pieces.append(b"")
                continue
            if found is not None:
                cq, buf, positions, sizes = found
                count = len(sizes)
                statuses.append(GetStatus.FOUND)
                bounds[:, i] = offset + count, cq.min_offset, cq.max_offset, count
                pieces.append((buf, positions, sizes))
                lengths[i] = sizes.sum()
                self._stats.count_get(count)
                continue
            result = self.get_message(topic, queue_id, offset, max_msgs, tags)
            statuses.append(result.status)
            count = len(result.messages)
            bounds[:, i] = result.next_begin_offset, result.min_offset, result.max_offset, count
            data = b"".join([m.record_view for m in result.messages])
            pieces.append(data)
            lengths[i] = len(data)
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        records = bytearray(int(starts[-1]))
        for i, piece in enumerate(pieces):
            at = int(starts[i])
            if isinstance(piece, bytes):
                records[at : at + len(piece)] = piece
            else:
                copy_spans(piece[0], piece[1], piece[2], records, at)
        return RecordsResult(statuses, bounds[0], bounds[1], bounds[2], bounds[3], records, starts)

    def _first_record_at(self, topic: str, queue_id: int, offset: int) -> int:
        """Where the record of a read's first entry lies in the commitlog, or MAX_OFFSET for a
        read that finds no entry there (it reads nothing from the commitlog)."""
        cq = self._queues.get(topic, queue_id)
        if cq is None or _outside(cq, offset) is not None:
            return MAX_OFFSET
        entry = cq.entry_bytes(offset, 1)
        return MAX_OFFSET if entry is None or len(entry) < CQ_ENTRY_SIZE else decode_entry(entry)[0]

    def _plain_records(
        self, topic: str, queue_id: int, offset: int, max_msgs: int, tags: str | None, in_memory_from: int
    ) -> tuple[ConsumeQueue, memoryview, npt.NDArray[np.int64], npt.NDArray[np.int64]] | _NotInMemory | None:
        """A plain read's records, when all are readable in one segment: (the queue, the
        segment's view, their positions in it, their sizes); ``_NOT_IN_MEMORY`` when the first
        lies before commitlog offset ``in_memory_from``; None for any other read."""
        cq = self._queues.get(topic, queue_id)
        if _parse_tags(tags) is not None or cq is None or _outside(cq, offset) is not None:
            return None
        max_count = min(max_msgs, self.config.max_transfer_count_on_message_in_memory)
        entries = cq.entry_bytes(offset, max_count)
        if entries is None:
            return None
        if in_memory_from > 0 and len(entries) >= CQ_ENTRY_SIZE and decode_entry(entries)[0] < in_memory_from:
            return _NOT_IN_MEMORY
        run = self._commitlog.plain_records(
            entries, max_count, self.config.max_transfer_bytes_on_message_in_memory
        )
        # None: a record missing or in the next segment: get_message says which
        return None if run is None else (cq, *run)

    def read_batch(
        self, topic: str, queue_id: int, offset: int, max_count: int, bodies: bool
    ) -> MessageBatch:
        """``MessageStore.read_batch``."""
        empty = np.empty(0, dtype=np.int64)
        cq = self._queues.get(topic, queue_id)
        start = max(offset, cq.min_offset) if cq is not None else offset
        entries = cq.entries(start, max_count) if cq is not None and start < cq.max_offset else None
        if entries is None:
            next_offset = cq.next_segment_offset(start) if cq is not None and start < cq.max_offset else start
            return MessageBatch(
                topic,
                queue_id,
                empty,
                empty,
                empty,
                empty,
                empty,
                empty,
                bytearray(),
                np.zeros(1, dtype=np.int64),
                next_offset,
            )
        phys = entries["offset"].astype(np.int64)
        sizes = entries["size"].astype(np.int64)
        codes = entries["tags_code"].astype(np.int64)
        del entries
        n, born, stored, body, body_offsets = self._commitlog.gather(phys, sizes, bodies)
        queue_offsets = np.arange(start, start + n, dtype=np.int64)
        self._stats.count_get(n)
        next_offset = start + n if n else start + 1  # a first message whose record is gone is stepped over
        return MessageBatch(
            topic,
            queue_id,
            queue_offsets,
            phys[:n],
            sizes[:n],
            codes[:n],
            born,
            stored,
            body,
            body_offsets,
            next_offset,
        )

    # --- lookups ---------------------------------------------------------------------------
    def message_at(self, physical_offset: int) -> MessageExt | None:
        """``MessageStore.look_message_by_offset``."""
        msg = self._commitlog.message_at(physical_offset)
        if msg is None:
            return None
        try:
            msg.record  # noqa: B018 - decode now: an offset inside a record is not a message
        except CorruptDataError:
            return None
        return msg

    def query(self, topic: str, key: str, begin: int, end: int) -> Iterator[MessageExt]:
        """``MessageStore.iter_query_message`` (``end`` given)."""
        if self._index is None:
            return
        for phy in self._index.lookup(topic, key, begin, end):
            msg = self._commitlog.message_at(phy)
            if msg is None:
                continue
            try:
                if msg.topic == topic and (msg.uniq_key == key or key in msg.keys):
                    yield msg
            except CorruptDataError:
                log.warning("index entry for %s#%s points at an invalid record at %d", topic, key, phy)

    # --- queue facts -----------------------------------------------------------------------
    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """``MessageStore.offset_in_queue_by_time``."""
        cq = self._queues.get(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp, self._commitlog.store_timestamp_at)

    def earliest_message_time(self, topic: str | None, queue_id: int) -> int:
        """``MessageStore.earliest_message_time``."""
        if topic is None:
            first = self._commitlog.min_offset
            return self._commitlog.store_timestamp_at(first) if first >= 0 else -1
        cq = self._queues.get(topic, queue_id)
        if cq is None or cq.max_offset <= cq.min_offset:
            return -1
        entry = cq.entry_at(cq.min_offset)
        return self._commitlog.store_timestamp_at(entry[0]) if entry else -1


def _outside(cq: ConsumeQueue | None, offset: int) -> GetMessageResult | None:
    """``get_message``'s answer when ``offset`` is not a message of the queue ``cq``; None when it is."""
    if cq is None:
        return GetMessageResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    min_offset, max_offset = cq.min_offset, cq.max_offset
    if max_offset == 0:
        return GetMessageResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
    if offset < min_offset:
        return GetMessageResult(GetStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
    if offset == max_offset:
        return GetMessageResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
    if offset > max_offset:
        next_offset = min_offset if min_offset == 0 else max_offset
        return GetMessageResult(GetStatus.OFFSET_OVERFLOW_BADLY, next_offset, min_offset, max_offset)
    return None


def _fitting(entries: npt.NDArray[np.void], max_count: int, max_bytes: int) -> npt.NDArray[np.void]:
    """The first consume-queue ``entries`` a plain read takes: ``max_count`` at most, and as many as
    fit in ``max_bytes`` (the first one always)."""
    head = entries[:max_count]
    fit = max(1, int(np.searchsorted(np.cumsum(head["size"].astype(np.int64)), max_bytes, side="right")))
    return head[:fit]


def _parse_tags(tags: str | Iterable[str] | None) -> tuple[frozenset[int], frozenset[str]] | None:
    """A subscription's tags ("TagA || TagB", or the names): (their tagsCodes, their names), or
    None when every message matches (no tags, "*")."""
    if tags is None:
        return None
    if isinstance(tags, str):
        names = [t.strip() for t in tags.split("||")]
    else:
        names = [t.strip() for t in tags]
    names = [t for t in names if t]
    if not names or "*" in names:
        return None
    return frozenset(tags_code(t) for t in names), frozenset(names)
