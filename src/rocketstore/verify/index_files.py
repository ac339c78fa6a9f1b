"""Checking the index files: ``index/{yyyyMMddHHmmssSSS}``, read through ``codec.index_layout``.

- size = 40 + 4 * slots + 20 * entries                             file_size
- header: indexCount in 1..entries (0 reads as 1, as RocketMQ does), hashSlotCount <= slots;
  every file but the newest is full (a file is only followed by another once full: an emptied or
  zero-filled one lost its entries)                                index_header
- every slot names an entry below indexCount; every prevIndex is below its own entry's number (so
  chains strictly decrease) and links to an entry of the same slot; every used entry is reachable
  from its slot keyHash % slots                                     index_chain
- keyHash >= 0, timeDiff >= 0, phyOffset >= 0                       index_entry

The entries are gathered as ``Refs`` for ``pointers.PointerCheck``; ``IndexCover`` says which
records must have their keys in the index (``index_missing``).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from rocketstore.codec import index_layout
from rocketstore.codec.checkpoint import CHECKPOINT_FILE_SIZE, decode_checkpoint
from rocketstore.config import StoreConfig
from rocketstore.jit import kernel
from rocketstore.storage.file_view import mapped_readonly
from rocketstore.storage.paths import StoreLayout, is_index_name, is_leftover_name
from rocketstore.store_lock import lock_holder
from rocketstore.verify.listing import list_entries, store_relative, wrong_kind
from rocketstore.verify.refs import I32, I64, Refs
from rocketstore.verify.report import DamageLog, Progress

__all__ = [
    "IndexCover",
    "find_index_files",
    "index_cover",
    "new_index_refs",
    "read_index_file",
    "read_index_files",
]


def new_index_refs() -> Refs:
    """The columns gathered per index entry: commitlog offset, keyHash, file number, byte
    position in the file."""
    return Refs(phy=np.int64, key_hash=np.int32, file=np.int32, pos=np.int64)


def read_index_files(
    paths: StoreLayout, cfg: StoreConfig, names: list[str], refs: Refs, damage: DamageLog, tick: Progress
) -> int:
    """Check each index file on its own and gather its entries as refs (``names`` gets the name
    of each file read, by number); returns how many entries were checked."""
    files = find_index_files(paths, damage)
    checked = 0
    tick("index", 0, len(files))
    for i, path in enumerate(files):
        with contextlib.suppress(FileNotFoundError):  # reclaimed while we looked
            checked += read_index_file(path, store_relative(paths, path), cfg, names, refs, damage)
        tick("index", i + 1, len(files))
    refs.seal()
    return checked


def find_index_files(paths: StoreLayout, damage: DamageLog) -> list[Path]:
    """The index files, oldest first; anything else in ``index/`` is reported."""
    files: list[Path] = []
    for e in list_entries(paths, paths.index, damage):
        if is_leftover_name(e.name):
            continue
        if not is_index_name(e.name):
            damage.add(
                "file_name",
                store_relative(paths, e.path),
                0,
                "not an index file (17-digit yyyyMMddHHmmssSSS name)",
            )
        elif e.is_file:
            files.append(e.path)
        else:
            wrong_kind(paths, e.path, e.kind, "a regular file (an index file)", damage)
    return files


def read_index_file(
    path: Path, rel: str, cfg: StoreConfig, names: list[str], refs: Refs, damage: DamageLog
) -> int:
    slots, max_entries = cfg.index_hash_slots, cfg.index_max_entries
    expected = index_layout.file_size(slots, max_entries)
    with mapped_readonly(path) as view:
        if len(view) != expected:
            damage.add(
                "file_size",
                rel,
                min(len(view), expected),
                f"{len(view)} bytes, expected {expected} ({index_layout.HEADER_SIZE}-byte header, "
                f"{slots} slots, {max_entries} entries); not read",
            )
            return 0
        for _ in range(2):
            header = index_layout.decode_header(view)
            count = header.index_count or 1  # a file created but never written reads as 0, as in RocketMQ
            heads = np.frombuffer(
                view, dtype=index_layout.SLOT_DTYPE, count=slots, offset=index_layout.HEADER_SIZE
            ).astype(np.int64)
            if not (heads >= count).any():
                break
            # a writer between its slots and its header (or damage): read once more
        if not 1 <= count <= max_entries:
            damage.add(
                "index_header",
                rel,
                index_layout.INDEX_COUNT_AT,
                f"indexCount {count} is outside 1..{max_entries}; entries not read",
            )
            return 0
        if not 0 <= header.hash_slot_count <= slots:
            damage.add(
                "index_header",
                rel,
                index_layout.HASH_SLOT_COUNT_AT,
                f"hashSlotCount {header.hash_slot_count} is outside 0..{slots}",
            )
        entries = np.frombuffer(
            view, dtype=index_layout.ENTRY_DTYPE, count=count, offset=index_layout.entry_position(slots, 0)
        )
        key_hash = entries["key_hash"].astype(np.int32)
        phy = entries["phy_offset"].astype(np.int64)
        time_diff = entries["time_diff"].astype(np.int32)
        prev = entries["prev_index"].astype(np.int32)
        del entries
    fid = len(names)
    names.append(rel)
    _check_chains(rel, slots, count, heads, key_hash, prev, damage)
    used = np.arange(1, count)
    position = index_layout.entry_position(slots, 0) + used * index_layout.ENTRY_SIZE
    bad_hash = key_hash[1:] < 0
    damage.add_each(
        "index_entry", rel, position[bad_hash], lambda i: f"negative keyHash {key_hash[1:][bad_hash][i]}"
    )
    bad_time = time_diff[1:] < 0
    damage.add_each(
        "index_entry",
        rel,
        position[bad_time],
        lambda i: f"negative timeDiff {time_diff[1:][bad_time][i]}: time-bounded queries stop at it",
    )
    bad_phy = phy[1:] < 0
    damage.add_each(
        "index_entry", rel, position[bad_phy], lambda i: f"negative phyOffset {phy[1:][bad_phy][i]}"
    )
    keep = ~bad_hash & ~bad_phy
    refs.add(phy=phy[1:][keep], key_hash=key_hash[1:][keep], file=fid, pos=position[keep])
    return count - 1


@dataclass(frozen=True)
class IndexCover:
    """What the index files cover, for the check that every key can be found through them: each
    key (UNIQ_KEY and every KEYS word) of each record at or below ``complete_through`` (a commitlog
    offset; -1 for none) must have its entry. That is every record after a clean shutdown (no
    ``abort``: dispatch and the index were drained), else every record up to the newest indexed
    one. ROLLBACK records are left out: RocketMQ does not index them."""

    files: list[str] = field(default_factory=list)  # relative names, oldest first
    begins: list[int] = field(default_factory=list)  # beginPhyOffset of each (-1: empty file)
    ends: list[int] = field(default_factory=list)  # endPhyOffset of each (-1: empty file)
    complete_through: int = -1
    indexed_before: int = 0  # and every record stored before this time (the checkpoint's index time)
    quiet: frozenset[str] = frozenset()  # files whose damage is reported already: not their keys too

    def quieting(self, damage: DamageLog) -> IndexCover:
        """This cover, with the index files ``damage`` already names made quiet."""
        return replace(self, quiet=frozenset(f for f in damage.files() if f in self.files))

    def files_for(self, phy: int) -> tuple[str, ...]:
        """The index files that should hold the keys of the record at ``phy``: the one whose
        range covers it (and the next one, when the record ends it: keys that did not fit go
        there), else the empty file that comes after the files ending before it, else the newest."""
        for i, (name, begin, end) in enumerate(zip(self.files, self.begins, self.ends)):
            if phy == end and i + 1 < len(self.files):
                return name, self.files[i + 1]
            if end < 0 or begin <= phy <= end or begin > phy:
                return (name,)
        return (self.files[-1],)


def index_cover(paths: StoreLayout, cfg: StoreConfig, damage: DamageLog) -> IndexCover:
    """Read the index headers; report every file but the newest that is not full (a file is only
    followed by another once it is full: a zero-filled or emptied file is damage)."""
    files = find_index_files(paths, DamageLog())  # strays are reported by read_index_files
    max_entries = cfg.index_max_entries
    expected = index_layout.file_size(cfg.index_hash_slots, max_entries)
    cover = IndexCover()
    for i, path in enumerate(files):
        rel = store_relative(paths, path)
        try:
            with mapped_readonly(path) as view:
                whole = len(view) == expected  # else reported by read_index_file
                header = index_layout.decode_header(view) if len(view) >= index_layout.HEADER_SIZE else None
        except FileNotFoundError:
            continue
        if header is None:
            header = index_layout.IndexHeader()
        count = header.index_count or 1
        if whole and i < len(files) - 1 and count < max_entries:
            damage.add(
                "index_header",
                rel,
                index_layout.INDEX_COUNT_AT,
                f"indexCount {count} of {max_entries}, but a newer index file follows (a file is only "
                "followed by another once full): its entries are missing",
            )
        used = count > 1 and 1 <= count <= max_entries
        cover.files.append(rel)
        cover.begins.append(header.begin_phy_offset if used else -1)
        cover.ends.append(header.end_phy_offset if used else -1)
    if cover.files:
        clean = not paths.abort.exists()
        # Beside a live writer, index files may appear after ours were listed: the checkpoint may
        # speak of them, and the keys of the record ending the newest listed file that did not
        # fit in it are in the next. Only what the files read must hold is checked then.
        live = lock_holder(paths.lock) not in (None, os.getpid())
        cover = replace(
            cover,
            complete_through=1 << 62 if clean else max(cover.ends) - (1 if live else 0),
            indexed_before=0 if live else _checkpoint_index_time(paths),
        )
    return cover


def _checkpoint_index_time(paths: StoreLayout) -> int:
    """The checkpoint's indexMsgTimestamp: every record stored before it was indexed (0 if unknown)."""
    if not paths.checkpoint.is_file():
        return 0
    try:
        with mapped_readonly(paths.checkpoint) as view:
            if len(view) != CHECKPOINT_FILE_SIZE:
                return 0
            return decode_checkpoint(view).index_msg_timestamp
    except FileNotFoundError:
        return 0


