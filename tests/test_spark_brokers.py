"""A cluster's stores on Spark: several store directories, one per broker, read as one data set
with a ``broker`` column, streamed with offsets per broker and queue, and handed to the jobs as
a list. The stores are written here with the library; what was put is compared row by row with
what Spark reads. The readers are also driven directly (planning and reading as Spark's tasks
do, without the JVM) where Spark adds nothing to what is checked."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql.datasource import CaseInsensitiveDict, EqualTo, In
from pyspark.sql.streaming.datasource import ReadAllAvailable

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main
from rocketstore.spark import jobs
from rocketstore.spark.brokers import broker_name, store_paths
from rocketstore.spark.columns import COLUMNS
from rocketstore.spark.hosts import _placed, read_on_hosts
from rocketstore.spark.source import FilteringReader, RocketStoreDataSource, RocketStoreStreamReader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CFG = StoreConfig(commitlog_segment_size=256 * 1024, consume_queue_entries=200)
QUEUES = 4
Put = tuple[str, str, int, int, str, str | None, tuple[str, ...]]  # broker topic queue offset body tags keys


def _put(root: Path, broker: str, topics: dict[str, int], round_: int) -> list[Put]:
    """``topics``: how many messages of each; bodies say broker, topic, round and number."""
    with MessageStore.open(root, CFG) as store:
        msgs = [
            Message(
                topic=topic,
                body=f"{broker}:{topic}:{round_}:{i}".encode(),
                tags=f"t{i % 3}",
                keys=(f"k{i}", f"{broker}-{i}"),
                queue_id=i % QUEUES,
            )
            for topic, n in topics.items()
            for i in range(n)
        ]
        results = store.put_messages(msgs)
        assert all(r.ok for r in results)
        assert store.wait_dispatched(10)
    return [
        (broker, r.topic, r.queue_id, r.queue_offset, m.body.decode(), m.tags, tuple(m.keys))
        for m, r in zip(msgs, results)
    ]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Put]]:
    """Three brokers' stores: broker-a named by the broker.conf in its directory (store-1), the
    other two by their directories' names; Orders on all three, Payments on broker-b only."""
    base = tmp_path_factory.mktemp("cluster")
    a, b, c = base / "store-1", base / "broker-b", base / "broker-c"
    put = _put(a, "broker-a", {"Orders": 30}, 0)
    put += _put(b, "broker-b", {"Orders": 21, "Payments": 9}, 0)
    put += _put(c, "broker-c", {"Orders": 17}, 0)
    (a / "broker.conf").write_text(
        "# RocketMQ's broker.conf\nbrokerClusterName=DefaultCluster\nbrokerName=broker-a\n"
    )
    return [a, b, c], put


def _text(base64_body: str) -> str:
    return base64.b64decode(base64_body).decode()  # Spark writes binary as base64 in JSON


def _paths(roots: list[Path]) -> str:
    return json.dumps([str(r) for r in roots])  # as Spark hands load([...]) to a Python source


# --- which stores, which brokers: no Spark ------------------------------------------------------
def test_each_store_is_named_by_its_broker_conf_else_its_directory(
    cluster: tuple[list[Path], list[Put]],
) -> None:
    roots, _ = cluster
    assert broker_name(roots[0]) == "broker-a"
    assert broker_name(roots[1]) == "broker-b"
    given = store_paths({"paths": _paths(roots)})
    assert given == {"broker-a": str(roots[0]), "broker-b": str(roots[1]), "broker-c": str(roots[2])}
    assert list(given or {}) == ["broker-a", "broker-b", "broker-c"]  # in the order given
    # a comma list, and names given explicitly
    assert store_paths({"paths": ",".join(map(str, roots[1:])), "brokers": "x, y"}) == {
        "x": str(roots[1]),
        "y": str(roots[2]),
    }
    assert store_paths({"path": str(roots[0])}) is None  # one store: no broker column


def test_a_broker_conf_beside_the_store_names_it(tmp_path: Path) -> None:
    """One directory per broker, holding its broker.conf and its store."""
    store = tmp_path / "node-1" / "store"
    _put(store, "broker-x", {"T": 1}, 0)
    assert broker_name(store) == "store"
    (tmp_path / "node-1" / "broker.conf").write_text("brokerName = broker-x\nbrokerId=0\n")
    assert broker_name(store) == "broker-x"
    (store / "broker.conf").write_text("brokerRole=ASYNC_MASTER\n")  # no name in it: the one beside counts
    assert broker_name(store) == "broker-x"


