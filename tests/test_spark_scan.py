"""The scan behind the Spark source, without Spark: every field of every record of the RocketMQ
fixtures, byte ranges that share records out exactly once, and bounds that prune but never
change which rows come out."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import ManualClock, Message, MessageStore, StoreConfig
from rocketstore.codec.commitlog_scan import range_starts
from rocketstore.spark.columns import arrow_schema, records_to_batch
from rocketstore.spark.scan import (
    ScanBounds,
    ScanOptions,
    StoreFiles,
    plan_commitlog,
    plan_queues,
    read_commitlog_range,
    read_queue_range,
)
from tests.conftest import FIXTURES


def _listing(name: str, kind: str) -> list[dict[str, Any]]:
    path = FIXTURES / f"{name}.expected.jsonl"
    return [r for r in map(json.loads, path.read_text("utf-8").splitlines()) if r.get("kind") == kind]


def _ms(ts: Any) -> int:
    return int(ts.timestamp() * 1000)


def _as_listing(row: dict[str, Any]) -> dict[str, Any]:
    """A source row in the listing's field names (the listing drops ']' from IPv6 hosts)."""
    body = bytes(row["body"])
    try:
        text: dict[str, str] = {"body_utf8": body.decode("utf-8")}
    except UnicodeDecodeError:
        text = {"body_hex": body.hex()}
    return {
        "topic": row["topic"],
        "queueId": row["queue_id"],
        "queueOffset": row["queue_offset"],
        "phyOffset": row["physical_offset"],
        "msgId": row["msg_id"],
        "uniqKey": row["uniq_key"],
        "keys": " ".join(row["keys"]) if row["keys"] is not None else None,
        "tags": row["tags"],
        "props": dict(row["properties"]),
        "bodyCRC": row["body_crc"],
        "flag": row["flag"],
        "sysFlag": row["sys_flag"],
        "bornTs": _ms(row["born_timestamp"]),
        "bornHost": row["born_host"],
        "storeTs": _ms(row["store_timestamp"]),
        "storeHost": row["store_host"],
        "reconsumeTimes": row["reconsume_times"],
        "preparedTxOffset": row["prepared_transaction_offset"],
        "bodyLen": len(body),
        **text,
    }


_COMPARED = (
    "topic",
    "queueId",
    "queueOffset",
    "phyOffset",
    "msgId",
    "uniqKey",
    "keys",
    "tags",
    "props",
    "bodyCRC",
    "flag",
    "sysFlag",
    "bornTs",
    "bornHost",
    "storeTs",
    "storeHost",
    "reconsumeTimes",
    "preparedTxOffset",
    "bodyLen",
)


def _expected(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row[k] for k in _COMPARED}
    out.update({k: row[k] for k in ("body_utf8", "body_hex") if k in row})
    return out


def _rows(batches: Any) -> list[dict[str, Any]]:
    return [r for b in batches for r in b.to_pylist()]


@pytest.mark.parametrize("name", ["store-sample", "store-sample-crash"])
def test_commitlog_scan_reads_every_record_as_rocketmq_lists_it(name: str) -> None:
    files = StoreFiles.at(FIXTURES / name)
    opts = ScanOptions()
    rows = _rows(
        b for part in plan_commitlog(files, ScanBounds(), 4) for b in read_commitlog_range(part, opts)
    )
    clrec = _listing(name, "clrec")
    assert [(r["physical_offset"], r["topic"], r["queue_id"], r["queue_offset"]) for r in rows] == [
        (c["offset"], c["topic"], c["queueId"], c["queueOffset"]) for c in clrec
    ]
    by_phy = {m["phyOffset"]: m for m in _listing(name, "msg")}
    listed = [_as_listing(r) for r in rows if r["physical_offset"] in by_phy]
    assert len(listed) == len(by_phy)
    for got in listed:
        assert got == _expected(by_phy[got["phyOffset"]])


