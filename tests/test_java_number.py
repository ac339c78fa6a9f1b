"""Numbers in text as RocketMQ's Java reads them: one parser for headers, properties, settings
and transaction op bodies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketstore.codec.java_number import parse_java_int, parse_java_long

LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1


@pytest.mark.parametrize(
    ("text", "long", "int_"),
    [
        ("0", 0, 0),
        ("-0", 0, 0),
        ("+5", 5, 5),  # Java 7+ takes a plus sign
        ("007", 7, 7),
        ("0" * 5000 + "7", 7, 7),  # leading zeros, any number (int() stops at 4,300 digits)
        (str(INT_MAX), INT_MAX, INT_MAX),
        (str(INT_MAX + 1), INT_MAX + 1, None),
        (str(INT_MIN), INT_MIN, INT_MIN),
        (str(INT_MIN - 1), INT_MIN - 1, None),
        (str(LONG_MAX), LONG_MAX, None),
        (str(LONG_MAX + 1), None, None),
        (str(LONG_MIN), LONG_MIN, None),
        (str(LONG_MIN - 1), None, None),
        ("9" * 20, None, None),
        ("1" * 5000, None, None),
        ("", None, None),
        ("+", None, None),
        ("-", None, None),
        ("--3", None, None),
        ("+-3", None, None),
        ("1_000", None, None),  # int() takes these
        (" 1", None, None),
        ("1 ", None, None),
        ("1\n", None, None),
        ("0x10", None, None),
        ("1.5", None, None),
        ("1e3", None, None),
        ("²", None, None),  # a digit to str.isdigit, not a decimal one
        ("٣", None, None),  # Java takes other scripts' digits; no client writes them (see module)
        ("１", None, None),
    ],
)
def test_texts_read_as_java_reads_them(text: str, long: int | None, int_: int | None) -> None:
    assert parse_java_long(text) == long
    assert parse_java_int(text) == int_


@given(st.integers(LONG_MIN, LONG_MAX), st.integers(0, 30), st.booleans())
def test_every_long_reads_back(n: int, zeros: int, plus: bool) -> None:
    sign = "-" if n < 0 else "+" if plus else ""
    text = sign + "0" * zeros + str(abs(n))
    assert parse_java_long(text) == n
    assert parse_java_int(text) == (n if INT_MIN <= n <= INT_MAX else None)
