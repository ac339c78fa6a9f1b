"""The one background-service model: a thread running ``run_once`` in a loop.

Each service waits ``interval`` seconds (or until ``wakeup()``), runs one round, and repeats
until ``stop()``. ``stop()`` runs a final round so that nothing accepted before it is left
undone (for example the last dispatch or flush). A round that raises is not swallowed: the
exception is kept in ``failure``, handed to ``on_failure``, and the service stops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["BackgroundService", "FailureHandler"]

log = logging.getLogger(__name__)


FailureHandler = Callable[["BackgroundService", BaseException], None]


class BackgroundService:
    """Base class. Subclasses implement ``run_once``; tests may call it directly instead of start()."""

    def __init__(
        self,
        name: str,
        interval: float,
        on_failure: Callable[[BackgroundService, BaseException], None] | None = None,
    ) -> None:
        self.name = name
        self.interval = interval
        self.failure: BaseException | None = None
        self._on_failure = on_failure
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = threading.Lock()

    def run_once(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._thread = threading.Thread(target=self._loop, name=f"rocketstore-{self.name}", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        # called often (the dispatcher's, by every put that finds a round running, every commit,
        # every replica step): skip the event's lock when a round is due anyway
        if not self._wake.is_set():
            self._wake.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Ask the loop to finish, run its last round, and join the thread."""
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        self._wake.set()
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"{self.name} did not stop within {timeout} s")
        self._thread = None

    def _loop(self) -> None:
        try:
            while not self._stopping.is_set():
                self._wake.wait(self.interval)
                self._wake.clear()
                self.run_once()
            self.run_once()  # the final round: work accepted before stop() is done
        except BaseException as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        """Record and report a failure, once. A service may call it before it releases work that
        depends on the outcome, so that the failure is known by then."""
        with self._failing:
            if self.failure is not None:
                return
            self.failure = exc
        log.error("%s failed; the service has stopped", self.name, exc_info=exc)
        if self._on_failure is not None:
            self._on_failure(self, exc)