@pytest.mark.parametrize("name", ["store-sample", "store-sample-crash"])
def test_queue_scan_reads_what_get_message_reads_in_queue_order(name: str) -> None:
    files = StoreFiles.at(FIXTURES / name)
    opts = ScanOptions()
    rows = _rows(b for part in plan_queues(files, ScanBounds()) for b in read_queue_range(files, part, opts))
    msgs = _listing(name, "msg")
    key = lambda m: (m["topic"], m["queueId"], m["queueOffset"])  # noqa: E731
    assert sorted(map(_as_listing, rows), key=key) == sorted(map(_expected, msgs), key=key)
    # within a queue, rows come in queue order
    for q in {(r["topic"], r["queue_id"]) for r in rows}:
        offsets = [r["queue_offset"] for r in rows if (r["topic"], r["queue_id"]) == q]
        assert offsets == sorted(offsets)


def test_without_bodies_the_body_is_null_and_the_rest_unchanged() -> None:
    files = StoreFiles.at(FIXTURES / "store-sample")
    full = _rows(
        b for p in plan_commitlog(files, ScanBounds(), 2) for b in read_commitlog_range(p, ScanOptions())
    )
    bare = _rows(
        b
        for p in plan_commitlog(files, ScanBounds(), 2)
        for b in read_commitlog_range(p, ScanOptions(include_body=False))
    )
    assert all(r["body"] is None for r in bare)
    assert [{**r, "body": None} for r in full] == bare


def test_body_as_string_is_the_utf8_text() -> None:
    seg = sorted((FIXTURES / "store-sample" / "commitlog").iterdir())[0].read_bytes()
    starts, damaged = range_starts(seg, 0, len(seg), len(seg), 0)
    assert damaged == []
    text = records_to_batch(seg, starts, body_as="string")
    binary = records_to_batch(seg, starts)
    assert text.schema == arrow_schema("string")
    for t, b in zip(text.column("body").to_pylist(), binary.column("body").to_pylist()):
        assert t == b.decode("utf-8", "replace")


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=65535), max_size=12))
def test_byte_ranges_share_out_every_record_exactly_once(cuts: list[int]) -> None:
    """Ranges cut anywhere, even inside records, together hold each record once."""
    path = sorted((FIXTURES / "store-sample" / "commitlog").iterdir())[1]
    seg, base = path.read_bytes(), int(path.name)
    whole, _ = range_starts(seg, 0, len(seg), len(seg), base)
    edges = [0, *sorted(set(cuts)), len(seg)]
    pieces = [range_starts(seg, a, b, len(seg), base)[0] for a, b in itertools.pairwise(edges)]
    assert np.array_equal(np.concatenate(pieces), whole)


def test_a_damaged_record_is_reported_and_stepped_over(tmp_path: Path) -> None:
    path = sorted((FIXTURES / "store-sample" / "commitlog").iterdir())[0]
    seg = bytearray(path.read_bytes())
    whole, _ = range_starts(seg, 0, len(seg), len(seg), 0)
    victim = int(whole[3])
    seg[victim + 4] ^= 0xFF  # its MAGICCODE
    starts, damaged = range_starts(seg, 0, len(seg), len(seg), 0)
    assert damaged == [(victim, int(whole[4]))]
    assert np.array_equal(starts, np.delete(whole, 3))


def _store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    cfg = StoreConfig(commitlog_segment_size=64 * 1024, consume_queue_entries=50)
    clock = ManualClock(1_800_000_000_000)
    with MessageStore.open(root, cfg, clock=clock) as store:
        msgs = [
            Message(
                topic=f"T{i % 3}", body=b"x" * (i % 50), tags=f"t{i % 4}", keys=(f"k{i}",), queue_id=i % 4
            )
            for i in range(3000)
        ]
        for k in range(0, len(msgs), 250):
            assert all(r.ok for r in store.put_messages(msgs[k : k + 250]))
            clock.advance(1000)  # store times rise from batch to batch, and so from segment to segment
        assert store.wait_dispatched(10)
    return root


