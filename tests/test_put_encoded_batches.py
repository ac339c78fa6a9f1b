"""MessageStore.put_encoded_batches: producers' batches in RocketMQ's batch encoding, stored all or
none in one append, each inner message's properties bytes kept as sent with the batch's added (as
RocketMQ's MessageExtBatchEncoder stores them).

What is checked: the records on disk field by field (and their properties byte for byte), what
the queues, the tags filter, the key and id lookups, ``verify_store`` and a reopen see, the
per-batch results, and the errors (naming batch and message) with nothing written.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from rocketstore import (
    EncodedBatch,
    EncodedColumns,
    InvalidMessageError,
    ManualClock,
    MessageStore,
    PutStatus,
    StoreConfig,
)
from rocketstore.codec.commitlog_record import SYSFLAG_BORNHOST_V6, SYSFLAG_COMPRESSED, decode_record
from rocketstore.codec.java_hash import tags_code
from rocketstore.codec.message_batch import BatchEntry, encode_batch_body
from rocketstore.verify import verify_store
from tests.test_store_api import CFG, T0, drain

BORN = 1_600_000_000_123
ENTRIES = [
    # the Java client's shape: KEYS, TAGS, WAIT, UNIQ_KEY, a trailing separator
    BatchEntry(7, b"first body", "KEYS\x01k1 k2\x02TAGS\x01red\x02WAIT\x01true\x02UNIQ_KEY\x01AAAA0001\x02"),
    BatchEntry(0, b"", "TAGS\x01blue\x01x\x02UNIQ_KEY\x01AAAA0002"),  # no trailing separator; "blue\x01x"
    BatchEntry(-5, bytes(range(256)), ""),  # no properties at all
    BatchEntry(1, "é body".encode(), "own\x01v\x02TAGS\x01red\x02UNIQ_KEY\x01AAAA0004\x02"),
]


def open_store(path: Path, cfg: StoreConfig = CFG) -> MessageStore:
    return MessageStore.open(path, cfg, clock=ManualClock(T0))


def batch(
    topic: str = "Orders",
    queue_id: int = 1,
    entries: list[BatchEntry] = ENTRIES,
    born_host: str = "10.1.2.3:40001",
    **kwargs: object,
) -> EncodedBatch:
    return EncodedBatch(topic, queue_id, encode_batch_body(entries), born_host, BORN, **kwargs)  # type: ignore[arg-type]


def expected_properties(inner: str, extra: str) -> bytes:
    """RocketMQ's MessageExtBatchEncoder: the inner bytes, a separator when they do not end
    with one and both are non-empty, then the batch's."""
    sep = "\x02" if inner and extra and not inner.endswith("\x02") else ""
    return (inner + sep + extra).encode()


