"""Reading a store's geometry from its files, so any store directory opens without flags.

Segment sizes come straight from the file sizes: every commitlog segment has the same size, and
so does every consume-queue file (20 bytes an entry). An index file's size is
``40 + 4 * slots + 20 * entries``, which one size does not settle; RocketMQ's defaults (5,000,000
slots, 20,000,000 entries) and most configurations keep ``entries = 4 * slots``, so that split
is tried first, then the others, and a split is taken only if the file's own contents agree with
it: every used slot and every entry's chain link names an entry below the header's count.

``MessageStore.open`` uses ``fit_geometry``: the geometry settings a config leaves at their
defaults are taken from the files (so ``StoreConfig()`` opens a store written with any geometry),
and settings it changes must agree with the files. Kinds of file a store has none of yet take the
geometry its writer recorded in the dispatch signal file (``codec.dispatch_signal``), so a store
made with a small geometry keeps it until its first message, and a follower opened before then
maps the writer's files at their size.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from rocketstore.codec import index_layout as layout
from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE
from rocketstore.codec.dispatch_signal import SIGNAL_SIZE, SignalGeometry, decode_geometry
from rocketstore.config import StoreConfig
from rocketstore.errors import StoreConfigError, StorePathError
from rocketstore.storage.paths import (
    StoreEntry,
    StoreLayout,
    is_index_name,
    is_segment_name,
    list_store_dir,
    looks_like_store,
    open_store_file,
    parse_queue_id,
)

__all__ = ["detect_geometry", "fit_geometry", "index_split", "survey_geometry"]

_NAMED = 5  # odd-sized files named in a problem, at most
_RATIOS = (4, 1, 2, 8, 16, 3, 5, 10)  # entries per slot to try, the usual one first
_DEFAULT = StoreConfig()


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
    a checker, which reports the disagreements itself). Raises NotAStoreError when ``root`` is
    no store directory, StorePathError when one of its directories is not a real directory.
    Only regular files are measured: what else stands where a file belongs is for the reader
    that opens it to report."""
    paths = StoreLayout(root)
    paths.require_store()
    problems: list[str] = []
    changes: dict[str, int] = {}
    seg = _most_common_size([paths.commitlog], "commitlog segments", problems)
    if seg is not None:
        changes["commitlog_segment_size"] = seg
    queue_dirs = _queue_dirs(paths)
    cq = _most_common_size(queue_dirs, "consume-queue files", problems)
    if cq is not None:
        if cq % CQ_ENTRY_SIZE:
            problems.append(f"consume-queue files of {cq} bytes: not a whole number of 20-byte entries")
        else:
            changes["consume_queue_entries"] = cq // CQ_ENTRY_SIZE
    index_sizes = _file_sizes([paths.index] if with_index else [], is_index_name)
    index_size = _most_common(index_sizes, "index files", problems)
    cfg = base or StoreConfig()
    # the split the config gives, else the one the writer recorded, when it makes the files'
    # size (as fit_geometry); otherwise the newest file of the usual size whose contents settle
    # it: a newest file that cannot be split is a problem even when an older one can
    known = _known_split(paths, cfg, index_size) if index_size is not None else None
    if known is not None:
        changes["index_hash_slots"], changes["index_max_entries"] = known
    else:
        for k, p in enumerate(reversed([p for p, size in index_sizes if size == index_size])):
            try:
                changes["index_hash_slots"], changes["index_max_entries"] = index_split(p)
                break
            except StoreConfigError as exc:
                if k == 0:
                    problems.append(str(exc))
    for name, value in changes.items():
        try:
            cfg = cfg.replace(**{name: value})
        except StoreConfigError as exc:  # not a possible geometry: keep the configured one
            problems.append(str(exc))
    return cfg, problems


