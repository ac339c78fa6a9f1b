"""What a broker serves, as its routes and registrations list it: the store's topics and the
ones RocketMQ's broker has from its start (TBW102 while topic auto-creation is on), and its HA
address. Used by the combined name server (routes of this process's broker), the registration
service (what it registers), the producer (auto-creation) and admin (topic lookups)."""

from __future__ import annotations

import dataclasses
from typing import Final

from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.codec.config_json import PERM_READ, PERM_WRITE, TopicConfig
from rocketstore.message import SCHEDULE_TOPIC
from rocketstore.system_topics import (
    AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC,
    HALF_TOPIC,
    OFFSET_MOVED_EVENT,
    SELF_TEST_TOPIC,
)

__all__ = [
    "DEFAULT_TOPIC",
    "PERM_INHERIT",
    "broker_host",
    "broker_topic_configs",
    "default_topic_config",
    "local_ha_address",
    "local_topic_configs",
    "registered_config",
]

DEFAULT_TOPIC: Final = AUTO_CREATE_TOPIC  # RocketMQ's AUTO_CREATE_TOPIC_KEY_TOPIC
PERM_INHERIT: Final = 0x1
_READ_WRITE: Final = PERM_READ | PERM_WRITE


def default_topic_config(ctx: RemotingContext) -> TopicConfig:
    """TBW102 as RocketMQ's broker registers it while auto-creation is on: perm 7 (INHERIT),
    ``defaultTopicQueueNums`` queues."""
    queues = ctx.store.config.default_topic_queue_nums
    return TopicConfig(DEFAULT_TOPIC, queues, queues, PERM_READ | PERM_WRITE | PERM_INHERIT)


def broker_topic_configs(ctx: RemotingContext) -> dict[str, TopicConfig]:
    """The topics RocketMQ's broker has from its start (TopicConfigManager's constructor), with
    its queues and permissions; ``BenchmarkTest`` gets ``defaultTopicQueueNums`` queues (RocketMQ:
    1024), what a benchmark's auto-created topic has here."""
    config = ctx.config
    rw, inherit = PERM_READ | PERM_WRITE, PERM_INHERIT
    queues = ctx.store.config.default_topic_queue_nums
    topics = [
        TopicConfig(SELF_TEST_TOPIC, 1, 1, rw),
        TopicConfig(BENCHMARK_TOPIC, queues, queues, rw),
        TopicConfig(config.cluster_name, 16, 16, rw | inherit),
        TopicConfig(config.broker_name, 1, 1, rw | inherit),
        TopicConfig(OFFSET_MOVED_EVENT, 1, 1, rw),
        TopicConfig(SCHEDULE_TOPIC, 18, 18, rw),
        # RocketMQ's transaction check creates it in its first round, a minute after the start
        TopicConfig(HALF_TOPIC, 1, 1, rw),
        TopicConfig(f"{config.cluster_name}_REPLY_TOPIC", 1, 1, rw),
    ]
    if config.auto_create_topic:
        topics.append(default_topic_config(ctx))
    return {t.topic: t for t in topics}


def local_topic_configs(ctx: RemotingContext) -> dict[str, TopicConfig]:
    """Every topic a broker serves (what its routes and registrations list): the store's, and
    the broker's own it does not have (TBW102 among them while auto-creation is on), each as
    ``registered_config`` gives it."""
    topics = {**broker_topic_configs(ctx), **ctx.store.topic_configs()}
    return {name: registered_config(ctx, config) for name, config in topics.items()}


def registered_config(ctx: RemotingContext, config: TopicConfig) -> TopicConfig:
    """A topic as the broker registers it: with ``brokerPermission`` in place of its own
    permission when the broker does not allow both reads and writes (RocketMQ's
    ``registerBrokerAll``), so clients route around what it does not allow."""
    perm = ctx.config.broker_permission
    if perm & _READ_WRITE == _READ_WRITE:
        return config
    return dataclasses.replace(config, perm=perm)


def broker_host(ctx: RemotingContext) -> str:
    """The broker's brokerIP1: the host of the address it advertises (as RocketMQ's remarks
    name the broker)."""
    return ctx.broker_address.rpartition(":")[0].strip("[]")


def local_ha_address(ctx: RemotingContext) -> str:
    """The broker's haServerAddr: brokerIP2 (else brokerIP1's host) and the store's HA port (0
    when the store serves no replication)."""
    host = ctx.config.broker_ip2 or broker_host(ctx)
    port = ctx.store.ha_port or 0
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
