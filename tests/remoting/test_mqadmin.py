"""``mqadmin`` from RocketMQ 4.9.8 against ``rocketstore serve``, each command's output compared
with what the same command prints against RocketMQ's own name server and broker after the same
workload (6 messages with tags and keys to ``AdmT``, consumed by ``adm_g``). Addresses differ, so
they are replaced by placeholders; figures that depend on the machine (TPS, times) are left out."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
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
    java.run("PushConsume", f"namesrv={namesrv}", "group=adm_g", "topic=AdmT", "expect=6")
    return [e for e in events if e["event"] == "sent"]


@pytest.fixture(scope="module")
def sides(
    java_classes: JavaPrograms, rocketmq: RocketMQServers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Side, Side]]:
    java = JavaPrograms(java_classes.dist, java_classes.classes)
    store = tmp_path_factory.mktemp("admin") / "store"
    served: Served = start_serve(store, settings="brokerName=broker-a\n")
    try:
        ours = Side("rocketstore", served.namesrv, served.broker, workload(java, served.namesrv), java)
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


def test_topic_list_route_and_status(sides: tuple[Side, Side]) -> None:
    ours, theirs = sides
    for side in sides:
        assert {"AdmT", "%RETRY%adm_g", "TBW102"} <= set(side.admin("topicList").split())
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

    config = sides[0].admin("getBrokerConfig", "-b", sides[0].broker).splitlines()
    assert config[0] == "============BROKER============"
    pairs = dict(re.split(r"\s+=\s+", line, maxsplit=1) for line in config[1:] if "=" in line)
    assert pairs["brokerName"] == "broker-a" and pairs["brokerClusterName"] == "DefaultCluster"
    reference = sides[1].admin("getBrokerConfig", "-b", sides[1].broker).splitlines()
    assert reference[0] == config[0]


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
