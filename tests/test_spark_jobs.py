"""The Spark jobs (``rocketstore.spark.jobs``) and ``rocketstore spark ...``: what they write, read back
and checked against the data source's rows, against RocketMQ's own listing of its fixture (computed
here in plain Python) and against the messages a test put into a store of its own."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest

from rocketstore import ManualClock, Message, MessageStore, StoreConfig
from rocketstore.cli import main
from rocketstore.spark import jobs
from rocketstore.spark.columns import COLUMNS
from rocketstore.verify import verify_store
from tests.conftest import FIXTURES, copy_fixture

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.slow

SAMPLE = FIXTURES / "store-sample"
HOUR_MS = 3_600_000
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def sample() -> str:
    return str(SAMPLE)


@pytest.fixture(scope="module")
def expected_msgs(sample: str) -> list[dict[str, Any]]:
    """RocketMQ's own reading of every message of the fixture."""
    listing = FIXTURES / "store-sample.expected.jsonl"
    rows = [json.loads(line) for line in listing.read_text("utf-8").splitlines()]
    return [r for r in rows if r.get("kind") == "msg"]


def key_list(raw: str | None) -> list[str]:
    """KEYS as the source splits them: on spaces, empty keys dropped, each once per message."""
    return sorted({k for k in (raw or "").split(" ") if k})


def top(counter: Counter[str]) -> list[dict[str, Any]]:
    ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[: jobs.TOP_N]
    return [{"value": v, "count": n} for v, n in ranked]


def expected_stats(msgs: Iterable[dict[str, Any]]) -> dict[tuple[str, int, int], dict[str, Any]]:
    """The stats table computed without Spark, keyed by (topic, queue_id, hour start in ms).
    ``msgs`` have topic, queueId, storeTs, bodyLen, tags, keys (space-separated), as the listing."""
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = defaultdict(list)
    for m in msgs:
        groups[(m["topic"], m["queueId"], m["storeTs"] - m["storeTs"] % HOUR_MS)].append(m)
    table = {}
    for key, ms in groups.items():
        table[key] = {
            "messages": len(ms),
            "bytes": sum(m["bodyLen"] for m in ms),
            "first_ms": min(m["storeTs"] for m in ms),
            "last_ms": max(m["storeTs"] for m in ms),
            "top_tags": top(Counter(m["tags"] for m in ms if m["tags"] is not None)),
            "top_keys": top(Counter(k for m in ms for k in key_list(m["keys"]))),
        }
    return table


def read_stats(path: str | Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    """stats.parquet read with pyarrow (not Spark), in expected_stats' shape."""
    table = {}
    for row in pq.read_table(path).to_pylist():
        hour_ms = round(row["hour"].timestamp() * 1000)
        table[(row["topic"], row["queue_id"], hour_ms)] = {
            "messages": row["messages"],
            "bytes": row["bytes"],
            "first_ms": round(row["first_store_timestamp"].timestamp() * 1000),
            "last_ms": round(row["last_store_timestamp"].timestamp() * 1000),
            "top_tags": row["top_tags"],
            "top_keys": row["top_keys"],
        }
    return table


def check_png(path: Path) -> None:
    from matplotlib.image import imread

    raw = path.read_bytes()
    assert raw[:8] == PNG_MAGIC, path
    assert len(raw) > 10_000, f"{path}: {len(raw)} bytes is too small for a chart"
    width, height = int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")
    assert width >= 600 and height >= 300, (width, height)
    pixels = imread(str(path))  # decodes the whole file: a truncated or corrupt PNG raises
    assert pixels.shape[:2] == (height, width)
    assert pixels.std() > 0.05, f"{path} is (nearly) one colour"


# --- export ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def parquet_export(
    spark: SparkSession, sample: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[int, Path]:
    out = tmp_path_factory.mktemp("export") / "parquet"
    return jobs.export(spark, sample, str(out)), out


def test_parquet_export_is_the_sources_rows_partitioned_by_topic_and_utc_date(
    spark: SparkSession, sample: str, parquet_export: tuple[int, Path], expected_msgs: list[dict[str, Any]]
) -> None:
    rows, out = parquet_export
    source = sorted(
        spark.read.format("rocketstore").option("includeSystemTopics", "true").load(sample).collect(),
        key=lambda r: r["physical_offset"],
    )
    assert rows == len(source) == len(expected_msgs) == 600

    back = spark.read.parquet(str(out))
    assert set(back.columns) == {*COLUMNS, "date"}
    exported = sorted(back.collect(), key=lambda r: r["physical_offset"])
    assert len(exported) == len(source)
    for want, got in zip(source, exported):
        for column in COLUMNS:
            assert got[column] == want[column], (want["physical_offset"], column)
        # the partition value comes back as a date (Spark infers it from yyyy-MM-dd)
        store_ms = round(want["store_timestamp"].timestamp() * 1000)
        utc_day = dt.datetime.fromtimestamp(store_ms / 1000, tz=dt.timezone.utc).date()
        assert str(got["date"]) == utc_day.isoformat()

    layout = {(p.parent.parent.name, p.parent.name) for p in out.rglob("*.parquet")}
    days = {
        dt.datetime.fromtimestamp(m["storeTs"] / 1000, tz=dt.timezone.utc).date().isoformat()
        for m in expected_msgs
    }
    assert layout == {(f"topic={m['topic']}", f"date={d}") for m in expected_msgs for d in days}
    one_file = next(out.rglob("*.parquet"))
    assert "topic" not in pq.read_schema(one_file).names  # in the directory names, not in the files


def test_json_export_writes_json_lines_with_the_schemas_columns(
    spark: SparkSession, sample: str, expected_msgs: list[dict[str, Any]], tmp_path: Path
) -> None:
    out = tmp_path / "json"
    rows = jobs.export(spark, sample, str(out), fmt="json", topic="TopicA")

    lines = [
        json.loads(line)
        for f in sorted(out.glob("part-*.json"))
        for line in f.read_text("utf-8").splitlines()
    ]
    want = {m["phyOffset"]: m for m in expected_msgs if m["topic"] == "TopicA"}
    assert rows == len(lines) == len(want) == 192
    for line in lines:
        assert list(line) == list(COLUMNS)
        m = want.pop(line["physical_offset"])
        assert (line["topic"], line["queue_id"], line["queue_offset"]) == (
            "TopicA",
            m["queueId"],
            m["queueOffset"],
        )
        body = m["body_utf8"].encode() if "body_utf8" in m else bytes.fromhex(m["body_hex"])
        assert base64.b64decode(line["body"]) == body
    assert want == {}


def test_an_existing_output_is_refused_and_left_alone(
    spark: SparkSession, sample: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match=str(out)):
        jobs.export(spark, sample, str(out))
    (tmp_path / "stats").mkdir()
    (tmp_path / "stats" / jobs.HOURLY_CHART).write_bytes(b"an older chart")
    with pytest.raises(FileExistsError, match=jobs.HOURLY_CHART):
        jobs.stats(spark, sample, str(tmp_path / "stats"))
    assert (out / "mine.txt").read_text() == "keep me"
    assert sorted(p.name for p in (tmp_path / "stats").iterdir()) == [jobs.HOURLY_CHART]

    code, stdout, err = run(capsys, "spark", "export", sample, str(out), "--master", "local[2]")
    assert (code, stdout) == (1, "")
    assert err.startswith(f"rocketstore: error: {out} already exists") and err.count("\n") == 1
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]


