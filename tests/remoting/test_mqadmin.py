"""``mqadmin`` from RocketMQ 4.9.8 against ``rocketstore serve``, each command's output compared
with what the same command prints against RocketMQ's own name server and broker after the same
workload (6 messages with tags and keys to ``AdmT``, consumed by ``adm_g``). Addresses differ, so
they are replaced by placeholders; figures that depend on the machine (TPS, times) are left out."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .harness import JavaPrograms, Process, RocketMQServers, Served, start_serve, wait_until

pytestmark = pytest.mark.slow

_TRANSPORT = ("RemotingSendRequestException", "RemotingTimeoutException", "RemotingConnectException")


@dataclass
class Side:
    """One server pair (rocketstore's or RocketMQ's) after the workload."""

    name: str
    namesrv: str
    broker: str
    sent: list[dict[str, Any]]
    java: JavaPrograms
    live: Process | None = None
    settings_file: Path | None = None  # rocketstore's: the file serve --config read

    def admin(self, *args: str, ok: bool = True) -> str:
        """``mqadmin ARGS -n NAMESRV``'s output with addresses as NAMESRV / BROKER. A run the
        loaded machine made miss a client timeout is run again (up to 3 times)."""
        for _ in range(3):
            out = self.java.dist.mqadmin(*args, "-n", self.namesrv)
            text = out.stdout + out.stderr
            if not any(t in text for t in _TRANSPORT):
                break
        if ok:
            assert out.returncode == 0 and "Exception" not in out.stdout, f"{self.name}: {args}\n{text}"
        text = (out.stdout if ok else text).replace(self.broker, "BROKER").replace(self.namesrv, "NAMESRV")
        return "\n".join(line for line in text.splitlines() if "RocketmqRemoting" not in line)


def workload(java: JavaPrograms, namesrv: str) -> list[dict[str, Any]]:
    events = java.run("Produce", f"namesrv={namesrv}", "topic=AdmT", "count=6", "tags=a,b", "keys=key")
    # (committed synchronously: both sides' consumerProgress must show every offset, whatever the load)
    java.run("PushConsume", f"namesrv={namesrv}", "group=adm_g", "topic=AdmT", "expect=6", "commit=sync")
    return [e for e in events if e["event"] == "sent"]


@pytest.fixture(scope="module")
def sides(
    java_classes: JavaPrograms, rocketmq: RocketMQServers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Side, Side]]:
    java = JavaPrograms(java_classes.dist, java_classes.classes)
    store = tmp_path_factory.mktemp("admin") / "store"
    served: Served = start_serve(store, settings="brokerName=broker-a\n")
    try:
        ours = Side(
            "rocketstore",
            served.namesrv,
            served.broker,
            workload(java, served.namesrv),
            java,
            settings_file=store.parent / f"{store.name}.conf",
        )
        theirs = Side("rocketmq", rocketmq.namesrv, rocketmq.broker, workload(java, rocketmq.namesrv), java)
        yield ours, theirs
    finally:
        java.stop_all()
        served.stop()


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_cluster_list(sides: tuple[Side, Side]) -> None:
    ours, theirs = (s.admin("clusterList") for s in sides)
    assert rows(ours)[0] == rows(theirs)[0]  # the header
    assert rows(ours)[1][:5] == rows(theirs)[1][:5] == ["DefaultCluster", "broker-a", "0", "BROKER", "V4_9_8"]


# RocketMQ's broker makes it in its first transaction check, a minute after it starts
_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"


def test_topic_list_route_and_status(sides: tuple[Side, Side]) -> None:
    ours, theirs = sides
    listed = [set(side.admin("topicList").split()) - {_HALF_TOPIC} for side in sides]
    assert listed[0] == listed[1]  # the broker's own topics too (SELF_TEST_TOPIC, broker-a ...)
    assert {"AdmT", "%RETRY%adm_g", "TBW102", "SELF_TEST_TOPIC", "broker-a", "DefaultCluster"} <= listed[0]
    assert ours.admin("topicRoute", "-t", "AdmT") == theirs.admin("topicRoute", "-t", "AdmT")
    mine, ref = rows(ours.admin("topicStatus", "-t", "AdmT")), rows(theirs.admin("topicStatus", "-t", "AdmT"))
    assert mine[0] == ref[0] and len(mine) == len(ref) == 5
    assert [r[:3] for r in mine[1:]] == [r[:3] for r in ref[1:]]  # broker, queue id, min offset
    assert sum(int(r[3]) for r in mine[1:]) == sum(int(r[3]) for r in ref[1:]) == 6


def test_update_and_delete_topic(sides: tuple[Side, Side]) -> None:
    ours = sides[0]
    created = [s.admin("updateTopic", "-b", s.broker, "-t", "NewT", "-r", "3", "-w", "3") for s in sides]
    assert created[0] == created[1]
    assert '"readQueueNums":3' in ours.admin("topicRoute", "-t", "NewT")
    deleted = [s.admin("deleteTopic", "-c", "DefaultCluster", "-t", "NewT") for s in sides]
    assert deleted[0] == deleted[1]
    assert "NewT" not in ours.admin("topicList").split()
    refused = ours.admin("updateTopic", "-b", ours.broker, "-t", "TBW102", ok=False)
    assert "conflict with system topic" in refused


def test_consumer_progress(sides: tuple[Side, Side]) -> None:
    ours, theirs = (rows(s.admin("consumerProgress", "-g", "adm_g")) for s in sides)
    assert ours[0] == theirs[0]

    def totals(table: list[list[str]]) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for r in table:
            if len(r) >= 6 and r[1] == "broker-a":
                b, c = out.get(r[0], (0, 0))
                out[r[0]] = (b + int(r[3]), c + int(r[4]))
        return out

    # (the retry topic's row comes with an offset the consumer committed for it, or not at all:
    # whether its periodic commit ran before it stopped)
    assert totals(ours)["AdmT"] == totals(theirs)["AdmT"] == (6, 6)
    assert totals(ours).get("%RETRY%adm_g", (0, 0)) == totals(theirs).get("%RETRY%adm_g", (0, 0)) == (0, 0)
    assert ["Diff", "Total:", "0"] in ours and ["Diff", "Total:", "0"] in theirs
    groups = [rows(s.admin("consumerProgress")) for s in sides]
    assert groups[0][0] == groups[1][0]
    assert [r[:3] for r in groups[0] if r[0] == "adm_g"] == [r[:3] for r in groups[1] if r[0] == "adm_g"]


def test_consumer_connection(sides: tuple[Side, Side]) -> None:
    for side in sides:
        side.live = side.java.start(
            "PushConsume",
            f"namesrv={side.namesrv}",
            "group=adm_live",
            "topic=AdmT",
            "expect=999",
            "timeout=600",
        )
    outputs = []
    for side in sides:
        wait_until(
            lambda s=side: "JAVA" in s.admin("consumerConnection", "-g", "adm_live", ok=False),
            f"{side.name}'s consumer",
        )
        outputs.append(rows(side.admin("consumerConnection", "-g", "adm_live")))
    ours, theirs = outputs
    assert ours[0] == theirs[0]
    assert ours[1][2:] == theirs[1][2:] == ["JAVA", "V4_9_8"]
    assert ours[2:] == theirs[2:]  # subscriptions, consume type, message model, where from
    for side in sides:
        assert side.live is not None
        side.live.stop()


def test_broker_status_and_config(sides: tuple[Side, Side]) -> None:
    ours, theirs = (s.admin("brokerStatus", "-b", s.broker) for s in sides)
    line = re.compile(r"^(\S+)\s*: (.*)$")
    mine = dict(m.groups() for m in map(line.match, ours.splitlines()) if m)
    ref = dict(m.groups() for m in map(line.match, theirs.splitlines()) if m)
    read_by_mqadmin = {
        "brokerVersionDesc",
        "brokerVersion",
        "putTps",
        "getTransferedTps",
        "sendThreadPoolQueueSize",
        "pullThreadPoolQueueSize",
        "pageCacheLockTimeMills",
        "earliestMessageTimeStamp",
        "commitLogDiskRatio",
        "msgPutTotalTodayNow",
        "msgGetTotalTodayNow",
    }
    assert read_by_mqadmin <= mine.keys() and read_by_mqadmin <= ref.keys()
    assert mine["brokerVersionDesc"] == ref["brokerVersionDesc"] == "V4_9_8"
    assert mine["brokerVersion"] == ref["brokerVersion"] == "409"

    # every key RocketMQ's broker shows (its commitlog path in one key's name differs)
    def keys(table: dict[str, str]) -> set[str]:
        return {re.sub(r"^commitLogDiskRatio_.+", "commitLogDiskRatio_PATH", k) for k in table}

    assert keys(ref) <= keys(mine), keys(ref) - keys(mine)
    for table in (mine, ref):
        assert re.fullmatch(r"\d+\.\d\d", table["putLatency99"]) and re.fullmatch(
            r"\d+\.\d\d", table["putLatency999"]
        )
        assert re.fullmatch(r"null|(\[[^]]+\]:\d+ ){13}", table["putMessageDistributeTime"])
        assert re.fullmatch(
            r"Total : [\d.]+ [KMGTPE]iB, Free : [\d.]+ [KMGTPE]iB\.", table["commitLogDirCapacity"]
        )
        assert re.fullmatch(r"\d+(\.\d+)? [KMGTPE]?i?B", table["remainHowManyDataToFlush"])

    def config(side: Side) -> tuple[str, dict[str, str]]:
        lines = side.admin("getBrokerConfig", "-b", side.broker).splitlines()
        pairs = (line.partition("=") for line in lines[1:] if "=" in line)
        return lines[0], {key.strip(): value.strip() for key, _, value in pairs}

    (head, pairs), (ref_head, ref_pairs) = config(sides[0]), config(sides[1])
    assert head == ref_head == "============BROKER============"
    assert pairs["brokerName"] == "broker-a" and pairs["brokerClusterName"] == "DefaultCluster"
    assert pairs.keys() == ref_pairs.keys(), pairs.keys() ^ ref_pairs.keys()
    assert pairs["listenPort"] == sides[0].broker.rsplit(":", 1)[1]


def test_query_messages(sides: tuple[Side, Side]) -> None:
    by_key = [rows(s.admin("queryMsgByKey", "-t", "AdmT", "-k", "key-1")) for s in sides]
    assert by_key[0][0] == by_key[1][0]
    for side, table in zip(sides, by_key):
        [sent] = [e for e in side.sent if e["i"] == 1]
        assert table[1] == [sent["msgId"], str(sent["queueId"]), str(sent["queueOffset"])]

    def fields(text: str) -> dict[str, str]:
        return dict(
            (k.strip(), v.strip())
            for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)
        )

    for command in ("queryMsgById", "queryMsgByOffset"):
        shown = []
        for side in sides:
            [sent] = [e for e in side.sent if e["i"] == 1]
            if command == "queryMsgById":
                out = side.admin("queryMsgById", "-i", sent["offsetMsgId"])
            else:
                out = side.admin(
                    "queryMsgByOffset",
                    "-t",
                    "AdmT",
                    "-b",
                    "broker-a",
                    "-i",
                    str(sent["queueId"]),
                    "-o",
                    str(sent["queueOffset"]),
                )
            f = fields(out)
            assert (f["Topic"], f["Tags"], f["Keys"], f["Queue ID"], f["Queue Offset"]) == (
                "AdmT",
                "[b]",
                "[key-1]",
                str(sent["queueId"]),
                str(sent["queueOffset"]),
            ), out
            assert f["OffsetID"] == sent["offsetMsgId"] and f["Store Host"] == "BROKER"
            shown.append(sorted(k for k in f if not k.startswith("MessageTrack")))
        assert shown[0] == shown[1]


def test_stats_all(sides: tuple[Side, Side]) -> None:
    """statsAll's figures come from the stats items, sampled every 10 s: a fresh workload's
    24-hour counts show once a sample has passed (and for about a minute, as on RocketMQ)."""
    for side in sides:
        side.java.run("Produce", f"namesrv={side.namesrv}", "topic=AdmS", "count=3")
        side.java.run(
            "PushConsume", f"namesrv={side.namesrv}", "group=adm_s", "topic=AdmS", "expect=3", "commit=sync"
        )
    tables = []
    for side in sides:
        shown: list[list[list[str]]] = []

        def counted(s: Side = side, out: list[list[list[str]]] = shown) -> bool:
            out[:] = [rows(s.admin("statsAll"))]
            row = next((r for r in out[0] if r[:2] == ["AdmS", "adm_s"]), None)
            return row is not None and row[5:] == ["3", "3"]

        wait_until(counted, f"{side.name}'s statsAll counting AdmS", timeout=90)
        tables.append(shown[0])
    ours, theirs = tables
    assert ours[0] == theirs[0]  # the header
    for table in tables:
        [row] = [r for r in table if r[:2] == ["AdmS", "adm_s"]]
        assert row[2] == "0" and float(row[3]) > 0 and float(row[4]) > 0  # accumulation, in/out TPS
    topics = [{r[0] for r in table[1:]} - {_HALF_TOPIC} for table in tables]
    assert topics[0] == topics[1]
    idle = [sorted(r[0] for r in table if r[-1] == "NO_CONSUMER") for table in tables]
    assert [t for t in idle[0] if t != _HALF_TOPIC] == [t for t in idle[1] if t != _HALF_TOPIC]


def test_producer_connection(sides: tuple[Side, Side]) -> None:
    outputs = []
    for side in sides:
        producer = side.java.start(
            "Produce", f"namesrv={side.namesrv}", "topic=AdmT", "count=1", "group=adm_p", "hold=600"
        )
        producer.wait_event("holding")
        wait_until(
            lambda s=side: "JAVA" in s.admin("producerConnection", "-g", "adm_p", "-t", "AdmT", ok=False),
            f"{side.name}'s producer heartbeat",
        )
        outputs.append(rows(side.admin("producerConnection", "-g", "adm_p", "-t", "AdmT")))
        producer.stop()
    ours, theirs = outputs
    assert len(ours) == len(theirs) == 1
    assert ours[0][0] == theirs[0][0] == "0001" and ours[0][3:] == theirs[0][3:] == ["JAVA", "V4_9_8"]
    missing = sides[0].admin("producerConnection", "-g", "no_such_p", "-t", "AdmT", ok=False)
    assert "the producer group[no_such_p] not exist" in missing


def test_update_broker_config(sides: tuple[Side, Side]) -> None:
    ours = sides[0]
    said = [
        s.admin("updateBrokerConfig", "-b", s.broker, "-k", "transactionCheckMax", "-v", "20") for s in sides
    ]
    assert said[0] == said[1] == "update broker config success, BROKER"
    for side in sides:
        assert re.search(
            r"^transactionCheckMax\s+=\s+20$", side.admin("getBrokerConfig", "-b", side.broker), re.M
        )
    assert ours.settings_file is not None
    assert "transactionCheckMax=20" in ours.settings_file.read_text().splitlines()  # kept for a restart
    refused = ours.admin(
        "updateBrokerConfig", "-b", ours.broker, "-k", "fileReservedTime", "-v", "1", ok=False
    )
    assert "can not update fileReservedTime while the broker runs" in refused
    assert re.search(r"^fileReservedTime\s+=\s+72$", ours.admin("getBrokerConfig", "-b", ours.broker), re.M)


def test_reset_offset_by_time(sides: tuple[Side, Side]) -> None:
    """With the group online the broker tells its consumer, which consumes the topic again;
    offline, mqadmin commits the offsets itself (its old command)."""
    for side in sides:
        side.live = side.java.start(
            "PushConsume", f"namesrv={side.namesrv}", "group=adm_g", "topic=AdmT", "expect=6", "timeout=600"
        )
    outputs = []
    for side in sides:
        wait_until(
            lambda s=side: "JAVA" in s.admin("consumerConnection", "-g", "adm_g", ok=False),
            f"{side.name}'s consumer",
        )
        outputs.append(side.admin("resetOffsetByTime", "-g", "adm_g", "-t", "AdmT", "-s", "0"))
    ours, theirs = outputs
    assert ours == theirs
    assert rows(ours)[1] == ["#brokerName", "#queueId", "#offset"]
    assert sorted(r[1:] for r in rows(ours)[2:]) == [["0", "0"], ["1", "0"], ["2", "0"], ["3", "0"]]
    for side in sides:
        assert side.live is not None
        side.live.wait_event("done", timeout=120)  # all 6 again, after the client's 10 s pause
        side.live.stop()
    fallback = [rows(s.admin("resetOffsetByTime", "-g", "adm_g", "-t", "AdmT", "-s", "0")) for s in sides]
    assert fallback[0][:2] == fallback[1][:2]  # "rollback ... consumerGroup[adm_g]", the header
    for table in fallback:
        assert len(table) == 6 and all(r[-1] == "0" for r in table[2:])  # #rollbackOffset
