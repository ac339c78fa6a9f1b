"""Following a store that another process writes: the writer publishes, read-only opens follow.

The writer publishes its dispatch progress in the signal file (``codec.dispatch_signal``) after
every dispatch pass: every record below ``dispatched_to`` is in the commitlog whole and has its
consume-queue entry and index entries. A read-only store (``StoreFollower``) trusts exactly
that: its commitlog ends at ``dispatched_to``; a consume-queue entry is served only when it is
well formed, follows the previous one in the log, and its record ends at or below
``dispatched_to`` (an entry past it may be half written); index files are re-read as their
headers grow and new ones appear. Nothing here writes a byte of the store.

A new ``generation`` (a writer opened the store again, after a crash maybe) resynchronises:
the log view is cut back if the writer's recovery cut the log, queues drop entries past the new
end and are extended again from there, and the index files are listed anew.

Waiting (``StoreFollower.wait_until``) sleeps in the kernel until the writer rewrites the signal
file: the writer publishes with pwrite, which raises an inotify event (``storage.file_watch``),
and one waiting thread of the process at a time watches for it while the others wait on a
condition it notifies; a publication wakes them within tens of microseconds, an idle follower
costs nothing but a wake-up every ``_WATCH_BACKSTOP_S``. Where inotify is not available the
waiters poll the signal with a sleep that grows from 50 us to ``_MAX_PAUSE`` while nothing
changes.

Without a live writer (no process holds the store lock), a read-only open keeps what recovery
found, as before; it starts following when a writer publishes.
"""

from __future__ import annotations

import dataclasses
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rocketstore.codec import index_layout
from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE, PRE_BLANK_SIZE, decode_entries
from rocketstore.codec.dispatch_signal import (
    SIGNAL_SIZE,
    DispatchSignal,
    SignalGeometry,
    decode_geometry,
    decode_signal,
    encode_header,
    encode_progress,
    encode_queue_changes,
)
from rocketstore.commitlog import CommitLog
from rocketstore.config import StoreConfig
from rocketstore.consume_queue import ConsumeQueue, ConsumeQueueSet
from rocketstore.errors import RocketStoreError
from rocketstore.index import IndexFile, IndexService
from rocketstore.message import TOPIC_PATTERN
from rocketstore.recovery import RecoveryReport
from rocketstore.storage.file_watch import FileWatch
from rocketstore.storage.map_cache import MapCache
from rocketstore.storage.mapped_file import MappedFile
from rocketstore.storage.paths import (
    StoreLayout,
    is_index_name,
    list_store_dir,
    open_store_file,
    parse_queue_id,
    segment_files,
    segment_name,
    store_dir_exists,
)
from rocketstore.store_lock import lock_holder

__all__ = ["DispatchEvents", "FollowedQueues", "SignalWriter", "StoreFollower", "WriterEvents"]

log = logging.getLogger(__name__)
_MIN_PAUSE = 50e-6
_MAX_PAUSE = 500e-6
# a watching waiter looks at the signal at least this often: a missed event (a file system that
# raises none, a watch on a file replaced since) costs this much latency, never a hang
_WATCH_BACKSTOP_S = 0.05
_RETRY_OPEN_S = 0.1  # how often a follower looks for a signal file that is not there yet
_RESCAN_S = 1.0  # how often a follower lists the commitlog directory for reclaimed segments


class SignalWriter:
    """The writer's side of the signal file: created (or reused, so followers keep their
    mapping and the last writer's publication until this one's first) at open with a fresh
    generation, rewritten after every dispatch pass. Written with
    pwrite, not through a mapping: followers map the same page cache, and a write(2) raises the
    inotify event their waiters sleep on. The header carries the writer's geometry (``config``'s),
    so a follower that found no files at open maps the ones the writer then makes at their size."""

    def __init__(self, path: Path, config: StoreConfig, queue_changes: Callable[[], int]) -> None:
        self.path = path
        self._queue_changes = queue_changes  # ConsumeQueueSet.changes: published when it changed
        self._published_changes: int | None = None  # the file's may be the last writer's
        geometry = SignalGeometry(
            config.commitlog_segment_size,
            config.consume_queue_entries,
            config.index_hash_slots,
            config.index_max_entries,
        )
        self.generation = int.from_bytes(os.urandom(8), "little") >> 1
        self._sequence = 0
        fd = self._fd = open_store_file(path, writable=True, create_mode=config.file_mode)
        try:
            if os.fstat(fd).st_size != SIGNAL_SIZE:
                os.ftruncate(fd, 0)  # whatever it held is no publication
                os.ftruncate(fd, SIGNAL_SIZE)
            for pos, data in encode_header(geometry):
                os.pwrite(fd, data, pos)
        except BaseException:
            os.close(fd)
            raise

    def publish(self, dispatched_to: int) -> None:
        changes = self._queue_changes()
        if changes != self._published_changes:
            pos, data = encode_queue_changes(changes)
            os.pwrite(self._fd, data, pos)
            self._published_changes = changes
        self._sequence += 1
        pos, data = encode_progress(self.generation, dispatched_to, self._sequence)
        os.pwrite(self._fd, data, pos)

    def close(self) -> None:
        os.close(self._fd)