def test_a_failed_export_leaves_no_output_and_the_cli_says_why_in_one_line(
    spark: SparkSession, sample: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    with pytest.raises(Exception, match="expected commitlog or queues"):
        jobs.export(spark, sample, str(out), source="nowhere")
    assert not out.exists()  # the directory Spark had started is gone

    # segments of two sizes: the source refuses the store inside a Spark worker
    broken = tmp_path / "broken"
    (broken / "commitlog").mkdir(parents=True)
    (broken / "commitlog" / f"{0:020d}").write_bytes(bytes(4096))
    (broken / "commitlog" / f"{4096:020d}").write_bytes(bytes(8192))
    code, stdout, err = run(capsys, "spark", "export", str(broken), str(out), "--master", "local[2]")
    assert (code, stdout) == (1, "")
    assert err.startswith("rocketstore: error: ") and err.count("\n") == 1, err
    assert "commitlog" in err and "Traceback" not in err and "SQLSTATE" not in err
    assert not out.exists()

    code, stdout, err = run(capsys, "spark", "export", str(tmp_path / "nostore"), str(out))
    assert (code, stdout, err) == (1, "", f"rocketstore: error: no such directory: {tmp_path / 'nostore'}\n")


# --- stats ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sample_stats(
    spark: SparkSession, sample: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    return jobs.stats(spark, sample, str(tmp_path_factory.mktemp("stats") / "out"))


def test_stats_agree_with_rocketmqs_listing(
    sample_stats: dict[str, Any], expected_msgs: list[dict[str, Any]]
) -> None:
    want = expected_stats(expected_msgs)
    got = read_stats(sample_stats["paths"]["stats"])
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], key
    assert sample_stats["topics"] == sorted({m["topic"] for m in expected_msgs})
    assert sample_stats["messages"] == 600
    assert sample_stats["bytes"] == sum(m["bodyLen"] for m in expected_msgs)
    assert sample_stats["rows"] == len(want)
    assert sample_stats["hours"] == len({h for _, _, h in want})
    # not all trivially empty: the fixture has tags and keys on most messages
    assert all(row["top_tags"] for row in want.values())
    assert any(len(row["top_keys"]) == jobs.TOP_N for row in want.values())


def test_stats_charts_are_real_pngs(sample_stats: dict[str, Any]) -> None:
    paths = sample_stats["paths"]
    assert set(paths) == {"stats", "messages_per_hour", "size_distribution"}
    for name in ("messages_per_hour", "size_distribution"):
        check_png(Path(paths[name]))


