"""dispatch_batch (one compiled pass over many records) against the rules applied record by
record: decode_record, decode_properties, Java's hash of the tags, the delivery time of a
delayed record. Odd properties, text that is not UTF-8, IPv6 hosts and a damaged record included."""

from __future__ import annotations

import numpy as np

from rocketstore.codec.commitlog_record import (
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    TX_PREPARED,
    decode_record,
    encode_message,
)
from rocketstore.codec.java_hash import tags_code
from rocketstore.codec.properties import decode_properties
from rocketstore.dispatch_columns import dispatch_batch
from rocketstore.message import SCHEDULE_TOPIC, schedule_tags_code

LEVELS = (1000, 5000, 10000)


def record(topic: bytes, props: bytes, i: int, sys_flag: int = 0) -> bytearray:
    v6 = sys_flag & (SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)
    return encode_message(
        body=b"body-%d" % i,
        topic=topic,
        properties=props,
        queue_id=i % 3,
        flag=0,
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000 + i,
        born_addr=b"\0" * (16 if sys_flag & SYSFLAG_BORNHOST_V6 else 4),
        born_port=1,
        store_addr=b"\0" * (16 if v6 & SYSFLAG_STOREHOST_V6 else 4),
        store_port=2,
        store_timestamp=1_700_000_001_000 + i,
        queue_offset=100 + i,
    )


def expected(buf: bytes, pos: int) -> tuple[object, ...]:
    """What the store's rules give one record, applied record by record."""
    rec = decode_record(buf, pos)
    props = decode_properties(rec.properties)
    if rec.topic == SCHEDULE_TOPIC and "DELAY" in props:
        code = schedule_tags_code(props["DELAY"], rec.store_timestamp, LEVELS)
    else:
        code = tags_code(props.get("TAGS"))
    return (
        pos,
        rec.total_size,
        rec.topic,
        rec.queue_id,
        rec.queue_offset,
        code,
        rec.store_timestamp,
        rec.sys_flag,
        props.get("KEYS"),
        props.get("UNIQ_KEY"),
    )


def test_dispatch_batch_applies_the_per_record_rules() -> None:
    cases = [
        (b"TopicA", b"TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01u1", 0),
        (b"TopicA", b"", 0),
        (b"TopicA", b"TAGS\x01first\x02TAGS\x01second\x02", 0),  # the last wins, trailing \x02
        (b"TopicB", b"TAGS\x01\x02KEYS\x01\x02\x01x\x02UNIQ_KEY", 0),  # empty values and names skipped
        (b"TopicB", b"TAGS\x01caf\xc3\xa9\x02KEYS\x01\xe6\x97\xa5 k", SYSFLAG_BORNHOST_V6),
        (b"TopicB", b"TAGS\x01bad\xff\x02KEYS\x01k\xfe", SYSFLAG_STOREHOST_V6),  # not UTF-8
        (b"Topic\xff", b"TAGS\x01t", 0),
        (b"Topic\xfe", b"TAGS\x01t", 0),  # reads as the same topic as the one above
        (SCHEDULE_TOPIC.encode(), b"DELAY\x012\x02TAGS\x01t\x02REAL_TOPIC\x01TopicA", 0),
        (SCHEDULE_TOPIC.encode(), b"DELAY\x01x", 0),  # a level that is not a number
        (SCHEDULE_TOPIC.encode(), b"TAGS\x01t", 0),  # no DELAY: the tags' code
        (b"TopicA", b"KEYS\x01tx\x02UNIQ_KEY\x01u2", TX_PREPARED),
    ]
    records = [record(topic, props, i, flag) for i, (topic, props, flag) in enumerate(cases)]
    damaged = record(b"TopicA", b"TAGS\x01d", 99)
    damaged[-8:-6] = b"\x00\x05"  # PROPERTIESLENGTH: the parts no longer add up to TOTALSIZE
    records.insert(4, damaged)
    buf = b"\0" * 64 + b"".join(records)  # records start anywhere in a segment
    positions = np.cumsum([64] + [len(r) for r in records[:-1]]).astype(np.int64)
    sizes = np.array([len(r) for r in records], dtype=np.int64)

    batch, bad = dispatch_batch(buf, positions, sizes, 1 << 30, LEVELS)

    assert bad.tolist() == [int(positions[4])]
    want = [expected(buf, int(p)) for p in np.delete(positions, 4)]
    got = [(phy - (1 << 30), *rest) for phy, *rest in batch.requests()]
    assert got == want
    assert len(batch.topics) == len(set(batch.topics)) == 4  # TopicA, TopicB, Topic\ufffd, SCHEDULE


def test_dispatch_batch_of_no_records() -> None:
    none = np.zeros(0, dtype=np.int64)
    batch, bad = dispatch_batch(b"", none, none, 0, LEVELS)
    assert len(batch) == 0 and len(bad) == 0 and batch.topics == []
