"""RocketMQ 4.9.8's own broker over a store that ``rocketstore serve`` wrote for the Java client:
normal messages with keys and tags, a batch, delayed messages (one delivered by serve, one still
waiting in the schedule topic when serve stops), and transactions (one committed, one rolled back).
After a clean stop (SIGTERM), RocketMQ's name server and broker start on the same directory with the
same file geometry, and its broker serves every message with the same body, tags, message id, queue
and offset, finds them by key, shows the same queue offsets and consumer offsets, and delivers the
waiting delayed message exactly once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rocketstore.config import read_settings_file

from .conftest import StartServe
from .harness import JavaPrograms, RocketMQDist, start_rocketmq, wait_until

pytestmark = pytest.mark.slow

# Both sides must lay out the files alike; small files (the disk is shared). serve's harness sets the
# commitlog and consume queue sizes; the index size is set here for both.
GEOMETRY_KEYS = ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum")
SERVE_SETTINGS = "brokerName=broker-a\nmaxHashSlotNum=5000\nmaxIndexNum=20000\n"
TOPICS = ("RdT", "RdBatch", "RdDelay", "RdTx")


def consumed(java: JavaPrograms, namesrv: str, group: str, topic: str) -> tuple[list[Any], list[Any]]:
    """Every message of ``topic`` as a DefaultMQPullConsumer of ``group`` reads it (sorted by queue and
    offset), and each queue's (id, min offset, max offset)."""
    events = java.run("PullConsume", f"namesrv={namesrv}", f"group={group}", f"topic={topic}", attempts=3)
    messages = sorted(
        (e["queueId"], e["queueOffset"], e["body"], e.get("tags"), e.get("keys"), e["msgId"], e["topic"])
        for e in events
        if e["event"] == "consumed"
    )
    queues = sorted((e["queueId"], e["minOffset"], e["maxOffset"]) for e in events if e["event"] == "queue")
    return messages, queues


def admin_rows(dist: RocketMQDist, *args: str) -> list[list[str]]:
    """``mqadmin ARGS``'s output lines split into columns, after a successful run (a run the loaded
    machine made miss a client timeout is run again, up to 3 times)."""
    for _ in range(3):
        out = dist.mqadmin(*args)
        if out.returncode == 0 and "Exception" not in out.stdout:
            return [line.split() for line in out.stdout.splitlines() if line.strip()]
    raise AssertionError(f"mqadmin {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")


def stored_count(dist: RocketMQDist, namesrv: str, topic: str) -> int:
    """Messages in ``topic`` (the sum of its queues' max offsets as ``mqadmin topicStatus`` shows them),
    0 while the topic does not exist yet."""
    out = dist.mqadmin("topicStatus", "-n", namesrv, "-t", topic)
    if out.returncode != 0 or "Exception" in out.stdout:
        return 0
    return sum(
        int(r[3]) for r in (line.split() for line in out.stdout.splitlines()) if len(r) > 3 and r[1].isdigit()
    )