# --- the command, on a store of our own spanning several hours -----------------------------------
START_MS = 1_790_000_000_000 - 1_790_000_000_000 % HOUR_MS + 600_000  # 10 minutes into an hour


@pytest.fixture(scope="module")
def hourly_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """Messages in hours 0, 1 and 3 (none in hour 2) of two topics; what was put, as the listing."""
    root = tmp_path_factory.mktemp("hourly") / "store"
    clock = ManualClock(START_MS)
    put: list[dict[str, Any]] = []
    cfg = StoreConfig(commitlog_segment_size=1 << 20, consume_queue_entries=1000)
    with MessageStore.open(root, cfg, clock=clock) as store:
        for step, advance_min in enumerate([0, 20, 40, 30, 125, 10]):  # minutes after the previous step
            clock.advance(advance_min * 60_000)
            batch = []
            for i in range(4 + step):
                topic = "Orders" if (i + step) % 3 else "Audit"
                size = (0, 1, 63, 64, 1000, 4096)[(i + 2 * step) % 6]
                tags = None if i % 5 == 4 else f"t{(i * step) % 3}"
                keys = (f"k{i % 2}", f"k{i % 2}", "shared") if i % 2 else ()
                batch.append(Message(topic=topic, body=b"z" * size, tags=tags, keys=keys, queue_id=i % 2))
                put.append(
                    {
                        "topic": topic,
                        "queueId": i % 2,
                        "storeTs": clock.now_ms(),
                        "bodyLen": size,
                        "tags": tags,
                        "keys": " ".join(keys) or None,
                    }
                )
            assert all(r.ok for r in store.put_messages(batch))
        store.wait_dispatched(5)
    return root, put


def test_cli_stats_on_several_hours(
    spark: SparkSession,
    hourly_store: tuple[Path, list[dict[str, Any]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, put = hourly_store
    out = tmp_path / "stats"
    code, stdout, err = run(capsys, "spark", "stats", str(root), str(out), "--master", "local[2]", "--json")
    assert code == 0, err
    summary = json.loads(stdout)

    want = expected_stats(put)
    hours = sorted({h for _, _, h in want})
    assert [h - START_MS + 600_000 for h in hours] == [0, HOUR_MS, 3 * HOUR_MS]
    assert read_stats(out / jobs.STATS_FILE) == want
    assert summary["topics"] == ["Audit", "Orders"]
    assert summary["hours"] == 3
    assert summary["messages"] == len(put) and summary["bytes"] == sum(m["bodyLen"] for m in put)
    assert summary["paths"] == {k: str(v) for k, v in jobs.stats_paths(out).items()}
    for name in (jobs.HOURLY_CHART, jobs.SIZE_CHART):
        check_png(out / name)
    assert spark.range(3).count() == 3  # the command left the session it found running


def test_cli_export_json_from_the_queues_of_one_topic(
    spark: SparkSession,
    hourly_store: tuple[Path, list[dict[str, Any]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, put = hourly_store
    out = tmp_path / "orders"
    args = ["spark", "export", str(root), str(out), "--format", "json", "--topic", "Orders"]
    code, stdout, err = run(capsys, *args, "--source", "queues", "--master", "local[2]", "--json")
    assert code == 0, err
    orders = [m for m in put if m["topic"] == "Orders"]
    assert json.loads(stdout) == {"rows": len(orders), "format": "json", "out": str(out)}
    lines = [json.loads(line) for f in out.glob("part-*.json") for line in f.read_text().splitlines()]
    assert sorted((r["queue_id"], r["queue_offset"]) for r in lines) == sorted(
        (q, n) for q in (0, 1) for n in range(sum(1 for m in orders if m["queueId"] == q))
    )


# --- verify and rebuild through the command -----------------------------------------------------
def test_cli_verify_prints_as_rocketstore_verify_does(
    spark: SparkSession, sample: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for as_json in ([], ["--json"]):
        plain = run(capsys, "verify", sample, *as_json)
        on_spark = run(capsys, "spark", "verify", sample, "--master", "local[2]", *as_json)
        assert on_spark == plain
        assert plain[0] == 0
    damaged = copy_fixture("store-sample", tmp_path)
    first = sorted((damaged / "commitlog").iterdir())[0]
    data = bytearray(first.read_bytes())
    data[200] ^= 0xFF  # inside the first record's body: a CRC mismatch
    first.write_bytes(bytes(data))
    plain = run(capsys, "verify", str(damaged))
    on_spark = run(capsys, "spark", "verify", str(damaged), "--master", "local[2]")
    assert on_spark == plain
    assert on_spark[0] == 1 and "DAMAGED" in on_spark[1]


def test_cli_rebuild_prints_the_summary(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = copy_fixture("store-sample", tmp_path)
    queue_file = store / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    before = queue_file.read_bytes()
    code, stdout, _ = run(capsys, "spark", "rebuild", str(store), "--master", "local[2]", "--json")
    summary = json.loads(stdout)
    assert code == 0 and summary["records"] == 600 and summary["queue_entries"] == 600
    assert queue_file.read_bytes() == before
    assert verify_store(store).clean
