"""The Spark sink's appending step (``rocketstore.spark.writer.append_batches``), without Spark:
rows that ``put_batch`` can take go through it; the others become Messages. Both routes must
store the same messages, and refuse a bad row before writing anything."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from rocketstore import MessageExt, MessageStore, StoreConfig
from rocketstore.geometry import detect_geometry
from rocketstore.spark import writer
from rocketstore.spark.writer import append_batches

CONFIG = "commitlog_segment_size = 1048576\ndisk_max_used_space_ratio = 100\ndisk_warning_ratio = 100\n"


def write(tmp_path: Path, table: pa.Table, name: str = "store") -> Path:
    conf = tmp_path / "store.toml"
    conf.write_text(CONFIG)
    rows, first, end = append_batches(str(tmp_path / name), table.to_batches(max_chunksize=700), str(conf), 5)
    assert rows == table.num_rows and 0 <= first < end
    return tmp_path / name


Row = tuple[str, int, bytes, str | None, list[str], int, dict[str, str]]


def stored(root: Path) -> list[Row]:
    out: list[Row] = []
    with MessageStore.open(root, detect_geometry(root), readonly=True) as store:
        for topic, queues in sorted(store.topics().items()):
            for q in queues:
                offset = 0
                while True:
                    r = store.get_message("g", topic, q, offset, 64)
                    if not r.messages:
                        break
                    out.extend(row(m) for m in r.messages)
                    offset = r.next_begin_offset
    return out


def row(m: MessageExt) -> Row:
    props = {k: v for k, v in m.properties.items() if k not in ("UNIQ_KEY", "KEYS", "TAGS")}
    return (m.topic, m.queue_id, m.body, m.tags, m.keys, m.born_timestamp, props)


def table(n: int, **extra: list[object]) -> pa.Table:
    columns: dict[str, object] = {
        "topic": [f"W{i % 3}" for i in range(n)],
        "body": [f"body-{i}".encode() for i in range(n)],
        "keys": [[f"k{i}", f"x{i % 7}"] if i % 4 else None for i in range(n)],
        "tags": [f"t{i % 5}" if i % 6 else None for i in range(n)],
        "queue_id": [i % 4 for i in range(n)],
        "born_timestamp": [
            dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i) for i in range(n)
        ],
    }
    columns.update(extra)
    return pa.table(columns)


def test_rows_put_batch_can_take_and_rows_it_cannot_store_the_same_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = table(3000)
    columnar = stored(write(tmp_path, rows, "columnar"))
    monkeypatch.setattr(writer, "_columnar", lambda t: False)  # the Message route, for the same rows
    messages = stored(write(tmp_path, rows, "messages"))
    assert columnar == messages
    assert len(columnar) == 3000
    first = next(r for r in columnar if r[2] == b"body-1")
    assert first == ("W1", 1, b"body-1", "t1", ["k1", "x1"], 1767225601000, {})


def test_rows_with_properties_or_delays_become_messages(tmp_path: Path) -> None:
    n = 50
    rows = table(
        n,
        properties=[[("color", "red")] if i % 2 else None for i in range(n)],
        delay_level=[0] * n,
    )
    got = stored(write(tmp_path, rows))
    assert sorted(r[6].get("color", "") for r in got).count("red") == n // 2


def test_queue_ids_left_out_go_round_robin_and_keys_as_text_are_split(tmp_path: Path) -> None:
    n = 40
    rows = pa.table({"topic": ["R"] * n, "body": [b"b"] * n, "keys": [f"a{i} b{i}" for i in range(n)]})
    got = stored(write(tmp_path, rows))
    assert sorted({r[1] for r in got}) == list(range(StoreConfig().default_topic_queue_nums))
    assert sorted(r[4] for r in got)[0] == ["a0", "b0"]


@pytest.mark.parametrize(
    ("column", "values", "problem"),
    [
        ("keys", [["ok"], ["has space"]], "row 1: key 'has space'"),
        ("keys", ["ok", "bad\x01"], "row 1: keys 'bad\\x01'"),
        ("queue_id", [0, 70000], "row 1: queue_id 70000"),
    ],
)
def test_a_bad_row_writes_nothing(tmp_path: Path, column: str, values: list[object], problem: str) -> None:
    rows = pa.table({"topic": ["T", "T"], "body": [b"a", b"b"], column: values})
    with pytest.raises(ValueError, match=problem.replace("\\", "\\\\").replace("(", "\\(")):
        write(tmp_path, rows)
    assert not (tmp_path / "store" / "commitlog").exists() or all(
        not any(f.read_bytes()) for f in (tmp_path / "store" / "commitlog").iterdir()
    )


def test_a_properties_map_column_is_stored(tmp_path: Path) -> None:
    """Spark hands a ``map<string,string>`` column over as an Arrow MapArray (not a list of
    structs): rows with properties, with an empty map and with none are all stored."""
    n = 30
    maps = [
        [("color", f"c{i}"), ("size", "L")] if i % 3 == 0 else ([] if i % 3 == 1 else None) for i in range(n)
    ]
    rows = pa.table(
        {
            "topic": ["M"] * n,
            "body": [f"b{i}".encode() for i in range(n)],
            "properties": pa.array(maps, type=pa.map_(pa.string(), pa.string())),
        }
    )
    got = {r[2]: r[6] for r in stored(write(tmp_path, rows))}
    assert len(got) == n
    for i in range(n):
        assert got[f"b{i}".encode()] == ({"color": f"c{i}", "size": "L"} if i % 3 == 0 else {})


def test_an_empty_properties_map_column_takes_the_columnar_route(tmp_path: Path) -> None:
    rows = pa.table(
        {
            "topic": ["M", "M"],
            "body": [b"a", b"b"],
            "properties": pa.array([[], None], type=pa.map_(pa.string(), pa.string())),
        }
    )
    assert writer._columnar(rows)
    assert [r[6] for r in stored(write(tmp_path, rows))] == [{}, {}]
