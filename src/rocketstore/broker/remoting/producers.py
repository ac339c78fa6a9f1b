"""The producer groups connected over remoting (from HEART_BEAT), so the broker can send a
transaction check to a live producer of a half message's group (RocketMQ's ProducerManager).

A connection's registration ends when it closes, on UNREGISTER_CLIENT, or after
``expire_ms`` without a heartbeat (RocketMQ: 120 s; clients heartbeat every 30 s). It keeps the
account that signed the heartbeat (with an ACL): a check goes only to a producer whose account
may see the half.

Thread safety: event loop only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocketstore.broker.remoting.server import Connection

__all__ = ["ProducerGroups", "ProducerRegistration"]


@dataclass
class ProducerRegistration:
    client_id: str
    connection: Connection
    last_heartbeat_ms: int
    account: str | None = None  # the ACL access key that registered it


class ProducerGroups:
    def __init__(self, expire_ms: int = 120_000) -> None:
        self._groups: dict[str, dict[Connection, ProducerRegistration]] = {}
        self._expire_ms = expire_ms
        self._round_robin = 0

    def register(
        self,
        group: str,
        client_id: str,
        conn: Connection,
        now_ms: int | None = None,
        account: str | None = None,
    ) -> None:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        members = self._groups.setdefault(group, {})
        if conn not in members:
            conn.on_close.append(self._closed)
        members[conn] = ProducerRegistration(client_id, conn, now, account)

    def unregister(self, group: str, client_id: str) -> None:
        members = self._groups.get(group)
        if not members:
            return
        for conn in [c for c, r in members.items() if r.client_id == client_id]:
            del members[conn]
        if not members:
            del self._groups[group]

    def _closed(self, conn: Connection) -> None:
        for group in list(self._groups):
            members = self._groups[group]
            members.pop(conn, None)
            if not members:
                del self._groups[group]

    def groups(self) -> dict[str, list[ProducerRegistration]]:
        return {g: list(m.values()) for g, m in self._groups.items()}

    def live_connection(
        self,
        group: str,
        now_ms: int | None = None,
        allowed: Callable[[str | None], bool] | None = None,
    ) -> Connection | None:
        """An open connection of a producer of ``group`` that heartbeated lately and whose
        account (access key) is ``allowed`` (None: any), round robin over them; None when there
        is none."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        members = self._groups.get(group)
        if not members:
            return None
        live = [
            r.connection
            for r in members.values()
            if not r.connection.closed
            and now - r.last_heartbeat_ms <= self._expire_ms
            and (allowed is None or allowed(r.account))
        ]
        if not live:
            return None
        self._round_robin += 1
        return live[self._round_robin % len(live)]
