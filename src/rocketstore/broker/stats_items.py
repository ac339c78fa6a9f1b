"""The broker's statistics items, as RocketMQ's ``BrokerStatsManager`` keeps them and
VIEW_BROKER_STATS_DATA (``mqadmin statsAll``) reads them: per stats name (``TOPIC_PUT_NUMS``,
``GROUP_GET_NUMS`` ...) and key (a topic, ``topic@group``, the cluster), a running value and
count, and three snapshot lists giving a sum, a rate and an average over the last minute, hour
and day.

RocketMQ samples every item of a set every 10 s (the minute list, 7 snapshots), every 10 min
(the hour list, 7) and every hour (the day list, 25), from the broker's start; an item first
sampled gets a zero snapshot one period before (``StatsItem.samplingIn*``). Here the samples
are taken when an item is counted or read, for every tick that passed since its last one: no
value changed between two of its counts, so the snapshots are the ones RocketMQ's timer would
have taken, and no thread runs for them. Keys come from clients, so a stats name holds at most
``MAX_ITEMS_PER_NAME`` items, and an item not counted for 25 hours is dropped.

Thread safety: a lock per set (counted from the event loop and from gRPC's threads).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "BROKER_GET_NUMS",
    "BROKER_PUT_NUMS",
    "GROUP_GET_NUMS",
    "GROUP_GET_SIZE",
    "STATS_NAMES",
    "TOPIC_PUT_NUMS",
    "TOPIC_PUT_SIZE",
    "BrokerStats",
    "Snapshot",
]

log = logging.getLogger("rocketstore.broker")

TOPIC_PUT_NUMS: Final = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE: Final = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS: Final = "GROUP_GET_NUMS"
GROUP_GET_SIZE: Final = "GROUP_GET_SIZE"
BROKER_PUT_NUMS: Final = "BROKER_PUT_NUMS"
BROKER_GET_NUMS: Final = "BROKER_GET_NUMS"
STATS_NAMES: Final = (
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    BROKER_PUT_NUMS,
    BROKER_GET_NUMS,
)

# (period ms, snapshots kept) of the minute, hour and day lists (RocketMQ's StatsItem)
_WINDOWS: Final = ((10_000, 7), (600_000, 7), (3_600_000, 25))
# where each window's snapshots start in an item's array: two numbers (times, value) a snapshot
_BASES: Final = tuple(2 * sum(keep for _, keep in _WINDOWS[:i]) for i in range(len(_WINDOWS)))
_SLOTS: Final = 2 * sum(keep for _, keep in _WINDOWS)
# items per stats name: keys come from clients (topics, groups); past it new keys are not counted
MAX_ITEMS_PER_NAME: Final = 10_000
# an item not counted for this long is dropped (RocketMQ's autoDeleteUnusedStats): its day list
# holds nothing any more
UNUSED_MS: Final = 25 * 3_600_000
# how often a set looks for unused items (when a new key comes)
_SWEEP_MS: Final = 600_000


@dataclass(frozen=True, slots=True)
class Snapshot:
    """RocketMQ's StatsSnapshot: the sum, per-second rate and average value per count."""

    sum: int
    tps: float
    avgpt: float


