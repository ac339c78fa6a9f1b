"""The put path: where messages go (topics and queues), whether the store takes them now, the
append, and the durability wait (the SYNC_FLUSH group commit, the SYNC_MASTER slave ack).

``MessageStore`` checks that it is open and writable and hands every put to a ``MessageWriter``;
the writer gets its collaborators when the store starts its services and never reaches back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from itertools import repeat
from typing import Final, cast

import numpy as np
import numpy.typing as npt

from rocketstore.cleanup import CleanService
from rocketstore.clock import Clock
from rocketstore.codec.config_json import PERM_WRITE
from rocketstore.codec.message_batch import EncodedBatch, EncodedColumns
from rocketstore.codec.text_column import TextColumn
from rocketstore.commitlog import CommitLog
from rocketstore.config import StoreConfig
from rocketstore.dispatch import DispatchService
from rocketstore.errors import InvalidMessageError
from rocketstore.flush import CommitLogFlushService, CommitService, GroupCommitService
from rocketstore.ha.master import HAMaster
from rocketstore.limits import MAX_QUEUE_ID
from rocketstore.message import Message, waits_for_store
from rocketstore.prepare import (
    MessageColumns,
    MessageEncoder,
    PreparedBatch,
    check_messages,
    column_length,
    tag_column,
    validate_topic,
)
from rocketstore.results import PutBatchResult, PutColumnsResult, PutMessageResult, PutStatus
from rocketstore.stats import StoreStats
from rocketstore.topics import PROPERTY_SHARDING_KEY, TopicTable

__all__ = ["MessageWriter", "StoreState", "lock_held_ms"]

log = logging.getLogger(__name__)
_PUT_OK = PutStatus.PUT_OK
# records a columnar put appends one by one: below this, CommitLog.append and the dispatcher's
# per-record path cost less than append_batch and a DispatchBatch (~250 us fixed, with the
# dispatcher's thread contending for the log's lock and the GIL)
_FEW: Final = 32
_ILLEGAL = PutStatus.MESSAGE_ILLEGAL
# A tuple constructor without the NamedTuple __new__ frame: a batch makes one per message.
_result = partial(tuple.__new__, PutMessageResult)


class StoreState:
    """What the store and its writer share: closed yet, and the failure (a flush, a dispatch)
    that makes the store refuse writes from then on."""

    __slots__ = ("closed", "failure")

    def __init__(self) -> None:
        self.closed = False
        self.failure: BaseException | None = None


def lock_held_ms(commitlog: CommitLog, clock: Clock) -> float:
    """How long the current append has held the commitlog lock (0 when none holds it)."""
    began = commitlog.begin_time_in_lock
    return (clock.monotonic() - began) * 1000 if began else 0.0


class MessageWriter:
    """The put path of a store open for writing. Its callers have checked that the store is
    open and writable; the writer still refuses puts (with a status) when that changes under it,
    when a service failed, the disk is full or the append lock is held too long."""

    def __init__(
        self,
        commitlog: CommitLog,
        topics: TopicTable,
        encoder: MessageEncoder,
        stats: StoreStats,
        config: StoreConfig,
        clock: Clock,
        state: StoreState,
        *,
        cleaner: CleanService,
        group_commit: GroupCommitService | None,
        flusher: CommitLogFlushService | None,
        committer: CommitService | None,
        dispatcher: DispatchService,
        is_slave: bool,
        sync_master: bool,
    ) -> None:
        self._commitlog = commitlog
        self._topics = topics
        self._encoder = encoder
        self._stats = stats
        self.config = config
        self._clock = clock
        self._state = state
        self._cleaner = cleaner
        self._group_commit = group_commit
        self._flusher = flusher
        self._committer = committer
        # after every append, on the putting thread: readers (followers in other processes too)
        # see a put once it returns, and no thread is woken per put (for the broker's event loop
        # that wake-up and the GIL handed to the dispatcher and back cost more than the pass);
        # or, inside a thread's dispatch_deferred, once at its end
        self._dispatch_now = dispatcher.run_here
        self._deferring = threading.local()
        # where the commitlog ended after the newest put made in a deferred block: readers of
        # this process dispatch up to there themselves before they look (MessageStore._settle)
        self.deferred_end = 0
        self._deferred_end_lock = threading.Lock()
        self._is_slave = is_slave
        self._sync_master = sync_master
        # set when replication starts (after the services: a SYNC_MASTER put before has no slave)
        self.ha_master: HAMaster | None = None
        self._flush_least_pages = config.flush_least_pages
        self._wake_flusher = not config.flush_commit_log_timed
        self._commit_least_pages = config.commit_least_pages
        # whether a put has a flush to wait for or a service to wake (see _make_durable)
        self._durability_work = (
            group_commit is not None or committer is not None or self._wake_flusher or sync_master
        )
        # whether a put waits (for its flush or a slave) before it returns: a put told not to
        # leaves that to its caller (wait_durable)
        self._waits = group_commit is not None or sync_master

    # --- the puts ------------------------------------------------------------------------
    @contextmanager
    def dispatch_deferred(self) -> Iterator[None]:
        """``MessageStore.dispatch_deferred``."""
        deferring = self._deferring
        outer = getattr(deferring, "depth", 0)  # (nested: the outermost block dispatches)
        if not outer:
            deferring.owed = False
        deferring.depth = outer + 1
        try:
            yield
        finally:
            deferring.depth = outer
            if not outer and deferring.owed:
                self._dispatch_now()

    def _dispatch(self) -> None:
        deferring = self._deferring
        if getattr(deferring, "depth", 0):
            deferring.owed = True
            end = self._commitlog.max_offset
            with self._deferred_end_lock:  # (deferring threads' ends never move it back)
                self.deferred_end = max(self.deferred_end, end)
        else:
            self._dispatch_now()

    def put_message(self, msg: Message) -> PutMessageResult:
        """``MessageStore.put_message`` on an open, writable store."""
        topic = getattr(msg, "topic", None)
        topics = self._topics
        topic_config = topics.get(topic) if type(topic) is str else None
        if topic_config is None or not topic_config.perm & PERM_WRITE:
            # a new topic is created there, an unwritable one refused, and what is not a Message
            # or not a topic name is named by its checks
            return self.put_messages((msg,))[0]
        # the common case, a known writable topic: put_messages' steps for one message, without
        # building a batch
        queue_id = msg.queue_id
        if queue_id is None:
            props = msg.properties
            if props and (type(props) is not dict or type(props.get(PROPERTY_SHARDING_KEY, "")) is not str):
                return self.put_messages((msg,))[0]  # properties to check first: validation names them
            queue_id = topics.select_queue(msg.topic, props.get(PROPERTY_SHARDING_KEY) if props else None)
        prepared = self._encoder.prepare(msg, queue_id=queue_id)
        refused = self._refusal()
        if refused is not None:
            return PutMessageResult(refused)
        try:
            result = self._commitlog.append_one(prepared)
        except OSError as exc:
            log.error("put failed, could not create or write a commitlog segment: %s", exc)
            return PutMessageResult(PutStatus.CREATE_MAPPED_FILE_FAILED)
        self._stats.count_put(1, result.wrote_bytes)
        self._dispatch()
        if self._needs_flush_wait((msg,)):
            status = self._make_durable(result.physical_offset + result.wrote_bytes)
            if status is not _PUT_OK:
                return result._replace(status=status)
        return result

    def put_messages(
        self, msgs: Sequence[Message], *, internal: bool = False, wait: bool = True
    ) -> list[PutMessageResult]:
        """``MessageStore.put_messages`` on an open, writable store."""
        if not msgs:
            return []
        queue_ids = self._place(msgs, internal=internal)
        batch = None if internal else self._encoder.prepare_batch(msgs, queue_ids)
        prepared = [] if batch is not None else self._encoder.prepare_many(msgs, queue_ids, internal=internal)
        refused = self._refusal()
        if refused is not None:
            return [PutMessageResult(refused) for _ in msgs]
        try:
            if batch is not None:
                phys, queue_offsets, now = self._commitlog.append_batch(batch)
            else:
                results = self._commitlog.append(prepared)
        except OSError as exc:
            log.error("put failed, could not create or write a commitlog segment: %s", exc)
            return [PutMessageResult(PutStatus.CREATE_MAPPED_FILE_FAILED) for _ in msgs]
        if batch is not None:
            results = self._batch_results(batch, phys, queue_offsets, now)
            self._stats.count_put(len(results), int(batch.lengths.sum()))
        else:
            self._stats.count_put(len(results), sum(r.wrote_bytes for r in results))
        self._dispatch()
        if self._needs_flush_wait(msgs):
            end = max(r.physical_offset + r.wrote_bytes for r in results)
            status = self._make_durable(end, wait)
            if status is not _PUT_OK:
                return [r._replace(status=status) for r in results]
        return results

    def _batch_results(
        self,
        batch: PreparedBatch,
        phys: npt.NDArray[np.int64],
        queue_offsets: npt.NDArray[np.int64],
        now: int,
    ) -> list[PutMessageResult]:
        """One PUT_OK result per message of an appended batch, built column by column (a batch
        can hold thousands of messages: no Python call per message but the tuple's own)."""
        topics = batch.topics
        return list(
            map(
                _result,
                zip(
                    repeat(_PUT_OK),
                    repeat(topics[0]) if len(topics) == 1 else [topics[t] for t in batch.topic_ids.tolist()],
                    batch.queue_ids.tolist(),
                    phys.tolist(),
                    queue_offsets.tolist(),
                    repeat(now),
                    batch.lengths.tolist(),
                    repeat(self._commitlog.id_prefix),
                ),
            )
        )

    def put_batch(
        self,
        topic: str,
        bodies: Sequence[bytes | bytearray | memoryview],
        queue_ids: int | Sequence[int] | npt.NDArray[np.integer] | None,
        tags: str | Sequence[str | None] | None,
        keys: Sequence[str | None] | None,
        flag: int,
        born_timestamp: int | Sequence[int] | npt.NDArray[np.integer] | None,
    ) -> PutBatchResult:
        """``MessageStore.put_batch`` on an open, writable store."""
        n = column_length("bodies", bodies)
        validate_topic(topic)
        if n == 0:
            return self._unstored(_PUT_OK, topic, np.zeros(0, dtype=np.int64), TextColumn.empty(0))
        if isinstance(keys, str):
            raise InvalidMessageError("keys must be a sequence with one entry per body, not a str", _ILLEGAL)
        if keys is not None and column_length("keys", keys) != n:
            raise InvalidMessageError(f"{len(keys)} keys for {n} bodies", _ILLEGAL)
        qids = self._batch_queue_ids(topic, n, queue_ids)
        tag_values, tag_ids = tag_column(tags, n)
        try:
            key_column = TextColumn.from_texts(keys) if keys is not None else TextColumn.empty(n)
        except (TypeError, UnicodeEncodeError) as exc:
            raise InvalidMessageError(f"keys must be strings: {exc}", _ILLEGAL) from None
        if type(flag) is not int:
            raise InvalidMessageError(f"flag must be an int, not {flag!r}", _ILLEGAL)
        try:
            flags = np.full(n, flag, dtype=np.int64)
        except OverflowError:
            raise InvalidMessageError(f"flag {flag} is out of range", _ILLEGAL) from None
        borns = (
            np.full(n, self._clock.now_ms(), dtype=np.int64)
            if born_timestamp is None
            else _int_column("born_timestamp", born_timestamp, n)
        )
        batch = self._encoder.prepare_columns(
            MessageColumns(topic, bodies, qids, tag_values, tag_ids, key_column, flags, borns)
        )
        refused = self._refusal()
        if refused is not None:
            return self._unstored(refused, topic, qids, batch.uniq_keys)
        try:
            phys, queue_offsets, now = self._commitlog.append_batch(batch)
        except OSError as exc:
            log.error("put failed, could not create or write a commitlog segment: %s", exc)
            return self._unstored(PutStatus.CREATE_MAPPED_FILE_FAILED, topic, qids, batch.uniq_keys)
        self._stats.count_put(n, int(batch.lengths.sum()))
        self._dispatch()
        # put_batch takes no properties, so no message can say WAIT=false: no _needs_flush_wait
        status = self._make_durable(int(phys[-1] + batch.lengths[-1])) if self._durability_work else _PUT_OK
        return PutBatchResult(
            status,
            topic,
            qids,
            queue_offsets,
            phys,
            batch.lengths,
            now,
            self._commitlog.id_prefix,
            batch.uniq_keys,
        )

    def put_encoded_batches(
        self, batches: Sequence[EncodedBatch], *, wait: bool = True
    ) -> list[PutBatchResult]:
        """``MessageStore.put_encoded_batches`` on an open, writable store."""
        if isinstance(batches, EncodedBatch) or not isinstance(batches, Sequence):
            raise InvalidMessageError(
                f"expected a sequence of EncodedBatch, got {type(batches).__name__}", _ILLEGAL
            )
        if not batches:
            return []
        result = self.put_encoded_columns(self._encoder.encoded_columns(batches), wait=wait)
        ends = result.ends.tolist()
        return [
            PutBatchResult(
                result.status,
                b.topic,
                result.queue_ids[i:j],
                result.queue_offsets[i:j],
                result.physical_offsets[i:j],
                result.sizes[i:j],
                result.store_timestamp,
                result.id_prefix,
                result.uniq_keys.cut(i, j),
            )
            for b, i, j in zip(batches, [0, *ends], ends)
        ]

    def put_encoded_columns(self, columns: EncodedColumns, *, wait: bool = True) -> PutColumnsResult:
        """``MessageStore.put_encoded_columns`` on an open, writable store."""
        if not isinstance(columns, EncodedColumns):
            raise InvalidMessageError(f"expected EncodedColumns, got {type(columns).__name__}", _ILLEGAL)
        prepared, counts = self._encoder.prepare_encoded_columns(columns)
        ends = np.cumsum(counts)
        if len(columns.topics) == 1 and len(prepared):  # (a broker's round to one topic: one numpy call)
            self._open_topic(columns.topics[0], int(prepared.queue_ids.max()))
        elif len(prepared):
            highest = np.full(len(columns.topics), -1, dtype=np.int64)
            np.maximum.at(highest, prepared.topic_ids, prepared.queue_ids)
            for t in np.flatnonzero(highest >= 0).tolist():
                self._open_topic(columns.topics[t], int(highest[t]))
        refused = self._refusal()
        if refused is None and len(prepared):
            try:
                if len(prepared) <= _FEW:
                    phys, queue_offsets, now = self._commitlog.append_few(prepared)
                else:
                    phys, queue_offsets, now = self._commitlog.append_batch(prepared)
            except OSError as exc:
                log.error("put failed, could not create or write a commitlog segment: %s", exc)
                refused = PutStatus.CREATE_MAPPED_FILE_FAILED
        elif refused is None:
            phys = queue_offsets = np.zeros(0, dtype=np.int64)
            now = 0
        prefix = self._commitlog.id_prefix
        if refused is not None:
            none = np.full(len(prepared), -1, dtype=np.int64)
            return PutColumnsResult(
                refused, ends, prepared.topic_ids, prepared.queue_ids, none, none, none, 0, prefix,
                prepared.uniq_keys,
            )  # fmt: skip
        status = _PUT_OK
        if len(prepared):
            self._stats.count_put(len(prepared), int(prepared.lengths.sum()))
            self._dispatch()
            # as put_batch: a batch's messages cannot say WAIT=false to skip the flush wait
            end = int(phys[-1] + prepared.lengths[-1])
            status = self._make_durable(end, wait) if self._durability_work else _PUT_OK
        return PutColumnsResult(
            status, ends, prepared.topic_ids, prepared.queue_ids, queue_offsets, phys, prepared.lengths, now,
            prefix, prepared.uniq_keys,
        )  # fmt: skip

    def _unstored(
        self, status: PutStatus, topic: str, queue_ids: npt.NDArray[np.int64], uniq_keys: TextColumn
    ) -> PutBatchResult:
        """A put_batch result for messages not stored: every offset -1."""
        none = np.full(len(queue_ids), -1, dtype=np.int64)
        return PutBatchResult(
            status, topic, queue_ids, none, none, none, 0, self._commitlog.id_prefix, uniq_keys
        )

    # --- placement -----------------------------------------------------------------------
    def _batch_queue_ids(
        self, topic: str, n: int, queue_ids: int | Sequence[int] | npt.NDArray[np.integer] | None
    ) -> npt.NDArray[np.int64]:
        """put_batch's queue per message; the topic created (or its queues widened) as for a put."""
        if queue_ids is None:
            self._open_topic(topic, None)
            return self._topics.select_queues(topic, n)
        qids = _int_column("queue_ids", queue_ids, n)
        if n and (qids.min() < 0 or qids.max() > MAX_QUEUE_ID):
            i = int(np.argmax((qids < 0) | (qids > MAX_QUEUE_ID)))
            raise InvalidMessageError(
                f"message {i} of the batch: queue_id must be an int in 0..{MAX_QUEUE_ID}, not {qids[i]}",
                _ILLEGAL,
            )
        self._open_topic(topic, int(qids.max()))
        return qids

    def _open_topic(self, topic: str, highest_queue: int | None, *, internal: bool = False) -> None:
        """A topic a put writes to: created when new and the put names queues (with at least
        ``highest_queue + 1`` of them; a put naming none creates it in ``select_queue(s)``), and
        refused unless writable."""
        topics = self._topics
        if highest_queue is not None and topic not in topics:
            topics.create(
                validate_topic(topic, allow_system=internal),
                max(self.config.default_topic_queue_nums, highest_queue + 1),
            )
        if not topics.writable(topic):
            raise InvalidMessageError(
                f"topic {topic!r} is not writable (perm {topics.perm(topic)})", _ILLEGAL
            )

    def _place(self, msgs: Sequence[Message], *, internal: bool = False) -> list[int] | None:
        """Topic configs for topics first written to, and the queue of every message when some
        name none (None when all do). Work per topic of the batch, and per message only for
        messages that name no queue; round-robin picks are taken per topic in one step."""
        topics = self._topics
        try:
            batch_topics = {m.topic for m in msgs}
            queue_ids = [m.queue_id for m in msgs]
        except (AttributeError, TypeError, ValueError):  # not a Message, an unhashable topic: named here
            check_messages(msgs)
            for m in msgs:
                validate_topic(m.topic)
            raise
        for topic in batch_topics:
            highest = None
            if topic not in topics:
                validate_topic(topic, allow_system=internal)  # bytes, None, ...
                named = [m.queue_id for m in msgs if m.topic == topic and type(m.queue_id) is int]
                highest = max(named, default=None)
            self._open_topic(topic, highest, internal=internal)
        if None not in queue_ids:
            return None
        round_robin: dict[str, list[int]] = {}  # topic -> the messages it picks queues for, in order
        for i, m in enumerate(msgs):
            if m.queue_id is None:
                props = getattr(m, "properties", None)  # what is not a Message is named by prepare
                key = props.get(PROPERTY_SHARDING_KEY) if isinstance(props, Mapping) else None
                topic = validate_topic(m.topic, allow_system=internal)
                if key and type(key) is str:  # any other value is refused by prepare, which names it
                    queue_ids[i] = topics.select_queue(topic, key)
                else:
                    round_robin.setdefault(topic, []).append(i)
        for topic, members in round_robin.items():
            for i, q in zip(members, topics.select_queues(topic, len(members)).tolist()):
                queue_ids[i] = q
        return cast("list[int]", queue_ids)

    # --- refusals ------------------------------------------------------------------------
    def _refusal(self) -> PutStatus | None:
        """Why the store takes no put now (logged), or None."""
        state = self._state
        if not (
            state.failure is not None
            or state.closed
            or self._is_slave
            or self._commitlog.begin_time_in_lock
            or self._cleaner.disk_full
        ):
            return None  # the common case decided by attribute reads alone, before the calls below
        unavailable = self._unavailable_reason()
        if unavailable is not None:
            log.warning("put refused: %s", unavailable)
            return PutStatus.SERVICE_NOT_AVAILABLE
        if self._page_cache_busy():
            return PutStatus.OS_PAGECACHE_BUSY
        if self._cleaner.disk_full:
            log.warning(
                "put refused: the disk is full (above disk_warning_ratio %d%%)",
                self.config.disk_warning_ratio,
            )
            return PutStatus.DISK_FULL
        return None

    def _unavailable_reason(self) -> str | None:
        state = self._state
        if state.closed:
            return "the store is closed"
        if state.failure is not None:
            return f"a store service failed: {state.failure}"
        if self._is_slave:
            return "this store is a SLAVE: it takes its master's bytes only"
        return None

    def _page_cache_busy(self) -> bool:
        """RocketMQ's isOSPageCacheBusy: the append lock has been held too long; fail fast."""
        return (
            self.config.os_page_cache_busy_timeout < lock_held_ms(self._commitlog, self._clock) < 10_000_000
        )

    # --- durability ----------------------------------------------------------------------
    def _needs_flush_wait(self, msgs: Sequence[Message]) -> bool:
        """Whether ``_make_durable`` has anything to do for ``msgs`` (SYNC_FLUSH waits unless
        every message says WAIT=false; ASYNC_FLUSH may have a service to wake)."""
        if not self._waits:
            return self._durability_work
        return waits_for_store(msgs)

    def wait_durable(self, end: int) -> PutStatus:
        """``MessageStore.wait_durable``."""
        return self._make_durable(end)

    def when_flushed(self, end: int, done: Callable[[PutStatus], object]) -> None:
        """``MessageStore.when_flushed``."""
        group = self._group_commit
        if group is None:
            done(self._flush_step(end))
            return
        group.submit(end, lambda ok: done(_PUT_OK if ok else self._not_flushed(end)))

    def _make_durable(self, end: int, wait: bool = True) -> PutStatus:
        """The flush step (``_flush_step``), then for a SYNC_MASTER the replica's ack. A put that
        does not ``wait`` leaves both waits to its caller (``wait_durable``); where a put waits
        for nothing (ASYNC_FLUSH) it wakes the flush services as ever."""
        if not wait and self._waits:
            return _PUT_OK
        status = self._flush_step(end)
        if status is _PUT_OK and self._sync_master:
            return self._replicated(end)
        return status

    def _replicated(self, end: int) -> PutStatus:
        """SYNC_MASTER: SLAVE_NOT_AVAILABLE at once without a slave near enough; else wait up to
        slave_timeout for a slave to ack ``end`` (bytes in its page cache, as RocketMQ)."""
        ha = self.ha_master
        if ha is None or not ha.slave_ok(end):
            log.warning("SYNC_MASTER: no slave connected within ha_slave_fallbehind_max of offset %d", end)
            return PutStatus.SLAVE_NOT_AVAILABLE
        if ha.wait_acked(end, self.config.slave_timeout / 1000):
            return _PUT_OK
        log.warning(
            "SYNC_MASTER: no slave acknowledged offset %d within %d ms", end, self.config.slave_timeout
        )
        return PutStatus.FLUSH_SLAVE_TIMEOUT

    def _flush_step(self, end: int) -> PutStatus:
        """SYNC_FLUSH: wait for the group commit to reach ``end``; FLUSH_DISK_TIMEOUT if it
        does not in time. ASYNC_FLUSH: wake the committer (transient pool) or, unless flushes
        are timed, the flusher, once enough pages wait."""
        group = self._group_commit
        if group is None:
            last = self._commitlog.files.last
            if last is None:
                return _PUT_OK
            if self._committer is not None:
                if last.uncommitted_pages() >= self._commit_least_pages:
                    self._committer.wakeup()
            elif (
                self._wake_flusher
                and self._flusher is not None
                and last.dirty_pages() >= self._flush_least_pages
            ):
                self._flusher.wakeup()
            return _PUT_OK
        if group.submit(end).wait(self.config.sync_flush_timeout / 1000):
            return _PUT_OK
        return self._not_flushed(end)

    def _not_flushed(self, end: int) -> PutStatus:
        """FLUSH_DISK_TIMEOUT for a put whose bytes up to ``end`` the group commit did not flush
        (it failed, or took longer than ``sync_flush_timeout``), said in the log."""
        failure = self._state.failure
        if failure is not None:
            log.error("SYNC_FLUSH: the commitlog could not be flushed up to %d: %s", end, failure)
        else:
            log.error(
                "SYNC_FLUSH: the commitlog was not flushed up to %d within %d ms",
                end,
                self.config.sync_flush_timeout,
            )
        return PutStatus.FLUSH_DISK_TIMEOUT


def _int_column(
    name: str, value: int | Sequence[int] | npt.NDArray[np.integer], n: int
) -> npt.NDArray[np.int64]:
    """One int for all n messages, or one int each, as int64; anything else is refused, by ``name``."""
    try:
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return np.full(n, value, dtype=np.int64)
        column = np.asarray(value)
    except OverflowError:
        raise InvalidMessageError(f"{name} {value!r} is out of range", _ILLEGAL) from None
    except (TypeError, ValueError):  # a ragged or otherwise unconvertible sequence
        raise InvalidMessageError(f"{name} must be one int or {n} ints, one per body", _ILLEGAL) from None
    if column.shape != (n,) or column.dtype.kind not in "iu":
        raise InvalidMessageError(f"{name} must be one int or {n} ints, one per body", _ILLEGAL)
    if column.dtype == np.uint64 and int(column.max()) > np.iinfo(np.int64).max:
        raise InvalidMessageError(f"{name} is out of range", _ILLEGAL)
    return column.astype(np.int64)
