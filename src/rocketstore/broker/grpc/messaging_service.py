"""The ``apache.rocketmq.v2.MessagingService`` servicer: each RPC checked, answered with the
protocol's status, and turned into store, transaction and pop calls (BROKER.md §2-§8).

Every handler runs on the event loop; whatever touches the disk (puts, pops, acks, topic
creation) runs on the broker's worker threads. A request that is refused gets its Status and a
message (``StatusError`` here, ``RequestRefusedError`` from the broker's core: ``refusal_status``);
an unexpected failure gets INTERNAL_ERROR and a log line, never a broken call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf import duration_pb2

from rocketstore.broker.access import Use, check_group, check_subscription, check_topic
from rocketstore.broker.arrival import ArrivalSignal
from rocketstore.broker.auth import Account, Acl, log_refusal
from rocketstore.broker.clients import ClientInfo, ClientRegistry, CommandQueue
from rocketstore.broker.coalesce import Coalescer
from rocketstore.broker.config import BrokerConfig
from rocketstore.broker.durable_waits import DurableWaits
from rocketstore.broker.group_commit import ColumnCommit, GroupCommit, PutOutcome
from rocketstore.broker.grpc.received_message import message_fields, timestamp, to_proto_message
from rocketstore.broker.grpc.sent_message import SentMessage, as_batch_of_one, to_store_message
from rocketstore.broker.grpc.status import Code, StatusError, put_status_code, refusal_status, status
from rocketstore.broker.metrics import BrokerMetrics
from rocketstore.broker.pop import PopService
from rocketstore.broker.request_log import RequestLog
from rocketstore.broker.send_check import messages_refusal
from rocketstore.broker.transactions import (
    Orphan,
    TransactionLog,
    end_transaction,
    half_message,
    put_halves,
    transaction_id,
)
from rocketstore.errors import (
    InvalidMessageError,
    InvalidReceiptHandleError,
    Refusal,
    RequestRefusedError,
    RocketStoreError,
    StoreWriteError,
)
from rocketstore.message import PROPERTY_TIMER_DELIVER_MS
from rocketstore.protocol import definition_pb2 as pb
from rocketstore.protocol import service_pb2 as rpc
from rocketstore.protocol import service_pb2_grpc
from rocketstore.results import PutMessageResult, PutStatus
from rocketstore.store import MessageStore
from rocketstore.topics import PROPERTY_SHARDING_KEY, sharding_queue

__all__ = ["MessagingService"]

log = logging.getLogger("rocketstore.broker")

_T = TypeVar("_T")
_MESSAGE_TYPES = (
    pb.MessageType.NORMAL,
    pb.MessageType.FIFO,
    pb.MessageType.DELAY,
    pb.MessageType.TRANSACTION,
)
# a client's Telemetry commands not yet written to it (see CommandQueue): a client that writes
# settings without reading the answers is cut off here
_MAX_PENDING_COMMANDS = 64
_MAX_PENDING_COMMAND_BYTES = 16 << 20
_CLIENT_ENDED = "the client ended its stream"
# receives one client may have waiting at once (all clients: max_concurrent_streams)
_MAX_RECEIVES_PER_CLIENT = 64
# topics one client's settings may name (kept per client, for orphaned-transaction checks)
_MAX_SETTINGS_TOPICS = 1024
_TRANSACTION_SOURCES = frozenset(
    (
        pb.TransactionSource.SOURCE_UNSPECIFIED,
        pb.TransactionSource.SOURCE_CLIENT,
        pb.TransactionSource.SOURCE_SERVER_CHECK,
    )
)
_CONSUMER_BACKOFF_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
# the receive stream must end before the client's deadline: this much is kept for the answer
_DEADLINE_MARGIN_S = 0.5
# how long a waiting receive trusts the arrival signal alone (in-place FIFO redelivery and
# invisible-time expiry make no new message)
_RECHECK_S = 1.0
_OK: int = Code.OK
# copied into each answer that holds it (upb copies a submessage it is given)
_OK_STATUS = status(Code.OK)
# answers of a unary call that are no refusal (a send stored, not yet known durable; mixed results)
_NOT_REFUSED = frozenset(
    (
        Code.OK,
        Code.MASTER_PERSISTENCE_TIMEOUT,
        Code.SLAVE_PERSISTENCE_TIMEOUT,
        Code.HA_NOT_AVAILABLE,
        Code.MULTIPLE_RESULTS,
    )
)
_LOGGED_REFUSALS = (Refusal.UNAUTHORIZED, Refusal.FORBIDDEN)


def _duration_ms(d: Any) -> int:
    return int(d.seconds) * 1000 + int(d.nanos) // 1_000_000


def _duration(ms: int) -> Any:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def _peer_host(peer: str) -> str | None:
    """grpc's peer text (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``) as a store host, or None."""
    kind, _, address = peer.partition(":")
    if kind == "ipv4":
        return address
    if kind == "ipv6":
        return address
    return None


