"""Replication against a recorded session between two RocketMQ 4.9.8 stores (fixtures/ha-session).

The slave side: a fake master on loopback plays the recorded master->slave frames (bodies cut from
the recorded master's commitlog, checked against the recorded sha256) in answer to a rocketstore
slave's reports; the slave must end with the RocketMQ slave's commitlog bytes and read back
exactly what RocketMQ read back from its slave. The master side: a fake slave sends the recorded
reports to a rocketstore master opened on the recorded master's store, and must get the recorded
frames, byte for byte.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rocketstore import ManualClock, MessageStore, StoreConfig
from rocketstore.codec.commitlog_scan import message_starts
from rocketstore.ha.frames import (
    HEADER_SIZE,
    MAX_BODY,
    FrameReader,
    encode_header,
    encode_report,
    last_report,
)
from tests.conftest import FIXTURES, copy_fixture
from tests.test_rocketmq_fixtures import _fields, java_host

SESSION = FIXTURES / "ha-session"
GEOMETRY = StoreConfig(
    commitlog_segment_size=65536, consume_queue_entries=64, index_hash_slots=64, index_max_entries=256
)
SEG = 65536
WAIT = 20.0  # s: the bound of every wait below


def transcript() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (SESSION / "transcript.jsonl").read_text("utf-8").splitlines()]


def master_frames() -> list[tuple[int, bytes]]:
    """Every recorded master->slave frame, its body cut from the recorded master's commitlog."""
    frames = []
    for row in transcript():
        if row.get("dir") != "m2s":
            continue
        offset, size = row["offset"], row["body_len"]
        body = master_log_bytes(offset, size)
        assert hashlib.sha256(body).hexdigest() == row["body_sha256"]
        frames.append((offset, body))
    return frames


def master_log_bytes(offset: int, size: int) -> bytes:
    seg = offset - offset % SEG
    data = (SESSION / "master-store" / "commitlog" / f"{seg:020d}").read_bytes()
    return data[offset - seg : offset - seg + size]


def expected(kind: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (SESSION / "slave.expected.jsonl").read_text("utf-8").splitlines()]
    return [r for r in rows if r.get("kind") == kind]


def wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def whole_records_end(offset: int) -> int:
    """Where the last whole record of the recorded master's log before ``offset`` ends: what a
    slave that has taken the bytes up to ``offset`` reports (it acks only whole records)."""
    seg = offset - offset % SEG
    segment = (SESSION / "master-store" / "commitlog" / f"{seg:020d}").read_bytes()
    starts, walked_to, _ = message_starts(segment)
    return seg + max(int(p) for p in [*starts, walked_to] if p <= offset - seg)


class FakeMaster:
    """Plays recorded frames to one slave: each frame is sent once the slave's last report says
    it holds every whole record before it (the first one answers the first report)."""

    def __init__(self, frames: list[tuple[int, bytes]], paced: bool = True) -> None:
        self.frames = frames
        self.paced = paced  # False: every frame at once after the first report, as a master streams
        self.reports: list[int] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(WAIT)
        self.port = self.server.getsockname()[1]
        self.done = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.server.accept()
            conn.settimeout(0.05)
            buf = bytearray()
            deadline = time.monotonic() + WAIT
            for i, (offset, body) in enumerate(self.frames):
                while not self.reports or (
                    self.paced and i > 0 and self.reports[-1] != whole_records_end(offset)
                ):
                    if time.monotonic() > deadline:
                        raise AssertionError(f"slave never reported {offset}: {self.reports}")
                    self._read(conn, buf)
                conn.sendall(encode_header(offset, len(body)) + body)
            end = self.frames[-1][0] + len(self.frames[-1][1])
            while self.reports[-1] != end:
                if time.monotonic() > deadline:
                    raise AssertionError(f"slave never reported {end}: {self.reports}")
                self._read(conn, buf)
            self.done.set()
            conn.close()
        except BaseException as exc:
            self.error = exc
            self.done.set()
        finally:
            self.server.close()

    def _read(self, conn: socket.socket, buf: bytearray) -> None:
        try:
            data = conn.recv(4096)
        except TimeoutError:
            return
        if not data:
            raise AssertionError("the slave closed the connection")
        buf += data
        # every report, not only the last one of a read: the test checks each
        while len(buf) >= 8:
            self.reports.append(int.from_bytes(buf[:8], "big", signed=True))
            del buf[:8]


