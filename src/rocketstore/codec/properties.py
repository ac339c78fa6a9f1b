"""The message properties string: ``name \\x01 value \\x02 name \\x01 value``.

RocketMQ 4.9 writes it without a trailing ``\\x02``; older versions keep one. Both are read;
it is written without. As in RocketMQ's ``string2messageProperties``, an entry with an empty
name or empty value is skipped on read, so such entries are refused on write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rocketstore.codec.byte_copy import copy_bytes
from rocketstore.codec.text_column import TextColumn
from rocketstore.jit import kernel

__all__ = [
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "PropertySpans",
    "decode_properties",
    "encode_plain_properties",
    "encode_properties",
    "last_values",
    "property_span",
    "property_spans",
    "split_properties",
    "validate_property",
]

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


def validate_property(name: str, value: str) -> None:
    """Raise ValueError unless ``name=value`` can be stored and read back unchanged."""
    if not isinstance(name, str) or not isinstance(value, str):
        raise ValueError(f"property {name!r}: names and values must be strings")
    if not name or not value:
        raise ValueError(f"property {name!r}: empty names and values cannot be stored")
    for text in (name, value):
        if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
            raise ValueError(f"property {name!r}: contains a reserved separator (\\x01 or \\x02)")


def encode_properties(props: Mapping[str, str | None]) -> str:
    """Join properties; entries whose value is None are skipped. Does not validate."""
    return PROPERTY_SEPARATOR.join(f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None)


def decode_properties(text: str) -> dict[str, str]:
    """Split a properties string as RocketMQ 4.9 does (trailing separator or not)."""
    result: dict[str, str] = {}
    if not text:
        return result
    for entry in text.split(PROPERTY_SEPARATOR):
        name, sep, value = entry.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            result[name] = value
    return result


@dataclass(frozen=True)
class PropertySpans:
    """The properties of many records as byte spans of one buffer (``property_spans``): record
    i's entries are ``entry_offsets[i]`` to ``entry_offsets[i + 1]``; ``wanted[j, i]`` is the
    entry holding the j-th wanted name in record i, or -1."""

    entry_offsets: npt.NDArray[np.int64]
    name_at: npt.NDArray[np.int64]
    name_len: npt.NDArray[np.int64]
    value_at: npt.NDArray[np.int64]
    value_len: npt.NDArray[np.int64]
    wanted: npt.NDArray[np.int64]


@kernel(cache=True, nogil=True, inline="always")
def property_entry(u8: npt.NDArray[np.uint8], p: int, end: int) -> tuple[int, int]:
    """The entry starting at ``p``: (where its first 0x01 is, or its end; where it ends, at the
    next 0x02 or ``end``). It holds a property when ``p < sep < stop - 1``: a name and a value."""
    stop = p
    while stop < end and u8[stop] != 2:
        stop += 1
    sep = p
    while sep < stop and u8[sep] != 1:
        sep += 1
    return sep, stop


@kernel(cache=True, nogil=True)
def property_span(
    u8: npt.NDArray[np.uint8], start: int, end: int, name: npt.NDArray[np.uint8]
) -> tuple[int, int]:
    """[start, end) of the value of property ``name`` (its last entry), or (-1, -1): the split of
    ``decode_properties`` on bytes (entries split on 0x02, name and value on the first 0x01, empty
    names and values skipped). 0x01 and 0x02 never occur inside a UTF-8 sequence, so splitting
    the bytes splits the decoded text the same way."""
    found_start, found_end = -1, -1
    p = start
    while p < end:
        sep, stop = property_entry(u8, p, end)
        if p < sep < stop - 1 and sep - p == len(name):
            same = True
            for j in range(len(name)):
                if u8[p + j] != name[j]:
                    same = False
                    break
            if same:
                found_start, found_end = sep + 1, stop
        p = stop + 1
    return found_start, found_end


@kernel(cache=True, nogil=True, inline="always")
def is_name(
    u8: npt.NDArray[np.uint8],
    p: int,
    n: int,
    names: npt.NDArray[np.uint8],
    name_offsets: npt.NDArray[np.int64],
    j: int,
) -> bool:
    """Whether the ``n`` bytes of ``u8`` at ``p`` are name ``j`` of ``names`` (one byte string,
    cut at ``name_offsets``)."""
    a = name_offsets[j]
    if n != name_offsets[j + 1] - a:
        return False
    for m in range(n):  # noqa: SIM110 (numba compiles the loop, not a generator)
        if u8[p + m] != names[a + m]:
            return False
    return True


@kernel(cache=True, nogil=True, inline="always")
def same_bytes(u8: npt.NDArray[np.uint8], a: int, b: int, n: int) -> bool:
    """Whether the ``n`` bytes of ``u8`` at ``a`` and at ``b`` are equal (compiled code's memcmp)."""
    for j in range(n):  # noqa: SIM110 (numba compiles the loop, not a generator)
        if u8[a + j] != u8[b + j]:
            return False
    return True


@kernel(cache=True, nogil=True, inline="always")
def last_values(
    u8: npt.NDArray[np.uint8],
    p: int,
    end: int,
    names: npt.NDArray[np.uint8],
    name_offsets: npt.NDArray[np.int64],
    at: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    i: int,
) -> None:
    """For each name j of ``names`` (cut at ``name_offsets``) that the properties ``u8[p:end]``
    hold, the span of its last value, as ``decode_properties`` reads them: ``at[j, i]`` and
    ``length[j, i]`` (left as they were for the names they lack)."""
    while p < end:
        sep, stop = property_entry(u8, p, end)
        if p < sep < stop - 1:  # a name and a value
            for j in range(len(name_offsets) - 1):
                if is_name(u8, p, sep - p, names, name_offsets, j):
                    at[j, i] = sep + 1
                    length[j, i] = stop - sep - 1
        p = stop + 1


@kernel(cache=True, nogil=True, inline="always")
def split_properties(
    u8: npt.NDArray[np.uint8],
    p: int,
    end: int,
    k_at: npt.NDArray[np.int64],
    k_len: npt.NDArray[np.int64],
    v_at: npt.NDArray[np.int64],
    v_len: npt.NDArray[np.int64],
    e: int,
    names: npt.NDArray[np.uint8],
    name_offsets: npt.NDArray[np.int64],
    wanted: npt.NDArray[np.int64],
    i: int,
) -> int:
    """Split the properties of record ``i`` at ``u8[p:end]`` as ``decode_properties`` does, on
    bytes: each distinct name's last entry goes to the entry arrays (name and value spans) from
    slot ``e`` on, in first-seen order; ``wanted[j, i]`` becomes the slot of wanted name ``j``
    (``names`` cut at ``name_offsets``). The arrays need room for ``(end - p) // 3 + 1`` more
    entries (an entry takes at least ``a\\x01b``). Returns the next free slot."""
    first = e
    while p < end:
        sep, stop = property_entry(u8, p, end)
        if p < sep < stop - 1:  # a separator, a name and a value: dict semantics (last wins)
            klen = sep - p
            slot = e
            for q in range(first, e):
                if k_len[q] == klen and same_bytes(u8, k_at[q], p, klen):
                    slot = q
                    break
            k_at[slot] = p
            k_len[slot] = klen
            v_at[slot] = sep + 1
            v_len[slot] = stop - sep - 1
            if slot == e:
                for j in range(len(name_offsets) - 1):  # every j: a name may be wanted twice
                    if is_name(u8, p, klen, names, name_offsets, j):
                        wanted[j, i] = e
                e += 1
        p = stop + 1
    return e


@kernel(cache=True, nogil=True)
def _property_spans(
    u8: npt.NDArray[np.uint8],
    at: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    names: npt.NDArray[np.uint8],
    name_offsets: npt.NDArray[np.int64],
) -> tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
]:
    n = len(at)
    cap = 0
    for i in range(n):
        cap += length[i] // 3 + 1  # an entry takes at least "a\x01b"
    offsets = np.empty(n + 1, dtype=np.int64)
    k_at = np.empty(cap, dtype=np.int64)
    k_len = np.empty(cap, dtype=np.int64)
    v_at = np.empty(cap, dtype=np.int64)
    v_len = np.empty(cap, dtype=np.int64)
    wanted = np.full((len(name_offsets) - 1, n), -1, dtype=np.int64)
    e = 0
    for i in range(n):
        offsets[i] = e
        e = split_properties(
            u8, at[i], at[i] + length[i], k_at, k_len, v_at, v_len, e, names, name_offsets, wanted, i
        )
    offsets[n] = e
    return offsets, k_at[:e].copy(), k_len[:e].copy(), v_at[:e].copy(), v_len[:e].copy(), wanted


