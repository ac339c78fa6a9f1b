"""``PeriodicTask``: a coroutine run every few seconds on the broker's event loop, between
``start`` and ``stop`` (the asyncio counterpart of ``service.py``'s threads, for work that is
network requests: registrations with name servers, a slave's copies, the name server's expiry).

A round that raises is logged with its traceback and the next round runs: what such a round
talks to (a name server, a master) being away is expected, and a bug in one round must not end
the service silently. ``stop`` cancels the round in progress and waits for it to end.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

__all__ = ["PeriodicTask"]


class PeriodicTask:
    """``round_()`` every ``interval_s`` after the end of the last round (the first after
    ``first_s``, default the interval). ``interval_s`` may be a function, read before each wait
    (a setting that changes while the broker runs); ``changed``, when set, makes a wait in
    progress read it again at once (and is cleared)."""

    def __init__(
        self,
        name: str,
        interval_s: float | Callable[[], float],
        round_: Callable[[], Awaitable[object]],
        *,
        first_s: float | None = None,
        log: logging.Logger | None = None,
        changed: asyncio.Event | None = None,
    ) -> None:
        self.name = name
        self._interval = interval_s if callable(interval_s) else lambda: interval_s
        self._first_s = first_s
        self._round = round_
        self._changed = changed
        self._log = log or logging.getLogger("rocketstore.broker")
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Start the loop on the running event loop."""
        if self._task is not None:
            raise RuntimeError(f"{self.name} already started")
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=self.name)

    async def stop(self) -> None:
        """Cancel the loop (and a round in progress) and wait for it to end."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        first = self._first_s
        await self._pause((lambda: first) if first is not None else self._interval)
        while True:
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:
                self._log.exception(
                    "%s: a round failed (the next one runs in %g s)", self.name, self._interval()
                )
            await self._pause(self._interval)

    async def _pause(self, seconds: Callable[[], float]) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        while (remaining := start + seconds() - loop.time()) > 0:
            if self._changed is None:
                await asyncio.sleep(remaining)
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
            self._changed.clear()