@pytest.fixture(scope="module")
def replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MessageStore, FakeMaster]]:
    master = FakeMaster(master_frames())
    config = GEOMETRY.replace(broker_role="SLAVE", ha_master_address=f"127.0.0.1:{master.port}")
    store = MessageStore.open(tmp_path_factory.mktemp("slave") / "store", config)
    try:
        assert master.done.wait(WAIT)
        assert master.error is None, master.error
        assert store.wait_dispatched(WAIT)
        yield store, master
    finally:
        store.close()


def test_slave_reports_as_the_recorded_slave(replica: tuple[MessageStore, FakeMaster]) -> None:
    _, master = replica
    recorded = [r["offset"] for r in transcript() if r.get("dir") == "s2m"]
    assert _distinct(recorded) == [0, 131072, 150983, 183751, 196608, 201820]
    # RocketMQ's slave acked 183751, the end of a transfer that cuts a record; this one holds a
    # cut record back until it is whole and checked, and acks where the record starts
    assert _distinct(master.reports) == [0, 131072, 150983, 183376, 196608, 201820]


def _distinct(values: list[int]) -> list[int]:
    return [v for i, v in enumerate(values) if i == 0 or v != values[i - 1]]


def test_slave_commitlog_is_byte_identical(replica: tuple[MessageStore, FakeMaster]) -> None:
    store, _ = replica
    assert (store.min_phy_offset(), store.max_phy_offset()) == (131072, 201820)
    # (a pre-allocated empty successor may exist, or be half made under a temporary name: the
    # allocator creates it ahead of need)
    names = [p.name for p in store.layout.commitlog.iterdir() if p.name.isdigit()]
    files = sorted(name for name in names if int(name) < 201820)
    assert files == [r["name"] for r in expected("commitlog_file")]
    first = (store.layout.commitlog / "00000000000000131072").read_bytes()
    assert first == master_log_bytes(131072, SEG)  # BLANK record and zero tail included
    second = (store.layout.commitlog / "00000000000000196608").read_bytes()
    assert second[:5212] == master_log_bytes(196608, 5212)
    assert second[5212:] == bytes(SEG - 5212)


def test_slave_reads_back_what_rocketmq_read(replica: tuple[MessageStore, FakeMaster]) -> None:
    store, _ = replica
    for q in expected("queue"):
        got = (
            store.min_offset_in_queue(q["topic"], q["queueId"]),
            store.max_offset_in_queue(q["topic"], q["queueId"]),
        )
        assert got == (q["minOffset"], q["maxOffset"]), q
    rows = expected("msg")
    assert len(rows) == 140
    for row in rows:
        result = store.get_message("g", row["topic"], row["queueId"], row["offset"], max_msgs=1)
        assert len(result.messages) == 1, (row["topic"], row["queueId"], row["offset"], result.status)
        m = result.messages[0]
        want = {k: row[k] for k in _fields(m)}
        want["bornHost"], want["storeHost"] = java_host(want["bornHost"]), java_host(want["storeHost"])
        assert _fields(m) == want
        body = row["body_utf8"].encode("utf-8") if "body_utf8" in row else bytes.fromhex(row["body_hex"])
        assert m.body == body
    for rec in expected("clrec"):
        m = store.look_message_by_offset(rec["offset"])
        assert m is not None and (m.store_size, m.queue_offset, m.store_timestamp) == (
            rec["size"],
            rec["queueOffset"],
            rec["storeTs"],
        )
    queries = expected("query")
    assert queries
    for q in queries:
        got = {
            (m.queue_id, m.queue_offset, m.physical_offset) for m in store.query_message(q["topic"], q["key"])
        }
        assert got == {(r["queueId"], r["queueOffset"], r["phyOffset"]) for r in q["results"]}, q["key"]


