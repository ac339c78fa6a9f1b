"""Java's ``String.hashCode`` and the two codes RocketMQ derives from it.

``java_hash(s)`` runs ``h = 31*h + c`` over the UTF-16 code units of ``s`` in signed 32-bit
arithmetic. It decides consume-queue tag codes and index slots, so it must agree with the JVM
bit for bit, surrogate pairs included.
"""

from __future__ import annotations

import operator
from functools import lru_cache

__all__ = ["index_key_hash", "java_hash", "tags_code"]

_MASK = 0xFFFFFFFF
_MAX_PRECOMPUTED = 256
# _POWERS[n] = (31**(n-1), ..., 31, 1) mod 2**32: a hash becomes one C-level dot product.
_POWERS: list[tuple[int, ...]] = [()]
for _n in range(1, _MAX_PRECOMPUTED + 1):
    _POWERS.append(tuple(pow(31, _n - 1 - i, 1 << 32) for i in range(_n)))


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
