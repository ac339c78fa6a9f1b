"""Log lines a client can cause, at most one per kind per interval.

A client's mistakes and the broker's refusals are worth a line (which client, what code), but a
client repeating one a thousand times a second must not fill the disk or drown the log:
``RateLimitedLog.warning(key, msg, *args)`` writes the line when no line of that ``key`` was
written in the last ``interval_s`` seconds, and otherwise counts it; the next line written for
that key says how many were left out. The table of keys is bounded (``max_keys``): when it is
full of keys seen within the interval, other keys share one slot.

Cheap when quiet: one dict look-up and one monotonic clock read per call. Safe to call from the
event loop and from threads (a race costs at most one extra line, never a lost count's error).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable

__all__ = ["RateLimitedLog"]

_OVERFLOW = object()  # the slot of keys beyond max_keys


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, interval_s: float = 60.0, max_keys: int = 1024) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.max_keys = max_keys
        self._last: dict[object, list[float]] = {}  # key -> [monotonic time written, lines left out]
        self._next_forget = 0.0  # when the table is full, no key expires before this

    def warning(self, key: Hashable, msg: str, *args: object) -> bool:
        """Log ``msg % args`` at WARNING unless ``key`` was logged within the interval; whether
        it was written."""
        return self.log(logging.WARNING, key, msg, *args)

    def log(self, level: int, key: Hashable, msg: str, *args: object) -> bool:
        if not self.logger.isEnabledFor(level):
            return False
        now = time.monotonic()
        slot = self._last.get(key)
        if slot is None and len(self._last) >= self.max_keys:
            if now >= self._next_forget:
                self._forget(now)
            if len(self._last) >= self.max_keys:
                key = _OVERFLOW
                slot = self._last.get(key)
        if slot is not None and now - slot[0] < self.interval_s:
            slot[1] += 1
            return False
        left_out = int(slot[1]) if slot is not None else 0
        self._last[key] = [now, 0]
        if left_out:
            msg += " (%d more like it in the last %.0f s not logged)"
            args = (*args, left_out, self.interval_s)
        self.logger.log(level, msg, *args)
        return True

    def _forget(self, now: float) -> None:
        """Drop the keys last written before the interval (what they left out since goes
        unsaid); at most one scan of the full table per expiry of its oldest key."""
        for key in [k for k, (at, _) in self._last.items() if now - at >= self.interval_s]:
            del self._last[key]
        if self._last:
            self._next_forget = min(at for at, _ in self._last.values()) + self.interval_s
