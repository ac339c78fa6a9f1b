"""The producer groups connected over remoting (from HEART_BEAT), so the broker can send a
transaction check to a live producer of a half message's group (RocketMQ's ProducerManager).

A connection's registration ends when it closes, on UNREGISTER_CLIENT, or after
``expire_ms`` without a heartbeat (RocketMQ: 120 s; clients heartbeat every 30 s). It keeps the
account that signed the heartbeat (with an ACL): a check goes only to a producer whose account
may see the half.

Bounded (STYLE §13): at most ``MAX_GROUPS_PER_CONNECTION`` groups per connection and
``MAX_REGISTRATIONS_PER_ACCOUNT`` registrations made by one ACL account; past them a
registration is refused. No cap in all, which one client with many connections could fill to
lock the others out: the connections' limit (``RemotingLimits.max_connections``) times
``MAX_GROUPS_PER_CONNECTION`` bounds the whole. A closed connection registers nothing (a
heartbeat handled after its connection closed). A connection's groups are indexed by
connection, so its close forgets them in time linear in their number.

Thread safety: event loop only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rocketstore.broker.remoting.codes import ResponseCode
from rocketstore.broker.remoting.refusal import RequestRefused

if TYPE_CHECKING:
    from rocketstore.broker.remoting.server import Connection

__all__ = [
    "MAX_GROUPS_PER_CONNECTION",
    "MAX_REGISTRATIONS_PER_ACCOUNT",
    "ProducerGroups",
    "ProducerRegistration",
]

# a client has a few (its producers' groups)
MAX_GROUPS_PER_CONNECTION: Final = 1024
MAX_REGISTRATIONS_PER_ACCOUNT: Final = 8192


@dataclass
class ProducerRegistration:
    client_id: str
    connection: Connection
    last_heartbeat_ms: int
    account: str | None = None  # the ACL access key that registered it


class ProducerGroups:
    def __init__(self, expire_ms: int = 120_000) -> None:
        self._groups: dict[str, dict[Connection, ProducerRegistration]] = {}
        self._by_connection: dict[Connection, set[str]] = {}
        self._per_account: dict[str, int] = {}
        self._count = 0
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
        """Register (or renew) ``conn`` as a producer of ``group``; RequestRefused past a bound.
        A closed ``conn`` is not registered."""
        if conn.closed:
            return
        now = int(time.time() * 1000) if now_ms is None else now_ms
        members = self._groups.get(group)
        known = members.get(conn) if members is not None else None
        if known is not None:
            known.client_id, known.last_heartbeat_ms = client_id, now
            return
        mine = self._by_connection.get(conn)
        if mine is not None and len(mine) >= MAX_GROUPS_PER_CONNECTION:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"producer group {group}: this connection is in {MAX_GROUPS_PER_CONNECTION} groups, "
                "the limit",
            )
        if account is not None and self._per_account.get(account, 0) >= MAX_REGISTRATIONS_PER_ACCOUNT:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"producer group {group}: access key {account} holds {MAX_REGISTRATIONS_PER_ACCOUNT} "
                "producer registrations, the limit",
            )
        if mine is None:
            mine = self._by_connection[conn] = set()
            conn.when_closed(self._closed)
        mine.add(group)
        if members is None:
            members = self._groups[group] = {}
        members[conn] = ProducerRegistration(client_id, conn, now, account)
        self._count += 1
        if account is not None:
            self._per_account[account] = self._per_account.get(account, 0) + 1

    def _remove(self, group: str, conn: Connection) -> None:
        members = self._groups[group]
        registration = members.pop(conn)
        if not members:
            del self._groups[group]
        self._count -= 1
        account = registration.account
        if account is not None:
            held = self._per_account.pop(account) - 1
            if held:
                self._per_account[account] = held

    def unregister(self, group: str, client_id: str) -> None:
        members = self._groups.get(group)
        if not members:
            return
        for conn in [c for c, r in members.items() if r.client_id == client_id]:
            self._remove(group, conn)
            self._by_connection[conn].discard(group)

    def _closed(self, conn: Connection) -> None:
        for group in self._by_connection.pop(conn, ()):
            self._remove(group, conn)

    def groups_of(self, conn: Connection) -> set[str]:
        """The groups ``conn`` is registered in."""
        return set(self._by_connection.get(conn, ()))

    def __len__(self) -> int:
        """Registrations: (group, connection) pairs."""
        return self._count

    def groups(self) -> dict[str, list[ProducerRegistration]]:
        return {g: list(m.values()) for g, m in self._groups.items()}

    def members(self, group: str) -> list[ProducerRegistration]:
        """The registrations of ``group`` (mqadmin producerConnection)."""
        return list(self._groups.get(group, {}).values())

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
