"""Consumer: a group's share of the subscribed topics' queues, read from its committed offsets.

Positions. Per queue it owns, a consumer keeps the offset its next read starts at. Messages read
but not handed out yet wait in a buffer; the offset a commit writes for a queue is the first one
not handed out (the first buffered one, else the read position). A message handed out by
``poll`` or the iterator counts as processed once the application comes back for more, or calls
``commit``: delivery is at least once (docs/consumers.md).

Commits (``commit``, and every ``auto_commit_interval_ms`` at the next ``poll``/iteration, and at
``close``) go to ``config/consumerOffset.json`` through ``offset_store.commit_offsets``: under
its lock, never lowering another process's offset unless a ``seek`` asked for it.

Membership and allocation across processes: ``group.py``. A queue is read only while this
consumer holds its lock; a rebalance (every ``rebalance_interval_ms``) commits and lets go of the
queues that are someone else's now and takes the new ones as their locks come free.

Thread safety: one thread at a time (like Kafka's consumer). No thread of its own: waiting for
messages uses the store's ``dispatch_events`` (a condition in the writing process, the signal
file in a follower); the asyncio form awaits the same events through ``async_wake``, one thread
per store that wakes every awaiting coroutine when the position moves.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from rocketstore.clock import Clock, SystemClock
from rocketstore.codec.java_hash import tags_code
from rocketstore.consumer.async_wake import wake_of
from rocketstore.consumer.group import GroupMembership, QueueLock, allocate_averagely
from rocketstore.consumer.offset_store import QueueKey, commit_offsets
from rocketstore.errors import StoreClosedError, StoreConfigError
from rocketstore.message import TOPIC_PATTERN, MessageExt
from rocketstore.results import GetStatus, MessageBatch

if TYPE_CHECKING:
    from rocketstore.store import MessageStore

__all__ = ["Consumer", "StartAt"]

log = logging.getLogger(__name__)

StartAt = Literal["earliest", "latest"] | int | dt.datetime
Queue = tuple[str, int]
_MOVED_ON = (GetStatus.NO_MATCHED_MESSAGE, GetStatus.OFFSET_FOUND_NULL, GetStatus.MESSAGE_WAS_REMOVING)
# statuses of a read that stepped over what is no longer there
_GONE = (GetStatus.OFFSET_FOUND_NULL, GetStatus.MESSAGE_WAS_REMOVING)
_BATCH_READ = 4096
# messages a get_message call reads at least: its fixed cost is paid per call, so 32 at a time
# (RocketMQ's per-pull cap, lifted here) read at half the speed
_READ_SHARE = 256


@dataclass
class _Owned:
    """A queue this consumer holds the lock of."""

    lock: QueueLock
    position: int  # where the next read starts
    committed: int  # what this consumer last wrote (-1: nothing)
    forced: bool = False  # a seek moved it: the next commit may lower the stored offset


@dataclass(frozen=True)
class _TagFilter:
    expression: str | None  # None: every message
    codes: frozenset[int]

    @classmethod
    def parse(cls, topic: str, expression: str | None) -> _TagFilter:
        if expression is not None and not isinstance(expression, str):
            raise StoreConfigError(f"topic {topic!r}: the tag expression must be a str, not {expression!r}")
        names = [t.strip() for t in (expression or "*").split("||")]
        if "*" in names or not any(names):
            return cls(None, frozenset())
        names = [t for t in names if t]
        return cls(" || ".join(names), frozenset(tags_code(t) for t in names))


class Consumer:
    """Reads ``subscription`` (topic -> tag expression: ``"*"``, ``"TagA || TagB"``) for ``group``.

    Made by ``MessageStore.consumer`` (in the writing process or a read-only follower) or
    ``rocketstore.consumer.open_consumer`` (opens a follower and closes it with the consumer).
    ``start`` is where a queue the group never committed begins: ``"earliest"``, ``"latest"``
    (the default, RocketMQ's CONSUME_FROM_LAST_OFFSET), or a time (epoch ms or datetime). Under
    ``"latest"`` a queue that did not exist when the consumer was made starts at its first message:
    all of it was sent after the consumer began to listen (a topic subscribed before its first send).
    """

    def __init__(
        self,
        store: MessageStore,
        group: str,
        subscription: Mapping[str, str | None] | str,
        *,
        start: StartAt = "latest",
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        rebalance_interval_ms: int = 1000,
        clock: Clock | None = None,
        owns_store: bool = False,
    ) -> None:
        from rocketstore.offsets import GROUP_PATTERN

        if not isinstance(group, str) or not GROUP_PATTERN.fullmatch(group):
            raise StoreConfigError(
                f"consumer group {group!r}: want 1-255 letters, digits, '_', '-', '%' or '|'"
            )
        subs = {subscription: "*"} if isinstance(subscription, str) else dict(subscription)
        if not subs:
            raise StoreConfigError("the subscription names no topic")
        for topic in subs:
            if not isinstance(topic, str) or not TOPIC_PATTERN.fullmatch(topic):
                raise StoreConfigError(f"subscription: {topic!r} is not a valid topic name")
        if not (start in ("earliest", "latest") or isinstance(start, (int, dt.datetime))) or isinstance(
            start, bool
        ):
            raise StoreConfigError(
                f"start must be 'earliest', 'latest', epoch ms or a datetime, not {start!r}"
            )
        for name, ms in (
            ("auto_commit_interval_ms", auto_commit_interval_ms),
            ("rebalance_interval_ms", rebalance_interval_ms),
        ):
            if not isinstance(ms, int) or ms <= 0:
                raise StoreConfigError(f"{name} must be a positive int, not {ms!r}")
        self.store = store
        self.group = group
        self._filters = {topic: _TagFilter.parse(topic, expr) for topic, expr in subs.items()}
        self._start = start
        self._auto_commit = auto_commit
        self._commit_every = auto_commit_interval_ms / 1000
        self._rebalance_every = rebalance_interval_ms / 1000
        self._clock = clock or SystemClock()
        self._owns_store = owns_store
        self._offsets_path = store.layout.config / "consumerOffset.json"
        self._events = store.dispatch_events
        topics = store.topics()
        self._queues_at_start = {(t, q) for t in self._filters for q in topics.get(t, [])}
        self._unborn: set[str] = set()
        self._queue_set: int | None = None  # the store's queue set at the last rebalance
        self._membership = GroupMembership(
            store.layout.consumers / group, file_mode=store.config.file_mode, dir_mode=store.config.dir_mode
        )
        self._owned: dict[Queue, _Owned] = {}
        self._waiting: dict[Queue, QueueLock] = {}  # allocated to us, lock not free yet
        self._paused: set[tuple[str | None, int | None]] = set()
        self._buffer: deque[tuple[Queue, MessageExt]] = deque()
        self._turn = 0
        self._closed = False
        now = self._clock.monotonic()
        self._next_commit = now + self._commit_every
        self._next_rebalance = now
        self._housekeep()

    # --- what this consumer has ------------------------------------------------------------
    @property
    def client_id(self) -> str:
        return self._membership.client_id

    def assignment(self) -> list[tuple[str, int]]:
        """The queues this consumer reads now (it holds their locks), sorted."""
        return sorted(self._owned)

    def position(self, topic: str, queue_id: int) -> int:
        """The offset a commit would write for a queue of this consumer now."""
        return self._commit_positions().get((topic, queue_id), self._owned_state(topic, queue_id).position)

    # --- reading ----------------------------------------------------------------------------
    def poll(self, max_messages: int = 32, timeout: float = 0.0) -> list[MessageExt]:
        """Up to ``max_messages`` messages, fairly from every queue with some, each queue in order;
        waits up to ``timeout`` seconds for the first one. [] when none came."""
        self._check_open()
        if max_messages <= 0:
            raise StoreConfigError(f"max_messages must be positive, not {max_messages}")
        if not self._buffer:
            self._fill(max_messages, timeout)
        buffer = self._buffer
        if len(buffer) <= max_messages:  # the usual case: all of it, without a pop per message
            out = [m for _, m in buffer]
            buffer.clear()
            return out
        return [buffer.popleft()[1] for _ in range(max_messages)]

    def poll_batch(self, max_messages: int = 65536, timeout: float = 0.0) -> list[MessageBatch]:
        """Like ``poll``, as columns: one ``MessageBatch`` per queue read (``read_batch``'s form).
        Tag expressions are matched by tagsCode (a tag whose hash collides also passes)."""
        self._check_open()
        if max_messages <= 0:
            raise StoreConfigError(f"max_messages must be positive, not {max_messages}")
        self._unbuffer(lambda queue: True)
        deadline = self._clock.monotonic() + max(0.0, timeout)
        while True:
            self._housekeep()
            seen = self._events.position()
            batches = self._read_batches(max_messages)
            if batches:
                return batches
            if not self._wait(seen, deadline):
                return []

    def __iter__(self) -> Iterator[MessageExt]:
        """Every message, as it comes, until ``close``."""
        while not self._closed:
            if not self._buffer:
                self._fill(256, self._rebalance_every)
            if self._buffer:
                yield self._buffer.popleft()[1]

    def __aiter__(self) -> Consumer:
        return self

    async def __anext__(self) -> MessageExt:
        if not self._buffer and not await self._await_buffer(256, None):
            raise StopAsyncIteration
        return self._buffer.popleft()[1]

    async def apoll(self, max_messages: int = 32, timeout: float | None = 0.0) -> list[MessageExt]:
        """``poll`` for asyncio: awaits dispatch progress without blocking the loop (see
        ``async_wake``). ``timeout=None`` waits until a message comes or the consumer is closed."""
        self._check_open()
        if not await self._await_buffer(max_messages, timeout):
            return []
        return self.poll(max_messages)

    async def _await_buffer(self, max_messages: int, timeout: float | None) -> bool:
        """Fill the buffer, awaiting new messages as long as ``timeout`` allows; False if none came."""
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        wake = wake_of(self._events)
        while not self._closed:
            seen = self._events.position()
            if not self._buffer:
                self._fill(max_messages, 0.0)
            if self._buffer:
                return True
            # at most until the next rebalance, which the next _fill does
            wait = self._rebalance_every
            if deadline is not None:
                wait = min(wait, deadline - self._clock.monotonic())
                if wait <= 0:
                    return False
            await wake.wait(self._events, seen, wait)
        return False

    def _fill(self, max_messages: int, timeout: float) -> None:
        deadline = self._clock.monotonic() + max(0.0, timeout)
        while True:
            self._housekeep()
            seen = self._events.position()
            if self._read_messages(max_messages):
                return
            if not self._wait(seen, deadline):
                return

    def _wait(self, seen: int, deadline: float) -> bool:
        """Wait for dispatch to move past ``seen`` (at most until the next rebalance); False when
        ``deadline`` passed."""
        remaining = deadline - self._clock.monotonic()
        if remaining <= 0 or self._closed:
            return False
        self._events.wait(seen, min(remaining, self._rebalance_every))
        return True

    def _active(self) -> list[tuple[Queue, _Owned]]:
        """The queues to read, starting one further each call (fairness)."""
        active = [(q, st) for q, st in self._owned.items() if not self._is_paused(q)]
        if active:
            self._turn = (self._turn + 1) % len(active)
            active = active[self._turn :] + active[: self._turn]
        return active

    def _read_messages(self, max_messages: int) -> int:
        active = self._active()
        if not active:
            return 0
        # a get_message call has a fixed cost: fairness comes from the rotating first queue, not
        # from splitting a poll into tiny reads
        share = max(_READ_SHARE, max_messages // len(active))
        got = 0
        more = True
        store, group = self.store, self.group
        while more and got < max_messages:
            more = False
            for queue, st in active:
                want = min(share, max_messages - got)
                if want <= 0:
                    break
                topic, queue_id = queue
                res = store.get_message(
                    group,
                    topic,
                    queue_id,
                    st.position,
                    want,
                    self._filters[topic].expression,
                    transfer_limits=False,
                )
                if res.messages:
                    self._buffer.extend((queue, m) for m in res.messages)
                    got += len(res.messages)
                stepped = res.next_begin_offset - st.position - len(res.messages)
                if stepped > 0 and (
                    res.status in _GONE
                    or (res.status is GetStatus.FOUND and self._filters[topic].expression is None)
                ):
                    log.warning(
                        "%s/%d: %d messages between offsets %d and %d were gone (reclaimed or damaged) "
                        "before group %s read them",
                        *queue,
                        stepped,
                        st.position,
                        res.next_begin_offset - 1,
                        self.group,
                    )
                before = st.position
                self._advance(queue, st, res.status, res.next_begin_offset, res.max_offset)
                more |= st.position != before and st.position < res.max_offset  # (see _read_batches)
        return got

    def _advance(
        self, queue: Queue, st: _Owned, status: GetStatus, next_offset: int, max_offset: int
    ) -> None:
        if status is GetStatus.FOUND or status in _MOVED_ON:
            st.position = max(st.position, next_offset)
        elif status is GetStatus.OFFSET_TOO_SMALL:
            log.warning(
                "%s/%d: offsets %d..%d were reclaimed before group %s read them",
                *queue,
                st.position,
                next_offset - 1,
                self.group,
            )
            st.position = next_offset
        elif status is GetStatus.OFFSET_OVERFLOW_BADLY:
            # the queue ends before our position: a seek past its end, or the writer's recovery cut
            # it; messages stored from its end on again must not be skipped
            log.warning(
                "%s/%d: offset %d is past the queue's end %d; reading from there",
                *queue,
                st.position,
                max_offset,
            )
            st.position = max_offset
            st.forced = True

    def _read_batches(self, max_messages: int) -> list[MessageBatch]:
        active = self._active()
        if not active:
            return []
        share = max(1, max_messages // len(active))
        out: list[MessageBatch] = []
        got = 0
        more = True
        while more and got < max_messages:
            more = False
            for queue, st in active:
                want = min(share, max_messages - got, _BATCH_READ * 16)
                if want <= 0:
                    break
                topic, queue_id = queue
                end = self.store.max_offset_in_queue(topic, queue_id)  # (before the read)
                batch = self.store.read_batch(topic, queue_id, st.position, want)
                before = st.position
                if len(batch):
                    codes = self._filters[topic].codes
                    if codes:
                        batch = _select(batch, np.isin(batch.tags_codes, np.fromiter(codes, dtype=np.int64)))
                    if len(batch):
                        out.append(batch)
                        got += len(batch)
                    st.position = max(st.position, batch.next_offset)
                elif batch.next_offset > st.position:
                    st.position = batch.next_offset
                elif st.position > (last := self.store.max_offset_in_queue(topic, queue_id)):
                    self._advance(queue, st, GetStatus.OFFSET_OVERFLOW_BADLY, last, last)
                # read again in this call only when the read moved on and the queue had more than
                # it took (a share, a segment's end, a message gone): what comes to a queue read
                # to its end while the others are read is the next call's, and the messages in
                # hand go out now
                more |= st.position != before and st.position < end
        return out

    # --- positions --------------------------------------------------------------------------
    def commit(self) -> None:
        """Write the offset of every queue of this consumer: the first message not handed out."""
        self._check_open()
        self._commit(list(self._owned))

    def _commit(self, queues: list[Queue]) -> None:
        positions = self._commit_positions()
        changes: dict[QueueKey, int] = {}
        forced: list[QueueKey] = []
        for queue in queues:
            st = self._owned[queue]
            offset = positions.get(queue, st.position)
            key = (queue[0], self.group, queue[1])
            if offset != st.committed or st.forced:
                changes[key] = offset
                if st.forced:
                    forced.append(key)
        if changes:
            commit_offsets(self._offsets_path, changes, forced)
        for queue in queues:
            st = self._owned[queue]
            st.committed = positions.get(queue, st.position)
            st.forced = False
        self._next_commit = self._clock.monotonic() + self._commit_every

    def _commit_positions(self) -> dict[Queue, int]:
        """The first buffered offset of each queue with buffered messages."""
        first: dict[Queue, int] = {}
        for queue, msg in self._buffer:
            if queue not in first:
                first[queue] = msg.queue_offset
        return first

    def seek(self, topic: str, queue_id: int, offset: int) -> None:
        """Read the queue from ``offset`` on; the next commit writes it even if it is lower."""
        self._check_open()
        st = self._owned_state(topic, queue_id)
        if not isinstance(offset, int) or offset < 0:
            raise StoreConfigError(f"seek: offset must be an int >= 0, not {offset!r}")
        self._unbuffer(lambda queue: queue == (topic, queue_id))
        st.position, st.forced = offset, True

    def seek_to_time(self, timestamp: int | dt.datetime) -> None:
        """Read every queue of this consumer from the first message stored at or after ``timestamp``."""
        self._check_open()
        ms = _epoch_ms(timestamp)
        self._unbuffer(lambda queue: True)
        for (topic, queue_id), st in self._owned.items():
            st.position, st.forced = self.store.offset_in_queue_by_time(topic, queue_id, ms), True

    def pause(self, topic: str | None = None, queue_id: int | None = None) -> None:
        """Stop reading a queue, a topic's queues, or (no arguments) everything, until ``resume``."""
        self._paused.add((topic, queue_id))
        self._unbuffer(self._is_paused)

    def resume(self, topic: str | None = None, queue_id: int | None = None) -> None:
        """Undo ``pause`` with the same arguments; ``resume()`` undoes every pause."""
        if topic is None and queue_id is None:
            self._paused.clear()
        else:
            self._paused.discard((topic, queue_id))

    def _is_paused(self, queue: Queue) -> bool:
        paused = self._paused
        return bool(paused) and ((None, None) in paused or (queue[0], None) in paused or queue in paused)

    def _unbuffer(self, pick: Callable[[Queue], bool]) -> None:
        """Put buffered messages of the queues ``pick(queue)`` picks back: their position goes back."""
        first = self._commit_positions()
        kept = deque(item for item in self._buffer if not pick(item[0]))
        for queue, offset in first.items():
            if pick(queue) and queue in self._owned:
                self._owned[queue].position = offset
        self._buffer = kept

    def _owned_state(self, topic: str, queue_id: int) -> _Owned:
        st = self._owned.get((topic, queue_id))
        if st is None:
            raise StoreConfigError(
                f"queue {topic}/{queue_id} is not assigned to this consumer "
                f"(it reads {', '.join(f'{t}/{q}' for t, q in self.assignment()) or 'nothing'})"
            )
        return st

    # --- group --------------------------------------------------------------------------------
    def _housekeep(self) -> None:
        now = self._clock.monotonic()
        # a queue made (or deleted) since the last rebalance is shared out at once, not a
        # rebalance interval later; so is a subscribed topic's first queue
        queue_set = self._events.queue_set()
        if (
            now >= self._next_rebalance
            or (queue_set is not None and queue_set != self._queue_set)
            or (self._unborn and not self._unborn.isdisjoint(self.store.topics()))
        ):
            self._next_rebalance = now + self._rebalance_every
            self._queue_set = queue_set
            self._rebalance()
        elif self._waiting:
            self._take_waiting()
        if self._auto_commit and now >= self._next_commit:
            self._commit(list(self._owned))

    def _rebalance(self) -> None:
        members = self._membership.members()
        me = self._membership.client_id
        topics = self.store.topics()
        wanted = {
            (topic, queue_id)
            for topic in self._filters
            for queue_id in allocate_averagely(sorted(topics.get(topic, [])), members, me)
        }
        # a subscribed topic not created yet is looked for at every wake-up, not at the next
        # rebalance: its first messages come at once
        self._unborn = {topic for topic in self._filters if not topics.get(topic)}
        gone = [queue for queue in self._owned if queue not in wanted]
        if gone:
            self._unbuffer(lambda queue: queue in gone)
            self._commit(gone)  # before the lock goes: the next holder starts from here
            for queue in gone:
                self._owned.pop(queue).lock.release()
        for queue in [q for q in self._waiting if q not in wanted]:
            del self._waiting[queue]
        for queue in wanted:
            if queue not in self._owned and queue not in self._waiting:
                self._waiting[queue] = self._membership.queue_lock(*queue)
        self._take_waiting()

    def _take_waiting(self) -> None:
        for queue, lock in list(self._waiting.items()):
            if not lock.acquire():
                continue
            del self._waiting[queue]
            topic, queue_id = queue
            committed = self.store.query_offset(self.group, topic, queue_id)
            start = committed if committed >= 0 else self._start_offset(topic, queue_id)
            self._owned[queue] = _Owned(lock, start, committed)

    def _start_offset(self, topic: str, queue_id: int) -> int:
        start = self._start
        if start == "earliest":
            return self.store.min_offset_in_queue(topic, queue_id)
        if start == "latest":
            if (topic, queue_id) not in self._queues_at_start:
                return self.store.min_offset_in_queue(topic, queue_id)
            return self.store.max_offset_in_queue(topic, queue_id)
        assert isinstance(start, (int, dt.datetime))
        return self.store.offset_in_queue_by_time(topic, queue_id, _epoch_ms(start))

    # --- lifecycle ----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"consumer {self.client_id} of group {self.group!r} is closed")

    def close(self) -> None:
        """Commit (with auto-commit on), let the queues go, leave the group; closes the store
        too when ``open_consumer`` opened it."""
        if self._closed:
            return
        try:
            if self._auto_commit and self._owned:
                self._commit(list(self._owned))
        finally:
            self._closed = True
            for st in self._owned.values():
                st.lock.release()
            self._owned.clear()
            self._waiting.clear()
            self._buffer.clear()
            self._membership.leave()
            wake_of(self._events).wake_all()  # a task of ours awaiting messages ends now
            if self._owns_store:
                self.store.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Consumer({self.group!r}, {self.client_id}, {len(self._owned)} queues)"


def _epoch_ms(timestamp: int | dt.datetime) -> int:
    if isinstance(timestamp, dt.datetime):
        return int(timestamp.timestamp() * 1000)
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise StoreConfigError(f"a time is epoch ms or a datetime, not {timestamp!r}")
    return timestamp


def _select(batch: MessageBatch, keep: npt.NDArray[np.bool_]) -> MessageBatch:
    """The rows of ``batch`` that ``keep`` marks (bodies moved together)."""
    rows = np.flatnonzero(keep)
    if len(rows) == len(keep):
        return batch
    starts = batch.body_offsets[rows]
    lengths = batch.body_offsets[rows + 1] - starts
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        source = np.repeat(starts - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
        body = bytearray(np.frombuffer(batch.body, dtype=np.uint8)[source].tobytes())
    else:
        body = bytearray()
    return MessageBatch(
        batch.topic,
        batch.queue_id,
        batch.queue_offsets[rows],
        batch.physical_offsets[rows],
        batch.sizes[rows],
        batch.tags_codes[rows],
        batch.born_timestamps[rows],
        batch.store_timestamps[rows],
        body,
        offsets,
        batch.next_offset,
    )


def open_consumer(
    path: str | Path,
    group: str,
    subscription: Mapping[str, str | None] | str,
    **options: object,
) -> Consumer:
    """A consumer on a read-only follower of the store at ``path`` (which another process may be
    writing); closing the consumer closes the store. ``config`` (a StoreConfig) gives the
    geometry, else it is read from the files; other options are ``Consumer``'s."""
    from rocketstore.config import StoreConfig
    from rocketstore.geometry import detect_geometry
    from rocketstore.store import MessageStore

    config = options.pop("config", None)
    if config is not None and not isinstance(config, StoreConfig):
        raise StoreConfigError(f"config must be a StoreConfig, not {config!r}")
    root = Path(path)
    store = MessageStore.open(root, config or detect_geometry(root, StoreConfig()), readonly=True)
    try:
        return Consumer(store, group, subscription, owns_store=True, **options)  # type: ignore[arg-type]
    except BaseException:
        store.close()
        raise
