"""Wakes long polls when messages arrive: one thread waits on the store's dispatch signal
(``MessageStore.dispatch_events``) and wakes the event loop's waiters with
``call_soon_threadsafe``, so a waiting receive costs no polling (issue item 5). The thread waits
for dispatch only while some receive is looking for messages (``watching``); otherwise it sleeps
until one starts. So while producers send and no consumer waits (or consumers find messages at
once) a dispatch round wakes neither the thread nor the loop: such a wake-up per round cost the
remoting door's single sends about a tenth of their rate, in the GIL taken from the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from rocketstore.follow import DispatchEvents

__all__ = ["ArrivalSignal"]


class ArrivalSignal:
    """``await wait(timeout)`` returns when dispatch made new messages visible, or on timeout.

    Thread safety: ``watching``, ``mark`` and ``wait`` on the loop's thread; the watcher thread
    only reads the count of watchers and calls ``call_soon_threadsafe``.
    """

    def __init__(self, events: DispatchEvents, loop: asyncio.AbstractEventLoop) -> None:
        self._events = events
        self._loop = loop
        self._event = asyncio.Event()
        self._watchers = 0
        self._watched = threading.Event()  # set while _watchers > 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="broker-arrival", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._watched.set()
        self._thread.join(timeout=5)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self._watched.wait()
            # A receive that started watching looked for messages after its mark, maybe before
            # this read of the position: what came between is made known to it by this wake-up
            position = self._events.position()
            self._wake_loop()
            while self._watchers and not self._stop.is_set():
                if self._events.wait(position, 0.5):
                    position = self._events.position()
                    if self._watchers:  # none: whoever watches next is woken once, above
                        self._wake_loop()

    def _wake_loop(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed first
            self._loop.call_soon_threadsafe(self._fire)

    def _fire(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Around every look for messages and wait for them: arrivals wake the loop only then."""
        self._watchers += 1
        self._watched.set()
        try:
            yield
        finally:
            self._watchers -= 1
            if not self._watchers:
                self._watched.clear()

    @property
    def watched(self) -> bool:
        """Whether some receive is looking for messages or waiting for them (on the loop's thread)."""
        return self._watchers > 0

    def mark(self) -> asyncio.Event:
        """Taken before looking for messages: ``wait(timeout, mark)`` then returns at once when
        some arrived after the look began (else an arrival between the look and the wait is lost)."""
        return self._event

    async def wait(self, timeout: float, since: asyncio.Event | None = None) -> bool:
        """True when messages arrived within ``timeout`` seconds (or since ``since`` was taken)."""
        event = self._event if since is None else since
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True
