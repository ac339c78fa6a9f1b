"""A slave writes only records that check out: magic code, sizes adding up, body CRC, positions.

Unit tests of ``TransferCheck`` over a real log cut anywhere and damaged in each checked field,
and a slave against a fake master that sends a damaged transfer: it stops, says why in
``ha_status()``, holds exactly the records before the damage (verify clean), and a new
connection to a sound master resumes from there.
"""

from __future__ import annotations

import itertools
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from rocketstore import Message, MessageStore, PutStatus, StoreConfig
from rocketstore.codec.commitlog_record import decode_record
from rocketstore.codec.commitlog_scan import message_starts, record_fields
from rocketstore.errors import CorruptDataError
from rocketstore.ha.frames import encode_header
from rocketstore.ha.transfer_check import TransferCheck
from rocketstore.verify import verify_store

SEG = 65536
CONFIG = StoreConfig(
    commitlog_segment_size=SEG, consume_queue_entries=64, index_hash_slots=64, index_max_entries=256
)
WAIT = 30.0  # s: the bound of every wait below


@pytest.fixture(scope="module")
def master_log(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """Three segments of a log (the first two end with a BLANK) written by a store."""
    root = tmp_path_factory.mktemp("source") / "store"
    with MessageStore.open(root, CONFIG) as store:
        msgs = [
            Message("TopicT", bytes([i % 251]) * (100 + i % 300), queue_id=i % 4, keys=[f"k{i}"], tags="t")
            for i in range(600)
        ]
        assert {r.status for r in store.put_messages(msgs)} == {PutStatus.PUT_OK}
        end = store.max_phy_offset()
    data = b"".join((root / "commitlog" / f"{s:020d}").read_bytes() for s in range(0, end, SEG))
    assert end > 2 * SEG
    return data[:end]


def record_starts(log: bytes) -> list[int]:
    out = []
    for seg in range(0, len(log), SEG):
        starts, _, _ = message_starts(log[seg : seg + SEG])
        out += [seg + int(p) for p in starts]
    return out


def transfers(log: bytes, start: int, cuts: list[int]) -> list[tuple[int, bytes]]:
    """``log[start:]`` as transfers cut at ``cuts`` and at every segment boundary."""
    points = sorted({start, len(log), *(c for c in cuts if start < c < len(log))})
    points = sorted({*points, *range(start - start % SEG + SEG, len(log), SEG)})
    return [(a, log[a:b]) for a, b in itertools.pairwise(points)]


def run(check: TransferCheck, frames: list[tuple[int, bytes]]) -> bytes:
    out = bytearray()
    for offset, body in frames:
        pieces, bad = check.accept(offset, memoryview(body))
        for at, piece in pieces:
            assert at == len(out), (at, len(out))
            out += piece
        if bad is not None:
            raise bad
    return bytes(out)


@pytest.mark.parametrize("seed", range(6))
def test_a_log_cut_anywhere_comes_out_whole(master_log: bytes, seed: int) -> None:
    rng = random.Random(seed)
    cuts = sorted(rng.randrange(len(master_log)) for _ in range(rng.choice([3, 40, 400])))
    check = TransferCheck(SEG)
    got = run(check, transfers(master_log, 0, cuts))
    assert got == master_log[: len(got)]
    assert len(got) + check.held == len(master_log) and check.held == 0


def test_a_cut_record_is_held_back_until_whole(master_log: bytes) -> None:
    starts = record_starts(master_log)
    record, after = starts[10], starts[11]
    check = TransferCheck(SEG)
    assert run(check, [(0, master_log[: record + 5])]) == master_log[:record]  # not even TOTALSIZE
    assert check.held == 5
    assert check.accept(record + 5, memoryview(master_log[record + 5 : record + 50])) == ([], None)
    assert check.held == 50
    pieces, bad = check.accept(record + 50, memoryview(master_log[record + 50 : after]))
    assert [(at, bytes(p)) for at, p in pieces] == [(record, master_log[record:after])] and bad is None
    assert check.held == 0


@pytest.mark.parametrize("seed", range(4))
def test_transfers_checked_together_come_out_whole(master_log: bytes, seed: int) -> None:
    """A slave checks every transfer one read brought in one call: consecutive transfers of a
    segment, records cut anywhere between them and by the read before, give the same bytes."""
    rng = random.Random(seed)
    cuts = sorted(rng.randrange(len(master_log)) for _ in range(rng.choice([40, 400])))
    frames = transfers(master_log, 0, cuts)
    check = TransferCheck(SEG)
    got = bytearray()
    i = 0
    while i < len(frames):
        offset = frames[i][0]
        run_end = min(len(frames), i + rng.randrange(1, 12))
        bodies = [memoryview(body) for at, body in frames[i:run_end] if at // SEG == offset // SEG]
        pieces, bad = check.accept(offset, *bodies)
        assert bad is None
        for at, piece in pieces:
            assert at == len(got), (at, len(got))
            got += piece
        i += len(bodies)
    assert bytes(got) == master_log and check.held == 0


def test_the_good_records_before_a_bad_one_in_a_transfer_are_given(master_log: bytes) -> None:
    """The log ends at the last good byte: records ahead of the bad one, in the same transfer
    (or the same read's transfers), are written."""
    starts = record_starts(master_log)
    p = starts[20]
    damaged = _flip(master_log, p + 11)  # the stored CRC
    check = TransferCheck(SEG)
    first, second = memoryview(damaged[: starts[5] + 7]), memoryview(damaged[starts[5] + 7 : SEG])
    pieces, bad = check.accept(0, first, second)
    assert bad is not None and bad.offset == p and "body CRC mismatch" in str(bad)
    assert [(at, bytes(piece)) for at, piece in pieces] == [(0, master_log[:p])]


def _flip(log: bytes, at: int, mask: int = 0x01) -> bytes:
    b = bytearray(log)
    b[at] ^= mask
    return bytes(b)


def _put(log: bytes, at: int, fmt: str, value: int) -> bytes:
    b = bytearray(log)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


def _properties_at(log: bytes, p: int) -> int:
    return int(record_fields(log, np.array([p]))["properties_at"][0])


def _damages(log: bytes, p: int) -> dict[str, tuple[bytes, str]]:
    """Ways to damage the record at ``p``, and what the error must say."""
    rec = decode_record(log, p)
    body_at, props_len_at = rec.body_start, _properties_at(log, p) - 2
    return {
        "random bytes": (log[:p] + random.Random(1).randbytes(200) + log[p + 200 :], "offset"),
        "body byte": (_flip(log, body_at + 3), "body CRC mismatch"),
        "stored CRC": (_flip(log, p + 11), "body CRC mismatch"),
        "magic": (_flip(log, p + 7, 0x40), "unknown magic code"),
        "total size": (_put(log, p, ">i", rec.total_size + 8), "TOTALSIZE"),
        "body length": (_put(log, body_at - 4, ">i", rec.body_len - 1), "does not fit in TOTALSIZE"),
        "properties length": (_flip(log, props_len_at + 1), "PROPERTIESLENGTH"),
        "physical offset": (_put(log, p + 28, ">q", p + 1), "PHYSICALOFFSET"),
        "queue offset": (_put(log, p + 20, ">q", -5), "QUEUEOFFSET"),
        "zeros": (log[:p] + bytes(rec.total_size) + log[p + rec.total_size :], "unknown magic code"),
    }


@pytest.mark.parametrize(
    "kind",
    [
        "random bytes",
        "body byte",
        "stored CRC",
        "magic",
        "total size",
        "body length",
        "properties length",
        "physical offset",
        "queue offset",
        "zeros",
    ],
)
@pytest.mark.parametrize("cut_inside", [False, True])
def test_a_damaged_record_is_refused_and_nothing_of_it_given(
    master_log: bytes, kind: str, cut_inside: bool
) -> None:
    p = record_starts(master_log)[SEG // 400]  # a record in the first segment, not its first
    damaged, words = _damages(master_log, p)[kind]
    check = TransferCheck(SEG)
    given = bytearray()
    cuts = [p - 100, p + 30] if cut_inside else [p - 100]
    for offset, body in transfers(damaged, 0, cuts):
        pieces, bad = check.accept(offset, memoryview(body))
        for at, piece in pieces:
            assert at == len(given)
            given += piece
        if bad is not None:
            break
    assert bad is not None and bad.offset == p
    assert words in str(bad)
    assert bytes(given) == master_log[:p]
    assert check.accept(offset + len(body), memoryview(b""))[1] is bad  # and nothing after it


def test_a_blank_must_end_its_segment(master_log: bytes) -> None:
    _, walked, blank = message_starts(master_log[:SEG])
    assert blank
    damaged = _put(master_log, walked, ">i", SEG - walked - 8)
    with pytest.raises(CorruptDataError, match="BLANK record of TOTALSIZE") as caught:
        run(TransferCheck(SEG), transfers(damaged, 0, []))
    assert caught.value.offset == walked


def test_a_record_past_its_segment_is_refused(master_log: bytes) -> None:
    starts = [p for p in record_starts(master_log) if p < SEG]
    last = starts[-1]
    rec = decode_record(master_log, last)
    grown = _put(master_log, last, ">i", SEG - last + 100)
    with pytest.raises(CorruptDataError, match="runs past the end of its segment"):
        run(TransferCheck(SEG), transfers(grown, 0, []))
    assert rec.total_size < SEG - last


def test_what_a_property_flip_can_and_cannot_show(master_log: bytes) -> None:
    """The body CRC does not cover the properties: a changed byte inside them keeps every length
    and passes (nothing in the record format can show it); a changed PROPERTIESLENGTH is caught."""
    p = record_starts(master_log)[3]
    props_at = _properties_at(master_log, p)
    changed = _flip(master_log, props_at + 1)
    assert run(TransferCheck(SEG), transfers(changed, 0, [])) == changed
    with pytest.raises(CorruptDataError, match=r"PROPERTIESLENGTH|TOTALSIZE"):
        run(TransferCheck(SEG), transfers(_flip(master_log, props_at - 1), 0, []))


def test_a_transfer_that_does_not_continue_is_refused(master_log: bytes) -> None:
    check = TransferCheck(SEG)
    check.accept(0, memoryview(master_log[:1000]))
    pieces, bad = check.accept(1001, memoryview(master_log[1001:2000]))
    assert pieces == [] and bad is not None and "does not continue at 1000" in str(bad)


# --- a slave against a master that sends damage -------------------------------------------------
class StreamingMaster:
    """Answers a slave's first report with ``log[report:]`` in transfers cut at ``cuts`` (all at
    once, as a master streams), then keeps the link open with heartbeats."""

    def __init__(self, log: bytes, cuts: list[int]) -> None:
        self.log, self.cuts = log, cuts
        self.reports: list[int] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(WAIT)
        self.port = self.server.getsockname()[1]
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with self.server, self.server.accept()[0] as conn:
            conn.settimeout(0.05)
            buf = bytearray()
            while not self.reports and not self.stopping.is_set():
                self._read(conn, buf)
            if self.stopping.is_set():
                return
            start = self.reports[0]
            for offset, body in transfers(self.log, start, self.cuts):
                conn.sendall(encode_header(offset, len(body)) + body)
            while not self.stopping.is_set():
                try:
                    conn.sendall(encode_header(len(self.log), 0))
                except OSError:  # the slave stopped and closed the link
                    return
                self._read(conn, buf)

    def _read(self, conn: socket.socket, buf: bytearray) -> None:
        try:
            data = conn.recv(4096)
        except TimeoutError:
            return
        except OSError:
            self.stopping.set()
            return
        if not data:
            self.stopping.set()
            return
        buf += data
        while len(buf) >= 8:
            self.reports.append(int.from_bytes(buf[:8], "big", signed=True))
            del buf[:8]

    def stop(self) -> None:
        self.stopping.set()
        self._thread.join(WAIT)


def wait_until(condition: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def slave_status(store: MessageStore) -> dict[str, object]:
    status = store.ha_status()["slave"]
    assert isinstance(status, dict)
    return status


def log_bytes(root: Path) -> bytes:
    files = sorted(p for p in (root / "commitlog").iterdir() if p.name.isdigit())
    return b"".join(p.read_bytes() for p in files)


def test_a_slave_stops_at_a_damaged_transfer_and_resumes_from_the_last_good_byte(
    master_log: bytes, tmp_path: Path
) -> None:
    starts = record_starts(master_log)
    bad = starts[len(starts) // 2]  # the middle of the second segment
    damaged = _flip(master_log, bad + 11)  # its body CRC
    root = tmp_path / "slave"
    master = StreamingMaster(damaged, cuts=[bad + 40, bad + 5000])
    config = CONFIG.replace(broker_role="SLAVE", ha_master_address=f"127.0.0.1:{master.port}")
    try:
        with MessageStore.open(root, config) as slave:
            wait_until(lambda: slave_status(slave)["state"] == "bad_transfer", "the slave to stop")
            status = slave_status(slave)
            assert f"offset {bad}" in str(status["problem"]) and "body CRC mismatch" in str(status["problem"])
            assert slave.max_phy_offset() == bad
            wait_until(lambda: master.reports and master.reports[-1] == bad, "the slave's last ack")
            assert max(master.reports) == bad  # never acked a byte of the damaged record
            assert slave.wait_dispatched(WAIT)
    finally:
        master.stop()
    # nothing of the damaged record or after it was written
    on_disk = log_bytes(root)
    assert on_disk[:bad] == master_log[:bad]
    assert not any(on_disk[bad : bad - bad % SEG + SEG])
    assert verify_store(root, CONFIG).clean

    sound = StreamingMaster(master_log, cuts=[bad + 77])
    config = CONFIG.replace(broker_role="SLAVE", ha_master_address=f"127.0.0.1:{sound.port}")
    try:
        with MessageStore.open(root, config) as slave:
            wait_until(lambda: slave.max_phy_offset() == len(master_log), "the slave to catch up")
            assert sound.reports[0] == bad  # resumed from the last good byte
            assert slave.wait_dispatched(WAIT)
            assert slave_status(slave)["problem"] is None
    finally:
        sound.stop()
    assert log_bytes(root)[: len(master_log)] == master_log
    assert verify_store(root, CONFIG).clean
