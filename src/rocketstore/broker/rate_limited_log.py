"""Warnings about what clients do wrong, rate-limited: a client repeating a mistake (or many
clients making it at once) costs at most one line per kind of mistake and interval, never a
flood. The next line of a kind says how many were left out since the last one.

A ``kind`` is a fixed string of the caller's (``"malformed frame"``), never client data, so
the table of kinds stays as small as the code that logs them.

Thread safety: a lock guards the table (the remoting loop and the gRPC threads may share one).
"""

from __future__ import annotations

import logging
import threading
from typing import Final

from rocketstore.clock import Clock, SystemClock

__all__ = ["DEFAULT_INTERVAL_S", "RateLimitedLog"]

DEFAULT_INTERVAL_S: Final = 60.0


class RateLimitedLog:
    def __init__(
        self, logger: logging.Logger, interval_s: float = DEFAULT_INTERVAL_S, clock: Clock | None = None
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock or SystemClock()
        self._last: dict[str, float] = {}
        self._left_out: dict[str, int] = {}
        self._lock = threading.Lock()

    def warning(self, kind: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` as a warning unless a line of ``kind`` went out within the
        interval; True when it was logged."""
        now = self._clock.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self._interval_s:
                self._left_out[kind] = self._left_out.get(kind, 0) + 1
                return False
            self._last[kind] = now
            left_out = self._left_out.pop(kind, 0)
        if left_out:
            msg += " (and %d more of this kind in the last %.0f s)"
            args = (*args, left_out, now - last if last is not None else 0.0)
        self._logger.warning(msg, *args)
        return True