def test_slave_refuses_puts_and_says_why(replica: tuple[MessageStore, FakeMaster]) -> None:
    from rocketstore import Message, PutStatus

    store, _ = replica
    before = store.max_phy_offset()
    assert store.put_message(Message("TopicA", b"x", queue_id=0)).status is PutStatus.SERVICE_NOT_AVAILABLE
    assert store.max_phy_offset() == before
    status = store.ha_status()
    assert status["role"] == "SLAVE"
    slave = status["slave"]
    assert isinstance(slave, dict) and slave["slave_offset"] == 201820 and slave["master_offset"] == 201820


# --- the master side -------------------------------------------------------------------------
def recorded_master_store(tmp_path: Path, end: int | None) -> Path:
    """The recorded master's store; with ``end``, as it stood when its log ended there: later
    bytes zeroed and later segments gone (recovery then trims its queues and index)."""
    root = copy_fixture("ha-session/master-store", tmp_path)
    if end is not None:
        for path in sorted((root / "commitlog").iterdir()):
            start = int(path.name)
            if start >= end:
                path.unlink()
            elif start + SEG > end:
                data = bytearray(path.read_bytes())
                data[end - start :] = bytes(SEG - (end - start))
                path.write_bytes(bytes(data))
    return root


def stopped_clock() -> ManualClock:
    """Stopped at the master's last store time: none of its delayed messages is due (the master
    must not write while its frames are compared), and heartbeats come when the test says."""
    return ManualClock(max(r["storeTs"] for r in expected("clrec")))


class FakeSlave:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.reader = FrameReader()

    def report(self, offset: int) -> None:
        self.sock.sendall(encode_report(offset))

    def frame(self) -> tuple[int, bytes]:
        deadline = time.monotonic() + WAIT
        while True:
            frame = self.reader.take()
            if frame is not None:
                return frame
            if time.monotonic() > deadline:
                raise AssertionError("no frame from the master")
            data = self.sock.recv(65536)
            if not data:
                raise AssertionError("the master closed the connection")
            self.reader.feed(data)

    def data_frames(self, count: int) -> list[tuple[int, bytes]]:
        """The next ``count`` frames with a body (heartbeats depend on timing: checked apart)."""
        frames: list[tuple[int, bytes]] = []
        while len(frames) < count:
            offset, body = self.frame()
            if body:
                frames.append((offset, body))
        return frames


def test_master_answers_recorded_reports_with_recorded_frames(tmp_path: Path) -> None:
    recorded = [(o, b) for o, b in master_frames() if b]
    # When the slave first reported, the master's log ended at 150983, and RocketMQ sent it its
    # last segment. A rocketstore master sends an empty slave its whole log: given only that
    # segment (the older ones reclaimed), it must send the same bytes.
    root = recorded_master_store(tmp_path / "first", 150983)
    for name in ("00000000000000000000", "00000000000000065536"):
        (root / "commitlog" / name).unlink()
    config = GEOMETRY.replace(ha_listen_port=0, ha_listen_host="127.0.0.1")
    with MessageStore.open(root, config, clock=stopped_clock()) as master:
        assert master.min_phy_offset() == 131072
        slave = FakeSlave(master.ha_port or 0)
        slave.report(0)
        assert slave.data_frames(1) == recorded[:1]
        slave.report(150983)
        slave.sock.close()
    # Later the master's log grew to 201820; a slave at 150983 gets the recorded three frames: a
    # chunk cut at haTransferBatchSize, one ending at the segment end (BLANK and tail), the next.
    root = recorded_master_store(tmp_path / "second", None)
    clock = stopped_clock()
    with MessageStore.open(root, config, clock=clock) as master:
        slave = FakeSlave(master.ha_port or 0)
        slave.report(150983)
        assert slave.data_frames(3) == recorded[1:]
        for offset in (183751, 196608, 201820):
            slave.report(offset)
        # idle for haSendHeartbeatInterval: a heartbeat with the next offset, as the recorded one
        clock.advance(5001)
        assert slave.frame() == (201820, b"")
        wait_until(lambda: _acked(master) == 201820, "the master to count the acks")
        slave.sock.close()


