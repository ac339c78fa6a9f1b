"""rocketstore master/slave pairs on loopback: replication, SYNC_MASTER statuses, restarts, refusals.

Every socket binds 127.0.0.1; every wait is bounded (``WAIT``) and polls, no assertion is timed.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rocketstore import ManualClock, Message, MessageStore, PutStatus, StoreConfig
from rocketstore.codec.commitlog_record import TX_PREPARED
from rocketstore.errors import StoreConfigError
from rocketstore.ha.frames import FrameReader, encode_report
from tests.helpers import spawn_python

WAIT = 30.0
SEG = 65536
BASE = StoreConfig(
    commitlog_segment_size=SEG,
    consume_queue_entries=64,
    index_hash_slots=64,
    index_max_entries=256,
    ha_listen_host="127.0.0.1",
    ha_send_heartbeat_interval=100,
)


def master_config(role: str = "ASYNC_MASTER", **changes: object) -> StoreConfig:
    return BASE.replace(broker_role=role, ha_listen_port=0, **changes)


def slave_config(master: MessageStore, **changes: object) -> StoreConfig:
    return BASE.replace(broker_role="SLAVE", ha_master_address=f"127.0.0.1:{master.ha_port}", **changes)


def wait_until(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def put_some(store: MessageStore, n: int, start: int = 0) -> None:
    msgs = [
        Message("TopicA", f"body-{i}".encode() * 20, queue_id=i % 3, keys=[f"k{i}"], tags="t")
        for i in range(start, start + n)
    ]
    for result in store.put_messages(msgs):
        assert result.status in (PutStatus.PUT_OK, PutStatus.SLAVE_NOT_AVAILABLE), result.status


def log_bytes(store: MessageStore, start: int, end: int) -> bytes:
    out = bytearray()
    for path in sorted(store.layout.commitlog.iterdir()):
        if not path.name.isdigit():
            continue  # a segment being pre-allocated
        seg = int(path.name)
        if seg + SEG <= start or seg >= end:
            continue
        data = path.read_bytes()
        out += data[max(start, seg) - seg : min(end, seg + SEG) - seg]
    return bytes(out)


def caught_up(master: MessageStore, slave: MessageStore) -> Callable[[], bool]:
    return lambda: slave.max_phy_offset() == master.max_phy_offset()


def slave_status(store: MessageStore) -> dict[str, object]:
    status = store.ha_status()["slave"]
    assert isinstance(status, dict)
    return status


def streaming(store: MessageStore) -> Callable[[], bool]:
    """Whether some connection of the master has made its first report."""
    return lambda: any(c["state"] == "streaming" for c in master_status(store)["slaves"])  # type: ignore[attr-defined]


def master_status(store: MessageStore) -> dict[str, object]:
    status = store.ha_status()["master"]
    assert isinstance(status, dict)
    return status


def test_async_master_and_slave_replicate(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "m", master_config()) as master:
        put_some(master, 500)  # several segments, before the slave exists
        with MessageStore.open(tmp_path / "s", slave_config(master)) as slave:
            batch = master.put_batch("TopicB", [b"x" * 300] * 400, queue_ids=1, keys=["kb"] * 400)
            assert batch.status is PutStatus.PUT_OK
            put_some(master, 300, start=500)
            wait_until(caught_up(master, slave), "the slave to catch up")
            end = master.max_phy_offset()
            assert end > 3 * SEG
            # an empty rocketstore slave gets the whole log, not only the last segment (#3661)
            assert slave.min_phy_offset() == 0
            assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
            assert slave.wait_dispatched(WAIT) and master.wait_dispatched(WAIT)
            for topic, qid in (("TopicA", 0), ("TopicA", 2), ("TopicB", 1)):
                assert slave.max_offset_in_queue(topic, qid) == master.max_offset_in_queue(topic, qid)
            got = slave.get_message("g", "TopicA", 1, 100, max_msgs=1).messages[0]
            want = master.get_message("g", "TopicA", 1, 100, max_msgs=1).messages[0]
            assert (got.msg_id, got.body, got.store_timestamp) == (
                want.msg_id,
                want.body,
                want.store_timestamp,
            )
            assert {m.physical_offset for m in slave.query_message("TopicB", "kb", max_num=1000)} == set(
                batch.physical_offsets.tolist()
            )
            wait_until(lambda: master_status(master)["acked_offset"] == end, "the master to see the ack")
            status = slave_status(slave)
            assert status["state"] == "connected" and status["slave_offset"] == end
            assert status["connects"] == 1 and master_status(master)["problems"] == []  # one clean link
            (conn,) = master_status(master)["slaves"]  # type: ignore[misc]
            assert conn["acked_offset"] == end and conn["behind_bytes"] == 0


def test_slave_without_an_address_waits_until_it_is_given_one(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "m", master_config()) as master:
        put_some(master, 50)
        with MessageStore.open(tmp_path / "s", BASE.replace(broker_role="SLAVE")) as slave:
            time.sleep(0.3)
            status = slave_status(slave)
            assert status["state"] == "waiting_for_master" and status["master_address"] == "(not known yet)"
            assert slave.max_phy_offset() == 0
            slave.update_ha_master_address(f"127.0.0.1:{master.ha_port}")
            wait_until(caught_up(master, slave), "the slave to catch up")
            assert slave_status(slave)["state"] == "connected"
            with pytest.raises(ValueError, match="expected HOST:PORT"):
                slave.update_ha_master_address("nowhere")
        with pytest.raises(StoreConfigError, match="only a SLAVE"):
            master.update_ha_master_address("127.0.0.1:1")


def test_slave_refuses_puts(tmp_path: Path) -> None:
    with (
        MessageStore.open(tmp_path / "m", master_config()) as master,
        MessageStore.open(tmp_path / "s", slave_config(master)) as slave,
    ):
        result = slave.put_message(Message("TopicA", b"x", queue_id=0))
        assert result.status is PutStatus.SERVICE_NOT_AVAILABLE
        assert slave.put_batch("TopicA", [b"x"], queue_ids=0).status is PutStatus.SERVICE_NOT_AVAILABLE
        assert slave.max_phy_offset() == 0


def test_sync_master_put_ok_only_after_a_slave_ack(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "m", master_config("SYNC_MASTER")) as master:
        alone = master.put_message(Message("TopicA", b"no slave yet", queue_id=0))
        assert alone.status is PutStatus.SLAVE_NOT_AVAILABLE  # at once, and still stored
        assert master.look_message_by_offset(alone.physical_offset) is not None
        no_wait = Message("TopicA", b"w", queue_id=0, properties={"WAIT": "false"})
        assert master.put_message(no_wait).status is PutStatus.PUT_OK
        with MessageStore.open(tmp_path / "s", slave_config(master)) as slave:
            wait_until(streaming(master), "the slave to connect")
            for _ in range(20):
                result = master.put_message(Message("TopicA", b"synced", queue_id=0))
                assert result.status is PutStatus.PUT_OK
                # acked: the slave holds the bytes (in its page cache) when the put returns
                assert slave.max_phy_offset() >= result.physical_offset + result.wrote_bytes
            results = master.put_messages([Message("TopicA", b"b", queue_id=1)] * 50)
            assert {r.status for r in results} == {PutStatus.PUT_OK}
            assert master.put_batch("TopicA", [b"c"] * 50, queue_ids=2).status is PutStatus.PUT_OK
            assert slave.max_phy_offset() == master.max_phy_offset()


class FakeSlave:
    """A slave that says what the test wants: it reports and reads frames, and acks nothing
    unless told."""

    def __init__(self, port: int, first_report: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.reader = FrameReader()
        self.sock.sendall(encode_report(first_report))

    def frame(self) -> tuple[int, bytes] | None:
        """The next frame, or None when the master closed the connection."""
        while True:
            frame = self.reader.take()
            if frame is not None:
                return frame
            data = self.sock.recv(65536)
            if not data:
                return None
            self.reader.feed(data)

    def close(self) -> None:
        self.sock.close()


def test_sync_master_times_out_without_an_ack(tmp_path: Path) -> None:
    config = master_config("SYNC_MASTER", slave_timeout=200)
    with MessageStore.open(tmp_path / "m", config) as master:
        silent = FakeSlave(master.ha_port or 0, 0)
        try:
            wait_until(streaming(master), "the fake slave to report")
            result = master.put_message(Message("TopicA", b"unacked", queue_id=0))
            assert result.status is PutStatus.FLUSH_SLAVE_TIMEOUT
            assert master.look_message_by_offset(result.physical_offset) is not None  # stored here
        finally:
            silent.close()


def test_sync_master_slave_too_far_behind(tmp_path: Path) -> None:
    config = master_config("SYNC_MASTER", ha_slave_fallbehind_max=4096, slave_timeout=200)
    with MessageStore.open(tmp_path / "m", config) as master:
        put_some(master, 100)  # SLAVE_NOT_AVAILABLE each, all stored
        assert master.max_phy_offset() > 4096
        behind = FakeSlave(master.ha_port or 0, 0)
        try:
            wait_until(streaming(master), "the fake slave to report")
            result = master.put_message(Message("TopicA", b"far", queue_id=0))
            assert result.status is PutStatus.SLAVE_NOT_AVAILABLE
        finally:
            behind.close()


def test_an_ack_above_what_was_sent_is_refused(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "m", master_config("SYNC_MASTER", slave_timeout=200)) as master:
        liar = FakeSlave(master.ha_port or 0, 0)
        try:
            wait_until(streaming(master), "the fake slave to report")
            liar.sock.sendall(encode_report(1 << 40))  # #3015: acks for bytes it never got
            wait_until(lambda: master_status(master)["problems"], "the master to notice")
            assert master_status(master)["problems"][0]["problem"] == "ack_above_sent"  # type: ignore[index]
            assert master_status(master)["acked_offset"] == 0
            assert master.put_message(Message("T", b"x", queue_id=0)).status is PutStatus.SLAVE_NOT_AVAILABLE
        finally:
            liar.close()


def test_restarted_slave_resumes_from_its_end(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "m", master_config()) as master:
        with MessageStore.open(tmp_path / "s", slave_config(master)) as slave:
            put_some(master, 200)
            wait_until(caught_up(master, slave), "the slave to catch up")
        first_end = master.max_phy_offset()
        put_some(master, 200, start=200)
        with MessageStore.open(tmp_path / "s", slave_config(master)) as slave:
            wait_until(caught_up(master, slave), "the slave to catch up again")
            (conn,) = master_status(master)["slaves"]  # type: ignore[misc]
            assert conn["request_offset"] == first_end
            end = master.max_phy_offset()
            assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
            assert slave.wait_dispatched(WAIT) and master.wait_dispatched(WAIT)
            assert slave.max_offset_in_queue("TopicA", 0) == master.max_offset_in_queue("TopicA", 0)


def test_slave_ahead_of_its_master_says_so_and_stops(tmp_path: Path) -> None:
    with (
        MessageStore.open(tmp_path / "m1", master_config()) as first,
        MessageStore.open(tmp_path / "s", slave_config(first)) as slave,
    ):
        put_some(first, 100)
        wait_until(caught_up(first, slave), "the slave to catch up")
    held = (tmp_path / "s" / "commitlog" / f"{0:020d}").read_bytes()
    with MessageStore.open(tmp_path / "m2", master_config()) as second:  # a wiped master
        put_some(second, 10)
        with MessageStore.open(tmp_path / "s", slave_config(second)) as slave:
            wait_until(lambda: slave_status(slave)["state"] == "ahead_of_master", "the slave to stop")
            assert "holds bytes the master does not have" in str(slave_status(slave)["problem"])
            (problem,) = master_status(second)["problems"]  # type: ignore[misc]
            assert problem["problem"] == "request_above_max"
            # the master answers, then closes the link: the slave may hear before it is closed
            wait_until(lambda: not master_status(second)["slaves"], "the master to close the link")
        assert (tmp_path / "s" / "commitlog" / f"{0:020d}").read_bytes() == held  # nothing diverged


def test_request_below_the_masters_log_is_told_apart(tmp_path: Path) -> None:
    """#3388: RocketMQ feeds such a slave heartbeats forever. Here the master logs it, shows it,
    answers with the offset it can serve and closes; a rocketstore slave stops and says why."""
    config = master_config(file_reserved_time=0)
    with MessageStore.open(tmp_path / "m", config) as master:
        put_some(master, 1000)
        assert master.max_phy_offset() > 3 * SEG
        # the oldest segments reclaimed: a manual clean deletes expired files
        master.reclaim()
        low = master.min_phy_offset()
        assert low > 0
        stale = FakeSlave(master.ha_port or 0, 100)
        try:
            assert stale.frame() == (low, b"")  # where this master could start
            assert stale.frame() is None  # and the link is closed
        finally:
            stale.close()
        (problem,) = master_status(master)["problems"]  # type: ignore[misc]
        assert problem["problem"] == "request_below_min" and "re-seed" in problem["detail"]


def test_master_drops_a_silent_slave(tmp_path: Path) -> None:
    clock = ManualClock()
    config = master_config(ha_housekeeping_interval=20_000)
    with MessageStore.open(tmp_path / "m", config, clock=clock) as master:
        silent = FakeSlave(master.ha_port or 0, 0)
        try:
            wait_until(streaming(master), "the fake slave to report")
            clock.advance(19_000)
            time.sleep(0.3)  # (not a timing assertion: the slave must still be there afterwards)
            assert master_status(master)["slaves"]
            clock.advance(2_000)
            wait_until(lambda: not master_status(master)["slaves"], "the master to drop the slave")
            while (frame := silent.frame()) is not None:
                assert frame[1] == b""  # heartbeats, then the close
        finally:
            silent.close()


def test_config_names_and_checks() -> None:
    config = StoreConfig.from_mapping(
        {
            "brokerRole": "SLAVE",
            "haMasterAddress": "10.0.0.1:10912",
            "haSendHeartbeatInterval": "1000",
            "haHousekeepingInterval": "4000",
            "haTransferBatchSize": "65536",
            "haSlaveFallbehindMax": "1024",
            "slaveTimeout": "500",
            "haListenPort": "10912",
        }
    )
    assert (config.broker_role.value, config.ha_master_address, config.ha_listen_port) == (
        "SLAVE",
        "10.0.0.1:10912",
        10912,
    )
    assert (config.ha_transfer_batch_size, config.ha_slave_fallbehind_max, config.slave_timeout) == (
        65536,
        1024,
        500,
    )
    defaults = StoreConfig()
    assert (defaults.broker_role.value, defaults.ha_listen_port, defaults.ha_send_heartbeat_interval) == (
        "ASYNC_MASTER",
        None,
        5000,
    )
    assert (defaults.ha_housekeeping_interval, defaults.ha_transfer_batch_size, defaults.slave_timeout) == (
        20000,
        32768,
        3000,
    )
    assert defaults.ha_slave_fallbehind_max == 256 * 1024 * 1024 and defaults.ha_start_offset is None
    from rocketstore.errors import StoreConfigError

    with pytest.raises(StoreConfigError, match="ha_master_address"):
        StoreConfig(broker_role="SLAVE", ha_master_address="no-port")
    # no address: the broker learns it from its name servers (update_ha_master_address)
    assert StoreConfig(broker_role="SLAVE").ha_master_address is None
    with pytest.raises(StoreConfigError, match="broker_role must be"):
        StoreConfig(broker_role="LEADER")
    with pytest.raises(StoreConfigError, match="ha_start_offset must be a commitlog segment boundary"):
        StoreConfig(commitlog_segment_size=65536, ha_start_offset=100)
    with pytest.raises(StoreConfigError, match="SYNC_MASTER needs ha_listen_port"):
        StoreConfig(broker_role="SYNC_MASTER")


# --- SIGKILL of either side mid-stream (subprocess) ----------------------------------------------

_SIDE = """
import sys, threading, time
from rocketstore import Message, MessageStore, StoreConfig
role, root, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
base = StoreConfig(commitlog_segment_size=65536, consume_queue_entries=64, index_hash_slots=64,
                   index_max_entries=256, ha_listen_host="127.0.0.1", ha_send_heartbeat_interval=100,
                   disk_max_used_space_ratio=100, disk_clean_forcibly_ratio=100, disk_warning_ratio=100)
