"""A raw remoting client for the tests: frames over a socket, requests matched by opaque, and
the server's own requests kept apart."""

from __future__ import annotations

import itertools
import socket
import struct

from rocketstore.broker.remoting.command import (
    FLAG_ONEWAY,
    SERIALIZE_JSON,
    RemotingCommand,
    decode_command,
    encode_command,
)

_opaques = itertools.count(1)


class RawClient:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.server_requests: list[RemotingCommand] = []
        self._early: dict[int, RemotingCommand] = {}

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, cmd: RemotingCommand) -> int:
        if not cmd.opaque:
            cmd.opaque = next(_opaques)
        self.sock.sendall(b"".join(bytes(b) for b in encode_command(cmd)))
        return cmd.opaque

    def _read_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            out += chunk
        return bytes(out)

    def read(self) -> RemotingCommand:
        (length,) = struct.unpack(">i", self._read_exact(4))
        cmd = decode_command(self._read_exact(length))
        cmd.body = bytes(cmd.body)
        return cmd

    def response_to(self, opaque: int) -> RemotingCommand:
        if opaque in self._early:
            return self._early.pop(opaque)
        while True:
            cmd = self.read()
            if not cmd.is_response:
                self.server_requests.append(cmd)
            elif cmd.opaque == opaque:
                return cmd
            else:
                self._early[cmd.opaque] = cmd

    def call(
        self,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        serialize_type: int = SERIALIZE_JSON,
    ) -> RemotingCommand:
        opaque = self.send(
            RemotingCommand(code=code, ext_fields=ext or {}, body=body, serialize_type=serialize_type)
        )
        return self.response_to(opaque)

    def oneway(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send(RemotingCommand(code=code, flag=FLAG_ONEWAY, ext_fields=ext or {}, body=body))

    def server_request(self) -> RemotingCommand:
        """The next request the server sent (reading on until one comes)."""
        if self.server_requests:
            return self.server_requests.pop(0)
        while True:
            cmd = self.read()
            if not cmd.is_response:
                return cmd
            self._early[cmd.opaque] = cmd

    def closed_by_server(self) -> bool:
        """True once the server closed this connection (reads until EOF or the socket timeout)."""
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except ConnectionError:
            return True
        except TimeoutError:
            return False