def test_records_keep_each_message_and_add_the_batch_properties(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        [result] = store.put_encoded_batches([batch(properties={"CLUSTER": "c1"}, reconsume_times=2)])
        drain(store)
        assert result.status is PutStatus.PUT_OK and result.topic == "Orders" and len(result) == 4
        assert result.queue_ids.tolist() == [1] * 4 and result.queue_offsets.tolist() == [0, 1, 2, 3]
        assert result.uniq_keys.to_list() == ["AAAA0001", "AAAA0002", None, "AAAA0004"]
        for i, entry in enumerate(ENTRIES):
            msg = store.look_message_by_offset(int(result.physical_offsets[i]))
            assert msg is not None
            rec = decode_record(msg.record_view, 0, check_crc=True)
            assert rec.total_size == result.sizes[i]
            assert (rec.topic, rec.queue_id, rec.queue_offset) == ("Orders", 1, i)
            assert (rec.flag, msg.body) == (entry.flag, entry.body)
            assert (rec.born_timestamp, msg.born_host) == (BORN, "10.1.2.3:40001")
            assert rec.store_timestamp == result.store_timestamp == T0
            assert (rec.sys_flag, rec.reconsume_times, rec.prepared_transaction_offset) == (0, 2, 0)
            assert rec.properties.encode() == expected_properties(entry.properties, "CLUSTER\x01c1")
            assert msg.properties["CLUSTER"] == "c1"
        first = store.look_message_by_offset(int(result.physical_offsets[0]))
        assert first is not None
        assert (first.tags, first.keys, first.uniq_key) == ("red", ["k1", "k2"], "AAAA0001")
        assert first.tags_code == tags_code("red")
        red = store.get_message("g", "Orders", 1, 0, 32, tags=("red",))
        assert [m.body for m in red.messages] == [ENTRIES[0].body, ENTRIES[3].body]
        assert [m.body for m in store.query_message("Orders", "k2")] == [b"first body"]
        found = store.query_by_uniq_key("Orders", "AAAA0004")
        assert found is not None and found.body == ENTRIES[3].body
    report = verify_store(tmp_path, CFG)
    assert report.clean, report.damage
    assert report.records == report.queue_entries == 4
    with open_store(tmp_path) as store:
        assert store.max_offset_in_queue("Orders", 1) == 4
        again = store.get_message("g", "Orders", 1, 0, 32)
        assert [m.body for m in again.messages] == [e.body for e in ENTRIES]


def test_several_batches_one_append_in_order_with_v6_born_hosts(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        results = store.put_encoded_batches(
            [
                batch("A", 0, ENTRIES[:2]),
                batch("B", 3, ENTRIES[2:], born_host="[::1]:9", sys_flag=SYSFLAG_COMPRESSED),
                batch("A", 0, ENTRIES[1:2]),
            ]
        )
        drain(store)
        assert [r.topic for r in results] == ["A", "B", "A"] and [len(r) for r in results] == [2, 2, 1]
        offsets = [int(o) for r in results for o in r.physical_offsets]
        sizes = [int(s) for r in results for s in r.sizes]
        assert all(a + n == b for a, n, b in zip(offsets, sizes, offsets[1:]))  # back to back
        assert results[2].queue_offsets.tolist() == [2]
        for offset in offsets[2:4]:
            msg = store.look_message_by_offset(offset)
            assert msg is not None
            rec = decode_record(msg.record_view, 0, check_crc=True)
            assert msg.born_host == "[0:0:0:0:0:0:0:1]:9"
            assert rec.sys_flag == SYSFLAG_BORNHOST_V6 | SYSFLAG_COMPRESSED
            assert rec.store_timestamp == T0  # written where a v6 born host puts it
            assert (rec.topic, rec.queue_id) == ("B", 3)
        assert store.max_offset_in_queue("B", 3) == 2
    report = verify_store(tmp_path, CFG)
    assert report.clean, report.damage
    assert report.records == 5


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (batch(entries=[]), "batch 1 (topic 'Orders'): the batch holds no message"),
        (
            EncodedBatch("Orders", 1, encode_batch_body(ENTRIES)[:-3], "1.2.3.4:5", BORN),
            "batch 1 (topic 'Orders'): the encoding is damaged: batch message 3 at byte",
        ),
        (
            batch(entries=[ENTRIES[0], BatchEntry(0, b"x", "DELAY\x013")]),
            "message 1 of the batch: property 'DELAY': batch messages cannot be delayed",
        ),
        (
            batch(entries=[BatchEntry(0, b"x", "REAL_TOPIC\x01T")]),
            "message 0 of the batch: property 'REAL_TOPIC'",
        ),
        (batch(properties={"DELAY": "2"}), "property 'DELAY' of the batch: batch messages cannot be delayed"),
        (batch(properties={"TAGS": "t"}), "property 'TAGS' of the batch: each message of a batch carries"),
        (batch(sys_flag=0x4), "a batch takes only the body's bits"),
        (batch(queue_id=70000), "queue_id must be an int in 0..65535"),
        (batch(born_host="nowhere"), "born_host:"),
        (batch(born_host=["1.2.3.4:5"]), "born_host must be a str"),
        (batch(properties={"a": ["unhashable"]}), "names and values must be strings"),
        (batch("bad/topic"), "batch 1 (topic 'bad/topic')"),
        (
            batch(entries=[ENTRIES[0], BatchEntry(0, bytes(5000), "")]),
            "message 1 of the batch: body of 5000 bytes exceeds",
        ),
        (
            batch(entries=[BatchEntry(0, b"x", "a\x01" + "v" * 32760)], properties={"CLUSTER": "c"}),
            "message 0 of the batch: properties take",
        ),
    ],
)
def test_a_bad_batch_refuses_the_call_and_stores_nothing(
    tmp_path: Path, bad: EncodedBatch, words: str
) -> None:
    cfg = StoreConfig(
        commitlog_segment_size=CFG.commitlog_segment_size,
        consume_queue_entries=40,
        index_hash_slots=64,
        index_max_entries=256,
        max_message_size=4096,
    )
    with open_store(tmp_path, cfg) as store:
        store.put_encoded_batches([batch("Kept", 0, ENTRIES[:1])])
        before = store.max_phy_offset()
        with pytest.raises(InvalidMessageError) as caught:
            store.put_encoded_batches([batch("Other", 0, ENTRIES[:1]), bad])
        assert words in str(caught.value)
        if "properties take" in words:
            assert caught.value.status is PutStatus.PROPERTIES_SIZE_EXCEEDED
        assert store.max_phy_offset() == before
        assert store.max_offset_in_queue("Other", 0) == 0
        with pytest.raises(InvalidMessageError, match="expected a sequence of EncodedBatch"):
            store.put_encoded_batches(bad)  # type: ignore[arg-type]
        assert store.put_encoded_batches([]) == []