def test_stores_that_cannot_be_told_apart_are_refused(
    tmp_path: Path, cluster: tuple[list[Path], list[Put]]
) -> None:
    roots, _ = cluster
    twins = [tmp_path / "1" / "store", tmp_path / "2" / "store"]
    with pytest.raises(ValueError, match=r"both broker 'store': name them with option brokers"):
        store_paths({"paths": _paths(twins)})
    with pytest.raises(ValueError, match="3 names for 2 stores"):
        store_paths({"paths": _paths(roots[:2]), "brokers": "a,b,c"})
    with pytest.raises(ValueError, match="no '/' or ','"):
        store_paths({"paths": _paths(roots[:2]), "brokers": "a/1,b"})
    with pytest.raises(ValueError, match="option brokers: names the stores of option paths"):
        store_paths({"path": str(roots[0]), "brokers": "a"})
    with pytest.raises(ValueError, match="expected a JSON array"):
        store_paths({"paths": '["a", 1]'})
    with pytest.raises(ValueError, match="writes into one store"):
        RocketStoreDataSource(CaseInsensitiveDict({"paths": _paths(roots)})).writer(None, False)  # type: ignore[arg-type]


def test_a_broker_filter_reads_only_that_brokers_store(cluster: tuple[list[Path], list[Put]]) -> None:
    roots, put = cluster
    reader = FilteringReader(CaseInsensitiveDict({"paths": _paths(roots)}))
    kept = list(reader.pushFilters([EqualTo(("broker",), "broker-c"), In(("topic",), ("Orders",))]))
    assert len(kept) == 2  # handed back: Spark checks them again
    parts = reader.partitions()
    assert parts and {p.value.broker for p in parts} == {"broker-c"}
    rows = [
        (b, body)
        for p in parts
        for batch in reader.read(p)
        for b, body in zip(batch.column("broker").to_pylist(), batch.column("body").to_pylist())
    ]
    assert sorted(rows) == sorted(("broker-c", p[4].encode()) for p in put if p[0] == "broker-c")


# --- streaming offsets per broker and queue: the reader driven directly -------------------------
def _stream(roots: list[Path], **given: str) -> RocketStoreStreamReader:
    return RocketStoreStreamReader(CaseInsensitiveDict({"paths": _paths(roots), **given}))


def test_stream_offsets_are_kept_per_broker_and_queue(cluster: tuple[list[Path], list[Put]]) -> None:
    roots, put = cluster
    reader = _stream(roots[:2])
    start = reader.initialOffset()
    assert start == {
        "broker-a": {f"Orders/{q}": 0 for q in range(QUEUES)},
        "broker-b": {
            **{f"Orders/{q}": 0 for q in range(QUEUES)},
            **{f"Payments/{q}": 0 for q in range(QUEUES)},
        },
    }
    end = reader.latestOffset(start, ReadAllAvailable())
    expected: dict[str, dict[str, int]] = {}
    for broker, topic, q, offset, *_ in put:
        if broker in start:
            key = f"{topic}/{q}"
            expected.setdefault(broker, {})[key] = max(expected.get(broker, {}).get(key, 0), offset + 1)
    assert end == expected
    # a per-broker startingOffsets, in the checkpoint's own shape; other queues start at 0
    later = _stream(roots[:2], startingOffsets=json.dumps({"broker-b": {"Orders/1": 3}})).initialOffset()
    assert later["broker-b"]["Orders/1"] == 3 and later["broker-a"]["Orders/1"] == 0
    with pytest.raises(
        ValueError, match="offsets of broker broker-c, but the query reads the stores of brokers"
    ):
        _stream(roots[:2], startingOffsets=json.dumps({"broker-c": {"Orders/1": 3}}))
    # a checkpoint of one shape is refused by a query of the other
    single = RocketStoreStreamReader(CaseInsensitiveDict({"path": str(roots[0])}))
    with pytest.raises(ValueError, match="new checkpointLocation"):
        single.latestOffset(end, ReadAllAvailable())
    with pytest.raises(ValueError, match="new checkpointLocation"):
        reader.latestOffset(single.initialOffset(), ReadAllAvailable())
    # a one-store query keeps the one-store shape
    assert single.initialOffset() == {f"Orders/{q}": 0 for q in range(QUEUES)}


