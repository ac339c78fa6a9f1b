"""broker/grpc/sent_message.py: a plain sent message as the store's columnar put takes it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from rocketstore import MessageStore
from rocketstore.broker.grpc.sent_message import as_batch_of_one
from rocketstore.message import Message

from .conftest import SMALL

PLAIN = Message(
    topic="T",
    body=b"hello",
    tags="TagA",
    keys=["k1", "k2"],
    properties={"region": "eu", "__SHARDINGKEY": "g", "BORN_TIMESTAMP": "5"},
    uniq_key="7F0000010001",
    born_timestamp=5,
    born_host="10.0.0.1:1234",
    sys_flag=1,
)


def record(root: Path, physical_offset: int, size: int) -> bytes:
    segment = sorted((root / "commitlog").iterdir())[0]  # (the next one is made ahead)
    return segment.read_bytes()[physical_offset : physical_offset + size]


def test_a_batch_of_one_stores_the_record_put_messages_writes(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "a", SMALL) as a, MessageStore.open(tmp_path / "b", SMALL) as b:
        by_message = a.put_messages([dataclasses.replace(PLAIN, queue_id=2)])[0]
        batch = as_batch_of_one(PLAIN, 2)
        assert batch is not None
        [by_batch] = b.put_encoded_batches([batch])
        first = record(tmp_path / "a", by_message.physical_offset, by_message.wrote_bytes)
        second = record(tmp_path / "b", int(by_batch.physical_offsets[0]), int(by_batch.sizes[0]))
    # all but the store timestamp (bytes 56-63 of a record with an IPv4 born host)
    assert len(first) == len(second) == by_message.wrote_bytes
    assert first[:56] == second[:56] and first[64:] == second[64:]


@pytest.mark.parametrize(
    "change",
    [
        {"properties": {"bad": "a\x01b"}},  # a separator: put_messages refuses it, naming it
        {"properties": {"empty": ""}},
        {"properties": {"long": "x" * 40_000}},  # more than a batch entry's properties length
        {"born_host": None},  # put_messages gives the store's own
        {"uniq_key": None},  # put_messages makes one
    ],
)
def test_what_the_batch_encoding_cannot_carry_is_left_to_put_messages(change: dict[str, Any]) -> None:
    assert as_batch_of_one(dataclasses.replace(PLAIN, **change), 0) is None
