"""What a slave copies from its master besides the commitlog (CLUSTER.md §4.3; RocketMQ's
``SlaveSynchronize``), both sides:

* ``SlaveSyncProcessor``, on every broker: the master's answers to GET_ALL_CONSUMER_OFFSET (43,
  ``consumerOffset.json``'s JSON), GET_ALL_DELAY_OFFSET (45, ``delayOffset.json``'s) and
  GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201, ``subscriptionGroup.json``'s); SYSTEM_ERROR when it has
  none, as RocketMQ's broker. GET_ALL_TOPIC_CONFIG (21) is ``admin.py``'s. rocketstore keeps no
  per-group settings (a retry's limit comes with each send, as RocketMQ's clients send it): the
  groups it answers are those that committed an offset or are connected, each with RocketMQ's
  default settings, which is what a RocketMQ broker creates for a group it hears of
  (``autoCreateSubscriptionGroup``); its data version changes when that set does.
* ``SlaveSynchronizer``, on a SLAVE that registers with name servers: every ``SYNC_PERIOD_S``
  (10 s; first after 3 s), while the name servers name its master's address (the registration
  result's ``masterAddr``), asks the master (3 s each) for its topics, its consumers' offsets
  and its delay offsets: a topic the slave lacks or holds with other queue counts, permissions
  or order is created or changed (so its pulls are served: a slave serves pulls only for topics
  it knows); every offset is taken as the master's (RocketMQ's ``putAll``); the delay offsets
  replace the slave's (``delayOffset.json``, for a restart as master). A topic the master no
  longer has is kept. Subscription groups are not asked for: a rocketstore slave has no
  settings to keep them in.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from rocketstore.broker.periodic import PeriodicTask
from rocketstore.broker.remoting.client import RemotingClient
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.broker.remoting.consumers import consumer_groups
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.refusal import RequestRefused
from rocketstore.broker.remoting.server import Connection, Handler
from rocketstore.codec.config_json import (
    TopicConfig,
    decode_delay_offsets,
    decode_offsets,
    decode_topics,
    encode_delay_offsets,
    encode_offsets,
    encode_subscription_groups,
)
from rocketstore.errors import RocketStoreError

__all__ = ["SlaveSyncProcessor", "SlaveSynchronizer"]

log = logging.getLogger("rocketstore.broker.registration")

SYNC_PERIOD_S: Final = 10.0
FIRST_SYNC_S: Final = 3.0
SYNC_TIMEOUT_S: Final = 3.0


class SlaveSyncProcessor:
    """A master's answers to its slaves' copies (see the module docstring)."""

    def __init__(self, ctx: RemotingContext) -> None:
        self.ctx = ctx
        # the groups last answered, and their data version (counter, timestamp)
        self._groups: frozenset[str] = frozenset()
        self._groups_version = (0, 0)

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.all_consumer_offsets,
            RequestCode.GET_ALL_DELAY_OFFSET: self.all_delay_offsets,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_subscription_groups,
        }

    async def all_subscription_groups(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        offsets = self.ctx.store.consumer_offsets()
        groups = frozenset(group for _, group in offsets) | frozenset(consumer_groups(self.ctx).groups())
        if not groups:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, "No subscription group in this broker")
        if groups != self._groups:
            # a slave replaces its table only when the version differs (SlaveSynchronize)
            self._groups = groups
            self._groups_version = (self._groups_version[0] + 1, int(time.time() * 1000))
        counter, timestamp = self._groups_version
        return cmd.response(body=encode_subscription_groups(sorted(groups), counter, timestamp))

    async def all_consumer_offsets(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        table = self.ctx.store.consumer_offsets()
        if not table:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, "No consumer offset in this broker")
        return cmd.response(body=encode_offsets(table))

    async def all_delay_offsets(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        progress = self.ctx.store.delay_progress()
        if not progress:
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, "No delay offset in this broker")
        return cmd.response(body=encode_delay_offsets({k: v[0] for k, v in progress.items()}))


class SlaveSynchronizer:
    """A SLAVE's copies of its master's topics and offsets; ``set_master`` from each
    registration result, ``start``/``stop`` around the broker's life."""

    def __init__(self, ctx: RemotingContext) -> None:
        self.ctx = ctx
        self.master_addr: str | None = None
        self._client: RemotingClient | None = None
        self._rounds = PeriodicTask("slave sync", SYNC_PERIOD_S, self._round, first_s=FIRST_SYNC_S, log=log)
        self._failing = False
        self.rounds = 0

    def set_master(self, address: str | None) -> None:
        """The master's remoting address the name servers gave (None: keep the last one)."""
        if address is not None and address != self.ctx.broker_address:
            self.master_addr = address

    def start(self) -> None:
        self._rounds.start()

    async def stop(self) -> None:
        await self._rounds.stop()
        if self._client is not None:
            await self._client.close()

    async def _round(self) -> None:
        address = self.master_addr
        if address is None:
            return
        try:
            await self.sync_once(address)
        except (OSError, TimeoutError, RocketStoreError) as exc:
            if not self._failing:
                log.warning("cannot copy topics and offsets from %s: %s", address, exc)
            self._failing = True
            return
        if self._failing:
            log.info("copying from master %s again", address)
        self._failing = False

    async def _ask(self, address: str, code: int) -> bytes | None:
        client = self._client
        if client is None or client.address != address:
            if client is not None:
                await client.close()
            client = self._client = RemotingClient(address)
        response = await client.invoke(RemotingCommand(code=code), SYNC_TIMEOUT_S)
        if response.code != ResponseCode.SUCCESS:
            return None  # the master has none
        return bytes(response.body)

    async def sync_once(self, address: str) -> None:
        """One round of copies from the master at ``address``."""
        topics_body = await self._ask(address, RequestCode.GET_ALL_TOPIC_CONFIG)
        if topics_body is not None:
            topics, _ = decode_topics(topics_body.decode("utf-8", errors="replace"), "the master's topics")
            await self.ctx.run(self._apply_topics, topics)
        offsets_body = await self._ask(address, RequestCode.GET_ALL_CONSUMER_OFFSET)
        if offsets_body is not None:
            offsets = decode_offsets(offsets_body.decode("utf-8", errors="replace"), "the master's offsets")
            await self.ctx.run(self._apply_offsets, offsets)
        delay_body = await self._ask(address, RequestCode.GET_ALL_DELAY_OFFSET)
        if delay_body is not None:
            delays, _ = decode_delay_offsets(
                delay_body.decode("utf-8", errors="replace"), "the master's delay offsets"
            )
            await self.ctx.run(self.ctx.store.copy_delay_offsets, delays)
        self.rounds += 1

    def _apply_topics(self, topics: dict[str, TopicConfig]) -> None:
        store = self.ctx.store
        changes = []
        for name, config in topics.items():
            queues = max(config.read_queues, config.write_queues)
            mine = store.topic_config(name)
            if mine is not None and (max(mine.read_queues, mine.write_queues), mine.perm, mine.order) == (
                queues,
                config.perm,
                config.order,
            ):
                continue
            changes.append(TopicConfig(name, queues, queues, config.perm, config.order))
        # one write of topics.json for all (a first copy may bring thousands)
        for name, exc in store.create_topics(changes).items():
            # a system topic this store keeps itself, a bad name
            log.debug("master's topic %s not copied: %s", name, exc)

    def _apply_offsets(self, offsets: dict[tuple[str, str], dict[int, int]]) -> None:
        store = self.ctx.store
        for (topic, group), queues in offsets.items():
            for queue_id, offset in queues.items():
                try:
                    store.commit_offset(group, topic, queue_id, offset)
                except RocketStoreError as exc:
                    log.debug("master's offset of %s@%s not copied: %s", topic, group, exc)
                    break