def test_a_restart_whose_brokers_are_named_differently_is_refused(tmp_path: Path) -> None:
    roots = [tmp_path / "a", tmp_path / "b"]
    for root in roots:
        _put(root, root.name, {"T": 5}, 0)
    first = _stream(roots)
    end = first.latestOffset(first.initialOffset(), ReadAllAvailable())
    assert set(end) == {"a", "b"}
    (roots[1] / "broker.conf").write_text("brokerName=broker-b\n")  # b's derived name changes
    renamed = _stream(roots)
    with pytest.raises(ValueError, match=r"offsets of brokers b, .* none of brokers broker-b") as refused:
        renamed.latestOffset(end, ReadAllAvailable())
    assert "option brokers" in str(refused.value) and "new checkpointLocation" in str(refused.value)
    with pytest.raises(ValueError, match="none of brokers broker-b"):
        renamed.partitions(end, end)
    # named as before: the restart reads nothing again
    again = _stream(roots, brokers="a,b")
    assert again.latestOffset(end, ReadAllAvailable()) == end and again.partitions(end, end) == []
    # a broker added, none gone: its queues start from the beginning
    roots.append(tmp_path / "c")
    _put(roots[2], "c", {"T": 2}, 0)
    grown = _stream(roots, brokers="a,b,c").latestOffset(end, ReadAllAvailable())
    assert grown["c"] == {"T/0": 1, "T/1": 1} and grown["a"] == end["a"]


# --- through Spark ----------------------------------------------------------------------------
def _rows(df: Any) -> list[Put]:
    return sorted(
        (r["broker"], r["topic"], r["queue_id"], r["queue_offset"], r["body"], r["tags"], tuple(r["keys"]))
        for r in df.select("broker", "topic", "queue_id", "queue_offset", "body", "tags", "keys").collect()
    )


@pytest.mark.slow
def test_three_stores_read_as_one_frame_row_by_row(
    spark: SparkSession, cluster: tuple[list[Path], list[Put]]
) -> None:
    roots, put = cluster
    df = spark.read.format("rocketstore").option("bodyAs", "string").load([str(r) for r in roots])
    assert df.columns == [*COLUMNS, "broker"]
    assert _rows(df) == sorted(put)
    # one store as before: no broker column
    assert "broker" not in spark.read.format("rocketstore").load(str(roots[0])).columns
    # explicit names, through the consume queues, one broker picked by a filter
    named = (
        spark.read.format("rocketstore")
        .option("brokers", "A,B,C")
        .option("source", "queues")
        .option("bodyAs", "string")
        .load([str(r) for r in roots])
        .where("broker = 'B'")
    )
    assert _rows(named) == sorted(("B", *p[1:]) for p in put if p[0] == "broker-b")


@pytest.mark.slow
def test_stores_read_on_their_hosts_give_the_source_s_rows(
    spark: SparkSession, cluster: tuple[list[Path], list[Put]]
) -> None:
    roots, put = cluster
    sc = spark.sparkContext
    here = sc.getConf().get("spark.driver.host")  # the only executor host of a local master
    assert here is not None
    df = read_on_hosts(spark, [(here, r) for r in roots], bodyAs="string")
    assert df.columns == [*COLUMNS, "broker"]
    source = spark.read.format("rocketstore").option("bodyAs", "string").load([str(r) for r in roots])
    assert df.schema == source.schema
    assert _rows(df) == sorted(put)
    # every task of the read prefers the host its store was given with
    plan = df._jdf.queryExecution().toRdd()
    wanted = {sc._jsc.sc().getPreferredLocs(plan, i).head().host() for i in range(len(plan.partitions()))}
    assert wanted == {here}
    # the source's options: names, a topic, the consume queues
    named = read_on_hosts(
        spark, [(here, r) for r in roots], brokers="A,B,C", topics="Payments", bodyAs="string"
    )
    assert _rows(named) == sorted(("B", *p[1:]) for p in put if p[1] == "Payments")
    with pytest.raises(ValueError, match="names 2 brokers for 3 stores"):
        read_on_hosts(spark, [(here, r) for r in roots], brokers="A,B")
    with pytest.raises(ValueError, match="give them whole, not 'store'"):
        read_on_hosts(spark, [(here, "store")])
    with pytest.raises(ValueError, match="not option paths"):
        read_on_hosts(spark, [(here, roots[0])], paths="[]")
    with pytest.raises(ValueError, match="both broker 'broker-b'"):
        read_on_hosts(spark, [(here, roots[1]), ("elsewhere", roots[1])])  # one machine: both here
    with pytest.raises(Exception, match="is not on this executor's machine"):
        read_on_hosts(spark, [(here, roots[0].parent / "no-such-store")]).collect()


