"""The administration requests mqadmin's producerConnection, resetOffsetByTime,
updateBrokerConfig, statsAll, brokerStatus, getBrokerConfig and topicList send, over raw remoting
frames (REMOTING.md §7); tests/remoting/test_mqadmin.py runs mqadmin itself beside RocketMQ's broker."""

from __future__ import annotations

import asyncio
import json
import os
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rocketstore import Message
from rocketstore.broker import BrokerConfig
from rocketstore.broker.config import load_settings
from rocketstore.broker.remoting import producer
from rocketstore.broker.remoting.admin import message_queue_key
from rocketstore.broker.remoting.broker_settings import SettingRefused, parse_update, persist
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.stats_items import GROUP_GET_NUMS, MAX_ITEMS_PER_NAME, TOPIC_PUT_NUMS, BrokerStats
from rocketstore.broker.transaction_check import TransactionChecker
from rocketstore.errors import StoreConfigError

from .client import RawClient
from .conftest import StartRemoting
from .test_consumer_requests import heartbeat, pull_ext
from .test_producer import send


def _stats(c: RawClient, name: str, key: str) -> dict[str, dict[str, float]]:
    resp = c.call(RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return json.loads(resp.body)  # type: ignore[no-any-return]


# --- the stats items (RocketMQ's StatsItem) ---------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def test_stats_items_snapshot_as_rocketmq_samples_them() -> None:
    clock = _Clock()
    stats = BrokerStats("DefaultCluster", clock)
    clock.ms += 3_000
    stats.count_put("T", 4, 400)
    stats.count_put("T", 2, 200)
    # no 10 s tick since the item was made: RocketMQ's lists are still empty
    minute, hour, day = stats.read(TOPIC_PUT_NUMS, "T") or ()
    assert (minute.sum, hour.sum, day.sum) == (0, 0, 0)
    clock.ms += 7_000  # the first tick: a zero snapshot 10 s before it, and the count at it
    minute, hour, day = stats.read(TOPIC_PUT_NUMS, "T") or ()
    assert (minute.sum, minute.tps, minute.avgpt) == (6, 0.6, 3.0)
    assert (hour.sum, day.sum) == (0, 0)
    clock.ms += 50_000  # five more ticks with nothing: still within the 7 snapshots kept
    assert stats.read(TOPIC_PUT_NUMS, "T")[0].sum == 6  # type: ignore[index]
    clock.ms += 10_000  # the zero snapshot falls out of the minute list
    assert stats.read(TOPIC_PUT_NUMS, "T")[0].sum == 0  # type: ignore[index]
    clock.ms = 1_000_000 + 600_000  # the first 10-minute tick
    minute, hour, _ = stats.read(TOPIC_PUT_NUMS, "T") or ()
    assert (minute.sum, hour.sum, hour.tps) == (0, 6, 6 / 600)
    clock.ms = 1_000_000 + 3_600_000  # the first hourly tick: the day list has it
    assert stats.read(TOPIC_PUT_NUMS, "T")[2].sum == 6  # type: ignore[index]
    clock.ms += 30 * 3_600_000  # a day and more later, with nothing new
    assert [s.sum for s in stats.read(TOPIC_PUT_NUMS, "T") or ()] == [0, 0, 0]
    assert stats.read(TOPIC_PUT_NUMS, "U") is None and stats.read("NO_SUCH", "T") is None


def test_stats_items_are_bounded_per_name_and_dropped_when_unused() -> None:
    clock = _Clock()
    stats = BrokerStats("DefaultCluster", clock)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(MAX_ITEMS_PER_NAME + 5):
            stats.count_get("T", f"g{i}", 1, 10)
        clock.ms += 2 * 3_600_000  # every list filled once: the snapshots' room is fixed
        for i in range(MAX_ITEMS_PER_NAME):
            stats.count_get("T", f"g{i}", 1, 10)
        per_item = (tracemalloc.get_traced_memory()[0] - before) / (2 * MAX_ITEMS_PER_NAME)
    finally:
        tracemalloc.stop()
    assert per_item < 1_500  # two sets (nums, size) a key; deques of tuples took about 5 KB
    assert stats.counted(GROUP_GET_NUMS, f"T@g{MAX_ITEMS_PER_NAME - 1}") == (2, 2)
    assert stats.counted(GROUP_GET_NUMS, f"T@g{MAX_ITEMS_PER_NAME}") is None  # past the bound
    clock.ms += 24 * 3_600_000
    stats.count_get("T", "g0", 1, 10)  # counted within 25 h: kept, its day list intact
    assert stats.read(GROUP_GET_NUMS, "T@g0")[2].sum == 1  # type: ignore[index]
    clock.ms += 3_600_000  # 25 h since the others were counted: a new key makes room
    stats.count_get("T", "new", 1, 10)
    assert stats.counted(GROUP_GET_NUMS, "T@new") == (1, 1)
    assert stats.counted(GROUP_GET_NUMS, "T@g1") is None
    assert stats.counted(GROUP_GET_NUMS, "T@g0") == (3, 3)


def test_put_latency_is_shown_for_the_last_whole_minute() -> None:
    clock = _Clock()
    stats = BrokerStats("DefaultCluster", clock)
    assert stats.put_latency()["putMessageDistributeTime"] == "null"  # as RocketMQ's first minute
    for elapsed in [0] * 90 + [5] * 9 + [700]:
        stats.count_put("T", 1, 10, elapsed)
    clock.ms += 60_000
    info = stats.put_latency()
    assert info["putMessageDistributeTime"].startswith("[<=0ms]:90 [0~10ms]:9 [10~50ms]:0 ")
    assert "[500ms~1s]:1 " in info["putMessageDistributeTime"]
    assert info["putMessageEntireTimeMax"] == "700" and info["putMessageFailedTimes"] == "0"
    assert info["putLatency99"] == "5.00"  # the 99th of 100 lies in the 5 ms bucket
    clock.ms += 120_000  # a minute without puts came between: nothing to show for it
    assert stats.put_latency()["putMessageDistributeTime"].startswith("[<=0ms]:0 ")


# --- over remoting ------------------------------------------------------------------------------


def test_put_latency_leaves_out_a_new_topics_creation(
    start_remoting: StartRemoting, monkeypatch: pytest.MonkeyPatch
) -> None:
    create = producer.ProducerProcessor._create

    async def slow_create(self: producer.ProducerProcessor, *args: Any) -> None:
        await asyncio.sleep(1.5)  # creating the topic (a check, topics.json) takes its time
        await create(self, *args)

    monkeypatch.setattr(producer.ProducerProcessor, "_create", slow_create)
    r = start_remoting()
    with RawClient(r.port) as c:
        assert send(c, "Fresh", b"x", queue_id=0).code == ResponseCode.SUCCESS
    assert "Fresh" in r.store.topic_configs()  # made on the way, its time not the put's
    assert int(r.broker.metrics.stats.put_latency()["putMessageEntireTimeMax"]) < 1500


def test_stats_data_counts_puts_and_gets(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    with RawClient(r.port) as c:
        for _ in range(3):
            assert send(c, "ST", b"x", queue_id=0).code == ResponseCode.SUCCESS
        r.store.wait_dispatched()
        pulled = c.call(RequestCode.PULL_MESSAGE, pull_ext("ST", 0))
        assert pulled.code == ResponseCode.SUCCESS
        stats = r.broker.metrics.stats
        assert stats.counted(TOPIC_PUT_NUMS, "ST") == (3, 3)
        assert stats.counted(GROUP_GET_NUMS, "ST@g") == (3, 1)
        shown = _stats(c, "TOPIC_PUT_NUMS", "ST")
        assert set(shown) == {"statsMinute", "statsHour", "statsDay"}
        assert set(shown["statsMinute"]) == {"sum", "tps", "avgpt"}
        missing = c.call(
            RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "NoT"}
        )
        assert missing.code == ResponseCode.SYSTEM_ERROR
        assert missing.remark == "The stats <TOPIC_PUT_NUMS> <NoT> not exist"


def test_producer_connections(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    beat = {"clientID": "10.1.1.1@7", "producerDataSet": [{"groupName": "pg"}], "consumerDataSet": []}
    with RawClient(r.port) as c:
        assert c.call(RequestCode.HEART_BEAT, body=json.dumps(beat).encode()).code == 0
        resp = c.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "pg"})
        assert resp.code == ResponseCode.SUCCESS
        [conn] = json.loads(resp.body)["connectionSet"]
        assert conn == {
            "clientAddr": f"127.0.0.1:{c.sock.getsockname()[1]}",
            "clientId": "10.1.1.1@7",
            "language": "JAVA",
            "version": 409,  # the RawClient's header says V4_9_8
        }
        none = c.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "other"})
        assert (none.code, none.remark) == (ResponseCode.SYSTEM_ERROR, "the producer group[other] not exist")


