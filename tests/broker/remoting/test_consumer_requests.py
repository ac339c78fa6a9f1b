"""The consumer side over raw remoting frames: PULL_MESSAGE (records as stored, tag filter, offsets,
commit flag, long polling woken by a put), heartbeats and the consumer list with
NOTIFY_CONSUMER_IDS_CHANGED, committed offsets, queue locks and CONSUMER_SEND_MSG_BACK."""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

import pytest

from rocketstore import Message
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand
from rocketstore.codec.commitlog_record import decode_record

from .client import RawClient
from .conftest import Remoting, StartRemoting


def pull_ext(
    topic: str, offset: int, *, sys_flag: int = 0x4, sub: str = "*", suspend: int = 0, **more: Any
) -> dict[str, str]:
    ext = {
        "consumerGroup": "g",
        "topic": topic,
        "queueId": "0",
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": str(sys_flag),
        "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend),
        "subscription": sub,
        "subVersion": "0",
        "expressionType": "TAG",
    }
    ext.update({k: str(v) for k, v in more.items()})
    return ext


def bodies(body: bytes) -> list[tuple[int, bytes]]:
    """(queue offset, body) of each record of a pull response, decoded back to back."""
    out, pos = [], 0
    while pos < len(body):
        rec = decode_record(body, pos)
        out.append((rec.queue_offset, bytes(body[rec.body_start : rec.body_start + rec.body_len])))
        pos += rec.total_size
    return out


def put(r: Remoting, topic: str, *msgs: tuple[bytes, str | None]) -> None:
    for body, tag in msgs:
        assert r.store.put_message(Message(topic, body, tags=tag, queue_id=0)).ok
    r.store.wait_dispatched()


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_pull_returns_the_stored_records_filtered_by_tag(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("T", 1)
    put(r, "T", (b"m0", "a"), (b"m1", "b"), (b"m2", "a"))
    with RawClient(r.port) as c:
        resp = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 0))
        assert resp.code == ResponseCode.SUCCESS
        assert (resp.ext_fields["nextBeginOffset"], resp.ext_fields["minOffset"]) == ("3", "0")
        assert (resp.ext_fields["maxOffset"], resp.ext_fields["suggestWhichBrokerId"]) == ("3", "0")
        # byte for byte what the commitlog holds
        stored = r.store.get_message("g", "T", 0, 0, 32).messages
        assert resp.body == b"".join(bytes(m.record_view) for m in stored)
        assert bodies(resp.body) == [(0, b"m0"), (1, b"m1"), (2, b"m2")]

        tagged = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 0, sub="a || c"))
        assert bodies(tagged.body) == [(0, b"m0"), (2, b"m2")]
        none = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 0, sub="zz"))
        assert (none.code, none.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_RETRY_IMMEDIATELY, "3")

        # past the end: moved to the queue's min while it is 0 (RocketMQ's nextOffsetCorrection)
        moved = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 7))
        assert (moved.code, moved.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "0")
        at_end = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 3))
        assert (at_end.code, at_end.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_NOT_FOUND, "3")
        missing = c.call(RequestCode.PULL_MESSAGE, pull_ext("Nope", 0))
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST

        # the commit flag stores the group's offset
        c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 3, sys_flag=0x5, commitOffset=2))
        assert r.store.query_offset("g", "T", 0) == 2


def test_a_pulls_subversion_is_a_java_long_or_the_pull_is_refused(
    start_remoting: StartRemoting, caplog: pytest.LogCaptureFixture
) -> None:
    """As Java's header decode: a subVersion that is not a long refuses the pull naming it (and
    is no handler failure to log); absent (in the binary header, also empty), it is 0; '+5' is 5."""
    r = start_remoting()
    r.store.create_topic("T", 1)
    put(r, "T", (b"m0", None))
    with RawClient(r.port) as c, caplog.at_level(logging.ERROR):
        for kind in (0, 1):
            for bad in ("--3", "²", "x", "9" * 20, "1" * 5000, *([""] if kind == 0 else [])):
                resp = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 0, subVersion=bad), serialize_type=kind)
                assert resp.code == ResponseCode.SYSTEM_ERROR, (bad, kind)
                assert "subVersion" in (resp.remark or ""), (bad, resp.remark)
            for fine in ("+5", "-0", "007"):
                resp = c.call(
                    RequestCode.PULL_MESSAGE, pull_ext("T", 0, subVersion=fine), serialize_type=kind
                )
                assert resp.code == ResponseCode.SUCCESS and bodies(resp.body) == [(0, b"m0")], fine
            absent = {k: v for k, v in pull_ext("T", 0).items() if k != "subVersion"}
            assert c.call(RequestCode.PULL_MESSAGE, absent, serialize_type=kind).code == ResponseCode.SUCCESS
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]


