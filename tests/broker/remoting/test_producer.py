"""Producers over remoting: SEND_MESSAGE(_V2) and SEND_BATCH_MESSAGE as the Java client sends
them, checked against what the store then holds; END_TRANSACTION and the broker's
CHECK_TRANSACTION_STATE."""

from __future__ import annotations

import json
import time
import zlib
from typing import Any

import pytest

from rocketstore.broker import BrokerConfig
from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import SERIALIZE_JSON, SERIALIZE_ROCKETMQ, RemotingCommand
from rocketstore.broker.remoting.headers import SendMessageHeader
from rocketstore.codec.commitlog_record import decode_record
from rocketstore.codec.message_batch import BatchEntry, encode_batch_body
from rocketstore.codec.message_id import decode_offset_msg_id
from rocketstore.codec.properties import encode_properties

from ..conftest import SMALL
from .client import RawClient
from .conftest import Remoting, StartRemoting


def header(topic: str, props: dict[str, str], **changes: Any) -> SendMessageHeader:
    values: dict[str, Any] = dict(
        producer_group="pg",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=1_700_000_000_000,
        flag=0,
        properties=encode_properties(props),
        reconsume_times=0,
        unit_mode=False,
        max_reconsume_times=None,
        batch=False,
        broker_name="broker-a",
    )
    values.update(changes)
    return SendMessageHeader(**values)


def send(
    c: RawClient,
    topic: str,
    body: bytes,
    props: dict[str, str] | None = None,
    *,
    code: int = RequestCode.SEND_MESSAGE_V2,
    kind: int = SERIALIZE_JSON,
    **changes: Any,
) -> RemotingCommand:
    h = header(topic, props if props is not None else {"UNIQ_KEY": "U1", "WAIT": "true"}, **changes)
    return c.call(code, h.to_ext(v2=code != RequestCode.SEND_MESSAGE), body, serialize_type=kind)


def stored(r: Remoting, response: RemotingCommand) -> Any:
    _, _, offset = decode_offset_msg_id(response.ext_fields["msgId"])
    r.store.wait_dispatched()
    msg = r.store.look_message_by_offset(offset)
    assert msg is not None
    return msg


@pytest.mark.parametrize("kind", [SERIALIZE_JSON, SERIALIZE_ROCKETMQ])
@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2])
def test_send_stores_what_rocketmq_stores(start_remoting: StartRemoting, code: int, kind: int) -> None:
    r = start_remoting()
    props = {"UNIQ_KEY": "7F0000010001", "WAIT": "true", "TAGS": "TagA", "KEYS": "k1 k2", "color": "red"}
    with RawClient(r.port) as c:
        resp = send(c, "Orders", b"hello", props, code=code, kind=kind, queue_id=2, flag=5)
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.serialize_type == kind and resp.is_response
        ext = resp.ext_fields
        assert ext["queueId"] == "2" and ext["queueOffset"] == "0"
        assert ext["MSG_REGION"] == "DefaultRegion" and ext["TRACE_ON"] == "true"
        addr, port, _ = decode_offset_msg_id(ext["msgId"])
        assert (addr, port) == (bytes([127, 0, 0, 1]), r.port)  # the broker's reachable address
        local_port = c.sock.getsockname()[1]
        msg = stored(r, resp)
        assert (msg.topic, msg.queue_id, msg.queue_offset, msg.flag, msg.body) == (
            "Orders",
            2,
            0,
            5,
            b"hello",
        )
        assert msg.born_timestamp == 1_700_000_000_000
        assert msg.born_host == f"127.0.0.1:{local_port}"
        assert msg.store_host == r.address
        assert msg.tags == "TagA" and msg.keys == ["k1", "k2"] and msg.uniq_key == "7F0000010001"
        assert msg.properties["color"] == "red" and msg.properties["CLUSTER"] == "DefaultCluster"
        assert "WAIT" not in msg.properties
        assert r.store.query_message("Orders", "k2")[0].msg_id == msg.msg_id
        # the next one in that queue gets the next offset
        again = send(c, "Orders", b"again", props, code=code, kind=kind, queue_id=2)
        assert again.ext_fields["queueOffset"] == "1"


