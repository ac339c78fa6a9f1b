"""The compiled batch encoder (``prepare._prepare_plain`` + ``encode_batch``) writes exactly the
records the per-message encoder writes, and hands anything unusual to the general path."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketstore import InvalidMessageError, ManualClock, Message, StoreConfig
from rocketstore.codec.commitlog_record import decode_record
from rocketstore.prepare import MessageEncoder

T0 = 1_700_000_000_000
text = st.text(
    alphabet=st.characters(blacklist_characters="\x00\x01\x02 ", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
)


def encoder(uniq: bool, host: str = "127.0.0.1:10911") -> MessageEncoder:
    return MessageEncoder(StoreConfig(generate_uniq_key=uniq, store_host=host), ManualClock(T0))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.binary(max_size=300),
            st.one_of(st.none(), text),
            st.lists(text, max_size=3),
            st.integers(0, 65535),
            st.integers(-(2**31), 2**31 - 1),
            st.one_of(st.none(), st.integers(0, 2**62)),
        ),
        min_size=16,
        max_size=60,
    ),
    host=st.sampled_from(["127.0.0.1:10911", "[fe80::1]:10911"]),
)
def test_batch_records_equal_per_message_records(
    rows: list[tuple[bytes, str | None, list[str], int, int, int | None]], host: str
) -> None:
    msgs = [
        Message("Topic_1", body, tags=tags, keys=keys, queue_id=q, flag=flag, born_timestamp=born)
        for body, tags, keys, q, flag, born in rows
    ]
    enc = encoder(False, host)
    batch = enc._prepare_plain(msgs)
    assert batch is not None
    singles = enc.prepare_many(msgs)
    blob = bytes(batch.blob)
    for i, p in enumerate(singles):
        start, length = int(batch.starts[i]), int(batch.lengths[i])
        assert blob[start : start + length] == p.record, i
        assert (batch.queue_ids[i], batch.tags_codes[i], batch.keys[i]) == (p.queue_id, p.tags_code, p.keys)
    assert batch.sys_flags.tolist() == [p.sys_flag for p in singles]


def test_generated_uniq_keys_are_in_the_records() -> None:
    msgs = [Message("T", f"x{i}".encode(), tags="a", keys=[f"k{i}"], queue_id=i % 3) for i in range(20)]
    batch = encoder(True)._prepare_plain(msgs)
    assert batch is not None
    for i, uniq in enumerate(batch.uniq_keys.to_list()):
        rec = decode_record(bytes(batch.blob), int(batch.starts[i]))
        assert uniq and rec.properties == f"KEYS\x01k{i}\x02TAGS\x01a\x02UNIQ_KEY\x01{uniq}"
        assert rec.body_len == len(msgs[i].body)


@pytest.mark.parametrize(
    "odd",
    [
        Message("Other", b"x", queue_id=0),  # a second topic
        Message("T", b"x", keys=[""], queue_id=0),  # an empty key
        Message("T", b"x", keys=["a", ""], queue_id=0),  # an empty key after another
        Message("T", b"x", keys="a b", queue_id=0),  # one key (a str) with a space
        Message("T", b"x", keys=("a", "b c"), queue_id=0),  # a space inside the second key
        Message("T", b"x", properties={"a": "b"}, queue_id=0),
        Message("T", b"x", uniq_key="U", queue_id=0),
        Message("T", b"x", keys=["has space"], queue_id=0),
        Message("T", b"x", tags="bad\x01tag", queue_id=0),
        Message("T", b"x", queue_id=70000),
        Message("T", b"x", flag=2**40, queue_id=0),
    ],
)
def test_anything_unusual_takes_the_general_path(odd: Message) -> None:
    """(The encoder is given placed messages: the store picks the queues of those that name none.)"""
    msgs = [Message("T", b"plain", tags="a", queue_id=0) for _ in range(20)] + [odd]
    enc = encoder(False)
    assert enc._prepare_plain(msgs) is None
    try:
        general = enc.prepare_batch(msgs)
    except InvalidMessageError as exc:
        assert "message 20 of the batch" in str(exc)  # the general path names the bad one
    else:
        assert general is not None and len(general) == 21
