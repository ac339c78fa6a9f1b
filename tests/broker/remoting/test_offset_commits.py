"""Offsets and queue ids a client gives over remoting (issue 29, items 1 and 4): a commit is
stored only for a topic that exists, one of its queues, and an offset between 0 and the queue's
max offset; anything else is refused, naming the value, and nothing is stored. A store whose
offsets file holds values no client can now store still serves."""

from __future__ import annotations

import json
from pathlib import Path

from rocketstore import Message, MessageStore
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.stats_items import GROUP_GET_NUMS

from ..conftest import SMALL
from .client import RawClient
from .conftest import Remoting, StartRemoting
from .test_consumer_requests import pull_ext

BIG = str(1 << 64)
LONG_MAX = str((1 << 63) - 1)


def served_topic(start_remoting: StartRemoting) -> Remoting:
    """A broker with topic T of 2 queues, 3 messages in queue 0."""
    r = start_remoting()
    r.store.create_topic("T", 2)
    for i in range(3):
        assert r.store.put_message(Message("T", b"m%d" % i, queue_id=0)).ok
    r.store.wait_dispatched()
    return r


def update(c: RawClient, **fields: str) -> tuple[int, str]:
    ext = {"consumerGroup": "g", "topic": "T", "queueId": "0", "commitOffset": "1", **fields}
    resp = c.call(RequestCode.UPDATE_CONSUMER_OFFSET, ext)
    return resp.code, resp.remark or ""


BAD_UPDATES = [
    ({"commitOffset": BIG}, ResponseCode.SYSTEM_ERROR, f"commitOffset is '{BIG}', not a Java long"),
    ({"commitOffset": "-1"}, ResponseCode.SYSTEM_ERROR, "commitOffset -1 is out of"),
    ({"commitOffset": "abc"}, ResponseCode.SYSTEM_ERROR, "commitOffset is 'abc', not a Java long"),
    ({"commitOffset": "1e3"}, ResponseCode.SYSTEM_ERROR, "commitOffset is '1e3', not a Java long"),
    ({"commitOffset": "4"}, ResponseCode.SYSTEM_ERROR, "commitOffset 4 is out of topic[T] queueId[0]'s"),
    ({"commitOffset": LONG_MAX}, ResponseCode.SYSTEM_ERROR, f"commitOffset {LONG_MAX} is out of"),
    ({"queueId": BIG}, ResponseCode.SYSTEM_ERROR, f"queueId is '{BIG}', not a Java int"),
    ({"queueId": "2147483648"}, ResponseCode.SYSTEM_ERROR, "not a Java int"),
    ({"queueId": "-1"}, ResponseCode.SYSTEM_ERROR, "queueId[-1] is illegal"),
    ({"queueId": "2"}, ResponseCode.SYSTEM_ERROR, "queueId[2] is illegal, topic:[T] has 2 queues"),
    ({"queueId": "x"}, ResponseCode.SYSTEM_ERROR, "queueId is 'x', not a Java int"),
    ({"topic": "Nope"}, ResponseCode.TOPIC_NOT_EXIST, "topic[Nope] not exist"),
    ({"topic": "../x"}, ResponseCode.TOPIC_NOT_EXIST, "not exist"),
    ({"consumerGroup": "a@b"}, ResponseCode.SYSTEM_ERROR, "group[a@b] is not valid"),
    ({"consumerGroup": "x" * 121}, ResponseCode.SYSTEM_ERROR, "too long for a consumer group"),
]


def test_update_consumer_offset_refuses_bad_values_and_stores_nothing(start_remoting: StartRemoting) -> None:
    r = served_topic(start_remoting)
    with RawClient(r.port) as c:
        for fields, code, remark in BAD_UPDATES:
            got = update(c, **fields)
            assert got[0] == code and remark in got[1], (fields, got)
            oneway = {"topic": "T", "queueId": "0", "commitOffset": "1", "consumerGroup": "oneway", **fields}
            c.oneway(RequestCode.UPDATE_CONSUMER_OFFSET, oneway)
        # the queue's own range, both ends, is taken (after the oneways: one connection, in order)
        assert update(c, commitOffset="3") == (ResponseCode.SUCCESS, "")
        assert update(c, queueId="1", commitOffset="0") == (ResponseCode.SUCCESS, "")
    assert r.store.consumer_offsets() == {("T", "g"): {0: 3, 1: 0}}