def test_a_suspended_pull_is_answered_when_a_message_arrives(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("T", 1)
    pull = r.broker.remoting.broker._handlers[RequestCode.PULL_MESSAGE].__self__  # type: ignore[union-attr, attr-defined]
    with RawClient(r.port) as c:
        opaque = c.send(
            RemotingCommand(
                code=RequestCode.PULL_MESSAGE, ext_fields=pull_ext("T", 0, sys_flag=0x6, suspend=20000)
            )
        )
        wait_for(lambda: pull.suspended == 1, "the pull to be parked")
        put(r, "T", (b"late", None))
        resp = c.response_to(opaque)
        assert resp.code == ResponseCode.SUCCESS and bodies(resp.body) == [(0, b"late")]
        assert pull.suspended == 0

        # nothing comes: answered NOT_FOUND once its suspend time is over, with all four offsets
        quiet = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 1, sys_flag=0x6, suspend=300))
        assert quiet.code == ResponseCode.PULL_NOT_FOUND
        assert {k: quiet.ext_fields[k] for k in ("nextBeginOffset", "minOffset", "maxOffset")} == {
            "nextBeginOffset": "1",
            "minOffset": "0",
            "maxOffset": "1",
        }


def heartbeat(
    client_id: str,
    group: str = "cg",
    sub: str = "*",
    *,
    consumers: dict[str, list[str]] | None = None,
    producers: tuple[str, ...] = (),
) -> bytes:
    """A Java client's HeartbeatData: consumer groups (``consumers``: group -> topics; by default
    ``group`` on topic T), each topic subscribed with ``sub``, and ``producers`` with
    CLIENT_INNER_PRODUCER, which every client lists."""
    return json.dumps(
        {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "consumeType": "CONSUME_PASSIVELY",
                    "groupName": name,
                    "messageModel": "CLUSTERING",
                    "subscriptionDataSet": [
                        {
                            "expressionType": "TAG",
                            "subString": sub,
                            "subVersion": 1,
                            "topic": topic,
                            "tagsSet": [],
                        }
                        for topic in topics
                    ],
                    "unitMode": False,
                }
                for name, topics in ({group: ["T"]} if consumers is None else consumers).items()
            ],
            "producerDataSet": [{"groupName": g} for g in (*producers, "CLIENT_INNER_PRODUCER")],
        }
    ).encode()