def _check_chains(
    rel: str, slots: int, count: int, heads: I64, key_hash: I32, prev: I32, damage: DamageLog
) -> None:
    """Slots, links and reachability of one index file's hash chains (see the module docstring)."""
    entries_at = index_layout.entry_position(slots, 0)
    slot_ids = np.arange(slots, dtype=np.int64)
    bad_head = (heads < 0) | (heads >= count)
    where = np.flatnonzero(bad_head)
    damage.add_each(
        "index_chain",
        rel,
        index_layout.HEADER_SIZE + where * index_layout.SLOT_SIZE,
        lambda i: f"hash slot {where[i]} points at entry {heads[where[i]]}, but indexCount is {count}",
    )
    slot_of = np.where(key_hash >= 0, key_hash % slots, -1)
    head = np.where(bad_head, 0, heads)
    wrong_head = np.flatnonzero((head > 0) & (slot_of[head] != slot_ids))
    damage.add_each(
        "index_chain",
        rel,
        index_layout.HEADER_SIZE + wrong_head * index_layout.SLOT_SIZE,
        lambda i: (
            f"hash slot {wrong_head[i]} points at entry {head[wrong_head[i]]}, whose key hash "
            f"belongs to slot {slot_of[head[wrong_head[i]]]}"
        ),
    )
    numbers = np.arange(count, dtype=np.int64)
    broken = (prev < 0) | (prev >= numbers)
    broken[0] = False  # entry 0 is never used: whatever it holds links nowhere
    prev = np.where(numbers == 0, 0, prev)
    where = np.flatnonzero(broken)
    damage.add_each(
        "index_chain",
        rel,
        entries_at + where * index_layout.ENTRY_SIZE,
        lambda i: (
            f"prevIndex {prev[where[i]]} of entry {where[i]} "
            + (
                f"points past indexCount {count}"
                if prev[where[i]] >= count
                else "is negative"
                if prev[where[i]] < 0
                else "is not below the entry's own number (chains must strictly decrease)"
            )
            + "; the older entries of its chain are unreachable"
        ),
    )
    link = np.where(broken, 0, prev)
    cross = np.flatnonzero((link > 0) & (slot_of >= 0) & (slot_of[link] != slot_of))
    damage.add_each(
        "index_chain",
        rel,
        entries_at + cross * index_layout.ENTRY_SIZE,
        lambda i: (
            f"prevIndex {link[cross[i]]} of entry {cross[i]} (slot {slot_of[cross[i]]}) links to an "
            f"entry of slot {slot_of[link[cross[i]]]}"
        ),
    )
    reached, cut = _walk_chains(heads, key_hash, prev, slots)
    # an entry left behind a damaged link is explained by that link's damage, reported above
    lost = (~reached) & (slot_of >= 0) & (numbers > 0)
    lost &= ~cut[np.maximum(slot_of, 0)]
    where = np.flatnonzero(lost)
    damage.add_each(
        "index_chain",
        rel,
        entries_at + where * index_layout.ENTRY_SIZE,
        lambda i: (
            f"entry {where[i]} (keyHash {key_hash[where[i]]}) is not reachable from the chain of its "
            f"hash slot {slot_of[where[i]]}: key queries cannot find it"
        ),
    )


@kernel(cache=True, nogil=True)
def _walk_chains(
    heads: I64, key_hash: I32, prev: I32, slots: int
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """(entries reached from their slot, slots whose walk stopped at a damaged link or head).

    A walk stops at a link that does not strictly decrease, at an entry of another slot and at an
    entry already reached: each entry is visited once, whatever the file holds."""
    count = len(key_hash)
    reached = np.zeros(count, dtype=np.bool_)
    cut = np.zeros(slots, dtype=np.bool_)
    for s in range(slots):
        cur = heads[s]
        if cur == 0:
            continue
        if cur < 0 or cur >= count:
            cut[s] = True
            continue
        while cur > 0:
            kh = key_hash[cur]
            if reached[cur] or kh < 0 or kh % slots != s:
                cut[s] = True
                break
            reached[cur] = True
            p = prev[cur]
            if p < 0 or p >= cur:
                cut[s] = True
                break
            cur = p
    return reached, cut
