"""rocketstore reads RocketMQ 4.9.8's own store directories exactly as RocketMQ does.

Each fixture comes with ``*.expected.jsonl``, what RocketMQ itself read back after load() and
recovery. Every queue range, every message (every field, body included), every key query, the
checkpoint, the index headers and the commitlog range must agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocketstore import MessageExt, MessageStore
from rocketstore.codec.commitlog_scan import scan_extent
from tests.conftest import FIXTURE_CONFIG, FIXTURES, copy_fixture, fixture_clock

SAMPLES = ["store-sample", "store-sample-crash"]


def expected(name: str, kind: str) -> list[dict[str, Any]]:
    path = FIXTURES / f"{name}.expected.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if r.get("kind") == kind]


def java_host(host: str) -> str:
    """The listing's JSON drops the ']' of IPv6 hosts ("[fe80:0:0:0:1:2:3:4:40005"); its text form
    and the README write "[fe80:0:0:0:1:2:3:4]:40005", which is what rocketstore returns."""
    if host.startswith("[") and "]" not in host:
        addr, _, port = host[1:].rpartition(":")
        return f"[{addr}]:{port}"
    return host


@pytest.fixture(scope="module", params=SAMPLES)
def opened(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, MessageStore]]:
    name = request.param
    root = copy_fixture(name, tmp_path_factory.mktemp(name))
    store = MessageStore.open(root, FIXTURE_CONFIG, clock=fixture_clock(name))
    assert store.wait_dispatched(10)
    yield name, store
    store.close()


def test_recovery_path_matches_abort_file(opened: tuple[str, MessageStore]) -> None:
    name, store = opened
    info = {k: v for row in expected(name, "info") for k, v in row.items()}
    assert store.abnormal_shutdown_detected == (info["abortFileBeforeLoad"] == "true")


def test_commitlog_range(opened: tuple[str, MessageStore]) -> None:
    name, store = opened
    info = {k: v for row in expected(name, "info") for k, v in row.items()}
    assert store.min_phy_offset() == info["minPhyOffset"]
    assert store.max_phy_offset() == info["maxPhyOffset"]
    assert store.dispatch_behind_bytes == info["dispatchBehindBytes"]


def test_checkpoint(opened: tuple[str, MessageStore], tmp_path: Path) -> None:
    """The checkpoint loads as RocketMQ read it. The open store's queue flusher then moves it on
    (its first round comes a flush interval after open): never back, and never past the store
    time of what was dispatched. Compared on a read-only copy, which runs no flusher: the open
    store's checkpoint differs from RocketMQ's once that round ran (seen under load)."""
    name, store = opened
    (cp,) = expected(name, "checkpoint")
    want = (cp["physicMsgTimestamp"], cp["logicsMsgTimestamp"], cp["indexMsgTimestamp"])
    with MessageStore.open(copy_fixture(name, tmp_path), FIXTURE_CONFIG, readonly=True) as loaded:
        assert loaded.checkpoint == want
    dispatcher = store._dispatcher
    assert dispatcher is not None
    for now, then in zip(store.checkpoint, want):
        assert then <= now <= max(then, dispatcher.last_store_timestamp)


def test_index_headers(opened: tuple[str, MessageStore]) -> None:
    """Index files as RocketMQ listed them. After a crash, files reaching past the checkpoint's
    index time may hold entries that never reached the disk: RocketMQ deletes them, rocketstore
    rebuilds them from the commitlog (every key query above still matches)."""
    name, store = opened
    (cp,) = expected(name, "checkpoint")
    want = expected(name, "index_file")
    if store.abnormal_shutdown_detected:
        rebuilt = [w for w in want if w["endTs"] > cp["indexMsgTimestamp"]]
        want = [w for w in want if w["endTs"] <= cp["indexMsgTimestamp"]]
        assert rebuilt
    got = store.index_headers()
    assert [n for n, _ in got[: len(want)]] == [w["name"] for w in want]
    for (_, header), w in zip(got, want):
        assert header == {k: w[k] for k in header}
    if store.abnormal_shutdown_detected:
        (_, newest), last_kept = got[-1], want[-1]
        assert len(got) > len(want) and newest["beginPhyOffset"] >= last_kept["endPhyOffset"]


@pytest.mark.parametrize("name", SAMPLES)
def test_where_each_segment_ends(name: str) -> None:
    """Every segment parses on its own from byte 0 and ends where RocketMQ says (scan_end rows)."""
    for row in expected(name, "scan_end"):
        data = (FIXTURES / name / "commitlog" / f"{row['file']:020d}").read_bytes()
        scan = scan_extent(data, check_crc=True)
        assert scan.records == row["records"]
        assert scan.position == row["filePos"]
        assert row["file"] + scan.position == row["offset"]
        if row.get("magic") == "0xcbd43194":
            assert scan.stop == "blank" and scan.blank_size == row["declaredTotalSize"]
        else:
            assert scan.stop == "end_of_data"


def test_queue_ranges(opened: tuple[str, MessageStore]) -> None:
    name, store = opened
    for q in expected(name, "queue"):
        got = (
            store.min_offset_in_queue(q["topic"], q["queueId"]),
            store.max_offset_in_queue(q["topic"], q["queueId"]),
        )
        assert got == (q["minOffset"], q["maxOffset"]), q


def test_topics_present(opened: tuple[str, MessageStore]) -> None:
    name, store = opened
    present = {(q["topic"], q["queueId"]) for q in expected(name, "queue") if q["maxOffset"] > 0}
    listed = {(t, qid) for t, qids in store.topics().items() for qid in qids}
    assert present <= listed


def _fields(m: MessageExt) -> dict[str, Any]:
    props = m.properties
    return {
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "phyOffset": m.physical_offset,
        "storeSize": m.store_size,
        "msgId": m.msg_id,
        "sysFlag": m.sys_flag,
        "flag": m.flag,
        "bodyCRC": m.body_crc,
        "reconsumeTimes": m.reconsume_times,
        "preparedTxOffset": m.prepared_transaction_offset,
        "bornTs": m.born_timestamp,
        "bornHost": m.born_host,
        "storeTs": m.store_timestamp,
        "storeHost": m.store_host,
        "keys": props.get("KEYS"),
        "tags": m.tags,
        "uniqKey": m.uniq_key,
        "props": props,
        "cq": {"phy": m.physical_offset, "size": m.store_size, "tagsCode": m.tags_code},
        "bodyLen": len(m.body),
    }


def test_every_message_through_its_queue(opened: tuple[str, MessageStore]) -> None:
    name, store = opened
    rows = expected(name, "msg")
    assert rows
    for row in rows:
        result = store.get_message("fixture", row["topic"], row["queueId"], row["offset"], max_msgs=1)
        assert len(result.messages) == 1, (row["topic"], row["queueId"], row["offset"], result.status)
        m = result.messages[0]
        want = {k: row[k] for k in _fields(m)}
        want["bornHost"], want["storeHost"] = java_host(want["bornHost"]), java_host(want["storeHost"])
        assert _fields(m) == want
        if "body_utf8" in row:
            assert m.body == row["body_utf8"].encode("utf-8")
        else:
            assert m.body.hex() == row["body_hex"]


def test_every_message_by_offset_and_id(opened: tuple[str, MessageStore]) -> None:
    name, store = opened
    for row in expected(name, "msg"):
        by_offset = store.look_message_by_offset(row["phyOffset"])
        by_id = store.view_message_by_id(row["msgId"])
        assert by_offset is not None and by_id is not None
        assert by_offset.msg_id == by_id.msg_id == row["msgId"]
        assert by_offset.body_crc == row["bodyCRC"]


def test_commitlog_records(opened: tuple[str, MessageStore]) -> None:
    name, store = opened
    for rec in expected(name, "clrec"):
        m = store.look_message_by_offset(rec["offset"])
        assert m is not None, rec
        assert (m.store_size, m.topic, m.queue_id, m.queue_offset, m.sys_flag, m.store_timestamp) == (
            rec["size"],
            rec["topic"],
            rec["queueId"],
            rec["queueOffset"],
            rec["sysFlag"],
            rec["storeTs"],
        )
        # RocketMQ's DispatchRequest has keys "" for a record without any properties, null for one
        # whose properties lack KEYS.
        keys = m.properties.get("KEYS")
        shown = keys if keys is not None else ("null" if m.properties else "")
        assert shown == rec["keys"]
        assert (m.uniq_key if m.uniq_key is not None else "null") == rec["uniqKey"]


def test_key_queries(opened: tuple[str, MessageStore]) -> None:
    name, store = opened
    rows = expected(name, "query")
    assert rows
    for q in rows:
        got = {
            (m.queue_id, m.queue_offset, m.physical_offset) for m in store.query_message(q["topic"], q["key"])
        }
        want = {(r["queueId"], r["queueOffset"], r["phyOffset"]) for r in q["results"]}
        assert got == want, q["key"]


def test_reopen_after_recovery_is_clean_and_identical(tmp_path: Path) -> None:
    root = copy_fixture("store-sample-crash", tmp_path)
    clock = fixture_clock("store-sample-crash")
    with MessageStore.open(root, FIXTURE_CONFIG, clock=clock) as store:
        assert store.abnormal_shutdown_detected
        before = [(m.msg_id, m.body) for m in store.get_message("g", "TopicA", 0, 0, 32).messages]
        max_phy = store.max_phy_offset()
    assert not (root / "abort").exists()
    with MessageStore.open(root, FIXTURE_CONFIG, clock=clock) as store:
        assert not store.abnormal_shutdown_detected
        assert store.max_phy_offset() == max_phy
        assert [(m.msg_id, m.body) for m in store.get_message("g", "TopicA", 0, 0, 32).messages] == before