def test_consumer_group_membership_offsets_and_locks(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("T", 2)
    with RawClient(r.port) as a, RawClient(r.port) as b:
        assert a.call(RequestCode.HEART_BEAT, body=heartbeat("A")).code == ResponseCode.SUCCESS
        assert "%RETRY%cg" in r.store.topic_configs()  # routable before the first retry
        listed = a.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"})
        assert json.loads(listed.body) == {"consumerIdList": ["A"]}
        assert b.call(RequestCode.HEART_BEAT, body=heartbeat("B")).code == ResponseCode.SUCCESS
        notice = a.server_request()
        assert (notice.code, notice.ext_fields, notice.is_oneway) == (
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
            {"consumerGroup": "cg"},
            True,
        )
        listed = a.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"})
        assert sorted(json.loads(listed.body)["consumerIdList"]) == ["A", "B"]
        nobody = a.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "none"})
        assert nobody.code == ResponseCode.SYSTEM_ERROR

        # a pull without its own subscription uses the group's (from the heartbeat)
        put(r, "T", (b"x", "t1"))
        got = a.call(RequestCode.PULL_MESSAGE, {**pull_ext("T", 0, sys_flag=0), "consumerGroup": "cg"})
        assert got.code == ResponseCode.SUCCESS
        unknown = a.call(
            RequestCode.PULL_MESSAGE, {**pull_ext("T", 0, sys_flag=0), "consumerGroup": "nobody"}
        )
        assert unknown.code == ResponseCode.SUBSCRIPTION_NOT_EXIST

        # offsets: none committed yet -> 0 on a young queue; then what was committed
        ext = {"consumerGroup": "cg", "topic": "T", "queueId": "0"}
        assert a.call(RequestCode.QUERY_CONSUMER_OFFSET, ext).ext_fields["offset"] == "0"
        a.oneway(RequestCode.UPDATE_CONSUMER_OFFSET, {**ext, "commitOffset": "1"})
        wait_for(lambda: r.store.query_offset("cg", "T", 0) == 1, "the oneway offset commit")
        assert a.call(RequestCode.QUERY_CONSUMER_OFFSET, ext).ext_fields["offset"] == "1"

        # orderly locks: A holds queue 0, B gets only queue 1
        def lock(c: RawClient, client: str, *queues: int) -> list[int]:
            body = {
                "clientId": client,
                "consumerGroup": "cg",
                "mqSet": [{"brokerName": "broker-a", "queueId": q, "topic": "T"} for q in queues],
            }
            resp = c.call(RequestCode.LOCK_BATCH_MQ, body=json.dumps(body).encode())
            return sorted(mq["queueId"] for mq in json.loads(resp.body)["lockOKMQSet"])

        assert lock(a, "A", 0) == [0]
        assert lock(b, "B", 0, 1) == [1]
        unlock = {
            "clientId": "A",
            "consumerGroup": "cg",
            "mqSet": [{"brokerName": "broker-a", "queueId": 0, "topic": "T"}],
        }
        assert (
            a.call(RequestCode.UNLOCK_BATCH_MQ, body=json.dumps(unlock).encode()).code == ResponseCode.SUCCESS
        )
        assert lock(b, "B", 0, 1) == [0, 1]

    # both connections closed: the group is gone
    with RawClient(r.port) as c:
        wait_for(
            lambda: (
                c.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"}).code
                == ResponseCode.SYSTEM_ERROR
            ),
            "the group to be empty",
        )


def test_a_closed_member_makes_the_others_rebalance(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("T", 1)
    with RawClient(r.port) as a:
        a.call(RequestCode.HEART_BEAT, body=heartbeat("A"))
        b = RawClient(r.port)
        b.call(RequestCode.HEART_BEAT, body=heartbeat("B"))
        assert a.server_request().code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED  # B joined
        b.close()
        assert a.server_request().code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED  # B left
        listed = a.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"})
        assert json.loads(listed.body) == {"consumerIdList": ["A"]}


def test_send_back_stores_the_retry_then_the_dead_letter(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("T", 1)
    res = r.store.put_message(Message("T", b"bad", tags="t", queue_id=0))
    r.store.wait_dispatched()
    with RawClient(r.port) as c:
        ext = {
            "offset": str(res.physical_offset),
            "group": "cg",
            "delayLevel": "0",
            "maxReconsumeTimes": "16",
        }
        assert c.call(RequestCode.CONSUMER_SEND_MSG_BACK, ext).code == ResponseCode.SUCCESS
        # delayed by level 3: waiting in the schedule topic, bound for %RETRY%cg
        r.store.wait_dispatched()
        assert r.store.max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 2) == 1
        assert "%RETRY%cg" in r.store.topic_configs()
        dead = c.call(RequestCode.CONSUMER_SEND_MSG_BACK, {**ext, "delayLevel": "-1"})
        assert dead.code == ResponseCode.SUCCESS
        r.store.wait_dispatched()
        [msg] = r.store.get_message("x", "%DLQ%cg", 0, 0, 32).messages
        assert (msg.body, msg.tags, msg.reconsume_times) == (b"bad", "t", 1)
        assert msg.properties["RETRY_TOPIC"] == "T"
        nowhere = c.call(RequestCode.CONSUMER_SEND_MSG_BACK, {**ext, "offset": "999999"})
        assert nowhere.code == ResponseCode.SYSTEM_ERROR


def test_the_broker_bounds_how_long_a_pull_stays_parked(start_remoting: StartRemoting) -> None:
    """A pull asking for 20 s is parked at most the broker's long_polling_max_ms (here 0.3 s):
    answered well inside this client's 10 s socket timeout."""
    r = start_remoting(long_polling_min_ms=100, long_polling_max_ms=300)
    r.store.create_topic("T", 1)
    with RawClient(r.port, timeout=10) as c:
        resp = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 0, sys_flag=0x6, suspend=20000))
        assert resp.code == ResponseCode.PULL_NOT_FOUND


