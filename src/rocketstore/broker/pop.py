"""Pop consumption (RocketMQ 5's, which gRPC consumers use) over a MessageStore.

A consumer group receives from every queue of a topic and of its retry topic
``%RETRY%{group}_{topic}``; what it receives stays invisible to the group for ``invisible_ms`` and
is then delivered again unless acked. See docs/broker.md (Consumers) for the rules as users see them.

State, per (group, topic, topic type, queue id): a cursor (the next queue offset to read) and the
messages handed out and not done yet (in flight), by queue offset. The group's consumer offset of
a queue (``MessageStore.commit_offset``, shown by ``rocketstore consumer-progress``) is the lowest
offset in flight there, else the cursor: everything below it is acked, skipped by the tag filter,
re-put into the retry topic or dead-lettered.

Durability: before a receive returns, and before an ack, a change of invisible time or a dead-letter
forward returns, its record is in the pop log (``pop_log``: ``{store}/poplog``, one append per call
or per batch of concurrent acks, fsynced first under SYNC_FLUSH). Retry and dead-letter copies go
into the store before the records that retire their originals, so a crash between the two
delivers a message twice, never loses it. At open the log is replayed: IN_FLIGHT records put
messages back in flight (and move cursors past them), RESOLVED records take them out, POSITION
records move cursors (and say where a group started reading a queue, for a crash before the
offset table was written). The background loop compacts the log once it passed
``compact_bytes`` and doubled since it was last compacted.

Upgrading: a store whose pop state is in the pop log topic of earlier versions
(``rmq_sys_ROCKETSTORE_POP_LOG``, replayed from its consumer offset R in group
``CID_RMQ_SYS_ROCKETSTORE_POP``) has those records copied into a new ``poplog`` at its first open
(``_migrate``); the topic's R is then moved to its end, and the topic is never written again.

Redelivery: an expired message is re-put into the retry topic by the background loop
(``revive_expired``); a FIFO one (a message group, or a ``fifo`` receive) locks its queue for the
group while in flight and is handed out again in place by the next receive.

The table (``pop_table``) keeps the cursors, the entries in flight, the records holding them and
the redelivery schedule. An entry leaves it only once its RESOLVED record is written. Records of
one message are written in the order of its state changes: an ack waits for the message's
IN_FLIGHT write to finish (``writing``), a second ack for the first (``resolving``).

Thread safety: every method may be called from any thread. Store reads happen under ``_lock``;
pop-log writes (which wait for the flush policy) outside it.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from rocketstore.broker import pop_log
from rocketstore.broker.pop_copies import (
    PROPERTY_DLQ_ORIGIN_TOPIC,
    dead_letter,
    dlq_topic,
    retry_copy,
    retry_topic,
)
from rocketstore.broker.pop_log import LogKind
from rocketstore.broker.pop_table import GroupQueue, InFlight, InFlightTable
from rocketstore.broker.receipt import NORMAL_TOPIC, RETRY_TOPIC, ReceiptHandle
from rocketstore.clock import Clock, SystemClock
from rocketstore.config import FlushDiskType
from rocketstore.errors import (
    CorruptDataError,
    InvalidMessageError,
    InvalidReceiptHandleError,
    StoreConfigError,
    StoreWriteError,
)
from rocketstore.message import TOPIC_PATTERN, Message, MessageExt
from rocketstore.offsets import GROUP_PATTERN
from rocketstore.results import GetStatus, PutMessageResult, PutStatus
from rocketstore.service import BackgroundService
from rocketstore.storage.paths import store_file_exists
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
_REPLAY_BATCH: Final = 1024
_TOPIC_CACHE_S: Final = 1.0
_BEFORE_TOPIC_MAX: Final = 10_000


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


class PopService:
    """Pop consumers' state over ``store`` (see the module docstring).

    Options: ``clock`` (default the system clock), ``broker_name`` (written into receipt handles;
    a handle of another broker name is refused), ``max_in_flight`` (messages handed out and not
    done, over all groups: a receive hands out no more), ``revive_interval_ms`` (how often the
    background loop redelivers expired messages and commits progress), ``new_group_start``
    (where a group that never received from a queue starts: ``"max"``, the queue's end as
    RocketMQ's ConsumeInitMode.MAX, or ``"min"``, its first stored message), ``compact_bytes``
    (how many bytes the pop log may grow to before it is compacted: bounds what a restart
    replays).
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
        compact_bytes: int = 16 << 20,
    ) -> None:
        if not isinstance(max_in_flight, int) or max_in_flight <= 0:
            raise StoreConfigError(f"max_in_flight must be a positive int, not {max_in_flight!r}")
        if not isinstance(revive_interval_ms, int) or revive_interval_ms <= 0:
            raise StoreConfigError(f"revive_interval_ms must be a positive int, not {revive_interval_ms!r}")
        if type(compact_bytes) is not int or compact_bytes <= 0:
            raise StoreConfigError(f"compact_bytes must be a positive int, not {compact_bytes!r}")
        if new_group_start not in ("max", "min"):
            raise StoreConfigError(f"new_group_start must be 'max' or 'min', not {new_group_start!r}")
        handle_probe = ReceiptHandle(0, 0, 0, 0, 0, broker_name, 0, 0, 0).encode()
        ReceiptHandle.decode(handle_probe)  # a broker name a handle cannot carry is refused here
        self.store = store
        self.broker_name = broker_name
        self.max_in_flight = max_in_flight
        self._clock = clock or SystemClock()
        self._compact_bytes = compact_bytes
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # an entry's write finished
        self._table = InFlightTable(store, new_group_start)
        self._turns: dict[tuple[str, str], int] = {}
        # groups that asked for a topic before it had queues: they start at its first message,
        # since everything in it came after they began (bounded: a cap, oldest forgotten first)
        self._before_topic: dict[tuple[str, str], None] = {}
        self._topics: dict[str, tuple[float, int]] = {}  # topic -> (looked at, queue count)
        self._known_topics: set[str] = set()
        self._loop = _ReviveLoop(self, revive_interval_ms / 1000)
        self._log = self._replay()

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the background loop: redelivery of expired messages, progress commits."""
        self._loop.start()

    def stop(self) -> None:
        """Stop the loop after a last round and close the pop log; the store stays open (its
        owner closes it)."""
        try:
            self._loop.stop()
            self.commit_progress()
        finally:
            self._log.close()

    @property
    def in_flight(self) -> int:
        """Messages handed out and not done yet, over every group."""
        return self._table.count

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
            with self._lock:
                self._before_topic[(group, topic)] = None
                if len(self._before_topic) > _BEFORE_TOPIC_MAX:
                    del self._before_topic[next(iter(self._before_topic))]
            return []
        now = self._clock.now_ms()
        deadline = now + invisible_ms
        popped: list[tuple[InFlight, MessageExt, int]] = []  # entry, message, batch start offset
        to_dlq: list[InFlight] = []
        fresh: list[tuple[GroupQueue, int]] = []  # queues the group reads for the first time, and where
        with self._lock:
            budget = min(batch_size, self.max_in_flight - self._table.count)
            targets = [(NORMAL_TOPIC, q) for q in range(queue_count)] + [(RETRY_TOPIC, 0)]
            turn = self._turns.get((group, topic), 0)
            self._turns[(group, topic)] = turn + 1
            turn %= len(targets)
            early = (group, topic) in self._before_topic
            for topic_type, queue_id in targets[turn:] + targets[:turn]:
                if len(popped) >= budget:
                    break
                start = (
                    self.store.min_offset_in_queue(topic, queue_id)
                    if early and topic_type == NORMAL_TOPIC
                    else None
                )
                queue = self._table.queue(group, topic, topic_type, queue_id, fresh=fresh, start=start)
                if queue.fifo_entries and not self._take_expired(
                    queue, now, deadline, max_attempts, popped, to_dlq
                ):
                    continue  # locked: a message of it is in flight
                self._read_new(
                    queue, expression, budget - len(popped), now, deadline, max_attempts, fifo, popped
                )
                self._table.commit(queue)  # its cursor may have moved past messages the filter skipped
            if early and all(
                (group, topic, NORMAL_TOPIC, q) in self._table.queues for q in range(queue_count)
            ):
                del self._before_topic[(group, topic)]  # every queue has its start now
        if not (popped or to_dlq or fresh):
            return []
        self._write_receive(group, topic, max_attempts, popped, to_dlq, fresh, now)
        bound = binding(group, topic)  # every handle of a receive carries the same
        return [self._popped(entry, msg, start, now, invisible_ms, bound) for entry, msg, start in popped]

    def _take_expired(
        self,
        queue: GroupQueue,
        now: int,
        deadline: int,
        max_attempts: int,
        popped: list[tuple[InFlight, MessageExt, int]],
        to_dlq: list[InFlight],
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
        queue: GroupQueue,
        expression: str,
        room: int,
        now: int,
        deadline: int,
        max_attempts: int,
        fifo: bool,
        popped: list[tuple[InFlight, MessageExt, int]],
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
            entry = InFlight(
                queue,
                msg.queue_offset,
                msg.physical_offset,
                now,
                deadline,
                msg.reconsume_times + 1,
                max_attempts,
                in_order,
            )
            self._table.add(entry)
            popped.append((entry, msg, start))

    def _write_receive(
        self,
        group: str,
        topic: str,
        max_attempts: int,
        popped: list[tuple[InFlight, MessageExt, int]],
        to_dlq: list[InFlight],
        fresh: list[tuple[GroupQueue, int]],
        now: int,
    ) -> None:
        """The dead letters of expired FIFO messages into the store, then one pop-log append:
        where the group starts in queues new to it (so a crash before the offset table is written
        does not move its start), the RESOLVED record of the dead-lettered, the IN_FLIGHT record
        of what it hands out."""
        try:
            if to_dlq:
                try:
                    self._put(self._dead_letters(to_dlq), "dead letters")
                except InvalidMessageError as exc:
                    # a dead letter this store will not take must not block its queue for good
                    log.error("dead letters of group %s not stored (%s): retired without copies", group, exc)
            self._log.append(self._receive_records(group, topic, max_attempts, popped, to_dlq, fresh))
        except BaseException:
            with self._lock:
                for entry in to_dlq:
                    entry.resolving = False  # still expired: the next receive tries again
                for entry, _, _ in popped:
                    # handed to no one: expired at once, so it is delivered again
                    entry.writing = False
                    entry.deadline_ms = now
                    self._table.schedule(entry)
                self._changed.notify_all()
            raise
        with self._lock:
            for entry in to_dlq:
                self._table.remove(entry)
            for entry, _, _ in popped:
                entry.writing = False
                self._table.schedule(entry)
            self._changed.notify_all()

    @staticmethod
    def _receive_records(
        group: str,
        topic: str,
        max_attempts: int,
        popped: list[tuple[InFlight, MessageExt, int]],
        to_dlq: list[InFlight],
        fresh: list[tuple[GroupQueue, int]],
    ) -> list[bytes]:
        records = []
        if fresh:
            records.append(
                pop_log.encode(
                    LogKind.POSITION, group, topic, [(q.topic_type, q.queue_id, start) for q, start in fresh]
                )
            )
        if to_dlq:
            records.append(_resolved_record(group, topic, to_dlq))
        if popped:
            records.append(
                pop_log.encode(
                    LogKind.IN_FLIGHT,
                    group,
                    topic,
                    [e.log_fields() for e, _, _ in popped],
                    max_attempts=max_attempts,
                )
            )
        return records

    def _popped(
        self, entry: InFlight, msg: MessageExt, start: int, now: int, invisible_ms: int, bound: int
    ) -> PoppedMessage:
        queue = entry.queue
        handle = ReceiptHandle(
            start,
            now,
            invisible_ms,
            bound,
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
        (outcome,) = self.ack_many([(group, topic, receipt_handles)])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def ack_many(
        self, requests: Sequence[tuple[str, str, Sequence[str]]]
    ) -> list[list[InvalidReceiptHandleError | None] | Exception]:
        """``ack_batch`` of several (group, topic, handles) requests with one pop-log write (the
        broker's concurrent AckMessage calls); per request its outcomes, or the error that refused
        it as a whole (a bad group or topic name). StoreWriteError when the write fails (nothing
        acked)."""
        out: list[list[InvalidReceiptHandleError | None] | Exception] = []
        # handles to claim: where their outcome goes, group, topic, text, decoded
        claims: list[tuple[list[InvalidReceiptHandleError | None], int, str, str, str, ReceiptHandle]] = []
        for group, topic, receipt_handles in requests:
            try:
                _check_names(group, topic)
            except StoreConfigError as exc:
                out.append(exc)
                continue
            outcomes: list[InvalidReceiptHandleError | None] = []
            bound = binding(group, topic)
            for text in receipt_handles:
                try:
                    handle = _decode(text)
                    self._check_handle(group, topic, bound, text, handle)
                except InvalidReceiptHandleError as exc:
                    outcomes.append(exc)
                    continue
                claims.append((outcomes, len(outcomes), group, topic, text, handle))
                outcomes.append(None)
            out.append(outcomes)
        entries: list[InFlight] = []
        seen: set[tuple[str, str, int, int, int]] = set()
        try:
            with self._lock:  # one pass for every handle of every request
                for outcomes, i, group, topic, text, handle in claims:
                    where = (group, topic, handle.topic_type, handle.queue_id, handle.offset)
                    if where in seen:  # a second claim of a message claimed here would wait for itself
                        continue
                    seen.add(where)
                    try:
                        entry = self._claim_locked(
                            group, topic, text, handle, must_be_in_flight=False, resolve=True
                        )
                    except InvalidReceiptHandleError as exc:
                        outcomes[i] = exc
                        continue
                    if entry is not None:
                        entries.append(entry)
        except BaseException:
            self._unclaim(entries)
            raise
        if entries:
            self._resolve(entries)
        return out

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
        record = pop_log.encode(
            LogKind.IN_FLIGHT,
            group,
            topic,
            [entry.log_fields()],
            max_attempts=entry.max_attempts,
        )
        try:
            self._log.append([record])
        except BaseException:
            with self._lock:
                entry.retrieve_ms, entry.deadline_ms = old
                entry.writing = False
                self._table.schedule(entry)
                self._changed.notify_all()
            raise
        with self._lock:
            entry.writing = False
            self._table.schedule(entry)
            self._changed.notify_all()
        queue = entry.queue
        return ReceiptHandle(
            handle.start_offset,
            now,
            invisible_ms,
            binding(queue.group, queue.topic),
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
    ) -> InFlight | None:
        """The in-flight message ``receipt_handle`` (decoded: ``handle``) names, marked as being
        resolved (``resolve``) or written, once no other write of it is under way; None when it
        is not in flight."""
        _check_names(group, topic)
        if handle is None:
            handle = _decode(receipt_handle)
        self._check_handle(group, topic, binding(group, topic), receipt_handle, handle)
        with self._lock:
            return self._claim_locked(
                group, topic, receipt_handle, handle, must_be_in_flight=must_be_in_flight, resolve=resolve
            )

    def _check_handle(
        self, group: str, topic: str, bound: int, receipt_handle: str, handle: ReceiptHandle
    ) -> None:
        """InvalidReceiptHandleError unless ``handle`` is this broker's, handed to ``group`` for
        ``topic`` (``bound``: their ``binding``), of a queue ``topic`` has."""
        if handle.broker_name != self.broker_name:
            raise InvalidReceiptHandleError(
                receipt_handle, f"it is broker {handle.broker_name!r}'s; this is {self.broker_name!r}"
            )
        if handle.revive_queue_id != bound:
            raise InvalidReceiptHandleError(
                receipt_handle, f"it was not handed to group {group!r} for topic {topic!r}"
            )
        if handle.topic_type == NORMAL_TOPIC and handle.queue_id >= self._queue_count(topic):
            raise InvalidReceiptHandleError(receipt_handle, f"topic {topic!r} has no queue {handle.queue_id}")
        if handle.topic_type == RETRY_TOPIC and handle.queue_id != 0:
            raise InvalidReceiptHandleError(receipt_handle, "a retry topic has only queue 0")

    def _claim_locked(
        self,
        group: str,
        topic: str,
        receipt_handle: str,
        handle: ReceiptHandle,
        *,
        must_be_in_flight: bool,
        resolve: bool,
    ) -> InFlight | None:
        """``_claim`` of a checked handle, under ``_lock``."""
        queue = self._table.queue(group, topic, handle.topic_type, handle.queue_id)
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

    def _resolve(self, entries: list[InFlight], *, dead_letter: bool = False) -> None:
        """Retire ``entries`` (claimed), with dead-letter copies; they stay in flight if it fails."""
        try:
            self._retire(entries, self._dead_letters(entries) if dead_letter else [], "ack")
        except BaseException:
            self._unclaim(entries)
            raise

    def _retire(self, entries: Sequence[InFlight], copies: list[Message], what: str) -> None:
        """``copies`` (retry or dead-letter) into the store, then the RESOLVED records of
        ``entries`` (claimed) in one pop-log append; then they are out of flight and their
        queues' offsets committed."""
        by_pair: dict[tuple[str, str], list[InFlight]] = {}
        for entry in entries:
            by_pair.setdefault((entry.queue.group, entry.queue.topic), []).append(entry)
        if copies:
            self._put(copies, what)
        self._log.append([_resolved_record(group, topic, done) for (group, topic), done in by_pair.items()])
        with self._lock:
            for entry in entries:
                self._table.remove(entry)
            for queue in {id(e.queue): e.queue for e in entries}.values():
                self._table.commit(queue)
            self._changed.notify_all()

    def _unclaim(self, entries: list[InFlight]) -> None:
        with self._lock:
            for entry in entries:
                entry.resolving = False
            self._changed.notify_all()

    # --- redelivery --------------------------------------------------------------------------
    def revive_expired(self, limit: int = 1024) -> int:
        """Re-put up to ``limit`` expired messages (not FIFO) into their retry topics, or into the
        DLQ when out of attempts, in one put; how many. The background loop calls it."""
        now = self._clock.now_ms()
        with self._lock:
            due = self._table.due(now, limit)
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
                        self._table.schedule(entry)
                self._changed.notify_all()
            raise
        return len(due)

    def _redelivery_copies(self, entries: Sequence[InFlight]) -> list[Message]:
        """Retry copies of the expired ``entries``, dead letters of those out of attempts."""
        retry = [e for e in entries if e.attempt < e.max_attempts]
        return self._retries(retry) + self._dead_letters([e for e in entries if e.attempt >= e.max_attempts])

    def _retries(self, entries: Sequence[InFlight]) -> list[Message]:
        out = []
        for entry in entries:
            msg = self._message_of(entry)
            if msg is not None:
                queue = entry.queue
                self._ensure_topic(retry_topic(queue.group, queue.topic))
                out.append(retry_copy(msg, queue.group, queue.topic, entry.attempt, entry.retrieve_ms))
        return out

    def _dead_letters(self, entries: Sequence[InFlight]) -> list[Message]:
        out = []
        for entry in entries:
            msg = self._message_of(entry)
            if msg is not None:
                queue = entry.queue
                self._ensure_topic(dlq_topic(queue.group))
                out.append(dead_letter(msg, queue.group, queue.topic, entry.attempt))
        return out

    def _message_of(self, entry: InFlight) -> MessageExt | None:
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
    def maintain(self) -> None:
        """fsync the pop log (under ASYNC_FLUSH its appends are not), and compact it once it passed
        ``compact_bytes`` and doubled since it was last compacted. The background loop calls it."""
        self._log.flush()
        self._log.compact_when_due(self._compact_bytes)

    def commit_progress(self) -> None:
        """Commit every queue's offset (they move with acks; a receive past filtered messages)."""
        with self._lock:
            for queue in self._table.queues.values():
                self._table.commit(queue)

    # --- store access --------------------------------------------------------------------------
    def _put(self, msgs: list[Message], what: str) -> list[PutMessageResult]:
        results = self.store.put_messages(msgs)
        bad = next((r for r in results if r.status is not PutStatus.PUT_OK), None)
        if bad is not None:
            raise StoreWriteError(f"the store did not take the {what}: {bad.status.value}", bad.status)
        return results

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
    def _replay(self) -> pop_log.PopLog:
        """Open the pop log (migrating the pop log topic of earlier versions into a new one) and
        rebuild the in-flight table from its records."""
        store = self.store
        path = store.layout.pop_log
        initial = [] if store_file_exists(path) else self._migrate()
        opened, records = pop_log.PopLog.open(
            path,
            file_mode=store.config.file_mode,
            sync=store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH,
            initial=initial,
        )
        for record in records:
            self._table.apply(record)
        self._table.finish_replay()
        if initial:
            # the records are in the new log (fsynced): the topic is never replayed again
            end = store.max_offset_in_queue(POP_LOG_TOPIC, 0)
            store.commit_offset(POP_LOG_GROUP, POP_LOG_TOPIC, 0, end)
            log.info("pop log topic %s migrated to %s: %d records", POP_LOG_TOPIC, path, len(initial))
        if records:
            log.info("pop log replayed: %d records, %d messages in flight", len(records), self._table.count)
        return opened

    def _migrate(self) -> list[bytes]:
        """The records of the pop log topic of earlier versions from its replay point R on (none
        when the store has no such topic)."""
        store = self.store
        if POP_LOG_TOPIC not in store.topic_configs():
            return []
        offset = max(0, store.query_offset(POP_LOG_GROUP, POP_LOG_TOPIC, 0))
        end = store.max_offset_in_queue(POP_LOG_TOPIC, 0)
        out: list[bytes] = []
        while offset < end:
            batch = store.read_batch(POP_LOG_TOPIC, 0, offset, _REPLAY_BATCH)
            for i in range(len(batch)):
                body = bytes(batch.body_at(i))
                try:
                    pop_log.decode(body)
                except CorruptDataError as exc:
                    log.error(
                        "%s offset %d: skipped, not a pop log record (%s)",
                        POP_LOG_TOPIC,
                        int(batch.queue_offsets[i]),
                        exc,
                    )
                    continue
                out.append(body)
            offset = max(batch.next_offset, offset + 1) if not len(batch) else batch.next_offset
        return out


class _ReviveLoop(BackgroundService):
    def __init__(self, pop: PopService, interval: float) -> None:
        super().__init__("pop-revive", interval)
        self._pop = pop

    def run_once(self) -> None:
        try:
            while self._pop.revive_expired() > 0:
                pass
        except StoreWriteError as exc:
            log.warning("pop state write failed, retried next round: %s", exc)
        self._pop.commit_progress()
        try:
            self._pop.maintain()
        except StoreWriteError as exc:
            # a failed fsync fails the log's appends from now on (they answer errors); a failed
            # compaction leaves the old log in use and is tried again once it doubled
            log.error("pop log maintenance failed: %s", exc)


def _resolved_record(group: str, topic: str, entries: Sequence[InFlight]) -> bytes:
    return pop_log.encode(
        LogKind.RESOLVED, group, topic, [(e.queue.topic_type, e.queue.queue_id, e.offset) for e in entries]
    )


def binding(group: str, topic: str) -> int:
    """What a receipt handle carries in its reviveQueueId field (this broker has one pop log,
    so no revive queue to name): a 31-bit digest of the group and topic it was handed to, so
    that a handle acks, changes or dead-letters nothing for another group or topic."""
    digest = hashlib.blake2b(f"{group}\n{topic}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF


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
