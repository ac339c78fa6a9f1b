"""The consumer commands: consume, reset-offset, consumer-progress's totals, tail -f on a new topic."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main
from rocketstore.consumer.offset_store import read_offsets

CFG = StoreConfig(commitlog_segment_size=65536, consume_queue_entries=40)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*args])
    out, err = capsys.readouterr()
    return code, out, err


def jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    with MessageStore.open(path, CFG) as store:
        store.put_messages(
            [
                Message(
                    "Orders", f"o{i}".encode(), tags=("TagA", "TagB")[i % 2], keys=[f"k{i}"], queue_id=i % 4
                )
                for i in range(40)
            ]
        )
    return path


def test_consume_prints_and_commits_then_goes_on_from_there(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "consume", str(root), "-g", "billing", "-t", "Orders", "-m", "12", "--json")
    assert code == 0, err
    first = jsonl(out)
    assert len(first) == 12
    table = read_offsets(root / "config" / "consumerOffset.json")[("Orders", "billing")]
    assert sum(table.values()) == 12
    code, out, _ = run(capsys, "consume", str(root), "-g", "billing", "-t", "Orders", "--json")
    rest = jsonl(out)
    assert len(rest) == 28
    assert {r["body"] for r in first + rest} == {f"o{i}" for i in range(40)}
    code, out, _ = run(capsys, "consume", str(root), "-g", "billing", "-t", "Orders", "--json")
    assert code == 0 and out == ""


def test_consume_with_a_tag_from_latest_and_without_commit(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "consume", str(root), "-g", "g", "-t", "Orders", "--tag", "TagB", "--no-commit", "--json"
    )
    assert code == 0 and {r["tags"] for r in jsonl(out)} == {"TagB"} and len(jsonl(out)) == 20
    assert not (root / "config" / "consumerOffset.json").exists()
    code, out, _ = run(capsys, "consume", str(root), "-g", "g", "-t", "Orders", "--from", "latest", "--json")
    assert code == 0 and out == ""
    code, _, err = run(capsys, "consume", str(root), "-g", "g", "-t", "Nope")
    assert code == 3 and "no topic 'Nope'" in err  # EXIT_NOT_FOUND, as print and tail


def test_reset_offset_and_consumer_progress_totals(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "reset-offset", str(root), "-g", "billing", "-t", "Orders", "--to", "latest", "--json"
    )
    assert code == 0, err
    assert [r["new_offset"] for r in jsonl(out)] == [10, 10, 10, 10]
    run(capsys, "reset-offset", str(root), "-g", "billing", "-t", "Orders", "-q", "2", "--to", "3")
    run(capsys, "reset-offset", str(root), "-g", "billing", "-t", "Orders", "-q", "0", "--to", "earliest")
    assert read_offsets(root / "config" / "consumerOffset.json") == {
        ("Orders", "billing"): {0: 0, 1: 10, 2: 3, 3: 10}
    }
    code, out, _ = run(capsys, "consumer-progress", str(root), "--json")
    rows = jsonl(out)
    assert [r["lag"] for r in rows[:4]] == [10, 0, 7, 0]
    assert rows[4] == {"group": "billing", "topic": "Orders", "queues": 4, "diff_total": 17}
    with MessageStore.open(root, CFG, readonly=True) as store:
        stamp = store.get_message("x", "Orders", 1, 4, 1).messages[0].store_timestamp
    code, out, _ = run(
        capsys,
        "reset-offset",
        str(root),
        "-g",
        "billing",
        "-t",
        "Orders",
        "-q",
        "1",
        "--to",
        f"@{stamp}",
        "--json",
    )
    assert code == 0 and jsonl(out)[0]["new_offset"] <= 4


def test_reset_offset_refuses_while_the_group_runs(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with MessageStore.open(root, CFG, readonly=True) as store, store.consumer("billing", "Orders"):
        code, _, err = run(
            capsys, "reset-offset", str(root), "-g", "billing", "-t", "Orders", "--to", "earliest"
        )
        assert code == 1 and "running consumer" in err
        code, _, _ = run(
            capsys, "reset-offset", str(root), "-g", "billing", "-t", "Orders", "--to", "0", "--force"
        )
        assert code == 0


def test_tail_follow_waits_for_a_topic_that_does_not_exist_yet(root: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rocketstore.cli",
            "tail",
            str(root),
            "-t",
            "Later",
            "-f",
            "--interval",
            "0.05",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(0.3)  # tail has looked and found no topic Later (not an assertion on time)
        assert proc.poll() is None
        with MessageStore.open(root, CFG) as store:
            store.put_message(Message("Later", b"arrived", queue_id=0))
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert json.loads(line)["body"] == "arrived"
    finally:
        proc.kill()
        proc.wait(30)
