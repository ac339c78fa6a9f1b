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
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rocketstore.codec import index_layout as layout
from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE
from rocketstore.config import StoreConfig
from rocketstore.errors import StoreConfigError
from rocketstore.storage.paths import StoreLayout, is_segment_name

__all__ = ["detect_geometry", "index_split", "looks_like_store", "survey_geometry"]

_RATIOS = (4, 1, 2, 8, 16, 3, 5, 10)  # entries per slot to try, the usual one first


def looks_like_store(root: Path) -> bool:
    paths = StoreLayout(root)
    return paths.commitlog.is_dir() or paths.consume_queue.is_dir() or paths.checkpoint.is_file()


def detect_geometry(
    root: str | os.PathLike[str], base: StoreConfig | None = None, *, with_index: bool = True
) -> StoreConfig:
    """``base`` (default: RocketMQ's defaults) with the segment and index sizes found in
    ``root``'s files. Raises StoreConfigError when the files disagree or cannot be read as a
    store's. ``with_index=False`` leaves the index geometry as ``base`` has it: for readers that
    do not use the index, since a live writer's index file cannot always be told apart."""
    cfg, problems = survey_geometry(root, base, with_index=with_index)
    if problems:
        raise StoreConfigError(problems[0])
    return cfg


def survey_geometry(
    root: str | os.PathLike[str], base: StoreConfig | None = None, *, with_index: bool = True
) -> tuple[StoreConfig, list[str]]:
    """The geometry most of ``root``'s files were written with, and what disagrees with it (for
    a checker, which reports the disagreements itself). Raises StoreConfigError only when
    ``root`` is no store directory."""
    paths = StoreLayout(root)
    if not paths.root.is_dir():
        raise StoreConfigError(f"no store directory at {str(paths.root)!r}")
    if not looks_like_store(paths.root):
        raise StoreConfigError(
            f"{str(paths.root)!r} is not a store directory (no commitlog, consumequeue or checkpoint)"
        )
    problems: list[str] = []
    changes: dict[str, int] = {}
    seg = _most_common_size([paths.commitlog], "commitlog segments", problems)
    if seg is not None:
        changes["commitlog_segment_size"] = seg
    queue_dirs = [q for topic in _subdirs(paths.consume_queue) for q in _subdirs(topic)]
    cq = _most_common_size(queue_dirs, "consume-queue files", problems)
    if cq is not None:
        if cq % CQ_ENTRY_SIZE:
            problems.append(f"consume-queue files of {cq} bytes: not a whole number of 20-byte entries")
        else:
            changes["consume_queue_entries"] = cq // CQ_ENTRY_SIZE
    index_files = (
        sorted(p for p in paths.index.iterdir() if p.is_file() and p.name.isdigit())
        if paths.index.is_dir() and with_index
        else []
    )
    index_size = _most_common_size(
        [paths.index] if with_index else [], "index files", problems, names=str.isdigit
    )
    # the newest file of the usual size whose contents settle the split; a newest file that
    # cannot be split is a problem even when an older one can
    for k, p in enumerate(reversed([p for p in index_files if p.stat().st_size == index_size])):
        try:
            changes["index_hash_slots"], changes["index_max_entries"] = index_split(p)
            break
        except StoreConfigError as exc:
            if k == 0:
                problems.append(str(exc))
    cfg = base or StoreConfig()
    for name, value in changes.items():
        try:
            cfg = cfg.replace(**{name: value})
        except StoreConfigError as exc:  # not a possible geometry: keep the configured one
            problems.append(str(exc))
    return cfg, problems


def _subdirs(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_dir()) if path.is_dir() else []


def _most_common_size(
    directories: list[Path], what: str, problems: list[str], names: Callable[[str], bool] = is_segment_name
) -> int | None:
    """The most common size of the files named like ``names`` in ``directories``; files of other
    sizes are recorded in ``problems``."""
    sizes = Counter(
        p.stat().st_size
        for d in directories
        if d.is_dir()
        for p in d.iterdir()
        if p.is_file() and names(p.name)
    )
    if len(sizes) > 1:
        problems.append(f"{what} of different sizes: {sorted(sizes)}")
    return sizes.most_common(1)[0][0] if sizes else None


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
        # strictly first; then allowing slots past the header's count, which a live writer's
        # newest file has while a batch of keys lands (the count is written last)
        for live in (False, True):
            for ratio in _RATIOS:
                slots, rest = divmod(body, layout.SLOT_SIZE + ratio * layout.ENTRY_SIZE)
                if rest or slots <= 0:
                    continue
                if _consistent(data, header.index_count, slots, ratio * slots, live=live):
                    return slots, ratio * slots
    finally:
        del data
    raise StoreConfigError(
        f"cannot tell the hash slots and entries of index file {path} ({size} bytes): "
        "give them (index_hash_slots, index_max_entries)"
    )


def _consistent(data: np.ndarray, count: int, slots: int, entries: int, *, live: bool = False) -> bool:
    if not 0 <= count <= entries:
        return False
    slot_values = data[: slots * layout.SLOT_SIZE].view(layout.SLOT_DTYPE)
    bound = entries if live else max(count, 1)
    if len(slot_values) and (slot_values.min() < 0 or slot_values.max() >= bound):
        return False
    start = slots * layout.SLOT_SIZE
    used = data[start + layout.ENTRY_SIZE : start + count * layout.ENTRY_SIZE].view(layout.ENTRY_DTYPE)
    if len(used) == 0:
        return True
    prev = used["prev_index"].astype(np.int64)
    numbers = np.arange(1, len(used) + 1)
    return bool(((prev >= 0) & (prev < numbers)).all() and (used["phy_offset"] >= 0).all())