class _SignalReader:
    """The follower's side: the file mapped read-only once it exists."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mm: mmap.mmap | None = None
        self._next_try = 0.0

    def raw(self) -> bytes:
        mm = self._mm
        if mm is None:
            now = time.monotonic()
            if now < self._next_try:
                return b""
            self._next_try = now + _RETRY_OPEN_S
            mm = self._mm = _map_readonly(self.path)
            if mm is None:
                return b""
        return mm[:SIGNAL_SIZE]

    def read(self) -> DispatchSignal | None:
        for _ in range(1000):  # a publication is 32 bytes: a torn read is rare and brief
            data = self.raw()
            if not data:
                return None
            signal = decode_signal(data)
            if signal is not None:
                return signal
            if data[:4] != b"RSDS":
                return None
        return None

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None


def _map_readonly(path: Path) -> mmap.mmap | None:
    """The signal file mapped, None while it is missing or short; StorePathError when something
    else stands there."""
    try:
        fd = open_store_file(path)
    except FileNotFoundError:
        return None
    try:
        if os.fstat(fd).st_size < SIGNAL_SIZE:
            return None
        return mmap.mmap(fd, SIGNAL_SIZE, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


class DispatchEvents:
    """What a consumer waits on: ``position()`` changes whenever dispatch made messages visible;
    ``wait(position, timeout)`` blocks until it differs from ``position`` (True) or times out.
    ``queue_set()`` changes whenever a consume queue was made or deleted (None: not known, a
    writer that does not say)."""

    def position(self) -> int:
        raise NotImplementedError

    def queue_set(self) -> int | None:
        raise NotImplementedError

    def wait(self, position: int, timeout: float) -> bool:
        raise NotImplementedError

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None] | None:
        """Have ``listener()`` called on the thread that makes each change, as it makes it (it
        must not block nor call the store), and return what unsubscribes it; None where this
        process does not make the changes (a follower's come from its writer: ``wait``)."""
        return None


class WriterEvents(DispatchEvents):
    """In the writing process: the dispatcher's condition, notified after every pass, and its
    listeners."""

    def __init__(
        self,
        dispatched_to: Callable[[], int],
        changed: threading.Condition,
        queue_changes: Callable[[], int],
        subscribe: Callable[[Callable[[], None]], Callable[[], None]],
    ) -> None:
        self._dispatched_to = dispatched_to
        self._changed = changed
        self._queue_changes = queue_changes
        self._subscribe = subscribe

    def position(self) -> int:
        return self._dispatched_to()

    def queue_set(self) -> int | None:
        return self._queue_changes()

    def wait(self, position: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._dispatched_to() != position, timeout)

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None] | None:
        return self._subscribe(listener)


