"""The ``rocketstore`` command against RocketMQ's fixtures (read in place: not one byte may change)
and against stores rocketstore wrote: output parsed and compared with the library's answers and
with what RocketMQ itself read back."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from rich.cells import cell_len
from rich.console import Console

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main
from rocketstore.cli.app import EXIT_NOT_FOUND, app
from rocketstore.cli.output import Output
from rocketstore.times import parse_time
from tests.conftest import FIXTURES, copy_fixture

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
        assert "error" not in err and "Traceback" not in err, args  # counts and notes go to stderr
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
    code, out, err = run(capsys, "query-key", str(written), "-t", "Orders", "-k", "no-such-key")
    assert code == 3 and out == "" and "no message with key 'no-such-key'" in err  # docs/cli.md: not found
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
        "--create",
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
    # a commitlog segment cut short: data is gone, which open refuses (an index file or the
    # checkpoint cut short is rebuilt)
    (root / "commitlog" / f"{0:020d}").write_bytes(b"short")
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
    no date; a negative one as none. ``status`` does not fail on them."""
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
    assert row["physic_msg_time"] == f"{future} (ms, not a representable date)"
    assert row["logics_msg_time"] == f"{garbage} (ms, not a representable date)"
    assert row["index_msg_time"] is None


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


# --- issue 14: the command as a new user finds it ---------------------------------------------------
SNAKE = re.compile(r"[a-z][a-z0-9_]*")


def small_config_file(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(
        "commitlog_segment_size = 65536\nconsume_queue_entries = 40\n"
        "index_hash_slots = 64\nindex_max_entries = 256\n"
    )
    return path


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and re.fullmatch(r"rocketstore \S+\n", out)


def test_put_without_a_store_directory_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "put", "-t", "Orders", "hello", "world")
    assert code == 1 and out == ""
    assert "'hello' does not exist" in err and "Did you forget the store directory?" in err
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    code, _, err = run(capsys, "put", "notes", "-t", "Orders", "world", "--create")
    assert code == 1 and "not a store directory" in err
    assert [p.name for p in (tmp_path / "notes").iterdir()] == ["a.txt"]
    for command in ("recover", "reclaim", "topics create"):  # no writing command makes a store by accident
        code, _, err = run(capsys, *command.split(), "nowhere", *(["T"] if "topics" in command else []))
        assert code == 1 and f"rocketstore {command} STORE_DIR" in err and "'nowhere' does not exist" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]


def test_put_create_says_what_the_new_store_reserves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = small_config_file(tmp_path)
    root = tmp_path / "new"
    code, _, err = run(
        capsys, "--config", str(config), "put", str(root), "-t", "T", "-q", "1", "x", "--create"
    )
    assert code == 0, err
    reported = int(re.search(r"reserves ([\d,]+) bytes", err).group(1).replace(",", ""))  # type: ignore[union-attr]
    on_disk = sum(
        p.stat().st_size
        for p in root.rglob("*")
        if p.is_file() and p.parts[len(root.parts)] in ("commitlog", "consumequeue", "index", "checkpoint")
    )
    assert reported == on_disk == 65536 + 40 * 20 + (40 + 64 * 4 + 256 * 20) + 4096
    # a second put goes into the existing store without --create and says nothing about reserving
    code, _, err = run(capsys, "put", "-s", str(root), "-t", "T", "y", "z", "--json")
    assert code == 0 and "reserves" not in err


