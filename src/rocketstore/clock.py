"""Time, injected. Store logic asks a ``Clock``; tests hand it a ``ManualClock`` and never sleep."""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the epoch (wall clock: it goes into records as store time)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, for measuring intervals."""
        ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to. Thread-safe."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._ms = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        return self._ms

    def monotonic(self) -> float:
        return self._ms / 1000.0

    def advance(self, ms: int) -> None:
        with self._lock:
            self._ms += ms
