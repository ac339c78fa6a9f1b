"""Integers in text as Java parses them (``Long.parseLong``, ``Integer.parseInt``).

RocketMQ carries numbers as text (header fields, message properties, settings, transaction op
bodies) and reads them with these two. Python's ``int()`` takes more (``1_000``, blanks around
the digits), and refuses some that Java takes (leading zeros past its 4,300 digits). Java's
parsers also take other scripts' decimal digits, which no Java client writes (``Long.toString``
is ASCII) and the broker's compiled scanners do not read: these take ASCII digits only, so that
a number reads the same on every path.
"""

from __future__ import annotations

__all__ = ["parse_java_int", "parse_java_long"]

_LONG = (-(1 << 63), (1 << 63) - 1)
_INT = (-(1 << 31), (1 << 31) - 1)


def parse_java_long(text: str) -> int | None:
    """``text`` as ``Long.parseLong`` reads it, or None where that throws."""
    return _parse(text, _LONG)


def parse_java_int(text: str) -> int | None:
    """``text`` as ``Integer.parseInt`` reads it, or None where that throws."""
    return _parse(text, _INT)


def _parse(text: str, bounds: tuple[int, int]) -> int | None:
    sign = text[:1] if text[:1] in ("+", "-") else ""
    digits = text[len(sign) :]
    if not (digits.isascii() and digits.isdigit()):  # (at least one digit, nothing else)
        return None
    significant = digits.lstrip("0")
    if len(significant) > 19:
        return None
    value = int(sign + (significant or "0"))
    return value if bounds[0] <= value <= bounds[1] else None
