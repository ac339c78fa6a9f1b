"""Coalescing of concurrent calls: the items that RPC handlers submit while a worker thread is busy
are handed to the next worker call together, so N concurrent sends (or acks) cost one store write,
one flush wait and one thread hand-off instead of N (issue item 5).

Each ``submit`` waits for its own outcome. One round takes everything queued (up to ``max_weight``,
at least one item) and runs ``run_batch`` on the executor; up to ``rounds`` rounds run at once, so
one batch is written while the previous one waits for its flush. ``run_batch`` returns one outcome
per item: an outcome that is an exception is raised in that item's caller, and an exception of
``run_batch`` itself in every caller of the round.

Without an executor, ``run_batch`` runs on the event loop itself, once per turn of the loop,
over everything submitted in that turn: for work that never waits (a put without its flush wait),
the hand-off to a thread and back cost more than the work (docs/remoting.md). What such a round
must still wait for (the flush of what it put, under SYNC_FLUSH) is ``finish``: a round's callers
hear their outcomes once it is done, and up to ``rounds`` rounds wait at once; what is submitted
meanwhile goes in the next round, so the waits are shared as the work is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Coalescer"]

T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[T, R]):
    """Runs ``run_batch`` over the items submitted meanwhile (see the module docstring).

    Thread safety: ``submit`` is called on the event loop only; ``run_batch`` runs on ``executor``
    (None: on the event loop, and then ``finish(items, outcomes)``, when given, is awaited on it
    for the outcomes the callers get).
    """

    def __init__(
        self,
        run_batch: Callable[[list[T]], Sequence[R | BaseException]],
        executor: concurrent.futures.Executor | None,
        *,
        max_weight: int = 1024,
        rounds: int = 2,
        weight: Callable[[T], int] | None = None,
        on_round: Callable[[], object] | None = None,
        finish: Callable[[list[T], Sequence[R | BaseException]], Awaitable[Sequence[R | BaseException]]]
        | None = None,
    ) -> None:
        if max_weight <= 0 or rounds <= 0:
            raise ValueError(f"max_weight and rounds must be positive, not {max_weight} and {rounds}")
        if finish is not None and executor is not None:
            raise ValueError("finish is for rounds run on the event loop (no executor)")
        self._run_batch = run_batch
        self._executor = executor
        self._finish = finish
        self._max_weight = max_weight
        self._rounds = rounds
        self._weight = weight
        self._on_round = on_round  # after each round, on the loop (a metric)
        self._running = 0
        self._scheduled = False  # (without an executor) a round at the loop's next turn
        self._drains: set[asyncio.Task[None]] = set()
        self._queue: deque[tuple[T, asyncio.Future[R]]] = deque()
        self.batches = 0  # rounds run, for the metrics and tests
        self.items = 0
        self.total_weight = 0  # of the items taken

    async def submit(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[R] = loop.create_future()
        self._queue.append((item, fut))
        if self._executor is None:
            if not self._scheduled:
                self._scheduled = True
                loop.call_soon(self._run_on_loop)
        elif self._running < self._rounds:
            self._running += 1
            task = loop.create_task(self._drain())
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)
        return await fut

    def _take(self) -> tuple[list[tuple[T, asyncio.Future[R]]], int]:
        queue, weight = self._queue, self._weight
        taken = [queue.popleft()]
        total = weight(taken[0][0]) if weight else 1
        while queue:
            w = weight(queue[0][0]) if weight else 1
            if total + w > self._max_weight:
                break
            taken.append(queue.popleft())
            total += w
        return taken, total

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                taken, weight = self._take()
                items = [item for item, _ in taken]
                try:
                    outcomes: Sequence[R | BaseException] = await loop.run_in_executor(
                        self._executor, self._run_batch, items
                    )
                except asyncio.CancelledError:  # the broker stops
                    for _, fut in taken:
                        fut.cancel()
                    raise
                except Exception as exc:  # the store is closed, a flush failed: every caller hears it
                    outcomes = [exc] * len(items)
                self._settle(taken, weight, outcomes)
        finally:
            self._running -= 1

    def _run_on_loop(self) -> None:
        self._scheduled = False
        finish = self._finish
        while self._queue and (finish is None or self._running < self._rounds):
            taken, weight = self._take()
            items = [item for item, _ in taken]
            try:
                outcomes = self._run_batch(items)
            except Exception as exc:  # the store is closed: every caller hears it
                outcomes = [exc] * len(items)
            if finish is None:
                self._settle(taken, weight, outcomes)
                continue
            self._running += 1
            task = asyncio.get_running_loop().create_task(
                self._finished(finish, taken, weight, items, outcomes)
            )
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)

    async def _finished(
        self,
        finish: Callable[[list[T], Sequence[R | BaseException]], Awaitable[Sequence[R | BaseException]]],
        taken: list[tuple[T, asyncio.Future[R]]],
        weight: int,
        items: list[T],
        outcomes: Sequence[R | BaseException],
    ) -> None:
        """A round run on the loop: its callers hear their outcomes once ``finish`` is done."""
        try:
            try:
                outcomes = await finish(items, outcomes)
            except asyncio.CancelledError:  # the broker stops
                for _, fut in taken:
                    fut.cancel()
                raise
            except Exception as exc:  # (a bug) every caller hears it rather than wait for ever
                outcomes = [exc] * len(items)
            self._settle(taken, weight, outcomes)
        finally:
            self._running -= 1
            if self._queue and not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._run_on_loop)

    def _settle(
        self, taken: list[tuple[T, asyncio.Future[R]]], weight: int, outcomes: Sequence[R | BaseException]
    ) -> None:
        """Count the round and hand each caller its outcome."""
        self.batches += 1
        self.items += len(taken)
        self.total_weight += weight
        if self._on_round is not None:
            self._on_round()
        for (_, fut), outcome in zip(taken, outcomes):
            if fut.done():
                continue  # its caller was cancelled
            if isinstance(outcome, BaseException):
                fut.set_exception(outcome)
            else:
                fut.set_result(outcome)