def test_store_directory_is_an_option_or_the_first_argument(
    written: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with MessageStore.open(written, CFG, readonly=True) as store:
        msg_id = store.get_message("g", "Orders", 1, 0, 1).messages[0].msg_id
    answers = []
    for args in (
        ["query-id", msg_id, "-s", str(written)],
        ["query-id", "--store", str(written), msg_id],
        ["query-id", str(written), msg_id],
    ):
        code, out, err = run(capsys, *args, "--json")
        assert code == 0, (args, err)
        answers.append(jsonl(out))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "store").symlink_to(written)
    code, out, _ = run(capsys, "query-id", msg_id, "--json")  # ./store
    answers.append(jsonl(out))
    assert all(a == answers[0] for a in answers) and answers[0][0]["msg_id"] == msg_id
    code, out, _ = run(capsys, "topics", "-s", str(written), "--json")
    assert code == 0 and {r["topic"] for r in jsonl(out)} == {"Audit", "Orders"}
    code, _, err = run(capsys, "status", str(written), "-s", str(written))
    assert code == 2 and "two store directories" in err


@pytest.mark.parametrize(
    "args",
    [
        ["print", "STORE", "-t", "Nope"],
        ["print", "STORE", "-t", "Orders", "-q", "9"],
        ["query-key", "STORE", "-t", "Nope", "-k", "k1"],
        ["query-uniq", "STORE", "-t", "Nope", "--id", "X"],
        ["query-queue", "STORE", "-t", "Nope", "-q", "0", "-o", "0"],
        ["query-offset", "STORE", "7"],
        ["tail", "STORE", "-t", "Nope"],
        ["consumer-progress", "STORE", "-g", "nobody"],
        ["topics", "delete", "STORE", "Nope"],
    ],
)
def test_not_found_is_exit_3(args: list[str], written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *[str(written) if a == "STORE" else a for a in args])
    assert code == EXIT_NOT_FOUND == 3, err
    assert out == "" and err.startswith("rocketstore: error: no ")


def test_consumer_progress_names_an_unknown_group(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "consumer-progress", str(written), "-g", "UNKNOWN")
    assert code == 3
    assert "no consumer group 'UNKNOWN'" in err and "billing" in err and "absent" not in err


def test_max_messages_and_counts_on_stderr(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "print", str(written), "-t", "Orders", "--max-messages", "5")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "topic",
        "queue_id",
        "queue_offset",
        "msg_id",
        "physical_offset",
        "store_time",
        "tags",
        "keys",
        "body",
    ]
    assert len(lines) == 6 and err == "5 message(s)\n"
    code, out, _ = run(capsys, "tail", str(written), "-t", "Orders", "-n", "10", "-m", "3", "--json")
    assert code == 0 and len(jsonl(out)) == 3