if role == "master":
    store = MessageStore.open(root, base.replace(ha_listen_port=port))
    print("UP", flush=True)
    i = 0
    while True:
        n = range(i, i + 20)
        store.put_messages([Message("TopicA", b"m-%d-" % k * 30, queue_id=k % 3) for k in n])
        i += 20
        time.sleep(0.002)
else:
    slave = base.replace(broker_role="SLAVE", ha_master_address="127.0.0.1:%d" % port)
    store = MessageStore.open(root, slave)
    print("UP", flush=True)
    while True:
        print("AT", store.max_phy_offset(), flush=True)
        time.sleep(0.05)
"""


def _spawn(role: str, root: Path, port: int) -> subprocess.Popen[str]:
    proc = spawn_python(_SIDE, role, str(root), str(port))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "UP"
    return proc


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(WAIT)
    assert proc.stdout is not None
    proc.stdout.close()


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


def _assert_prefix(slave: MessageStore, master: MessageStore) -> None:
    end = slave.max_phy_offset()
    assert 0 < end <= master.max_phy_offset()
    assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(2))
def test_sigkill_of_the_slave_mid_stream(round_: int, tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "m", master_config()) as master:
        stop = threading.Event()

        def produce() -> None:
            i = 0
            while not stop.is_set():
                put_some(master, 20, start=i)
                i += 20
                time.sleep(0.002)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        try:
            proc = _spawn("slave", tmp_path / "s", master.ha_port or 0)
            assert proc.stdout is not None
            target = (2 + round_) * SEG
            for line in proc.stdout:  # bounded: the slave prints every 50 ms and the master grows
                if line.startswith("AT") and int(line.split()[1]) > target:
                    break
            _kill(proc)
        finally:
            stop.set()
            producer.join(WAIT)
        assert (tmp_path / "s" / "abort").exists()
        with MessageStore.open(tmp_path / "s", slave_config(master)) as slave:
            _assert_prefix(slave, master)
            wait_until(caught_up(master, slave), "the restarted slave to catch up")
            end = master.max_phy_offset()
            assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
            assert slave.wait_dispatched(WAIT) and master.wait_dispatched(WAIT)
            for qid in range(3):
                assert slave.max_offset_in_queue("TopicA", qid) == master.max_offset_in_queue("TopicA", qid)


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(2))
def test_sigkill_of_the_master_mid_stream(round_: int, tmp_path: Path) -> None:
    port = _free_port()
    proc = _spawn("master", tmp_path / "m", port)
    config = BASE.replace(broker_role="SLAVE", ha_master_address=f"127.0.0.1:{port}")
    with MessageStore.open(tmp_path / "s", config) as slave:
        try:
            wait_until(lambda: slave.max_phy_offset() > (2 + round_) * SEG, "the slave to receive data")
        finally:
            _kill(proc)
        wait_until(lambda: slave_status(slave)["state"] != "connected", "the slave to see the link drop")
        # the master comes back on the same port, recovered after its crash
        with MessageStore.open(tmp_path / "m", BASE.replace(ha_listen_port=port)) as master:
            _assert_prefix(slave, master)
            wait_until(caught_up(master, slave), "the slave to catch up with the recovered master")
            end = master.max_phy_offset()
            assert log_bytes(slave, 0, end) == log_bytes(master, 0, end)
            put_some(master, 50)
            wait_until(caught_up(master, slave), "the slave to follow new puts")


def test_cli_status_shows_the_replication_role(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_cli import jsonl, run

    with MessageStore.open(tmp_path / "s", BASE) as store:
        put_some(store, 5)
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerRole=SLAVE\nhaMasterAddress=127.0.0.1:10912\n", encoding="utf-8")
    code, out, err = run(capsys, "--config", str(conf), "status", str(tmp_path / "s"), "--json")
    assert code == 0, err
    (shown,) = jsonl(out)
    assert shown["replication"] == {"role": "SLAVE", "max_offset": shown["commitlog_max_offset"]}


def test_empty_slave_starts_where_ha_start_offset_says(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "m", master_config()) as master:
        put_some(master, 1000)
        assert master.max_phy_offset() > 3 * SEG
        config = slave_config(master, ha_start_offset=2 * SEG)
        with MessageStore.open(tmp_path / "s", config) as slave:
            wait_until(caught_up(master, slave), "the slave to catch up")
            end = master.max_phy_offset()
            assert slave.min_phy_offset() == 2 * SEG
            assert log_bytes(slave, 2 * SEG, end) == log_bytes(master, 2 * SEG, end)
            assert slave.wait_dispatched(WAIT) and master.wait_dispatched(WAIT)
            # the queues start at the first replicated message of each
            first = slave.min_offset_in_queue("TopicA", 0)
            assert (
                0 < first < slave.max_offset_in_queue("TopicA", 0) == master.max_offset_in_queue("TopicA", 0)
            )
            got = slave.get_message("g", "TopicA", 0, first, max_msgs=1).messages[0]
            assert got.physical_offset >= 2 * SEG
            want = master.get_message("g", "TopicA", 0, first, max_msgs=1).messages[0]
            assert (got.msg_id, got.body) == (want.msg_id, want.body)


def test_slave_behind_a_reclaimed_master_stops_and_says_why(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "m", master_config(file_reserved_time=0)) as master:
        with MessageStore.open(tmp_path / "s", slave_config(master)) as slave:
            put_some(master, 50)
            wait_until(caught_up(master, slave), "the slave to catch up")
        put_some(master, 1000, start=50)
        master.reclaim()
        assert master.min_phy_offset() > SEG  # the slave's end is gone from the master
        with MessageStore.open(tmp_path / "s", slave_config(master)) as slave:
            wait_until(lambda: slave_status(slave)["state"] == "master_cannot_serve", "the slave to stop")
            assert "re-seed" in str(slave_status(slave)["problem"])
            (problem,) = master_status(master)["problems"]  # type: ignore[misc]
            assert problem["problem"] == "request_below_min"


def _files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _index_contents(store: MessageStore) -> list[bytes]:
    """The index files' bytes in order (their names are each store's own clock's)."""
    return [p.read_bytes() for p in sorted(store.layout.index.iterdir()) if p.name.isdigit()]


