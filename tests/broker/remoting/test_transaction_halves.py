"""END_TRANSACTION over remoting ends only a real half (issue 29, item 3): the record the half
topic's queue points at, with the request's producer group and message id. A consistent half
record planted inside another message's body is refused, and nothing reaches its topic."""

from __future__ import annotations

from typing import Any

from rocketstore.broker.remoting.codes import RequestCode, ResponseCode
from rocketstore.broker.remoting.command import RemotingCommand, encode_command
from rocketstore.broker.transactions import HALF_TOPIC
from rocketstore.codec.commitlog_record import decode_record, encode_message
from rocketstore.codec.message_id import decode_offset_msg_id
from rocketstore.codec.properties import encode_properties
from rocketstore.store import MessageStore

from .client import RawClient
from .conftest import Remoting, StartRemoting
from .test_consumer_requests import pull_ext
from .test_producer import send, transactional

PLANTED_UNIQ = "7F00000100002A9F00000000000F"


def planted_half(physical_offset: int, queue_offset: int, group: str = "txg", topic: str = "Tx") -> bytes:
    """A half record as the broker stores one, consistent (length, magic, body CRC), whose
    fields say it lies at ``physical_offset`` and is the half queue's ``queue_offset``."""
    props = {
        "UNIQ_KEY": PLANTED_UNIQ,
        "TRAN_MSG": "true",
        "PGROUP": group,
        "REAL_TOPIC": topic,
        "REAL_QID": "0",
        "CLUSTER": "DefaultCluster",
    }
    return bytes(
        encode_message(
            body=b"planted: never to be committed",
            topic=HALF_TOPIC.encode(),
            properties=encode_properties(props).encode(),
            queue_id=0,
            flag=0,
            sys_flag=0,
            born_timestamp=1_700_000_000_000,
            born_addr=bytes([127, 0, 0, 1]),
            born_port=40000,
            store_addr=bytes([127, 0, 0, 1]),
            store_port=10911,
            store_timestamp=1_700_000_000_001,
            queue_offset=queue_offset,
            physical_offset=physical_offset,
        )
    )


def plant(r: Remoting, c: RawClient, queue_offset: int) -> int:
    """Send a message whose body is a half record claiming ``queue_offset``, its physical offset
    field right (a probe send first tells where the carrier's body will lie); the planted
    record's commitlog offset."""
    uniq = {"UNIQ_KEY": "C" * 28, "WAIT": "true"}
    probe = send(c, "Carrier", planted_half(0, queue_offset), uniq, queue_id=0)
    assert probe.code == ResponseCode.SUCCESS
    r.store.wait_dispatched()
    pulled = c.call(RequestCode.PULL_MESSAGE, pull_ext("Carrier", 0))
    rec = decode_record(pulled.body, 0)
    at = decode_offset_msg_id(probe.ext_fields["msgId"])[2] + rec.total_size
    planted = at + rec.body_start
    carrier = send(c, "Carrier", planted_half(planted, queue_offset), uniq, queue_id=0)
    assert decode_offset_msg_id(carrier.ext_fields["msgId"])[2] == at
    r.store.wait_dispatched()
    return planted


def end_fields(commit_log_offset: int, queue_offset: int, msg_id: str, group: str = "txg") -> dict[str, str]:
    return {
        "producerGroup": group,
        "tranStateTableOffset": str(queue_offset),
        "commitLogOffset": str(commit_log_offset),
        "commitOrRollback": "8",
        "fromTransactionCheck": "false",
        "msgId": msg_id,
    }


def in_topic(store: MessageStore, topic: str) -> int:
    store.wait_dispatched()
    return store.max_offset_in_queue(topic, 0)


