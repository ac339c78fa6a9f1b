"""The gRPC side of ``rocketstore serve``: the ``MessagingService`` on a grpc.aio server, with
its message-size and stream limits and, when the broker has a certificate, TLS."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.grpc.messaging_service import MessagingService
from rocketstore.protocol import service_pb2_grpc

__all__ = ["GrpcEndpoint"]


class GrpcEndpoint:
    """One listener serving the ``MessagingService`` that ``make_service`` makes once the port is
    bound; ``start`` binds and serves, ``stop`` ends the RPCs."""

    def __init__(
        self, config: BrokerConfig, make_service: Callable[[tuple[str, int]], MessagingService]
    ) -> None:
        self._config = config
        self._make_service = make_service  # given the (host, port) clients are told to use
        self._server: Any = None
        self.service: MessagingService | None = None
        self.port: int | None = None

    async def start(self, listen: str) -> int:
        """Bind ``listen`` (HOST:PORT; port 0: a free one), serve, and return the port bound."""
        config = self._config
        host, _, port_text = listen.rpartition(":")
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", config.max_body_size + 1024 * 1024),
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
                ("grpc.max_concurrent_streams", config.max_concurrent_streams),
            ],
        )
        address = f"{host}:{port_text}"
        if config.tls_cert and config.tls_key:
            credentials = grpc.ssl_server_credentials(
                [(Path(config.tls_key).read_bytes(), Path(config.tls_cert).read_bytes())]
            )
            port: int = server.add_secure_port(address, credentials)
        else:
            port = server.add_insecure_port(address)
        advertise = config.advertise or f"{host.strip('[]')}:{port}"
        ad_host, _, ad_port = advertise.rpartition(":")
        self.service = self._make_service((ad_host.strip("[]"), int(ad_port)))
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, server)
        await server.start()
        self._server = server
        self.port = port
        return port

    async def stop(self, grace: float) -> None:
        """Stop taking RPCs and let the running ones finish (``grace`` seconds)."""
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