class _Item:
    """One key's running value and count, and its snapshots. A window's snapshots are taken at
    consecutive ticks ending at ``sampled[i]`` (``counts[i]`` of them), so only (times, value)
    is kept, in a ring per window inside one array: the slot of the snapshot at tick ``t`` is
    ``(t - boot) // period % keep``."""

    __slots__ = ("boot", "counts", "due", "last_ms", "ring", "sampled", "times", "value")

    def __init__(self, now_ms: int, boot_ms: int) -> None:
        self.value = 0
        self.times = 0
        self.boot = boot_ms
        self.last_ms = now_ms
        self.ring = array("q", bytes(8 * _SLOTS))
        self.counts = [0] * len(_WINDOWS)
        self.sampled = [boot_ms + (now_ms - boot_ms) // period * period for period, _ in _WINDOWS]
        self.due = self.sampled[0] + _WINDOWS[0][0]  # the next tick (of the finest window)

    def _store(self, window: int, tick_ms: int, times: int, value: int) -> None:
        period, keep = _WINDOWS[window]
        at = _BASES[window] + 2 * ((tick_ms - self.boot) // period % keep)
        self.ring[at] = times
        self.ring[at + 1] = value

    def catch_up(self, now_ms: int) -> None:
        """Take the snapshots of every tick up to ``now_ms`` not taken yet: the value has not
        changed since the last count, which caught up before adding."""
        if now_ms < self.due:
            return
        for i, (period, keep) in enumerate(_WINDOWS):
            ticks = (now_ms - self.sampled[i]) // period
            if ticks <= 0:
                continue
            if not self.counts[i]:  # RocketMQ's zero snapshot a period before the first
                self._store(i, self.sampled[i], 0, 0)
                self.counts[i] = 1
            self.sampled[i] += ticks * period
            for k in range(min(ticks, keep)):  # older ones would fall out
                self._store(i, self.sampled[i] - k * period, self.times, self.value)
            self.counts[i] = min(self.counts[i] + ticks, keep)
        self.due = self.sampled[0] + _WINDOWS[0][0]

    def _at(self, window: int, tick_ms: int) -> tuple[int, int]:
        period, keep = _WINDOWS[window]
        at = _BASES[window] + 2 * ((tick_ms - self.boot) // period % keep)
        return self.ring[at], self.ring[at + 1]

    def snapshot(self, window: int) -> Snapshot:
        count = self.counts[window]
        if not count:
            return Snapshot(0, 0.0, 0.0)
        t1 = self.sampled[window]
        t0 = t1 - (count - 1) * _WINDOWS[window][0]
        (n0, v0), (n1, v1) = self._at(window, t0), self._at(window, t1)
        total = v1 - v0
        tps = total * 1000.0 / (t1 - t0) if t1 > t0 else 0.0
        avgpt = total / (n1 - n0) if n1 > n0 else 0.0
        return Snapshot(total, tps, avgpt)


class _ItemSet:
    """One stats name's items (the caller holds BrokerStats' lock)."""

    def __init__(self, name: str, boot_ms: int) -> None:
        self.name = name
        self._boot_ms = boot_ms
        self.items: dict[str, _Item] = {}
        self._swept_ms = boot_ms
        self._full_logged = False

    def _sweep(self, now_ms: int) -> None:
        """Drop the items not counted for UNUSED_MS; at most once per _SWEEP_MS."""
        self._swept_ms = now_ms
        unused = [key for key, item in self.items.items() if now_ms - item.last_ms >= UNUSED_MS]
        for key in unused:
            del self.items[key]
        if unused:
            self._full_logged = False

    def add(self, key: str, value: int, times: int, now_ms: int) -> None:
        item = self.items.get(key)
        if item is None:
            if now_ms - self._swept_ms >= _SWEEP_MS:
                self._sweep(now_ms)
            if len(self.items) >= MAX_ITEMS_PER_NAME:
                if not self._full_logged:
                    self._full_logged = True
                    log.warning("stats %s: %d keys, new keys are not counted", self.name, len(self.items))
                return
            item = self.items[key] = _Item(now_ms, self._boot_ms)
        item.catch_up(now_ms)
        item.value += value
        item.times += times
        item.last_ms = now_ms


class _PutLatency:
    """How long puts took, as RocketMQ's StoreStatsService shows it: the slowest since the start,
    and for the last whole minute a coarse distribution (``putMessageDistributeTime``) and the
    99th and 99.9th percentiles from fine buckets (``putLatency99``, ``putLatency999``). The
    caller holds BrokerStats' lock."""

    def __init__(self, boot_ms: int) -> None:
        self._boot_ms = boot_ms
        self._minute = 0
        self.max_ms = 0
        self._coarse = [0] * len(_COARSE_NAMES)
        self._fine = [0] * (len(_FINE_BOUNDS) + 1)
        self._last_coarse: list[int] | None = None
        self._last_fine = [0] * (len(_FINE_BOUNDS) + 1)

    def _roll(self, now_ms: int) -> None:
        minute = (now_ms - self._boot_ms) // 60_000
        if minute == self._minute:
            return
        whole = minute == self._minute + 1  # else a minute without puts came between
        self._last_coarse = self._coarse if whole else [0] * len(_COARSE_NAMES)
        self._last_fine = self._fine if whole else [0] * (len(_FINE_BOUNDS) + 1)
        self._coarse = [0] * len(_COARSE_NAMES)
        self._fine = [0] * (len(_FINE_BOUNDS) + 1)
        self._minute = minute

    def add(self, elapsed_ms: int, now_ms: int) -> None:
        self._roll(now_ms)
        self._coarse[bisect.bisect_left(_COARSE_LIMITS, elapsed_ms)] += 1
        self._fine[bisect.bisect_left(_FINE_BOUNDS, elapsed_ms)] += 1
        if elapsed_ms > self.max_ms:
            self.max_ms = elapsed_ms

    def info(self, now_ms: int) -> dict[str, str]:
        self._roll(now_ms)
        coarse, fine = self._last_coarse, self._last_fine
        shown = "null" if coarse is None else "".join(f"{n}:{c} " for n, c in zip(_COARSE_NAMES, coarse))
        return {
            "putMessageEntireTimeMax": str(self.max_ms),
            "putMessageDistributeTime": shown,
            "putLatency99": f"{_percentile(fine, 0.99):.2f}",
            "putLatency999": f"{_percentile(fine, 0.999):.2f}",
        }


def _percentile(counts: list[int], px: float) -> float:
    """StoreStatsService.findPutMessageEntireTimePX: linear within the bucket holding it."""
    index = int(sum(counts) * px)
    passed = 0
    bounds = [*_FINE_BOUNDS, _JAVA_LONG_MAX]
    for i, count in enumerate(counts):
        if index <= passed + count:
            low = bounds[i - 1] if i else 0
            return low + ((bounds[i] - low) * (index - passed) / count if count else 0.0)
        passed += count
    return 0.0


# StoreStatsService's coarse ranges (value <= 0, < 10, < 50 ... < 10000, the rest) and names
_COARSE_LIMITS: Final = (0, 9, 49, 99, 199, 499, 999, 1999, 2999, 3999, 4999, 9999)
_COARSE_NAMES: Final = (
    "[<=0ms]",
    "[0~10ms]",
    "[10~50ms]",
    "[50~100ms]",
    "[100~200ms]",
    "[200~500ms]",
    "[500ms~1s]",
    "[1~2s]",
    "[2~3s]",
    "[3~4s]",
    "[4~5s]",
    "[5~10s]",
    "[10s~]",
)
_JAVA_LONG_MAX: Final = (1 << 63) - 1


def _fine_bounds() -> tuple[int, ...]:
    """The fine buckets' upper bounds (PUT_MESSAGE_ENTIRE_TIME_BUCKETS: steps of 1 ms to 20,
    2 ms to 50, 5 to 100, 10 to 200, 50 to 500, 100 to 1000, 1000 to 10000)."""
    bounds, edge = [], 0
    for step, times in ((1, 20), (2, 15), (5, 10), (10, 10), (50, 6), (100, 5), (1000, 9)):
        for _ in range(times):
            edge += step
            bounds.append(edge)
    return tuple(bounds)


_FINE_BOUNDS: Final = _fine_bounds()


class BrokerStats:
    """The stats items of one broker. ``clock_ms``: a monotonic clock in ms (tests pass their own).

    One lock for all: a send counts three items and its time under one acquisition."""

    def __init__(self, cluster: str, clock_ms: Callable[[], int] | None = None) -> None:
        self._clock = clock_ms or (lambda: time.monotonic_ns() // 1_000_000)
        self.cluster = cluster
        boot = self._clock()
        self._lock = threading.Lock()
        sets = self._sets = {name: _ItemSet(name, boot) for name in STATS_NAMES}
        self._puts, self._put_sizes, self._broker_puts = (
            sets[TOPIC_PUT_NUMS],
            sets[TOPIC_PUT_SIZE],
            sets[BROKER_PUT_NUMS],
        )
        self._gets, self._get_sizes, self._broker_gets = (
            sets[GROUP_GET_NUMS],
            sets[GROUP_GET_SIZE],
            sets[BROKER_GET_NUMS],
        )
        self._latency = _PutLatency(boot)
        self.put_failures = 0
        self.get_max_ms = 0  # the slowest read of messages (RocketMQ's getMessageEntireTimeMax)

    def count_put(
        self, topic: str, messages: int, size: int, elapsed_ms: int | None = None, requests: int = 1
    ) -> None:
        """Messages stored by ``requests`` sends (RocketMQ's SendMessageProcessor: one count
        per request), and how long the put took when known."""
        now = self._clock()
        with self._lock:
            self._puts.add(topic, messages, requests, now)
            if size:
                self._put_sizes.add(topic, size, requests, now)
            self._broker_puts.add(self.cluster, messages, requests, now)
            if elapsed_ms is not None:
                self._latency.add(elapsed_ms, now)

    def count_put_failure(self) -> None:
        """A send the store did not take (RocketMQ's putMessageFailedTimes)."""
        with self._lock:
            self.put_failures += 1

    def put_latency(self) -> dict[str, str]:
        """brokerStatus's put-time keys (see _PutLatency)."""
        with self._lock:
            info = self._latency.info(self._clock())
            info["putMessageFailedTimes"] = str(self.put_failures)
        return info

    def count_get(
        self, topic: str, group: str, messages: int, size: int, elapsed_ms: int | None = None
    ) -> None:
        """Messages handed to a consumer group by one pull or receive, and how long reading them
        took when known."""
        now = self._clock()
        key = f"{topic}@{group}"
        with self._lock:
            if elapsed_ms is not None and elapsed_ms > self.get_max_ms:
                self.get_max_ms = elapsed_ms
            self._gets.add(key, messages, 1, now)
            if size:
                self._get_sizes.add(key, size, 1, now)
            self._broker_gets.add(self.cluster, messages, 1, now)

    def read(self, name: str, key: str) -> tuple[Snapshot, Snapshot, Snapshot] | None:
        """The (minute, hour, day) snapshots of an item, or None when it was never counted."""
        item_set = self._sets.get(name)
        if item_set is None:
            return None
        with self._lock:
            item = item_set.items.get(key)
            if item is None:
                return None
            item.catch_up(self._clock())
            return item.snapshot(0), item.snapshot(1), item.snapshot(2)

    def counted(self, name: str, key: str) -> tuple[int, int] | None:
        """An item's running (value, count), as RocketMQ's StatsItem getValue and getTimes."""
        item_set = self._sets.get(name)
        with self._lock:
            item = item_set.items.get(key) if item_set is not None else None
            return None if item is None else (item.value, item.times)

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's items (RocketMQ's onTopicDeleted)."""
        prefix = f"{topic}@"
        with self._lock:
            for item_set in (self._puts, self._put_sizes):
                item_set.items.pop(topic, None)
            for item_set in (self._gets, self._get_sizes):
                for key in [k for k in item_set.items if k.startswith(prefix)]:
                    del item_set.items[key]
