"""Reclaiming disk (STORE.md §9): RocketMQ's CleanCommitLogService and CleanConsumeQueueService.

Every ``clean_resource_interval`` ms, commitlog segments are deleted, oldest first, when one of
three triggers holds: it is an hour named in ``delete_when``; the disk holding the commitlog is
fuller than ``disk_max_used_space_ratio``; or a manual request (``request_delete``) is armed (it
stays armed for ``manual_delete_file_several_times`` rounds). A segment goes when its file was
last written more than ``file_reserved_time`` hours ago, or whatever its age when the disk is
above ``disk_clean_forcibly_ratio``; never the newest segment, at most 10 a round,
``delete_commitlog_files_interval`` ms apart; one still read waits until
``destroy_mapped_file_interval_forcibly`` ms have passed. Above ``disk_warning_ratio`` the store
is marked disk-full (puts refused, reads go on) until a round finds the disk below it again.
Then consume-queue segments and index files that point only below the commitlog's new min
offset are deleted, and each queue's min offset moves up.

Deletion happens on this service's thread: writers only ever wait for the list swap of one
segment (see ``MappedFileQueue.delete_oldest``), never for an unlink.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from rocketstore.clock import Clock
from rocketstore.commitlog import CommitLog
from rocketstore.config import StoreConfig
from rocketstore.consume_queue import ConsumeQueueSet
from rocketstore.disk_space import DiskUsage, disk_used_ratio
from rocketstore.index import IndexService
from rocketstore.service import BackgroundService, FailureHandler
from rocketstore.storage.mapped_file import MappedFile

__all__ = ["CleanService", "ReclaimReport"]

log = logging.getLogger(__name__)

_MAX_FILES_PER_ROUND = 10


@dataclass(frozen=True)
class ReclaimReport:
    """What one cleaning round decided and did."""

    triggered_by: tuple[str, ...]  # "time", "disk", "manual"; empty: nothing was due
    disk_used_ratio: float
    clean_immediately: bool  # the disk was above the clean-forcibly ratio: age did not matter
    disk_full: bool
    commitlog_segments_deleted: int
    queue_segments_deleted: int
    index_files_deleted: int
    min_physical_offset: int


class CleanService(BackgroundService):
    def __init__(
        self,
        commitlog: CommitLog,
        queues: ConsumeQueueSet,
        index: IndexService | None,
        config: StoreConfig,
        clock: Clock,
        disk_usage: DiskUsage = disk_used_ratio,
        on_failure: FailureHandler | None = None,
    ) -> None:
        super().__init__("clean", config.clean_resource_interval / 1000, on_failure)
        self._commitlog = commitlog
        self._queues = queues
        self._index = index
        self._config = config
        self._clock = clock
        self._disk_usage = disk_usage
        self._hours = frozenset(int(h) for h in config.delete_when.split(";") if h.strip())
        self._manual_rounds = 0
        self._lock = threading.Lock()  # one round at a time: the thread's and a manual reclaim()
        self._queues_cleaned_below = 0
        self.disk_full = False

    def request_delete(self) -> None:
        """Arm manual deletion for the next ``manual_delete_file_several_times`` rounds (the
        first of which is whoever runs a round next: the caller, or the service's thread)."""
        self._manual_rounds = self._config.manual_delete_file_several_times

    def run_once(self) -> None:
        self.reclaim()

    def reclaim(self) -> ReclaimReport:
        """One cleaning round (what the service runs every interval); also callable directly."""
        with self._lock:
            return self._round()

    def check_disk(self) -> float:
        """Measure the disk, set or lift the disk-full flag; the used fraction."""
        cfg = self._config
        ratio = self._disk_usage(self._commitlog.files.directory)
        percent = ratio * 100
        # ratio against level / 100, as RocketMQ compares them (0.9 * 100 is above 90)
        if ratio > cfg.disk_warning_ratio / 100:
            if not self.disk_full:
                log.error(
                    "disk full: %.1f%% used, above disk_warning_ratio %d%%; puts are refused until it falls",
                    percent,
                    cfg.disk_warning_ratio,
                )
            self.disk_full = True
        elif self.disk_full:
            log.info("disk back to %.1f%% used: puts accepted again", percent)
            self.disk_full = False
        return ratio

    def _round(self) -> ReclaimReport:
        cfg = self._config
        now = self._clock.now_ms()
        ratio = self.check_disk()
        percent = ratio * 100
        clean_immediately = ratio > cfg.disk_clean_forcibly_ratio / 100
        triggers = []
        if time.localtime(now / 1000).tm_hour in self._hours:
            triggers.append("time")
        if ratio > cfg.disk_max_used_space_ratio / 100:
            triggers.append("disk")
        if self._manual_rounds > 0:
            self._manual_rounds -= 1
            triggers.append("manual")
        deleted = 0
        if triggers:
            reserved_ms = cfg.file_reserved_time * 3_600_000

            def expired(mf: MappedFile) -> bool:
                return clean_immediately or now >= mf.last_modified_ms + reserved_ms

            deleted = len(
                self._commitlog.files.delete_oldest(
                    expired,
                    now_ms=now,
                    forcibly_after_ms=cfg.destroy_mapped_file_interval_forcibly,
                    max_files=_MAX_FILES_PER_ROUND,
                    pause=lambda: self._pause(cfg.delete_commitlog_files_interval),
                )
            )
            if deleted:
                log.info(
                    "reclaimed %d commitlog segment(s) (%s; disk %.1f%% used); the log now starts at %d",
                    deleted,
                    "+".join(triggers),
                    percent,
                    self._commitlog.min_offset,
                )
        queue_deleted, index_deleted = self._clean_queues_and_index(now)
        return ReclaimReport(
            tuple(triggers),
            ratio,
            clean_immediately,
            self.disk_full,
            deleted,
            queue_deleted,
            index_deleted,
            self._commitlog.min_offset,
        )

    def _clean_queues_and_index(self, now: int) -> tuple[int, int]:
        """RocketMQ's CleanConsumeQueueService: queues and index follow the commitlog's min offset."""
        min_offset = self._commitlog.min_offset
        if min_offset <= self._queues_cleaned_below:
            return 0, 0
        self._queues_cleaned_below = min_offset
        cfg = self._config
        queue_deleted = sum(
            cq.delete_expired(
                min_offset,
                now_ms=now,
                forcibly_after_ms=cfg.destroy_mapped_file_interval_forcibly,
                pause=lambda: self._pause(cfg.delete_consume_queue_files_interval),
            )
            for cq in list(self._queues)
        )
        index_deleted = (
            self._index.delete_expired(
                min_offset, now_ms=now, forcibly_after_ms=cfg.destroy_mapped_file_interval_forcibly
            )
            if self._index is not None
            else 0
        )
        return queue_deleted, index_deleted

    def _pause(self, ms: int) -> None:
        if ms > 0:
            self._stopping.wait(ms / 1000)