def fit_geometry(root: str | os.PathLike[str], config: StoreConfig) -> StoreConfig:
    """``config`` with the geometry of the store at ``root``: each geometry setting ``config``
    leaves at its default (commitlog segment size, consume-queue entries, the index slots and
    entries as a pair) becomes the size the files have. A setting ``config`` changes is kept; if
    the files disagree with it, StoreConfigError names the sizes found and the settings to pass.
    A directory with no files of a kind (a new store) takes the sizes the store's writer recorded
    in its signal file where ``config`` leaves them at their defaults, else keeps ``config``'s.

    Cheap for a store of any size: file sizes are read from the directory, and an index file's
    contents only when its size is not the one the config's split makes (``index_split`` reads
    its slots and used entries).
    """
    paths = StoreLayout(root)
    if not looks_like_store(paths.root):
        return config
    changes: dict[str, int] = {}
    wrong: list[str] = []  # each disagreement: the files' sizes, the config's, what to pass
    queue_dirs = _queue_dirs(paths)
    published = _published_geometry(paths)
    for name, dirs, unit in (
        ("commitlog_segment_size", [paths.commitlog], 1),
        ("consume_queue_entries", queue_dirs, CQ_ENTRY_SIZE),
    ):
        size, example = _usual_file(paths.root, dirs, is_segment_name)
        given = getattr(config, name)
        if size is None and published is not None and given == getattr(_DEFAULT, name):
            changes[name] = getattr(published, name)
        if size is None or size % unit:
            continue  # no files yet, or odd ones: the loaders report those, as with any config
        if given == getattr(_DEFAULT, name):
            changes[name] = size // unit
        elif given * unit != size:
            wrong.append(
                f"{example} is {size} bytes where the config's {name}={given} makes {given * unit}: "
                f"pass {name}={size // unit}"
            )
    size, example = _usual_file(
        paths.root, [paths.index] if config.message_index_enable else [], is_index_name
    )
    # index files of the size the config's split makes are taken to have that split (one size
    # could hold another split, a case no one configures); only other sizes are read to split them
    split = (config.index_hash_slots, config.index_max_entries)
    default_split = split == (_DEFAULT.index_hash_slots, _DEFAULT.index_max_entries)
    if size is None and published is not None and default_split:
        changes["index_hash_slots"] = published.index_hash_slots
        changes["index_max_entries"] = published.index_max_entries
    if size is not None and size != config.index_file_size:
        if default_split:
            changes["index_hash_slots"], changes["index_max_entries"] = _split_of(paths.index, size)
        else:
            try:
                slots, entries = _split_of(paths.index, size)
                fix = f"pass index_hash_slots={slots}, index_max_entries={entries}"
            except StoreConfigError:
                fix = "pass the index_hash_slots and index_max_entries it was written with"
            wrong.append(
                f"{example} is {size} bytes where the config's index_hash_slots={split[0]}, "
                f"index_max_entries={split[1]} make {config.index_file_size}: {fix}"
            )
    if wrong:
        raise StoreConfigError(
            f"the store at {str(paths.root)!r} was written with another geometry than the config gives: "
            f"{'; '.join(wrong)} (or leave these settings at their defaults to take them from the files)"
        )
    return config.replace(**changes) if changes else config


def _known_split(paths: StoreLayout, config: StoreConfig, size: int) -> tuple[int, int] | None:
    """The (slots, entries) of ``config``, or else of the writer's recorded geometry, that make
    index files of ``size`` bytes; None when neither does."""
    splits = [(config.index_hash_slots, config.index_max_entries)]
    published = _published_geometry(paths)
    if published is not None:
        splits.append((published.index_hash_slots, published.index_max_entries))
    for slots, entries in splits:
        if layout.HEADER_SIZE + slots * layout.SLOT_SIZE + entries * layout.ENTRY_SIZE == size:
            return slots, entries
    return None


