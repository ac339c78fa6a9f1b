"""TimerService: timer messages through the wheel (TIMER.md §6-10), one background loop.

Each round, with ``write_ms`` = now rounded down to the precision (never moving back):

1. **Dequeue**: every slot before ``write_ms`` not yet read is delivered, oldest first, a whole
   slot before the next: its units are read from the timer log (the chain backwards, then in
   enqueue order), delete units first; each timer goes to its real topic and queue (or, when it
   only waited in a nearer slot, back into ``rmq_sys_wheel_timer`` to wait again: a roll).
   A slot whose put is refused is finished next round, from where it stopped.
2. **Enqueue**: the ``rmq_sys_wheel_timer`` queue 0 entries after the enqueue progress are
   read; a timer whose slot is before ``write_ms`` is delivered at once, any other gets a unit
   appended to the timer log and its slot relinked.
3. **Flush**, every ``timer_flush_interval``: timer log, wheel, ``config/timercheck`` (read
   time, timer log end, enqueue progress), ``config/timermetrics``.

Doing both halves in one thread keeps RocketMQ's ordering without its latches: a slot is read
only once every timer dispatched before its end was enqueued. A slot T holds timers asked for
(T, T + precision] and is read when now >= T + precision: never early.

Crash (``recover``, at open, after dispatch caught up): the timer log is scanned from the
checkpoint's flushed position to its last whole unit and truncated there; slots pointing past
it are emptied, and every unit scanned is linked into its slot when it is not already. Enqueue
resumes after the queue offset of the last unit's record (or the checkpoint's, if later); the
read resumes at the checkpoint's read time, and slots missed while the store was closed are
read at once, however long that was (one pass over the wheel finds them). Timers delivered after
the last checkpoint are delivered again: a duplicate, never a loss.

Memory: no per-timer state for pending timers. While a due slot is delivered, its chain is held
as its units' timer log offsets (8 bytes a unit: 8 MB for a slot of a million timers) and the
units and their records are read 256 at a time; the cancels of the slot are kept as a set of keys.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rocketstore.clock import Clock
from rocketstore.codec.commitlog_record import SYSFLAG_CONTENT
from rocketstore.codec.java_hash import java_hash
from rocketstore.commitlog import CommitLog
from rocketstore.config import StoreConfig
from rocketstore.consume_queue import ConsumeQueueSet
from rocketstore.errors import CorruptDataError, InvalidMessageError
from rocketstore.message import (
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    PROPERTY_UNIQ_KEY,
    TIMER_TOPIC,
    Message,
    MessageExt,
)
from rocketstore.results import PutMessageResult, PutStatus
from rocketstore.schedule import real_destination
from rocketstore.service import BackgroundService, FailureHandler
from rocketstore.storage.mapped_file import MappedFile
from rocketstore.storage.paths import StoreLayout, store_file_exists
from rocketstore.timer.timercheck import TimerCheckpoint, TimerProgress
from rocketstore.timer.timerlog import (
    BLANK_SIZE,
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    UNIT_SIZE,
    TimerLog,
    TimerUnit,
)
from rocketstore.timer.timermetrics import TimerMetrics
from rocketstore.timer.timerwheel import TimerWheel

__all__ = ["TimerFlushService", "TimerService", "timer_paths"]

log = logging.getLogger(__name__)

Put = Callable[[Sequence[Message]], list[PutMessageResult]]
FindCopy = Callable[[str, str], "MessageExt | None"]  # (topic, UNIQ_KEY) -> the newest such message
_READ_AHEAD = 256  # queue entries read per step of the enqueue
_ENQUEUE_PER_ROUND = 20_000  # entries enqueued per round at most: the dequeue is never starved
_PUT_CHUNK = 256  # timers of a slot put per call
_CATCH_UP_SLOTS = 1024  # beyond this many unread slots, find the non-empty ones in one pass
_LONG_MAX = (1 << 63) - 1
_RELINK_BACK = 16  # units before the flushed position relinked at recovery
_RECLAIM_INTERVAL_MS = 30_000  # RocketMQ's timer log cleanup period


def timer_paths(layout: StoreLayout) -> tuple[Path, Path, Path, Path]:
    """(timerwheel, timerlog directory, timercheck, timermetrics) of a store (TIMER.md §5)."""
    return (
        layout.root / "timerwheel",
        layout.root / "timerlog",
        layout.config / "timercheck",
        layout.config / "timermetrics",
    )


class TimerService(BackgroundService):
    """The timer files of one store and the loop that moves timers through them.

    ``put`` stores messages as the store's own (``put_messages(..., internal=True)``); it may
    answer a refusal (the store is closing), and the timers are then delivered next round.
    Thread safety: the loop is the only writer of the files; ``pending`` may be read anywhere.
    """

    def __init__(
        self,
        layout: StoreLayout,
        commitlog: CommitLog,
        queues: ConsumeQueueSet,
        put: Put,
        config: StoreConfig,
        clock: Clock,
        *,
        find_copy: FindCopy | None = None,
        readonly: bool = False,
        on_failure: FailureHandler | None = None,
    ) -> None:
        super().__init__("timer", config.timer_precision_ms / 1000, on_failure)
        wheel_path, log_dir, check_path, metrics_path = timer_paths(layout)
        self._layout = layout
        self._commitlog = commitlog
        self._queues = queues
        self._put = put
        self._find_copy = find_copy
        self._unsure_before_ms = 0  # timers due before this may have been delivered (no timercheck)
        self._clock = clock
        self._readonly = readonly
        self._precision = config.timer_precision_ms
        self._window_ms = config.timer_roll_window_slots * config.timer_precision_ms
        self._dir_mode = config.dir_mode
        self._wheel_path = wheel_path
        self._log_dir = log_dir
        self._file_mode = config.file_mode
        self.wheel: TimerWheel | None = None
        self.log = TimerLog(
            log_dir, config.timer_log_segment_size, readonly=readonly, file_mode=config.file_mode
        )
        self.checkpoint = TimerCheckpoint(check_path, readonly=readonly, mode=config.file_mode)
        self.metrics = TimerMetrics(metrics_path, mode=config.file_mode)
        self.queue_offset = 0  # next rmq_sys_wheel_timer queue offset to enqueue
        self.read_ms = 0  # the first slot not yet fully delivered
        self.write_ms = 0
        self._slot_done = (-1, 0)  # (slot, timers of it delivered) of a slot a refusal interrupted
        self._due_now: list[tuple[MessageExt, int, int, int]] = []  # a run of timers due when enqueued
        self._reclaimed_at = 0
        self._counting = threading.Lock()  # status() sees an entry in the wheel or the backlog, once
        self._in_wheel = 0  # timers in the wheel's unread slots: counted at recovery, then kept
        self.log_bytes_cut = 0  # by the last recovery
        self.slots_cleared = 0
        # what the files on disk say (``_progress``), when known: a flush finding the same forces
        # nothing (a store that has no timer pays no sync every flush interval)
        self._flushed: tuple[int, int, int, tuple[int, int]] | None = None

    # --- opening -------------------------------------------------------------------------
    def load(self) -> None:
        """Read the checkpoint and metrics (all a read-only store needs)."""
        self.checkpoint.load()
        self.metrics.load()
        self.queue_offset = self.checkpoint.value.last_timer_queue_offset
        self.read_ms = self.checkpoint.value.last_read_time_ms
        if self._readonly and store_file_exists(self._wheel_path):
            self.wheel = TimerWheel(self._wheel_path, self._precision, readonly=True)

    def files_exist(self) -> bool:
        return store_file_exists(self._wheel_path) or self._log_dir.is_dir()

    def has_timers(self) -> bool:
        """Whether the timer topic holds any entry."""
        cq = self._queues.get(TIMER_TOPIC, 0)
        return cq is not None and cq.max_offset > cq.min_offset

    def recover(self, *, fresh: bool = False) -> None:
        """Open the wheel and the timer log and make them whole again (see the module doc). The
        store's queues must be complete (dispatch caught up) when this runs. ``fresh``: the files
        are being made for the store's first timer (no progress was ever lost)."""
        self.wheel = TimerWheel(self._wheel_path, self._precision, file_mode=self._file_mode)
        self.log.load(self._dir_mode)
        progress = self.checkpoint.value
        start = progress.last_timer_log_flush_pos
        if start > self.log.end or start < self.log.files.min_offset:
            log.warning(
                "timercheck says the timer log is flushed to %d, but it spans %d..%d: relinking all of it",
                start,
                self.log.files.min_offset,
                self.log.end,
            )
            start = self.log.files.min_offset
        start = self._rescan_from(start)
        found, end = self.log.scan(start)
        older = self.wheel.first_pos_pointing_past(end)
        if 0 <= older < start and older >= self.log.files.min_offset:
            # a slot about to be emptied began before the rescan: link all its units again
            start = older
            found, end = self.log.scan(start)
        dropped = self.log_bytes_cut = self.log.truncate(end)
        if dropped:
            log.warning("timer log: %d bytes after offset %d are no whole units; truncated", dropped, end)
        cleared = self.slots_cleared = self.wheel.clear_pointing_past(end)
        if cleared:
            log.warning("timer wheel: %d slot(s) pointed past the timer log's end; relinked", cleared)
        last: tuple[int, int] | None = None
        earliest = _LONG_MAX
        for first, units in found:
            for i, (magic, write_ms, delay, offset_py, size_py) in enumerate(
                zip(*(units[f].tolist() for f in ("magic", "write_ms", "delay", "offset_py", "size_py")))
            ):
                self._relink(write_ms + delay, first + i * UNIT_SIZE, 0 if magic & MAGIC_DELETE else 1)
                earliest = min(earliest, write_ms + delay)
                last = (offset_py, size_py)
        now = self._clock.now_ms()
        self.write_ms = now // self._precision * self._precision
        cq = self._queues.get(TIMER_TOPIC, 0)
        if not fresh and not store_file_exists(self.checkpoint.path) and self.has_timers():
            # timers but no progress (files lost, or a slave's copy now written to): what was due
            # may have been delivered, by this store or its master; its copy then exists
            self._unsure_before_ms = self.write_ms
            log.warning(
                "timer topic has entries but no timercheck: timers due before now are delivered "
                "only when their real topic has no delivered copy of them"
            )
        self.read_ms = progress.last_read_time_ms or min(self.write_ms, earliest)
        self._in_wheel = self.wheel.pending(self.read_ms)  # the one pass over the wheel
        after = self._queue_offset_after(last)
        # units cut for damage: their timers are enqueued again (a timer found due without a
        # unit in between may come twice); else the later of the two marks
        cut = dropped and after
        self.queue_offset = after if cut else max(progress.last_timer_queue_offset, after)
        if cq is not None:
            self.queue_offset = min(max(self.queue_offset, cq.min_offset), cq.max_offset)
        if not (found or dropped or cleared) and progress.last_timer_queue_offset == self.queue_offset:
            self._flushed = self._progress()  # recovery changed nothing the files hold

    def _progress(self) -> tuple[int, int, int, tuple[int, int]]:
        """What moves when a timer is enqueued, delivered or cancelled."""
        return self.queue_offset, self.log.end, self._in_wheel, self._slot_done

    def _rescan_from(self, flushed: int) -> int:
        """A unit boundary a few units before ``flushed``: the unit appended last before a flush
        may not have been linked into the durable wheel yet (relinking is idempotent)."""
        if flushed <= self.log.files.min_offset:
            return flushed
        seg = self.log.segment_size
        base = (flushed - 1) // seg * seg
        return base + max(0, (flushed - 1 - base) // UNIT_SIZE - _RELINK_BACK) * UNIT_SIZE

    def _relink(self, slot_ms: int, pos: int, delta: int) -> None:
        assert self.wheel is not None
        slot = self.wheel.slot(slot_ms)
        if slot.empty:
            self.wheel.put_slot(slot_ms, pos, pos, delta)
        elif slot.last_pos < pos:
            self.wheel.put_slot(slot_ms, slot.first_pos, pos, slot.num + delta, slot.magic)

    def _queue_offset_after(self, last: tuple[int, int] | None) -> int:
        if last is None:
            return 0
        msg = self._commitlog.message_at(*last)
        if msg is None or msg.topic != TIMER_TOPIC:
            return 0
        return msg.queue_offset + 1

    # --- the loop --------------------------------------------------------------------------
    def run_once(self) -> None:
        if self._stopping.is_set():
            return  # closing: the store takes no more puts; what is due waits for the next open
        if self.wheel is None:
            if not self.has_timers():
                self.interval = self._precision / 1000
                return  # no timer yet, so no timer files
            self.recover(fresh=True)
        now = self._clock.now_ms()
        self.write_ms = max(self.write_ms, now // self._precision * self._precision)
        if self._dequeue():
            self._enqueue()
        if now - self._reclaimed_at >= _RECLAIM_INTERVAL_MS:
            self.reclaim()
            self._reclaimed_at = now
        # wake at the next slot boundary
        self.interval = max(0.001, (self.write_ms + self._precision - self._clock.now_ms()) / 1000)

    def flush(self) -> None:
        """Timer log, wheel, then the checkpoint that says they are durable, then the metrics.
        Runs in ``TimerFlushService`` beside the loop: the progress is read before the files are
        forced (the enqueue progress before the log's end: every unit of an entry before it is
        below that end), so the checkpoint never claims more than what was forced."""
        wheel = self.wheel
        if wheel is None:
            return
        progress = self._progress()
        if progress == self._flushed:
            return  # no timer came or went since the last flush: the files say the same
        now = self._clock.now_ms()
        queue_offset, log_end, _, _ = progress
        read_ms = self.read_ms
        self.log.flush()
        wheel.flush()
        self.checkpoint.flush(
            TimerProgress(
                last_read_time_ms=read_ms,
                last_timer_log_flush_pos=log_end,
                last_timer_queue_offset=queue_offset,
                master_timer_queue_offset=queue_offset,
                timestamp=now,
            )
        )
        self.metrics.persist(now)
        self._flushed = progress

    def reclaim(self) -> int:
        """Delete timer log segments (never the last) whose every timer record the commitlog has
        reclaimed (RocketMQ's deleteExpiredFileByOffsetForTimerLog): units are appended in
        commitlog order, so the last unit of a segment points at its newest record. How many."""
        files = self.log.files
        per_segment = (files.file_size - BLANK_SIZE) // UNIT_SIZE
        floor = self._commitlog.min_offset

        def expired(mf: MappedFile) -> bool:
            try:
                return self.log.unit_at(mf.from_offset + (per_segment - 1) * UNIT_SIZE).offset_py < floor
            except CorruptDataError as exc:  # kept: `verify` names it
                log.warning("timer log segment %s: %s", mf.path.name, exc)
                return False

        deleted = files.delete_oldest(
            expired, now_ms=self._clock.now_ms(), forcibly_after_ms=0, max_files=10, pause=lambda: None
        )
        return len(deleted)

    def status(self) -> dict[str, int]:
        """Pending timers: those in the wheel and those not enqueued yet."""
        cq = self._queues.get(TIMER_TOPIC, 0)
        with self._counting:
            backlog = max(0, cq.max_offset - max(self.queue_offset, cq.min_offset)) if cq is not None else 0
            # counted from the wheel, not the metrics: exact after a crash too (a cancel is no timer)
            in_wheel = self._in_wheel if self.wheel is not None else self.metrics.total()
        return {
            "pending": in_wheel + backlog,
            "in_wheel": in_wheel,
            "not_enqueued": backlog,
            "read_time_ms": self.read_ms,
            "precision_ms": self._precision,
            "recovery_log_bytes_cut": self.log_bytes_cut,
            "recovery_slots_cleared": self.slots_cleared,
        }

    def close(self) -> None:
        if self.wheel is not None:
            self.wheel.close()
        self.log.close()

    # --- enqueue -----------------------------------------------------------------------------
    def _enqueue(self) -> None:
        cq = self._queues.get(TIMER_TOPIC, 0)
        if cq is None:
            return
        offset = max(self.queue_offset, cq.min_offset)
        budget = _ENQUEUE_PER_ROUND
        self._due_now = []
        while offset < cq.max_offset and budget > 0:
            entries = cq.entries(offset, _READ_AHEAD)
            if entries is None:  # a segment reclaimed under us: go on after it
                if not self._deliver_due_now():
                    return
                offset = max(cq.next_segment_offset(offset), cq.min_offset)
                continue
            phys, sizes = entries["offset"].astype(np.int64), entries["size"].astype(np.int64)
            for phy, size, msg in zip(phys.tolist(), sizes.tolist(), self._records_at(phys, sizes)):
                if not self._enqueue_one(msg, phy, size, offset):
                    return
                offset += 1
                budget -= 1
            del entries
        if self._deliver_due_now():
            self.queue_offset = offset

    def _enqueue_one(self, msg: MessageExt | None, phy: int, size: int, offset: int) -> bool:
        """One timer into the wheel, or into the run of timers due now; False when delivering
        that run was refused (``queue_offset`` is then its first)."""
        if msg is None:
            log.warning("timer queue offset %d: its record was reclaimed; skipped", offset)
            return True
        try:
            props = msg.properties
            out_ms = int(props[PROPERTY_TIMER_OUT_MS])
        except (CorruptDataError, KeyError, ValueError) as exc:
            log.error("timer queue offset %d has no readable TIMER_OUT_MS, skipped: %s", offset, exc)
            return True
        real_topic = props.get(PROPERTY_REAL_TOPIC, "")
        deleting = PROPERTY_TIMER_DEL_UNIQKEY in props
        write_ms = self.write_ms
        if out_ms < write_ms:  # its slot has passed: due now, delivered with the run it is in
            self._due_now.append((msg, _LONG_MAX, MAGIC_DELETE if deleting else MAGIC_DEFAULT, offset))
            return True
        if not self._deliver_due_now():
            return False
        magic = MAGIC_DELETE if deleting else MAGIC_DEFAULT
        slot_ms = out_ms
        if out_ms - write_ms >= self._window_ms:  # beyond the window: wait in a nearer slot, then roll
            magic |= MAGIC_ROLL
            half = self._window_ms // 2 // self._precision * self._precision
            rest = out_ms - write_ms - self._window_ms
            slot_ms = write_ms + (half if rest < self._window_ms // 3 else self._window_ms)
        assert self.wheel is not None
        slot = self.wheel.slot(slot_ms)
        pos = self.log.append(
            TimerUnit(slot.last_pos, magic, write_ms, slot_ms - write_ms, phy, size, java_hash(real_topic))
        )
        delta = 0 if deleting else 1  # num counts timers (timerwheel.py)
        with self._counting:  # the unit counts in the wheel as the entry leaves the backlog
            self.wheel.put_slot(
                slot_ms, pos if slot.empty else slot.first_pos, pos, slot.num + delta, slot.magic
            )
            self.queue_offset = offset + 1
            self._in_wheel += delta
        if not deleting:
            self.metrics.add(real_topic, 1, self._clock.now_ms())
        return True

    def _deliver_due_now(self) -> bool:
        """Deliver the run of timers found due at enqueue, less those a delete among them cancels;
        False (``queue_offset`` at the first the store refused) when it refused one."""
        run, self._due_now = self._due_now, []
        if not run:
            return True
        deleted = {key for m, _, magic, _ in run if magic & MAGIC_DELETE and (key := _cancelled_key(m))}
        timers = [
            t
            for t in run
            if not t[2] & MAGIC_DELETE
            and f"{t[0].properties.get(PROPERTY_REAL_TOPIC, '')}+{t[0].uniq_key or ''}" not in deleted
        ]
        if timers and (stored := self._deliver([t[:3] for t in timers])) < len(timers):
            # read again from the first not stored (and the cancels of the run, to apply again)
            self.queue_offset = min([timers[stored][3], *(t[3] for t in run if t[2] & MAGIC_DELETE)])
            return False
        return True

    # --- dequeue -----------------------------------------------------------------------------
    def _dequeue(self) -> bool:
        """Deliver every slot before the write time; False when a put was refused (retried next round)."""
        assert self.wheel is not None
        if (self.write_ms - self.read_ms) // self._precision > _CATCH_UP_SLOTS:
            for slot_ms in self.wheel.due_times(self.read_ms, self.write_ms):
                if not self._deliver_slot(slot_ms):
                    self.read_ms = slot_ms
                    return False
            self.read_ms = self.write_ms
            return True
        while self.read_ms < self.write_ms:
            if not self._deliver_slot(self.read_ms):
                return False
            self.read_ms += self._precision
        return True

    def _deliver_slot(self, slot_ms: int) -> bool:
        assert self.wheel is not None
        slot = self.wheel.slot(slot_ms)
        if slot.empty:
            return True
        chain = self._chain(slot_ms, slot.last_pos)
        deleted: set[str] = set()
        for i in range(0, len(chain), _PUT_CHUNK):
            for unit in self._units(chain[i : i + _PUT_CHUNK]):
                if unit.magic & MAGIC_DELETE and not unit.magic & MAGIC_ROLL:
                    msg = self._commitlog.message_at(unit.offset_py, unit.size_py)
                    if msg is not None and (key := _cancelled_key(msg)):
                        deleted.add(key)
        done_slot, done = self._slot_done
        start = done if done_slot == slot_ms else 0
        now = self._clock.now_ms()
        for i in range(start, len(chain), _PUT_CHUNK):
            batch: list[tuple[MessageExt, int, int]] = []
            at: list[int] = []  # the chain index of each of batch
            leaving: list[tuple[int, str]] = []  # (chain index, real topic) of each timer
            units = self._units(chain[i : i + _PUT_CHUNK])
            # a rolled delete unit rolls like the timer it cancels, to meet it in its final slot
            normal = [
                (i + j, u) for j, u in enumerate(units) if not u.magic & MAGIC_DELETE or u.magic & MAGIC_ROLL
            ]
            for (k, unit), msg in zip(normal, self._records([u for _, u in normal])):
                if msg is None:
                    log.warning(
                        "timer at %d (slot %d): its record was reclaimed; not delivered",
                        unit.offset_py,
                        slot_ms,
                    )
                    if not unit.magic & MAGIC_DELETE:
                        leaving.append((k, ""))
                    continue
                props = msg.properties
                real_topic = props.get(PROPERTY_REAL_TOPIC, "")
                if not unit.magic & MAGIC_DELETE:
                    leaving.append((k, real_topic))
                    if deleted and f"{real_topic}+{props.get(PROPERTY_UNIQ_KEY, '')}" in deleted:
                        log.info("timer %s of %s was cancelled", props.get(PROPERTY_UNIQ_KEY), real_topic)
                        continue
                batch.append((msg, unit.write_ms, unit.magic))
                at.append(k)
            stored = self._deliver(batch) if batch else 0
            stop = at[stored] if stored < len(batch) else i + len(units)
            self._left_wheel([topic for k, topic in leaving if k < stop], now)
            if stop < i + len(units):
                self._slot_done = (slot_ms, stop)
                return False
        self._slot_done = (-1, 0)
        with self._counting:  # the slot's timers are out of the wheel
            self._in_wheel = max(0, self._in_wheel - max(0, slot.num))
        return True

    def _chain(self, slot_ms: int, last_pos: int) -> npt.NDArray[np.int64]:
        """The timer log offsets of a slot's units, in enqueue order: 8 bytes a unit."""
        chain = np.empty(1024, dtype=np.int64)
        n = 0
        pos = last_pos
        while pos >= self.log.files.min_offset:  # below it: units whose records were reclaimed
            try:
                unit = self.log.unit_at(pos)
            except CorruptDataError as exc:  # `verify` names it; the store goes on
                log.error(
                    "timer slot %d: its chain ends in damage, the timers before it are lost: %s", slot_ms, exc
                )
                break
            if unit.slot_ms != slot_ms:
                break  # a unit of an earlier lap: the chain of this one ended
            if n == len(chain):
                chain = np.resize(chain, 2 * n)
            chain[n] = pos
            n += 1
            pos = unit.prev_pos
        out: npt.NDArray[np.int64] = chain[:n][::-1].copy()
        return out

    def _units(self, positions: npt.NDArray[np.int64]) -> list[TimerUnit]:
        return [self.log.unit_at(pos) for pos in positions.tolist()]

    def _left_wheel(self, topics: list[str], now_ms: int) -> None:
        for topic in topics:
            if topic:
                self.metrics.add(topic, -1, now_ms)

    def _records(self, units: list[TimerUnit]) -> list[MessageExt | None]:
        """The timer records of ``units`` (None for one that is gone)."""
        offsets = np.fromiter((u.offset_py for u in units), dtype=np.int64, count=len(units))
        sizes = np.fromiter((u.size_py for u in units), dtype=np.int64, count=len(units))
        return self._records_at(offsets, sizes)

    def _records_at(
        self, offsets: npt.NDArray[np.int64], sizes: npt.NDArray[np.int64]
    ) -> list[MessageExt | None]:
        """The records at ``offsets`` (None for one that is gone), read a segment's run at a time
        by one checked pass when they are in log order (a queue's entries, a slot's units)."""
        codes = np.zeros(len(offsets), dtype=np.int64)
        ordered = bool(np.all(offsets[1:] > offsets[:-1]))
        out: list[MessageExt | None] = []
        while len(out) < len(offsets):
            i = len(out)
            run = self._commitlog.messages_at(offsets[i:], sizes[i:], codes[i:]) if ordered else []
            if run:
                out.extend(run)
                continue
            try:  # one by one: why it is not readable
                out.append(self._commitlog.message_at(int(offsets[i]), int(sizes[i])))
            except CorruptDataError as exc:
                log.error("timer record at %d is damaged, not delivered: %s", offsets[i], exc)
                out.append(None)
        return out

    def _deliver(self, timers: list[tuple[MessageExt, int, int]]) -> int:
        """Put each timer into its real queue (or back into the timer topic, a roll); how many of
        ``timers`` are done (stored, or skipped as undeliverable): all but those from the first
        the store refused (it is closing, or its disk is full) on."""
        now = self._clock.now_ms()
        msgs: list[Message] = []
        at: list[int] = []  # the index in timers of each of msgs
        for i, (msg, enqueue_ms, magic) in enumerate(timers):
            if self._unsure_before_ms and not magic & MAGIC_ROLL and self._delivered_before(msg):
                continue
            try:
                msgs.append(_converted(msg, enqueue_ms, now, roll=bool(magic & MAGIC_ROLL)))
                at.append(i)
            except CorruptDataError as exc:
                log.error("timer at %d cannot be delivered, skipped: %s", msg.physical_offset, exc)
        if not msgs:
            return len(timers)
        try:
            results = self._put(msgs)
        except InvalidMessageError:
            results = []
            for one in msgs:  # find the one the store refuses; deliver the others
                try:
                    results += self._put([one])
                except InvalidMessageError as exc:
                    log.error("timer to %s cannot be delivered, skipped: %s", one.topic, exc)
                    results.append(PutMessageResult(PutStatus.PUT_OK))  # done: never deliverable
                    continue
                if not results[-1].ok:
                    break
        for k, result in enumerate(results):
            if not result.ok:
                log.warning("timer delivery refused (%s); retrying", result.status)
                return at[k]
        return len(timers)

    def _delivered_before(self, msg: MessageExt) -> bool:
        """Whether a timer due before ``_unsure_before_ms`` already has its delivered copy."""
        props = msg.properties
        try:
            out_ms = int(props.get(PROPERTY_TIMER_OUT_MS, ""))
        except ValueError:
            return False
        topic, uniq = props.get(PROPERTY_REAL_TOPIC), props.get(PROPERTY_UNIQ_KEY)
        if out_ms >= self._unsure_before_ms or not topic or not uniq or self._find_copy is None:
            return False
        copy = self._find_copy(topic, uniq)
        if copy is None or copy.physical_offset < msg.physical_offset:
            return False
        if copy.properties.get(PROPERTY_TIMER_OUT_MS) != str(out_ms):
            return False
        log.info("timer %s of %s was delivered before this open; not delivered again", uniq, topic)
        return True


class TimerFlushService(BackgroundService):
    """``TimerService.flush`` every ``timer_flush_interval`` (RocketMQ's TimerFlushService): off
    the delivery loop, whose rounds must not wait for the disk. Stopped after it: its final
    round writes the last progress."""

    def __init__(
        self, timers: TimerService, config: StoreConfig, on_failure: FailureHandler | None = None
    ) -> None:
        super().__init__("timer-flush", config.timer_flush_interval / 1000, on_failure)
        self._timers = timers

    def run_once(self) -> None:
        self._timers.flush()


def _cancelled_key(msg: MessageExt) -> str:
    """The ``<topic>+<UNIQ_KEY>`` a delete record cancels, or "" when it names another topic's
    timer than its own (records written before the put refused those): never honoured."""
    props = msg.properties
    key = props.get(PROPERTY_TIMER_DEL_UNIQKEY, "")
    return key if key.startswith(f"{props.get(PROPERTY_REAL_TOPIC, '')}+") else ""


def _converted(msg: MessageExt, enqueue_ms: int, now_ms: int, *, roll: bool) -> Message:
    """RocketMQ's convertMessage: the due timer as its real message, or (``roll``) as a timer
    record again, with the same body, flag, properties, born time and host and UNIQ_KEY."""
    topic, qid = real_destination(msg, "timer")
    props = dict(msg.properties)
    props[PROPERTY_TIMER_ENQUEUE_MS] = str(enqueue_ms)
    props[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
    if roll:
        props[PROPERTY_TIMER_ROLL_TIMES] = str(int(props.get(PROPERTY_TIMER_ROLL_TIMES, "0") or 0) + 1)
        topic, qid = TIMER_TOPIC, 0
    else:
        del props[PROPERTY_REAL_TOPIC], props[PROPERTY_REAL_QUEUE_ID]
    keys = props.pop(PROPERTY_KEYS, None)
    return Message(
        topic=topic,
        body=msg.body,
        tags=props.pop(PROPERTY_TAGS, None),
        keys=keys.split(" ") if keys else (),
        uniq_key=props.pop(PROPERTY_UNIQ_KEY, None),
        properties=props,
        queue_id=qid,
        flag=msg.flag,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        sys_flag=msg.sys_flag & SYSFLAG_CONTENT,
        reconsume_times=msg.reconsume_times,
    )
