"""Wakes long polls when messages arrive, with no polling (issue item 5) and only while some
receive watches for them (``watching``): while producers send and no consumer waits (or
consumers find messages at once) a dispatch pass wakes nothing. Such a wake-up per pass cost the
remoting door's single sends about a tenth of their rate.

In the writing process (``DispatchEvents.subscribe``) each dispatch pass tells the signal on its
own thread: on the event loop's (the broker puts there) the waiters are woken there and then, and
from another thread with ``call_soon_threadsafe``. Otherwise (a follower of another process's
store) a thread waits on the store's dispatch signal (``MessageStore.dispatch_events``) while
some receive watches, and wakes the loop's waiters. A thread of its own cost the consume phase,
where a parked pull watches all the time, a wake-up of that thread per pass and the GIL handed to
it and back (docs/remoting.md)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator

from rocketstore.follow import DispatchEvents

__all__ = ["ArrivalSignal"]


class ArrivalSignal:
    """``await wait(timeout)`` returns when dispatch made new messages visible, or on timeout.
    Made on the event loop's thread.

    Thread safety: ``watching``, ``mark`` and ``wait`` on the loop's thread; dispatch passes on
    other threads (and the watcher thread) only read the count of watchers and call
    ``call_soon_threadsafe``.
    """

    def __init__(self, events: DispatchEvents, loop: asyncio.AbstractEventLoop) -> None:
        self._events = events
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._event = asyncio.Event()
        self._watchers = 0
        self._unsubscribe: Callable[[], None] | None = None
        # the fallback where passes cannot be listened to: _watched is set while _watchers > 0
        self._thread: threading.Thread | None = None
        self._watched = threading.Event()
        self._stop = threading.Event()

    def start(self) -> None:
        self._unsubscribe = self._events.subscribe(self._dispatched)
        if self._unsubscribe is None:
            self._thread = threading.Thread(target=self._watch, name="broker-arrival", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._thread is not None:
            self._stop.set()
            self._watched.set()
            self._thread.join(timeout=5)

    def _dispatched(self) -> None:
        """A dispatch pass made messages visible (on the pass's thread, within the pass). A
        receive that started watching after this count was read looks at what the pass wrote."""
        if not self._watchers:
            return
        if threading.get_ident() != self._loop_thread:
            self._wake_loop()
            return
        with contextlib.suppress(RuntimeError):  # the loop closed under a watcher that stayed
            self._fire()

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
        if self._thread is not None:
            self._watched.set()
        try:
            yield
        finally:
            self._watchers -= 1
            if not self._watchers and self._thread is not None:
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
