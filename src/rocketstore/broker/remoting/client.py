"""One outgoing remoting connection, for what the broker itself asks other servers (its
registrations with name servers): requests matched to answers by opaque, oneway requests.

As RocketMQ's ``NettyRemotingClient`` does, a request that times out closes the connection
(``clientCloseSocketIfTimeout``): the next call opens a new one. Requests the peer sends on it
are not served (a name server sends none). At most ``MAX_PENDING`` requests wait for an answer.

Thread safety: everything runs on the event loop that called ``connect``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
from typing import Final

from rocketstore.broker.remoting.command import (
    FLAG_ONEWAY,
    MAX_FRAME_SIZE,
    RemotingCommand,
    decode_command,
    encode_command,
    frame_length,
)

__all__ = ["RemotingClient"]

log = logging.getLogger("rocketstore.broker.remoting")

MAX_PENDING: Final = 64
_LENGTH = struct.Struct(">i")


class RemotingClient:
    """A connection to ``address`` (``host:port``), opened by ``connect``."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task[None] | None = None
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaques = itertools.count(1)

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self, timeout_s: float) -> None:
        if self.connected:
            return
        host, _, port = self.address.rpartition(":")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), int(port)), timeout_s
        )
        self._reader, self._writer = reader, writer
        self._reading = asyncio.get_running_loop().create_task(self._read(reader))

    async def invoke(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send ``cmd`` and return its answer; on a timeout the connection is closed."""
        await self.connect(timeout_s)
        if len(self._pending) >= MAX_PENDING:
            raise ConnectionError(f"{self.address}: {MAX_PENDING} requests already wait for an answer")
        cmd.opaque = next(self._opaques) & 0x7FFFFFFF
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = future
        try:
            await self._write(cmd)
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            await self.close()
            raise
        finally:
            self._pending.pop(cmd.opaque, None)

    async def oneway(self, cmd: RemotingCommand, timeout_s: float) -> None:
        await self.connect(timeout_s)
        cmd.opaque = next(self._opaques) & 0x7FFFFFFF
        cmd.flag |= FLAG_ONEWAY
        await self._write(cmd)

    async def _write(self, cmd: RemotingCommand) -> None:
        writer = self._writer
        if writer is None:
            raise ConnectionError(f"{self.address}: not connected")
        writer.writelines(encode_command(cmd))
        await writer.drain()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                length = frame_length(await reader.readexactly(4), MAX_FRAME_SIZE)
                cmd = decode_command(await reader.readexactly(length))
                if not cmd.is_response:
                    continue
                future = self._pending.get(cmd.opaque)
                if future is not None and not future.done():
                    cmd.body = bytes(cmd.body)
                    future.set_result(cmd)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except Exception as exc:  # a frame that does not decode: this connection is done
            log.warning(
                "%s sent what is not a remoting frame (%s): closing the connection", self.address, exc
            )
        finally:
            self._fail_pending()
            if self._writer is not None and self._reader is reader:
                self._writer.close()

    def _fail_pending(self) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError(f"{self.address} closed the connection"))

    async def close(self) -> None:
        writer, reading = self._writer, self._reading
        self._writer = self._reader = None
        self._reading = None
        if writer is not None:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
        if reading is not None:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
        self._fail_pending()