def test_tasks_prefer_the_hosts_given(spark: SparkSession) -> None:
    rdd = _placed(spark, ["a", "b", "c"], ["host-1", "host-2", "host-1"])
    sc = spark.sparkContext
    hosts = [sc._jsc.sc().getPreferredLocs(rdd._jrdd.rdd(), i).head().host() for i in range(3)]
    assert (rdd.getNumPartitions(), hosts) == (3, ["host-1", "host-2", "host-1"])


def _run_stream(spark: SparkSession, roots: list[Path], out: Path, ckpt: Path) -> None:
    (
        spark.readStream.format("rocketstore")
        .option("maxMessagesPerTrigger", "40")
        .option("bodyAs", "string")
        .option("paths", _paths(roots))
        .load()
        .select("broker", "topic", "queue_id", "queue_offset", "body", "tags", "keys")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
        .awaitTermination(300)
    )


@pytest.mark.slow
def test_a_stream_over_two_stores_restarts_from_its_checkpoint(spark: SparkSession, tmp_path: Path) -> None:
    a, b = tmp_path / "broker-a", tmp_path / "broker-b"
    put = _put(a, "broker-a", {"Orders": 40}, 0) + _put(b, "broker-b", {"Orders": 20, "Payments": 12}, 0)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    _run_stream(spark, [a, b], out, ckpt)
    # more on both brokers, then the same query again: it goes on from its checkpoint
    put += _put(a, "broker-a", {"Orders": 8}, 1) + _put(b, "broker-b", {"Payments": 16}, 1)
    _run_stream(spark, [a, b], out, ckpt)
    got = _rows(spark.read.parquet(str(out)))
    assert got == sorted(put)  # every message once
    logged = sorted((p for p in (ckpt / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    last = json.loads(logged[-1].read_text().splitlines()[-1])
    assert last == {
        "broker-a": {"Orders/0": 12, "Orders/1": 12, "Orders/2": 12, "Orders/3": 12},
        "broker-b": {
            "Orders/0": 5,
            "Orders/1": 5,
            "Orders/2": 5,
            "Orders/3": 5,
            "Payments/0": 7,
            "Payments/1": 7,
            "Payments/2": 7,
            "Payments/3": 7,
        },
    }
    assert len(logged) == 3  # 72 messages in micro-batches of at most 40, then the 24 added


@pytest.mark.slow
def test_jobs_take_the_list_of_stores(
    spark: SparkSession,
    cluster: tuple[list[Path], list[Put]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    roots, put = cluster
    out = tmp_path / "export"
    args = ["spark", "export", *map(str, roots[1:]), str(out), "--format", "json", "--broker", "B"]
    assert main([*args, "--broker", "C", "--master", "local[2]", "--json"]) == 0
    stdout, err = capsys.readouterr()
    expected = sorted(("B" if p[0] == "broker-b" else "C", *p[1:]) for p in put if p[0] != "broker-a")
    assert json.loads(stdout)["rows"] == len(expected), err
    lines = [json.loads(line) for f in out.glob("part-*.json") for line in f.read_text().splitlines()]
    got = sorted(
        (
            r["broker"],
            r["topic"],
            r["queue_id"],
            r["queue_offset"],
            _text(r["body"]),
            r["tags"],
            tuple(r["keys"]),
        )
        for r in lines
    )
    assert got == expected
    # a --broker per STORE or none
    assert main(["spark", "export", *map(str, roots[1:]), str(tmp_path / "x"), "--broker", "B"]) != 0
    assert "--broker=" in capsys.readouterr().err
    # verify: one report per store, naming its broker
    assert main(["spark", "verify", *map(str, roots[:2]), "--master", "local[2]", "--json"]) == 0
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["broker"], r["store"], r["clean"]) for r in reports] == [
        ("broker-a", str(roots[0]), True),
        ("broker-b", str(roots[1]), True),
    ]
    assert [r["records"] for r in reports] == [30, 30]


@pytest.mark.slow
def test_stats_over_a_list_are_per_broker(
    spark: SparkSession, cluster: tuple[list[Path], list[Put]], tmp_path: Path
) -> None:
    roots, put = cluster
    summary = jobs.stats(spark, [str(r) for r in roots], str(tmp_path / "stats"))
    assert summary["messages"] == len(put)
    table = pq.read_table(summary["paths"]["stats"]).to_pylist()
    per_queue = {(r["broker"], r["topic"], r["queue_id"]): r["messages"] for r in table}
    counted: dict[tuple[str, str, int], int] = {}
    for broker, topic, q, *_ in put:
        counted[(broker, topic, q)] = counted.get((broker, topic, q), 0) + 1
    assert per_queue == counted
