"""Queue locks of orderly consumers (RocketMQ's RebalanceLockManager): a queue of a group is
consumed by the one client holding its lock. A lock is granted when the queue is free, renewed
for its holder, and taken over once its holder has not renewed it for ``max_live_ms`` (RocketMQ:
60 s; clients renew every 20 s).

Protocol-free: a queue is any hashable value (the remoting adapter uses its MessageQueue JSON
fields). At most ``max_locks`` locks are held in all (the caller grants only queues that
exist): past it, a new lock is granted only once a lapsed one makes room. Thread safety: one
thread (the event loop) only.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_LOCKS", "QueueLocks"]

MAX_LOCKS: Final = 65_536


@dataclass
class _Lock:
    client_id: str
    renewed_ms: int


class QueueLocks:
    def __init__(self, max_live_ms: int = 60_000, max_locks: int = MAX_LOCKS) -> None:
        self._locks: dict[str, dict[Hashable, _Lock]] = {}
        self._max_live_ms = max_live_ms
        self._max_locks = max_locks
        self._count = 0

    def lock(self, group: str, queues: Iterable[Hashable], client_id: str, now_ms: int) -> list[Hashable]:
        """Lock (or renew) ``queues`` for ``client_id``; the ones it now holds, in the given order."""
        table = self._locks.setdefault(group, {})
        held = []
        purged = False
        for q in queues:
            lock = table.get(q)
            if lock is None:
                if self._count >= self._max_locks:
                    if purged:
                        continue
                    purged = True  # once per request: the visit costs every lock
                    self._purge(now_ms)
                    table = self._locks.setdefault(group, table)
                    if self._count >= self._max_locks:
                        continue
                self._count += 1
            elif lock.client_id != client_id and now_ms - lock.renewed_ms <= self._max_live_ms:
                continue
            table[q] = _Lock(client_id, now_ms)
            held.append(q)
        if not table:
            del self._locks[group]
        return held

    def _purge(self, now_ms: int) -> None:
        """Forget the lapsed locks (a visit of every lock, made only when the table is full)."""
        for group, table in list(self._locks.items()):
            for q in [q for q, lock in table.items() if now_ms - lock.renewed_ms > self._max_live_ms]:
                del table[q]
                self._count -= 1
            if not table:
                del self._locks[group]

    def __len__(self) -> int:
        return self._count

    def unlock(self, group: str, queues: Iterable[Hashable], client_id: str) -> None:
        """Release those of ``queues`` that ``client_id`` holds."""
        table = self._locks.get(group)
        if table is None:
            return
        for q in queues:
            lock = table.get(q)
            if lock is not None and lock.client_id == client_id:
                del table[q]
                self._count -= 1
        if not table:
            del self._locks[group]

    def holder(self, group: str, queue: Hashable, now_ms: int) -> str | None:
        lock = self._locks.get(group, {}).get(queue)
        if lock is None or now_ms - lock.renewed_ms > self._max_live_ms:
            return None
        return lock.client_id
