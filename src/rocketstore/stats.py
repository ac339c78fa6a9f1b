"""Runtime statistics, like RocketMQ's StoreStatsService: counters, sampled once a second so that
rates can be given over the last 10 s, 1 min and 10 min."""

from __future__ import annotations

import threading
from collections import deque

from rocketstore.clock import Clock
from rocketstore.service import BackgroundService

__all__ = ["StoreStats"]

WINDOWS = (10, 60, 600)  # seconds
_KEYS = ("put", "get_found", "get_miss", "get_transferred")


class StoreStats(BackgroundService):
    """Counted once per put batch and once per get call, under a lock held for a few additions."""

    def __init__(self, clock: Clock) -> None:
        super().__init__("stats", 1.0)
        self._clock = clock
        self.boot_ms = clock.now_ms()
        self._lock = threading.Lock()
        self._counts = [0, 0, 0, 0]  # in _KEYS order
        self.put_bytes = 0
        self._samples: deque[tuple[float, tuple[int, ...]]] = deque(maxlen=WINDOWS[-1] + 2)
        self.sample()

    def count_put(self, messages: int, size: int) -> None:
        with self._lock:
            self._counts[0] += messages
            self.put_bytes += size

    def count_get(self, found: int) -> None:
        with self._lock:
            if found:
                self._counts[1] += 1
                self._counts[3] += found
            else:
                self._counts[2] += 1

    def sample(self) -> None:
        with self._lock:
            self._samples.append((self._clock.monotonic(), tuple(self._counts)))

    def run_once(self) -> None:
        self.sample()

    def rates(self) -> dict[str, list[float]]:
        """Per second over each of WINDOWS (or over as much of it as has been sampled)."""
        with self._lock:
            now, totals, samples = self._clock.monotonic(), tuple(self._counts), list(self._samples)
        result: dict[str, list[float]] = {key: [] for key in _KEYS}
        for window in WINDOWS:
            base_t, base = samples[0]
            for t, values in reversed(samples):
                if now - t >= window:
                    base_t, base = t, values
                    break
            elapsed = now - base_t
            for key, cur, old in zip(_KEYS, totals, base):
                result[key].append(round((cur - old) / elapsed, 1) if elapsed > 0 else 0.0)
        return result

    def totals(self) -> dict[str, int]:
        with self._lock:
            puts, found, miss, transferred = self._counts
            size = self.put_bytes
        return {
            "putMessageTimesTotal": puts,
            "putMessageSizeTotal": size,
            "getMessageTimesTotalFound": found,
            "getMessageTimesTotalMiss": miss,
            "getMessageTransferedMsgCount": transferred,
        }
