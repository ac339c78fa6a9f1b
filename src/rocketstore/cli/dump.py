"""``rocketstore dump FILE``: one raw store file, entry by entry (kafka-dump-log's job).

Every byte is read through the codec module that owns the format (``codec.commitlog_record``,
``codec.consume_queue_entry``, ``codec.index_layout``); nothing here knows a layout. The file is
mapped, not read, and its entries are yielded one at a time, so a 1 GiB segment streams.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from rocketstore.codec import index_layout
from rocketstore.codec.commitlog_record import SegmentScan
from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE, decode_entries
from rocketstore.codec.host import format_host
from rocketstore.codec.properties import decode_properties
from rocketstore.geometry import index_split
from rocketstore.times import format_time

__all__ = ["Summary", "dump_file", "file_kind"]

_COLUMNS = {
    "commitlog": [
        "physical_offset",
        "total_size",
        "topic",
        "queue_id",
        "queue_offset",
        "sys_flag",
        "body_len",
        "body_crc",
        "store_time",
        "properties",
    ],
    "consumequeue": ["queue_offset", "physical_offset", "size", "tags_code"],
    "index": ["entry", "key_hash", "physical_offset", "time_diff", "store_time", "prev_entry"],
}


class Summary:
    """What the dump found besides the entries (called once they are printed)."""

    def __init__(self) -> None:
        self.text = ""
        self.damaged = False

    def __call__(self) -> str:
        return self.text


def file_kind(path: Path) -> str:
    """commitlog/NAME, consumequeue/TOPIC/QUEUE/NAME or index/NAME, from the path."""
    parts = path.resolve().parts
    if len(parts) >= 2 and parts[-2] == "commitlog":
        return "commitlog"
    if len(parts) >= 4 and parts[-4] == "consumequeue":
        return "consumequeue"
    if len(parts) >= 2 and parts[-2] == "index":
        return "index"
    raise click.UsageError(
        f"cannot tell what {path} is from its path: give --kind commitlog|consumequeue|index"
    )


def dump_file(
    path: Path, kind: str | None, index_slots: int | None
) -> tuple[list[str], Iterator[dict[str, Any]], Summary]:
    kind = kind or file_kind(path)
    summary = Summary()
    rows = {"commitlog": _commitlog, "consumequeue": _consume_queue, "index": _index}[kind]
    return _COLUMNS[kind], rows(path, summary, index_slots), summary


def _mapped(path: Path) -> memoryview:
    with path.open("rb") as f:
        if path.stat().st_size == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


def _start_offset(path: Path) -> int:
    return int(path.name) if path.name.isdigit() else 0


def _commitlog(path: Path, summary: Summary, _: int | None) -> Iterator[dict[str, Any]]:
    buf = _mapped(path)
    base = _start_offset(path)
    scan = SegmentScan(buf)
    for rec in scan:
        yield {
            "physical_offset": base + rec.position,
            "total_size": rec.total_size,
            "topic": rec.topic,
            "queue_id": rec.queue_id,
            "queue_offset": rec.queue_offset,
            "sys_flag": rec.sys_flag,
            "body_len": rec.body_len,
            "body_crc": rec.body_crc,
            "store_time": format_time(rec.store_timestamp),
            "store_timestamp": rec.store_timestamp,
            "born_time": format_time(rec.born_timestamp),
            "born_host": format_host(rec.born_addr, rec.born_port),
            "store_host": format_host(rec.store_addr, rec.store_port),
            "reconsume_times": rec.reconsume_times,
            "prepared_transaction_offset": rec.prepared_transaction_offset,
            "properties": decode_properties(rec.properties),
        }
    where = base + scan.position
    if scan.stop == "corrupt":
        summary.damaged = True
        summary.text = f"stopped at damage, offset {where}: {scan.error}"
    elif scan.stop == "blank":
        summary.text = f"end-of-segment BLANK record at {where} ({scan.blank_size} bytes)"
    else:
        summary.text = f"end of data at {where}"


def _consume_queue(path: Path, summary: Summary, _: int | None) -> Iterator[dict[str, Any]]:
    buf = _mapped(path)
    first = _start_offset(path) // CQ_ENTRY_SIZE
    entries = decode_entries(buf)
    n = 0
    for n, (offset, size, tags_code) in enumerate(entries.tolist()):
        if offset < 0 or size <= 0:
            break
        yield {"queue_offset": first + n, "physical_offset": offset, "size": size, "tags_code": tags_code}
    else:
        n = len(entries)
    summary.text = f"{len(entries) - n} empty or invalid entries after queue offset {first + n - 1}"


def _index(path: Path, summary: Summary, index_slots: int | None) -> Iterator[dict[str, Any]]:
    slots = index_slots if index_slots is not None else index_split(path)[0]
    buf = _mapped(path)
    header = index_layout.decode_header(buf)
    for number in range(1, header.index_count):
        key_hash, phy, diff, prev = index_layout.decode_entry(buf, slots, number)
        yield {
            "entry": number,
            "key_hash": key_hash,
            "physical_offset": phy,
            "time_diff": diff,
            "store_time": format_time(header.begin_timestamp + diff * 1000),
            "prev_entry": prev,
        }
    summary.text = (
        f"header: {format_time(header.begin_timestamp)}..{format_time(header.end_timestamp)}, "
        f"commitlog {header.begin_phy_offset}..{header.end_phy_offset}, "
        f"{header.hash_slot_count} slots used of {slots}, {header.index_count - 1} entries"
    )