def _published_geometry(paths: StoreLayout) -> SignalGeometry | None:
    """The geometry the store's (last) writer recorded, None without one."""
    try:
        fd = open_store_file(paths.dispatch_signal)
    except (FileNotFoundError, StorePathError):
        return None  # no writer yet, or something else stands there: its reader reports that
    try:
        return decode_geometry(os.pread(fd, SIGNAL_SIZE, 0))
    finally:
        os.close(fd)


def _usual_file(root: Path, directories: list[Path], names: Callable[[str], bool]) -> tuple[int | None, str]:
    """The most common size of the files named like ``names`` in ``directories``, and one such
    file (its path from ``root``, for messages)."""
    found = _file_sizes(directories, names)
    if not found:
        return None, ""
    size = Counter(size for _, size in found).most_common(1)[0][0]
    return size, str(next(p for p, n in found if n == size).relative_to(root))


def _split_of(index_dir: Path, size: int) -> tuple[int, int]:
    """The (slots, entries) split of the newest index file of ``size`` bytes whose contents settle
    it (a live writer's newest file may not, for a moment); StoreConfigError when none does."""
    files = [p for p, n in reversed(_file_sizes([index_dir], is_index_name)) if n == size]
    error: StoreConfigError | None = None
    for path in files:
        try:
            return index_split(path)
        except StoreConfigError as exc:
            error = error or exc
    assert error is not None  # there is a file of this size: the most common one
    raise error


def _queue_dirs(paths: StoreLayout) -> list[Path]:
    """Every queue directory (topic/queue id) of the store, by the strict queue id rule."""
    return [
        q.path
        for topic in _dir_entries(paths.consume_queue)
        if topic.is_dir
        for q in _dir_entries(topic.path)
        if q.is_dir and parse_queue_id(q.name) is not None
    ]


def _dir_entries(directory: Path) -> list[StoreEntry]:
    """The entries of ``directory``; none when it is not a directory (its reader reports that)."""
    try:
        return list_store_dir(directory)
    except StorePathError:
        return []


def _file_sizes(directories: list[Path], names: Callable[[str], bool]) -> list[tuple[Path, int]]:
    """(path, size) of the regular files named like ``names`` in ``directories``, by name."""
    found = []
    for d in directories:
        for e in _dir_entries(d):
            if e.is_file and names(e.name):
                with contextlib.suppress(FileNotFoundError):  # reclaimed while we looked
                    found.append((e.path, os.lstat(e.path).st_size))
    return found


def _most_common_size(directories: list[Path], what: str, problems: list[str]) -> int | None:
    """The most common size of the segments in ``directories``; see ``_most_common``."""
    return _most_common(_file_sizes(directories, is_segment_name), what, problems)


def _most_common(found: list[tuple[Path, int]], what: str, problems: list[str]) -> int | None:
    """The most common of the sizes; the files of other sizes are recorded in ``problems``,
    named (the first few)."""
    sizes = Counter(size for _, size in found)
    if not sizes:
        return None
    usual = sizes.most_common(1)[0][0]
    if len(sizes) > 1:
        odd = [f"{p} ({size} bytes)" for p, size in found if size != usual]
        more = f" and {len(odd) - _NAMED} more" if len(odd) > _NAMED else ""
        problems.append(
            f"{what} of different sizes: {sorted(sizes)}; most are {usual} bytes, not "
            f"{', '.join(odd[:_NAMED])}{more}"
        )
    return usual


def index_split(path: Path) -> tuple[int, int]:
    """(hash slots, max entries) of one index file."""
    with os.fdopen(open_store_file(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        body = size - layout.HEADER_SIZE
        if body <= 0:
            raise StoreConfigError(f"index file {path} is {size} bytes: too small for a header")
        header = layout.decode_header(f.read(layout.HEADER_SIZE))
        # mapped, not read: only the slots and the used entries are touched, not a whole 400 MB file
        data = np.memmap(f, dtype=np.uint8, mode="r", offset=layout.HEADER_SIZE)
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
