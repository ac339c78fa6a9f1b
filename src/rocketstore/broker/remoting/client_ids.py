"""Client ids bound to the connection (and account) that first used them (REMOTING.md §8.1).

A client id names a client in HEART_BEAT, UNREGISTER_CLIENT, LOCK_BATCH_MQ, UNLOCK_BATCH_MQ and
CHECK_CLIENT_CONFIG: the groups it belongs to and the queue locks it holds are the id's. The
first connection to use an id holds it; the same id from another connection, or from the same
connection signed by another account, is refused while the holder lives, so no client can leave
a group, give up locks or take over queues in another client's name.

The id is free again once its connection closes, or has been silent for ``expire_s`` (120 s:
RocketMQ's broker drops a client silent that long; clients heartbeat every 30 s): a RocketMQ
client that reconnects keeps its id and so its group membership and queue locks. One connection
holds at most ``max_per_connection`` ids (a Java client uses one per connection).

Thread safety: event loop only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rocketstore.broker.remoting.acl import acl_denied
from rocketstore.broker.remoting.codes import ResponseCode
from rocketstore.broker.remoting.refusal import RequestRefused

if TYPE_CHECKING:
    from rocketstore.broker.remoting.server import Connection

__all__ = ["ClientIds"]

_HELD_KEY: Final = "client_ids"


@dataclass(slots=True)
class _Holder:
    connection: Connection
    access_key: str | None


class ClientIds:
    def __init__(self, expire_s: float = 120.0, max_per_connection: int = 64) -> None:
        self._holders: dict[str, _Holder] = {}
        self._expire_s = expire_s
        self._max_per_connection = max_per_connection

    def claim(
        self, client_id: str, conn: Connection, access_key: str | None, now: float | None = None
    ) -> None:
        """Bind ``client_id`` to ``conn`` and ``access_key`` (None: no ACL), or confirm it is;
        RequestRefused when another live connection or another account holds it, or ``conn``
        is closed (a request handled after its connection closed binds nothing, nor acts in the
        id's name)."""
        if conn.closed:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, f"the connection of client id {client_id} closed")
        holder = self._holders.get(client_id)
        if holder is not None and holder.connection is conn:
            if holder.access_key != access_key:
                raise acl_denied(
                    f"client id {client_id} is accessKey={holder.access_key}'s on this connection, "
                    f"not accessKey={access_key}'s"
                )
            return
        if holder is not None and self._live(holder.connection, now):
            why = (
                f"client id {client_id} is held by another connection ({holder.connection.peer}) "
                "until it closes"
            )
            if holder.access_key != access_key:
                raise acl_denied(f"{why}, accessKey={access_key}")
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, why)
        held: set[str] | None = conn.attributes.get(_HELD_KEY)
        if held is None:
            held = conn.attributes[_HELD_KEY] = set()
            conn.when_closed(self._closed)
        if len(held) >= self._max_per_connection:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"this connection uses {len(held)} client ids already, {self._max_per_connection} at most",
            )
        if holder is not None:  # its connection closed or went silent: a reconnecting client
            others: set[str] = holder.connection.attributes.get(_HELD_KEY, set())
            others.discard(client_id)
        self._holders[client_id] = _Holder(conn, access_key)
        held.add(client_id)

    def holder(self, client_id: str, now: float | None = None) -> Connection | None:
        """The live connection holding ``client_id``, None when it is free."""
        holder = self._holders.get(client_id)
        return holder.connection if holder is not None and self._live(holder.connection, now) else None

    def __len__(self) -> int:
        return len(self._holders)

    def _live(self, conn: Connection, now: float | None = None) -> bool:
        if conn.closed:
            return False
        return (time.monotonic() if now is None else now) - conn.last_read <= self._expire_s

    def _closed(self, conn: Connection) -> None:
        for client_id in conn.attributes.get(_HELD_KEY, ()):
            holder = self._holders.get(client_id)
            if holder is not None and holder.connection is conn:
                del self._holders[client_id]