def property_spans(
    buf: bytes | bytearray | memoryview,
    at: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    wanted: Sequence[str] = (),
) -> PropertySpans:
    """Split the properties at ``buf[at[i]:at[i] + length[i]]`` of many records the way
    ``decode_properties`` does, on bytes (0x01 and 0x02 never occur inside a UTF-8 sequence, so
    splitting bytes splits the decoded text the same way), and find the ``wanted`` names."""
    encoded = [w.encode() for w in wanted]
    names = np.frombuffer(b"".join(encoded), dtype=np.uint8) if encoded else np.zeros(0, dtype=np.uint8)
    name_offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    name_offsets[1:] = np.cumsum([len(w) for w in encoded])
    u8 = np.frombuffer(buf, dtype=np.uint8)
    try:
        return PropertySpans(*_property_spans(u8, at, length, names, name_offsets))
    finally:
        del u8


def encode_plain_properties(
    keys: TextColumn, tags: TextColumn, tag_ids: npt.NDArray[np.int64], uniq_keys: TextColumn
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The properties strings of many messages that carry only KEYS, TAGS and UNIQ_KEY, in that
    order (``encode_properties`` of the same dict), back to back: (bytes, length of each).

    Message i has keys ``keys[i]`` and id ``uniq_keys[i]`` (absent when empty) and tags
    ``tags[tag_ids[i]]`` (absent when ``tag_ids[i] < 0``). Values are not validated here."""
    return _plain_properties(
        _u8(keys.data),
        keys.offsets,
        _u8(tags.data),
        tags.offsets,
        tag_ids,
        _u8(uniq_keys.data),
        uniq_keys.offsets,
    )


_KEYS = np.frombuffer(b"KEYS", dtype=np.uint8)
_TAGS = np.frombuffer(b"TAGS", dtype=np.uint8)
_UNIQ_KEY = np.frombuffer(b"UNIQ_KEY", dtype=np.uint8)


def _u8(data: bytes) -> npt.NDArray[np.uint8]:
    return np.frombuffer(data, dtype=np.uint8)


@kernel(cache=True, nogil=True, inline="always")
def _put_entry(
    out: npt.NDArray[np.uint8],
    q: int,
    name: npt.NDArray[np.uint8],
    src: npt.NDArray[np.uint8],
    start: int,
    end: int,
) -> int:
    q = copy_bytes(out, q, name, 0, len(name))
    out[q] = 1
    q = copy_bytes(out, q + 1, src, start, end - start)
    out[q] = 2
    return q + 1


@kernel(cache=True)
def _plain_properties(
    keys: npt.NDArray[np.uint8],
    key_offsets: npt.NDArray[np.int64],
    tags: npt.NDArray[np.uint8],
    tag_offsets: npt.NDArray[np.int64],
    tag_ids: npt.NDArray[np.int64],
    uniqs: npt.NDArray[np.uint8],
    uniq_offsets: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    n = len(tag_ids)
    lengths = np.zeros(n, dtype=np.int64)
    total = 0
    for i in range(n):
        size = 0
        k = key_offsets[i + 1] - key_offsets[i]
        if k > 0:
            size += len(_KEYS) + 2 + k
        t = tag_ids[i]
        if t >= 0:
            size += len(_TAGS) + 2 + tag_offsets[t + 1] - tag_offsets[t]
        u = uniq_offsets[i + 1] - uniq_offsets[i]
        if u > 0:
            size += len(_UNIQ_KEY) + 2 + u
        if size > 0:
            size -= 1  # no separator after the last entry
        lengths[i] = size
        total += size
    out = np.empty(total + 1, dtype=np.uint8)  # + the last entry's \x02, dropped
    q = 0
    for i in range(n):
        if lengths[i] == 0:
            continue
        # each entry is followed by \x02; the last one's is overwritten by the next message
        if key_offsets[i + 1] > key_offsets[i]:
            q = _put_entry(out, q, _KEYS, keys, key_offsets[i], key_offsets[i + 1])
        t = tag_ids[i]
        if t >= 0:
            q = _put_entry(out, q, _TAGS, tags, tag_offsets[t], tag_offsets[t + 1])
        if uniq_offsets[i + 1] > uniq_offsets[i]:
            q = _put_entry(out, q, _UNIQ_KEY, uniqs, uniq_offsets[i], uniq_offsets[i + 1])
        q -= 1
    return out[:total], lengths