BOUNDS = [
    ScanBounds(topics=frozenset({"T1"})),
    ScanBounds(queue_ids=frozenset({0, 3})),
    ScanBounds(topics=frozenset({"T2"}), queue_offset=(10, 90)),
    ScanBounds(physical_offset=(70_000, 150_000)),
    ScanBounds(physical_offset=(None, 1)),
    ScanBounds(topics=frozenset({"nope"})),
]


@pytest.mark.parametrize("bounds", BOUNDS)
def test_bounds_prune_but_never_change_the_rows(tmp_path: Path, bounds: ScanBounds) -> None:
    files = StoreFiles.at(_store(tmp_path))
    every = _rows(
        b for p in plan_commitlog(files, ScanBounds(), 3) for b in read_commitlog_range(p, ScanOptions())
    )
    assert len(every) == 3000

    def keep(r: dict[str, Any]) -> bool:
        def inside(v: int, window: tuple[int | None, int | None]) -> bool:
            return (window[0] is None or v >= window[0]) and (window[1] is None or v < window[1])

        return (
            (bounds.topics is None or r["topic"] in bounds.topics)
            and (bounds.queue_ids is None or r["queue_id"] in bounds.queue_ids)
            and inside(r["queue_offset"], bounds.queue_offset)
            and inside(r["physical_offset"], bounds.physical_offset)
        )

    wanted = [r for r in every if keep(r)]
    opts = ScanOptions(bounds=bounds)
    via_log = _rows(b for p in plan_commitlog(files, bounds, 3) for b in read_commitlog_range(p, opts))
    assert via_log == wanted
    via_queues = _rows(b for p in plan_queues(files, bounds) for b in read_queue_range(files, p, opts))
    key = lambda r: r["physical_offset"]  # noqa: E731
    assert sorted(via_queues, key=key) == wanted


def test_time_bounds_prune_segments_and_keep_exactly_the_window(tmp_path: Path) -> None:
    files = StoreFiles.at(_store(tmp_path))
    every = _rows(
        b for p in plan_commitlog(files, ScanBounds(), 1) for b in read_commitlog_range(p, ScanOptions())
    )
    times = sorted({_ms(r["store_timestamp"]) for r in every})
    lo, hi = times[len(times) // 3], times[2 * len(times) // 3]
    bounds = ScanBounds(store_time=(lo, hi))
    assert len(plan_commitlog(files, bounds, 1)) < len(plan_commitlog(files, ScanBounds(), 1))
    got = _rows(
        b
        for p in plan_commitlog(files, bounds, 1)
        for b in read_commitlog_range(p, ScanOptions(bounds=bounds))
    )
    assert got == [r for r in every if lo <= _ms(r["store_timestamp"]) < hi]


def test_the_last_segment_is_read_up_to_its_valid_end(tmp_path: Path) -> None:
    """A torn record at the end of the newest segment (a writer mid-append) is not read."""
    root = _store(tmp_path)
    last = sorted((root / "commitlog").iterdir())[-1]
    files = StoreFiles.at(root)
    before = _rows(
        b for p in plan_commitlog(files, ScanBounds(), 1) for b in read_commitlog_range(p, ScanOptions())
    )
    end = max(r["physical_offset"] for r in before) - int(last.name)
    end += int.from_bytes(last.read_bytes()[end : end + 4], "big")
    with last.open("r+b") as f:  # half a record: TOTALSIZE and MAGIC, then nothing
        f.seek(end)
        f.write((200).to_bytes(4, "big") + bytes.fromhex("daa320a7"))
    after = _rows(
        b for p in plan_commitlog(files, ScanBounds(), 1) for b in read_commitlog_range(p, ScanOptions())
    )
    assert after == before
    assert pa.Table.from_pylist(after).num_rows == 3000
