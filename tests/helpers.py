"""Helpers several test modules share: reading a queue whole, waiting for a condition, a Python
child process running this checkout, and RocketMQ 4.9.8's own reading of a store (the oracle,
when ``ROCKETMQ_ORACLE`` names it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rocketstore import GetStatus, MessageExt, MessageStore

REPO = Path(__file__).resolve().parent.parent
ORACLE = os.environ.get("ROCKETMQ_ORACLE", "")
ORACLE_SKIP_REASON = (
    "set ROCKETMQ_ORACLE to the oracle's run.sh (RocketMQ 4.9.8's store driver: docs/testing.md)"
    if not ORACLE
    else f"ROCKETMQ_ORACLE={ORACLE!r} is not a file: set it to the oracle's run.sh (docs/testing.md)"
)
HAVE_ORACLE = bool(ORACLE) and Path(ORACLE).is_file()


def read_all(store: MessageStore, topic: str, queue_id: int = 0) -> list[MessageExt]:
    """Every message of a queue, once what was put is dispatched."""
    assert store.wait_dispatched(60)
    out: list[MessageExt] = []
    offset = store.min_offset_in_queue(topic, queue_id)
    while True:
        res = store.get_message("g", topic, queue_id, offset, 32)
        if res.status is not GetStatus.FOUND:
            return out
        out.extend(res.messages)
        offset = res.next_begin_offset


def wait_until(predicate: Callable[[], object], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


def spawn_python(code: str, *args: str) -> subprocess.Popen[str]:
    """``python -c code args...`` on this checkout's sources, its stdout a text pipe (a writer
    the test kills, a replication side)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    assert proc.stdout is not None
    return proc


def oracle_read(store_dir: Path, out: Path, *, hash_slots: int, index_num: int) -> str:
    """RocketMQ 4.9.8's listing of the store at ``store_dir`` (its queues and messages), which
    it must have loaded."""
    run = subprocess.run(
        [
            ORACLE,
            "read",
            str(store_dir),
            "--hashSlots",
            str(hash_slots),
            "--indexNum",
            str(index_num),
            "--out",
            str(out),
        ],
        capture_output=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    text = out.read_text()
    assert "load=true" in text, text[:2000]
    return text
