"""RocketMQ 4.9.8's Java consumers against ``rocketstore serve`` over the remoting protocol: push
(concurrent and orderly), lite pull and pull consumers, tag filtering, retry through
``%RETRY%group`` and the DLQ, and committed offsets landing in the store's consumerOffset.json
(the numbers ``rocketstore consumer-progress`` shows)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from .conftest import StartServe
from .harness import SRC, JavaPrograms, Served, wait_until

pytestmark = pytest.mark.slow


def consumed(events: list[dict[str, Any]], result: str | None = None) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == "consumed" and (result is None or e.get("result") == result)]


def store_progress(store: Path, group: str) -> dict[tuple[str, int], int]:
    """``rocketstore consumer-progress --json`` of a store no server holds: committed offset per
    (topic, queue) of ``group``."""
    out = subprocess.run(
        [sys.executable, "-m", "rocketstore.cli", "consumer-progress", str(store), "-g", group, "--json"],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return {(r["topic"], r["queue_id"]): r["consumer_offset"] for r in rows if "queue_id" in r}


def produce(java: JavaPrograms, served: Served, topic: str, count: int, *extra: str) -> list[dict[str, Any]]:
    sent = [
        e
        for e in java.run("Produce", f"namesrv={served.namesrv}", f"topic={topic}", f"count={count}", *extra)
        if e["event"] == "sent"
    ]
    assert len(sent) == count and all(e["status"] == "SEND_OK" for e in sent)
    return sent


def test_push_consumer_gets_every_message_and_its_offsets_are_the_stores(
    java: JavaPrograms, serve: StartServe
) -> None:
    served = serve()
    sent = produce(java, served, "PushT", 20, "tags=a,b")
    events = java.run("PushConsume", f"namesrv={served.namesrv}", "group=push_g", "topic=PushT", "expect=20")
    got = consumed(events)
    assert sorted(e["body"] for e in got) == sorted(f"body-{i}" for i in range(20))
    assert {e["msgId"] for e in got} == {e["msgId"] for e in sent}  # UNIQ_KEY: the ids the producer saw
    assert {e["offsetMsgId"] for e in got} == {e["offsetMsgId"] for e in sent}
    # the consumer committed at shutdown (oneway): the store's offsets reach each queue's end
    ends: dict[int, int] = defaultdict(int)
    for e in sent:
        ends[e["queueId"]] = max(ends[e["queueId"]], e["queueOffset"] + 1)
    served.stop()
    progress = store_progress(served.store, "push_g")
    assert {q: progress.get(("PushT", q)) for q in ends} == dict(ends)


def test_push_consumer_filters_by_tag(java: JavaPrograms, serve: StartServe) -> None:
    served = serve()
    produce(java, served, "TagT", 12, "tags=a,b,c")
    events = java.run(
        "PushConsume", f"namesrv={served.namesrv}", "group=tag_g", "topic=TagT", "sub=a || c", "expect=8"
    )
    assert sorted(e["tags"] for e in consumed(events)) == ["a"] * 4 + ["c"] * 4


def test_push_consumer_waiting_for_messages_gets_them_when_they_come(
    java: JavaPrograms, serve: StartServe
) -> None:
    served = serve()
    produce(java, served, "LateT", 1)  # the topic exists; the consumer starts at its end
    consumer = java.start(
        "PushConsume", f"namesrv={served.namesrv}", "group=late_g", "topic=LateT", "expect=6"
    )
    # once it is registered its pulls are parked at the queues' ends: the sends below wake them
    wait_until(lambda: served_has_group(java, served, "late_g"), "the consumer's registration")
    produce(java, served, "LateT", 5)
    consumer.finish()
    assert any(e["event"] == "done" for e in consumer.events)
    assert sorted(e["body"] for e in consumed(consumer.events)) == [
        "body-0",
        *(f"body-{i}" for i in range(5)),
    ]


def served_has_group(java: JavaPrograms, served: Served, group: str) -> bool:
    out = java.dist.mqadmin("consumerConnection", "-n", served.namesrv, "-g", group)
    return out.returncode == 0 and "JAVA" in out.stdout


def test_orderly_push_consumer_sees_each_queue_in_order(java: JavaPrograms, serve: StartServe) -> None:
    served = serve()
    produce(java, served, "OrderT", 30, "queue=0")
    produce(java, served, "OrderT", 10, "queue=1")
    events = java.run(
        "PushConsume",
        f"namesrv={served.namesrv}",
        "group=order_g",
        "topic=OrderT",
        "orderly=true",
        "expect=40",
    )
    per_queue: dict[int, list[int]] = defaultdict(list)
    for e in consumed(events):
        per_queue[e["queueId"]].append(e["queueOffset"])
    assert per_queue == {0: list(range(30)), 1: list(range(10))}


def test_lite_pull_and_pull_consumers(java: JavaPrograms, serve: StartServe) -> None:
    served = serve()
    sent = produce(java, served, "PullT", 15, "tags=x,y,z")
    ns = f"namesrv={served.namesrv}"
    lite = java.run("LitePull", ns, "group=lite_g", "topic=PullT", "expect=15")
    assert sorted(e["body"] for e in consumed(lite)) == sorted(f"body-{i}" for i in range(15))

    pulled = java.run("PullConsume", ns, "group=pull_g", "topic=PullT", attempts=3)
    assert sorted(e["body"] for e in consumed(pulled)) == sorted(f"body-{i}" for i in range(15))
    queues = {e["queueId"]: e for e in pulled if e["event"] == "queue"}
    for q, e in queues.items():
        assert e["minOffset"] == 0 and e["maxOffset"] == e["next"] == sum(
            1 for s in sent if s["queueId"] == q
        )
    # the pull consumer persisted where it got to: a second run finds nothing new
    again = java.run("PullConsume", ns, "group=pull_g", "topic=PullT", attempts=3)
    assert consumed(again) == []

    tagged = java.run("PullConsume", ns, "group=pull_tag_g", "topic=PullT", "sub=y", attempts=3)
    assert sorted(e["body"] for e in consumed(tagged)) == sorted(f"body-{i}" for i in range(15) if i % 3 == 1)


def test_retry_then_dlq(java: JavaPrograms, serve: StartServe) -> None:
    served = serve()
    produce(java, served, "RetryT", 4)
    ns = f"namesrv={served.namesrv}"
    # body-1 fails once and comes back through %RETRY%retry_g (delay level 1: 1 s); body-2 fails
    # every time and, with maxReconsumeTimes 1, lands in %DLQ%retry_g after its one retry
    events = java.run(
        "PushConsume",
        ns,
        "group=retry_g",
        "topic=RetryT",
        "fail=body-1,body-2",
        "failTimes=1",
        "retryDelay=1",
        "expect=4",
    )
    deliveries = defaultdict(list)
    for e in consumed(events):
        deliveries[e["body"]].append(e)
    assert [e["result"] for e in deliveries["body-1"]] == ["later", "ok"]
    retried = deliveries["body-1"][1]
    assert (
        retried["reconsumeTimes"] == 1 and retried["topic"] == "RetryT" and retried["retryTopic"] == "RetryT"
    )
    assert retried["msgId"] == deliveries["body-1"][0]["msgId"]  # the same message id

    dlq = java.start(
        "PushConsume",
        ns,
        "group=dlq_g",
        "topic=RetryT",
        "fail=body-3",
        "failTimes=99",
        "retryDelay=1",
        "maxReconsume=1",
        "expect=99",
    )
    readers = iter(range(1000))

    def in_dlq() -> bool:
        if "%DLQ%dlq_g" not in java.dist.mqadmin("topicList", "-n", served.namesrv).stdout.split():
            return False
        found = java.run(
            "PullConsume", ns, f"group=dlq_reader_{next(readers)}", "topic=%DLQ%dlq_g", attempts=3
        )
        return [e["body"] for e in consumed(found)] == ["body-3"]

    # body-3: delivered, failed, retried once (reconsumeTimes 1 = maxReconsumeTimes), failed: DLQ
    wait_until(in_dlq, "body-3 in %DLQ%dlq_g", timeout=120)
    dlq.stop()
    tries = [e for e in consumed(dlq.events) if e["body"] == "body-3"]
    assert [e["reconsumeTimes"] for e in tries] == [0, 1]


def test_committed_offsets_hold_after_kill_9(java: JavaPrograms, serve: StartServe) -> None:
    served = serve()
    produce(java, served, "KillT", 10, "keys=first")
    ns = f"namesrv={served.namesrv}"
    java.run("PushConsume", ns, "group=kill_g", "topic=KillT", "expect=10")
    offsets = served.store / "config" / "consumerOffset.json"

    def on_disk() -> int:
        try:
            table = json.loads(offsets.read_text())["offsetTable"]
        except (OSError, ValueError, KeyError):
            return 0
        return sum(int(v) for v in table.get("KillT@kill_g", {}).values())

    # the consumer committed at its shutdown; the store persists offsets periodically
    wait_until(lambda: on_disk() == 10, "kill_g's offsets in consumerOffset.json", timeout=120)
    served.kill()
    again = serve(served.store)
    produce(java, again, "KillT", 3, "keys=second")
    events = java.run("PushConsume", f"namesrv={again.namesrv}", "group=kill_g", "topic=KillT", "expect=3")
    assert sorted(e["keys"] for e in consumed(events)) == ["second-0", "second-1", "second-2"]