def test_reset_offset_notifies_the_online_consumers(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("T", 2)
    with RawClient(r.port) as c, RawClient(r.port) as consumer:
        for q in (0, 0, 1):
            assert send(c, "T", b"x", queue_id=q).code == ResponseCode.SUCCESS
        r.store.wait_dispatched()
        ask = {"topic": "T", "group": "cg", "timestamp": "-1", "isForce": "true"}
        unknown = c.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ask)
        assert (unknown.code, unknown.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "THe consumer group <cg> not exist",
        )
        for q in (0, 1):
            update = {"consumerGroup": "cg", "topic": "T", "queueId": str(q), "commitOffset": "0"}
            assert c.call(RequestCode.UPDATE_CONSUMER_OFFSET, update).code == ResponseCode.SUCCESS
        offline = c.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ask)
        assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE  # mqadmin then commits them itself
        assert consumer.call(RequestCode.HEART_BEAT, body=heartbeat("10.2.2.2@9", "cg")).code == 0
        resp = c.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ask)
        assert resp.code == ResponseCode.SUCCESS
        expected = {message_queue_key("T", "broker-a", 0): 2, message_queue_key("T", "broker-a", 1): 1}
        assert json.loads(resp.body) == {"offsetTable": expected}
        notice = consumer.server_request()
        while notice.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:  # (its own joining)
            notice = consumer.server_request()
        assert notice.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET and notice.is_oneway
        assert notice.ext_fields == {"topic": "T", "group": "cg", "timestamp": "-1", "isForce": "false"}
        assert json.loads(notice.body) == {"offsetTable": expected}
        # the broker leaves the offsets to the client (RocketMQ's Broker2Client does too)
        assert r.store.consumer_offsets()[("T", "cg")] == {0: 0, 1: 0}
        gone = c.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**ask, "topic": "NoSuch"})
        assert gone.code == ResponseCode.SYSTEM_ERROR and "no topic in this broker" in gone.remark


