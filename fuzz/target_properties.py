"""Fuzz target: the properties string (codec/properties.py).

    python fuzz/target_properties.py [libFuzzer options] [corpus dir]

Contract: ``decode_properties`` never raises on any text; the compiled byte-level splitters
``property_spans`` and ``property_span`` find exactly the names and values ``decode_properties``
finds in the same UTF-8 bytes; properties that ``validate_property`` accepts survive
``encode_properties`` -> ``decode_properties`` unchanged.
"""

from __future__ import annotations

import numpy as np

import _harness
from rocketstore.codec import properties

_harness.instrument(properties)
atheris = _harness.atheris


def seeds() -> list[bytes]:
    return [
        b"KEYS\x01k1 k2\x02TAGS\x01TagA\x02UNIQ_KEY\x017F0000010001\x02WAIT\x01true",
        b"TAGS\x01a\x02\x02\x01x\x02TAGS\x01b\x02",
        b"DELAY\x013\x02REAL_TOPIC\x01TopicA\x02REAL_QID\x011",
    ]


def test_one_input(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    decoded = properties.decode_properties(text)
    raw = text.encode()

    wanted = [*sorted(decoded)[:3], "TAGS", "KEYS"]
    u8 = np.frombuffer(raw, dtype=np.uint8)
    spans = properties.property_spans(
        raw, np.array([0], dtype=np.int64), np.array([len(raw)], dtype=np.int64), wanted
    )
    found = {
        raw[int(spans.name_at[e]) : int(spans.name_at[e] + spans.name_len[e])].decode(): raw[
            int(spans.value_at[e]) : int(spans.value_at[e] + spans.value_len[e])
        ].decode()
        for e in range(int(spans.entry_offsets[0]), int(spans.entry_offsets[1]))
    }
    if found != decoded:
        raise AssertionError(f"property_spans {found!r} != decode_properties {decoded!r}")
    for j, name in enumerate(wanted):
        e = int(spans.wanted[j, 0])
        if (e >= 0) != (name in decoded):
            raise AssertionError(f"property_spans wanted[{name!r}] disagrees")
        start, end = properties.property_span(u8, 0, len(raw), np.frombuffer(name.encode(), dtype=np.uint8))
        value = raw[start:end].decode() if start >= 0 else None
        if value != decoded.get(name):
            raise AssertionError(
                f"property_span({name!r}) = {value!r}, decode_properties says {decoded.get(name)!r}"
            )

    # a dict of valid properties round-trips
    valid = {}
    for name, value in decoded.items():
        try:
            properties.validate_property(name, value)
        except ValueError:
            continue
        valid[name] = value
    if properties.decode_properties(properties.encode_properties(valid)) != valid:
        raise AssertionError("encode/decode of valid properties is not the identity")


if __name__ == "__main__":
    _harness.fuzz(test_one_input, seeds)