def test_json_keys_are_snake_case_everywhere(
    written: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with MessageStore.open(written, CFG, readonly=True) as store:
        msg = store.get_message("g", "Orders", 1, 0, 1).messages[0]
        key, msg_id, offset = msg.keys[0], msg.msg_id, msg.physical_offset
    copy = tmp_path / "copy"
    shutil.copytree(written, copy)
    commands = [
        ["status", str(written)],
        ["topics", str(written)],
        ["print", str(written), "-m", "2"],
        ["print", str(written), "--count-tags"],
        ["query-key", str(written), "-t", "Orders", "-k", key],
        ["query-id", str(written), msg_id],
        ["query-offset", str(written), str(offset)],
        ["query-queue", str(written), "-t", "Orders", "-q", "1", "-o", "0"],
        ["decode-id", msg_id],
        ["consumer-progress", str(written)],
        ["tail", str(written), "-t", "Orders", "-n", "1"],
        ["verify", str(written)],
        ["recover", str(written), "--dry-run"],
        ["dump", str(next((written / "commitlog").iterdir())), "-m", "2"],
        ["reclaim", str(copy)],
        ["put", str(copy), "-t", "Orders", "x"],
        ["topics", "create", str(copy), "New"],
        ["topics", "delete", str(copy), "New"],
    ]
    for args in commands:
        code, out, err = run(capsys, *args, "--json")
        assert code == 0, (args, err)
        rows = jsonl(out)
        assert rows, args
        bad = {k for r in rows for k in r if not SNAKE.fullmatch(k)}
        assert not bad, (args, bad)


def test_printed_times_carry_their_offset(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    iso = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d")
    _, out, _ = run(capsys, "print", str(written), "-m", "1", "--json")
    row = jsonl(out)[0]
    assert iso.fullmatch(row["store_time"]) and iso.fullmatch(row["born_time"])
    assert parse_time(row["store_time"]) == row["store_timestamp"]
    _, out, _ = run(capsys, "tail", str(written), "-t", "Orders", "-n", "1")
    assert iso.match(out)


def test_tail_prints_no_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as store:
        store.put_message(Message("T", b"plain", queue_id=0))
    code, out, _ = run(capsys, "tail", str(root), "-t", "T")
    assert code == 0 and out.endswith(" T/0#0 plain\n") and "None" not in out and "tags=" not in out


def test_table_aligns_cjk_and_keeps_ids_whole_on_80_columns() -> None:
    buf = io.StringIO()
    out = Output(False, console=Console(file=buf, width=80, force_terminal=True, color_system=None))
    msg_id = "7F00000100002A9F000000000000034F"
    rows = [
        {"topic": t, "queue_id": 0, "queue_offset": 7, "msg_id": msg_id, "body": b}
        for t, b in (("订单", "世界 " * 40), ("Orders", "plain"))
    ]
    assert out.rows(["topic", "queue_id", "queue_offset", "msg_id", "body"], rows) == 2
    lines = buf.getvalue().splitlines()
    assert [cell_len(line[: line.index("0 ")]) for line in lines[1:]] == [8, 8]  # queue_id column aligned
    assert all(cell_len(line) <= 80 for line in lines) and lines[1].endswith("…")
    assert all(msg_id in line for line in lines[1:])


def test_maintenance_commands_deliver_no_delayed_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three reclaims on copies of one store with due delayed messages: the same max offset, no
    SCHEDULE delivery (the copies are opened by a tool, not a broker)."""
    max_offsets = set()
    for k in range(2):
        root = copy_fixture("store-sample", tmp_path / str(k))
        delay_before = (root / "config" / "delayOffset.json").read_bytes()
        code, out, err = run(capsys, "reclaim", str(root), "--reserved-hours", "0", "--json")
        assert code == 0, err
        max_offsets.add(jsonl(out)[0]["max_physical_offset"])
        code, out, _ = run(capsys, "recover", str(root), "--json")
        assert code == 0
        assert (root / "config" / "delayOffset.json").read_bytes() == delay_before
        code, out, _ = run(capsys, "status", str(root), "--json")
        assert jsonl(out)[0]["delayed_pending"]  # still waiting
    assert max_offsets == {max(r["offset"] + r["size"] for r in expected("store-sample", "clrec"))}


def test_topics_create_and_delete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_fixture("store-sample", tmp_path)
    code, out, err = run(capsys, "topics", "create", str(root), "Fresh", "--queues", "3", "--json")
    assert code == 0 and jsonl(out) == [{"topic": "Fresh", "read_queues": 3, "write_queues": 3, "perm": 6}], (
        err
    )
    code, out, _ = run(capsys, "topics", str(root), "-t", "Fresh", "--json")
    assert [(r["queue_id"], r["max_offset"]) for r in jsonl(out)] == [(0, 0), (1, 0), (2, 0)]
    code, out, _ = run(capsys, "status", str(root), "--json")
    log_end = jsonl(out)[0]["commitlog_max_offset"]
    code, out, err = run(capsys, "topics", "delete", "-s", str(root), "TopicB", "--json")
    assert code == 0 and jsonl(out) == [{"topic": "TopicB", "queues_deleted": 4}], err
    assert not (root / "consumequeue" / "TopicB").exists()
    assert "TopicB" not in json.loads((root / "config" / "topics.json").read_text())["topicConfigTable"]
    code, _, err = run(capsys, "print", str(root), "-t", "TopicB")
    assert code == 3 and "no topic 'TopicB'" in err
    code, out, _ = run(capsys, "status", str(root), "--json")
    assert jsonl(out)[0]["commitlog_max_offset"] == log_end  # the records stay until reclaimed
    code, _, err = run(capsys, "topics", "delete", str(root), "SCHEDULE_TOPIC_XXXX")
    assert code == 1 and "cannot be deleted" in err


def test_status_counts_the_topics_and_queues_topics_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One definition of a store's topics: those with consume queues and the configured ones
    without any yet (created, or config/topics.json)."""
    root = copy_fixture("store-sample", tmp_path)
    for topic, queues in (("Fresh", "3"), ("Empty", "1")):
        code, _, err = run(capsys, "topics", "create", str(root), topic, "--queues", queues)
        assert code == 0, err
    code, out, err = run(capsys, "topics", str(root), "--json")
    assert code == 0, err
    rows = jsonl(out)
    listed = {r["topic"] for r in rows}
    assert {"Fresh", "Empty"} <= listed
    code, out, err = run(capsys, "status", str(root), "--json")
    assert code == 0, err
    status = jsonl(out)[0]
    assert (status["topics"], status["queues"]) == (len(listed), len(rows))


def test_dump_reads_each_kind_of_file_as_the_store_does(capsys: pytest.CaptureFixture[str]) -> None:
    root = FIXTURES / "store-sample"
    records = sorted(expected("store-sample", "clrec"), key=lambda r: r["offset"])
    segment = sorted((root / "commitlog").iterdir())[1]
    code, out, err = run(capsys, "dump", str(segment), "--json")
    assert code == 0, err
    got = [(r["physical_offset"], r["total_size"], r["topic"], r["queue_offset"]) for r in jsonl(out)]
    want = [
        (r["offset"], r["size"], r["topic"], r["queueOffset"])
        for r in records
        if int(segment.name) <= r["offset"] < int(segment.name) + 65536
    ]
    assert got == want and "BLANK" in err
    queue_file = root / "consumequeue" / "TopicA" / "1" / "00000000000000000000"
    code, out, _ = run(capsys, "dump", str(queue_file), "--json")
    _, out2, _ = run(capsys, "print", str(root), "-t", "TopicA", "-q", "1", "--json", "--no-body")
    dumped = [(r["queue_offset"], r["physical_offset"]) for r in jsonl(out)]
    assert len(dumped) == 40  # the file holds 40 entries; the queue goes on in the next one
    assert dumped == [(r["queue_offset"], r["physical_offset"]) for r in jsonl(out2)][:40]
    index_file = sorted((root / "index").iterdir())[0]
    code, out, err = run(capsys, "dump", str(index_file), "--json")
    entries = jsonl(out)
    assert code == 0 and [e["entry"] for e in entries] == list(range(1, len(entries) + 1))
    assert {e["physical_offset"] for e in entries} <= {r["offset"] for r in records}
    code, _, err = run(capsys, "dump", str(root / "checkpoint"))
    assert code == 2 and "--kind" in err


def test_dump_reports_damage_with_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_fixture("store-sample", tmp_path)
    segment = sorted((root / "commitlog").iterdir())[0]
    data = bytearray(segment.read_bytes())
    data[674 + 4 : 674 + 8] = b"\xde\xad\xbe\xef"  # the second record's magic code
    segment.write_bytes(bytes(data))
    code, out, err = run(capsys, "dump", str(segment))
    assert code == 1 and len(out.splitlines()) == 2 and "stopped at damage, offset 674" in err


def test_every_command_has_help_and_an_example_in_the_docs() -> None:
    docs = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text("utf-8")

    def walk(group: click.Group, prefix: str) -> Iterator[tuple[str, click.Command]]:
        for name, cmd in group.commands.items():
            if isinstance(cmd, click.Group):
                yield from walk(cmd, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", cmd

    names = list(walk(app, ""))
    assert len(names) > 20
    for name, cmd in names:
        assert cmd.help, name
        shown = name.replace("topics list", "topics")
        assert f"$ rocketstore {shown} " in docs or f"$ rocketstore {shown}\n" in docs, name
