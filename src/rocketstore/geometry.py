"""Reading a store's geometry from its files, so any store directory opens without flags.

Segment sizes come straight from the file sizes: every commitlog segment has the same size, and
so does every consume-queue file (20 bytes an entry). An index file's size is
``40 + 4 * slots + 20 * entries``, which one size does not settle; RocketMQ's defaults (5,000,000
slots, 20,000,000 entries) and most configurations keep ``entries = 4 * slots``, so that split
is tried first, then the others, and a split is taken only if the file's own contents agree with
it: every used slot and every entry's chain link names an entry below the header's count.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rocketstore.codec import index_layout as layout
from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE
from rocketstore.config import StoreConfig
from rocketstore.errors import StoreConfigError
from rocketstore.storage.paths import StoreLayout, is_segment_name

__all__ = ["detect_geometry", "index_split", "looks_like_store"]

_RATIOS = (4, 1, 2, 8, 16, 3, 5, 10)  # entries per slot to try, the usual one first


def looks_like_store(root: Path) -> bool:
    paths = StoreLayout(root)
    return paths.commitlog.is_dir() or paths.consume_queue.is_dir() or paths.checkpoint.is_file()


def detect_geometry(root: str | os.PathLike[str], base: StoreConfig | None = None) -> StoreConfig:
    """``base`` (default: RocketMQ's defaults) with the segment and index sizes found in
    ``root``'s files. Raises StoreConfigError when the files disagree or cannot be read as a
    store's."""
    paths = StoreLayout(root)
    cfg = base or StoreConfig()
    if not paths.root.is_dir():
        raise StoreConfigError(f"no store directory at {str(paths.root)!r}")
    if not looks_like_store(paths.root):
        raise StoreConfigError(
            f"{str(paths.root)!r} is not a store directory (no commitlog, consumequeue or checkpoint)"
        )
    changes: dict[str, int] = {}
    seg = _common_size(paths.commitlog, "commitlog segments")
    if seg is not None:
        changes["commitlog_segment_size"] = seg
    cq_sizes = {
        _common_size(q, f"consume queue {q.parent.name}/{q.name}")
        for topic in _subdirs(paths.consume_queue)
        for q in _subdirs(topic)
    } - {None}
    if len(cq_sizes) > 1:
        raise StoreConfigError(f"consume-queue files of different sizes: {sorted(s or 0 for s in cq_sizes)}")
    if cq_sizes:
        size = cq_sizes.pop() or 0
        if size % CQ_ENTRY_SIZE:
            raise StoreConfigError(
                f"consume-queue files of {size} bytes: not a whole number of 20-byte entries"
            )
        changes["consume_queue_entries"] = size // CQ_ENTRY_SIZE
    index_files = (
        sorted(p for p in paths.index.glob("*") if p.is_file() and p.name.isdigit())
        if paths.index.is_dir()
        else []
    )
    if index_files:
        slots, entries = index_split(index_files[-1])
        changes["index_hash_slots"] = slots
        changes["index_max_entries"] = entries
    return cfg.replace(**changes) if changes else cfg


def _subdirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir()) if path.is_dir() else []


def _common_size(directory: Path, what: str) -> int | None:
    if not directory.is_dir():
        return None
    sizes = {p.stat().st_size for p in directory.iterdir() if p.is_file() and is_segment_name(p.name)}
    if len(sizes) > 1:
        raise StoreConfigError(f"{what} in {directory} have different sizes: {sorted(sizes)}")
    return sizes.pop() if sizes else None


def index_split(path: Path) -> tuple[int, int]:
    """(hash slots, max entries) of one index file."""
    size = path.stat().st_size
    body = size - layout.HEADER_SIZE
    if body <= 0:
        raise StoreConfigError(f"index file {path} is {size} bytes: too small for a header")
    with path.open("rb") as f:
        header = layout.decode_header(f.read(layout.HEADER_SIZE))
    # mapped, not read: only the slots and the used entries are touched, not a whole 400 MB file
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=layout.HEADER_SIZE)
    try:
        for ratio in _RATIOS:
            slots, rest = divmod(body, layout.SLOT_SIZE + ratio * layout.ENTRY_SIZE)
            if rest or slots <= 0:
                continue
            if _consistent(data, header.index_count, slots, ratio * slots):
                return slots, ratio * slots
    finally:
        del data
    raise StoreConfigError(
        f"cannot tell the hash slots and entries of index file {path} ({size} bytes): "
        "give them (index_hash_slots, index_max_entries)"
    )


def _consistent(data: np.ndarray, count: int, slots: int, entries: int) -> bool:
    if not 0 <= count <= entries:
        return False
    slot_values = data[: slots * layout.SLOT_SIZE].view(layout.SLOT_DTYPE)
    if len(slot_values) and (slot_values.min() < 0 or slot_values.max() >= max(count, 1)):
        return False
    start = slots * layout.SLOT_SIZE
    used = data[start + layout.ENTRY_SIZE : start + count * layout.ENTRY_SIZE].view(layout.ENTRY_DTYPE)
    if len(used) == 0:
        return True
    prev = used["prev_index"].astype(np.int64)
    numbers = np.arange(1, len(used) + 1)
    return bool(((prev >= 0) & (prev < numbers)).all() and (used["phy_offset"] >= 0).all())