def test_update_broker_config_applies_live_settings_and_keeps_them(
    start_remoting: StartRemoting, tmp_path: Path
) -> None:
    conf = tmp_path / "serve.properties"
    conf.write_text("# mine\nbrokerName=broker-a\nauto_create_topic=true\ntransactionCheckMax=15\n")
    r = start_remoting(config_file=str(conf))

    def settings(c: RawClient) -> dict[str, str]:
        body = c.call(RequestCode.GET_BROKER_CONFIG).body.decode()
        return dict(line.split("=", 1) for line in body.splitlines())

    with RawClient(r.port) as c:
        before = settings(c)
        assert before["autoCreateTopicEnable"] == "true" and before["transactionCheckMax"] == "15"
        change = b"autoCreateTopicEnable=false\ntransactionCheckMax=3\n"
        assert c.call(RequestCode.UPDATE_BROKER_CONFIG, body=change).code == ResponseCode.SUCCESS
        after = settings(c)
        assert after["autoCreateTopicEnable"] == "false" and after["transactionCheckMax"] == "3"
        assert r.broker.config.auto_create_topic is False and r.broker.config.transaction_check_max == 3
        refused = send(c, "NewTopic", b"x")  # auto-creation is off now
        assert refused.code == ResponseCode.TOPIC_NOT_EXIST
        assert conf.read_text() == (
            "# mine\nbrokerName=broker-a\nautoCreateTopicEnable=false\ntransactionCheckMax=3\n"
        )
        for body, named in (
            (b"fileReservedTime=1\nautoCreateTopicEnable=true", "fileReservedTime"),
            (b"brokerName=other", "brokerName"),
            (b"brokerPermission=9", "brokerPermission"),
            (b"transactionCheckMax=lots", "transactionCheckMax"),
        ):
            no = c.call(RequestCode.UPDATE_BROKER_CONFIG, body=body)
            assert no.code == ResponseCode.SYSTEM_ERROR and named in no.remark, no.remark
        assert settings(c) == after and r.broker.config.auto_create_topic is False