def _client_of(context: Any) -> str:
    """The calling client for a log line: its id (as it says) and address."""
    client_id = next((v for k, v in context.invocation_metadata() if k == "x-mq-client-id"), "?")
    return f"{client_id} ({context.peer()})"


def _refused(call: str, context: Any, exc: StatusError | RequestRefusedError) -> Any:
    """The Status a refused request is answered with; a refusal of its keys or permissions is
    logged (``log_refusal``)."""
    if isinstance(exc, RequestRefusedError):
        log_refusal(call, _client_of(context), exc)
    return refusal_status(exc)


def _answer(
    response: Callable[..., Any],
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """A unary handler whose refusal (or unexpected error) becomes ``response(status=...)``."""

    def wrap(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(handler)
        async def run(self: MessagingService, request: Any, context: Any) -> Any:
            started = time.monotonic()
            logged = False  # a refusal of keys or permissions has its own line (log_refusal)
            try:
                answer = await handler(self, request, context)
            except (StatusError, RequestRefusedError) as exc:
                answer = response(status=_refused(handler.__name__, context, exc))
                logged = isinstance(exc, RequestRefusedError) and exc.reason in _LOGGED_REFUSALS
            except StoreWriteError as exc:  # stored but not known durable, or not stored
                answer = response(status=status(put_status_code(exc.status), str(exc)))
            except Exception as exc:
                log.exception("%s failed", handler.__name__)
                answer = response(status=status(Code.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"))
            code = answer.status.code
            if code not in _NOT_REFUSED and not logged:
                self._requests.refused(handler.__name__, code, context.peer(), answer.status.message)
            elapsed = time.monotonic() - started
            if elapsed > self._requests.slow_s:
                self._requests.slow(elapsed, handler.__name__, code, context.peer())
            return answer

        return run

    return wrap


@dataclass(frozen=True, slots=True)
class _Caller:
    """The client a request comes from, and the account that signed it (None: no ACL)."""

    info: ClientInfo
    account: Account | None


def _client_type(value: int) -> str:
    """The name of a ClientType value; UNRECOGNIZED_CLIENT_TYPE for one the protocol lacks."""
    try:
        return str(pb.ClientType.Name(value))
    except ValueError:
        raise StatusError(
            Code.UNRECOGNIZED_CLIENT_TYPE, f"client_type {value} is not a client type"
        ) from None


def _may_send(account: Account | None, topic: str) -> bool:
    try:
        check_topic(account, topic, Use.SEND)
    except RequestRefusedError:
        return False
    return True


class MessagingService(service_pb2_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(
        self,
        store: MessageStore,
        config: BrokerConfig,
        executor: concurrent.futures.Executor,
        arrival: ArrivalSignal,
        metrics: BrokerMetrics,
        *,
        waits: DurableWaits | None,
        pop: PopService,
        acl: Acl | None,
        advertise: tuple[str, int],
        transactions: TransactionLog,
    ) -> None:
        self.store = store
        self.config = config
        self.clients = ClientRegistry()
        self.transactions = transactions
        self._executor = executor
        self._arrival = arrival
        self._metrics = metrics
        self._pop = pop
        self._acl = acl
        self._advertise = advertise
        # (waits: where sends, stored on the event loop, wait for their flush or slave)
        self._sends = GroupCommit(
            store, waits, max_batch=config.max_messages_per_send, on_batch=metrics.batches.inc
        )
        # plain messages: the store's columnar put, as the remoting door's sends
        self._plain_sends = ColumnCommit(
            store, waits, max_batch=config.max_messages_per_send, on_batch=metrics.batches.inc
        )
        self._system_puts = GroupCommit(store, waits, internal=True, max_batch=config.max_messages_per_send)
        # concurrent AckMessage calls (the clients send one ack per call) share one pop-log write
        self._acks: Coalescer[tuple[str, str, list[str]], list[InvalidReceiptHandleError | None]] = Coalescer(
            pop.ack_many, executor, max_weight=1024, weight=lambda request: len(request[2])
        )
        self._streams = 0
        self._round_robin: dict[str, int] = {}
        self._requests = RequestLog(log, "grpc", config.slow_request_ms, code_label=Code.Name)

    # --- shared steps --------------------------------------------------------------------------
    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _client(self, context: Any) -> _Caller:
        """The calling client (registered on first sight) and its account, once authenticated.
        Every topic and group the request names then passes ``access`` (check_topic,
        check_group, check_subscription) with that account."""
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        client_id = metadata.get("x-mq-client-id")
        if not client_id:
            raise StatusError(Code.CLIENT_ID_REQUIRED, "the request has no x-mq-client-id header")
        account = self._acl.authenticate(metadata) if self._acl is not None else None
        info = self.clients.seen(
            client_id,
            context.peer(),
            int(time.time() * 1000),
            metadata,
            account.access_key if account is not None else None,
        )
        self._metrics.clients.set(len(self.clients))
        return _Caller(info, account)

    async def _known_topic(self, topic: str, *, ordered: bool = False) -> int:
        """The topic's queue count; created on first use unless that is configured off.
        ``ordered``: a FIFO message is sent to it, so it is marked ordered (RocketMQ's
        TopicConfig.order, kept in topics.json): its consumers then get each message group's
        messages in order (a 4.9 store has no per-group FIFO attribute; BROKER.md §8)."""
        config = self.store.topic_configs().get(topic)
        if config is None:
            if not self.config.auto_create_topic:
                raise StatusError(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist")
            config = await self._run(functools.partial(self.store.create_topic, topic, order=ordered))
            log.info("topic %s created with %d queues", topic, config.write_queues)
        elif ordered and not config.order:
            config = await self._run(
                functools.partial(
                    self.store.create_topic, topic, config.write_queues, perm=config.perm, order=True
                )
            )
            log.info("topic %s takes FIFO messages: its consumers get each group in order", topic)
        return max(1, config.write_queues)

    def _endpoints(self, asked: Any) -> Any:
        host, port = self._advertise
        if host in ("0.0.0.0", "::", "") and asked is not None and len(asked.addresses):
            host = asked.addresses[0].host  # listening everywhere: the address the client used works
        scheme = pb.AddressScheme.IPv6 if ":" in host else pb.AddressScheme.IPv4
        if not host.replace(".", "").isdigit() and ":" not in host:
            scheme = pb.AddressScheme.DOMAIN_NAME
        return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])

    def _queue(self, topic: str, queue_id: int, endpoints: Any) -> Any:
        return pb.MessageQueue(
            topic=pb.Resource(name=topic),
            id=queue_id,
            permission=pb.Permission.READ_WRITE,
            broker=pb.Broker(name=self.config.broker_name, id=0, endpoints=endpoints),
            accept_message_types=_MESSAGE_TYPES,
        )

    # --- every client ----------------------------------------------------------------------
    @_answer(rpc.QueryRouteResponse)
    async def QueryRoute(self, request: Any, context: Any) -> Any:
        caller = self._client(context)
        topic = check_topic(caller.account, request.topic.name, Use.CONSUME)
        queues = await self._known_topic(topic)
        endpoints = self._endpoints(request.endpoints if request.HasField("endpoints") else None)
        return rpc.QueryRouteResponse(
            status=status(Code.OK), message_queues=[self._queue(topic, q, endpoints) for q in range(queues)]
        )

    @_answer(rpc.HeartbeatResponse)
    async def Heartbeat(self, request: Any, context: Any) -> Any:
        caller = self._client(context)
        group = request.group.name
        if group:
            check_group(caller.account, group)
        client_type = _client_type(request.client_type)
        if group:
            caller.info.group = group
        if request.client_type:
            caller.info.client_type = client_type
        return rpc.HeartbeatResponse(status=status(Code.OK))

    @_answer(rpc.NotifyClientTerminationResponse)
    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        caller = self._client(context)
        if request.group.name:
            check_group(caller.account, request.group.name)
        self.clients.forget(caller.info.client_id, "terminated")
        self._metrics.clients.set(len(self.clients))
        return rpc.NotifyClientTerminationResponse(status=status(Code.OK))

    async def Telemetry(self, request_iterator: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        try:
            caller = self._client(context)
        except (StatusError, RequestRefusedError) as exc:
            yield rpc.TelemetryCommand(status=_refused("Telemetry", context, exc))
            return
        info = caller.info
        queue = CommandQueue(info.client_id, _MAX_PENDING_COMMANDS, _MAX_PENDING_COMMAND_BYTES)
        info.commands = queue
        info.account = caller.account

        async def read() -> None:
            try:
                async for command in request_iterator:
                    # stop reading once the stream is to close: what the client still sends
                    # waits in gRPC's flow-control window, not here
                    if command.HasField("settings") and not queue.offer(
                        self._settings(caller, command.settings)
                    ):
                        return
            except Exception as exc:  # the client went away mid-read
                log.debug("telemetry of %s ended: %s", info.client_id, exc)
            queue.close(_CLIENT_ENDED)

        reader = asyncio.get_running_loop().create_task(read())
        try:
            while True:
                item = await queue.get()
                if item is None:
                    break
                yield item
        finally:
            reader.cancel()
            if info.commands is queue:
                info.commands = None
        if queue.reason not in (None, _CLIENT_ENDED):
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"stream closed: {queue.reason}")

    def _settings(self, caller: _Caller, settings: Any) -> Any:
        """Record a client's settings and answer RocketMQ's for its kind (BROKER.md §4); settings
        naming a topic or group its account may not use are refused as a whole, unrecorded."""
        try:
            self._check_settings(caller.account, settings)
        except (StatusError, RequestRefusedError) as exc:
            log.warning("settings of client %s refused: %s", caller.info.client_id, exc.message)
            return rpc.TelemetryCommand(status=refusal_status(exc))
        info = caller.info
        info.client_type = _client_type(settings.client_type)
        answer = pb.Settings(client_type=settings.client_type)
        if settings.HasField("request_timeout"):
            answer.request_timeout.CopyFrom(settings.request_timeout)
        if settings.HasField("publishing"):
            info.topics = {t.name for t in settings.publishing.topics}
            answer.publishing.CopyFrom(
                pb.Publishing(
                    topics=settings.publishing.topics,
                    max_body_size=self.config.max_body_size,
                    validate_message_type=True,
                )
            )
            answer.backoff_policy.CopyFrom(
                pb.RetryPolicy(
                    max_attempts=3,
                    exponential_backoff=pb.ExponentialBackoff(
                        initial=_duration(10), max=_duration(1000), multiplier=2.0
                    ),
                )
            )
        if settings.HasField("subscription"):
            sub = settings.subscription
            info.group = sub.group.name
            info.topics = {s.topic.name for s in sub.subscriptions}
            answer.subscription.CopyFrom(
                pb.Subscription(
                    group=sub.group,
                    subscriptions=sub.subscriptions,
                    fifo=False,
                    receive_batch_size=self.config.max_receive_batch,
                    long_polling_timeout=_duration(self.config.long_polling_max_ms),
                )
            )
            answer.backoff_policy.CopyFrom(
                pb.RetryPolicy(
                    max_attempts=self.config.max_delivery_attempts,
                    customized_backoff=pb.CustomizedBackoff(
                        next=[_duration(s * 1000) for s in _CONSUMER_BACKOFF_S]
                    ),
                )
            )
        self.clients.changed = True
        return rpc.TelemetryCommand(status=status(Code.OK), settings=answer)

    @staticmethod
    def _check_settings(account: Account | None, settings: Any) -> None:
        _client_type(settings.client_type)
        named = len(settings.publishing.topics) + len(settings.subscription.subscriptions)
        if named > _MAX_SETTINGS_TOPICS:
            raise StatusError(
                Code.BAD_REQUEST, f"settings name {named} topics: at most {_MAX_SETTINGS_TOPICS}"
            )
        if settings.HasField("publishing"):
            for topic in settings.publishing.topics:
                check_topic(account, topic.name, Use.SEND)
        if settings.HasField("subscription"):
            sub = settings.subscription
            check_group(account, sub.group.name)
            for entry in sub.subscriptions:
                check_subscription(account, sub.group.name, entry.topic.name)

    # --- producers -----------------------------------------------------------------------------
    @_answer(rpc.SendMessageResponse)
    async def SendMessage(self, request: Any, context: Any) -> Any:
        msgs = request.messages
        if not msgs:
            raise StatusError(Code.BAD_REQUEST, "the request holds no message")
        if len(msgs) > self.config.max_messages_per_send:
            raise StatusError(
                Code.BAD_REQUEST,
                f"{len(msgs)} messages in one request: at most {self.config.max_messages_per_send}",
            )
        topics = {m.topic.name for m in msgs}
        if len(topics) > 1:
            raise StatusError(Code.BAD_REQUEST, f"one request sends to one topic, not {sorted(topics)}")
        caller = self._client(context)
        topic = check_topic(caller.account, next(iter(topics)), Use.SEND)
        peer = _peer_host(context.peer())
        now = int(time.time() * 1000)
        sent: list[SentMessage] = []
        try:
            for m in msgs:
                sent.append(
                    to_store_message(
                        m,
                        peer_host=peer,
                        now_ms=now,
                        max_body_size=self.config.max_body_size,
                        max_delivery_ahead_ms=self.config.max_delivery_ahead_ms,
                    )
                )
        except StatusError as exc:
            self._metrics.sends.labels(topic, "invalid", Code.Name(exc.code)).inc(len(msgs))
            raise
        outcomes: list[PutOutcome] = []
        if self.store.topic_config(topic) is None:
            # refuse first, create after: a send the store would refuse creates no topic
            checked = [half_message(s.message, 0) if s.transactional else s.message for s in sent]
            kinds = [s.transactional for s in sent]
            refused = await self._run(
                functools.partial(messages_refusal, internal=kinds), self.store.config, checked
            )
            if refused is not None:
                outcomes = [refused] * len(sent)
        if not outcomes:
            queues = await self._known_topic(
                topic,
                ordered=any(
                    s.message.properties and PROPERTY_SHARDING_KEY in s.message.properties for s in sent
                ),
            )
            if any(s.transactional for s in sent):
                outcomes = await self._put_halves(sent, queues)
            else:
                outcomes = await self._put_sends(sent, queues)
        entries = []
        # the sends counted per (kind, code), not per message: a labels() lookup costs as much
        # as building the entry
        counts: dict[tuple[str, int], int] = {}
        kind_of_request = pb.MessageType.Name(msgs[0].system_properties.message_type)
        for s, o in zip(sent, outcomes):
            entry, code = self._entry(s, o)
            entries.append(entry)
            key = ("TRANSACTION" if s.transactional else kind_of_request, code)
            counts[key] = counts.get(key, 0) + 1
        for (kind, code), n in counts.items():
            self._metrics.sends.labels(topic, kind, Code.Name(code)).inc(n)
        stored = counts.get((kind_of_request, Code.OK), 0) + counts.get(("TRANSACTION", Code.OK), 0)
        if stored:
            self._metrics.stats.count_put(topic, stored, 0)
        codes = {code for _, code in counts}
        head = entries[0].status if len(codes) == 1 else status(Code.MULTIPLE_RESULTS)
        return rpc.SendMessageResponse(status=head, entries=entries)

    def _next_queue(self, topic: str, queues: int) -> int:
        """The topic's next queue, round robin (the sends and transaction halves that name none)."""
        n = self._round_robin.get(topic, 0)
        self._round_robin[topic] = n + 1
        return n % queues

    async def _put_sends(self, sent: list[SentMessage], queues: int) -> list[PutOutcome]:
        """Store a request's messages: each plain one as a batch of one in the round's columnar
        put, in its queue (a message group's by the group's hash, as the store picks it; the others
        round robin); a request with a message the batch encoding does not carry (a delivery
        time: the store makes it a timer) through ``put_messages``."""
        batches = []
        for s in sent:
            msg = s.message
            if msg.properties and PROPERTY_TIMER_DELIVER_MS in msg.properties:
                break
            group = msg.properties.get(PROPERTY_SHARDING_KEY) if msg.properties else None
            if group:
                queue_id = sharding_queue(group, queues)
            else:
                queue_id = self._next_queue(msg.topic, queues)
            batch = as_batch_of_one(msg, queue_id)
            if batch is None:
                break
            batches.append(batch)
        else:
            return await self._plain_sends.put(batches)
        return await self._sends.put([s.message for s in sent])

    async def _put_halves(self, sent: list[SentMessage], queues: int) -> list[PutOutcome]:
        halves = []
        for s in sent:
            halves.append(half_message(s.message, self._next_queue(s.message.topic, queues)))
        return await put_halves(self.transactions, self._system_puts, halves)

    @staticmethod
    def _entry(sent: SentMessage, outcome: PutOutcome) -> tuple[Any, int]:
        """The SendResultEntry of one message, and its status code."""
        if isinstance(outcome, PutMessageResult):
            if outcome.ok:
                code = _OK
                entry = rpc.SendResultEntry(
                    status=_OK_STATUS, message_id=sent.client_message_id, offset=outcome.queue_offset
                )
            else:
                code = put_status_code(outcome.status)
                entry = rpc.SendResultEntry(
                    status=status(code, f"store answered {outcome.status.name}"),
                    message_id=sent.client_message_id,
                )
                if outcome.physical_offset >= 0:
                    entry.offset = outcome.queue_offset
            if sent.transactional and (outcome.ok or outcome.physical_offset >= 0):
                entry.transaction_id = transaction_id(outcome)
            return entry, code
        if isinstance(outcome, InvalidMessageError):
            code = (
                Code.MESSAGE_BODY_TOO_LARGE
                if outcome.status is PutStatus.MESSAGE_SIZE_EXCEEDED
                else Code.BAD_REQUEST
            )
            entry = rpc.SendResultEntry(status=status(code, str(outcome)), message_id=sent.client_message_id)
            return entry, code
        if isinstance(outcome, RocketStoreError):
            code = Code.INTERNAL_SERVER_ERROR
            entry = rpc.SendResultEntry(
                status=status(code, f"{type(outcome).__name__}: {outcome}"),
                message_id=sent.client_message_id,
            )
            return entry, code
        raise outcome

    @_answer(rpc.EndTransactionResponse)
    async def EndTransaction(self, request: Any, context: Any) -> Any:
        caller = self._client(context)
        topic = check_topic(caller.account, request.topic.name, Use.SEND)
        resolution = request.resolution
        if resolution not in (pb.TransactionResolution.COMMIT, pb.TransactionResolution.ROLLBACK):
            raise StatusError(Code.BAD_REQUEST, "the resolution must be COMMIT or ROLLBACK")
        if request.source not in _TRANSACTION_SOURCES:
            raise StatusError(
                Code.BAD_REQUEST,
                f"source {request.source} is not SOURCE_UNSPECIFIED, SOURCE_CLIENT or SOURCE_SERVER_CHECK",
            )
        txlog = self.transactions
        # off the loop: the lookup reads the half queue, and may wait for its dispatch
        half = await self._run(txlog.half_of, request.transaction_id, request.message_id, topic)
        commit = resolution == pb.TransactionResolution.COMMIT
        failed = await end_transaction(txlog, self._system_puts, half, commit)
        if failed is not None:
            if isinstance(failed, PutMessageResult):
                raise StatusError(put_status_code(failed.status), f"store answered {failed.status.name}")
            raise StatusError(Code.INTERNAL_SERVER_ERROR, f"{type(failed).__name__}: {failed}")
        self._metrics.transactions.labels(
            pb.TransactionResolution.Name(resolution), pb.TransactionSource.Name(request.source)
        ).inc()
        return rpc.EndTransactionResponse(status=status(Code.OK))

    async def send_orphan_check(self, orphan: Orphan) -> bool:
        """Ask a producer of the orphan's topic with a Telemetry stream open, whose account may
        send to it, to resolve it (transaction_check.py runs the rounds); False when there is
        none, or the check does not fit its stream (the half is then checked again later)."""
        producers = [p for p in self.clients.producers_of(orphan.topic) if _may_send(p.account, orphan.topic)]
        if not producers:
            return False
        producer = producers[orphan.checks % len(producers)]
        commands = producer.commands
        assert commands is not None
        command = rpc.TelemetryCommand(
            recover_orphaned_transaction_command=rpc.RecoverOrphanedTransactionCommand(
                message=to_proto_message(orphan.half, topic=orphan.topic),
                transaction_id=orphan.transaction_id,
            )
        )
        # a check that does not fit closes the stream
        return commands.offer(command)

    @_answer(rpc.RecallMessageResponse)
    async def RecallMessage(self, request: Any, context: Any) -> Any:
        caller = self._client(context)
        check_topic(caller.account, request.topic.name, Use.SEND)
        raise StatusError(Code.NOT_IMPLEMENTED, "recalling a delay message is not supported by a 4.9 store")

    # --- consumers -----------------------------------------------------------------------------
    def _invisible_ms(self, duration: Any) -> int:
        ms = _duration_ms(duration)
        low, high = self.config.invisible_min_ms, self.config.invisible_max_ms
        if not low <= ms <= high:
            raise StatusError(
                Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {ms} ms is outside {low}..{high} ms"
            )
        return ms

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            async for item in self._receive(request, context):
                yield item
        except (StatusError, RequestRefusedError) as exc:
            yield rpc.ReceiveMessageResponse(status=_refused("ReceiveMessage", context, exc))
        except StoreWriteError as exc:
            yield rpc.ReceiveMessageResponse(status=status(put_status_code(exc.status), str(exc)))
        except Exception as exc:
            log.exception("ReceiveMessage failed")
            yield rpc.ReceiveMessageResponse(
                status=status(Code.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")
            )

    async def _receive(self, request: Any, context: Any) -> AsyncIterator[Any]:
        caller = self._client(context)
        group, topic = check_subscription(
            caller.account, request.group.name, request.message_queue.topic.name
        )
        expression = request.filter_expression
        if expression.type == pb.FilterType.SQL:
            raise StatusError(Code.NOT_IMPLEMENTED, "SQL92 filters are not supported; use tag expressions")
        tags = expression.expression or "*"
        if request.auto_renew and not request.HasField("invisible_duration"):
            invisible = self.config.auto_renew_invisible_ms
        else:
            invisible = self._invisible_ms(request.invisible_duration)
        pop = self._pop
        topic_config = self.store.topic_configs().get(topic)
        if topic_config is None and not self.config.auto_create_topic:
            raise StatusError(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist")
        fifo = topic_config is not None and topic_config.order
        batch = max(1, min(request.batch_size or 1, self.config.max_receive_batch))
        poll_ms = (
            _duration_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else 0
        )
        poll_ms = min(max(poll_ms, self.config.long_polling_min_ms), self.config.long_polling_max_ms)
        poll_s = poll_ms / 1000
        remaining = context.time_remaining()
        if remaining is not None:
            poll_s = max(0.0, min(poll_s, remaining - _DEADLINE_MARGIN_S))
        if self._streams >= self.config.max_concurrent_streams:
            raise StatusError(Code.TOO_MANY_REQUESTS, f"{self._streams} receives are waiting: the limit")
        info = caller.info
        if info.receiving >= _MAX_RECEIVES_PER_CLIENT:
            log.warning(
                "receive of client %s refused: %d of its receives are waiting", info.client_id, info.receiving
            )
            raise StatusError(
                Code.TOO_MANY_REQUESTS,
                f"{info.receiving} receives of this client are waiting: at most {_MAX_RECEIVES_PER_CLIENT}",
            )
        self._streams += 1
        info.receiving += 1
        try:
            with self._arrival.watching():
                deadline = time.monotonic() + poll_s
                while True:
                    arrived = self._arrival.mark()
                    popped = await self._run(
                        functools.partial(
                            pop.receive,
                            group,
                            topic,
                            tags,
                            batch,
                            invisible,
                            fifo=fifo,
                            max_attempts=self.config.max_delivery_attempts,
                        )
                    )
                    left = deadline - time.monotonic()
                    if popped or left <= 0:
                        break
                    await self._arrival.wait(min(left, _RECHECK_S), arrived)
        finally:
            self._streams -= 1
            info.receiving -= 1
        if not popped:
            yield rpc.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
            return
        yield rpc.ReceiveMessageResponse(status=status(Code.OK))
        for p in popped:
            attempt = int(p.delivery_attempt)
            if attempt > 1:
                self._metrics.retries.labels(group, topic).inc()
            yield rpc.ReceiveMessageResponse(
                message=message_fields(
                    p.message,
                    topic=p.topic,
                    receipt_handle=p.receipt_handle,
                    delivery_attempt=attempt,
                    dead_letter_queue=p.dead_letter_queue,
                )
            )
        self._metrics.receives.labels(group, topic).inc(len(popped))
        self._metrics.stats.count_get(topic, group, len(popped), 0)
        # RocketMQ ends a stream with messages so: Python's PushConsumer computes its delivery
        # latency from it and drops the whole batch when it is missing
        yield rpc.ReceiveMessageResponse(delivery_timestamp=timestamp(int(time.time() * 1000)))

    @_answer(rpc.AckMessageResponse)
    async def AckMessage(self, request: Any, context: Any) -> Any:
        caller = self._client(context)
        group, topic = check_subscription(caller.account, request.group.name, request.topic.name)
        entries = []
        asked = request.entries
        handles = [entry.receipt_handle for entry in asked]
        outcomes = await self._acks.submit((group, topic, handles)) if handles else []
        refused = 0
        for entry, handle, outcome in zip(asked, handles, outcomes):
            if outcome is None:
                answer = _OK_STATUS
            else:
                refused += 1
                answer = status(Code.INVALID_RECEIPT_HANDLE, str(outcome))
            entries.append(
                rpc.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=handle, status=answer)
            )
        # counted per code, not per entry: a labels() lookup costs as much as building the entry
        if len(entries) > refused:
            self._metrics.acks.labels(group, topic, "OK").inc(len(entries) - refused)
        if refused:
            self._metrics.acks.labels(group, topic, "INVALID_RECEIPT_HANDLE").inc(refused)
        if not entries:
            head = _OK_STATUS
        elif refused == 0 or refused == len(entries):
            head = entries[0].status
        else:
            head = status(Code.MULTIPLE_RESULTS)
        return rpc.AckMessageResponse(status=head, entries=entries)

    @_answer(rpc.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        caller = self._client(context)
        group, topic = check_subscription(caller.account, request.group.name, request.topic.name)
        pop = self._pop
        invisible = self._invisible_ms(request.invisible_duration)
        try:
            handle = await self._run(
                pop.change_invisible_duration, group, topic, request.receipt_handle, invisible
            )
        except InvalidReceiptHandleError as exc:
            raise StatusError(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
        return rpc.ChangeInvisibleDurationResponse(status=status(Code.OK), receipt_handle=handle)

    @_answer(rpc.QueryAssignmentResponse)
    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        caller = self._client(context)
        _, topic = check_subscription(caller.account, request.group.name, request.topic.name)
        await self._known_topic(topic)
        endpoints = self._endpoints(request.endpoints if request.HasField("endpoints") else None)
        # one assignment for the whole topic: pop reads every queue (as RocketMQ's proxy does)
        return rpc.QueryAssignmentResponse(
            status=status(Code.OK),
            assignments=[pb.Assignment(message_queue=self._queue(topic, -1, endpoints))],
        )

    @_answer(rpc.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        caller = self._client(context)
        group, topic = check_subscription(caller.account, request.group.name, request.topic.name)
        pop = self._pop
        try:
            await self._run(pop.forward_to_dlq, group, topic, request.receipt_handle)
        except InvalidReceiptHandleError as exc:
            raise StatusError(Code.INVALID_RECEIPT_HANDLE, str(exc)) from None
        self._metrics.dlq.labels(group, topic).inc()
        return rpc.ForwardMessageToDeadLetterQueueResponse(status=status(Code.OK))
