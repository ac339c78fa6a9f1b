"""The pop consumers' in-flight table (``PopService``'s state; see ``pop``'s docstring).

Per (group, subscribed topic, topic type, queue id) a ``GroupQueue``: the cursor (next queue
offset to read) and the messages handed out and not done yet (``InFlight``), by queue offset, in
offset order. Besides: the redelivery schedule of non-FIFO entries (a heap; items whose entry is
done or was rescheduled are stale and skipped).

Invariants: an entry is in its queue's ``in_flight`` until removed (``gone``);
``queue.fifo_entries`` counts its FIFO entries.

Not thread-safe: PopService's lock guards every call.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Literal

from rocketstore.broker import pop_log
from rocketstore.broker.pop_copies import retry_topic
from rocketstore.broker.receipt import NORMAL_TOPIC, RETRY_TOPIC
from rocketstore.store import MessageStore

__all__ = ["GroupQueue", "InFlight", "InFlightTable", "QueueKey"]

QueueKey = tuple[str, str, int, int]  # group, topic (as subscribed), topic type, queue id


@dataclass(slots=True, eq=False)
class InFlight:
    """A message handed out and not done yet."""

    queue: GroupQueue
    offset: int
    commitlog_offset: int
    retrieve_ms: int
    deadline_ms: int
    attempt: int
    max_attempts: int
    fifo: bool  # locks its queue while in flight; comes back in place, not via the retry topic
    writing: bool = True  # an IN_FLIGHT record of it is being written
    resolving: bool = False  # its RESOLVED record is being written
    gone: bool = False  # done: out of its queue's in_flight

    def log_fields(self) -> tuple[int, ...]:
        """Its IN_FLIGHT entry (``pop_log``)."""
        q = self.queue
        return (
            q.topic_type,
            pop_log.FLAG_FIFO if self.fifo else 0,
            q.queue_id,
            self.offset,
            self.commitlog_offset,
            self.retrieve_ms,
            self.deadline_ms,
            self.attempt,
        )


@dataclass(slots=True, eq=False)
class GroupQueue:
    group: str
    topic: str  # as subscribed
    topic_type: int
    queue_id: int
    store_topic: str  # topic, or the retry topic
    cursor: int
    committed: int  # -1: the group never committed an offset here
    in_flight: dict[int, InFlight] = field(default_factory=dict)  # by offset, in offset order
    fifo_entries: int = 0  # how many of in_flight are FIFO: the queue is locked while one is

    def commit_point(self) -> int:
        """The lowest offset in flight, else the cursor: everything below it is done."""
        return next(iter(self.in_flight), self.cursor)


class InFlightTable:
    def __init__(self, store: MessageStore, new_group_start: Literal["max", "min"]) -> None:
        self.store = store
        self.queues: dict[QueueKey, GroupQueue] = {}
        self.count = 0  # entries in flight, over all queues
        self._new_group_start = new_group_start
        self._heap: list[tuple[int, int, InFlight]] = []  # (deadline, seq, entry), non-FIFO entries
        self._heap_seq = itertools.count()
        self._replayed: dict[tuple[QueueKey, int], InFlight] = {}

    # --- queues ---------------------------------------------------------------------------------
    def queue(
        self,
        group: str,
        topic: str,
        topic_type: int,
        queue_id: int,
        *,
        fresh: list[tuple[GroupQueue, int]] | None = None,
        start: int | None = None,
    ) -> GroupQueue:
        """The group's state of a queue. A queue it never committed an offset of starts at
        ``start`` when given (a POSITION record), else where ``new_group_start`` says (a retry
        topic, the group's own, at its first message), and is added to ``fresh`` with its start
        (the caller writes its POSITION record)."""
        key = (group, topic, topic_type, queue_id)
        queue = self.queues.get(key)
        if queue is not None:
            return queue
        store = self.store
        store_topic = topic if topic_type == NORMAL_TOPIC else retry_topic(group, topic)
        committed = store.query_offset(group, store_topic, queue_id)
        cursor = committed
        if cursor < 0:
            if start is not None:
                cursor = start
            elif topic_type == RETRY_TOPIC or self._new_group_start == "min":
                cursor = store.min_offset_in_queue(store_topic, queue_id)
            else:
                cursor = store.max_offset_in_queue(store_topic, queue_id)
        queue = self.queues[key] = GroupQueue(
            group, topic, topic_type, queue_id, store_topic, cursor, committed
        )
        if committed < 0 and fresh is not None:
            fresh.append((queue, cursor))
        self.commit(queue)
        return queue

    def commit(self, queue: GroupQueue) -> None:
        """Commit the queue's offset to the store, when it moved."""
        point = queue.commit_point()
        if point > queue.committed:
            self.store.commit_offset(queue.group, queue.store_topic, queue.queue_id, point)
            queue.committed = point

    # --- entries ------------------------------------------------------------------------------------
    def add(self, entry: InFlight) -> None:
        """A new entry, at an offset above every other of its queue."""
        queue = entry.queue
        queue.in_flight[entry.offset] = entry
        queue.fifo_entries += entry.fifo
        self.count += 1

    def remove(self, entry: InFlight) -> None:
        if entry.gone:
            return
        del entry.queue.in_flight[entry.offset]
        entry.queue.fifo_entries -= entry.fifo
        entry.gone = True
        entry.resolving = False
        self.count -= 1

    # --- redelivery schedule --------------------------------------------------------------------------
    def schedule(self, entry: InFlight) -> None:
        """Put a non-FIFO entry on the schedule at its deadline."""
        if entry.fifo or entry.gone:
            return
        heap = self._heap
        heapq.heappush(heap, (entry.deadline_ms, next(self._heap_seq), entry))
        if len(heap) > 2 * self.count + 1024:  # stale items of acked or rescheduled entries
            self._heap = [item for item in heap if not item[2].gone and item[0] == item[2].deadline_ms]
            heapq.heapify(self._heap)

    def due(self, now: int, limit: int) -> list[InFlight]:
        """Up to ``limit`` entries expired by ``now``, taken off the schedule and marked resolving."""
        heap = self._heap
        out: list[InFlight] = []
        while heap and heap[0][0] <= now and len(out) < limit:
            deadline, _, entry = heapq.heappop(heap)
            if entry.gone or entry.writing or entry.resolving or entry.deadline_ms != deadline:
                continue  # done, being written, or its deadline moved: a stale item
            entry.resolving = True
            out.append(entry)
        return out

    # --- replay -------------------------------------------------------------------------------------
    def apply(self, record: pop_log.PopLogRecord) -> None:
        """Replay one pop-log record; ``finish_replay`` after the last."""
        group, topic = record.group, record.topic
        entries = self._replayed
        for e in record.in_flight:
            queue = self.queue(group, topic, e.topic_type, e.queue_id)
            queue.cursor = max(queue.cursor, e.offset + 1)
            key = ((group, topic, e.topic_type, e.queue_id), e.offset)
            entry = entries.get(key)
            if entry is None:
                entry = entries[key] = InFlight(
                    queue, e.offset, e.commitlog_offset, 0, 0, 0, 0, False, writing=False
                )
                queue.in_flight[e.offset] = entry
                self.count += 1
            entry.retrieve_ms, entry.deadline_ms, entry.attempt = e.retrieve_ms, e.deadline_ms, e.attempt
            fifo = bool(e.flags & pop_log.FLAG_FIFO)
            queue.fifo_entries += fifo - entry.fifo
            entry.max_attempts, entry.fifo = record.max_attempts, fifo
        if record.kind is pop_log.LogKind.POSITION:
            for r in record.resolved:
                queue = self.queue(group, topic, r.topic_type, r.queue_id, start=r.offset)
                queue.cursor = max(queue.cursor, r.offset)
            return
        for r in record.resolved:
            gone = entries.pop(((group, topic, r.topic_type, r.queue_id), r.offset), None)
            if gone is not None:
                self.remove(gone)

    def finish_replay(self) -> None:
        """Records of concurrent receives may be in the log out of offset order: sort each
        queue's entries, and schedule them."""
        for queue in self.queues.values():
            queue.in_flight = dict(sorted(queue.in_flight.items()))
            for entry in queue.in_flight.values():
                self.schedule(entry)
        self._replayed = {}
