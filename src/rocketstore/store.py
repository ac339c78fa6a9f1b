"""MessageStore: the facade. It wires the components together and holds no format logic."""

from __future__ import annotations

import logging
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import TYPE_CHECKING, Any, SupportsIndex

import numpy as np
import numpy.typing as npt

from rocketstore.checkpoint import StoreCheckpoint
from rocketstore.cleanup import CleanService, ReclaimReport
from rocketstore.clock import Clock, SystemClock
from rocketstore.codec.message_batch import EncodedBatch, EncodedColumns
from rocketstore.codec.message_id import decode_offset_msg_id
from rocketstore.commitlog import CommitLog
from rocketstore.config import BrokerRole, FlushDiskType, StoreConfig
from rocketstore.consume_queue import ConsumeQueueSet
from rocketstore.disk_space import DiskUsage, disk_used_ratio
from rocketstore.dispatch import DispatchService
from rocketstore.errors import (
    InvalidArgumentError,
    RocketStoreError,
    StoreClosedError,
    StoreConfigError,
    StoreReadOnlyError,
    as_store_error,
)
from rocketstore.flush import (
    CommitLogFlushService,
    CommitService,
    ConsumeQueueFlushService,
    GroupCommitService,
)
from rocketstore.follow import DispatchEvents, FollowedQueues, SignalWriter, StoreFollower, WriterEvents
from rocketstore.geometry import fit_geometry
from rocketstore.ha.master import HAMaster
from rocketstore.ha.slave import HASlave
from rocketstore.index import IndexService
from rocketstore.message import SCHEDULE_TOPIC, TIMER_TOPIC, Message, MessageExt
from rocketstore.offsets import ConsumerOffsets, OffsetFlushService
from rocketstore.prepare import MessageEncoder, validate_topic
from rocketstore.put_path import MessageWriter, StoreState, lock_held_ms
from rocketstore.read_path import MessageReader
from rocketstore.recovery import RecoveryReport, log_report, recover
from rocketstore.results import (
    GetMessageResult,
    MessageBatch,
    PutBatchResult,
    PutColumnsResult,
    PutMessageResult,
    PutStatus,
    RecordRead,
    RecordsResult,
)
from rocketstore.schedule import ScheduleService
from rocketstore.service import BackgroundService
from rocketstore.stats import StoreStats
from rocketstore.storage.allocate import AllocateService
from rocketstore.storage.map_cache import MapCache
from rocketstore.storage.paths import StoreLayout, open_store_file, store_file_exists
from rocketstore.storage.transient_pool import TransientStorePool
from rocketstore.store_lock import StoreLock
from rocketstore.timer.service import TimerFlushService, TimerService
from rocketstore.topics import TopicConfig, TopicTable

if TYPE_CHECKING:
    from rocketstore.consumer import Consumer

__all__ = ["MessageStore"]

log = logging.getLogger(__name__)
_MAX_TIME = (1 << 63) - 1


