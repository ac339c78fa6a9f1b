"""The ``rocketstore`` command as a process: streaming into a pipe that closes, Ctrl-C, SIGTERM,
and one time rule for the CLI and the Spark options whatever the machine's zone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.cli import main
from rocketstore.cli.output import CHUNK

# the disk ratios: how full this machine's disk is must not refuse the child processes' puts
CFG = StoreConfig(
    commitlog_segment_size=1 << 20,
    consume_queue_entries=4000,
    index_hash_slots=64,
    index_max_entries=256,
    disk_max_used_space_ratio=100,
    disk_clean_forcibly_ratio=100,
    disk_warning_ratio=100,
)
ROOMY_DISK = "disk_max_used_space_ratio = 100\ndisk_clean_forcibly_ratio = 100\ndisk_warning_ratio = 100\n"
MESSAGES = 3000  # ~600 KB of plain output: far more than a pipe's buffer
SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("big") / "store"
    with MessageStore.open(root, CFG) as store:
        results = store.put_messages(
            [Message("Loop", f"message {i:06d} ".encode() * 6, tags="t", queue_id=0) for i in range(MESSAGES)]
        )
        assert all(r.ok for r in results)
    return root


def cli(*args: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "200"}
    return subprocess.Popen(
        [sys.executable, "-m", "rocketstore.cli", *args], env=env, stderr=subprocess.PIPE, **kwargs
    )


def test_print_into_a_pipe_that_closes_ends_quietly(big: Path) -> None:
    proc = cli("print", str(big), "-t", "Loop", stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = [proc.stdout.readline(), proc.stdout.readline()]  # like `| head -2`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert first[0].split()[:2] == [b"topic", b"queue_id"] and first[1].startswith(b"Loop ")
    assert err == ""


class _ClosedPipe:
    """A stdout whose reader has gone: the first write fails as a closed pipe does."""

    def __init__(self) -> None:
        self.reads_at_first_write: int | None = None

    def write(self, text: str) -> int:
        self.reads_at_first_write = reads[0]
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise ValueError("no file descriptor")


reads = [0]


@pytest.mark.parametrize("as_json", [False, True])
def test_print_streams_the_first_rows_before_reading_the_rest(
    big: Path, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    reads[0] = 0
    get = MessageStore.get_message

    def counted(self: MessageStore, *args: Any, **kwargs: Any) -> Any:
        res = get(self, *args, **kwargs)
        reads[0] += len(res.messages)
        return res

    monkeypatch.setattr(MessageStore, "get_message", counted)
    pipe = _ClosedPipe()
    monkeypatch.setattr(sys, "stdout", pipe)
    assert main(["print", str(big), "-t", "Loop", *(["--json"] if as_json else [])]) == 0
    assert pipe.reads_at_first_write is not None
    assert pipe.reads_at_first_write <= CHUNK + 32 < MESSAGES  # one chunk (and one read batch) ahead


def test_ctrl_c_exits_130_without_a_line(big: Path) -> None:
    # Ctrl-C reaches a foreground job, whose SIGINT is the default's; a suite run from a script
    # in the background inherits it ignored, and Python then keeps it ignored (as it should)
    proc = cli(
        "tail",
        str(big),
        "-t",
        "Loop",
        "-n",
        "1",
        "-f",
        "--interval",
        "0.05",
        stdout=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().rstrip().endswith(b"message 002999")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    assert proc.stderr.read() == b""


def test_sigterm_closes_the_store_cleanly_in_the_cli(tmp_path: Path) -> None:
    """`put --lines` holds the store open for writing while it reads stdin."""
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as store:
        store.put_message(Message("T", b"first", queue_id=0))
    conf = tmp_path / "roomy.toml"
    conf.write_text(ROOMY_DISK)
    proc = cli(
        "--config",
        str(conf),
        "put",
        str(root),
        "-t",
        "T",
        "--lines",
        "--json",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(b"one\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["status"] == "PUT_OK"  # open, and waiting for a line
    assert (root / "abort").exists()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert b"Traceback" not in proc.stderr.read()
    assert not (root / "abort").exists()
    with MessageStore.open(root, CFG) as store:
        assert not store.abnormal_shutdown_detected and store.max_offset_in_queue("T", 0) == 2


def test_sigterm_closes_the_store_cleanly_in_a_library_process(tmp_path: Path) -> None:
    root = tmp_path / "s"
    code = (
        "import sys, time\n"
        "from rocketstore import Message, MessageStore\n"
        "from rocketstore.shutdown import exit_on_sigterm\n"
        "from tests.test_cli_process import CFG\n"
        "with exit_on_sigterm(), MessageStore.open(sys.argv[1], CFG) as store:\n"
        "    store.put_message(Message('T', b'x', queue_id=0))\n"
        "    print('open', flush=True)\n"
        # short sleeps: a signal that lands between the print and the sleep call is run by Python
        # only when the sleep returns (CPython checks for signals after it, not before)
        "    for _ in range(1200):\n"
        "        time.sleep(0.1)\n"
    )
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + str(Path(SRC).parent)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(root)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"open\n"
    assert (root / "abort").exists()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    assert not (root / "abort").exists()
    with MessageStore.open(root, CFG) as store:
        assert not store.abnormal_shutdown_detected and store.max_offset_in_queue("T", 0) == 1


_PARSE = """
import json, sys
from rocketstore.cli.common import time_value
from rocketstore.spark.source import parse_time
from rocketstore.times import format_time
text = sys.argv[1]
cli_ms = time_value(text, "--begin")
spark_ms = [parse_time("startTime", text), parse_time("startingTimestamp", text)]
print(json.dumps([cli_ms, *spark_ms, format_time(0)]))
"""


@pytest.mark.parametrize("text", ["2026-11-22T09:00:00", "2026-11-22 09:00", "2026-11-22#09:00:00:000"])
def test_zoneless_input_is_local_time_in_the_cli_and_spark_alike(text: str) -> None:
    got = {}
    for tz in ("Asia/Shanghai", "UTC"):
        env = {**os.environ, "TZ": tz, "PYTHONPATH": SRC}
        out = subprocess.run([sys.executable, "-c", _PARSE, text], env=env, capture_output=True, check=True)
        cli_ms, spark_ms, stream_ms, epoch = json.loads(out.stdout)
        assert cli_ms == spark_ms == stream_ms, tz  # one rule in every entry point
        got[tz] = (cli_ms, epoch)
    assert got["UTC"][0] - got["Asia/Shanghai"][0] == 8 * 3600 * 1000  # local wall-clock time
    assert got["Asia/Shanghai"][1] == "1970-01-01T08:00:00.000+08:00"
    assert got["UTC"][1] == "1970-01-01T00:00:00.000+00:00"


_SPARK_SIDE = """
import datetime as dt, json
from rocketstore.spark.jobs import _hour_label
from rocketstore.spark.writer import _millis
hour = dt.datetime(2026, 11, 22, 1, tzinfo=dt.timezone.utc)
print(json.dumps([_hour_label(hour), _millis(dt.datetime(2026, 11, 22, 9))]))
"""


def test_spark_charts_and_written_timestamps_follow_the_rule() -> None:
    """Chart hours carry their offset; a naive datetime handed to the writer is local time."""
    want = {"Asia/Shanghai": "2026-11-22T09:00+08:00", "UTC": "2026-11-22T01:00+00:00"}
    for tz, label in want.items():
        env = {**os.environ, "TZ": tz, "PYTHONPATH": SRC}
        out = subprocess.run([sys.executable, "-c", _SPARK_SIDE], env=env, capture_output=True, check=True)
        got_label, born_ms = json.loads(out.stdout)
        assert got_label == label
        assert born_ms == 1795338000000 - (8 * 3600 * 1000 if tz == "Asia/Shanghai" else 0)


def test_an_offset_or_epoch_ms_means_the_same_instant_in_every_zone() -> None:
    for text in ("2026-11-22T09:00:00+08:00", "2026-11-22T01:00:00Z", "1795309200000"):
        seen = set()
        for tz in ("Asia/Shanghai", "UTC", "America/New_York"):
            env = {**os.environ, "TZ": tz, "PYTHONPATH": SRC}
            out = subprocess.run(
                [sys.executable, "-c", _PARSE, text], env=env, capture_output=True, check=True
            )
            seen.update(json.loads(out.stdout)[:3])
        assert seen == {1795309200000}, text


def test_sigterm_to_make_run_demo_leaves_a_cleanly_closed_store(tmp_path: Path) -> None:
    from rocketstore.demo import DEMO_CONFIG

    root = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": SRC, "JAVA_HOME": "", "PATH": os.path.dirname(sys.executable)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocketstore.demo", str(root)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"store ")  # printed with the store open
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=120)
    err = proc.stderr.read()
    assert code in (143, 0), err  # 0 only if the demo had already finished
    assert b"Traceback" not in err
    assert not (root / "abort").exists()
    with MessageStore.open(root, DEMO_CONFIG) as store:
        assert not store.abnormal_shutdown_detected