# --- put_encoded_columns: the same batches held as columns -----------------------------------
def columns_of(batches: list[EncodedBatch], extras: list[bytes]) -> EncodedColumns:
    topics = list(dict.fromkeys(b.topic for b in batches))
    hosts = list(dict.fromkeys(b.born_host for b in batches))
    data = b"".join(b.data for b in batches)
    return EncodedColumns(
        np.frombuffer(data, dtype=np.uint8),
        np.cumsum([0, *(len(b.data) for b in batches)]),
        topics,
        np.array([topics.index(b.topic) for b in batches]),
        np.array([b.queue_id for b in batches]),
        hosts,
        np.array([hosts.index(b.born_host) for b in batches]),
        np.array([b.born_timestamp for b in batches]),
        np.array([b.sys_flag for b in batches]),
        np.array([b.reconsume_times for b in batches]),
        np.frombuffer(b"".join(extras), dtype=np.uint8),
        np.cumsum([0, *map(len, extras)]),
    )


@pytest.mark.parametrize("copies", [1, 12])  # 4 and 48 records: appended one by one, then in columns
def test_columns_store_what_the_same_batches_store(tmp_path: Path, copies: int) -> None:
    batches = [batch(queue_id=q % 2, born_host=f"10.1.2.{q}:{40000 + q}") for q in range(copies)]
    batches.append(batch("Other", 0, ENTRIES[:1], properties={"CLUSTER": "c1"}))
    extras = [b""] * copies + [b"CLUSTER\x01c1"]
    with open_store(tmp_path / "a") as a, open_store(tmp_path / "b") as b:
        listed = a.put_encoded_batches(batches)
        result = b.put_encoded_columns(columns_of(batches, extras))
        drain(a)
        drain(b)
        assert result.status is PutStatus.PUT_OK and result.stored and len(result) == 4 * copies + 1
        assert result.ends.tolist() == np.cumsum([len(r) for r in listed]).tolist()
        assert (
            result.physical_offsets.tolist() == np.concatenate([r.physical_offsets for r in listed]).tolist()
        )
        assert result.queue_offsets.tolist() == np.concatenate([r.queue_offsets for r in listed]).tolist()
        assert result.uniq_keys.to_list() == [k for r in listed for k in r.uniq_keys.to_list()]
        assert [result.topic_ids[i] for i in (0, -1)] == [0, 1]
        assert a.max_phy_offset() == b.max_phy_offset()
        for offset in result.physical_offsets.tolist():  # byte for byte (one clock: one store time)
            ma, mb = a.look_message_by_offset(offset), b.look_message_by_offset(offset)
            assert ma is not None and mb is not None
            assert bytes(ma.record_view) == bytes(mb.record_view)
            decode_record(mb.record_view, 0, check_crc=True)
        for topic in ("Orders", "Other"):
            for q in (0, 1):
                assert [m.body for m in a.get_message("g", topic, q, 0, 64).messages] == [
                    m.body for m in b.get_message("g", topic, q, 0, 64).messages
                ]
    report = verify_store(tmp_path / "b", CFG)
    assert report.clean, report.damage
    assert report.records == report.queue_entries == 4 * copies + 1