class MessageStore:
    """A store directory, open for reading and writing (or read-only).

    Use ``MessageStore.open(path, config)``, preferably as a context manager. Puts may come from
    many threads at once; reads are lock-free. Invalid messages raise ``InvalidMessageError``
    and write nothing; a failed store service (flush, dispatch) is reported in the put status;
    a write on a read-only store raises ``StoreReadOnlyError``, an argument of the wrong type
    (a str queue id) ``InvalidArgumentError``, any call on a closed store ``StoreClosedError``.
    """

    def __init__(
        self,
        layout: StoreLayout,
        config: StoreConfig,
        clock: Clock,
        *,
        readonly: bool,
        delayed_delivery: bool = True,
        disk_usage: DiskUsage = disk_used_ratio,
    ) -> None:
        self.layout = layout
        self.config = config
        self.readonly = readonly
        self._clock = clock
        self._disk_usage = disk_usage
        self._state = StoreState()
        self._lock = StoreLock(layout.lock, mode=config.file_mode)
        self._pool = (
            TransientStorePool(config.transient_store_pool_size, config.commitlog_segment_size)
            if config.transient_store_pool_enable and not readonly
            else None
        )
        self._allocator = (
            AllocateService(self._pool, warm=config.warm_mapped_file_enable, file_mode=config.file_mode)
            if not readonly
            else None
        )
        self._commitlog = CommitLog(
            layout.commitlog,
            config,
            clock,
            allocator=self._allocator.allocate if self._allocator else None,
            readonly=readonly,
        )
        # the consume-queue and index files mapped at once, whoever opens them (queues, index, follower)
        self._map_cache = MapCache(config.max_mapped_files)
        self._index = (
            IndexService(
                layout.index,
                config.index_hash_slots,
                config.index_max_entries,
                clock,
                readonly=readonly,
                file_mode=config.file_mode,
                map_cache=self._map_cache,
            )
            if config.message_index_enable
            else None
        )
        # read-only: follow whatever process writes the store (follow.py); writing: publish for them
        self._follower = (
            StoreFollower(layout, self._commitlog, self._index, self._map_cache) if readonly else None
        )
        self._signal: SignalWriter | None = None
        self._queues = (
            FollowedQueues(
                layout.consume_queue, config.consume_queue_entries, self._follower, self._map_cache
            )
            if self._follower is not None
            else ConsumeQueueSet(
                layout.consume_queue,
                config.consume_queue_entries,
                file_mode=config.file_mode,
                dir_mode=config.dir_mode,
                map_cache=self._map_cache,
            )
        )
        self._checkpoint = StoreCheckpoint(layout.checkpoint, readonly=readonly, mode=config.file_mode)
        self._topics = TopicTable(
            layout.config / "topics.json",
            clock,
            config.default_topic_queue_nums,
            readonly=readonly,
            mode=config.file_mode,
        )
        self._offsets = ConsumerOffsets(
            layout.config / "consumerOffset.json", readonly=readonly, mode=config.file_mode
        )
        self._stats = StoreStats(clock)
        self._cleaner: CleanService | None = None
        self._scheduler = ScheduleService(
            self._commitlog,
            self._queues,
            lambda msg: self._deliver((msg,), internal=False)[0],
            layout.config / "delayOffset.json",
            config,
            clock,
            on_failure=self._service_failed,
        )
        self._timers = TimerService(
            layout,
            self._commitlog,
            self._queues,
            self._deliver,
            config,
            clock,
            find_copy=self.query_by_uniq_key,
            readonly=readonly,
            on_failure=self._service_failed,
        )
        self._reader = MessageReader(self._commitlog, self._queues, self._index, self._stats, config)
        self._writer: MessageWriter | None = None  # made by _start, with the writing services
        self._services: list[BackgroundService] = []
        self._dispatcher: DispatchService | None = None
        self._writer_events: WriterEvents | None = None  # one, so waiters can share it (async_wake)
        self._committer: CommitService | None = None
        self._delayed_delivery = delayed_delivery
        self.recovery: RecoveryReport | None = None
        self.abnormal_shutdown_detected = False
        self._ha_master: HAMaster | None = None
        self._ha_slave: HASlave | None = None
        self._is_slave = config.broker_role is BrokerRole.SLAVE and not readonly

    # --- lifecycle -----------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        config: StoreConfig | None = None,
        *,
        clock: Clock | None = None,
        readonly: bool = False,
        delayed_delivery: bool = True,
        disk_usage: DiskUsage | None = None,
    ) -> MessageStore:
        """Open (creating if needed) the store at ``path``, recover it, start its services.
        Without a path, the store is the config's ``store_path_root_dir`` (a broker.conf's
        storePathRootDir), else ``./store``.

        An existing store's geometry (segment sizes, index split) is read from its files where
        ``config`` leaves it at the defaults, so ``StoreConfig()`` opens a store RocketMQ wrote with
        any geometry; sizes ``config`` sets must match the files (see ``geometry.fit_geometry``).
        ``readonly=True`` takes no lock and writes nothing: no abort file, no recovery writes,
        no dispatch; it reads what is on disk, for stores another process may have open, and
        raises NotAStoreError when ``path`` holds no store. A store path holding the wrong kind
        of file (see docs/store-format.md, "Files and links") is a StorePathError, a store the
        system will not let us write a StoreAccessError.
        ``delayed_delivery=False`` opens it for writing without delivering due delayed messages
        (as a RocketMQ slave does not): for tools that must do only what they are named for.
        ``clock`` and ``disk_usage`` (the used fraction of the disk holding a path) replace the
        real ones, for tests and simulations.
        """
        config = config or StoreConfig()
        layout = StoreLayout(
            path if path is not None else config.store_path_root_dir or "store",
            file_mode=config.file_mode,
            dir_mode=config.dir_mode,
        )
        try:
            layout.open_root(readonly=readonly)
            cfg = fit_geometry(layout.root, config)
            store = cls(
                layout,
                cfg,
                clock or SystemClock(),
                readonly=readonly,
                delayed_delivery=delayed_delivery,
                disk_usage=disk_usage or disk_used_ratio,
            )
        except OSError as exc:
            error = as_store_error(exc, layout.root, "open the store")
            if error is exc:
                raise
            raise error from exc
        try:
            store._start()
        except BaseException as exc:
            store._shutdown(clean=False)
            error = as_store_error(exc, layout.root, "open the store")
            if error is exc:
                raise
            raise error from exc
        return store

    def _start(self) -> None:
        if not self.readonly:
            self._lock.acquire()
        self.abnormal_shutdown_detected = store_file_exists(self.layout.abort)
        self._commitlog.files.load()
        self._queues.load()
        if self._index is not None:
            self._index.load()
        self.recovery = recover(
            self._commitlog,
            self._queues,
            self._index,
            self._checkpoint,
            self.config,
            abnormal=self.abnormal_shutdown_detected,
        )
        self._topics.load(self._queues.topics())
        self._offsets.load()
        self._scheduler.load_progress()
        self._timers.load()
        if self._follower is not None:
            self.recovery = self._follower.attach(self.recovery)
        log_report(self.recovery, readonly=self.readonly)
        if self.readonly:
            return
        os.close(open_store_file(self.layout.abort, writable=True, create_mode=self.config.file_mode))
        queue_changes = self._queue_changes
        signal = self._signal = SignalWriter(self.layout.dispatch_signal, self.config, queue_changes)
        dispatcher = DispatchService(
            self._commitlog,
            self._queues,
            self._index,
            reput_offset=self.recovery.reput_from,
            index_durable_until=self._checkpoint.value.index_msg_timestamp,
            on_failure=self._service_failed,
            on_dispatched=signal.publish,
        )
        # Re-dispatch what the queues and index lack before any put, so queue offsets continue densely.
        dispatcher.run_once()
        signal.publish(dispatcher.dispatched_to)
        table = self._commitlog.topic_queue_table
        for cq in self._queues:
            table[(cq.topic, cq.queue_id)] = cq.max_offset
        self._dispatcher = dispatcher
        self._writer_events = WriterEvents(
            lambda: dispatcher.dispatched_to, dispatcher.changed, queue_changes, dispatcher.subscribe
        )
        # Delivery resumes only now: every queue is complete, so copies delivered before a
        # crash can be recognised (see schedule.py).
        scheduler = self._scheduler
        scheduler.skip_delivered_before_crash()
        delivering = self._delayed_delivery and not self._is_slave
        # A slave's timer files would hold no progress (its master delivers): none are made. A
        # tool that does not deliver (`recover`) mends the files that exist and makes none.
        # The files are made when the first timer comes (``TimerService.run_once``): a store that
        # never has one keeps no 38 MB wheel (which a tmpfs would have to back).
        timers = self._timers
        if (timers.files_exist() and not self._is_slave) or (delivering and timers.has_timers()):
            timers.recover()
        self._cleaner = cleaner = CleanService(
            self._commitlog,
            self._queues,
            self._index,
            self.config,
            self._clock,
            self._disk_usage,
            on_failure=self._service_failed,
        )
        cleaner.check_disk()  # a store opened on a full disk refuses puts from the start
        assert self._allocator is not None
        commit_flusher: BackgroundService
        group_commit: GroupCommitService | None = None
        flusher: CommitLogFlushService | None = None
        if self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            commit_flusher = group_commit = GroupCommitService(
                self._commitlog, self._checkpoint, on_failure=self._service_failed
            )
        else:
            commit_flusher = flusher = CommitLogFlushService(
                self._commitlog, self._checkpoint, self.config, self._clock, on_failure=self._service_failed
            )
        if self._pool is not None:
            self._committer = CommitService(
                self._commitlog,
                self.config,
                self._clock,
                commit_flusher,
                dispatcher,
                on_failure=self._service_failed,
            )
        self._writer = MessageWriter(
            self._commitlog,
            self._topics,
            MessageEncoder(self.config, self._clock),
            self._stats,
            self.config,
            self._clock,
            self._state,
            cleaner=cleaner,
            group_commit=group_commit,
            flusher=flusher,
            committer=self._committer,
            dispatcher=dispatcher,
            is_slave=self._is_slave,
            sync_master=self.config.broker_role is BrokerRole.SYNC_MASTER,
        )
        # stopped in this order at close: each final round leaves nothing for the ones before it
        # (the scheduler's last deliveries are puts: the writing services stop after it)
        self._services = [
            # a slave gets its master's deliveries; a tool opened without delayed delivery none
            *(
                [scheduler, self._timers, TimerFlushService(self._timers, self.config, self._service_failed)]
                if delivering
                else []
            ),
            self._cleaner,
            self._stats,
            self._allocator,
            *([self._committer] if self._committer is not None else []),
            dispatcher,
            commit_flusher,
            ConsumeQueueFlushService(
                self._queues,
                self._index,
                self._checkpoint,
                self.config,
                self._clock,
                lambda: dispatcher.last_store_timestamp,
                on_failure=self._service_failed,
            ),
            OffsetFlushService(
                self._offsets, self.config.flush_consumer_offset_interval, on_failure=self._service_failed
            ),
        ]
        for service in self._services:
            service.start()
        self._start_replication()

    def _queue_changes(self) -> int:
        return self._queues.changes

    def _start_replication(self) -> None:
        config = self.config
        if config.ha_listen_port is not None:
            self._ha_master = HAMaster(self._commitlog, config, self._clock, host=config.ha_listen_host)
            self._ha_master.start()
            if self._writer is not None:
                self._writer.ha_master = self._ha_master  # a SYNC_MASTER's puts wait for its slaves
        if self._is_slave:
            assert self._dispatcher is not None
            self._ha_slave = HASlave(self._commitlog, config, self._clock, self._dispatcher.wakeup)
            self._ha_slave.start()

    def _service_failed(self, service: BackgroundService, exc: BaseException) -> None:
        log.error("store service %s failed (%s); the store refuses writes from now on", service.name, exc)
        self._state.failure = exc

    def close(self) -> None:
        """Drain dispatch, flush everything, write the checkpoint, remove ``abort``, unlock."""
        if self._state.closed:
            return
        self._shutdown(clean=True)

    def _shutdown(self, *, clean: bool) -> None:
        self._state.closed = True
        errors: list[BaseException] = []
        for ha in (self._ha_slave, self._ha_master):  # first: nothing is appended after this
            if ha is not None:
                try:
                    ha.stop()
                except BaseException as exc:
                    errors.append(exc)
        for service in self._services:  # in start order: see _start
            try:
                service.stop()
            except BaseException as exc:
                errors.append(exc)
            if service.failure is not None:
                errors.append(service.failure)
        if clean and not self.readonly and self._dispatcher is not None and not errors:
            try:
                self._offsets.persist()
                self._commitlog.files.flush_all()
                for cq in self._queues:
                    cq.files.flush_all()
                if self._index is not None:
                    self._index.flush()
                last = self._commitlog.files.last
                self._checkpoint.update(
                    physic=last.last_store_timestamp if last else None,
                    logics=self._dispatcher.last_store_timestamp or None,
                    index=self._dispatcher.last_store_timestamp or None if self._index else None,
                )
                self._checkpoint.flush()
                self.layout.abort.unlink(missing_ok=True)
            except BaseException as exc:
                errors.append(exc)
        self._timers.close()
        self._commitlog.close()
        self._queues.close()
        if self._index is not None:
            self._index.close()
        for end in (self._signal, self._follower):
            if end is not None:
                end.close()
        self._lock.release()
        if errors and clean:
            raise as_store_error(errors[0], self.layout.root, "close the store")

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._state.closed:
            raise StoreClosedError(f"store {str(self.layout.root)!r} is closed")
        if self._follower is not None:
            self._follower.refresh()

    def _check_writable(self, what: str) -> None:
        self._check_open()
        if self.readonly:
            raise StoreReadOnlyError(
                f"store {str(self.layout.root)!r} is open read-only: {what} need it opened without "
                "readonly=True"
            )

    # --- writing -------------------------------------------------------------------------
    def put_message(self, msg: Message) -> PutMessageResult:
        """Store one message. Raises InvalidMessageError (nothing written) for a bad message."""
        writer = self._writer
        if writer is None or self._state.closed:
            return self.put_messages((msg,))[0]  # raises why not
        return writer.put_message(msg)

    def _deliver(self, msgs: Sequence[Message], *, internal: bool = True) -> list[PutMessageResult]:
        """The put of the scheduler and the timer service: while the store closes it answers a
        status, not StoreClosedError (what was due then stays due, delivered after the next open)."""
        if not self._state.closed:
            try:
                return self.put_messages(msgs, internal=internal)
            except StoreClosedError:
                pass
        return [PutMessageResult(PutStatus.SERVICE_NOT_AVAILABLE) for _ in msgs]

    def put_messages(
        self, msgs: Sequence[Message], *, internal: bool = False, wait: bool = True
    ) -> list[PutMessageResult]:
        """Store a batch under one lock acquisition: all of it, or (bad message) none of it.

        A message whose ``queue_id`` is None goes to a queue of the topic's choosing: by its
        ``__SHARDINGKEY`` property when it has one, else round robin. A topic not yet known
        is created with ``default_topic_queue_nums`` queues.
        ``internal=True`` is for the broker's own records (transaction half and op messages):
        system topics (``RMQ_SYS_*``) and the properties the store reserves (``REAL_TOPIC`` ...)
        are then taken as given, and no UNIQ_KEY is generated.

        Under SYNC_FLUSH, or on a SYNC_MASTER, the put returns once the batch is durable (or
        with the status saying why not), unless every message says WAIT=false. ``wait=False``
        returns once it is written, PUT_OK, and leaves that wait to the caller: ``wait_durable``
        (an event loop stores on its own thread, and waits on another).
        """
        self._check_writable("puts")
        assert self._writer is not None  # every store open for writing has one
        return self._writer.put_messages(msgs, internal=internal, wait=wait)

    def put_batch(
        self,
        topic: str,
        bodies: Sequence[bytes | bytearray | memoryview],
        *,
        queue_ids: int | Sequence[int] | npt.NDArray[np.integer] | None = None,
        tags: str | Sequence[str | None] | None = None,
        keys: Sequence[str | None] | None = None,
        flag: int = 0,
        born_timestamp: int | Sequence[int] | npt.NDArray[np.integer] | None = None,
    ) -> PutBatchResult:
        """Store messages of one topic given as columns, all or none (the fast path for bulk
        writes: no Message object per message, and a columnar result).

        ``bodies[i]`` is message i's body. ``queue_ids``: one queue for all, one per message,
        or None for the topic's round robin. ``tags``: one value for all, or one per message
        (None: no tags). ``keys``: one KEYS text per message (None: no keys; several keys are
        separated by single spaces, as the property stores them). ``flag`` and
        ``born_timestamp`` (default: now; or one per message) apply to every message; the store
        host is the born host. Delays and transactions go through ``put_messages``.

        The records are byte for byte those ``put_messages`` writes for the same messages.
        Raises InvalidMessageError naming the first bad message; nothing is stored then.
        """
        self._check_writable("puts")
        assert self._writer is not None  # every store open for writing has one
        return self._writer.put_batch(topic, bodies, queue_ids, tags, keys, flag, born_timestamp)

    def put_encoded_batches(
        self, batches: Sequence[EncodedBatch], *, wait: bool = True
    ) -> list[PutBatchResult]:
        """Store producers' batches in RocketMQ's batch encoding (what SEND_BATCH_MESSAGE
        carries, ``codec.message_batch``), all or none, in one append: each inner message keeps
        its flag, body and properties bytes (TAGS, KEYS, UNIQ_KEY as the producer set them; no
        UNIQ_KEY is generated), with the batch's ``properties`` added, as RocketMQ's broker
        stores them. One result per batch, as ``put_batch``'s.

        Raises InvalidMessageError naming the batch and message for a damaged encoding, an
        empty batch, a DELAY (batches are never delayed) or another property the store sets,
        transaction bits, or sizes over the limits; nothing is stored then. ``wait``: as for
        ``put_messages``.
        """
        self._check_writable("puts")
        assert self._writer is not None  # every store open for writing has one
        return self._writer.put_encoded_batches(batches, wait=wait)

    def put_encoded_columns(self, columns: EncodedColumns, *, wait: bool = True) -> PutColumnsResult:
        """``put_encoded_batches`` for batches held as columns (``codec.message_batch``'s
        ``EncodedColumns``: a broker's sends of one turn, each single message a batch of one),
        validated and encoded in one compiled pass with no Python object per message; stored
        all together or not at all. The properties added to a batch's messages are checked as
        they are stored: each entry a name and a value, none the store sets itself. ``wait``: as
        for ``put_messages``."""
        self._check_writable("puts")
        assert self._writer is not None  # every store open for writing has one
        return self._writer.put_encoded_columns(columns, wait=wait)

    def dispatch_deferred(self) -> AbstractContextManager[None]:
        """A block whose puts (on this thread) reach the consume queues and the index at its
        end, in one pass, rather than each before it returns: ``with store.dispatch_deferred():``.
        What the puts return is unchanged, and their records are in the commitlog before they
        return (safe from a crash of the process; the next open recovers them into the queues
        and the index). Long polls and followers in other processes see them at the block's end;
        a reader of this process that looks sooner (``get_message``, ``max_offset_in_queue``,
        a query) dispatches them itself first, so every put that returned is seen. A broker
        answers small rounds of sends inside the block, before their dispatch pass, as RocketMQ's
        broker answers before its ReputMessageService dispatches, and keeps it open across the
        rounds of a busy event loop. Blocks nest (the outermost dispatches). A store that takes
        no puts defers nothing."""
        writer = self._writer
        return nullcontext() if writer is None else writer.dispatch_deferred()

    def _check_readable(self) -> None:
        """Before a read through the queues or the index: open, and settled (``_settle``)."""
        self._check_open()
        self._settle()

    def _settle(self) -> None:
        """Before a read: what a deferred block put and has not dispatched yet is dispatched
        on this thread (once a round in progress is over), so the read sees every put that
        returned."""
        writer, dispatcher = self._writer, self._dispatcher
        if writer is not None and dispatcher is not None and dispatcher.dispatched_to < writer.deferred_end:
            dispatcher.run_here(wait=True)

    def wait_durable(self, end: int) -> PutStatus:
        """Wait until the commitlog is durable up to byte ``end`` (the end of a put made with
        ``wait=False``) as the store's puts wait: flushed by the group commit (SYNC_FLUSH) and
        acknowledged by a slave (SYNC_MASTER). Returns the status such a put would have had:
        PUT_OK, FLUSH_DISK_TIMEOUT (not flushed within ``sync_flush_timeout``, or the flush
        failed), FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE; PUT_OK at once when puts wait for
        nothing (``StoreConfig.puts_wait``)."""
        self._check_writable("puts")
        assert self._writer is not None  # every store open for writing has one
        return self._writer.wait_durable(end)

    def when_flushed(self, end: int, done: Callable[[PutStatus], object]) -> None:
        """``wait_durable``'s flush without a thread waiting for it: ``done(status)`` is called
        once the commitlog is flushed up to ``end`` (SYNC_FLUSH: by the group commit, on its
        thread), PUT_OK, or FLUSH_DISK_TIMEOUT when the flush failed; at once, in the caller,
        when puts wait for no flush (ASYNC_FLUSH). A SYNC_MASTER's wait for its slave is not
        part of it (``wait_durable`` is). A flush that hangs calls ``done`` late: a caller that
        must answer in time keeps its own deadline (``sync_flush_timeout``)."""
        self._check_writable("puts")
        assert self._writer is not None  # every store open for writing has one
        self._writer.when_flushed(end, done)

    @property
    def failure(self) -> BaseException | None:
        """Why the store refuses writes (a failed flush or dispatch), or None."""
        return self._state.failure

    # --- replication -------------------------------------------------------------------------
    @property
    def ha_port(self) -> int | None:
        """The port the HA server listens on (None without one)."""
        return self._ha_master.port if self._ha_master is not None else None

    def update_ha_master_address(self, address: str) -> None:
        """A SLAVE's master HA address (``host:port``) from now on, as a broker learns it from its
        name servers when ``ha_master_address`` is not set (RocketMQ's updateHaMasterAddress)."""
        self._check_open()
        if self._ha_slave is None:
            raise StoreConfigError("only a SLAVE store replicates from a master")
        self._ha_slave.set_master_address(address)

    def ha_status(self) -> dict[str, object]:
        """Replication state: role; for a master its listener, every slave (offsets sent and
        acked, bytes behind, last contact) and recent refusals; for a slave its link, the master's
        and its own offsets, bytes behind and last contact. See docs/replication.md."""
        self._check_open()
        status: dict[str, object] = {
            "role": self.config.broker_role.value,
            "max_offset": self._commitlog.max_offset,
        }
        if self._ha_master is not None:
            status["master"] = self._ha_master.status()
        if self._ha_slave is not None:
            status["slave"] = self._ha_slave.status()
        return status

    # --- dispatch progress ---------------------------------------------------------------
    def wait_dispatched(self, timeout: float | None = None) -> bool:
        """Block until everything appended so far is visible to readers; False on timeout. With
        a transient store pool: everything committed so far (a put becomes readable at the
        committer's next round)."""
        self._check_open()
        dispatcher = self._dispatcher
        if dispatcher is None:
            return True
        target = self._commitlog.max_offset
        dispatcher.wakeup()
        with dispatcher.changed:
            return (
                dispatcher.changed.wait_for(
                    lambda: dispatcher.dispatched_to >= target or dispatcher.failure is not None, timeout
                )
                and dispatcher.failure is None
            )

    def wait_for_message(self, topic: str, queue_id: int, offset: int, timeout: float) -> bool:
        """Block until the queue's max offset passes ``offset`` (a message at ``offset`` is readable)."""
        self._check_open()
        topic, queue_id, offset = (
            _str_arg("topic", topic),
            _int_arg("queue_id", queue_id),
            _int_arg("offset", offset),
        )
        dispatcher = self._dispatcher
        if self._follower is not None:
            return self._follower.wait_until(
                lambda: self.max_offset_in_queue(topic, queue_id) > offset, timeout
            )
        if dispatcher is None:
            return self.max_offset_in_queue(topic, queue_id) > offset
        self._settle()  # (not in the wait: a round notifies under the lock the wait holds)
        with dispatcher.changed:
            return dispatcher.changed.wait_for(lambda: self._max_offset(topic, queue_id) > offset, timeout)

    @property
    def dispatch_events(self) -> DispatchEvents:
        """What consumers wait on: changes whenever dispatch makes messages visible."""
        if self._follower is not None:
            return self._follower
        if self._writer_events is None:  # set with the dispatcher
            raise StoreClosedError(f"store {str(self.layout.root)!r} is not open")
        return self._writer_events

    @property
    def dispatch_behind_bytes(self) -> int:
        return self._dispatcher.behind_bytes if self._dispatcher is not None else 0

    # --- reading through queues ----------------------------------------------------------
    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int = 32,
        tags: str | Iterable[str] | None = None,
        *,
        transfer_limits: bool = True,
    ) -> GetMessageResult:
        """Read up to ``max_msgs`` messages of a queue from ``offset`` (RocketMQ's getMessage).

        ``tags``: None or ``"*"`` for all, ``"TagA || TagB"`` or a list of tags. A message
        matches when its tagsCode and its real tag both match. As in RocketMQ, one call
        returns at most ``max_transfer_count_on_message_in_memory`` messages and
        ``max_transfer_bytes_on_message_in_memory`` bytes, and reads within one
        consume-queue segment. ``transfer_limits=False`` lifts the first two (they bound what a
        pull copies onto the network; an in-process reader copies nothing): ``max_msgs`` only.
        """
        self._check_readable()
        del group  # accepted for RocketMQ's signature; consumer offsets are kept elsewhere
        return self._reader.get_message(
            _str_arg("topic", topic),
            _int_arg("queue_id", queue_id),
            _int_arg("offset", offset),
            _int_arg("max_msgs", max_msgs),
            tags,
            bool(transfer_limits),
        )

    def get_records(self, reads: Sequence[RecordRead], *, in_memory_only: bool = False) -> RecordsResult:
        """``get_message`` for many reads in one call, each answered with its records as they lie
        in the commitlog (no decoding, no re-encoding): what a broker copies into pull answers.
        Transfer limits apply as for ``get_message``; see ``RecordsResult``.

        ``in_memory_only``: for a caller that must not wait on the disk (an event loop). A read
        whose first record lies further back from the commitlog's end than RocketMQ takes to be
        in memory (40 % of physical memory, its accessMessageInMemoryMaxRatio) is not done: its
        status is None, for the caller to do on a thread of its own."""
        self._check_readable()
        checked = [
            RecordRead(
                _str_arg("topic", r.topic),
                _int_arg("queue_id", r.queue_id),
                _int_arg("offset", r.offset),
                _int_arg("max_msgs", r.max_msgs),
                None if r.tags is None else _str_arg("tags", r.tags),
            )
            for r in reads
        ]
        return self._reader.get_records(checked, in_memory_only)

    def read_batch(
        self, topic: str, queue_id: int, offset: int, max_count: int = 4096, *, bodies: bool = True
    ) -> MessageBatch:
        """Up to ``max_count`` consecutive messages of a queue from ``offset``, as columns (see
        ``MessageBatch``): for bulk readers (Spark, exports, ``tail``) that want no Python object
        per message. Reads within one consume-queue segment, like ``get_message``, and stops
        before a message whose record is gone (a batch starting on one is empty, and its
        ``next_offset`` steps over it); an offset below the queue's min starts at the min; at the
        end of the queue the batch is empty and ``next_offset`` stays."""
        self._check_readable()
        topic, queue_id = _str_arg("topic", topic), _int_arg("queue_id", queue_id)
        offset, max_count = _int_arg("offset", offset), _int_arg("max_count", max_count)
        return self._reader.read_batch(topic, queue_id, offset, max_count, bodies)

    # --- lookups ---------------------------------------------------------------------------
    def look_message_by_offset(self, physical_offset: int) -> MessageExt | None:
        """The message whose record starts at ``physical_offset``; None if there is none."""
        self._check_open()
        return self._reader.message_at(_int_arg("physical_offset", physical_offset))

    def view_message_by_id(self, msg_id: str) -> MessageExt | None:
        """The message with this offsetMsgId. Raises CorruptDataError for a malformed id."""
        _, _, offset = decode_offset_msg_id(msg_id)
        return self.look_message_by_offset(offset)

    def iter_query_message(
        self, topic: str, key: str, begin: int = 0, end: int | None = None
    ) -> Iterator[MessageExt]:
        """Every message of ``topic`` with KEYS ``key`` or UNIQ_KEY ``key`` stored in [begin, end],
        newest first. Index hash matches are checked against the real topic and key."""
        self._check_readable()
        topic, key, begin = _str_arg("topic", topic), _str_arg("key", key), _int_arg("begin", begin)
        if self._index is None:
            return
        stop = _MAX_TIME if end is None else _int_arg("end", end)
        yield from self._reader.query(topic, key, begin, stop)

    def query_message(
        self, topic: str, key: str, max_num: int | None = None, begin: int = 0, end: int | None = None
    ) -> list[MessageExt]:
        """Messages by key (see ``iter_query_message``): all of them, or the newest ``max_num``."""
        it = self.iter_query_message(topic, key, begin, end)
        if max_num is None:
            return list(it)
        return [m for _, m in zip(range(_int_arg("max_num", max_num)), it)]

    def query_by_uniq_key(self, topic: str, uniq_key: str) -> MessageExt | None:
        """The newest message of ``topic`` whose UNIQ_KEY is ``uniq_key``."""
        for msg in self.iter_query_message(topic, uniq_key):
            if msg.uniq_key == uniq_key:
                return msg
        return None

    # --- queue and log facts ---------------------------------------------------------------
    def offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """The first queue offset stored at or after ``timestamp`` (max offset if none)."""
        self._check_readable()
        timestamp = _int_arg("timestamp", timestamp)
        return self._reader.offset_by_time(
            _str_arg("topic", topic), _int_arg("queue_id", queue_id), timestamp
        )

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        self._check_readable()
        cq = self._queues.get(_str_arg("topic", topic), _int_arg("queue_id", queue_id))
        return cq.min_offset if cq is not None else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        self._check_readable()
        return self._max_offset(_str_arg("topic", topic), _int_arg("queue_id", queue_id))

    def _max_offset(self, topic: str, queue_id: int) -> int:
        cq = self._queues.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def earliest_message_time(self, topic: str | None = None, queue_id: int | None = None) -> int:
        """Store time of the oldest message of a queue, or of the whole log; -1 if none."""
        self._check_readable()
        return self._reader.earliest_message_time(
            topic if topic is None else _str_arg("topic", topic),
            _int_arg("queue_id", queue_id) if queue_id is not None else 0,
        )

    def min_phy_offset(self) -> int:
        self._check_open()
        return self._commitlog.min_offset

    def max_phy_offset(self) -> int:
        self._check_open()
        return self._commitlog.max_offset

    def topics(self) -> dict[str, list[int]]:
        """Every topic with a consume queue, and its queue ids."""
        self._check_readable()
        return self._queues.topics()

    @property
    def checkpoint(self) -> tuple[int, int, int]:
        """(physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp) as last loaded or written."""
        v = self._checkpoint.value
        return v.physic_msg_timestamp, v.logics_msg_timestamp, v.index_msg_timestamp

    def index_headers(self) -> list[tuple[str, dict[str, int]]]:
        """Each index file's name and header fields."""
        if self._index is None:
            return []
        return [
            (
                f.name,
                {
                    "beginTs": f.header.begin_timestamp,
                    "endTs": f.header.end_timestamp,
                    "beginPhyOffset": f.header.begin_phy_offset,
                    "endPhyOffset": f.header.end_phy_offset,
                    "hashSlotCount": f.header.hash_slot_count,
                    "indexCount": f.header.index_count,
                },
            )
            for f in self._index.files
        ]

    # --- topics and consumer offsets -------------------------------------------------------
    def create_topic(
        self, topic: str, queues: int | None = None, *, perm: int = 6, order: bool = False
    ) -> TopicConfig:
        """Create a topic (or change its queue count and permissions); ``config/topics.json``
        is rewritten at once."""
        self._check_writable("topic changes")
        count = self.config.default_topic_queue_nums if queues is None else _int_arg("queues", queues)
        return self._topics.create(validate_topic(topic), count, perm=perm, order=order)

    def create_topics(self, configs: Iterable[TopicConfig]) -> dict[str, RocketStoreError]:
        """``create_topic`` for each of ``configs`` (its read queues), ``config/topics.json``
        rewritten once for all; the ones refused, by name, with why (the others are made)."""
        self._check_writable("topic changes")
        refused: dict[str, RocketStoreError] = {}
        valid = []
        for config in configs:
            try:
                validate_topic(config.topic)
            except RocketStoreError as exc:
                refused[config.topic] = exc
            else:
                valid.append(config)
        refused.update(self._topics.create_many(valid))
        return refused

    def topics_version(self) -> int:
        """A number that grows at every change of the topic table (to notice one cheaply)."""
        self._check_open()
        return self._topics.version

    def delete_topic(self, topic: str) -> int:
        """Delete ``topic`` as mqadmin deleteTopic does: its consume queues with their files and
        its config; how many queues went. The commitlog keeps its records until they are
        reclaimed, and consumer offsets stay. Like RocketMQ, records of the topic newer than every
        remaining queue's are dispatched again at the next open (its queues come back)."""
        self._check_writable("topic changes")
        if topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
            raise StoreConfigError(f"{topic} holds the delayed messages: it cannot be deleted")
        self.wait_dispatched()
        removed = self._queues.delete_topic(topic)
        self._topics.delete(topic)
        table = self._commitlog.topic_queue_table
        for key in [k for k in table if k[0] == topic]:
            del table[key]
        return removed

    def topic_configs(self) -> dict[str, TopicConfig]:
        """Every known topic's configuration (from topics.json, creation, or queues on disk)."""
        self._check_open()
        return self._topics.all()

    def topic_config(self, topic: str) -> TopicConfig | None:
        """``topic``'s configuration, None when it is not known (``topic_configs`` for one topic,
        without copying them all: a broker asks on every send)."""
        self._check_open()
        return self._topics.get(topic)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Remember where ``group`` is in a queue (written to consumerOffset.json periodically
        and at close). InvalidArgumentError, naming it, for a queue id outside 0..65535 or an
        offset outside 0..2^63-1; StoreConfigError for a name that is not a group's or topic's."""
        self._check_writable("offset commits")
        self._offsets.commit(
            _str_arg("group", group),
            _str_arg("topic", topic),
            _int_arg("queue_id", queue_id),
            _int_arg("offset", offset),
        )

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The offset ``group`` committed for a queue, -1 if none."""
        self._check_open()
        return self._offsets.query(
            _str_arg("group", group), _str_arg("topic", topic), _int_arg("queue_id", queue_id)
        )

    def consumer_offsets(self) -> dict[tuple[str, str], dict[int, int]]:
        """(topic, group) -> {queue id: committed offset}."""
        self._check_open()
        return self._offsets.table()

    def consumer(self, group: str, subscription: Mapping[str, str | None] | str, **options: Any) -> Consumer:
        """A ``Consumer`` of ``group`` over this store (options: see ``rocketstore.consumer``)."""
        from rocketstore.consumer import Consumer

        return Consumer(self, group, subscription, **options)

    # --- reclaiming and delayed delivery ---------------------------------------------------
    def reclaim(self, *, manual: bool = True) -> ReclaimReport:
        """Run one reclamation round now (STORE.md §9) and say what it did. ``manual`` arms the
        manual trigger first, for this round and the next ones (RocketMQ's
        executeDeleteFilesManually); ``manual=False`` runs exactly what the periodic round would."""
        self._check_writable("reclaims")
        assert self._cleaner is not None  # started by every open that is not read-only
        if manual:
            self._cleaner.request_delete()
        return self._cleaner.reclaim()

    @property
    def disk_full(self) -> bool:
        return self._cleaner is not None and self._cleaner.disk_full

    def delay_progress(self) -> dict[int, tuple[int, int]]:
        """Per delay level with messages: (next offset to deliver, max offset of its queue)."""
        self._check_open()
        result = {}
        for topic_queue in self._queues:
            if topic_queue.topic == SCHEDULE_TOPIC:
                level = topic_queue.queue_id + 1
                done = self._scheduler.offsets.get(level, 0)
                result[level] = (max(done, topic_queue.min_offset), topic_queue.max_offset)
        return dict(sorted(result.items()))

    def copy_delay_offsets(self, offsets: Mapping[int, int]) -> None:
        """A slave's copy of its master's delay progress (delay level -> queue offset of the next
        message to deliver), written to delayOffset.json in place of its own, as a RocketMQ slave
        writes the file (SlaveSynchronize): restarted as a master, it delivers from there.
        InvalidArgumentError for a store that delivers delayed messages itself (not a slave), a
        level outside 1..``max_delay_level`` or a negative offset; nothing is changed then."""
        self._check_writable("delay offset copies")
        if not self._is_slave:
            raise InvalidArgumentError("only a SLAVE store takes its master's delay offsets")
        table: dict[int, int] = {}
        for level, offset in offsets.items():
            level, offset = _int_arg("delay level", level), _int_arg("delay offset", offset)
            if not 1 <= level <= self.config.max_delay_level or offset < 0:
                raise InvalidArgumentError(
                    f"delay level {level} offset {offset}: levels are 1..{self.config.max_delay_level}, "
                    "offsets 0 or more"
                )
            table[level] = offset
        if table != self._scheduler.offsets:
            self._scheduler.offsets = table
            self._scheduler.persist()

    def timer_status(self) -> dict[str, int]:
        """Timer messages (docs/timers.md): ``pending`` (not yet delivered), of which
        ``not_enqueued`` are stored but not yet in the wheel; ``read_time_ms``, before which every
        timer was delivered (0 before the first delivery round); ``precision_ms``; what the
        open's recovery cut from the timer log (bytes) and emptied in the wheel (slots)."""
        self._check_open()
        return self._timers.status()

    # --- runtime statistics ------------------------------------------------------------------
    def runtime_info(self) -> dict[str, object]:
        """The store's state, like RocketMQ's brokerStatus (its key names where it has them).
        TPS figures are per second over the last 10 s, 1 min and 10 min."""
        self._check_open()
        rates = self._stats.rates()
        commitlog = self._commitlog
        last = commitlog.files.last
        flushed = commitlog.files.flushed_where
        committed = last.from_offset + last.committed_position if last is not None else 0
        cq_root = self.layout.consume_queue if self.layout.consume_queue.exists() else self.layout.root
        info: dict[str, object] = {
            "bootTimestamp": self._stats.boot_ms,
            "runtimeMillis": self._clock.now_ms() - self._stats.boot_ms,
            "putTps": rates["put"],
            "getFoundTps": rates["get_found"],
            "getMissTps": rates["get_miss"],
            "getTransferedTps": rates["get_transferred"],
            **self._stats.totals(),
            "commitLogDiskRatio": round(self._disk_usage(commitlog.files.directory), 4),
            "consumeQueueDiskRatio": round(self._disk_usage(cq_root), 4),
            "commitLogMinOffset": commitlog.min_offset,
            "commitLogMaxOffset": commitlog.max_offset,
            "dispatchBehindBytes": self.dispatch_behind_bytes,
            "remainHowManyDataToCommit": max(0, commitlog.max_offset - committed) if self._pool else 0,
            "remainHowManyDataToFlush": max(0, commitlog.max_offset - flushed),
            "earliestMessageTimeStamp": self.earliest_message_time(),
            "pageCacheLockTimeMills": int(lock_held_ms(self._commitlog, self._clock)),
            "remainTransientStoreBufferNumbs": self._pool.available if self._pool is not None else 0,
            "diskFull": self.disk_full,
            "abnormalShutdownDetected": self.abnormal_shutdown_detected,
            "readonly": self.readonly,
            "failure": repr(self._state.failure) if self._state.failure is not None else None,
            "timerPending": self._timers.status()["pending"],
            "delayedPending": {lvl: hi - lo for lvl, (lo, hi) in self.delay_progress().items() if hi > lo},
        }
        return info

    def __repr__(self) -> str:
        return f"MessageStore({str(self.layout.root)!r}{', readonly' if self.readonly else ''})"


def _int_arg(name: str, value: object) -> int:
    """``value``, an argument that must be an int (a numpy int passes; a bool, float or str is
    refused, rather than finding no queue). One type check for the usual int."""
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        raise InvalidArgumentError(f"{name} must be an int, not {type(value).__name__} {value!r}")
    return operator.index(value)


def _str_arg(name: str, value: object) -> str:
    if type(value) is not str:
        raise InvalidArgumentError(f"{name} must be a str, not {type(value).__name__} {value!r}")
    return value
