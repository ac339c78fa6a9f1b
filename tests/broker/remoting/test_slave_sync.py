"""A master's answers to its slaves' copies (GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET,
GET_ALL_SUBSCRIPTIONGROUP_CONFIG) and a slave's SlaveSynchronizer taking the master's topics and
offsets over the wire."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any, cast

import pytest

from rocketstore import BrokerRole, InvalidArgumentError, Message, MessageStore
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.context import RemotingContext
from rocketstore.broker.remoting.slave_sync import SlaveSynchronizer

from ..conftest import SMALL
from .client import RawClient
from .conftest import StartRemoting


class SlaveSide:
    """What SlaveSynchronizer uses of a context: the slave's store, its address, disk work."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.broker_address = "127.0.0.1:1"

    async def run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args)


def test_master_answers_and_a_slave_copies_topics_and_offsets(
    start_remoting: StartRemoting, tmp_path: Path
) -> None:
    master = start_remoting()
    with RawClient(master.port) as client:
        none = client.call(RequestCode.GET_ALL_CONSUMER_OFFSET)
        assert (none.code, none.remark) == (ResponseCode.SYSTEM_ERROR, "No consumer offset in this broker")
        assert client.call(RequestCode.GET_ALL_DELAY_OFFSET).code == ResponseCode.SYSTEM_ERROR
        master.store.create_topic("Copied", 3, perm=4, order=True)
        master.store.commit_offset("g1", "Copied", 2, 17)
        offsets = client.call(RequestCode.GET_ALL_CONSUMER_OFFSET)
        assert json.loads(offsets.body) == {"offsetTable": {"Copied@g1": {"2": 17}}}

        assert master.store.put_message(Message("Later", b"x", delay_level=3)).ok
        master.store.wait_dispatched(5)

    slave_config = dataclasses.replace(SMALL, broker_role=BrokerRole.SLAVE)
    with MessageStore.open(tmp_path / "slave", slave_config) as slave:
        slave.create_topic("Copied", 1)  # other queue counts: replaced by the master's
        sync = SlaveSynchronizer(cast(RemotingContext, SlaveSide(slave)))

        async def once() -> None:
            try:
                await sync.sync_once(master.address)
            finally:
                await sync.stop()

        asyncio.run(once())
        config = slave.topic_config("Copied")
        assert config is not None
        assert (config.read_queues, config.write_queues, config.perm, config.order) == (3, 3, 4, True)
        assert slave.query_offset("g1", "Copied", 2) == 17
        assert sync.rounds == 1
        # the master's delay progress replaces the slave's, in its delayOffset.json
        written = json.loads((tmp_path / "slave" / "config" / "delayOffset.json").read_text())
        assert written["offsetTable"] == {"3": 0}
    with MessageStore.open(tmp_path / "slave", slave_config) as slave:
        assert slave.delay_progress() == {}  # no level with messages yet: read at open all the same
        with pytest.raises(InvalidArgumentError, match=r"levels are 1\.\.18"):
            slave.copy_delay_offsets({19: 0})
        with pytest.raises(InvalidArgumentError, match="must be an int"):
            slave.copy_delay_offsets({"3": 0})  # type: ignore[dict-item]


def test_only_a_slave_takes_its_master_s_delay_offsets(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "s", SMALL) as store:
        with pytest.raises(InvalidArgumentError, match="only a SLAVE store"):
            store.copy_delay_offsets({1: 5})
        assert not (tmp_path / "s" / "config" / "delayOffset.json").exists()


def test_master_answers_subscription_groups_in_rocketmq_s_shape(start_remoting: StartRemoting) -> None:
    master = start_remoting()
    with RawClient(master.port) as client:
        none = client.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        assert (none.code, none.remark) == (ResponseCode.SYSTEM_ERROR, "No subscription group in this broker")
        master.store.create_topic("T", 2)
        master.store.commit_offset("g1", "T", 0, 1)
        first = json.loads(client.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)
        assert first["subscriptionGroupTable"] == {
            "g1": {
                "brokerId": 0,
                "consumeBroadcastEnable": True,
                "consumeEnable": True,
                "consumeFromMinEnable": True,
                "groupName": "g1",
                "notifyConsumerIdsChangedEnable": True,
                "retryMaxTimes": 16,
                "retryQueueNums": 1,
                "whichBrokerWhenConsumeSlowly": 1,
            }
        }
        again = json.loads(client.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)
        assert again["dataVersion"] == first["dataVersion"]  # nothing changed: the slave keeps its table
        master.store.commit_offset("g2", "T", 1, 1)
        later = json.loads(client.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)
        assert sorted(later["subscriptionGroupTable"]) == ["g1", "g2"]
        assert later["dataVersion"]["counter"] == first["dataVersion"]["counter"] + 1


def test_create_topics_writes_the_table_once_and_names_the_refused(tmp_path: Path) -> None:
    from rocketstore.codec.config_json import TopicConfig

    with MessageStore.open(tmp_path / "s", SMALL) as store:
        store.create_topic("Kept", 2)
        before = store.topics_version()
        many = [TopicConfig(f"T{i}", 4, 4, 6, i % 2 == 0) for i in range(500)]
        bad = [TopicConfig("SCHEDULE_TOPIC_XXXX", 18, 18, 6), TopicConfig("Huge", 5000, 5000, 6)]
        refused = store.create_topics([*many, *bad, TopicConfig("Kept", 2, 2, 6)])
        assert sorted(refused) == ["Huge", "SCHEDULE_TOPIC_XXXX"]
        assert "queues must be 1..1024" in str(refused["Huge"])
        assert store.topics_version() == before + 1  # one write for 500 topics
        written = json.loads((tmp_path / "s" / "config" / "topics.json").read_text())
        assert written["dataVersion"]["counter"] == store.topics_version()
        assert written["topicConfigTable"]["T498"]["order"] is True
        assert store.create_topics([TopicConfig("Kept", 2, 2, 6)]) == {}
        assert store.topics_version() == before + 1  # nothing changed: nothing written
    with MessageStore.open(tmp_path / "s", SMALL) as store:
        assert len(store.topic_configs()) == 501


def test_master_answers_delay_offsets_in_rocketmq_s_shape(start_remoting: StartRemoting) -> None:
    from rocketstore import Message

    master = start_remoting()
    assert master.store.put_message(Message("Later", b"x", delay_level=18)).ok
    master.store.wait_dispatched(5)
    with RawClient(master.port) as client:
        answer = client.call(RequestCode.GET_ALL_DELAY_OFFSET)
        assert answer.code == ResponseCode.SUCCESS
        # delayOffset.json's shape, without the store's own extra field
        assert json.loads(answer.body) == {"offsetTable": {"18": 0}}
