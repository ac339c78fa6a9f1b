"""Sends over remoting that are refused (issue 29, item 5): the broker's own topics in any letter
case, and refusals that leave nothing behind: a refused send to a topic that does not exist
creates no topic (refuse first, create after)."""

from __future__ import annotations

import struct
from typing import Any

from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.transactions import HALF_TOPIC
from rocketstore.codec.message_batch import BatchEntry, encode_batch_body
from rocketstore.codec.properties import encode_properties

from .client import RawClient
from .conftest import StartRemoting
from .test_producer import send, transactional

UNIQ = {"UNIQ_KEY": "U1", "WAIT": "true"}
ENTRIES = [BatchEntry(0, b"m%d" % i, encode_properties({"UNIQ_KEY": f"B{i}"})) for i in range(3)]


def lying_lengths() -> bytes:
    """A batch whose second message's total length says more than the body holds."""
    body = bytearray(encode_batch_body(ENTRIES))
    first = struct.unpack_from(">i", body, 0)[0]
    struct.pack_into(">i", body, first, 10_000)
    return bytes(body)


SYSTEM_NAMES = [
    "rmq_sys_ROCKETSTORE_POP_LOG",
    "rmq_sys_anything",
    "Rmq_Sys_X",
    "RMQ_SYS_TRACE_TOPIC",
    "rMq_sYs_",
]


def test_the_brokers_own_topics_are_refused_in_any_letter_case(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    end = r.store.max_phy_offset()
    with RawClient(r.port) as c:
        for topic in SYSTEM_NAMES:
            for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2):
                resp = send(c, topic, b"x", UNIQ, code=code)
                assert resp.code == ResponseCode.NO_PERMISSION, resp.remark
                assert resp.remark == f"Sending message to topic[{topic}] is forbidden."
            body = encode_batch_body(ENTRIES)
            batch = send(c, topic, body, {}, code=RequestCode.SEND_BATCH_MESSAGE, batch=True)
            assert batch.code == ResponseCode.NO_PERMISSION
            assert transactional(c, topic, "T1").code == ResponseCode.NO_PERMISSION
            # nor may an admin create one
            create = {"topic": topic, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}
            created = c.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create)
            assert created.code == ResponseCode.SYSTEM_ERROR and "conflict with system topic" in (
                created.remark or ""
            )
        r.store.wait_dispatched()
        assert r.store.max_phy_offset() == end
        # the broker's own use of its system topics goes on: a half goes to RMQ_SYS_TRANS_HALF_TOPIC
        assert transactional(c, "Orders", "T2").code == ResponseCode.SUCCESS
    assert not set(SYSTEM_NAMES) & set(r.store.topic_configs())
    r.store.wait_dispatched()
    assert r.store.max_offset_in_queue(HALF_TOPIC, 0) == 1


def plain(c: RawClient, topic: str, props: dict[str, str] | None = None, **changes: Any) -> Any:
    return send(c, topic, b"x", {**UNIQ, **(props or {})}, **changes)


def batch(c: RawClient, topic: str, body: bytes, **changes: Any) -> Any:
    return send(c, topic, body, {}, code=RequestCode.SEND_BATCH_MESSAGE, batch=True, **changes)


BIG_PROPERTIES = {"big": "v" * 40_000}
REFUSED_SENDS = {
    "queue id out of range": (lambda c, t: plain(c, t, queue_id=4), ResponseCode.SYSTEM_ERROR, "queueId[4]"),
    "DELAY abc": (lambda c, t: plain(c, t, {"DELAY": "abc"}), ResponseCode.MESSAGE_ILLEGAL, "DELAY 'abc'"),
    "40 KB of properties": (
        lambda c, t: plain(c, t, BIG_PROPERTIES),
        ResponseCode.MESSAGE_ILLEGAL,
        "properties",
    ),
    "a born timestamp past a long": (
        lambda c, t: plain(c, t, born_timestamp=1 << 64),
        ResponseCode.MESSAGE_ILLEGAL,
        "born",
    ),
    "a batch with lying lengths": (
        lambda c, t: batch(c, t, lying_lengths()),
        ResponseCode.MESSAGE_ILLEGAL,
        "batch",
    ),
    "a batch cut short": (
        lambda c, t: batch(c, t, encode_batch_body(ENTRIES)[:-3]),
        ResponseCode.MESSAGE_ILLEGAL,
        "batch",
    ),
    "a batch with 40 KB of properties": (
        lambda c, t: send(
            c, t, encode_batch_body(ENTRIES), BIG_PROPERTIES, code=RequestCode.SEND_BATCH_MESSAGE, batch=True
        ),
        ResponseCode.MESSAGE_ILLEGAL,
        "propert",
    ),
    "a transaction's half with 40 KB of properties": (
        lambda c, t: send(
            c,
            t,
            b"x",
            {**UNIQ, "TRAN_MSG": "true", "PGROUP": "txg", **BIG_PROPERTIES},
            producer_group="txg",
            sys_flag=0x4,
        ),
        ResponseCode.MESSAGE_ILLEGAL,
        "properties",
    ),
}


def test_a_refused_send_creates_no_topic(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    end = r.store.max_phy_offset()
    with RawClient(r.port) as c:
        for i, (case, (attempt, code, remark)) in enumerate(REFUSED_SENDS.items()):
            resp = attempt(c, f"Fresh{i}")
            assert resp.code == code and remark in (resp.remark or ""), (case, resp.code, resp.remark)
            assert f"Fresh{i}" not in r.store.topic_configs(), case
        # a retry past its max bound for a dead-letter topic: neither topic is created
        to_dlq = plain(c, "%RETRY%cg", BIG_PROPERTIES, reconsume_times=16)
        assert to_dlq.code == ResponseCode.MESSAGE_ILLEGAL
        assert not {"%RETRY%cg", "%DLQ%cg"} & set(r.store.topic_configs())
        r.store.wait_dispatched()
        assert r.store.max_phy_offset() == end  # nothing stored
        # the same names with sends that are fine: created then, with the client's queue count
        assert plain(c, "Fresh0", queue_id=3).code == ResponseCode.SUCCESS
        assert batch(c, "Fresh4", encode_batch_body(ENTRIES)).code == ResponseCode.SUCCESS
        assert plain(c, "%RETRY%cg", reconsume_times=16).code == ResponseCode.SUCCESS
    configs = r.store.topic_configs()
    assert (configs["Fresh0"].read_queues, configs["Fresh0"].write_queues) == (4, 4)
    assert {"Fresh4", "%RETRY%cg", "%DLQ%cg"} <= set(configs)
