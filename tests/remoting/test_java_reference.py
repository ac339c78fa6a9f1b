"""The harness itself, against RocketMQ 4.9.8's own name server and broker: the Java test programs
send and consume as the tests against ``rocketstore serve`` expect them to. This proves the programs
(and what the tests read from their output) right independently of rocketstore."""

from __future__ import annotations

from collections import defaultdict

import pytest

from .harness import JavaPrograms, RocketMQServers

pytestmark = pytest.mark.slow


def test_producer_modes_and_consumers_against_rocketmq(java: JavaPrograms, rocketmq: RocketMQServers) -> None:
    ns = f"namesrv={rocketmq.namesrv}"
    sync = java.run("Produce", ns, "topic=RefT", "count=6", "mode=sync", "tags=a,b", "keys=k")
    sent = [e for e in sync if e["event"] == "sent"]
    assert [e["status"] for e in sent] == ["SEND_OK"] * 6
    assert all(len(e["offsetMsgId"]) == 32 for e in sent)
    assert {e["queueId"] for e in sent} <= set(range(4))

    batch = java.run("Produce", ns, "topic=RefT", "count=4", "mode=batch")
    [b] = [e for e in batch if e["event"] == "batch"]
    assert b["status"] == "SEND_OK" and len(b["msgId"].split(",")) == 4

    asynced = java.run("Produce", ns, "topic=RefT", "count=3", "mode=async")
    assert sorted(e["i"] for e in asynced if e["event"] == "sent") == [0, 1, 2]

    # 13 messages: every consumer kind sees all of them, each queue in offset order
    pulled = java.run("PullConsume", ns, "group=ref_pull", "topic=RefT")
    bodies = sorted(e["body"] for e in pulled if e["event"] == "consumed")
    assert len(bodies) == 13
    per_queue: dict[int, list[int]] = defaultdict(list)
    for e in pulled:
        if e["event"] == "consumed":
            per_queue[e["queueId"]].append(e["queueOffset"])
    assert all(offsets == sorted(offsets) for offsets in per_queue.values())
    assert sum(e["maxOffset"] for e in pulled if e["event"] == "queue") == 13

    tagged = java.run("PullConsume", ns, "group=ref_pull_tag", "topic=RefT", "sub=a")
    assert sorted(e["body"] for e in tagged if e["event"] == "consumed") == ["body-0", "body-2", "body-4"]

    push = java.run("PushConsume", ns, "group=ref_push", "topic=RefT", "expect=13")
    assert push[-1]["event"] == "stopped" and any(e["event"] == "done" for e in push)
    assert sorted(e["body"] for e in push if e["event"] == "consumed") == bodies

    lite = java.run("LitePull", ns, "group=ref_lite", "topic=RefT", "expect=13")
    assert sorted(e["body"] for e in lite if e["event"] == "consumed") == bodies

    # the push consumer's offsets were committed to the broker: mqadmin shows all 13 consumed
    assert rocketmq_progress(java, rocketmq, "ref_push")["RefT"] == 13


def rocketmq_progress(java: JavaPrograms, servers: RocketMQServers, group: str) -> dict[str, int]:
    """Consumer offsets per topic (summed over queues) as ``mqadmin consumerProgress -g`` prints them."""
    out = java.dist.mqadmin("consumerProgress", "-n", servers.namesrv, "-g", group)
    assert out.returncode == 0, out.stdout + out.stderr
    totals: dict[str, int] = defaultdict(int)
    for line in out.stdout.splitlines():
        cols = line.split()
        if len(cols) >= 6 and cols[1] == "broker-a" and cols[2].isdigit():
            totals[cols[0]] += int(cols[4])
    return dict(totals)