class StoreFollower(DispatchEvents):
    """Keeps a read-only store's commitlog and index views up to what the writer published;
    ``FollowedQueues`` extends each queue on first use after a change. ``refresh`` is cheap when
    nothing changed (one 64-byte read of a mapping) and never raises for a race with the writer.

    Thread safety: refreshes are serialized on a lock; readers keep reading lock-free (lists of
    segments and files are replaced, never changed in place).
    """

    def __init__(
        self,
        layout: StoreLayout,
        commitlog: CommitLog,
        index: IndexService | None,
        map_cache: MapCache | None = None,
    ) -> None:
        self._layout = layout
        self._commitlog = commitlog
        self._index = index
        self._map_cache = map_cache  # for the index files it opens, as the store's own
        self._signal = _SignalReader(layout.dispatch_signal)
        self._lock = threading.Lock()
        self._raw = b""
        self._generation: int | None = None
        # the writer's geometry, once its signal file gave it (see ``_adopt_geometry``)
        self.geometry: SignalGeometry | None = None
        self.dispatched_to = 0
        # bumped whenever queues may have grown; ``resync_from`` (a log offset) when they may have
        # been cut (a new writer generation): queues drop entries past it before extending
        self.version = 0
        self.resync_from: int | None = None
        self.resync_version = 0
        # the writer's queue changes as last published (0: not counted), and a number bumped
        # whenever they (or the writer) changed: queues may have been made or deleted
        self.queue_changes = 0
        self.queue_set_version = 0
        self._next_rescan = 0.0
        # waiting: one thread at a time watches the signal file, the others wait on ``_woken``,
        # which it notifies (bumping ``_wakeups``) whenever its watch returns
        self._watch: FileWatch | None = None
        self._watch_tried = False
        self._woken = threading.Condition()
        self._watching = False
        self._wakeups = 0
        self._closed = False
        # bumped at every rescan (``_RESCAN_S``): queues then look for segments the writer reclaimed,
        # which it deletes after the commitlog's and whether or not it writes meanwhile
        self.reclaim_check = 0

    # --- following ------------------------------------------------------------------------
    def attach(self, report: RecoveryReport) -> RecoveryReport:
        """After read-only recovery: with a live writer, trust only what it published. Returns
        the report to show: what recovery saw past the published end is the writer's work in
        progress (a record or queue entry being copied in), not damage."""
        self.dispatched_to = report.end_offset
        signal = self._signal.read()
        if signal is None or lock_holder(self._layout.lock) is None:
            if signal is not None:
                self._generation = signal.generation
            self._raw = self._signal.raw()
            return report
        self._apply(signal)
        if report.end_offset < signal.dispatched_to:
            return report  # damage inside what the writer published: real
        return dataclasses.replace(
            report,
            stop="writer_live",
            damage=None,
            segments_deleted=0,
            bytes_cut=0,
            queue_bytes_damaged=0,
            queue_entries_dropped=0,
        )

    def refresh(self) -> None:
        raw = self._signal.raw()
        if raw == self._raw and time.monotonic() < self._next_rescan:
            return
        if not self._lock.acquire(blocking=False):
            return  # another thread is refreshing: this read sees the state before it
        try:
            now = time.monotonic()
            if now >= self._next_rescan:
                self._next_rescan = now + _RESCAN_S
                self._drop_reclaimed()
                self.reclaim_check += 1
            if raw != self._raw:
                signal = self._signal.read()
                if signal is not None:
                    self._apply(signal)
                self._raw = raw
        except (OSError, ValueError, RocketStoreError) as exc:
            # a file replaced or removed under us by the writer: the next refresh tries again
            log.debug("follower refresh deferred: %s", exc)
        finally:
            self._lock.release()

    def _apply(self, signal: DispatchSignal) -> None:
        end = signal.dispatched_to
        self._adopt_geometry()
        if signal.generation != self._generation or end < self.dispatched_to:
            if self._generation is not None:
                log.info("the store's writer reopened it: following from commitlog offset %d", end)
            self._generation = signal.generation
            self._cut_log(end)
            if self._index is not None:
                self._relist_index()
            self.resync_from = end
            self.resync_version = self.version + 1
            self.queue_set_version += 1
        if signal.queue_changes != self.queue_changes:
            self.queue_changes = signal.queue_changes
            self.queue_set_version += 1
        self._extend_log(end)
        self.dispatched_to = end
        if self._index is not None:
            self._refresh_index()
        self.version += 1

    def _adopt_geometry(self) -> None:
        """The writer's geometry for the kinds of file this store had none of at open: a store
        opened before its first message took the configured sizes (``fit_geometry``), which the
        writer's files need not have. Kinds with files keep theirs: they were measured."""
        geometry = decode_geometry(self._signal.raw())
        if geometry is None or geometry == self.geometry:
            return
        self.geometry = geometry
        files = self._commitlog.files
        if not files.files:
            files.file_size = geometry.commitlog_segment_size
        index = self._index
        if index is not None and not index.files:
            index.hash_slots, index.max_entries = geometry.index_hash_slots, geometry.index_max_entries

    # --- commitlog --------------------------------------------------------------------------
    def _cut_log(self, end: int) -> None:
        files = self._commitlog.files
        if end < files.max_offset:
            files.truncate(end)

    def _extend_log(self, end: int) -> None:
        mfq = self._commitlog.files
        size = mfq.file_size
        files = list(mfq.files)
        if not files:
            files = [
                _map(path, size) for offset, path in segment_files(mfq.directory) if offset < max(end, 1)
            ]
            if not files:
                return
        while files[-1].from_offset + size < end:
            path = mfq.directory / segment_name(files[-1].from_offset + size)
            if not path.exists():
                log.warning("the writer published offset %d but %s does not exist", end, path.name)
                break
            files.append(_map(path, size))
        for mf in files[:-1]:
            mf.wrote_position = size
        last = files[-1]
        last.wrote_position = max(0, min(size, end - last.from_offset))
        if len(files) != len(mfq.files) or files[0] is not mfq.files[0]:
            mfq.files = files
        mfq.limit_tail_readahead()

    def _drop_reclaimed(self) -> None:
        """Forget commitlog segments the writer reclaimed (their mappings stay valid for readers
        that hold them)."""
        mfq = self._commitlog.files
        files = mfq.files
        gone = 0
        while gone < len(files) - 1 and not files[gone].path.exists():
            gone += 1
        if gone:
            # not closed: a reader may still hold a view; the mapping goes with the last one
            mfq.files = files[gone:]

    # --- index ------------------------------------------------------------------------------
    def _refresh_index(self) -> None:
        index = self._index
        assert index is not None
        files = index.files
        if files:
            _reread_header(files[-1])
        if not files or files[-1].is_full:
            newer = [p for p in _index_paths(index.directory) if not files or p.name > files[-1].name]
            added = [self._open_index(p) for p in newer]
            if added:
                for f in files[-1:]:
                    _reread_header(f)
                index.files = [*files, *added]

    def _relist_index(self) -> None:
        index = self._index
        assert index is not None
        paths = _index_paths(index.directory)
        # the old files are not closed: a lookup may still walk one; each mapping goes with its last user
        index.files = [self._open_index(p) for p in paths]

    def _open_index(self, path: Path) -> IndexFile:
        index = self._index
        assert index is not None
        return IndexFile(path, index.hash_slots, index.max_entries, readonly=True, map_cache=self._map_cache)

    # --- waiting ----------------------------------------------------------------------------
    def position(self) -> int:
        self.refresh()
        return self.version

    def queue_set(self) -> int | None:
        self.refresh()
        return self.queue_set_version if self.queue_changes else None

    def wait(self, position: int, timeout: float) -> bool:
        return self.wait_until(lambda: self.position() != position, timeout)

    def wait_until(self, ready: Callable[[], bool], timeout: float) -> bool:
        """Block until ``ready()`` (it refreshes what it reads) or ``timeout`` seconds pass."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            # read before ready(): whatever ready() saw is at least this version, so a change
            # applied since, by this thread or another, shows as a different version; and a
            # wake-up counted since happened after this check
            seen = self.version
            wakeups = self._wakeups
            if ready():
                return True
            pause = _MIN_PAUSE
            while True:
                now = time.monotonic()
                if now >= deadline or self._closed:
                    return ready()
                # a publication not applied yet, or one another thread applied meanwhile
                if self._signal.raw() != self._raw or self.version != seen:
                    break
                watch = self._watch if self._watch_tried else self._open_watch()
                if watch is None:
                    time.sleep(min(pause, deadline - now))
                    pause = min(2 * pause, _MAX_PAUSE)
                    continue
                self._sleep_until_written(watch, wakeups, min(deadline - now, _WATCH_BACKSTOP_S))
                wakeups = self._wakeups

    def _open_watch(self) -> FileWatch | None:
        """The watch on the signal file, once it exists (polling until then)."""
        with self._woken:
            if not self._watch_tried and not self._closed and self._signal.raw():
                self._watch_tried = True
                self._watch = FileWatch.open(self._signal.path)
            return self._watch

    def _sleep_until_written(self, watch: FileWatch, wakeups: int, timeout: float) -> None:
        """Sleep until the writer rewrote the signal file after ``wakeups`` was read, or
        ``timeout``. The watching thread consumes the file's events; the others wait for it to
        say so, and one that comes after it did sees ``_wakeups`` moved and does not sleep."""
        with self._woken:
            if self._wakeups != wakeups or self._closed:
                return
            if self._watching:
                self._woken.wait(timeout)
                return
            self._watching = True
        try:
            watch.wait(timeout)
        finally:
            with self._woken:
                self._watching = False
                self._wakeups += 1
                self._woken.notify_all()
                if self._closed:
                    watch.close()

    def close(self) -> None:
        with self._woken:
            self._closed = True
            if self._watch is not None and not self._watching:
                self._watch.close()  # a watching thread closes it when its wait returns
            self._woken.notify_all()
        self._signal.close()


class FollowedQueues(ConsumeQueueSet):
    """The consume queues of a followed store: a queue is extended (or, after a new writer
    generation, cut back and extended) the first time it is asked for after the follower saw a
    change; queues that appeared since are opened when first asked for.

    With a ``map_cache`` (the store's), queue segments are mapped only while used, like a
    writer's: a follower of many queues stays under the same bound. Segments it drops from a
    queue's list (reclaimed by the writer) are not closed, since a reader may hold a view; the
    cache parks them in their turn, and a parked one is never mapped again."""

    def __init__(
        self, root: Path, entries_per_file: int, follower: StoreFollower, map_cache: MapCache | None = None
    ) -> None:
        super().__init__(root, entries_per_file, readonly=True, map_cache=map_cache)
        self._follower = follower
        self._seen: dict[tuple[str, int], int] = {}
        self._resynced: dict[tuple[str, int], int] = {}
        self._reclaim_checked: dict[tuple[str, int], int] = {}
        self._log_min_seen: dict[tuple[str, int], int] = {}
        self._missing: dict[tuple[str, int], int] = {}
        self._listed: tuple[bool, int] | None = None
        # extending a queue maps segments and replaces its list: one thread at a time does it
        self._extending = threading.Lock()

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        key = (topic, queue_id)
        follower = self._follower
        version = follower.version
        cq = self._queues.get(key)
        if (
            cq is not None
            and self._seen.get(key) == version
            and self._reclaim_checked.get(key) == follower.reclaim_check
        ):
            return cq  # the usual case: nothing changed since this queue was last brought up to date
        with self._extending:
            return self._bring_up_to_date(key, cq, version)

    def _bring_up_to_date(
        self, key: tuple[str, int], cq: ConsumeQueue | None, version: int
    ) -> ConsumeQueue | None:
        topic, queue_id = key
        if cq is None:
            cq = self._queues.get(key)  # another thread may have mapped it meanwhile
        if cq is None:
            if self._missing.get(key) == version:
                return None
            self._missing[key] = version
            try:
                cq = self._discover(topic, queue_id)
            except (OSError, ValueError, RocketStoreError) as exc:
                log.debug("queue %s/%d not mapped now: %s", topic, queue_id, exc)
                return None
            if cq is None:
                return None
        if self._seen.get(key) != version or self._reclaim_checked.get(key) != self._follower.reclaim_check:
            try:
                self._follow(key, cq)
            except (OSError, ValueError, RocketStoreError) as exc:
                log.debug("queue %s/%d not extended now: %s", topic, queue_id, exc)
            else:
                self._seen[key] = version
        return cq

    def topics(self) -> dict[str, list[int]]:
        follower = self._follower
        # a writer that counts its queues says when to look again; for another, every change
        listed = (True, follower.queue_set_version) if follower.queue_changes else (False, follower.version)
        if self._listed != listed:
            self._listed = listed
            # what load() refused at open cannot appear here unnoticed: only real directories
            # named by a topic and a queue id are followed
            for topic_dir in list_store_dir(self.root):
                if not topic_dir.is_dir or not TOPIC_PATTERN.fullmatch(topic_dir.name):
                    continue
                for queue_dir in list_store_dir(topic_dir.path):
                    queue_id = parse_queue_id(queue_dir.name)
                    if (
                        queue_id is not None
                        and queue_dir.is_dir
                        and (topic_dir.name, queue_id) not in self._queues
                    ):
                        self.get(topic_dir.name, queue_id)
        return super().topics()

    def _discover(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        directory = self.root / topic / str(queue_id)
        if not store_dir_exists(directory):
            return None
        segments = segment_files(directory)
        if not segments:
            return None
        # a queue first seen now was made by the writer: with its geometry, once it published one
        geometry = self._follower.geometry
        entries = geometry.consume_queue_entries if geometry is not None else self.entries_per_file
        cq = ConsumeQueue(topic, queue_id, directory, entries, readonly=True, map_cache=self._map_cache)
        # the first segment only, nothing of it trusted yet: _follow reads on from there
        first = _map(segments[0][1], cq.files.file_size, self._map_cache)
        first.wrote_position = 0
        cq.files.files = [first]
        cq.min_logic_offset = first.from_offset
        self._queues = {**self._queues, (topic, queue_id): cq}
        return cq

    def _follow(self, key: tuple[str, int], cq: ConsumeQueue) -> None:
        follower = self._follower
        if follower.resync_from is not None and self._resynced.get(key, 0) < follower.resync_version:
            cq.truncate_after(follower.resync_from)
            self._resynced[key] = follower.resync_version
        _extend_queue(cq, follower.dispatched_to)
        check = follower.reclaim_check
        if self._reclaim_checked.get(key) != check:
            _drop_reclaimed_segments(cq)
            # entries below the log's min point at reclaimed records: one scan per move of the min
            commitlog_min = follower._commitlog.min_offset
            if commitlog_min > 0 and self._log_min_seen.get(key) != commitlog_min:
                cq.correct_min_offset(commitlog_min)
                self._log_min_seen[key] = commitlog_min
            self._reclaim_checked[key] = check


def _drop_reclaimed_segments(cq: ConsumeQueue) -> None:
    """Forget the queue's oldest segments that the writer deleted (one stat per queue and
    rescan while none is): a parked one could not be mapped again, and nothing below the first
    remaining segment is served."""
    files = cq.files.files
    gone = 0
    while gone < len(files) - 1 and not files[gone].path.exists():
        gone += 1
    if gone:
        cq.files.files = files[gone:]
        cq.min_logic_offset = max(cq.min_logic_offset, files[gone].from_offset)


def _extend_queue(cq: ConsumeQueue, end: int) -> None:
    """Serve the entries after the queue's end that are trustworthy: well formed, in log order
    after the previous one, and pointing at a record that ends at or below ``end``. Reads a
    chunk that doubles while every entry of it is good, so the cost follows the growth."""
    _extend_entries(cq, end)
    cq.files.limit_tail_readahead()


def _extend_entries(cq: ConsumeQueue, end: int) -> None:
    files = cq.files
    size = files.file_size
    pos = files.max_offset
    prev_end = cq.max_physical_offset
    chunk = 64
    while True:
        mf = files.find(pos)
        if mf is None or pos - mf.from_offset >= size:
            if pos % size:
                return
            path = files.directory / segment_name(pos)
            if not path.exists():
                return
            mf = _map(path, size, cq.files.map_cache)
            mf.wrote_position = 0
            files.files = [*files.files, mf]
        local = pos - mf.from_offset
        stop = min(size, local + chunk * CQ_ENTRY_SIZE)
        mf.check_intact(stop)
        entries = decode_entries(mf.buf[local:stop])
        offsets = entries["offset"].astype(np.int64)
        sizes = entries["size"].astype(np.int64)
        del entries
        pre_blank = (offsets == 0) & (sizes == PRE_BLANK_SIZE)
        ends = np.where(pre_blank, -1, offsets + sizes)
        starts_after = np.empty(len(offsets), dtype=np.int64)
        starts_after[:1] = prev_end
        starts_after[1:] = np.maximum.accumulate(ends)[:-1] if len(ends) > 1 else ends[:0]
        good = pre_blank | ((offsets >= 0) & (sizes > 0) & (ends <= end) & (offsets >= starts_after))
        bad = np.flatnonzero(~good)
        n = int(bad[0]) if len(bad) else len(good)
        if n:
            real = np.flatnonzero(~pre_blank[:n])
            if len(real):
                prev_end = int(ends[real[-1]])
                cq.max_physical_offset = prev_end
            mf.wrote_position = local + n * CQ_ENTRY_SIZE
        if n < len(good) or n == 0:
            return
        pos = mf.from_offset + mf.wrote_position
        chunk *= 2


def _index_paths(directory: Path) -> list[Path]:
    """The index files of ``directory``, oldest first (names are times)."""
    return [e.path for e in list_store_dir(directory) if e.is_file and is_index_name(e.name)]


def _map(path: Path, size: int, map_cache: MapCache | None = None) -> MappedFile:
    mf = MappedFile(path, size, readonly=True, cache=map_cache)
    mf.wrote_position = mf.flushed_position = size
    return mf


def _reread_header(f: IndexFile) -> None:
    """The header as the writer last wrote it; a count never goes back (a torn read of the
    40 bytes could mix two writes: each field is whole, and the count only grows)."""
    header = index_layout.decode_header(f.buf)
    count = max(f.header.index_count, min(header.index_count, f.max_entries))
    header.index_count = count
    f.header = header