def test_a_half_planted_in_a_body_is_not_committed(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("Tx", 1)
    r.store.create_topic("Carrier", 1)
    with RawClient(r.port) as c:
        real = transactional(c, "Tx", "REAL1")  # the half queue's entry 0
        planted = plant(r, c, 0)
        # what END_TRANSACTION used to trust: a consistent half at that offset
        record = r.store.look_message_by_offset(planted)
        assert record is not None and record.topic == HALF_TOPIC and record.properties["PGROUP"] == "txg"
        assert (record.uniq_key, record.queue_offset) == (PLANTED_UNIQ, 0)
        for queue_offset in (0, 1, 7, -1, (1 << 63) - 1):
            refused = c.call(RequestCode.END_TRANSACTION, end_fields(planted, queue_offset, PLANTED_UNIQ))
            assert refused.code == ResponseCode.SYSTEM_ERROR, queue_offset
            assert f"no transaction half message at commitlog offset {planted}" in (refused.remark or "")
        # oneway, as the client sends it: nothing either
        c.oneway(RequestCode.END_TRANSACTION, end_fields(planted, 0, PLANTED_UNIQ))
        assert in_topic(r.store, "Tx") == 0
        # the real one still commits
        real_offset = decode_offset_msg_id(real.ext_fields["msgId"])[2]
        ok = c.call(RequestCode.END_TRANSACTION, end_fields(real_offset, 0, "REAL1"))
        assert ok.code == ResponseCode.SUCCESS, ok.remark
    assert in_topic(r.store, "Tx") == 1
    assert r.store.get_message("g", "Tx", 0, 0, 1).messages[0].uniq_key == "REAL1"


def test_an_end_must_name_the_halfs_group_queue_entry_and_message_id(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("Tx", 1)
    with RawClient(r.port) as c:
        first, second = transactional(c, "Tx", "FIRST"), transactional(c, "Tx", "SECOND")
        offsets = [decode_offset_msg_id(h.ext_fields["msgId"])[2] for h in (first, second)]
        refusals = [
            (end_fields(offsets[1], 0, "SECOND"), "no transaction half message"),  # another's entry
            (end_fields(offsets[1], 2, "SECOND"), "no transaction half message"),  # no such entry
            (end_fields(offsets[1] + 1, 1, "SECOND"), "no transaction half message"),  # inside it
            (end_fields(offsets[1], 1, "SECOND", group="other"), "the producer group other is not"),
            (end_fields(offsets[1], 1, "FIRST"), "msgId 'FIRST' is not the half message's (SECOND)"),
            ({**end_fields(offsets[1], 1, "SECOND"), "transactionId": "FIRST"}, "transactionId 'FIRST'"),
        ]
        for fields, remark in refusals:
            resp = c.call(RequestCode.END_TRANSACTION, fields)
            assert resp.code == ResponseCode.SYSTEM_ERROR and remark in (resp.remark or ""), (fields, resp)
        no_msg_id = end_fields(offsets[1], 1, "SECOND")
        del no_msg_id["msgId"]
        resp = c.call(RequestCode.END_TRANSACTION, no_msg_id)
        assert resp.code == ResponseCode.SYSTEM_ERROR and "msgId is null" in (resp.remark or "")
        assert in_topic(r.store, "Tx") == 0
        # RocketMQ's client names it by UNIQ_KEY (and a check's answer its transactionId too);
        # the offset message id names it as well
        ok = {**end_fields(offsets[1], 1, "SECOND"), "transactionId": "SECOND"}
        assert c.call(RequestCode.END_TRANSACTION, ok).code == ResponseCode.SUCCESS
        by_offset_id = end_fields(offsets[0], 0, first.ext_fields["msgId"])
        assert c.call(RequestCode.END_TRANSACTION, by_offset_id).code == ResponseCode.SUCCESS
    assert in_topic(r.store, "Tx") == 2


def test_two_ends_of_one_half_at_once_commit_it_once(start_remoting: StartRemoting) -> None:
    r = start_remoting()
    r.store.create_topic("Tx", 1)
    with RawClient(r.port) as c:
        half = transactional(c, "Tx", "ONCE")
        fields = end_fields(decode_offset_msg_id(half.ext_fields["msgId"])[2], 0, "ONCE")
        # both requests in one write: the broker handles them concurrently
        frames: list[Any] = []
        opaques = []
        for n in (9001, 9002):
            cmd = RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=fields, opaque=n)
            frames.extend(bytes(b) for b in encode_command(cmd))
            opaques.append(n)
        c.sock.sendall(b"".join(frames))
        codes = sorted(c.response_to(n).code for n in opaques)
        assert codes == [ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR]
    assert in_topic(r.store, "Tx") == 1
