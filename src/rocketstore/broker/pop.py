"""Pop consumption (RocketMQ 5's, which gRPC consumers use) over a MessageStore.

A consumer group receives from every queue of a topic and of its retry topic
``%RETRY%{group}_{topic}``; what it receives stays invisible to the group for ``invisible_ms`` and
is then delivered again unless acked. See docs/broker-consumers.md for the rules as users see them.

State, per (group, topic, topic type, queue id): a cursor (the next queue offset to read) and the
messages handed out and not done yet (in flight), by queue offset. The group's consumer offset of
a queue (``MessageStore.commit_offset``, shown by ``rocketstore consumer-progress``) is the lowest
offset in flight there, else the cursor: everything below it is acked, skipped by the tag filter,
re-put into the retry topic or dead-lettered.

Durability: before a receive returns, and before an ack, a change of invisible time or a dead-letter
forward returns, its record is in the pop log (``pop_log``: a topic of the store, one put per call,
so under the store's flush policy and group commit). The pop log's own consumer offset R (group
``CID_RMQ_SYS_ROCKETSTORE_POP``) is the lowest log offset whose record may still matter: every
message handed out by an earlier record is done and below its queue's committed offset. At open
the log is replayed from R: its IN_FLIGHT records put messages back in flight (and move cursors
past them), RESOLVED records take them out, POSITION records say where a group started reading
a queue (for a crash before the offset table was written). The queue offsets are committed before
R in the same offset table, so a table written at any moment never has an R ahead of its queue
offsets. Messages long in flight are written again (``relog_oldest``) so that R moves on.

Redelivery: an expired message is re-put into the retry topic by the background loop
(``revive_expired``); a FIFO one (a message group, or a ``fifo`` receive) locks its queue for the
group while in flight and is handed out again in place by the next receive.

Invariants (under ``_lock``): an entry is in its queue's ``in_flight`` until its RESOLVED record is
written; ``record`` is the log offset of the IN_FLIGHT record that holds it (-1 until written); a
log offset is in ``_records`` while entries point at it; R never passes a record being written
(``_writing``: the log's end when each write began). Records of one message are written in the
order of its state changes: an ack waits for the message's IN_FLIGHT write to finish.

Thread safety: every method may be called from any thread. Store reads happen under ``_lock``;
pop-log writes (which wait for the flush policy) outside it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from rocketstore.broker import pop_log
from rocketstore.broker.pop_log import LogKind
from rocketstore.broker.receipt import NORMAL_TOPIC, RETRY_TOPIC, ReceiptHandle
from rocketstore.clock import Clock, SystemClock
from rocketstore.codec.commitlog_record import SYSFLAG_COMPRESSED, SYSFLAG_MULTI_TAGS
from rocketstore.errors import (
    CorruptDataError,
    InvalidMessageError,
    InvalidReceiptHandleError,
    StoreConfigError,
    StoreWriteError,
)
from rocketstore.message import RESERVED_PROPERTIES, TOPIC_PATTERN, Message, MessageExt
from rocketstore.offsets import GROUP_PATTERN
from rocketstore.results import GetStatus, PutMessageResult, PutStatus
from rocketstore.service import BackgroundService
from rocketstore.store import MessageStore
from rocketstore.topics import PROPERTY_SHARDING_KEY

__all__ = [
    "POP_LOG_GROUP",
    "POP_LOG_TOPIC",
    "PopService",
    "PoppedMessage",
    "dlq_topic",
    "retry_topic",
]

log = logging.getLogger(__name__)

POP_LOG_TOPIC: Final = "rmq_sys_ROCKETSTORE_POP_LOG"
POP_LOG_GROUP: Final = "CID_RMQ_SYS_ROCKETSTORE_POP"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROPERTY_FIRST_POP_TIME: Final = "1ST_POP_TIME"
PROPERTY_DLQ_ORIGIN_TOPIC: Final = "DLQ_ORIGIN_TOPIC"
PROPERTY_DLQ_ORIGIN_MESSAGE_ID: Final = "DLQ_ORIGIN_MESSAGE_ID"
_REPLAY_BATCH: Final = 1024
_TOPIC_CACHE_S: Final = 1.0

_Key = tuple[str, str, int, int]  # group, topic (as subscribed), topic type, queue id


def retry_topic(group: str, topic: str) -> str:
    """Where a group's expired messages of ``topic`` are re-put (RocketMQ 5 pop's retry topic)."""
    return f"%RETRY%{group}_{topic}"


def dlq_topic(group: str) -> str:
    return f"%DLQ%{group}"


@dataclass(frozen=True, slots=True)
class PoppedMessage:
    """One received message. ``topic`` is the subscribed topic, also for a message read from the
    retry topic (``message.topic`` is where it is stored); ``queue_id``/``queue_offset`` are where
    it is stored. ``delivery_attempt`` counts deliveries, 1 the first. ``dead_letter_queue`` is
    the original topic of a message read from a ``%DLQ%`` topic (its DLQ_ORIGIN_TOPIC), else None."""

    message: MessageExt
    topic: str
    queue_id: int
    queue_offset: int
    receipt_handle: str
    delivery_attempt: int
    dead_letter_queue: str | None


@dataclass(slots=True, eq=False)
class _Entry:
    """A message in flight."""

    queue: _Queue
    offset: int
    commitlog_offset: int
    retrieve_ms: int
    deadline_ms: int
    attempt: int
    max_attempts: int
    fifo: bool  # locks its queue while in flight; comes back in place, not via the retry topic
    record: int = -1  # log offset of the IN_FLIGHT record holding it; -1 while being written
    writing: bool = True  # an IN_FLIGHT record of it is being written
    resolving: bool = False  # its RESOLVED record is being written
    gone: bool = False  # done: out of its queue's in_flight

    def log_fields(self) -> tuple[int, ...]:
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
class _Queue:
    group: str
    topic: str  # as subscribed
    topic_type: int
    queue_id: int
    store_topic: str  # topic, or the retry topic
    cursor: int
    committed: int
    in_flight: dict[int, _Entry] = field(default_factory=dict)  # by offset, in offset order
    fifo_entries: int = 0  # how many of in_flight are FIFO: the queue is locked while one is

    def commit_point(self) -> int:
        return next(iter(self.in_flight), self.cursor)


class PopService:
    """Pop consumers' state over ``store`` (see the module docstring).

    Options: ``clock`` (default the system clock), ``broker_name`` (written into receipt handles;
    a handle of another broker name is refused), ``max_in_flight`` (messages handed out and not
    done, over all groups: a receive hands out no more), ``revive_interval_ms`` (how often the
    background loop redelivers expired messages and commits progress), ``new_group_start``
    (where a group that never received from a queue starts: ``"max"``, the queue's end as
    RocketMQ's ConsumeInitMode.MAX, or ``"min"``, its first stored message), ``relog_distance``
    (how many pop-log records a message may stay in flight behind the log's end before it is
    written again: bounds what a restart replays).
    """

    def __init__(
        self,
        store: MessageStore,
        *,
        clock: Clock | None = None,
        broker_name: str = "rocketstore",
        max_in_flight: int = 100_000,
        revive_interval_ms: int = 500,
        new_group_start: Literal["max", "min"] = "max",
        relog_distance: int = 100_000,
    ) -> None:
        if not isinstance(max_in_flight, int) or max_in_flight <= 0:
            raise StoreConfigError(f"max_in_flight must be a positive int, not {max_in_flight!r}")
        if not isinstance(revive_interval_ms, int) or revive_interval_ms <= 0:
            raise StoreConfigError(f"revive_interval_ms must be a positive int, not {revive_interval_ms!r}")
        if not isinstance(relog_distance, int) or relog_distance < 2:
            raise StoreConfigError(f"relog_distance must be an int >= 2, not {relog_distance!r}")
        if new_group_start not in ("max", "min"):
            raise StoreConfigError(f"new_group_start must be 'max' or 'min', not {new_group_start!r}")
        handle_probe = ReceiptHandle(0, 0, 0, 0, 0, broker_name, 0, 0, 0).encode()
        ReceiptHandle.decode(handle_probe)  # a broker name a handle cannot carry is refused here
        self.store = store
        self.broker_name = broker_name
        self.max_in_flight = max_in_flight
        self._clock = clock or SystemClock()
        self._new_group_start = new_group_start
        self._relog_distance = relog_distance
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # an entry's write finished
        self._queues: dict[_Key, _Queue] = {}
        self._turns: dict[tuple[str, str], int] = {}
        self._in_flight = 0
        self._records: dict[int, int] = {}  # log offset -> entries it holds
        self._writing: dict[int, int] = {}  # write id -> log end when it began
        self._write_ids = itertools.count()
        self._log_committed = -1
        self._heap: list[tuple[int, int, _Entry]] = []  # (deadline, seq, entry) of non-FIFO entries
        self._heap_seq = itertools.count()
        self._topics: dict[str, tuple[float, int]] = {}  # topic -> (looked at, queue count)
        self._known_topics: set[str] = set()
        self._loop = _ReviveLoop(self, revive_interval_ms / 1000)
        self._ensure_topic(POP_LOG_TOPIC)
        self._replay()

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the background loop: redelivery of expired messages, progress commits."""
        self._loop.start()

    def stop(self) -> None:
        """Stop the loop after a last round; the store stays open (its owner closes it)."""
        self._loop.stop()
        self.commit_progress()

    @property
    def in_flight(self) -> int:
        """Messages handed out and not done yet, over every group."""
        return self._in_flight

    # --- receiving ---------------------------------------------------------------------------
    def receive(
        self,
        group: str,
        topic: str,
        expression: str,
        batch_size: int,
        invisible_ms: int,
        *,
        fifo: bool = False,
        max_attempts: int = 17,
    ) -> list[PoppedMessage]:
        """Up to ``batch_size`` messages of ``topic`` and the group's retry topic matching the tag
        ``expression`` (``*``, ``A || B``), invisible for ``invisible_ms``; [] when none is there.
        Never waits for messages. A FIFO message (one with a message group, ``__SHARDINGKEY``;
        with ``fifo`` every message) locks its queue for the group while in flight, and comes
        back in place with the next attempt when it expires. A message delivered
        ``max_attempts`` times and not acked goes to ``%DLQ%{group}`` instead of coming back."""
        _check_names(group, topic)
        if not isinstance(expression, str):
            raise StoreConfigError(f"the tag expression must be a str, not {expression!r}")
        for name, value in (
            ("batch_size", batch_size),
            ("invisible_ms", invisible_ms),
            ("max_attempts", max_attempts),
        ):
            if type(value) is not int or value <= 0:
                raise StoreConfigError(f"{name} must be a positive int, not {value!r}")
        queue_count = self._queue_count(topic)
        if queue_count == 0:
            return []
        now = self._clock.now_ms()
        deadline = now + invisible_ms
        popped: list[tuple[_Entry, MessageExt, int]] = []  # entry, message, batch start offset
        to_dlq: list[_Entry] = []
        fresh: list[tuple[_Queue, int]] = []  # queues the group reads for the first time, and where
        with self._lock:
            budget = min(batch_size, self.max_in_flight - self._in_flight)
            targets = [(NORMAL_TOPIC, q) for q in range(queue_count)] + [(RETRY_TOPIC, 0)]
            turn = self._turns.get((group, topic), 0)
            self._turns[(group, topic)] = turn + 1
            turn %= len(targets)
            for topic_type, queue_id in targets[turn:] + targets[:turn]:
                if len(popped) >= budget:
                    break
                queue = self._queue(group, topic, topic_type, queue_id, fresh=fresh)
                if queue.fifo_entries and not self._take_expired(
                    queue, now, deadline, max_attempts, popped, to_dlq
                ):
                    continue  # locked: a message of it is in flight
                self._read_new(
                    queue, expression, budget - len(popped), now, deadline, max_attempts, fifo, popped
                )
                self._commit_queue(queue)  # its cursor may have moved past messages the filter skipped
            write_id = self._begin_write() if popped or to_dlq or fresh else -1
        if write_id < 0:
            return []
        self._write_receive(group, topic, max_attempts, popped, to_dlq, fresh, write_id, now)
        return [self._popped(entry, msg, start, now, invisible_ms) for entry, msg, start in popped]

    def _take_expired(
        self,
        queue: _Queue,
        now: int,
        deadline: int,
        max_attempts: int,
        popped: list[tuple[_Entry, MessageExt, int]],
        to_dlq: list[_Entry],
    ) -> bool:
        """Hand out again the queue's expired FIFO messages (dead-letter those out of attempts);
        False when the queue is locked by a FIFO message still invisible or being written."""
        entries = list(queue.in_flight.values())
        if any(e.fifo and (e.writing or e.resolving or e.deadline_ms > now) for e in entries):
            return False
        start = -1
        for entry in entries:
            if not entry.fifo:
                continue  # handed out by a plain receive: the revive loop's
            if entry.attempt >= entry.max_attempts:
                entry.resolving = True
                to_dlq.append(entry)
                continue
            msg = self.store.look_message_by_offset(entry.commitlog_offset)
            if msg is None:
                log.warning(
                    "%s: the record of queue %d offset %d is gone; it counts as done",
                    queue.store_topic,
                    queue.queue_id,
                    entry.offset,
                )
                entry.resolving = True
                to_dlq.append(entry)  # resolved without a dead-letter copy (see _dead_letters)
                continue
            entry.attempt += 1
            entry.max_attempts = max_attempts
            entry.retrieve_ms = now
            entry.deadline_ms = deadline
            entry.writing = True
            start = entry.offset if start < 0 else start
            popped.append((entry, msg, start))
        return True

    def _read_new(
        self,
        queue: _Queue,
        expression: str,
        room: int,
        now: int,
        deadline: int,
        max_attempts: int,
        fifo: bool,
        popped: list[tuple[_Entry, MessageExt, int]],
    ) -> None:
        """Read up to ``room`` new messages of ``queue`` (one store read) and put them in flight."""
        store = self.store
        if room <= 0 or queue.cursor >= store.max_offset_in_queue(queue.store_topic, queue.queue_id):
            return
        result = store.get_message(
            queue.group, queue.store_topic, queue.queue_id, queue.cursor, room, expression
        )
        status = result.status
        if status is GetStatus.OFFSET_TOO_SMALL or status is GetStatus.OFFSET_OVERFLOW_BADLY:
            log.warning(
                "group %s: %s queue %d offset %d is %s; moving to %d",
                queue.group,
                queue.store_topic,
                queue.queue_id,
                queue.cursor,
                status.value,
                result.next_begin_offset,
            )
        if result.next_begin_offset > queue.cursor or status is GetStatus.OFFSET_OVERFLOW_BADLY:
            queue.cursor = result.next_begin_offset
        start = result.messages[0].queue_offset if result.messages else -1
        for msg in result.messages:
            in_order = fifo or PROPERTY_SHARDING_KEY in msg.properties
            entry = _Entry(
                queue,
                msg.queue_offset,
                msg.physical_offset,
                now,
                deadline,
                msg.reconsume_times + 1,
                max_attempts,
                in_order,
            )
            queue.in_flight[entry.offset] = entry
            queue.fifo_entries += in_order
            self._in_flight += 1
            popped.append((entry, msg, start))

    def _write_receive(
        self,
        group: str,
        topic: str,
        max_attempts: int,
        popped: list[tuple[_Entry, MessageExt, int]],
        to_dlq: list[_Entry],
        fresh: list[tuple[_Queue, int]],
        write_id: int,
        now: int,
    ) -> None:
        """One put for a receive: where the group starts in queues new to it (so a crash before
        the offset table is written does not move its start), the dead letters of expired FIFO
        messages, their RESOLVED record, the IN_FLIGHT record of what it hands out."""
        args = (group, topic, max_attempts, popped, to_dlq, fresh)
        try:
            try:
                results = self._put(self._receive_records(*args, dead_letters=True), "receive")
            except InvalidMessageError as exc:
                if not to_dlq:
                    raise
                # a dead letter this store will not take must not block its queue for good
                log.error("dead letters of group %s not stored (%s): retired without copies", group, exc)
                results = self._put(self._receive_records(*args, dead_letters=False), "receive")
        except BaseException:
            with self._lock:
                self._end_write(write_id)
                for entry in to_dlq:
                    entry.resolving = False  # still expired: the next receive tries again
                for entry, _, _ in popped:
                    # handed to no one: expired at once, so it is delivered again
                    entry.writing = False
                    entry.deadline_ms = now
                    self._schedule(entry)
                self._changed.notify_all()
            raise
        with self._lock:
            self._end_write(write_id)
            for entry in to_dlq:
                self._remove(entry)
            if popped:
                record = results[-1].queue_offset
                for entry, _, _ in popped:
                    self._hold(entry, record)
                    entry.writing = False
                    self._schedule(entry)
            self._changed.notify_all()

    def _receive_records(
        self,
        group: str,
        topic: str,
        max_attempts: int,
        popped: list[tuple[_Entry, MessageExt, int]],
        to_dlq: list[_Entry],
        fresh: list[tuple[_Queue, int]],
        dead_letters: bool,
    ) -> list[Message]:
        msgs = self._dead_letters(to_dlq) if dead_letters else []
        if fresh:
            body = pop_log.encode(
                LogKind.POSITION, group, topic, [(q.topic_type, q.queue_id, start) for q, start in fresh]
            )
            msgs.insert(0, Message(POP_LOG_TOPIC, body, tags="start", queue_id=0))
        if to_dlq:
            msgs.append(self._resolved_record(group, topic, to_dlq))
        if popped:
            body = pop_log.encode(
                LogKind.IN_FLIGHT,
                group,
                topic,
                [e.log_fields() for e, _, _ in popped],
                max_attempts=max_attempts,
            )
            msgs.append(Message(POP_LOG_TOPIC, body, tags="ck", queue_id=0))
        return msgs

    def _popped(
        self, entry: _Entry, msg: MessageExt, start: int, now: int, invisible_ms: int
    ) -> PoppedMessage:
        queue = entry.queue
        handle = ReceiptHandle(
            start,
            now,
            invisible_ms,
            0,
            queue.topic_type,
            self.broker_name,
            queue.queue_id,
            entry.offset,
            entry.commitlog_offset,
        )
        return PoppedMessage(
            msg,
            queue.topic,
            queue.queue_id,
            entry.offset,
            handle.encode(),
            entry.attempt,
            msg.properties.get(PROPERTY_DLQ_ORIGIN_TOPIC),
        )

    # --- acks and changes ------------------------------------------------------------------
    def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        """Done with the message: it is not delivered again. Returns once that is durable under
        the store's flush policy. A handle of a message not in flight any more (acked before,
        re-put into the retry topic, dead-lettered) is a no-op; an older handle of a message
        still in flight (before a change of its invisible time) acks it too."""
        entry = self._claim(group, topic, receipt_handle, must_be_in_flight=False)
        if entry is not None:
            self._resolve([entry])

    def ack_batch(
        self, group: str, topic: str, receipt_handles: Sequence[str]
    ) -> list[InvalidReceiptHandleError | None]:
        """``ack`` of many handles with one pop-log write; per handle None (acked, or not in flight)
        or the error it was refused with. StoreWriteError when the write fails (nothing acked)."""
        outcomes: list[InvalidReceiptHandleError | None] = []
        entries: list[_Entry] = []
        seen: set[tuple[int, int, int]] = set()
        try:
            for text in receipt_handles:
                try:
                    handle = _decode(text)
                    where = (handle.topic_type, handle.queue_id, handle.offset)
                    entry = None
                    if where not in seen:  # a second claim of a message claimed here would wait for itself
                        seen.add(where)
                        entry = self._claim(group, topic, text, must_be_in_flight=False, handle=handle)
                except InvalidReceiptHandleError as exc:
                    outcomes.append(exc)
                    continue
                outcomes.append(None)
                if entry is not None:
                    entries.append(entry)
        except BaseException:
            self._unclaim(entries)
            raise
        if entries:
            self._resolve(entries)
        return outcomes

    def forward_to_dlq(self, group: str, topic: str, receipt_handle: str) -> None:
        """Move the message to ``%DLQ%{group}`` now (a PushConsumer out of attempts); a no-op for a
        message not in flight any more."""
        entry = self._claim(group, topic, receipt_handle, must_be_in_flight=False)
        if entry is not None:
            self._resolve([entry], dead_letter=True)

    def change_invisible_duration(
        self, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        """Make the message invisible for ``invisible_ms`` from now; returns its new handle (the
        old one still acks it). InvalidReceiptHandleError when it is not in flight any more."""
        if type(invisible_ms) is not int or invisible_ms <= 0:
            raise StoreConfigError(f"invisible_ms must be a positive int, not {invisible_ms!r}")
        handle = _decode(receipt_handle)
        entry = self._claim(
            group, topic, receipt_handle, must_be_in_flight=True, resolve=False, handle=handle
        )
        assert entry is not None
        now = self._clock.now_ms()
        with self._lock:
            old = entry.retrieve_ms, entry.deadline_ms
            entry.deadline_ms = now + invisible_ms
            write_id = self._begin_write()
        body = pop_log.encode(
            LogKind.IN_FLIGHT,
            group,
            topic,
            [entry.log_fields()],
            max_attempts=entry.max_attempts,
        )
        try:
            (result,) = self._put([Message(POP_LOG_TOPIC, body, tags="ck", queue_id=0)], "invisible change")
        except BaseException:
            with self._lock:
                self._end_write(write_id)
                entry.retrieve_ms, entry.deadline_ms = old
                entry.writing = False
                self._schedule(entry)
                self._changed.notify_all()
            raise
        with self._lock:
            self._end_write(write_id)
            self._hold(entry, result.queue_offset)
            entry.writing = False
            self._schedule(entry)
            self._changed.notify_all()
        queue = entry.queue
        return ReceiptHandle(
            handle.start_offset,
            now,
            invisible_ms,
            0,
            queue.topic_type,
            self.broker_name,
            queue.queue_id,
            entry.offset,
            entry.commitlog_offset,
        ).encode()

    def _claim(
        self,
        group: str,
        topic: str,
        receipt_handle: str,
        *,
        must_be_in_flight: bool,
        resolve: bool = True,
        handle: ReceiptHandle | None = None,
    ) -> _Entry | None:
        """The in-flight message ``receipt_handle`` (decoded: ``handle``) names, marked as being
        resolved (``resolve``) or written, once no other write of it is under way; None when it
        is not in flight."""
        _check_names(group, topic)
        if handle is None:
            handle = _decode(receipt_handle)
        if handle.broker_name != self.broker_name:
            raise InvalidReceiptHandleError(
                receipt_handle, f"it is broker {handle.broker_name!r}'s; this is {self.broker_name!r}"
            )
        if handle.topic_type == NORMAL_TOPIC and handle.queue_id >= self._queue_count(topic):
            raise InvalidReceiptHandleError(receipt_handle, f"topic {topic!r} has no queue {handle.queue_id}")
        if handle.topic_type == RETRY_TOPIC and handle.queue_id != 0:
            raise InvalidReceiptHandleError(receipt_handle, "a retry topic has only queue 0")
        with self._lock:
            queue = self._queue(group, topic, handle.topic_type, handle.queue_id)
            if handle.offset >= queue.cursor:
                raise InvalidReceiptHandleError(
                    receipt_handle,
                    f"group {group!r} was never handed offset {handle.offset} of {queue.store_topic} "
                    f"queue {handle.queue_id}",
                )
            while True:
                entry = queue.in_flight.get(handle.offset)
                if entry is None or not (entry.writing or entry.resolving):
                    break
                self._changed.wait()
            if entry is None:
                if must_be_in_flight:
                    raise InvalidReceiptHandleError(
                        receipt_handle, "the message is not in flight: acked, retried or dead-lettered"
                    )
                return None
            if entry.commitlog_offset != handle.commitlog_offset:
                raise InvalidReceiptHandleError(
                    receipt_handle,
                    f"commitLogOffset {handle.commitlog_offset} is not the message at offset "
                    f"{handle.offset} of {queue.store_topic} queue {handle.queue_id} "
                    "(a handle of another topic?)",
                )
            if resolve:
                entry.resolving = True
            else:
                entry.writing = True
            return entry

    def _resolve(self, entries: list[_Entry], *, dead_letter: bool = False) -> None:
        """Retire ``entries`` (claimed), with dead-letter copies; they stay in flight if it fails."""
        try:
            self._retire(entries, self._dead_letters(entries) if dead_letter else [], "ack")
        except BaseException:
            self._unclaim(entries)
            raise

    def _retire(self, entries: Sequence[_Entry], copies: list[Message], what: str) -> None:
        """One put: ``copies`` (retry or dead-letter), then the RESOLVED records of ``entries``
        (claimed); then they are out of flight and their queues' offsets committed."""
        by_pair: dict[tuple[str, str], list[_Entry]] = {}
        for entry in entries:
            by_pair.setdefault((entry.queue.group, entry.queue.topic), []).append(entry)
        records = [self._resolved_record(group, topic, done) for (group, topic), done in by_pair.items()]
        self._put([*copies, *records], what)
        with self._lock:
            for entry in entries:
                self._remove(entry)
            for queue in {id(e.queue): e.queue for e in entries}.values():
                self._commit_queue(queue)
            self._changed.notify_all()

    def _unclaim(self, entries: list[_Entry]) -> None:
        with self._lock:
            for entry in entries:
                entry.resolving = False
            self._changed.notify_all()

    # --- redelivery --------------------------------------------------------------------------
    def revive_expired(self, limit: int = 1024) -> int:
        """Re-put up to ``limit`` expired messages (not FIFO) into their retry topics, or into the
        DLQ when out of attempts, in one put; how many. The background loop calls it."""
        now = self._clock.now_ms()
        due: list[_Entry] = []
        with self._lock:
            heap = self._heap
            while heap and heap[0][0] <= now and len(due) < limit:
                deadline, _, entry = heapq.heappop(heap)
                if entry.gone or entry.writing or entry.resolving or entry.deadline_ms != deadline:
                    continue  # acked, being written, or its deadline moved: a stale heap item
                entry.resolving = True
                due.append(entry)
        if not due:
            return 0
        try:
            try:
                self._retire(due, self._redelivery_copies(due), "redelivery")
            except InvalidMessageError:
                # a message this store will not take again (a property RocketMQ accepted, say) must
                # not hold the others up: one put each, and that one retired without a copy
                for entry in due:
                    try:
                        self._retire([entry], self._redelivery_copies([entry]), "redelivery")
                    except InvalidMessageError as exc:
                        log.error(
                            "%s queue %d offset %d cannot be stored again (%s): it is not redelivered",
                            entry.queue.store_topic,
                            entry.queue.queue_id,
                            entry.offset,
                            exc,
                        )
                        self._retire([entry], [], "redelivery")
        except BaseException:
            with self._lock:
                for entry in due:
                    if not entry.gone:
                        entry.resolving = False
                        self._schedule(entry)
                self._changed.notify_all()
            raise
        return len(due)

    def _redelivery_copies(self, entries: Sequence[_Entry]) -> list[Message]:
        """Retry copies of the expired ``entries``, dead letters of those out of attempts."""
        retry = [e for e in entries if e.attempt < e.max_attempts]
        return self._retries(retry) + self._dead_letters([e for e in entries if e.attempt >= e.max_attempts])

    def _retries(self, entries: Sequence[_Entry]) -> list[Message]:
        """The retry-topic copies of expired messages (RocketMQ 5's PopReviveService.reviveRetry)."""
        out = []
        for entry in entries:
            msg = self._message_of(entry)
            if msg is None:
                continue
            queue = entry.queue
            target = retry_topic(queue.group, queue.topic)
            self._ensure_topic(target)
            copy = _copy(msg, target, entry.attempt)
            props = dict(copy.properties or {})
            props.setdefault(PROPERTY_RETRY_TOPIC, queue.topic)
            props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, msg.uniq_key or msg.msg_id)
            props.setdefault(PROPERTY_FIRST_POP_TIME, str(entry.retrieve_ms))
            copy.properties = props
            out.append(copy)
        return out

    def _dead_letters(self, entries: Sequence[_Entry]) -> list[Message]:
        out = []
        for entry in entries:
            msg = self._message_of(entry)
            if msg is None:
                continue
            target = dlq_topic(entry.queue.group)
            self._ensure_topic(target)
            copy = _copy(msg, target, entry.attempt)
            props = dict(copy.properties or {})
            props[PROPERTY_DLQ_ORIGIN_TOPIC] = entry.queue.topic
            props[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] = msg.uniq_key or msg.msg_id
            copy.properties = props
            out.append(copy)
        return out

    def _message_of(self, entry: _Entry) -> MessageExt | None:
        msg = self.store.look_message_by_offset(entry.commitlog_offset)
        if msg is None:
            log.warning(
                "%s queue %d offset %d: its record is gone (reclaimed); it is dropped, not redelivered",
                entry.queue.store_topic,
                entry.queue.queue_id,
                entry.offset,
            )
        return msg

    # --- progress -----------------------------------------------------------------------------
    def relog_oldest(self, limit: int = 4096) -> int:
        """Write again, in new IN_FLIGHT records, up to ``limit`` messages held by records more
        than ``relog_distance`` records behind the pop log's end, so that the replay point moves
        on while they stay in flight (a long invisible time, a FIFO group not coming back); how
        many. The background loop calls it."""
        with self._lock:
            end = self.store.max_offset_in_queue(POP_LOG_TOPIC, 0)
            if not self._records or end - min(self._records) <= self._relog_distance:
                return 0
            cutoff = end - self._relog_distance // 2
            stale: dict[tuple[str, str, int], list[_Entry]] = {}
            count = 0
            for queue in self._queues.values():
                for entry in queue.in_flight.values():
                    if 0 <= entry.record < cutoff and not (entry.writing or entry.resolving):
                        entry.writing = True
                        stale.setdefault((queue.group, queue.topic, entry.max_attempts), []).append(entry)
                        count += 1
                        if count >= limit:
                            break
                if count >= limit:
                    break
            write_id = self._begin_write()
        records = [
            Message(
                POP_LOG_TOPIC,
                pop_log.encode(
                    LogKind.IN_FLIGHT,
                    group,
                    topic,
                    [e.log_fields() for e in entries],
                    max_attempts=max_attempts,
                ),
                tags="ck",
                queue_id=0,
            )
            for (group, topic, max_attempts), entries in stale.items()
        ]
        try:
            results = self._put(records, "pop log rewrite") if records else []
        finally:
            with self._lock:
                self._end_write(write_id)
                for entries in stale.values():
                    for entry in entries:
                        entry.writing = False
                self._changed.notify_all()
        with self._lock:
            for result, entries in zip(results, stale.values()):
                for entry in entries:
                    if not entry.gone:
                        self._hold(entry, result.queue_offset)
        return count

    def commit_progress(self) -> None:
        """Commit every queue's offset, then the pop log's replay point R (see the docstring)."""
        with self._lock:
            for queue in self._queues.values():
                self._commit_queue(queue)
            end = self.store.max_offset_in_queue(POP_LOG_TOPIC, 0)
            replay_from = min([*self._records, *self._writing.values(), end])
            if replay_from > self._log_committed:
                self.store.commit_offset(POP_LOG_GROUP, POP_LOG_TOPIC, 0, replay_from)
                self._log_committed = replay_from

    def _commit_queue(self, queue: _Queue) -> None:
        point = queue.commit_point()
        if point > queue.committed:
            self.store.commit_offset(queue.group, queue.store_topic, queue.queue_id, point)
            queue.committed = point

    # --- state helpers (under _lock) ---------------------------------------------------------
    def _queue(
        self,
        group: str,
        topic: str,
        topic_type: int,
        queue_id: int,
        *,
        fresh: list[tuple[_Queue, int]] | None = None,
        start: int | None = None,
    ) -> _Queue:
        """The group's state of a queue. A queue it never committed an offset of starts at
        ``start`` when given (a POSITION record), else where ``new_group_start`` says, and is
        added to ``fresh`` (the caller writes its POSITION record)."""
        key = (group, topic, topic_type, queue_id)
        queue = self._queues.get(key)
        if queue is not None:
            return queue
        store = self.store
        store_topic = topic if topic_type == NORMAL_TOPIC else retry_topic(group, topic)
        committed = store.query_offset(group, store_topic, queue_id)
        cursor = committed
        if cursor < 0:
            if start is not None:
                cursor = start
            # a retry topic is the group's own: all of it is for the group
            elif topic_type == RETRY_TOPIC or self._new_group_start == "min":
                cursor = store.min_offset_in_queue(store_topic, queue_id)
            else:
                cursor = store.max_offset_in_queue(store_topic, queue_id)
        queue = self._queues[key] = _Queue(group, topic, topic_type, queue_id, store_topic, cursor, committed)
        if committed < 0 and fresh is not None:
            fresh.append((queue, cursor))
        self._commit_queue(queue)
        return queue

    def _hold(self, entry: _Entry, record: int) -> None:
        """``entry`` is held by the IN_FLIGHT record at log offset ``record`` from now on."""
        self._release_record(entry)
        entry.record = record
        self._records[record] = self._records.get(record, 0) + 1

    def _release_record(self, entry: _Entry) -> None:
        old = entry.record
        if old >= 0:
            left = self._records[old] - 1
            if left:
                self._records[old] = left
            else:
                del self._records[old]
        entry.record = -1

    def _remove(self, entry: _Entry) -> None:
        if entry.gone:
            return
        self._release_record(entry)
        del entry.queue.in_flight[entry.offset]
        entry.queue.fifo_entries -= entry.fifo
        entry.gone = True
        entry.resolving = False
        self._in_flight -= 1

    def _schedule(self, entry: _Entry) -> None:
        if entry.fifo or entry.gone:
            return
        heap = self._heap
        heapq.heappush(heap, (entry.deadline_ms, next(self._heap_seq), entry))
        if len(heap) > 2 * self._in_flight + 1024:  # stale items of acked or changed entries
            self._heap = [item for item in heap if not item[2].gone and item[0] == item[2].deadline_ms]
            heapq.heapify(self._heap)

    def _begin_write(self) -> int:
        write_id = next(self._write_ids)
        self._writing[write_id] = self.store.max_offset_in_queue(POP_LOG_TOPIC, 0)
        return write_id

    def _end_write(self, write_id: int) -> None:
        del self._writing[write_id]

    # --- store access --------------------------------------------------------------------------
    def _put(self, msgs: list[Message], what: str) -> list[PutMessageResult]:
        results = self.store.put_messages(msgs)
        bad = next((r for r in results if r.status is not PutStatus.PUT_OK), None)
        if bad is not None:
            raise StoreWriteError(f"the store did not take the {what}: {bad.status.value}", bad.status)
        return results

    def _resolved_record(self, group: str, topic: str, entries: Sequence[_Entry]) -> Message:
        body = pop_log.encode(
            LogKind.RESOLVED,
            group,
            topic,
            [(e.queue.topic_type, e.queue.queue_id, e.offset) for e in entries],
        )
        return Message(POP_LOG_TOPIC, body, tags="ack", queue_id=0)

    def _ensure_topic(self, topic: str) -> None:
        if topic in self._known_topics:
            return
        if topic not in self.store.topic_configs():
            self.store.create_topic(topic, 1)
        self._known_topics.add(topic)

    def _queue_count(self, topic: str) -> int:
        """The topic's read queue count (0: no such topic), looked up at most once a second."""
        now = self._clock.monotonic()
        cached = self._topics.get(topic)
        if cached is not None and now - cached[0] < _TOPIC_CACHE_S:
            return cached[1]
        config = self.store.topic_configs().get(topic)
        count = config.read_queues if config is not None else 0
        if count:
            self._topics[topic] = (now, count)
        return count

    # --- replay -----------------------------------------------------------------------------------
    def _replay(self) -> None:
        """Rebuild the in-flight table from the pop log, from its committed replay point."""
        store = self.store
        self._log_committed = store.query_offset(POP_LOG_GROUP, POP_LOG_TOPIC, 0)
        offset = max(0, self._log_committed)
        end = store.max_offset_in_queue(POP_LOG_TOPIC, 0)
        entries: dict[tuple[_Key, int], _Entry] = {}
        records = 0
        while offset < end:
            batch = store.read_batch(POP_LOG_TOPIC, 0, offset, _REPLAY_BATCH)
            for i in range(len(batch)):
                log_offset = int(batch.queue_offsets[i])
                try:
                    record = pop_log.decode(batch.body_at(i))
                except CorruptDataError as exc:
                    log.error(
                        "%s offset %d: skipped, not a pop log record (%s)", POP_LOG_TOPIC, log_offset, exc
                    )
                    continue
                records += 1
                self._apply(record, log_offset, entries)
            offset = max(batch.next_offset, offset + 1) if not len(batch) else batch.next_offset
        for queue in self._queues.values():
            queue.in_flight = dict(sorted(queue.in_flight.items()))
        for entry in entries.values():
            self._schedule(entry)
        if records:
            log.info("pop log replayed: %d records, %d messages in flight", records, self._in_flight)

    def _apply(
        self, record: pop_log.PopLogRecord, log_offset: int, entries: dict[tuple[_Key, int], _Entry]
    ) -> None:
        group, topic = record.group, record.topic
        for e in record.in_flight:
            queue = self._queue(group, topic, e.topic_type, e.queue_id)
            queue.cursor = max(queue.cursor, e.offset + 1)
            key = ((group, topic, e.topic_type, e.queue_id), e.offset)
            entry = entries.get(key)
            if entry is None:
                entry = entries[key] = _Entry(
                    queue, e.offset, e.commitlog_offset, 0, 0, 0, 0, False, writing=False
                )
                queue.in_flight[e.offset] = entry
                self._in_flight += 1
            entry.retrieve_ms, entry.deadline_ms, entry.attempt = e.retrieve_ms, e.deadline_ms, e.attempt
            fifo = bool(e.flags & pop_log.FLAG_FIFO)
            queue.fifo_entries += fifo - entry.fifo
            entry.max_attempts, entry.fifo = record.max_attempts, fifo
            self._hold(entry, log_offset)
        if record.kind is LogKind.POSITION:
            for r in record.resolved:
                self._queue(group, topic, r.topic_type, r.queue_id, start=r.offset)
            return
        for r in record.resolved:
            key = ((group, topic, r.topic_type, r.queue_id), r.offset)
            gone = entries.pop(key, None)
            if gone is not None:
                self._remove(gone)


class _ReviveLoop(BackgroundService):
    def __init__(self, pop: PopService, interval: float) -> None:
        super().__init__("pop-revive", interval)
        self._pop = pop

    def run_once(self) -> None:
        try:
            while self._pop.revive_expired() > 0:
                pass
            self._pop.relog_oldest()
        except StoreWriteError as exc:
            log.warning("pop state write failed, retried next round: %s", exc)
        self._pop.commit_progress()


def _copy(msg: MessageExt, topic: str, reconsume_times: int) -> Message:
    """``msg`` to be stored again in ``topic`` (queue 0): body, tags, keys, properties and born
    fields kept; the same UNIQ_KEY, so clients see the same message id."""
    props = {k: v for k, v in msg.properties.items() if k not in RESERVED_PROPERTIES}
    return Message(
        topic,
        msg.body,
        tags=msg.tags,
        keys=msg.keys,
        properties=props,
        queue_id=0,
        flag=msg.flag,
        uniq_key=msg.uniq_key,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        sys_flag=msg.sys_flag & (SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS),
        reconsume_times=reconsume_times,
    )


def _decode(receipt_handle: str) -> ReceiptHandle:
    return ReceiptHandle.decode(receipt_handle)


def _check_names(group: str, topic: str) -> None:
    if not isinstance(group, str) or not GROUP_PATTERN.fullmatch(group):
        raise StoreConfigError(f"consumer group {group!r}: want 1-255 letters, digits, '_', '-', '%' or '|'")
    if not isinstance(topic, str) or not TOPIC_PATTERN.fullmatch(topic):
        raise StoreConfigError(f"topic {topic!r}: not a valid topic name")
    if not TOPIC_PATTERN.fullmatch(retry_topic(group, topic)):
        raise StoreConfigError(
            f"group {group!r} and topic {topic!r}: the retry topic {retry_topic(group, topic)!r} "
            "would be longer than 127 characters"
        )
