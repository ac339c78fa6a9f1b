"""Fuzz target: the commitlog record decoder and the segment scans, over hostile bytes.

    python fuzz/target_commitlog_record.py [libFuzzer options] [corpus dir]

Contract: ``decode_record``, ``body_span``, ``SegmentScan``, ``scan_extent``, ``message_starts``,
``find_record_start``, ``range_starts``, ``well_formed`` and ``gather_records`` raise nothing but
CorruptDataError, and the compiled scans agree with the decoder: ``scan_extent`` stops where
iterating a ``SegmentScan`` stops, ``well_formed`` says yes exactly for the records
``decode_record`` accepts, ``body_span`` finds the body ``decode_record`` finds.
"""

from __future__ import annotations

import contextlib

import numpy as np

import _harness
from rocketstore.codec import commitlog_record, commitlog_scan
from rocketstore.errors import CorruptDataError

_harness.instrument(commitlog_record, commitlog_scan)
atheris = _harness.atheris


def seeds() -> list[bytes]:
    segment = (_harness.FIXTURE / "commitlog" / "00000000000000000000").read_bytes()
    starts, _, _ = commitlog_scan.message_starts(segment)
    cuts = [int(s) for s in starts[:6]] + [int(starts[-1])]
    return [b"\x00" + segment[a : a + 700] for a in cuts] + [b"\x01" + segment[:4096]]


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    check_crc = fdp.ConsumeBool()
    buf = fdp.ConsumeBytes(fdp.remaining_bytes())
    size = len(buf)
    end = size if not buf or buf[0] & 1 else max(0, size - buf[0])

    # the decoder, at the start and at every position a scan may look at
    decoded = {}
    for pos in {0, min(4, size), size // 2}:
        try:
            rec = commitlog_record.decode_record(buf, pos, end, check_crc=check_crc)
        except CorruptDataError:
            continue
        decoded[pos] = rec
        if commitlog_record.body_span(buf, pos) != (rec.body_start, rec.body_len):
            raise AssertionError(f"body_span disagrees with decode_record at {pos}")
        if rec.total_size != commitlog_record.record_length(
            rec.sys_flag,
            rec.body_len,
            len(buf_topic(buf, rec)),
            len_props(buf, rec),
            rec.magic == commitlog_record.MESSAGE_MAGIC_V2,
        ):
            raise AssertionError("decoded record's parts do not add up to TOTALSIZE")
    with contextlib.suppress(CorruptDataError):
        commitlog_record.body_span(buf, size // 3)

    # the Python walk and the compiled one
    scan = commitlog_record.SegmentScan(buf, 0, end, check_crc=check_crc)
    walked = sum(1 for _ in scan)
    extent = commitlog_scan.scan_extent(buf, 0, end, check_crc=check_crc)
    if (extent.records, extent.position, extent.stop) != (walked, scan.position, scan.stop):
        raise AssertionError(
            f"scan_extent {extent.records, extent.position, extent.stop} != SegmentScan "
            f"{walked, scan.position, scan.stop}"
        )

    starts, walked_to, _ = commitlog_scan.message_starts(buf, 0, end)
    if walked_to > end or any(int(s) >= walked_to for s in starts):
        raise AssertionError("message_starts walked past its end")
    found = commitlog_scan.find_record_start(np.frombuffer(buf, dtype=np.uint8), 0, size, 0)
    if not -1 <= found < size:
        raise AssertionError(f"find_record_start returned {found}")
    begin = fdp_int(buf, 1) % (size + 1)
    starts2, damaged = commitlog_scan.range_starts(buf, begin, size, size, 0)
    if any(not 0 <= int(s) < size for s in starts2) or any(not 0 <= a <= b <= size for a, b in damaged):
        raise AssertionError("range_starts returned positions outside the segment")

    positions = np.array([*sorted(decoded), size // 2, 3], dtype=np.int64)
    sizes = np.array(
        [decoded[p].total_size for p in sorted(decoded)] + [fdp_int(buf, 5), 120], dtype=np.int64
    )
    ok = commitlog_scan.well_formed(buf, positions, sizes)
    for i, p in enumerate(sorted(decoded)):
        if not ok[i] and decoded[p].position + decoded[p].total_size <= size:
            raise AssertionError(f"well_formed refuses the record decode_record accepts at {p}")
    gathered = commitlog_scan.gather_records(buf, positions, sizes, size)
    readable = gathered[4]
    for i in range(readable):
        if not 0 <= gathered[2][i] <= gathered[2][i] + gathered[3][i] <= size:
            raise AssertionError("gather_records located a body outside the buffer")


def buf_topic(buf: bytes, rec: commitlog_record.DecodedRecord) -> bytes:
    """The raw topic bytes of a decoded record (its length, as stored)."""
    p = rec.body_start + rec.body_len
    if rec.magic == commitlog_record.MESSAGE_MAGIC_V2:
        n = int.from_bytes(buf[p : p + 2], "big")
        return buf[p + 2 : p + 2 + n]
    return buf[p + 1 : p + 1 + buf[p]]


def len_props(buf: bytes, rec: commitlog_record.DecodedRecord) -> int:
    p = rec.body_start + rec.body_len
    p += (
        (2 + int.from_bytes(buf[p : p + 2], "big"))
        if rec.magic == commitlog_record.MESSAGE_MAGIC_V2
        else 1 + buf[p]
    )
    return int.from_bytes(buf[p : p + 2], "big", signed=True)


def fdp_int(buf: bytes, at: int) -> int:
    """A small int taken from the buffer itself (so the fuzzer steers it with the same bytes)."""
    return int.from_bytes(buf[at : at + 2], "big") if len(buf) >= at + 2 else 0


if __name__ == "__main__":
    _harness.fuzz(test_one_input, seeds)
