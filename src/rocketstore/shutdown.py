"""SIGTERM as a clean exit, for processes that hold a store (the CLI, ``make run``'s demo).

Python's default for SIGTERM is to die at once: ``with MessageStore.open(...)`` blocks never
close, the ``abort`` file stays, and the next open recovers as after a crash. Inside
``exit_on_sigterm()`` a SIGTERM raises ``SystemExit(143)`` in the main thread instead (128 + 15,
the shell's code for a process ended by SIGTERM), so every ``with`` block unwinds and closes
its store: flushed, checkpoint written, ``abort`` removed. A second SIGTERM while closing is
ignored (closing must finish). Outside the main thread it does nothing (only the main thread
can set signal handlers).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["EXIT_SIGTERM", "exit_on_sigterm"]

EXIT_SIGTERM = 128 + signal.SIGTERM


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises SystemExit(143) in the main thread (once)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the unwinding that follows must not be cut
        raise SystemExit(EXIT_SIGTERM)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
