"""What the kernel is told to read ahead of the store's mappings (MappedFile.limit_readahead): none
of the part of the newest segment still being appended, as the process's mappings show it in
/proc/self/smaps ('rr' in VmFlags: MADV_RANDOM), and the whole of every segment before it."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from tests.live_writer import LiveWriter

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/smaps").exists() or not hasattr(mmap, "MADV_RANDOM"), reason="needs Linux's smaps"
)

SEGMENT = 65536
CFG = StoreConfig(
    commitlog_segment_size=SEGMENT, consume_queue_entries=1024, index_hash_slots=64, index_max_entries=256
)
PAGE = mmap.PAGESIZE


def advice(path: Path) -> list[tuple[int, int, bool]]:
    """This process's mappings of ``path`` as (file start, file end, not read ahead) ranges,
    adjacent ranges of the same advice merged."""
    name = str(path.resolve())
    ranges: list[tuple[int, int, bool]] = []
    current: tuple[int, int] | None = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's first line
            start, end = (int(x, 16) for x in fields[0].split("-"))
            offset = int(fields[2], 16)
            current = (offset, offset + end - start) if len(fields) >= 6 and fields[5] == name else None
        elif fields[0] == "VmFlags:" and current is not None:
            ranges.append((*current, "rr" in fields[1:]))
            current = None
    merged: list[tuple[int, int, bool]] = []
    for start, end, rr in sorted(ranges):
        if merged and merged[-1][1] == start and merged[-1][2] == rr:
            merged[-1] = (merged[-1][0], end, rr)
        else:
            merged.append((start, end, rr))
    return merged


def segment(root: Path, n: int) -> Path:
    return root / "commitlog" / f"{n * SEGMENT:020d}"


def put(store: MessageStore, n: int, size: int = 1000) -> None:
    store.put_messages([Message("A", b"x" * size, keys=[f"k{i}"], queue_id=0) for i in range(n)])
    store.wait_dispatched(10)


def test_a_writer_reads_ahead_none_of_what_it_appends_and_all_of_a_full_segment(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as store:
        put(store, 10)
    with MessageStore.open(root, CFG) as store:
        end = store.max_phy_offset()
        assert PAGE < end < SEGMENT - 2 * PAGE
        tail = end // PAGE * PAGE
        assert advice(segment(root, 0)) == [(0, tail, False), (tail, SEGMENT, True)]  # from recovery
        put(store, 1)
        assert advice(segment(root, 0)) == [(0, tail, False), (tail, SEGMENT, True)]
        queue = root / "consumequeue" / "A" / "0" / f"{0:020d}"
        assert advice(queue) == [(0, 1024 * 20, True)]  # 11 entries: all of it on its first page
        index = sorted((root / "index").iterdir())
        assert index and all(advice(f) == [(0, -(-f.stat().st_size // PAGE) * PAGE, True)] for f in index)

        put(store, 60)  # rolls to the next segment
        assert store.max_phy_offset() > SEGMENT
        assert advice(segment(root, 0)) == [(0, SEGMENT, False)]
        assert advice(segment(root, 1)) == [(0, SEGMENT, True)]


def test_a_follower_reads_ahead_none_of_the_segment_its_writer_appends(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with LiveWriter(root, CFG) as writer:
        writer.put("A", 60)
        with MessageStore.open(root, CFG, readonly=True) as store:
            end = store.max_phy_offset()
            tail = end // PAGE * PAGE
            assert tail > 0
            assert store.get_message("g", "A", 0, 0, 32).messages
            assert advice(segment(root, 0)) == [(0, tail, False), (tail, SEGMENT, True)]

            end = writer.put("A", 3000)  # rolls the log past a few segments
            last = end // SEGMENT
            assert last >= 2
            assert store.max_phy_offset() == end
            assert all(advice(segment(root, n)) == [(0, SEGMENT, False)] for n in range(last))
            ranges = advice(segment(root, last))
            assert ranges[-1][1:] == (SEGMENT, True)
            assert ranges[-1][0] <= end - last * SEGMENT
            writer.put("B", 40)  # a queue the follower first sees now
            assert store.max_offset_in_queue("B", 0) == 10
            assert advice(root / "consumequeue" / "B" / "0" / f"{0:020d}") == [(0, 1024 * 20, True)]
