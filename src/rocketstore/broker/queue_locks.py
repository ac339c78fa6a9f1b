"""Queue locks of orderly consumers (RocketMQ's RebalanceLockManager): a queue of a group is
consumed by the one client holding its lock. A lock is granted when the queue is free, renewed
for its holder, and taken over once its holder has not renewed it for ``max_live_ms`` (RocketMQ:
60 s; clients renew every 20 s).

Protocol-free: a queue is any hashable value (the remoting adapter uses its MessageQueue JSON
fields). At most ``max_locks`` locks are held in all (the caller grants only queues that
exist), and at most ``max_per_client`` by one client id, so one client cannot take the whole
table: past either, a new lock is granted only once a lapsed one makes room. Thread safety: one
thread (the event loop) only.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_LOCKS", "MAX_LOCKS_PER_CLIENT", "QueueLocks"]

MAX_LOCKS: Final = 65_536
MAX_LOCKS_PER_CLIENT: Final = 8192


@dataclass
class _Lock:
    client_id: str
    renewed_ms: int


class QueueLocks:
    def __init__(
        self,
        max_live_ms: int = 60_000,
        max_locks: int = MAX_LOCKS,
        max_per_client: int = MAX_LOCKS_PER_CLIENT,
    ) -> None:
        self._locks: dict[str, dict[Hashable, _Lock]] = {}
        self._max_live_ms = max_live_ms
        self._max_locks = max_locks
        self._max_per_client = max_per_client
        self._count = 0
        # locks held (lapsed ones included, until purged) by each client id
        self._per_client: dict[str, int] = {}

    def lock(self, group: str, queues: Iterable[Hashable], client_id: str, now_ms: int) -> list[Hashable]:
        """Lock (or renew) ``queues`` for ``client_id``; the ones it now holds, in the given order."""
        table = self._locks.setdefault(group, {})
        held = []
        purged = False
        for q in queues:
            lock = table.get(q)
            if lock is not None and lock.client_id == client_id:
                lock.renewed_ms = now_ms
                held.append(q)
                continue
            if lock is not None and now_ms - lock.renewed_ms <= self._max_live_ms:
                continue  # another client's, live
            # a new lock for client_id: a free queue, or a lapsed lock taken over
            if self._full(client_id, lock is None):
                if purged:
                    continue
                purged = True  # once per request: the visit costs every lock
                self._purge(now_ms)
                table = self._locks.setdefault(group, table)
                lock = table.get(q)  # a lapsed lock of this queue is gone now
                if self._full(client_id, lock is None):
                    continue
            if lock is None:
                self._count += 1
            else:
                self._release(lock.client_id)
            table[q] = _Lock(client_id, now_ms)
            self._per_client[client_id] = self._per_client.get(client_id, 0) + 1
            held.append(q)
        if not table:
            del self._locks[group]
        return held

    def _full(self, client_id: str, new_entry: bool) -> bool:
        """Whether ``client_id`` may not take one more lock (``new_entry``: one more in all)."""
        return (new_entry and self._count >= self._max_locks) or self._per_client.get(
            client_id, 0
        ) >= self._max_per_client

    def _release(self, client_id: str) -> None:
        left = self._per_client.pop(client_id) - 1
        if left:
            self._per_client[client_id] = left

    def _purge(self, now_ms: int) -> None:
        """Forget the lapsed locks (a visit of every lock, made only when a cap is reached)."""
        for group, table in list(self._locks.items()):
            for q in [q for q, lock in table.items() if now_ms - lock.renewed_ms > self._max_live_ms]:
                self._release(table.pop(q).client_id)
                self._count -= 1
            if not table:
                del self._locks[group]

    def held_by(self, client_id: str) -> int:
        """Locks ``client_id`` holds (lapsed ones not yet purged included)."""
        return self._per_client.get(client_id, 0)

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
                self._release(client_id)
        if not table:
            del self._locks[group]

    def holder(self, group: str, queue: Hashable, now_ms: int) -> str | None:
        lock = self._locks.get(group, {}).get(queue)
        if lock is None or now_ms - lock.renewed_ms > self._max_live_ms:
            return None
        return lock.client_id
