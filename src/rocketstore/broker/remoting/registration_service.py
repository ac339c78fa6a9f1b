"""A broker's registrations with the name servers of its ``namesrvAddr`` (CLUSTER.md §2.7), as
RocketMQ 4.9.8's broker makes them:

* REGISTER_BROKER with the whole topic table at start, then every ``registerNameServerPeriod``
  (30 s, clamped to 10-60 s; the first 10 s after start), to every name server at once;
* again at once (within ``TOPIC_CHECK_S``) when the topic table changes, whatever changed it
  (mqadmin, a send's auto-creation, a retry or DLQ topic, gRPC, the CLI); each change is a new
  DataVersion (timestamp, counter + 1), the first one this process's start time, so a name
  server re-applies the table after a restart;
* with ``forceRegister=false``, a periodic round first asks QUERY_DATA_VERSION and registers
  only when a name server's copy changed, failed, or it does not know the broker;
* UNREGISTER_BROKER to each name server at a clean stop.

One long-lived connection per name server carries all of them (the name server drops a broker
when the connection it registered on closes); a registration that fails or times out closes it
and the next round opens a new one. A name server that is down is logged once when it goes
and once when it is back, not at every try.

A slave (brokerId >= 1) registers too; the first name server's result names its master
(``on_result`` gets it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final

from rocketstore.broker.periodic import PeriodicTask
from rocketstore.broker.remoting.broker_topics import local_ha_address, local_topic_configs
from rocketstore.broker.remoting.client import RemotingClient
from rocketstore.broker.remoting.codes import ResponseCode
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.registration import (
    BrokerIdentity,
    RegisterBrokerRequest,
    RegisterBrokerResult,
    decode_data_version,
    decode_register_result,
    encode_query_data_version,
    encode_register_broker,
    encode_unregister_broker,
)
from rocketstore.broker.routes import DataVersion
from rocketstore.clock import Clock, SystemClock
from rocketstore.codec.config_json import TopicConfig
from rocketstore.config import BrokerRole
from rocketstore.errors import CorruptDataError, StoreConfigError

__all__ = ["NameServerLink", "RegistrationService", "broker_identity"]

log = logging.getLogger("rocketstore.broker.registration")

TOPIC_CHECK_S: Final = 1.0  # how soon a topic change is registered
FIRST_PERIODIC_S: Final = 10.0  # BrokerController: the periodic registration's first run
UNREGISTER_TIMEOUT_S: Final = 3.0
REGISTERED: Final = "registered"


def broker_identity(ctx: RemotingContext) -> BrokerIdentity:
    """Who this broker registers as: a master is id 0 whatever ``brokerId`` says; a SLAVE
    needs ``brokerId`` >= 1 (RocketMQ's BrokerStartup)."""
    config = ctx.config
    broker_id = config.broker_id
    if ctx.store.config.broker_role is BrokerRole.SLAVE:
        if broker_id < 1:
            raise StoreConfigError("a SLAVE's brokerId must be > 0")
    else:
        broker_id = 0
    return BrokerIdentity(config.cluster_name, config.broker_name, ctx.broker_address, broker_id)


class NameServerLink:
    """The connection to one name server and how its last registration went: ``state`` is
    "registered", what went wrong ("unreachable", "refused REGISTER_BROKER", ...), or None
    before the first; a change of it is logged, a repeat is not."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.client = RemotingClient(address)
        self.state: str | None = None

    @property
    def up(self) -> bool:
        return self.state == REGISTERED

    def mark(self, up: bool, reason: str = "", detail: str = "") -> None:
        """``up``, or down for ``reason`` (the state; ``detail`` is logged with it only)."""
        state = REGISTERED if up else reason
        if state == self.state:
            return
        self.state = state
        if up:
            log.info("registered with name server %s", self.address)
        else:
            why = f"{reason} ({detail})" if detail else reason
            log.warning("name server %s: %s (retried every registration period)", self.address, why)


class RegistrationService:
    """Registers the broker of ``ctx`` with ``ctx.config``'s name servers (see the module
    docstring); ``start`` registers once and starts the loop, ``stop`` unregisters."""

    def __init__(
        self,
        ctx: RemotingContext,
        *,
        clock: Clock | None = None,
        on_result: Callable[[RegisterBrokerResult], None] | None = None,
    ) -> None:
        config = ctx.config
        self.ctx = ctx
        self.identity = broker_identity(ctx)
        self.links = [NameServerLink(a) for a in config.name_servers()]
        self._clock = clock or SystemClock()
        self._on_result = on_result
        self.period_s = min(max(config.register_period_ms, 10_000), 60_000) / 1000
        self.timeout_s = config.register_timeout_ms / 1000
        self.version = DataVersion(self._clock.now_ms(), 0)
        self._topics: dict[str, TopicConfig] | None = None
        # the store's topics_version and the brokerPermission when they were taken
        self._topics_seen: tuple[int, int] | None = None
        self._rounds = PeriodicTask("registration", TOPIC_CHECK_S, self._round, log=log)
        self._next_periodic = 0.0

    async def start(self) -> None:
        """The first round, then the loop; what the name servers answer never fails it (a
        failed round is logged and the next one retries)."""
        self._topics_changed()
        try:
            await self.register_all(force=True)
        except asyncio.CancelledError:
            for link in self.links:
                await link.client.close()
            raise
        except Exception:
            log.exception("the first registration round failed")
        self._next_periodic = time.monotonic() + FIRST_PERIODIC_S
        self._rounds.start()

    async def stop(self) -> None:
        await self._rounds.stop()
        for link in self.links:
            if link.up:
                try:
                    response = await link.client.invoke(
                        encode_unregister_broker(self.identity), UNREGISTER_TIMEOUT_S
                    )
                    if response.code != ResponseCode.SUCCESS:
                        log.warning(
                            "name server %s refused UNREGISTER_BROKER: %s", link.address, response.remark
                        )
                except (OSError, TimeoutError) as exc:
                    log.warning("name server %s: UNREGISTER_BROKER failed (%s)", link.address, exc)
            await link.client.close()

    async def _round(self) -> None:
        """Every TOPIC_CHECK_S: a topic change registers at once, the periodic round when due."""
        if self._topics_changed():
            await self.register_all(force=True)
        if time.monotonic() >= self._next_periodic:
            self._next_periodic = time.monotonic() + self.period_s
            await self.register_all(force=self.ctx.config.force_register)

    def _topics_changed(self) -> bool:
        # the store's change counter, not the table: checked every second, copied on a change only
        # (the broker's own topics beside the store's follow from its config); a new
        # brokerPermission changes every topic's registered permission
        seen = (self.ctx.store.topics_version(), self.ctx.config.broker_permission)
        if seen == self._topics_seen:
            return False
        if self._topics_seen is not None:
            self.version = self.version.next(self._clock.now_ms())
        self._topics_seen = seen
        self._topics = local_topic_configs(self.ctx)
        return True

    async def register_all(self, *, force: bool) -> RegisterBrokerResult | None:
        """One round: REGISTER_BROKER to every name server (after QUERY_DATA_VERSION unless
        ``force``); the first result that came back, handed to ``on_result``."""
        if not force and not await self._needs_registration():
            return None
        assert self._topics is not None
        request = RegisterBrokerRequest(self.identity, local_ha_address(self.ctx), self.version, self._topics)
        results = await asyncio.gather(*(self._register(link, request) for link in self.links))
        first = next((r for r in results if r is not None), None)
        if first is not None and self._on_result is not None:
            self._on_result(first)
        return first

    async def _register(
        self, link: NameServerLink, request: RegisterBrokerRequest
    ) -> RegisterBrokerResult | None:
        cmd = encode_register_broker(request, compressed=self.ctx.config.compressed_register)
        try:
            response = await link.client.invoke(cmd, self.timeout_s)
        except (OSError, TimeoutError) as exc:
            await link.client.close()
            link.mark(False, "unreachable", str(exc) or type(exc).__name__)
            return None
        if response.code != ResponseCode.SUCCESS:
            link.mark(False, "refused REGISTER_BROKER", f"code {response.code} {response.remark}")
            return None
        try:
            result = decode_register_result(response)
        except CorruptDataError as exc:
            link.mark(False, "answered REGISTER_BROKER with a bad result", str(exc))
            return None
        link.mark(True)
        return result

    async def _needs_registration(self) -> bool:
        async def ask(link: NameServerLink) -> bool:
            cmd = encode_query_data_version(self.identity, self.version)
            try:
                response = await link.client.invoke(cmd, self.timeout_s)
            except (OSError, TimeoutError):
                await link.client.close()
                return True
            if response.code != ResponseCode.SUCCESS:
                return False  # as RocketMQ's broker: a refusal counts as unchanged
            if response.ext_fields.get("changed", "").lower() == "true" or not len(response.body):
                return True
            try:
                return decode_data_version(response.body) != self.version
            except CorruptDataError:
                return True

        return any(await asyncio.gather(*(ask(link) for link in self.links)))
