"""scan_extent (the fast recovery scan) agrees with SegmentScan (the record-by-record decoder)."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import jit
from rocketstore.codec import commitlog_record as cl
from rocketstore.codec import commitlog_scan
from rocketstore.codec.commitlog_scan import record_header, record_layout, scan_extent
from rocketstore.codec.crc import crc32, crc32_function

HOSTS = (b"\x7f\x00\x00\x01", b"\xfe\x80" + bytes(13) + b"\x01")


def record(rng: random.Random) -> bytes:
    born, store = rng.choice(HOSTS), rng.choice(HOSTS)
    flag = (cl.SYSFLAG_BORNHOST_V6 if len(born) == 16 else 0) | (
        cl.SYSFLAG_STOREHOST_V6 if len(store) == 16 else 0
    )
    return cl.encode_message(
        body=rng.randbytes(rng.randint(0, 300)),
        topic=b"T" * rng.randint(1, 20),
        properties=rng.randbytes(rng.randint(0, 40)).replace(b"\x01", b"a").replace(b"\x02", b"b"),
        queue_id=rng.randint(0, 7),
        flag=0,
        sys_flag=flag,
        born_timestamp=1,
        born_addr=born,
        born_port=1,
        store_addr=store,
        store_port=2,
    )


def segment(seed: int, size: int = 8192) -> bytearray:
    rng = random.Random(seed)
    buf = bytearray(size)
    pos = 0
    while True:
        rec = record(rng)
        if pos + len(rec) + 8 > size:
            if rng.random() < 0.5:
                buf[pos : pos + 8] = cl.encode_blank(size - pos)
            return buf
        buf[pos : pos + len(rec)] = rec
        pos += len(rec)


def assert_same(buf: bytearray, check_crc: bool) -> None:
    slow = cl.SegmentScan(buf, 0, len(buf), check_crc=check_crc)
    count = sum(1 for _ in slow)
    fast = scan_extent(buf, 0, len(buf), check_crc=check_crc)
    assert (fast.records, fast.position, fast.stop, fast.blank_size) == (
        count,
        slow.position,
        slow.stop,
        slow.blank_size,
    )
    assert (fast.error is None) == (slow.error is None)
    if fast.error is not None and slow.error is not None:
        assert fast.error.offset == slow.error.offset and str(fast.error) == str(slow.error)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    flips=st.lists(st.tuples(st.integers(0, 8191), st.integers(1, 255)), max_size=4),
    check_crc=st.booleans(),
)
def test_agrees_with_segment_scan_on_damaged_segments(
    seed: int, flips: list[tuple[int, int]], check_crc: bool
) -> None:
    buf = segment(seed)
    for pos, xor in flips:
        buf[pos] ^= xor
    assert_same(buf, check_crc)


@pytest.mark.parametrize("seed", range(20))
def test_agrees_on_truncated_segments(seed: int) -> None:
    buf = segment(seed)
    cut = random.Random(seed).randrange(len(buf))
    buf[cut:] = bytes(len(buf) - cut)
    assert_same(buf, True)


def test_random_garbage_always_terminates() -> None:
    rng = random.Random(7)
    for _ in range(200):
        buf = bytearray(rng.randbytes(rng.randint(0, 600)))
        if len(buf) >= 8 and rng.random() < 0.5:
            buf[4:8] = cl.MESSAGE_MAGIC_V1.to_bytes(4, "big", signed=True)
        assert_same(buf, True)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), lead=st.integers(0, 9))
def test_crc_kernel_is_zlib_crc32(data: bytes, lead: int) -> None:
    buf = np.frombuffer(bytes(lead) + data, dtype=np.uint8)
    assert crc32(buf, lead, len(data), crc32_function()) == zlib.crc32(data)
    assert jit.interpret(crc32, buf, lead, len(data), crc32_function()) == zlib.crc32(data)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=64), start=st.integers(-100, 100), length=st.integers(-100, 200))
def test_crc_kernel_never_reads_outside_its_array(data: bytes, start: int, length: int) -> None:
    # lengths read from a damaged record: the CRC is the part of the run inside the array's
    buf = np.frombuffer(data, dtype=np.uint8)
    begin = min(max(start, 0), len(data))
    inside = data[begin : min(max(start + length, begin), len(data))]
    assert crc32(buf, start, length, crc32_function()) == zlib.crc32(inside)


@pytest.mark.parametrize("seed", range(8))
def test_record_header_and_layout_read_what_decode_record_reads(seed: int) -> None:
    """The compiled field readers verify's kernels use, on records with either host width, a
    ROLLBACK flag, and queue ids and offsets that need every byte of their fields."""
    rng = random.Random(seed)
    born, store = rng.choice(HOSTS), rng.choice(HOSTS)
    sys_flag = (
        (cl.SYSFLAG_BORNHOST_V6 if len(born) == 16 else 0)
        | (cl.SYSFLAG_STOREHOST_V6 if len(store) == 16 else 0)
        | rng.choice((cl.TX_NOT, cl.TX_ROLLBACK))
    )
    lead = rng.randint(0, 64)
    rec = cl.encode_message(
        body=rng.randbytes(rng.randint(0, 300)),
        topic=b"Topic" * rng.randint(1, 20),
        properties=b"TAGS\x01a\x02KEYS\x01k1 k2",
        queue_id=rng.randint(0, (1 << 31) - 1),
        flag=0,
        sys_flag=sys_flag,
        born_timestamp=1,
        born_addr=born,
        born_port=1,
        store_addr=store,
        store_port=2,
        store_timestamp=rng.randint(0, 1 << 50),
        queue_offset=rng.randint(0, (1 << 63) - 1),
    )
    buf = bytes(lead) + bytes(rec)
    d = cl.decode_record(buf, lead)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    assert record_header(u8, lead) == (d.total_size, d.queue_id, d.queue_offset, d.sys_flag)
    topic_at, topic_len, props_at, props_len, store_ts = record_layout(u8, lead)
    assert buf[topic_at : topic_at + topic_len].decode() == d.topic
    assert buf[props_at : props_at + props_len].decode() == d.properties
    assert store_ts == d.store_timestamp


def test_a_record_a_writer_finishes_between_two_reads_is_walked_past(monkeypatch: pytest.MonkeyPatch) -> None:
    """A segment being written, read through a mapping of the same file: the compiled walk finds
    a record half copied, and the check that reads it again finds it whole (the writer finished
    it meanwhile). The walk goes on from it, and finds what a walk after the copy finds."""
    whole = segment(3)
    second = int.from_bytes(whole[0:4], "big")
    buf = bytearray(whole)
    buf[second + 8] ^= 0xFF  # its body CRC not yet right
    real_scan = commitlog_scan._scan

    def scan_then_finish(*args: object) -> object:
        found = real_scan(*args)
        buf[second + 8] = whole[second + 8]  # the writer's copy lands
        return found

    monkeypatch.setattr(commitlog_scan, "interpreted", lambda steps: False)  # the compiled walk
    monkeypatch.setattr(commitlog_scan, "_scan", scan_then_finish)
    ext = scan_extent(buf, check_crc=True)
    slow = cl.SegmentScan(whole, 0, len(whole), check_crc=True)
    assert (ext.records, ext.position, ext.stop, ext.error) == (
        sum(1 for _ in slow),
        slow.position,
        slow.stop,
        None,
    )
    assert ext.records > 2
