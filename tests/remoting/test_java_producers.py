"""RocketMQ 4.9.8's Java producers against ``rocketstore serve``: sync, async, oneway and batch
sends, a compressed body, transactions with the broker's check-back; what they were told is what
the store holds."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.codec.message_id import decode_offset_msg_id

from .conftest import StartServe
from .harness import JavaPrograms

pytestmark = pytest.mark.slow


def open_store(path: Path) -> MessageStore:
    return MessageStore.open(path, StoreConfig(), readonly=True)


def test_every_send_mode_is_stored_as_acknowledged(java: JavaPrograms, serve: StartServe) -> None:
    s = serve()
    ns = f"namesrv={s.namesrv}"
    sync = java.run("Produce", ns, "topic=JSync", "count=8", "mode=sync", "tags=a,b", "keys=k")
    sent = [e for e in sync if e["event"] == "sent"]
    assert [e["status"] for e in sent] == ["SEND_OK"] * 8
    asynced = java.run("Produce", ns, "topic=JSync", "count=4", "mode=async")
    sent += [e for e in asynced if e["event"] == "sent"]
    assert sorted(e["i"] for e in asynced if e["event"] == "sent") == [0, 1, 2, 3]
    batch = java.run("Produce", ns, "topic=JBatch", "count=5", "mode=batch")
    [b] = [e for e in batch if e["event"] == "batch"]
    assert b["status"] == "SEND_OK" and len(b["offsetMsgId"].split(",")) == 5
    oneway = java.run("Produce", ns, "topic=JOneway", "count=3", "mode=oneway")
    assert len([e for e in oneway if e["event"] == "oneway"]) == 3
    # bodies of 4 KiB and more are compressed by the client (zlib, sysflag 0x301)
    big = java.run("Produce", ns, "topic=JBig", "count=1", "mode=sync", "size=6000")
    [big_sent] = [e for e in big if e["event"] == "sent"]
    s.stop()

    with open_store(s.store) as store:
        for e in sent:
            _, port, offset = decode_offset_msg_id(e["offsetMsgId"])
            assert f"127.0.0.1:{port}" == s.broker
            msg = store.look_message_by_offset(offset)
            assert msg is not None and msg.topic == "JSync" and msg.uniq_key == e["msgId"]
            assert (msg.queue_id, msg.queue_offset) == (e["queueId"], e["queueOffset"])
            assert msg.body == f"body-{e['i']}".encode()
        assert len(store.query_message("JSync", "k-3")) == 1
        batch_msgs = [
            store.look_message_by_offset(decode_offset_msg_id(i)[2]) for i in b["offsetMsgId"].split(",")
        ]
        assert [m.body for m in batch_msgs if m is not None] == [b"body-%d" % i for i in range(5)]
        queues = store.topics()["JOneway"]
        assert sum(store.max_offset_in_queue("JOneway", q) for q in queues) == 3
        msg = store.look_message_by_offset(decode_offset_msg_id(big_sent["offsetMsgId"])[2])
        assert msg is not None and msg.sys_flag & 0x701 == 0x301
        assert zlib.decompress(msg.body) == b"body-0" + b"." * 5994


def test_transactions_commit_roll_back_and_are_checked(java: JavaPrograms, serve: StartServe) -> None:
    s = serve(settings="transactionTimeOut=1000\ntransactionCheckInterval=500\n")
    events = java.run("TxProduce", f"namesrv={s.namesrv}", "topic=JTx", "count=6")
    sent = [e for e in events if e["event"] == "sent"]
    assert [e["status"] for e in sent] == ["SEND_OK"] * 6
    checked = [e for e in events if e["event"] == "checked"]
    assert sorted(e["body"] for e in checked) == ["tx-2", "tx-5"]
    assert all(e["topic"] == "JTx" and e["checkTimes"] == "1" for e in checked)
    s.stop()
    with open_store(s.store) as store:
        store.wait_dispatched()
        bodies = sorted(
            m.body for q in store.topics()["JTx"] for m in store.get_message("g", "JTx", q, 0, 100).messages
        )
        # committed at once (0, 3) or after the check (2, 5); never the rolled back ones
        assert bodies == [b"tx-0", b"tx-2", b"tx-3", b"tx-5"]


def test_kill_9_mid_stream_loses_nothing_acknowledged(java: JavaPrograms, serve: StartServe) -> None:
    s = serve(settings="flushDiskType=SYNC_FLUSH\n")
    producer = java.start("Produce", f"namesrv={s.namesrv}", "topic=JKill", "count=100000", "mode=sync")
    producer.wait_for(lambda p: sum(e["event"] == "sent" for e in p.events) >= 200, "200 acknowledged sends")
    s.kill()  # SIGKILL of serve in the middle of the stream
    producer.finish()
    acknowledged = [e for e in producer.events if e["event"] == "sent"]
    assert all(e["status"] == "SEND_OK" for e in acknowledged)
    with MessageStore.open(s.store, StoreConfig()) as store:  # recovers after the crash
        for e in acknowledged:
            msg = store.look_message_by_offset(decode_offset_msg_id(e["offsetMsgId"])[2])
            assert msg is not None and msg.uniq_key == e["msgId"], e
            assert msg.body == f"body-{e['i']}".encode()
        store.wait_dispatched()
        for q in range(4):
            acked_here = [e["queueOffset"] for e in acknowledged if e["queueId"] == q]
            if acked_here:
                assert store.max_offset_in_queue("JKill", q) > max(acked_here)
