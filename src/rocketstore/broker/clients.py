"""The clients the broker knows: who they are (Heartbeat, Telemetry settings), where they connect
from, and the Telemetry stream to reach each one (for orphaned-transaction checks).

Thread safety: used on the event loop only; ``snapshot`` gives plain data to other threads.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from rocketstore.broker.auth import Account
from rocketstore.errors import Refusal, RequestRefusedError

__all__ = ["ClientInfo", "ClientRegistry", "CommandQueue"]

log = logging.getLogger("rocketstore.broker.clients")


class CommandQueue:
    """What the broker has to write on one client's Telemetry stream (answers to its settings,
    orphaned-transaction checks), bounded: at most ``max_items`` commands of ``max_bytes`` in
    all. A client that does not read its stream fills it; the next command then overflows it:
    what is pending is dropped, and ``get`` answers None, so the stream is closed (``reason``
    says why). So a client that writes without reading holds no more than the bound."""

    def __init__(self, client_id: str, max_items: int, max_bytes: int) -> None:
        self._client_id = client_id
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._bytes = 0
        self.reason: str | None = None

    def offer(self, command: Any) -> bool:
        """Queue ``command``; False (and the stream to be closed) when it does not fit."""
        if self.reason is not None:
            return False
        size = int(command.ByteSize())
        if self._queue.qsize() >= self._max_items or self._bytes + size > self._max_bytes:
            self.close(
                f"{self._queue.qsize()} commands of {self._bytes} bytes not yet read by the client "
                f"(the limit: {self._max_items} commands, {self._max_bytes} bytes)"
            )
            log.warning("telemetry stream of client %s closed: %s", self._client_id, self.reason)
            return False
        self._bytes += size
        self._queue.put_nowait((command, size))
        return True

    def close(self, reason: str) -> None:
        """Drop what is pending and end the stream after the command being written."""
        if self.reason is not None:
            return
        self.reason = reason
        while not self._queue.empty():
            self._queue.get_nowait()
        self._bytes = 0
        self._queue.put_nowait(None)

    async def get(self) -> Any:
        """The next command; None once the stream is to end."""
        item = await self._queue.get()
        if item is None:
            self._queue.put_nowait(None)
            return None
        command, size = item
        self._bytes -= size
        return command


@dataclass
class ClientInfo:
    client_id: str
    peer: str
    language: str = ""
    version: str = ""
    client_type: str = "CLIENT_TYPE_UNSPECIFIED"
    group: str = ""
    topics: set[str] = field(default_factory=set)
    first_seen_ms: int = 0
    last_seen_ms: int = 0
    receiving: int = 0  # its ReceiveMessage calls under way
    # server commands to write on the client's Telemetry stream; None while it has none open
    commands: CommandQueue | None = None
    # the account that signed the open Telemetry stream (None: no ACL): server commands about a
    # topic go only to a stream whose account may use it
    account: Account | None = None
    # the access key of the account that first used this client id (None: no ACL): requests of
    # another account under this id are refused until the client is forgotten
    access_key: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "client_id": self.client_id,
            "peer": self.peer,
            "type": self.client_type,
            "language": self.language,
            "version": self.version,
            "group": self.group,
            "topics": sorted(self.topics),
            "telemetry": self.commands is not None,
            "first_seen_ms": self.first_seen_ms,
            "last_seen_ms": self.last_seen_ms,
        }


class ClientRegistry:
    """client id -> ClientInfo; a client is forgotten on NotifyClientTermination or after
    ``expire_ms`` without a request (clients heartbeat every 10 s). One connection (peer) may
    bring at most ``max_per_peer`` client ids: a client inventing ids is refused
    (``RequestRefusedError`` OVER_LIMIT) rather than held without bound. A client id belongs to
    the account that used it first: another account's request under it is refused (FORBIDDEN),
    so no account ends, re-types or takes the Telemetry stream of another's client."""

    def __init__(self, expire_ms: int = 120_000, max_per_peer: int = 64) -> None:
        self._clients: dict[str, ClientInfo] = {}
        self._per_peer: dict[str, int] = {}
        self._expire_ms = expire_ms
        self._max_per_peer = max_per_peer
        self.changed = False

    def seen(
        self, client_id: str, peer: str, now_ms: int, metadata: dict[str, str], access_key: str | None = None
    ) -> ClientInfo:
        info = self._clients.get(client_id)
        if info is not None and info.access_key != access_key:
            raise RequestRefusedError(
                Refusal.FORBIDDEN,
                f"client id {client_id!r} is used by access key {info.access_key!r}, not {access_key!r}",
            )
        if info is None:
            held = self._per_peer.get(peer, 0)
            if held >= self._max_per_peer:
                log.warning(
                    "client %s from %s refused: %d client ids on that connection", client_id, peer, held
                )
                raise RequestRefusedError(
                    Refusal.OVER_LIMIT,
                    f"{held} client ids on this connection already: at most {self._max_per_peer}",
                )
            self._per_peer[peer] = held + 1
            info = self._clients[client_id] = ClientInfo(
                client_id,
                peer,
                language=metadata.get("x-mq-language", ""),
                version=metadata.get("x-mq-client-version", ""),
                first_seen_ms=now_ms,
                access_key=access_key,
            )
            self.changed = True
            log.info("client connected: %s from %s (%s %s)", client_id, peer, info.language, info.version)
        info.last_seen_ms = now_ms
        return info

    def forget(self, client_id: str, reason: str) -> None:
        info = self._clients.pop(client_id, None)
        if info is not None:
            held = self._per_peer.pop(info.peer) - 1
            if held:
                self._per_peer[info.peer] = held
            self.changed = True
            log.info("client gone: %s (%s)", client_id, reason)

    def expire(self, now_ms: int) -> None:
        for cid in [c for c, i in self._clients.items() if now_ms - i.last_seen_ms > self._expire_ms]:
            self.forget(cid, f"no request for {self._expire_ms // 1000} s")

    def producers_of(self, topic: str) -> list[ClientInfo]:
        """Producers with an open Telemetry stream whose settings list ``topic``."""
        return [
            c
            for c in self._clients.values()
            if c.commands is not None and c.client_type == "PRODUCER" and topic in c.topics
        ]

    def get(self, client_id: str) -> ClientInfo | None:
        return self._clients.get(client_id)

    def snapshot(self) -> list[dict[str, object]]:
        return [c.to_dict() for c in self._clients.values()]

    def __len__(self) -> int:
        return len(self._clients)