def test_rocketmq_broker_serves_what_serve_wrote(
    java: JavaPrograms, serve: StartServe, rocketmq_dist: RocketMQDist, tmp_path: Path
) -> None:
    s = serve(settings=SERVE_SETTINGS)
    ns = f"namesrv={s.namesrv}"
    sent = java.run("Produce", ns, "topic=RdT", "count=12", "tags=a,b,c", "keys=k")
    sent = [e for e in sent if e["event"] == "sent"]
    assert [e["status"] for e in sent] == ["SEND_OK"] * 12
    [batch] = [
        e
        for e in java.run("Produce", ns, "topic=RdBatch", "count=8", "mode=batch", "keys=bk", "tags=x")
        if e["event"] == "batch"
    ]
    assert batch["status"] == "SEND_OK"
    delayed = java.run("Produce", ns, "topic=RdDelay", "count=2", "delay=1", "keys=dk", "tags=d")
    assert [e["status"] for e in delayed if e["event"] == "sent"] == ["SEND_OK"] * 2
    tx = [e for e in java.run("TxProduce", ns, "topic=RdTx", "count=2") if e["event"] == "sent"]
    assert [(e["status"], e["state"]) for e in tx] == [
        ("SEND_OK", "COMMIT_MESSAGE"),
        ("SEND_OK", "ROLLBACK_MESSAGE"),
    ]
    # the 1 s delay has passed and serve moved both messages from the schedule topic to RdDelay
    wait_until(lambda: stored_count(rocketmq_dist, s.namesrv, "RdDelay") == 2, "serve's delivery of RdDelay")

    before = {t: consumed(java, s.namesrv, "rd_before", t) for t in TOPICS}

    def contents(topic: str) -> list[tuple[str, str | None, str | None]]:
        return sorted(m[2:5] for m in before[topic][0])

    assert contents("RdT") == sorted((f"body-{i}", "abc"[i % 3], f"k-{i}") for i in range(12))
    assert contents("RdBatch") == sorted((f"body-{i}", "x", f"bk-{i}") for i in range(8))
    assert contents("RdDelay") == [("body-0", "d", "dk-0"), ("body-1", "d", "dk-1")]
    assert contents("RdTx") == [("tx-0", None, "txkey-0")]
    assert sorted(m[5] for m in before["RdT"][0]) == sorted(e["msgId"] for e in sent)
    status_before = admin_rows(rocketmq_dist, "topicStatus", "-n", s.namesrv, "-t", "RdT")
    # level 4 (30 s): most likely still in the schedule topic when serve stops; either way RocketMQ's
    # broker must end up serving it exactly once
    later = java.run("Produce", ns, "topic=RdLater", "count=1", "delay=4", "keys=lk")
    assert [e["status"] for e in later if e["event"] == "sent"] == ["SEND_OK"]
    assert s.stop() == 143  # 128 + SIGTERM: the store was closed cleanly first
    assert not (s.store / "abort").exists()

    serve_conf = read_settings_file(s.store.parent / f"{s.store.name}.conf")
    geometry = {k: str(serve_conf[k]) for k in GEOMETRY_KEYS}
    rmq = start_rocketmq(
        rocketmq_dist,
        tmp_path / "rocketmq",
        store=s.store,
        settings="".join(f"{k}={v}\n" for k, v in geometry.items()),
    )
    try:
        config = {
            r[0]: r[-1]
            for r in admin_rows(rocketmq_dist, "getBrokerConfig", "-n", rmq.namesrv, "-b", rmq.broker)
            if len(r) >= 3 and r[1] == "="
        }
        assert {k: config.get(k) for k in GEOMETRY_KEYS} == geometry
        assert config["storePathRootDir"] == str(s.store)

        for topic in TOPICS:
            assert consumed(java, rmq.namesrv, "rd_after", topic) == before[topic], topic
        assert admin_rows(rocketmq_dist, "topicStatus", "-n", rmq.namesrv, "-t", "RdT") == status_before

        for key, topic, origin in [
            ("k-3", "RdT", sent[3]),
            ("txkey-0", "RdTx", None),
            ("bk-5", "RdBatch", None),
            ("dk-1", "RdDelay", None),
        ]:
            rows = admin_rows(rocketmq_dist, "queryMsgByKey", "-n", rmq.namesrv, "-t", topic, "-k", key)
            found = [r for r in rows[1:] if len(r) == 3]
            expected = {m[5]: (m[0], m[1]) for m in before[topic][0]}
            assert found and all(expected[r[0]] == (int(r[1]), int(r[2])) for r in found), (key, rows)
            if origin is not None:
                assert found == [[origin["msgId"], str(origin["queueId"]), str(origin["queueOffset"])]]

        # the offsets rd_before committed through serve are RocketMQ's: it resumes at each queue's end
        for topic in TOPICS:
            events = java.run(
                "PullConsume", f"namesrv={rmq.namesrv}", "group=rd_before", f"topic={topic}", attempts=3
            )
            assert not [e for e in events if e["event"] == "consumed"], topic
            resumed = sorted((e["queueId"], e["next"]) for e in events if e["event"] == "queue")
            assert resumed == [(q, high) for q, _, high in before[topic][1]], topic

        # level 4 is 30 s after the send; RocketMQ's schedule service resumes from delayOffset.json
        wait_until(
            lambda: stored_count(rocketmq_dist, rmq.namesrv, "RdLater") >= 1,
            "the delivery of RdLater",
            timeout=400,
        )
        later_msgs, _ = consumed(java, rmq.namesrv, "rd_later", "RdLater")
        assert [m[2] for m in later_msgs] == ["body-0"]
    finally:
        rmq.stop()
