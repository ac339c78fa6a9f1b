"""A half's CHECK_IMMUNITY_TIME_IN_SECONDS is its producer's text: read as RocketMQ reads it
(``Long.valueOf``; -1 or anything else: the transaction timeout), and no text stops the checks of
the halves after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketstore import Message
from rocketstore.broker.transactions import PROPERTY_CHECK_IMMUNITY, TransactionLog, half_message, immunity_ms
from rocketstore.store import MessageStore

TIMEOUT_MS = 6_000


@pytest.mark.parametrize(
    ("text", "wait_ms"),
    [
        (None, TIMEOUT_MS),
        ("", TIMEOUT_MS),
        ("20", 20_000),
        ("+20", 20_000),
        ("0020", 20_000),
        ("0", 0),
        ("-5", -5_000),  # Java's too: such a half is checked at its first round
        ("-1", TIMEOUT_MS),
        ("9223372036854775807", 9223372036854775807 * 1000),
        ("9223372036854775808", TIMEOUT_MS),  # past a Java long
        ("²", TIMEOUT_MS),  # a digit to str.isdigit, not to int() or Java
        ("٣", TIMEOUT_MS),
        ("1" * 5000, TIMEOUT_MS),  # past int()'s 4300 digits
        (" 20", TIMEOUT_MS),
        ("1_000", TIMEOUT_MS),
        ("20s", TIMEOUT_MS),
    ],
)
def test_immunity_is_read_as_rocketmq_reads_it(text: str | None, wait_ms: int) -> None:
    assert immunity_ms(text, TIMEOUT_MS) == wait_ms


def test_a_hostile_immunity_stops_no_check(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "store") as store:
        texts = ["²", "1" * 5000, "x", "3600", "-7", None]
        halves = [
            half_message(
                Message(
                    "Tx",
                    f"m{i}".encode(),
                    properties={} if text is None else {PROPERTY_CHECK_IMMUNITY: text},
                ),
                0,
            )
            for i, text in enumerate(texts)
        ]
        results = store.put_messages(halves, internal=True)
        assert all(r.ok for r in results)
        assert store.wait_dispatched(30)
        txlog = TransactionLog(store, timeout_ms=TIMEOUT_MS, check_max=15)
        txlog.load()
        stored = results[0].store_timestamp
        due, expired = txlog.orphans(stored + 10_000)
        # the 3600 s one is still immune; every other is due after the 6 s timeout
        assert [o.half.body for o in due] == [b"m0", b"m1", b"m2", b"m4", b"m5"]
        assert [o.topic for o in due] == ["Tx"] * 5 and not expired
        assert [o.half.body for o in txlog.orphans(stored + 3_600_001)[0]] == [
            b"m0", b"m1", b"m2", b"m3", b"m4", b"m5",
        ]  # fmt: skip
