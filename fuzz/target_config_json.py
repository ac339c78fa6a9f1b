"""Fuzz target: the JSON configs (codec/config_json.py): topics.json, consumerOffset.json,
delayOffset.json, fastjson's bare integer keys included.

    python fuzz/target_config_json.py [libFuzzer options] [corpus dir]

Contract: each decoder raises nothing but CorruptDataError on any text, and what it accepts
encodes and decodes back to the same tables. Inputs whose first byte has its top bit set are
built as documents of the right shape with fuzzed keys and values (``structured``): raw byte
mutations alone rarely write a non-ASCII digit as a key, a number of 4300+ digits or a
thousand nested arrays.
"""

from __future__ import annotations

import json

import _harness
from rocketstore.codec import config_json
from rocketstore.errors import CorruptDataError

_harness.instrument(config_json)
atheris = _harness.atheris


def seeds() -> list[bytes]:
    return [
        b"\x00" + (_harness.FIXTURE / "config" / "delayOffset.json").read_bytes(),
        b'\x00{"offsetTable":{3:12,4:0},"rocketstoreCommitLogOffset":5}',
        b'\x01{"offsetTable":{"TopicA@g1":{0:12,1:5},"%RETRY%g1@g1":{"0":1}}}',
        b'\x02{"dataVersion":{"counter":3,"timestamp":1700000000000},"topicConfigTable":{"TopicA":'
        b'{"topicName":"TopicA","readQueueNums":4,"writeQueueNums":4,"perm":6,'
        b'"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false}}}',
    ]


def structured(fdp: atheris.FuzzedDataProvider, which: int) -> str:
    """A document of the right shape with fuzzed keys and values: any text as a key (a queue id,
    a delay level, ``topic@group``, a topic), an integer of any size, a value nested deeply, a
    number of thousands of digits, fastjson's bare keys."""
    entries = []
    for _ in range(fdp.ConsumeIntInRange(0, 3)):
        key = json.dumps(fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 8)))
        kind = fdp.ConsumeIntInRange(0, 4)
        if kind == 0:
            value = str(fdp.ConsumeIntInRange(-(1 << 70), 1 << 70))
        elif kind == 1:
            depth = fdp.ConsumeIntInRange(0, 3000)
            value = "[" * depth + "1" + "]" * depth
        elif kind == 2:
            value = "9" * fdp.ConsumeIntInRange(1, 6000)
        elif kind == 3:
            value = json.dumps(
                {fdp.ConsumeUnicodeNoSurrogates(4): fdp.ConsumeIntInRange(-(1 << 66), 1 << 66)}
            )
        else:
            value = json.dumps(fdp.ConsumeUnicodeNoSurrogates(6))
        if fdp.ConsumeBool() and key[1:-1].lstrip("-").isdigit():
            key = key[1:-1]  # fastjson's bare integer key
        entries.append(f"{key}:{value}")
    table = "{" + ",".join(entries) + "}"
    if which == 2:
        return '{"topicConfigTable":{"T":' + table + "}}"
    return '{"offsetTable":' + (table if which == 0 else '{"T@g":' + table + "}") + "}"


def test_one_input(data: bytes) -> None:
    if not data:
        return
    which = data[0] % 3
    if data[0] & 0x80:
        text = structured(atheris.FuzzedDataProvider(data[1:]), which)
    else:
        text = data[1:].decode("utf-8", "replace")
    try:
        if which == 0:
            offsets, mark = config_json.decode_delay_offsets(text)
            again = config_json.decode_delay_offsets(config_json.encode_delay_offsets(offsets, mark).decode())
            ok = again == (offsets, mark)
        elif which == 1:
            table = config_json.decode_offsets(text)
            ok = config_json.decode_offsets(config_json.encode_offsets(table).decode()) == table
        else:
            topics, counter = config_json.decode_topics(text)
            encoded = config_json.encode_topics(topics, counter, 0).decode()
            ok = config_json.decode_topics(encoded) == ({t.topic: t for t in topics.values()}, counter) or (
                config_json.decode_topics(encoded)[1] == counter
                and set(config_json.decode_topics(encoded)[0]) == set(topics)
            )
    except CorruptDataError:
        return
    if not ok:
        raise AssertionError(f"config {which}: what was decoded does not survive encode + decode")


if __name__ == "__main__":
    _harness.fuzz(test_one_input, seeds)