@pytest.mark.parametrize("step", [None, 700, 100])
def test_slave_queues_and_index_are_byte_identical_to_the_masters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int | None
) -> None:
    """The slave parses replicated records in bulk: its consume queues (tags codes, delivery
    times of delayed messages, no entry for a PREPARED half) and its index files must hold the
    bytes the master's own dispatch wrote, across segment rolls and index files; whatever the
    step its dispatcher parses in (100: less than a record)."""
    if step is not None:
        monkeypatch.setattr("rocketstore.commitlog._REPLICA_PARSE_STEP", step)
    with MessageStore.open(tmp_path / "m", master_config()) as master:
        put_some(master, 200)  # before the slave: it gets them in its first frames
        with MessageStore.open(tmp_path / "s", slave_config(master)) as slave:
            batch = master.put_batch(
                "TopicB",
                [b"y" * 200] * 500,
                queue_ids=[i % 4 for i in range(500)],
                tags=[f"tag{i % 7}" if i % 5 else None for i in range(500)],
                keys=[f"b{i} c{i}" if i % 3 else None for i in range(500)],
            )
            assert batch.status is PutStatus.PUT_OK
            later = [
                Message("TopicC", b"d" * 50, tags="late", keys=[f"d{i}"], delay_level=5 + i % 3, queue_id=0)
                for i in range(60)
            ] + [Message("TopicT", b"half", keys=["tx"], sys_flag=TX_PREPARED, queue_id=0) for _ in range(5)]
            for result in master.put_messages(later):
                assert result.status is PutStatus.PUT_OK, result.status
            put_some(master, 200, start=200)
            wait_until(caught_up(master, slave), "the slave to catch up")
            assert slave.wait_dispatched(WAIT) and master.wait_dispatched(WAIT)
            assert master.max_phy_offset() > 3 * SEG  # segment rolls, BLANK records
            mine, theirs = _files_under(slave.layout.consume_queue), _files_under(master.layout.consume_queue)
            assert any(name.startswith("SCHEDULE_TOPIC_XXXX") for name in theirs)
            assert sorted(mine) == sorted(theirs)
            for name, data in theirs.items():
                assert mine[name] == data, name
            index = _index_contents(master)
            assert len(index) > 1  # the index rolled to another file
            assert _index_contents(slave) == index