def test_a_heartbeat_may_name_a_bounded_number_of_groups_and_topics(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    too_many_groups = json.loads(heartbeat("A"))
    too_many_groups["consumerDataSet"] = too_many_groups["consumerDataSet"] * 1025
    too_many_topics = json.loads(heartbeat("A"))
    too_many_topics["consumerDataSet"][0]["subscriptionDataSet"] *= 1025
    with RawClient(r.port) as c:
        for body in (too_many_groups, too_many_topics):
            resp = c.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode())
            assert resp.code == ResponseCode.SYSTEM_ERROR and "at most 1024" in (resp.remark or "")
        assert (
            c.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "cg"}).code
            == ResponseCode.SYSTEM_ERROR
        )


def test_consumer_running_info_is_asked_of_the_client_and_relayed(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    with RawClient(r.port) as consumer, RawClient(r.port) as admin:
        consumer.call(RequestCode.HEART_BEAT, body=heartbeat("A"))
        ext = {"consumerGroup": "cg", "clientId": "A", "jstackEnable": "false"}
        opaque = admin.send(RemotingCommand(code=RequestCode.GET_CONSUMER_RUNNING_INFO, ext_fields=dict(ext)))
        asked = consumer.server_request()
        while asked.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:  # its own joining, first
            asked = consumer.server_request()
        assert (asked.code, asked.ext_fields, asked.is_oneway) == (
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            ext,
            False,
        )
        consumer.send(RemotingCommand(code=0, opaque=asked.opaque, flag=1, body=b'{"properties":{}}'))
        relayed = admin.response_to(opaque)
        assert (relayed.code, relayed.body) == (ResponseCode.SUCCESS, b'{"properties":{}}')
        gone = admin.call(RequestCode.GET_CONSUMER_RUNNING_INFO, {**ext, "clientId": "B"})
        assert gone.code == ResponseCode.SYSTEM_ERROR and "not online" in (gone.remark or "")


def test_admin_answers_runtime_info_config_and_topic_stats(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("T", 2)
    put(r, "T", (b"a", None), (b"b", None))
    with RawClient(r.port) as c:
        table = json.loads(c.call(RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]
        assert (table["brokerVersionDesc"], table["brokerVersion"]) == ("V4_9_8", "409")
        assert re.fullmatch(r"\[ \d+ days, \d+ hours, \d+ minutes, \d+ seconds \]", table["runtime"])
        (
            float(table["putTps"].split(" ")[0]),
            float(table["commitLogDiskRatio"]),
            int(table["earliestMessageTimeStamp"]),
        )
        config = c.call(RequestCode.GET_BROKER_CONFIG)
        assert "brokerName=broker-a\n" in config.body.decode() and "version" in config.ext_fields
        stats = json.loads(c.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "T"}).body)["offsetTable"]
        queue0 = stats[
            json.dumps({"brokerName": "broker-a", "queueId": 0, "topic": "T"}, separators=(",", ":"))
        ]
        assert (queue0["minOffset"], queue0["maxOffset"]) == (0, 2) and queue0["lastUpdateTimestamp"] > 0
        assert (
            c.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Nope"}).code == ResponseCode.TOPIC_NOT_EXIST
        )


def test_a_slave_does_not_take_a_pulls_commit_offset(start_remoting: StartRemoting) -> None:
    # RocketMQ's PullMessageProcessor stores a pull's commit offset only on a master: a slave's
    # offsets come from its master
    from ..conftest import SMALL

    r = start_remoting(store_config=SMALL.replace(broker_role="SLAVE", ha_master_address="127.0.0.1:9"))
    r.store.create_topic("T", 1)
    with RawClient(r.port) as c:
        # 0: an offset a master takes for this empty queue
        resp = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 0, sys_flag=0x5, commitOffset=0))
        assert resp.code == ResponseCode.PULL_NOT_FOUND
    assert r.store.query_offset("g", "T", 0) == -1
