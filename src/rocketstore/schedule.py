"""Delayed delivery (STORE.md §8): RocketMQ's ScheduleMessageService.

A put with delay level L is stored in ``SCHEDULE_TOPIC_XXXX`` queue L-1 with tagsCode = the time
it is due (see ``prepare``). Each level has its own scheduler reading its queue in order; every
tick (``schedule_tick`` ms), each delivers what is due: the message goes to its real topic and
queue with DELAY, REAL_TOPIC and REAL_QID removed, and the same body, tags, keys, UNIQ_KEY,
user properties, flag, born time and born host. Progress per level (the next offset of its
schedule queue) is written to ``config/delayOffset.json`` (RocketMQ's file), atomically, after
every tick that delivered something.

Exactly once across crashes: a crash between a delivery and the progress write would deliver
again. So at open, before the first tick, each level looks for copies of the messages after its
saved offset in their real queue (records stored after the schedule record and after the last
progress write, with the same born time, born host, body CRC, keys and UNIQ_KEY), and moves its
offset past those already delivered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from rocketstore.clock import Clock
from rocketstore.codec.commitlog_record import SYSFLAG_CONTENT
from rocketstore.codec.config_json import bad_entries_text, decode_delay_offsets, encode_delay_offsets
from rocketstore.commitlog import CommitLog
from rocketstore.config import StoreConfig
from rocketstore.consume_queue import ConsumeQueueSet
from rocketstore.errors import CorruptDataError, InvalidMessageError
from rocketstore.message import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    RESERVED_PROPERTIES,
    SCHEDULE_TOPIC,
    Message,
    MessageExt,
)
from rocketstore.results import PutMessageResult
from rocketstore.service import BackgroundService, FailureHandler
from rocketstore.storage.paths import atomic_write, parse_queue_id, read_store_text

__all__ = ["ScheduleService", "real_destination"]

log = logging.getLogger(__name__)

Put = Callable[[Message], PutMessageResult]
_READ_AHEAD = 32


def real_destination(msg: MessageExt, what: str) -> tuple[str, int]:
    """The topic and queue a record kept for later (a delayed message, a timer: ``what``) is
    delivered to. Raises CorruptDataError when it names none (a record RocketMQ would also fail
    to deliver)."""
    props = msg.properties
    topic = props.get(PROPERTY_REAL_TOPIC)
    qid = parse_queue_id(props.get(PROPERTY_REAL_QUEUE_ID, ""))
    if not topic or qid is None:
        raise CorruptDataError(
            f"{what} names no real topic/queue "
            f"(REAL_TOPIC={topic!r}, REAL_QID={props.get(PROPERTY_REAL_QUEUE_ID)!r})",
            offset=msg.physical_offset,
        )
    return topic, qid


def real_message(msg: MessageExt) -> Message:
    """The message a schedule record delivers (``real_destination``'s CorruptDataError when it
    names no real topic or queue)."""
    props = msg.properties
    topic, qid = real_destination(msg, "delayed message")
    return Message(
        topic=topic,
        body=msg.body,
        tags=msg.tags,
        keys=msg.keys,
        properties={k: v for k, v in props.items() if k not in RESERVED_PROPERTIES},
        queue_id=qid,
        flag=msg.flag,
        uniq_key=msg.uniq_key,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        sys_flag=msg.sys_flag & SYSFLAG_CONTENT,  # hosts are the store's business
        reconsume_times=msg.reconsume_times,  # a consumer's retry keeps its count (RocketMQ's messageTimeup)
    )


def _same_message(copy: MessageExt, original: MessageExt) -> bool:
    return (
        copy.born_timestamp == original.born_timestamp
        and copy.born_host == original.born_host
        and copy.body_crc == original.body_crc
        and copy.keys == original.keys
        and (original.uniq_key is None or copy.uniq_key == original.uniq_key)
    )


class ScheduleService(BackgroundService):
    def __init__(
        self,
        commitlog: CommitLog,
        queues: ConsumeQueueSet,
        put: Put,
        path: Path,
        config: StoreConfig,
        clock: Clock,
        on_failure: FailureHandler | None = None,
    ) -> None:
        super().__init__("schedule", config.schedule_tick / 1000, on_failure)
        self._commitlog = commitlog
        self._queues = queues
        self._put = put
        self.path = path
        self._clock = clock
        self._delays = config.delay_levels_ms
        self._file_mode = config.file_mode
        self.offsets: dict[int, int] = {}
        self._persisted_at_physical = 0  # the commitlog's end when progress was last written

    def load_progress(self) -> None:
        """Read the saved progress (a read-only store stops here)."""
        text = read_store_text(self.path)
        if text is not None:
            # Copies written before the last progress write are covered by it: look after it.
            skipped: list[str] = []
            self.offsets, self._persisted_at_physical = decode_delay_offsets(text, str(self.path), skipped)
            if skipped:
                # such a level starts again from its queue's first message (the next write drops them)
                log.warning("%s", bad_entries_text(str(self.path), skipped))

    def skip_delivered_before_crash(self) -> None:
        """Move each level past the copies delivered after the saved progress (see the module
        doc); the queues must be complete (dispatch caught up) when this runs."""
        repaired = False
        for level in range(1, len(self._delays) + 1):
            skipped = self._skip_delivered(level)
            if skipped:
                log.warning(
                    "delay level %d: %d message(s) were delivered before a crash but not recorded; "
                    "not delivering them again",
                    level,
                    skipped,
                )
                repaired = True
        if repaired:
            self.persist()

    def _skip_delivered(self, level: int) -> int:
        cq = self._queues.get(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return 0
        offset = max(self.offsets.get(level, 0), cq.min_offset)
        skipped = 0
        now = self._clock.now_ms()
        while offset < cq.max_offset:
            entry = cq.entry_at(offset)
            if entry is not None and entry[2] > now:  # not due yet: cannot have been delivered
                break
            original = self._commitlog.message_at(entry[0], entry[1]) if entry else None
            if original is None or not self._delivered_copy_exists(original):
                break
            offset += 1
            skipped += 1
        if skipped:
            self.offsets[level] = offset
        return skipped

    def _delivered_copy_exists(self, original: MessageExt) -> bool:
        try:
            target = real_message(original)
            floor = max(original.physical_offset, self._persisted_at_physical)
        except CorruptDataError as exc:
            log.warning("delayed-delivery check at open: %s; left to delivery", exc)
            return False
        cq = self._queues.get(target.topic, target.queue_id or 0)
        if cq is None:
            return False
        pos = cq.max_offset - 1
        while pos >= cq.min_offset:
            entry = cq.entry_at(pos)
            if entry is None or entry[0] < floor:
                return False
            copy = self._commitlog.message_at(entry[0], entry[1])
            try:
                if copy is not None and _same_message(copy, original):
                    return True
            except CorruptDataError as exc:  # damage is no copy; it must not keep the store shut
                log.warning("delayed-delivery check at open: %s; not a delivered copy", exc)
            pos -= 1
        return False

    def run_once(self) -> None:
        if self._stopping.is_set():
            return  # closing: the store takes no more puts; progress is already saved
        now = self._clock.now_ms()
        delivered = sum(self._deliver_level(level, now) for level in range(1, len(self._delays) + 1))
        if delivered:
            self.persist()

    def _deliver_level(self, level: int, now: int) -> int:
        """Deliver what is due in one level's queue, in order; how many were delivered."""
        cq = self._queues.get(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return 0
        offset = max(self.offsets.get(level, 0), cq.min_offset)
        start = offset
        latest_due = now + self._delays[level - 1]
        while offset < cq.max_offset:
            entries = cq.entries(offset, _READ_AHEAD)
            if entries is None:  # a segment reclaimed under us: go on after it
                offset = max(cq.next_segment_offset(offset), cq.min_offset)
                continue
            for phy, size, due in zip(
                entries["offset"].tolist(), entries["size"].tolist(), entries["tags_code"].tolist()
            ):
                # RocketMQ's correctDeliverTimestamp: a due time further away than the level's
                # delay (the clock went back) means now.
                if min(due, now if due > latest_due else due) > now:
                    self.offsets[level] = offset
                    return offset - start
                if not self._deliver(phy, size, level, offset):
                    self.offsets[level] = offset
                    return offset - start
                offset += 1
            del entries
        self.offsets[level] = offset
        return offset - start

    def _deliver(self, phy: int, size: int, level: int, offset: int) -> bool:
        """Re-put one due message; False to retry it next tick (the store refused the put)."""
        msg = self._commitlog.message_at(phy, size)
        if msg is None:
            log.warning("delay level %d offset %d: its record was reclaimed; skipped", level, offset)
            return True
        try:
            result = self._put(real_message(msg))
        except (CorruptDataError, InvalidMessageError) as exc:
            log.error("delay level %d offset %d cannot be delivered, skipped: %s", level, offset, exc)
            return True
        if not result.ok:
            log.warning("delay level %d offset %d: put refused (%s); retrying", level, offset, result.status)
            return False
        return True

    def persist(self) -> None:
        mark = self._commitlog.max_offset
        atomic_write(self.path, encode_delay_offsets(self.offsets, mark), self._file_mode)
        self._persisted_at_physical = mark