def test_topic_is_created_from_tbw102_with_the_client_queue_count(start_remoting: StartRemoting) -> None:
    r = start_remoting(store_config=SMALL.replace(default_topic_queue_nums=8))
    with RawClient(r.port) as c:
        assert send(c, "NewTopic", b"x", default_topic_queue_nums=3).code == 0
    config = r.store.topic_configs()["NewTopic"]
    assert (config.read_queues, config.write_queues, config.perm) == (3, 3, 6)
    with RawClient(r.namesrv_port) as ns:
        route = json.loads(ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NewTopic"}).body)
        assert route["queueDatas"][0]["writeQueueNums"] == 3


def test_refusals(start_remoting: StartRemoting) -> None:
    r = start_remoting(BrokerConfig(auto_create_topic=False, max_body_size=1000))
    r.store.create_topic("Known", 2)
    with RawClient(r.port) as c:
        missing = send(c, "Unknown", b"x")
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "not exist" in (missing.remark or "")
        assert send(c, "bad topic!", b"x").code == ResponseCode.SYSTEM_ERROR
        assert send(c, "SCHEDULE_TOPIC_XXXX", b"x").code == ResponseCode.NO_PERMISSION
        assert send(c, "RMQ_SYS_TRANS_HALF_TOPIC", b"x").code == ResponseCode.NO_PERMISSION
        bad_queue = send(c, "Known", b"x", queue_id=2)
        assert bad_queue.code == ResponseCode.SYSTEM_ERROR and "queueId[2] is illegal" in (
            bad_queue.remark or ""
        )
        assert send(c, "Known", b"x" * 1001).code == ResponseCode.MESSAGE_ILLEGAL
        no_topic = c.call(RequestCode.SEND_MESSAGE_V2, {"a": "pg"}, b"x")
        assert no_topic.code == ResponseCode.SYSTEM_ERROR and "is null" in (no_topic.remark or "")
        assert send(c, "Known", b"x" * 1000).code == ResponseCode.SUCCESS
    assert "Unknown" not in r.store.topic_configs()


def test_compressed_body_is_stored_as_sent_with_its_sysflag(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    raw = b"0123456789" * 1000
    packed = zlib.compress(raw, 5)
    with RawClient(r.port) as c:
        resp = send(c, "Zip", packed, sys_flag=0x301)
        assert resp.code == 0, resp.remark
        msg = stored(r, resp)
        assert msg.sys_flag & 0x701 == 0x301 and msg.body == packed
        # delayed: the delivered copy keeps the compression bits too
        delayed = send(c, "Zip", packed, {"UNIQ_KEY": "D1", "DELAY": "1"}, sys_flag=0x301)
        assert delayed.code == 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and r.store.max_offset_in_queue("Zip", 0) < 2:
        time.sleep(0.05)
    r.store.wait_dispatched()
    got = r.store.get_message("g", "Zip", 0, 1, 1).messages[0]
    assert got.uniq_key == "D1" and got.sys_flag & 0x701 == 0x301 and got.body == packed


def test_batch_is_one_append_with_its_offsets(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    entries = [
        BatchEntry(i, b"m%d" % i, encode_properties({"UNIQ_KEY": f"U{i}", "TAGS": "t"})) for i in range(5)
    ]
    with RawClient(r.port) as c:
        assert send(c, "Batched", b"first", queue_id=1).code == 0
        resp = send(
            c,
            "Batched",
            encode_batch_body(entries),
            {"WAIT": "true"},
            code=RequestCode.SEND_BATCH_MESSAGE,
            kind=SERIALIZE_ROCKETMQ,
            queue_id=1,
            batch=True,
        )
        assert resp.code == 0, resp.remark
        ids = resp.ext_fields["msgId"].split(",")
        assert len(ids) == 5 and resp.ext_fields["queueOffset"] == "1" and resp.ext_fields["queueId"] == "1"
        r.store.wait_dispatched()
        got = r.store.get_message("g", "Batched", 1, 1, 10).messages
        assert [m.body for m in got] == [b"m%d" % i for i in range(5)]
        assert [m.flag for m in got] == list(range(5))
        assert [m.uniq_key for m in got] == [f"U{i}" for i in range(5)]
        assert [m.msg_id for m in got] == ids
        assert all(m.properties["CLUSTER"] == "DefaultCluster" for m in got)
        # a damaged batch stores nothing
        before = r.store.max_offset_in_queue("Batched", 1)
        bad = send(
            c,
            "Batched",
            encode_batch_body(entries)[:-3],
            {"WAIT": "true"},
            code=RequestCode.SEND_BATCH_MESSAGE,
            queue_id=1,
            batch=True,
        )
        assert bad.code == ResponseCode.MESSAGE_ILLEGAL
        delayed = [BatchEntry(0, b"d", encode_properties({"UNIQ_KEY": "X", "DELAY": "2"}))]
        assert (
            send(
                c, "Batched", encode_batch_body(delayed), {}, code=RequestCode.SEND_BATCH_MESSAGE, batch=True
            ).code
            == ResponseCode.MESSAGE_ILLEGAL
        )
        r.store.wait_dispatched()
        assert r.store.max_offset_in_queue("Batched", 1) == before


def test_retry_past_its_max_goes_to_the_dlq(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    with RawClient(r.port) as c:
        retry = send(c, "%RETRY%cg", b"again", {"UNIQ_KEY": "R1"}, reconsume_times=1, max_reconsume_times=3)
        assert retry.code == 0
        assert stored(r, retry).topic == "%RETRY%cg"
        assert r.store.topic_configs()["%RETRY%cg"].write_queues == 1
        dead = send(c, "%RETRY%cg", b"dead", {"UNIQ_KEY": "R2"}, reconsume_times=3, max_reconsume_times=3)
        assert dead.code == 0
        msg = stored(r, dead)
        assert (msg.topic, msg.queue_id, msg.reconsume_times) == ("%DLQ%cg", 0, 3)


def test_sync_flush_answers_after_the_flush(start_remoting: StartRemoting) -> None:
    r = start_remoting(store_config=SMALL.replace(flush_disk_type="SYNC_FLUSH"))
    with RawClient(r.port) as c:
        for i in range(5):
            resp = send(c, "Durable", b"x" * 100, {"UNIQ_KEY": f"S{i}"})
            assert resp.code == 0
            # answered SUCCESS: the flushed end of the commitlog is past the message
            info = r.store.runtime_info()
            flushed = int(info["commitLogMaxOffset"]) - int(info["remainHowManyDataToFlush"])  # type: ignore[call-overload]
            offset = decode_offset_msg_id(resp.ext_fields["msgId"])[2]
            assert flushed >= offset + stored(r, resp).store_size


def transactional(
    c: RawClient, topic: str, uniq: str, group: str = "txg", body: bytes | None = None, sys_flag: int = 0x4
) -> RemotingCommand:
    props = {"UNIQ_KEY": uniq, "WAIT": "true", "TRAN_MSG": "true", "PGROUP": group}
    return send(c, topic, body or b"tx-" + uniq.encode(), props, producer_group=group, sys_flag=sys_flag)


def end(c: RawClient, resp: RemotingCommand, kind: int, group: str = "txg", from_check: bool = False) -> None:
    c.oneway(
        RequestCode.END_TRANSACTION,
        {
            "producerGroup": group,
            "tranStateTableOffset": resp.ext_fields["queueOffset"],
            "commitLogOffset": str(decode_offset_msg_id(resp.ext_fields["msgId"])[2]),
            "commitOrRollback": str(kind),
            "fromTransactionCheck": "true" if from_check else "false",
            "msgId": resp.ext_fields["msgId"],  # the offset id; RocketMQ's client sends the UNIQ_KEY
        },
    )


def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_transaction_commit_and_rollback(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("Tx", 1)
    with RawClient(r.port) as c:
        committed = transactional(c, "Tx", "C1")
        rolled = transactional(c, "Tx", "R1")
        packed = zlib.compress(b"z" * 5000)
        zipped = transactional(c, "Tx", "Z1", body=packed, sys_flag=0x305)  # compressed, zlib, prepared
        assert committed.code == 0 and rolled.code == 0 and zipped.code == 0
        half = stored(r, committed)
        assert half.topic == "RMQ_SYS_TRANS_HALF_TOPIC" and half.properties["REAL_TOPIC"] == "Tx"
        r.store.wait_dispatched()
        assert r.store.max_offset_in_queue("Tx", 0) == 0  # consumers see nothing yet
        end(c, committed, 8)
        end(c, rolled, 12)
        end(c, zipped, 8)
        wait_for(lambda: r.store.max_offset_in_queue("Tx", 0) == 2, "the commits")
        c.call(RequestCode.HEART_BEAT, body=json.dumps({"clientID": "x"}).encode())  # oneways handled
    r.store.wait_dispatched()
    msg, zmsg = r.store.get_message("g", "Tx", 0, 0, 10).messages
    assert msg.uniq_key == "C1" and msg.body == b"tx-C1" and msg.sys_flag & 0xC == 0x8
    assert "TRAN_MSG" not in msg.properties
    # the committed copy keeps the body's compression bits
    assert zmsg.uniq_key == "Z1" and zmsg.body == packed and zmsg.sys_flag & 0x70D == 0x309


def test_unknown_transactions_are_checked_on_a_producer_connection(start_remoting: StartRemoting) -> None:
    r = start_remoting(BrokerConfig(transaction_timeout_ms=0, transaction_check_interval_ms=200))
    r.store.create_topic("TxCheck", 1)
    heartbeat = {"clientID": "10.0.0.1@1", "producerDataSet": [{"groupName": "txg"}], "consumerDataSet": []}
    with RawClient(r.port) as c:
        assert c.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode()).code == 0
        resp = transactional(c, "TxCheck", "K1")
        end(c, resp, 0)  # unknown: left for the check
        check = c.server_request()
        assert check.code == RequestCode.CHECK_TRANSACTION_STATE and check.is_oneway
        ext = check.ext_fields
        assert ext["msgId"] == "K1" and ext["transactionId"] == "K1"
        assert ext["offsetMsgId"] == resp.ext_fields["msgId"]
        assert ext["tranStateTableOffset"] == resp.ext_fields["queueOffset"]
        rec = decode_record(check.body, 0)
        assert rec.topic == "TxCheck" and rec.queue_id == 0
        props = dict(p.split("\x01") for p in rec.properties.split("\x02"))
        assert props["PGROUP"] == "txg" and props["TRANSACTION_CHECK_TIMES"] == "1"
        assert check.body[rec.body_start : rec.body_start + rec.body_len] == b"tx-K1"
        # the producer answers as the Java client does: END_TRANSACTION from the check
        c.oneway(
            RequestCode.END_TRANSACTION,
            {
                "producerGroup": "txg",
                "tranStateTableOffset": ext["tranStateTableOffset"],
                "commitLogOffset": ext["commitLogOffset"],
                "commitOrRollback": "8",
                "fromTransactionCheck": "true",
                "msgId": "K1",
            },
        )
        wait_for(lambda: r.store.max_offset_in_queue("TxCheck", 0) == 1, "the checked commit")


def test_end_transaction_that_matches_no_half_is_refused(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("Tx", 1)
    with RawClient(r.port) as c:
        resp = transactional(c, "Tx", "W1")
        fields = {
            "producerGroup": "other-group",
            "tranStateTableOffset": resp.ext_fields["queueOffset"],
            "commitLogOffset": str(decode_offset_msg_id(resp.ext_fields["msgId"])[2]),
            "commitOrRollback": "8",
            "fromTransactionCheck": "false",
            "msgId": "W1",
        }
        wrong = c.call(RequestCode.END_TRANSACTION, fields)
        assert wrong.code == ResponseCode.SYSTEM_ERROR and "producer group" in (wrong.remark or "")
        nothing = c.call(
            RequestCode.END_TRANSACTION, {**fields, "producerGroup": "txg", "commitLogOffset": "1"}
        )
        assert nothing.code == ResponseCode.SYSTEM_ERROR
        assert c.call(RequestCode.END_TRANSACTION, {**fields, "producerGroup": "txg"}).code == 0
        again = c.call(RequestCode.END_TRANSACTION, {**fields, "producerGroup": "txg"})
        assert again.code == ResponseCode.SYSTEM_ERROR  # already ended


def test_sync_master_without_a_slave_answers_slave_not_available_with_the_offsets(
    start_remoting: StartRemoting,
) -> None:
    r = start_remoting(store_config=SMALL.replace(broker_role="SYNC_MASTER", ha_listen_port=0))
    with RawClient(r.port) as c:
        resp = send(c, "Replicated", b"x", queue_id=0)
        # as RocketMQ answers: stored here, not on a slave; the client parses the header still
        assert resp.code == ResponseCode.SLAVE_NOT_AVAILABLE
        assert resp.ext_fields["queueOffset"] == "0" and resp.ext_fields["queueId"] == "0"
        assert stored(r, resp).body == b"x"
