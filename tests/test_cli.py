"""The ``rocketstore`` command against RocketMQ's fixtures (read in place: not one byte may change)
and against stores rocketstore wrote: output parsed and compared with the library's answers and
with what RocketMQ itself read back."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main
from tests.conftest import FIXTURES

SAMPLES = ["store-sample", "store-sample-crash"]
CFG = StoreConfig(
    commitlog_segment_size=65536, consume_queue_entries=40, index_hash_slots=64, index_max_entries=256
)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*args])
    out, err = capsys.readouterr()
    return code, out, err


def jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def expected(name: str, kind: str) -> list[dict[str, Any]]:
    listing = FIXTURES / f"{name}.expected.jsonl"
    rows = [json.loads(line) for line in listing.read_text("utf-8").splitlines()]
    return [r for r in rows if r.get("kind") == kind]


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "store"
    with MessageStore.open(root, CFG) as store:
        for i in range(120):
            r = store.put_message(
                Message(
                    "Orders" if i % 3 else "Audit",
                    f"body-{i}".encode(),
                    tags=("TagA", "TagB")[i % 2],
                    keys=[f"k{i}"],
                    queue_id=i % 4,
                )
            )
            assert r.ok
        store.commit_offset("billing", "Orders", 1, 7)
    return root


@pytest.mark.parametrize("name", SAMPLES)
def test_read_commands_on_rocketmq_fixtures_change_no_byte(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = FIXTURES / name
    before = snapshot(root)
    first = expected(name, "msg")[0]
    for args in (
        ["status", str(root)],
        ["topics", str(root)],
        ["print", str(root), "--no-body"],
        ["query-key", str(root), "-t", first["topic"], "-k", first["keys"].split()[0]],
        ["query-id", str(root), first["msgId"]],
        ["query-offset", str(root), str(first["phyOffset"])],
        [
            "query-queue",
            str(root),
            "-t",
            first["topic"],
            "-q",
            str(first["queueId"]),
            "-o",
            str(first["queueOffset"]),
        ],
        ["consumer-progress", str(root)],
        ["recover", str(root), "--dry-run"],
        ["tail", str(root), "-t", "TopicA", "-n", "3"],
    ):
        code, out, err = run(capsys, *args, "--json")
        assert code == 0, (args, err)
        assert not err, args
        assert out or args[0] == "consumer-progress", args  # the fixtures have no consumer offsets
    assert snapshot(root) == before


@pytest.mark.parametrize("name", SAMPLES)
def test_topics_json_matches_rocketmq_queue_ranges(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "topics", str(FIXTURES / name), "--json")
    assert code == 0
    got = {(r["topic"], r["queue_id"]): (r["min_offset"], r["max_offset"]) for r in jsonl(out)}
    want = {
        (q["topic"], q["queueId"]): (q["minOffset"], q["maxOffset"])
        for q in expected(name, "queue")
        if q["maxOffset"]
    }
    assert got == want


@pytest.mark.parametrize("name", SAMPLES)
def test_print_json_is_rocketmqs_reading(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "print", str(FIXTURES / name), "--json")
    assert code == 0
    rows = jsonl(out)
    want = expected(name, "msg")
    assert len(rows) == len(want)
    by_id = {r["msgId"]: r for r in want}
    for row in rows:
        w = by_id[row["msg_id"]]
        assert (row["topic"], row["queue_id"], row["queue_offset"], row["physical_offset"]) == (
            w["topic"],
            w["queueId"],
            w["queueOffset"],
            w["phyOffset"],
        )
        body = base64.b64decode(row["body_base64"])
        assert body == (w["body_utf8"].encode() if "body_utf8" in w else bytes.fromhex(w["body_hex"]))
        assert row["tags"] == w.get("tags") and row["store_timestamp"] == w["storeTs"]


def test_print_filters_and_counts(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "print", str(written), "-t", "Orders", "-q", "1", "--tag", "TagB", "--json")
    assert code == 0
    rows = jsonl(out)
    assert rows and {(r["topic"], r["queue_id"], r["tags"]) for r in rows} == {("Orders", 1, "TagB")}
    code, out, _ = run(capsys, "print", str(written), "--count-tags", "--json")
    counts = {(r["topic"], r["tags"]): r["count"] for r in jsonl(out)}
    assert sum(counts.values()) == 120 and counts[("Audit", "TagA")] == 20
    code, out, _ = run(capsys, "print", str(written), "-t", "Audit", "--begin", "1", "--end", "2", "--json")
    assert code == 0 and jsonl(out) == []


def test_queries_agree_with_the_library(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with MessageStore.open(written, CFG, readonly=True) as store:
        msg = store.query_message("Orders", "k5")[0]
        want = (msg.msg_id, msg.physical_offset, msg.uniq_key)
    code, out, _ = run(capsys, "query-key", str(written), "-t", "Orders", "-k", "k5", "--json")
    assert [(r["msg_id"], r["physical_offset"]) for r in jsonl(out)] == [want[:2]]
    for args in (
        ["query-id", str(written), want[0]],
        ["query-offset", str(written), str(want[1])],
        ["query-uniq", str(written), "-t", "Orders", "--id", str(want[2])],
    ):
        code, out, _ = run(capsys, *args, "--json")
        assert code == 0 and jsonl(out)[0]["msg_id"] == want[0], args
    code, out, _ = run(capsys, "decode-id", want[0], "--json")
    assert jsonl(out)[0] == {"msg_id": want[0], "store_host": "127.0.0.1:10911", "physical_offset": want[1]}


def test_consumer_progress(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "consumer-progress", str(written), "--json")
    assert code == 0
    assert jsonl(out) == [
        {
            "group": "billing",
            "topic": "Orders",
            "queue_id": 1,
            "max_offset": 20,
            "consumer_offset": 7,
            "lag": 13,
        },
        {"group": "billing", "topic": "Orders", "queues": 1, "diff_total": 13},
    ]


def test_put_then_tail_and_reclaim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "new"
    code, out, err = run(
        capsys,
        "put",
        str(root),
        "-t",
        "T",
        "--tag",
        "x",
        "--key",
        "a",
        "--property",
        "p=1",
        "one",
        "two",
        "--json",
    )
    assert code == 0, err
    puts = jsonl(out)
    assert [r["status"] for r in puts] == ["PUT_OK", "PUT_OK"]
    code, out, _ = run(capsys, "tail", str(root), "-t", "T", "--json")
    rows = jsonl(out)
    assert sorted(r["body"] for r in rows) == ["one", "two"] and rows[0]["properties"]["p"] == "1"
    code, out, _ = run(capsys, "reclaim", str(root), "--json")
    assert code == 0 and jsonl(out)[0]["commitlog_segments_deleted"] == 0
    code, out, _ = run(capsys, "recover", str(root), "--json")
    assert code == 0 and jsonl(out)[0]["abnormal"] is False


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["print", "/nonexistent/store"], "no such directory"),
        (["status", "/"], "not a store directory"),
        (["query-id", "STORE", "XYZ"], "offsetMsgId"),
        (["print", "STORE", "--begin", "yesterday"], "not a time"),
        (["print", "STORE", "--topic", "Nope"], "no topic 'Nope'"),
        (["put", "STORE", "-t", "bad topic!", "x"], "invalid topic"),
        (["print", "STORE", "--frobnicate"], "No such option"),
    ],
)
def test_errors_are_one_line_and_non_zero(
    args: list[str], needle: str, written: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, *[str(written) if a == "STORE" else a for a in args])
    assert code != 0
    assert needle in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) <= 3  # usage errors add a usage line


def test_console_script_is_installed_and_damaged_store_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as store:
        store.put_message(Message("T", b"x"))
    (root / "checkpoint").write_bytes(b"short")
    exe = Path(sys.executable).with_name("rocketstore")
    proc = subprocess.run(
        [
            str(exe) if exe.exists() else sys.executable,
            *([] if exe.exists() else ["-m", "rocketstore.cli"]),
            "status",
            str(root),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("rocketstore: error:")


def test_bench_measures_every_workload_on_a_temporary_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "bench", str(tmp_path), "--messages", "600", "--json")
    assert code == 0
    rows = jsonl(out)
    assert [r["workload"] for r in rows] == [
        "single put, no keys (+dispatch)",
        "get_message (32 per call), bodies read",
        "batch put (256), no keys (+dispatch)",
        "batch put (256), KEYS + UNIQ_KEY (+dispatch)",
        "put_batch (256), no keys (+dispatch)",
        "put_batch (256), KEYS + UNIQ_KEY (+dispatch)",
    ]
    assert all(r["msgs_per_s"] > 0 and r["mb_per_s"] >= 0 for r in rows)
    assert list(tmp_path.iterdir()) == []  # the temporary stores are gone


@pytest.mark.parametrize("abort", [False, True], ids=["clean", "abort"])
def test_status_of_a_store_with_a_garbage_or_future_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], abort: bool
) -> None:
    """Times no calendar holds (year 765147 and beyond) are printed as the raw number, said to be
    no date; a negative one as '-'. ``status`` does not fail on them."""
    import shutil
    import stat
    import struct

    root = tmp_path / "s"
    shutil.copytree(FIXTURES / "store-sample", root)
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    future, garbage = 24_083_498_723_000_000, 0x7FFF_FFFF_FFFF_FFF0
    (root / "checkpoint").write_bytes(struct.pack(">qqq", future, garbage, -5) + bytes(4096 - 24))
    if abort:
        (root / "abort").touch()
    code, out, err = run(capsys, "status", str(root), "--json")
    assert code == 0, err
    row = jsonl(out)[0]
    assert row["physicMsgTimestamp"] == f"{future} (ms, not a representable date)"
    assert row["logicsMsgTimestamp"] == f"{garbage} (ms, not a representable date)"
    assert row["indexMsgTimestamp"] == "-"


def test_print_steps_over_a_damaged_record_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One record of an old segment with a damaged magic code: ``print`` lists every other
    message and says on stderr which record it skipped, by segment file and commitlog offset."""
    import shutil
    import stat

    root = tmp_path / "s"
    shutil.copytree(FIXTURES / "store-sample", root)
    for p in [root, *root.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    victim = next(r for r in expected("store-sample", "msg") if 65536 < r["phyOffset"] < 131072)
    seg = root / "commitlog" / "00000000000000065536"
    data = bytearray(seg.read_bytes())
    data[victim["phyOffset"] - 65536 + 5] ^= 0xFF
    seg.write_bytes(data)
    code, out, err = run(capsys, "print", str(root), "--no-body", "--json")
    assert code == 0, err
    rows = [r for r in jsonl(out) if "physical_offset" in r]
    assert len(rows) == len(expected("store-sample", "msg")) - 1
    assert victim["phyOffset"] not in {r["physical_offset"] for r in rows}
    assert f"{seg}, offset {victim['phyOffset']}" in err and "unknown magic code" in err