def test_broker_permission_registers_every_topic_with_it_and_refuses_as_rocketmq(
    start_remoting: StartRemoting,
) -> None:
    r = start_remoting()
    r.store.create_topic("Plain", 1)
    r.store.create_topic("Ordered", 1, order=True)
    assert r.store.put_message(Message("Plain", b"m", queue_id=0)).ok
    r.store.wait_dispatched()

    def route_perms(ns: RawClient) -> set[int]:
        route = json.loads(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Plain"}).body)
        return {q["perm"] for q in route["queueDatas"]}

    with RawClient(r.namesrv_port) as ns, RawClient(r.port) as c:
        assert route_perms(ns) == {6}
        change = c.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=4")
        assert change.code == ResponseCode.SUCCESS, change.remark
        # read only: routed so, an order topic's sends refused, the others stored (RocketMQ's
        # clients send none here, as routed)
        assert route_perms(ns) == {4}
        refused = send(c, "Ordered", b"x", queue_id=0)
        assert (refused.code, refused.remark) == (
            ResponseCode.NO_PERMISSION,
            "the broker[127.0.0.1] sending message is forbidden",
        )
        assert send(c, "Plain", b"x", queue_id=0).code == ResponseCode.SUCCESS
        assert c.call(RequestCode.PULL_MESSAGE, pull_ext("Plain", 0)).code == ResponseCode.SUCCESS
        assert c.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=2").code == 0
        no_pull = c.call(RequestCode.PULL_MESSAGE, pull_ext("Plain", 0))
        assert (no_pull.code, no_pull.remark) == (
            ResponseCode.NO_PERMISSION,
            "the broker[127.0.0.1] pulling message is forbidden",
        )
        assert c.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=6").code == 0
        assert route_perms(ns) == {6}
        assert c.call(RequestCode.PULL_MESSAGE, pull_ext("Plain", 0)).code == ResponseCode.SUCCESS


def test_a_shorter_transaction_check_interval_applies_before_the_current_wait_ends(
    start_remoting: StartRemoting, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks: list[float] = []

    async def check_once(self: TransactionChecker) -> None:
        checks.append(time.monotonic())

    monkeypatch.setattr(TransactionChecker, "check_once", check_once)
    r = start_remoting(transaction_check_interval_ms=3_600_000)
    with RawClient(r.port) as c:
        change = c.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"transactionCheckInterval=1000")
        assert change.code == ResponseCode.SUCCESS, change.remark
        changed = time.monotonic()
        while not checks and time.monotonic() - changed < 30:  # not the hour left of the old wait
            time.sleep(0.05)
    assert checks, "no transaction check within 30 s of the interval becoming 1 s"


def test_settings_files_are_updated_in_place(tmp_path: Path) -> None:
    toml = tmp_path / "serve.toml"
    toml.write_text("file_reserved_time = 1\n\n[broker]\ntransaction_check_max = 9\n")
    persist(toml, {"transactionCheckMax": "4", "autoCreateTopicEnable": "false"})
    assert toml.read_text() == (
        "file_reserved_time = 1\nautoCreateTopicEnable = false\n\n[broker]\ntransactionCheckMax = 4\n"
    )
    store, broker = load_settings(toml)  # what the next start reads
    assert (broker.transaction_check_max, broker.auto_create_topic, store.file_reserved_time) == (4, False, 1)
    with pytest.raises(SettingRefused, match="listenPort"):
        parse_update(b"listenPort=1", BrokerConfig())
    with pytest.raises(SettingRefused, match="at least 1000 ms"):  # the check timer would spin
        parse_update(b"transactionCheckInterval=0", BrokerConfig())
    with pytest.raises(SettingRefused, match=r"transactionTimeOut=x{64}\.\.\.: expected milliseconds") as bad:
        parse_update(b"transactionTimeOut=" + b"x" * 100_000, BrokerConfig())
    many = b"\n".join(b"k%d%s=1" % (i, b"y" * 1000) for i in range(5000))
    with pytest.raises(SettingRefused, match="and 4990 more") as refused:
        parse_update(many, BrokerConfig())
    assert len(str(bad.value)) < 200 and len(str(refused.value)) < 1200  # answers stay small
    pairs, changes = parse_update(b"# a comment\n transactionTimeOut : 7000\n", BrokerConfig())
    assert pairs == {"transactionTimeOut": "7000"} and changes == {"transaction_timeout_ms": 7000}


def test_a_settings_change_the_broker_would_not_load_is_refused_and_the_file_kept(tmp_path: Path) -> None:
    change = {"transactionTimeOut": "6000", "autoCreateTopicEnable": "false"}
    # set through a dotted key in the [broker] table (read after the top-level keys), or in a
    # file that does not load now: the rewrite would not give the new values, or not load
    for name, text, named in (
        ("dotted.toml", "broker.transactionTimeOut = 3000\n", "transactionTimeOut would read 3000"),
        ("broken.toml", "transactionTimeOut = 3000\n[broker\n", "would not load"),
        ("broken.properties", "brokerName=b\nnoSuchSetting=1\n", "would not load"),
    ):
        f = tmp_path / name
        f.write_text(text)
        with pytest.raises(StoreConfigError, match=named) as refused:
            persist(f, change)
        assert "nothing changed" in str(refused.value)
        assert f.read_text() == text
    # a key's line continued on the next (java.util.Properties), or quoted in TOML: replaced whole
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\ntransactionTimeOut : \\\n    3000\nautoCreateTopicEnable true\n")
    persist(conf, change)
    assert conf.read_text() == "brokerName=b\ntransactionTimeOut=6000\nautoCreateTopicEnable=false\n"
    quoted = tmp_path / "quoted.toml"
    quoted.write_text('"transactionTimeOut" = 3000\n')
    persist(quoted, change)
    _, broker = load_settings(quoted)
    assert (broker.transaction_timeout_ms, broker.auto_create_topic) == (6000, False)


def test_a_settings_file_that_can_not_be_replaced_is_refused_over_remoting(
    start_remoting: StartRemoting, tmp_path: Path
) -> None:
    conf = tmp_path / "conf" / "broker.conf"
    conf.parent.mkdir()
    conf.write_text("brokerName=broker-a\n")
    r = start_remoting(config_file=str(conf))
    (tmp_path / "conf" / "broker.conf.tmp").mkdir()  # where the new text would be written
    with RawClient(r.port) as c:
        no = c.call(RequestCode.UPDATE_BROKER_CONFIG, body=b"transactionCheckMax=3")
        assert no.code == ResponseCode.SYSTEM_ERROR and "nothing changed" in (no.remark or ""), no.remark
    assert conf.read_text() == "brokerName=broker-a\n" and r.broker.config.transaction_check_max != 3


def test_runtime_info_has_rocketmqs_keys(
    start_remoting: StartRemoting, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = start_remoting()
    real_statvfs = os.statvfs

    def statvfs(path: Any) -> Any:  # 1 MiB blocks, 50 of them reserved for root: free, not usable
        st = real_statvfs(path)
        fields = {n: getattr(st, n) for n in dir(st) if n.startswith("f_")}
        return SimpleNamespace(
            **{**fields, "f_frsize": 1 << 20, "f_blocks": 1000, "f_bfree": 900, "f_bavail": 850}
        )

    monkeypatch.setattr(os, "statvfs", statvfs)
    with RawClient(r.port) as c:
        assert send(c, "RT", b"x", {"UNIQ_KEY": "U1", "WAIT": "true", "DELAY": "2"}).code == 0
        r.store.wait_dispatched()
        table = json.loads(c.call(RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]
    for key in (
        "putLatency99",
        "putLatency999",
        "putMessageDistributeTime",
        "putMessageEntireTimeMax",
        "putMessageFailedTimes",
        "putMessageAverageSize",
        "getMessageEntireTimeMax",
        "getTotalTps",
        "dispatchMaxBuffer",
        "sendThreadPoolQueueCapacity",
        "pullThreadPoolQueueCapacity",
        "queryThreadPoolQueueCapacity",
        "EndTransactionQueueSize",
        "EndTransactionThreadPoolQueueCapacity",
        "startAcceptSendRequestTimeStamp",
    ):
        assert key in table, key
    assert table["scheduleMessageOffset_2"] == "0,1"  # level 2: none delivered of 1
    # Java's File.getFreeSpace (f_bfree), as RocketMQ prints it; not the space usable (f_bavail)
    assert table["commitLogDirCapacity"] == "Total : 1000.0 MiB, Free : 900.0 MiB."
    commitlog = r.store.layout.root / "commitlog"
    assert table[f"commitLogDiskRatio_{commitlog}"] == table["commitLogDiskRatio"]
    assert table["remainHowManyDataToFlush"].endswith("B")  # human-readable, as RocketMQ's
    assert "remainHowManyDataToCommit" not in table  # RocketMQ shows it with the transient pool only


def test_the_broker_topics_are_listed_routed_and_made_as_routed(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    with RawClient(r.namesrv_port) as ns, RawClient(r.port) as c:
        topics = json.loads(ns.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)["topicList"]
        assert set(topics) >= {
            "TBW102",
            "SELF_TEST_TOPIC",
            "BenchmarkTest",
            "DefaultCluster",
            "broker-a",
            "OFFSET_MOVED_EVENT",
            "SCHEDULE_TOPIC_XXXX",
            "RMQ_SYS_TRANS_HALF_TOPIC",
            "DefaultCluster_REPLY_TOPIC",
        }
        route = json.loads(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "DefaultCluster"}).body)
        assert route["queueDatas"][0]["writeQueueNums"] == 16 and route["queueDatas"][0]["perm"] == 7
        # a send to one the store lacks makes it as routed (the broker topic: 1 queue, not TBW102's)
        assert send(c, "broker-a", b"x", queue_id=0).code == ResponseCode.SUCCESS
        made = r.store.topic_config("broker-a")
        assert made is not None and (made.write_queues, made.perm) == (1, 6)
        stats = c.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "OFFSET_MOVED_EVENT"})
        assert stats.code == ResponseCode.SUCCESS
