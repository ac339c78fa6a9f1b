"""Waiting for another process to write a file: Linux inotify, through libc (no dependency).

``FileWatch.open(path)`` watches ``path`` for writes made with write(2)/pwrite(2) (a write
through a shared mapping raises no event: writers that want to be watched write with pwrite);
``wait(timeout)`` blocks without spinning until one came or ``timeout`` passed, and consumes
the pending events. ``open`` returns None where inotify is not available (not Linux, no libc,
the per-user limit of inotify instances reached, a file system without events): the caller
polls then.

Thread safety: one thread at a time may ``wait`` (events are consumed by whoever waits);
``close`` must not run while a thread waits.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import sys
from pathlib import Path

__all__ = ["FileWatch"]

log = logging.getLogger(__name__)

_IN_MODIFY = 0x00000002
_IN_ATTRIB = 0x00000004  # also raised when the file is unlinked: the watcher then stops waiting
_IN_DELETE_SELF = 0x00000400
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_EVENT_BUFFER = 4096


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True) if name else None
    except OSError:
        return None
    if libc is None or not hasattr(libc, "inotify_init1"):
        return None
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return libc


_libc = _load_libc()


class FileWatch:
    """An inotify instance watching one file for writes."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)

    @classmethod
    def open(cls, path: Path) -> FileWatch | None:
        """A watch on ``path``, or None when this system cannot give one (callers poll)."""
        if _libc is None:
            return None
        fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            log.debug("no inotify instance for %s (%s): polling", path, os.strerror(ctypes.get_errno()))
            return None
        mask = _IN_MODIFY | _IN_ATTRIB | _IN_DELETE_SELF
        if _libc.inotify_add_watch(fd, os.fsencode(path), mask) < 0:
            log.debug("cannot watch %s (%s): polling", path, os.strerror(ctypes.get_errno()))
            os.close(fd)
            return None
        return cls(fd)

    def wait(self, timeout: float) -> bool:
        """Block until the file was written (True) or ``timeout`` seconds passed (False); the
        pending events are consumed either way."""
        ready = self._poll.poll(max(0, int(timeout * 1000 + 0.999)))  # ms, rounded up: never a spin
        self._drain()
        return bool(ready)

    def _drain(self) -> None:
        while True:
            try:
                os.read(self._fd, _EVENT_BUFFER)
            except BlockingIOError:
                return

    def close(self) -> None:
        os.close(self._fd)
