"""Queue locks of orderly consumers (RocketMQ's RebalanceLockManager): a queue of a group is
consumed by the one client holding its lock. A lock is granted when the queue is free, renewed
for its holder, and taken over once its holder has not renewed it for ``max_live_ms`` (RocketMQ:
60 s; clients renew every 20 s).

Protocol-free: a queue is any hashable value (the remoting adapter uses its MessageQueue JSON
fields). Thread safety: one thread (the event loop) only.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

__all__ = ["QueueLocks"]


@dataclass
class _Lock:
    client_id: str
    renewed_ms: int


class QueueLocks:
    def __init__(self, max_live_ms: int = 60_000) -> None:
        self._locks: dict[str, dict[Hashable, _Lock]] = {}
        self._max_live_ms = max_live_ms

    def lock(self, group: str, queues: Iterable[Hashable], client_id: str, now_ms: int) -> list[Hashable]:
        """Lock (or renew) ``queues`` for ``client_id``; the ones it now holds, in the given order."""
        table = self._locks.setdefault(group, {})
        held = []
        for q in queues:
            lock = table.get(q)
            if lock is None or lock.client_id == client_id or now_ms - lock.renewed_ms > self._max_live_ms:
                table[q] = _Lock(client_id, now_ms)
                held.append(q)
        return held

    def unlock(self, group: str, queues: Iterable[Hashable], client_id: str) -> None:
        """Release those of ``queues`` that ``client_id`` holds."""
        table = self._locks.get(group)
        if table is None:
            return
        for q in queues:
            lock = table.get(q)
            if lock is not None and lock.client_id == client_id:
                del table[q]
        if not table:
            del self._locks[group]

    def holder(self, group: str, queue: Hashable, now_ms: int) -> str | None:
        lock = self._locks.get(group, {}).get(queue)
        if lock is None or now_ms - lock.renewed_ms > self._max_live_ms:
            return None
        return lock.client_id
