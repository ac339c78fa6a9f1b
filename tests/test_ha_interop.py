"""Replication with a live RocketMQ 4.9.8 store, both directions.

Runs only when ``ROCKETMQ_ORACLE`` names a driver of RocketMQ's store (docs/testing.md says what it
does and how to get RocketMQ 4.9.8; without it these skip). Every socket is on loopback; every wait bounded.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, PutStatus, StoreConfig

ORACLE = os.environ.get("ROCKETMQ_ORACLE", "")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(ORACLE).is_file(), reason="set ROCKETMQ_ORACLE to the oracle's run.sh"),
]
GEOMETRY = StoreConfig(
    commitlog_segment_size=65536, consume_queue_entries=64, index_hash_slots=64, index_max_entries=256
)
SEG = 65536
WAIT = 60.0
MORE = ["--more", "200", "--moreAfterMs", "3000"]  # 200 more messages 3 s after the master is ready


def _line(proc: subprocess.Popen[str], prefix: str) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line
    raise AssertionError(f"the RocketMQ process never printed {prefix!r}")


def _number(line: str, key: str) -> int:
    return int(line.split(f"{key}=")[1].split()[0])


def _wait(condition: object) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_rocketstore_slave_of_a_rocketmq_master(tmp_path: Path) -> None:
    master = subprocess.Popen(
        ["bash", ORACLE, "ha-master", str(tmp_path / "m"), "--port", "0", "--msgs", "400", *MORE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        port = _number(_line(master, "ready"), "haPort")
        # RocketMQ answers a report of 0 with its last segment only (#3661): ask for more history
        config = GEOMETRY.replace(
            broker_role="SLAVE", ha_master_address=f"127.0.0.1:{port}", ha_start_offset=SEG
        )
        with MessageStore.open(tmp_path / "s", config) as slave:
            end = _number(_line(master, "more"), "maxPhyOffset")
            _wait(lambda: slave.max_phy_offset() >= end)
            assert (slave.min_phy_offset(), slave.max_phy_offset()) == (SEG, end)
            assert slave.wait_dispatched(WAIT)
            assert master.stdin is not None
            master.stdin.close()
            _line(master, "final")
            master.wait(WAIT)
            for path in sorted((tmp_path / "s" / "commitlog").iterdir()):
                if path.name.isdigit() and int(path.name) < end:
                    start = int(path.name)
                    n = min(SEG, end - start)
                    assert (
                        path.read_bytes()[:n] == (tmp_path / "m" / "commitlog" / path.name).read_bytes()[:n]
                    )
            with MessageStore.open(tmp_path / "m", GEOMETRY, readonly=True) as rocketmq:
                compared = 0
                for topic, qids in rocketmq.topics().items():
                    for q in qids:
                        assert slave.max_offset_in_queue(topic, q) == rocketmq.max_offset_in_queue(topic, q)
                        for off in range(
                            slave.min_offset_in_queue(topic, q), slave.max_offset_in_queue(topic, q)
                        ):
                            (got,) = slave.get_message("g", topic, q, off, max_msgs=1).messages
                            (want,) = rocketmq.get_message("g", topic, q, off, max_msgs=1).messages
                            assert (got.msg_id, got.body, got.tags_code) == (
                                want.msg_id,
                                want.body,
                                want.tags_code,
                            )
                            compared += 1
                assert compared > 400
    finally:
        master.kill()
        master.wait(WAIT)


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SYNC_MASTER"])
def test_rocketmq_slave_of_a_rocketstore_master(role: str, tmp_path: Path) -> None:
    config = GEOMETRY.replace(broker_role=role, ha_listen_port=0, ha_listen_host="127.0.0.1")
    with MessageStore.open(tmp_path / "m", config) as master:
        alone = {
            master.put_message(
                Message("TopicA", f"before-{i}-".encode() * 30, queue_id=i % 4, keys=[f"k{i}"], tags="tA")
            ).status
            for i in range(300)
        }
        assert alone == {PutStatus.SLAVE_NOT_AVAILABLE if role == "SYNC_MASTER" else PutStatus.PUT_OK}
        until = ["--untilOffset", "-", "--timeoutMs", "60000", "--out", str(tmp_path / "listing.txt")]
        slave = subprocess.Popen(
            [
                "bash",
                ORACLE,
                "ha-slave",
                str(tmp_path / "s"),
                "--master",
                f"127.0.0.1:{master.ha_port}",
                *until,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            # a RocketMQ slave sends its first report about 5 s after it connects
            _wait(lambda: any(c["state"] == "streaming" for c in master.ha_status()["master"]["slaves"]))  # type: ignore[index]
            after = {
                master.put_message(Message("TopicB", f"after-{i}".encode() * 10, queue_id=i % 2)).status
                for i in range(100)
            }
            assert after == {PutStatus.PUT_OK}
            assert master.put_batch("TopicC", [b"x" * 200] * 100, queue_ids=0).status is PutStatus.PUT_OK
            end = master.max_phy_offset()
            assert slave.stdin is not None
            slave.stdin.write(f"{end}\n")
            slave.stdin.close()
            caught = _line(slave, "caught")
            assert "reached=true" in caught and _number(caught, "minPhyOffset") == 0  # the whole log
            slave.wait(WAIT)
        finally:
            slave.kill()
            slave.wait(WAIT)
        assert master.wait_dispatched(WAIT)
        listing = (tmp_path / "listing.txt").read_text("utf-8")
        queues = re.findall(
            r"^queue topic=(\S+) queueId=(\d+) minOffset=(\d+) maxOffset=(\d+)", listing, re.M
        )
        listed = {(t, int(q)): int(hi) for t, q, _, hi in queues if int(hi)}
        assert listed == {
            (t, q): master.max_offset_in_queue(t, q) for t, qs in master.topics().items() for q in qs
        }
        written = {
            master.get_message("g", t, q, off, max_msgs=1).messages[0].msg_id
            for t, qs in master.topics().items()
            for q in qs
            for off in range(master.max_offset_in_queue(t, q))
        }
        assert len(written) == 500
        assert written <= set(re.findall(r"msgId=([0-9A-F]{32})", listing))
