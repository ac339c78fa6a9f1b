"""Fuzz target: offsetMsgId decoding (codec/message_id.py).

    python fuzz/target_message_id.py [libFuzzer options] [corpus dir]

Contract: ``decode_offset_msg_id`` raises nothing but CorruptDataError for any text, and what
it accepts encodes back to the same id (upper-cased).
"""

from __future__ import annotations

import _harness
from rocketstore.codec import message_id
from rocketstore.errors import CorruptDataError

_harness.instrument(message_id)
atheris = _harness.atheris


def seeds() -> list[bytes]:
    return [
        b"7F00000100002A9F0000000000000000",
        b"0A0000010000271100000000000123AB",
        b"00000000000000000000000000000001" + b"0" * 24,
    ]


def test_one_input(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    try:
        addr, port, offset = message_id.decode_offset_msg_id(text)
    except CorruptDataError:
        return
    again = message_id.encode_offset_msg_id(addr, port, offset)
    if again != text.upper():
        raise AssertionError(f"{text!r} decodes to ({addr!r}, {port}, {offset}), which encodes as {again!r}")


if __name__ == "__main__":
    _harness.fuzz(test_one_input, seeds)
