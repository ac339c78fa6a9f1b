"""Asyncio waits on a store's dispatch progress: one thread per store, however many consumers await.

A ``DispatchEvents`` blocks a thread (a condition in the writing process; the signal file's inotify
watch in a follower). An event loop must not block, so ``AsyncWake`` keeps one thread that blocks
there for every coroutine of every loop awaiting the same store, and resolves their futures with
``call_soon_threadsafe`` as soon as the position moves: a coroutine is woken by the writer's
publication itself, not by a timer. The thread starts with the first waiter and ends once no one
has waited for ``_IDLE_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from dataclasses import dataclass

from rocketstore.follow import DispatchEvents

__all__ = ["AsyncWake", "wake_of"]

log = logging.getLogger(__name__)

# how long the thread blocks at a time: it notices a new waiter with an older position at once
# (see wait), so this bounds only how long a finished waiter's slot and a closed store linger
_BLOCK_S = 0.05
_IDLE_S = 1.0


@dataclass(eq=False)
class _Waiter:
    position: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]


class AsyncWake:
    """Wakes the coroutines awaiting ``events``' position to move past the one each saw."""

    def __init__(self, events: DispatchEvents) -> None:
        # weak: the registry's value must not keep its key (the store's events) alive
        self._events = weakref.ref(events)
        self._changed = threading.Condition()
        self._waiters: set[_Waiter] = set()
        self._thread: threading.Thread | None = None

    async def wait(self, events: DispatchEvents, position: int, timeout: float) -> bool:
        """Until ``events.position()`` differs from ``position`` (True), ``timeout`` seconds pass or
        ``wake_all`` is called (False unless the position moved)."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(position, loop, loop.create_future())
        with self._changed:
            # under the lock the thread is either before its look at the position (it will see
            # this waiter) or blocked on a position at most this one (it returns when that
            # moves): only a position that moved already must be answered here
            if events.position() != position:
                return True
            self._waiters.add(waiter)
            self._changed.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rocketstore-async-wake", daemon=True)
                self._thread.start()
        try:
            await asyncio.wait((waiter.future,), timeout=max(0.0, timeout))
        finally:
            with self._changed:
                self._waiters.discard(waiter)
        return events.position() != position

    def wake_all(self) -> None:
        """Return every pending ``wait`` now (a consumer closing while one of its tasks awaits)."""
        with self._changed:
            waiters = list(self._waiters)
            self._waiters.clear()
        for waiter in waiters:
            _resolve(waiter)

    def _run(self) -> None:
        while True:
            with self._changed:
                if not self._waiters and not self._changed.wait_for(lambda: self._waiters, _IDLE_S):
                    self._thread = None
                    return
                events = self._events()
                try:
                    if events is None:
                        raise LookupError("the store's dispatch events are gone")
                    position = events.position()
                except Exception as exc:  # a closed store: its waiters find out themselves
                    log.debug("async wake stops: %r", exc)
                    due, self._thread = list(self._waiters), None
                    self._waiters.clear()
                    for waiter in due:
                        _resolve(waiter)
                    return
                due = [w for w in self._waiters if w.position != position]
                self._waiters.difference_update(due)
            for waiter in due:
                _resolve(waiter)
            try:
                events.wait(position, _BLOCK_S)
            except Exception as exc:  # looked at again, under the lock, in the next round
                log.debug("async wake: wait failed: %r", exc)
                time.sleep(_BLOCK_S)
            del events


_wakes: weakref.WeakKeyDictionary[DispatchEvents, AsyncWake] = weakref.WeakKeyDictionary()
_wakes_lock = threading.Lock()


def wake_of(events: DispatchEvents) -> AsyncWake:
    """The one ``AsyncWake`` of ``events``."""
    with _wakes_lock:
        wake = _wakes.get(events)
        if wake is None:
            wake = _wakes[events] = AsyncWake(events)
        return wake


def _resolve(waiter: _Waiter) -> None:
    def done() -> None:
        if not waiter.future.done():
            waiter.future.set_result(None)

    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to wake
        waiter.loop.call_soon_threadsafe(done)