def test_a_pulls_commit_offset_is_stored_only_in_range(start_remoting: StartRemoting) -> None:
    r = served_topic(start_remoting)
    with RawClient(r.port) as c:
        # not a Java long: the pull is refused, naming the field (as Java's broker fails its header)
        bad = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 0, sys_flag=0x5, commitOffset=BIG))
        assert bad.code == ResponseCode.SYSTEM_ERROR and "commitOffset" in (bad.remark or "")
        bad_queue = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 0, sys_flag=0x5, queueId=BIG))
        assert bad_queue.code == ResponseCode.SYSTEM_ERROR and "queueId" in (bad_queue.remark or "")
        # a long past the queue's end, or negative: the pull is answered, the offset not stored
        for commit in (LONG_MAX, "4", "-5", str(-(1 << 63))):
            resp = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 0, sys_flag=0x5, commitOffset=commit))
            assert resp.code == ResponseCode.SUCCESS and resp.ext_fields["maxOffset"] == "3"
            assert r.store.consumer_offsets() == {}
        # pulling past the queue's end with an offset past it too: corrected (RocketMQ: to the
        # min offset while it is 0), not stored
        moved = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 9, sys_flag=0x5, commitOffset=9))
        assert (moved.code, moved.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "0")
        assert r.store.consumer_offsets() == {}
        for offset in (LONG_MAX, str(-(1 << 63)), "-1"):  # the read offset, at a long's ends
            resp = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", offset))
            assert resp.code == ResponseCode.PULL_OFFSET_MOVED, (offset, resp.remark)
        ok = c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 3, sys_flag=0x5, commitOffset=3))
        assert ok.code == ResponseCode.PULL_NOT_FOUND
    assert r.store.consumer_offsets() == {("T", "g"): {0: 3}}


def test_group_names_are_checked_by_pulls_and_offset_requests_as_by_heartbeats(
    start_remoting: StartRemoting,
) -> None:
    r = served_topic(start_remoting)
    with RawClient(r.port) as c:
        for bad in ("../x", "a@b", "x" * 100_000, "x" * 121):
            remark = "too long" if len(bad) == 121 else "] is not valid"
            for code, ext in (
                (RequestCode.PULL_MESSAGE, pull_ext("T", 0, consumerGroup=bad)),
                (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": bad, "topic": "T", "queueId": "0"}),
                (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"group": bad, "topic": "T", "timestamp": "0"}),
            ):
                resp = c.call(code, ext)
                assert resp.code == ResponseCode.SYSTEM_ERROR and remark in (resp.remark or ""), (code, bad)
                assert len(resp.remark or "") < 400  # the name is not sent back whole
        assert c.call(RequestCode.PULL_MESSAGE, pull_ext("T", 0)).code == ResponseCode.SUCCESS
    # nothing counted for the refused names: a client cannot fill the stats with its own keys
    stats = r.broker.metrics.stats
    assert stats.counted(GROUP_GET_NUMS, "T@g") == (3, 1)
    assert stats.counted(GROUP_GET_NUMS, "T@../x") is None


def test_queue_ids_past_a_java_int_are_refused_by_every_offset_request(start_remoting: StartRemoting) -> None:
    r = served_topic(start_remoting)
    ext = {"consumerGroup": "g", "topic": "T", "timestamp": "0"}
    with RawClient(r.port) as c:
        for code in (
            RequestCode.QUERY_CONSUMER_OFFSET,
            RequestCode.GET_MAX_OFFSET,
            RequestCode.GET_MIN_OFFSET,
            RequestCode.GET_EARLIEST_MSG_STORETIME,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        ):
            for queue_id in (BIG, "9" * 400, "0x1"):
                resp = c.call(code, {**ext, "queueId": queue_id})
                assert resp.code == ResponseCode.SYSTEM_ERROR and "not a Java int" in (resp.remark or ""), (
                    code
                )
            assert c.call(code, {**ext, "queueId": "0"}).code == ResponseCode.SUCCESS, code


def test_a_broker_serves_a_store_whose_offset_file_holds_values_no_client_can_store(
    start_remoting: StartRemoting, tmp_path: Path
) -> None:
    root = tmp_path / "store"  # the fixture's store
    with MessageStore.open(root, SMALL) as store:
        store.create_topic("T", 2)
        assert store.put_message(Message("T", b"x", queue_id=0)).ok
    (root / "config" / "consumerOffset.json").write_text(
        json.dumps(
            {
                "offsetTable": {
                    "T@g": {"0": 1, "1": 1 << 64},
                    "T@h": {BIG: 1, "0": "garbage", "1": -(1 << 64)},
                    "nonsense": [1],
                }
            }
        ),
        "utf-8",
    )
    r = start_remoting()
    assert r.store.consumer_offsets() == {("T", "g"): {0: 1}}
    with RawClient(r.port) as c:
        resp = c.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T", "queueId": "0"})
        assert (resp.code, resp.ext_fields["offset"]) == (ResponseCode.SUCCESS, "1")
        assert update(c, consumerGroup="h", commitOffset="1") == (ResponseCode.SUCCESS, "")
    assert r.store.consumer_offsets() == {("T", "g"): {0: 1}, ("T", "h"): {0: 1}}
