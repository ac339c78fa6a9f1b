"""The consumer commands: consume, reset-offset, consumer-progress's totals, tail -f on a new topic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main
from rocketstore.consumer.offset_store import read_offsets

CFG = StoreConfig(commitlog_segment_size=65536, consume_queue_entries=40)
# a test that starts a reader process, then writes, waits for the reader to wait: seen by its
# inotify descriptor in /proc (Linux's)
WAITING_IS_VISIBLE = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="sees a reader wait by its inotify fd in /proc"
)


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
    assert run(capsys, "consume", str(root), "-g", "billing", "-t", "Orders", "-m", "4")[0] == 0
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


def test_reset_offset_refuses_a_group_that_never_existed_and_a_time_it_cannot_read(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    offsets = root / "config" / "consumerOffset.json"
    run(capsys, "consume", str(root), "-g", "billing", "-t", "Orders", "-m", "4")
    before = offsets.read_bytes()
    code, out, err = run(
        capsys, "reset-offset", str(root), "-g", "biling", "-t", "Orders", "--to", "earliest"
    )
    assert code == 3 and out == ""
    assert "no consumer group 'biling'" in err and "billing" in err
    assert offsets.read_bytes() == before  # nothing created
    code, _, err = run(
        capsys, "reset-offset", str(root), "-g", "billing", "-t", "Orders", "--to", "yesterday"
    )
    assert code == 2 and offsets.read_bytes() == before
    assert "a queue offset (a number)" in err and "@EPOCH_MS" in err and "(epoch ms" not in err
    # a group that ran a consumer but committed nothing exists too
    run(capsys, "consume", str(root), "-g", "peek", "-t", "Orders", "-m", "1", "--no-commit")
    code, out, err = run(
        capsys, "reset-offset", str(root), "-g", "peek", "-t", "Orders", "--to", "3", "--json"
    )
    assert code == 0, err
    assert read_offsets(offsets)[("Orders", "peek")] == {0: 3, 1: 3, 2: 3, 3: 3}


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


@WAITING_IS_VISIBLE
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
        # tail has looked, found no topic Later, and waits for the writer
        assert _wait_for(lambda: _waits_on_the_store(proc) or proc.poll() is not None)
        assert proc.poll() is None
        with MessageStore.open(root, CFG) as store:
            store.put_message(Message("Later", b"arrived", queue_id=0))
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert json.loads(line)["body"] == "arrived"
    finally:
        proc.kill()
        proc.wait(30)


class _Lines:
    """The JSON lines a process prints, collected by a thread (a test waits for them with a bound)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.rows: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.rows.append(json.loads(line))

    def bodies(self) -> list[str]:
        return [row["body"] for row in self.rows]


def _waits_on_the_store(proc: subprocess.Popen[bytes]) -> bool:
    """The process has looked at the store and sleeps on its signal file (an inotify watch)."""
    fds = Path(f"/proc/{proc.pid}/fd")
    try:
        return any(os.readlink(fd) == "anon_inode:inotify" for fd in fds.iterdir())
    except OSError:  # a descriptor closed while listed: look again
        return False


def _wait_for(ready: Callable[[], bool], timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@WAITING_IS_VISIBLE
@pytest.mark.parametrize("small", [True, False], ids=["small-geometry", "default-geometry"])
def test_tail_and_consumers_started_on_an_empty_store_get_every_message_a_later_put_writes(
    tmp_path: Path, small: bool
) -> None:
    """A store made with ``topics create --create`` (and a --config geometry), readers started
    before its first message, then another process puts: each reader gets every message, the
    two consumers of a group each a share, none twice."""
    root = tmp_path / "store"
    conf = tmp_path / "cli.toml"
    # the disk ratios: how full this machine's disk is must not refuse the put
    roomy = "disk_max_used_space_ratio = 100\ndisk_clean_forcibly_ratio = 100\ndisk_warning_ratio = 100\n"
    conf.write_text(roomy + ("commitlog_segment_size = 65536\nconsume_queue_entries = 40\n" if small else ""))
    geometry = ["--config", str(conf)]
    cli = [sys.executable, "-m", "rocketstore.cli"]
    subprocess.run([*cli, *geometry, "topics", "create", str(root), "Orders", "--create"], check=True)
    readers = [
        subprocess.Popen([*cli, "tail", str(root), "-t", "Orders", "-f", "--json"], stdout=subprocess.PIPE),
        *(
            subprocess.Popen(
                [*cli, "consume", str(root), "-g", "billing", "-t", "Orders", "-f", "--json"],
                stdout=subprocess.PIPE,
            )
            for _ in range(2)
        ),
    ]
    try:
        tail, *consumers = [_Lines(p) for p in readers]
        # every reader has made its first look (tail -f shows what was there before, new after)
        assert _wait_for(lambda: all(_waits_on_the_store(p) for p in readers))
        n = 600  # 100 KB of records: two commitlog segments of the small geometry, queue segments rolled
        bodies = [f"order-{i}-{'x' * 100}" for i in range(n)]
        subprocess.run(
            [*cli, *geometry, "put", str(root), "-t", "Orders", "--key", "k", "--lines"],
            input="\n".join(bodies).encode(),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        got = lambda: len(tail.rows) >= n and sum(len(c.rows) for c in consumers) >= n  # noqa: E731
        assert _wait_for(got), (
            sorted({(r["queue_id"], r["queue_offset"]) for r in tail.rows}),
            [len(c.rows) for c in consumers],
        )
        assert sorted(tail.bodies()) == sorted(bodies)
        consumed = [b for c in consumers for b in c.bodies()]
        assert sorted(consumed) == sorted(bodies)
        if small:
            assert {p.stat().st_size for p in (root / "commitlog").iterdir()} == {65536}
    finally:
        for p in readers:
            p.kill()
            p.wait(30)


def test_print_and_consumer_progress_work_on_a_store_whose_offset_file_holds_bad_values(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a client once stored through a pull's commit offset (2^64), and garbage beside it,
    no longer keeps the commands from opening the store: the bad entries are left out."""
    path = root / "config" / "consumerOffset.json"
    path.write_text(
        '{"offsetTable": {"Orders@billing": {"0": 18446744073709551616, "1": 3, "18446744073709551616": 1,'
        ' "2": "garbage", "3": [null]}, "Orders@other": {"0": -5}, "nonsense": 7}}',
        "utf-8",
    )
    code, out, err = run(capsys, "print", str(root), "--no-body", "--json")
    assert code == 0, err
    assert len([r for r in jsonl(out) if "physical_offset" in r]) == 40
    code, out, err = run(capsys, "consumer-progress", str(root), "--json")
    assert code == 0, err
    assert jsonl(out)[0] == {
        "group": "billing",
        "topic": "Orders",
        "queue_id": 1,
        "max_offset": 10,
        "consumer_offset": 3,
        "lag": 7,
    }
    # reset-offset writes the file: without the bad entries
    assert (
        run(capsys, "reset-offset", str(root), "-g", "billing", "-t", "Orders", "-q", "0", "--to", "2")[0]
        == 0
    )
    assert json.loads(path.read_text("utf-8")) == {"offsetTable": {"Orders@billing": {"0": 2, "1": 3}}}
