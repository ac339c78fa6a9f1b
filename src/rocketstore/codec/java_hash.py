"""Java's ``String.hashCode`` and the two codes RocketMQ derives from it.

``java_hash(s)`` runs ``h = 31*h + c`` over the UTF-16 code units of ``s`` in signed 32-bit
arithmetic. It decides consume-queue tag codes and index slots, so it must agree with the JVM
bit for bit, surrogate pairs included.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from rocketstore.codec.text_column import TextColumn
from rocketstore.jit import kernel

__all__ = [
    "index_hash_of",
    "index_key_hash",
    "index_key_hashes",
    "java_hash",
    "java_hash_utf8",
    "signed32",
    "tags_code",
]

_MASK = 0xFFFFFFFF
_MAX_PRECOMPUTED = 256
# _POWERS[n] = (31**(n-1), ..., 31, 1) mod 2**32: a hash becomes one C-level dot product.
# Each is the tail of the longest (sliced, not computed 33,000 times at import).
_LONGEST = tuple(pow(31, _MAX_PRECOMPUTED - 1 - i, 1 << 32) for i in range(_MAX_PRECOMPUTED))
_POWERS: list[tuple[int, ...]] = [_LONGEST[_MAX_PRECOMPUTED - n :] for n in range(_MAX_PRECOMPUTED + 1)]


def _code_units(s: str) -> bytes | tuple[int, ...]:
    if s.isascii():
        return s.encode("ascii")
    raw = s.encode("utf-16-be", "surrogatepass")
    return tuple(int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2))


def java_hash(s: str) -> int:
    """``s.hashCode()`` as Java computes it: a signed 32-bit int."""
    units = _code_units(s)
    n = len(units)
    if n <= _MAX_PRECOMPUTED:
        h: int = sum(map(operator.mul, units, _POWERS[n])) & _MASK
    else:
        h = 0
        for c in units:
            h = (31 * h + c) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """The consume-queue tagsCode of a message's tags: ``java_hash`` sign-extended, 0 for none."""
    if not tags:
        return 0
    return java_hash(tags)


def index_key_hash(key: str) -> int:
    """The index-file hash of a key: ``abs(java_hash(key))``, with Integer.MIN_VALUE mapped to 0."""
    h = java_hash(key)
    return 0 if h == -0x80000000 else abs(h)


# --- compiled forms, for kernels that hash text straight from a mapped record (verify) ----------
@kernel(cache=True, nogil=True)
def java_hash_utf8(u8: npt.NDArray[np.uint8], start: int, end: int, h: int) -> tuple[int, bool]:
    """Java's String.hashCode continued from ``h`` (unsigned 32-bit) over the UTF-16 code units of
    the UTF-8 text ``u8[start:end]``; False when the bytes are not strict UTF-8 (the caller then
    decodes them in Python, replacing bad bytes as the store's decoder does)."""
    i = start
    while i < end:
        b0 = np.int64(u8[i])
        if b0 < 0x80:
            cp = b0
            i += 1
        elif 0xC2 <= b0 <= 0xDF:
            if i + 1 >= end or u8[i + 1] & 0xC0 != 0x80:
                return h, False
            cp = ((b0 & 0x1F) << 6) | (u8[i + 1] & 0x3F)
            i += 2
        elif 0xE0 <= b0 <= 0xEF:
            if i + 2 >= end:
                return h, False
            b1, b2 = np.int64(u8[i + 1]), np.int64(u8[i + 2])
            lo = 0xA0 if b0 == 0xE0 else 0x80
            hi = 0x9F if b0 == 0xED else 0xBF
            if not lo <= b1 <= hi or b2 & 0xC0 != 0x80:
                return h, False
            cp = ((b0 & 0x0F) << 12) | ((b1 & 0x3F) << 6) | (b2 & 0x3F)
            i += 3
        elif 0xF0 <= b0 <= 0xF4:
            if i + 3 >= end:
                return h, False
            b1, b2, b3 = np.int64(u8[i + 1]), np.int64(u8[i + 2]), np.int64(u8[i + 3])
            lo = 0x90 if b0 == 0xF0 else 0x80
            hi = 0x8F if b0 == 0xF4 else 0xBF
            if not lo <= b1 <= hi or b2 & 0xC0 != 0x80 or b3 & 0xC0 != 0x80:
                return h, False
            cp = (((b0 & 0x07) << 18) | ((b1 & 0x3F) << 12) | ((b2 & 0x3F) << 6) | (b3 & 0x3F)) - 0x10000
            h = (h * 31 + 0xD800 + (cp >> 10)) & 0xFFFFFFFF  # a surrogate pair: two code units
            cp = 0xDC00 + (cp & 0x3FF)
            i += 4
        else:
            return h, False
        h = (h * 31 + cp) & 0xFFFFFFFF
    return h, True


@kernel(cache=True, nogil=True, inline="always")
def signed32(h: int) -> int:
    return h - (1 << 32) if h >= 1 << 31 else h


@kernel(cache=True, nogil=True, inline="always")
def index_hash_of(h: int) -> int:
    s = signed32(h)
    return 0 if s == -(1 << 31) else abs(s)


def index_key_hashes(
    prefixes: Sequence[str],
    prefix_ids: npt.NDArray[np.int64],
    first: int,
    uniq_keys: TextColumn,
    keys: TextColumn,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The index hashes of the keys of rows ``first`` onwards, as ``index_key_hash`` of
    ``prefixes[prefix_ids[i]] + key``, with row i's UNIQ_KEY first, then each of its
    space-separated KEYS: (hashes, row of each). Both columns are strict UTF-8."""
    n = len(prefix_ids)
    starts = np.array([java_hash(p) & _MASK for p in prefixes], dtype=np.int64)
    cap = max(0, n - first) + len(keys.data)  # every key takes at least a byte
    hashes = np.empty(cap, dtype=np.int64)
    rows = np.empty(cap, dtype=np.int64)
    count = _key_hashes(
        starts,
        prefix_ids,
        first,
        np.frombuffer(uniq_keys.data, dtype=np.uint8),
        uniq_keys.offsets,
        np.frombuffer(keys.data, dtype=np.uint8),
        keys.offsets,
        hashes,
        rows,
    )
    if count < 0:
        raise ValueError("a key is not valid UTF-8")
    return hashes[:count], rows[:count]


@kernel(cache=True)
def _key_hashes(
    starts: npt.NDArray[np.int64],
    prefix_ids: npt.NDArray[np.int64],
    first: int,
    uniq: npt.NDArray[np.uint8],
    uniq_offsets: npt.NDArray[np.int64],
    keys: npt.NDArray[np.uint8],
    key_offsets: npt.NDArray[np.int64],
    hashes: npt.NDArray[np.int64],
    rows: npt.NDArray[np.int64],
) -> int:
    c = 0
    for i in range(first, len(prefix_ids)):
        h0 = starts[prefix_ids[i]]
        if uniq_offsets[i + 1] > uniq_offsets[i]:
            h, ok = java_hash_utf8(uniq, uniq_offsets[i], uniq_offsets[i + 1], h0)
            if not ok:
                return -1
            hashes[c] = index_hash_of(h)
            rows[c] = i
            c += 1
        p = key_offsets[i]
        end = key_offsets[i + 1]
        while p < end:
            stop = p
            while stop < end and keys[stop] != 32:
                stop += 1
            if stop > p:
                h, ok = java_hash_utf8(keys, p, stop, h0)
                if not ok:
                    return -1
                hashes[c] = index_hash_of(h)
                rows[c] = i
                c += 1
            p = stop + 1
    return c