def test_encoded_columns_of_batches_are_the_columns_written_out() -> None:
    batches = [batch(queue_id=q % 2, born_host=f"10.1.2.{q % 3}:{40000 + q}") for q in range(5)]
    batches.append(batch("Other", 1, ENTRIES[:1], properties={"CLUSTER": "c1"}))
    batches[2] = dataclasses.replace(batches[2], sys_flag=SYSFLAG_COMPRESSED, reconsume_times=3)
    extras = [b""] * 5 + [b"CLUSTER\x01c1"]
    for got, want in (
        (EncodedColumns.of(batches, extras), columns_of(batches, extras)),
        (EncodedColumns.of(batches), columns_of(batches, [b""] * 6)),  # nothing added
    ):
        for name in (f.name for f in dataclasses.fields(EncodedColumns)):
            mine, theirs = getattr(got, name), getattr(want, name)
            assert list(mine) == list(theirs), name


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"topic_ids": np.array([0, 5])}, "topic_ids 5 is outside 0..0"),
        ({"queue_ids": np.array([0, -1])}, "queue_ids -1 is outside"),
        ({"sys_flags": np.array([0, 4])}, "no transaction"),
        ({"reconsume_times": np.array([0, -3])}, "reconsume_times -3"),
        ({"born_host_ids": np.array([1, 0])}, "born_host_ids 1 is outside 0..0"),
        ({"queue_ids": np.array([0, 1, 2])}, "queue_ids must be 2 integers"),
        ({"queue_ids": np.array([0.0, 1.0])}, "queue_ids must be 2 integers"),
        ({"data_offsets": np.array([0, 9, 5])}, "data_offsets must rise"),
        ({"data": np.zeros(3, dtype=np.int64)}, "data must be a uint8 array"),
        ({"born_hosts": ["nowhere"]}, "born_host"),
        ({"topics": ["bad topic"]}, "topic 0"),
        ({"properties": np.frombuffer(b"TAGS\x01x", dtype=np.uint8)}, "property 'TAGS' of the batch"),
        ({"properties": np.frombuffer(b"a\x01b\x02\x02c", dtype=np.uint8)}, "has no name or no value"),
    ],
)
def test_bad_columns_are_refused_naming_what_is_wrong(
    tmp_path: Path, change: dict[str, object], words: str
) -> None:
    good = columns_of([batch(queue_id=0), batch(queue_id=1)], [b"", b""])
    fields = {name: getattr(good, name) for name in good.__dataclass_fields__}
    fields.update(change)
    if "properties" in change:
        props = change["properties"]
        assert isinstance(props, np.ndarray)
        fields["properties_offsets"] = np.array([0, 0, len(props)])
    with open_store(tmp_path) as store:
        with pytest.raises(InvalidMessageError) as caught:
            store.put_encoded_columns(EncodedColumns(**fields))  # type: ignore[arg-type]
        assert words in str(caught.value)
        assert store.max_phy_offset() == 0


def test_a_few_records_rolling_into_the_next_segment_match_the_columnar_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round of a few records takes the per-record append (``CommitLog.append_few``), a large
    one the columnar; across a segment's end (a BLANK record, the rest in the next segment) both
    write the same bytes and answer the same offsets."""
    import rocketstore.put_path as put_path

    filler = batch(queue_id=0, entries=[BatchEntry(0, b"f" * 200, "")])
    round_ = [batch(queue_id=q % 2) for q in range(2)]
    results: list[tuple[list[int], list[int]]] = []
    logs: list[list[bytes]] = []
    for name, few in (("few", 32), ("columnar", 0)):
        monkeypatch.setattr(put_path, "_FEW", few)
        with open_store(tmp_path / name) as store:
            while store.max_phy_offset() < CFG.commitlog_segment_size - 1200:
                store.put_encoded_batches([filler])
            result = store.put_encoded_columns(columns_of(round_, [b"", b""]))
            drain(store)
            assert result.status is PutStatus.PUT_OK and len(result) == 8
            assert result.physical_offsets[-1] >= CFG.commitlog_segment_size  # it rolled
            results.append((result.physical_offsets.tolist(), result.queue_offsets.tolist()))
            found = [store.look_message_by_offset(o) for o in results[-1][0]]
            logs.append([bytes(m.record_view) for m in found if m is not None])
            assert len(logs[-1]) == 8
            queued = store.get_message("g", "Orders", 1, 0, 64).messages
            assert [m.queue_offset for m in queued] == list(range(4))
        report = verify_store(tmp_path / name, CFG)
        assert report.clean, report.damage
    assert results[0] == results[1]
    assert logs[0] == logs[1]
