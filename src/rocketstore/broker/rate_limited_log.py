"""Warnings about what clients do wrong, rate-limited: a client repeating a mistake (or many
clients making it at once) costs at most one line per kind of mistake and interval, never a
flood. The next line of a kind says how many were left out since the last one.

A ``kind`` is a fixed value of the caller's (``"malformed frame"``, a request code from a fixed
set), never client data, so the table of kinds stays as small as the code that logs them.

Thread safety: ``warning`` takes a lock around the table (the remoting loop and the gRPC
threads may share one); ``due`` takes none, for a caller that uses its log from one thread
only and decides before it builds a line (``request_log``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable
from typing import Final

from rocketstore.clock import Clock, SystemClock

__all__ = ["DEFAULT_INTERVAL_S", "RateLimitedLog"]

DEFAULT_INTERVAL_S: Final = 60.0
_LEFT_OUT: Final = " (and %d more of this kind in the last %.0f s)"


class RateLimitedLog:
    def __init__(
        self, logger: logging.Logger, interval_s: float = DEFAULT_INTERVAL_S, clock: Clock | None = None
    ) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._clock = clock or SystemClock()
        self._last: dict[Hashable, float] = {}
        self._left_out: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def due(self, kind: Hashable) -> tuple[int, float] | None:
        """Whether a line of ``kind`` may go out now: None when one did within the interval (this
        one is counted as left out), else (lines left out since the last one, seconds since it),
        for ``write``. No lock (see the module docstring)."""
        now = self._clock.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self._interval_s:
            self._left_out[kind] = self._left_out.get(kind, 0) + 1
            return None
        self._last[kind] = now
        return self._left_out.pop(kind, 0), (now - last if last is not None else 0.0)

    def write(self, due: tuple[int, float], msg: str, *args: object) -> None:
        """Log ``msg % args`` as a warning, with what ``due`` said was left out."""
        left_out, since = due
        if left_out:
            msg += _LEFT_OUT
            args = (*args, left_out, since)
        self._logger.warning(msg, *args)

    def warning(self, kind: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` as a warning unless a line of ``kind`` went out within the
        interval; True when it was logged."""
        with self._lock:
            due = self.due(kind)
        if due is None:
            return False
        self.write(due, msg, *args)
        return True
