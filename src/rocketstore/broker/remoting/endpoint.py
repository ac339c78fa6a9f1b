"""The remoting side of ``rocketstore serve``: the name-server listener and the broker listener,
their handler tables assembled from the processors, and the transaction checks sent over
remoting.

``NameServerProcessor`` answers on the name-server address (``namesrv.NameServer``),
``BROKER_PROCESSORS`` on the broker address (the client only ever sends name-server codes to the
former). Each processor class is
built with the shared ``RemotingContext`` and lists its handlers; a code claimed twice is a
programming error caught at start.
"""

from __future__ import annotations

import logging
import socket
from typing import Any, Final, Protocol

from rocketstore.broker.auth import Acl
from rocketstore.broker.remoting.acl import RemotingAcl
from rocketstore.broker.remoting.admin import AdminProcessor
from rocketstore.broker.remoting.bulk_pulls import BulkPulls
from rocketstore.broker.remoting.bulk_sends import BulkSends
from rocketstore.broker.remoting.codes import RequestCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.consumers import ConsumerProcessor
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.headers import to_ext
from rocketstore.broker.remoting.heartbeat import HeartbeatProcessor
from rocketstore.broker.remoting.namesrv import NameServer, NameServerProcessor
from rocketstore.broker.remoting.producer import ProducerProcessor
from rocketstore.broker.remoting.pull import pull_processor
from rocketstore.broker.remoting.queue_offsets import QueueOffsetsProcessor
from rocketstore.broker.remoting.server import Connection, Handler, RemotingLimits, RemotingServer
from rocketstore.broker.remoting.slave_sync import SlaveSyncProcessor
from rocketstore.broker.transactions import PROPERTY_CHECK_TIMES, PROPERTY_PRODUCER_GROUP, Orphan
from rocketstore.codec.commitlog_record import encode_message
from rocketstore.codec.properties import encode_properties
from rocketstore.message import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC

__all__ = ["BROKER_PROCESSORS", "RemotingEndpoint", "bind_listener"]

log = logging.getLogger("rocketstore.broker.remoting")


class Processor(Protocol):
    def handlers(self) -> dict[int, Handler]: ...


class ProcessorFactory(Protocol):
    def __call__(self, ctx: RemotingContext) -> Processor: ...


BROKER_PROCESSORS: Final[tuple[ProcessorFactory, ...]] = (
    HeartbeatProcessor,
    ProducerProcessor,
    ConsumerProcessor,
    pull_processor,
    QueueOffsetsProcessor,
    AdminProcessor,
    SlaveSyncProcessor,
)


def bind_listener(address: str) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free one), bound before the store
    opens so its records can carry the port as their STOREHOST."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def handler_table(ctx: RemotingContext, factories: tuple[ProcessorFactory, ...]) -> dict[int, Handler]:
    table: dict[int, Handler] = {}
    for factory in factories:
        for code, handler in factory(ctx).handlers().items():
            if code in table:
                raise RuntimeError(f"request code {code} has two handlers: {table[code]} and {handler}")
            table[code] = handler
    return table


