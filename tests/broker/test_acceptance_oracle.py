"""RocketMQ 4.9.8 reads what the broker wrote for the official Python client (issue 16's check).

Runs only when ``ROCKETMQ_ORACLE`` names a driver of RocketMQ's store (docs/testing.md says what it
does and how to get RocketMQ 4.9.8; without it this skips). The broker serves a
store for normal, FIFO, delay and transactional sends and a consumer that leaves a message un-acked
until it is dead-lettered; then RocketMQ's own DefaultMessageStore loads the closed store and its
listing must hold every topic (retry, DLQ, schedule, transaction half and op topics included) with
the queue offsets and properties the broker wrote.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from rocketmq.grpc_protocol import TransactionResolution
from rocketmq.v5.producer import TransactionChecker

from rocketstore import MessageStore
from rocketstore.broker import Broker, BrokerConfig

from .clients import message, producer, simple_consumer
from .conftest import SMALL

ORACLE = os.environ.get("ROCKETMQ_ORACLE", "")
SKIP_REASON = (
    "set ROCKETMQ_ORACLE to the oracle's run.sh (RocketMQ 4.9.8's store driver: docs/testing.md)"
    if not ORACLE
    else f"ROCKETMQ_ORACLE={ORACLE!r} is not a file: set it to the oracle's run.sh (docs/testing.md)"
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(ORACLE).is_file(), reason=SKIP_REASON),
]
QUEUE = re.compile(r"^queue topic=(\S+) queueId=(\d+) minOffset=(-?\d+) maxOffset=(-?\d+)$")
MSG = re.compile(
    r"^  msg offset=(\d+) .* topic=(\S+) queueId=(\d+) .*? sysFlag=(\d+) .*? props=\{(.*)\} bodyLen"
)


class _Commit(TransactionChecker):  # type: ignore[misc]
    def check(self, message: Any) -> Any:
        return TransactionResolution.COMMIT


def oracle_listing(store_dir: Path, out: Path) -> tuple[dict[tuple[str, int], int], list[dict[str, Any]]]:
    """RocketMQ's reading: max offset per (topic, queue), and every message (topic, queue, sysflag, props)."""
    run = subprocess.run(
        [
            ORACLE,
            "read",
            str(store_dir),
            "--hashSlots",
            str(SMALL.index_hash_slots),
            "--indexNum",
            str(SMALL.index_max_entries),
            "--out",
            str(out),
        ],
        capture_output=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    text = out.read_text()
    assert "load=true" in text, text[:2000]
    queues, msgs = {}, []
    for line in text.splitlines():
        if q := QUEUE.match(line):
            queues[(q[1], int(q[2]))] = int(q[4])
        elif m := MSG.match(line):
            props = dict(kv.split("=", 1) for kv in m[5].split(",") if "=" in kv)
            msgs.append(
                {"offset": int(m[1]), "topic": m[2], "queue": int(m[3]), "sysflag": int(m[4]), **props}
            )
    return queues, msgs


def test_rocketmq_4_9_8_reads_the_store_the_broker_wrote(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    config = BrokerConfig(
        invisible_min_ms=1000, long_polling_min_ms=0, max_delivery_attempts=2, listen="127.0.0.1:0"
    )
    with MessageStore.open(store_dir, SMALL) as store:
        broker = Broker(store, config)
        port = broker.start_in_thread()
        try:
            with simple_consumer(port, "OG", "ONormal", await_s=1) as c:
                assert c.receive(16, 30) == []
                with producer(port, ("ONormal", "OFifo", "ODelay", "OTx"), _Commit()) as p:
                    for i in range(4):
                        p.send(
                            message(
                                "ONormal",
                                f"n{i}".encode(),
                                tag="T",
                                keys=(f"k{i}",),
                                properties={"i": str(i)},
                            )
                        )
                    for i in range(3):
                        p.send(message("OFifo", f"f{i}".encode(), group="g"))
                    p.send(message("ODelay", b"later", deliver_at_s=int(time.time()) + 1))
                    tx = p.begin_transaction()
                    p.send(message("OTx", b"committed"), tx)
                    tx.commit()
                    tx = p.begin_transaction()
                    p.send(message("OTx", b"rolled back"), tx)
                    tx.rollback()
                # n0 is never acked: delivered twice (the 2nd time from the retry topic), then a dead letter
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and "%DLQ%OG" not in store.topics():
                    for m in c.receive(16, 1):
                        if m.body != b"n0":
                            c.ack(m)
                assert "%DLQ%OG" in store.topics()
            assert store.wait_dispatched(10)
        finally:
            broker.stop_in_thread()
    queues, msgs = oracle_listing(store_dir, tmp_path / "oracle.txt")

    def of(topic: str) -> list[dict[str, Any]]:
        return [m for m in msgs if m["topic"] == topic]

    assert sum(v for (t, _), v in queues.items() if t == "ONormal") == 4
    n1 = next(m for m in of("ONormal") if m.get("KEYS") == "k1")
    assert (n1["TAGS"], n1["i"]) == ("T", "1") and "UNIQ_KEY" in n1
    fifo = of("OFifo")
    assert len({m["queue"] for m in fifo}) == 1 and [m["offset"] for m in fifo] == [0, 1, 2]
    assert all(m["__SHARDINGKEY"] == "g" for m in fifo)
    [timer] = of("rmq_sys_wheel_timer")  # a timer, as RocketMQ 5 stores it: RocketMQ 4.9 reads it
    assert timer["REAL_TOPIC"] == "ODelay" and "TIMER_OUT_MS" in timer and "DELAY" not in timer
    [delivered] = of("ODelay")
    assert delivered["TIMER_DELIVER_MS"] == timer["TIMER_DELIVER_MS"]
    halves = of("RMQ_SYS_TRANS_HALF_TOPIC")
    assert len(halves) == 2 and all(h["REAL_TOPIC"] == "OTx" and h["TRAN_MSG"] == "true" for h in halves)
    assert sorted(int(m["queue"]) for m in of("RMQ_SYS_TRANS_OP_HALF_TOPIC")) == [0, 0]
    [committed] = of("OTx")
    assert committed["sysflag"] & 0xC == 0x8 and "REAL_TOPIC" not in committed
    [retry] = of("%RETRY%OG_ONormal")
    assert retry["RETRY_TOPIC"] == "ONormal" and retry["UNIQ_KEY"] == next(
        m["UNIQ_KEY"] for m in of("ONormal") if m.get("KEYS") == "k0"
    )
    [dead] = of("%DLQ%OG")
    assert dead["DLQ_ORIGIN_TOPIC"] == "ONormal" and dead["KEYS"] == "k0"
    assert queues[("%DLQ%OG", 0)] == 1 and queues[("%RETRY%OG_ONormal", 0)] == 1