def _acked(store: MessageStore) -> object:
    status = store.ha_status()["master"]
    assert isinstance(status, dict)
    return status["acked_offset"]


# --- the codec -------------------------------------------------------------------------------
def test_frame_reader_sees_the_header_before_the_body() -> None:
    reader = FrameReader()
    wire = encode_header(131072, 5) + b"hello" + encode_header(131077, 0)
    reader.feed(wire[:HEADER_SIZE])
    assert reader.header == (131072, 5) and reader.take() is None
    reader.feed(wire[HEADER_SIZE:])
    assert reader.take() == (131072, b"hello")
    assert reader.take() == (131077, b"")
    assert reader.take() is None and reader.header is None


def test_frame_reader_bodies_stay_valid_as_its_buffer_is_replaced() -> None:
    """Bodies are views of the receive buffer: a frame larger than the buffer, reads cut
    anywhere and frames kept across many buffers must all read back as sent."""
    rng = np.random.default_rng(3)
    bodies = [rng.bytes(int(n)) for n in rng.integers(0, 300_000, 60)] + [rng.bytes(MAX_BODY)]
    offsets = np.cumsum([0] + [len(b) for b in bodies])
    wire = b"".join(encode_header(int(o), len(b)) + b for o, b in zip(offsets, bodies))
    reader = FrameReader(capacity=100_000)
    got: list[tuple[int, memoryview]] = []
    at = 0
    for cut in rng.integers(1, 200_000, 1000):  # as recv_into would fill the space offered
        space = reader.space()
        n = min(int(cut), len(space), len(wire) - at)
        space[:n] = wire[at : at + n]
        reader.received(n)
        at += n
        while (frame := reader.take()) is not None:
            got.append(frame)
        if at == len(wire):
            break
    assert at == len(wire) and reader.header is None
    assert [(o, bytes(b)) for o, b in got] == [(int(o), b) for o, b in zip(offsets, bodies)]


def test_frame_reader_rejects_an_impossible_size() -> None:
    reader = FrameReader()
    with pytest.raises(ValueError, match="declares a body of -1 bytes"):
        reader.feed(b"\x00" * 8 + b"\xff\xff\xff\xff")


def test_only_the_last_complete_report_of_a_read_counts() -> None:
    buf = bytearray(encode_report(5) + encode_report(9) + b"\x00\x00")
    assert last_report(buf) == 9
    assert buf == bytearray(b"\x00\x00")
    assert last_report(buf) is None


def test_slave_dispatches_across_frames_cut_anywhere(tmp_path: Path) -> None:
    """Frames may cut records and BLANK markers anywhere (RocketMQ cuts at 32 KiB): one ending
    inside the BLANK of segment 131072, one inside a record, must still dispatch every message."""
    segment = (SESSION / "master-store" / "commitlog" / f"{131072:020d}").read_bytes()
    blank_at = 131072 + message_starts(segment, 0, SEG)[1]
    cuts = [131072, 140000, blank_at + 8, 196608, 199000, 201820]  # + 8: size and magic in
    frames = [(a, master_log_bytes(a, b - a)) for a, b in itertools.pairwise(cuts)]
    master = FakeMaster(frames, paced=False)
    config = GEOMETRY.replace(broker_role="SLAVE", ha_master_address=f"127.0.0.1:{master.port}")
    with MessageStore.open(tmp_path / "s", config) as store:
        assert master.done.wait(WAIT) and master.error is None, master.error
        assert store.wait_dispatched(WAIT)
        for q in expected("queue"):
            got = store.max_offset_in_queue(q["topic"], q["queueId"])
            assert got == q["maxOffset"], q