class RemotingEndpoint:
    """Both listeners over one context; ``start`` binds (or takes bound sockets), ``stop`` ends."""

    def __init__(self, ctx: RemotingContext, limits: RemotingLimits, acl: Acl | None = None) -> None:
        self.ctx = ctx
        self.limits = limits
        self._acl = ctx.acl = (
            RemotingAcl(acl, lambda topic: ctx.store.topic_config(topic) is not None)
            if acl is not None
            else None
        )
        self.broker: RemotingServer | None = None
        self.namesrv: RemotingServer | None = None
        self.name_server: NameServer | None = None
        self.vip: RemotingServer | None = None

    async def start(self, broker_sock: socket.socket, namesrv_sock: socket.socket | None) -> None:
        handlers = handler_table(self.ctx, BROKER_PROCESSORS)
        authorize = self._acl.check if self._acl is not None else None
        bulk = BulkSends(self.ctx, ProducerProcessor(self.ctx)) if authorize is None else None
        pulls = BulkPulls(self.ctx, pull_processor(self.ctx)) if authorize is None else None
        broker = RemotingServer(
            handlers,
            self.limits,
            "remoting",
            authorize=authorize,
            metrics=self.ctx.metrics,
            bulk=bulk,
            pulls=pulls,
        )
        await broker.start(sock=broker_sock)
        self.broker = broker
        if self.ctx.store.ha_port is not None:
            # RocketMQ's slaves copy their master's topics and offsets over its VIP channel
            # (BrokerOuterAPI.getAll*: the listen port - 2): a master that serves replication
            # answers there too, with the same handlers
            self.vip = await self._start_vip(broker_sock, handlers, authorize)
        if namesrv_sock is not None:
            name_server = NameServer(NameServerProcessor.of_broker(self.ctx), self.limits, self.ctx.metrics)
            await name_server.start(namesrv_sock)
            self.name_server, self.namesrv = name_server, name_server.server

    async def _start_vip(
        self, broker_sock: socket.socket, handlers: dict[int, Handler], authorize: Any
    ) -> RemotingServer | None:
        host, port = broker_sock.getsockname()[:2]
        vip_address = f"[{host}]:{port - 2}" if ":" in host else f"{host}:{port - 2}"
        try:
            sock = bind_listener(vip_address)
        except (OSError, ValueError) as exc:
            log.warning(
                "VIP channel %s not served (%s): RocketMQ slaves of this master cannot copy its "
                "topics and offsets",
                vip_address,
                exc,
            )
            return None
        vip = RemotingServer(
            handlers, self.limits, "remoting-vip", authorize=authorize, metrics=self.ctx.metrics
        )
        await vip.start(sock=sock)
        return vip

    async def stop(self) -> None:
        if self.name_server is not None:
            await self.name_server.stop()
        for server in (self.vip, self.broker):
            if server is not None:
                await server.stop()
        self.name_server = self.namesrv = self.broker = self.vip = None

    def connection_count(self) -> int:
        return sum(len(s.connections) for s in (self.broker, self.vip, self.namesrv) if s is not None)

    def clients(self) -> list[dict[str, object]]:
        """The broker listener's connections that sent a heartbeat, for the state file
        (``rocketstore status``): client id, address, language, version, producer groups."""
        if self.broker is None:
            return []
        groups: dict[Connection, list[str]] = {}
        for group, members in self.ctx.producers.groups().items():
            for member in members:
                groups.setdefault(member.connection, []).append(group)
        return sorted(
            (
                {
                    "client_id": conn.attributes["client_id"],
                    "peer": conn.peer,
                    "protocol": "remoting",
                    "language": conn.attributes.get("language", ""),
                    "version": conn.attributes.get("version", 0),
                    "producer_groups": sorted(groups.get(conn, [])),
                }
                for conn in self.broker.connections
                if "client_id" in conn.attributes
            ),
            key=lambda c: (str(c["client_id"]), str(c["peer"])),
        )

    async def send_orphan_check(self, orphan: Orphan) -> bool:
        """CHECK_TRANSACTION_STATE, oneway, to a live producer of the half's group (REMOTING.md
        §5.2) whose account (with an ACL) may use that group and the half's real topic; False
        when none is connected. The producer answers with END_TRANSACTION."""
        half = orphan.half
        props = dict(half.properties)
        group = props.get(PROPERTY_PRODUCER_GROUP)
        if not group:
            return False
        real_topic = props.get(PROPERTY_REAL_TOPIC, orphan.topic)
        acl = self._acl
        conn = self.ctx.producers.live_connection(
            group,
            allowed=None if acl is None else lambda key: acl.allows(key, (real_topic,), (group,)),
        )
        if conn is None:
            return False
        rec = half.record
        props[PROPERTY_CHECK_TIMES] = str(orphan.checks + 1)
        try:
            real_queue = int(props.get(PROPERTY_REAL_QUEUE_ID, "0"))
        except ValueError:
            real_queue = 0
        body = encode_message(
            body=half.body_view,
            topic=real_topic.encode(),
            properties=encode_properties(props).encode(),
            queue_id=real_queue,
            flag=rec.flag,
            sys_flag=rec.sys_flag,
            born_timestamp=rec.born_timestamp,
            born_addr=rec.born_addr,
            born_port=rec.born_port,
            store_addr=rec.store_addr,
            store_port=rec.store_port,
            store_timestamp=rec.store_timestamp,
            queue_offset=rec.queue_offset,
            physical_offset=rec.physical_offset,
            reconsume_times=rec.reconsume_times,
            prepared_transaction_offset=rec.prepared_transaction_offset,
        )
        uniq = half.uniq_key
        cmd = RemotingCommand(
            code=RequestCode.CHECK_TRANSACTION_STATE,
            ext_fields=to_ext(
                tranStateTableOffset=rec.queue_offset,
                commitLogOffset=rec.physical_offset,
                msgId=uniq,
                transactionId=uniq,
                offsetMsgId=half.msg_id,
            ),
            body=body,
        )
        if not await conn.oneway(cmd):
            return False  # its output is full (or it closed): asked again at the next round
        log.info("asked %s (group %s) about transaction %s of %s", conn.peer, group, uniq, real_topic)
        return True
