"""Files truncated by another process under a running store (#22 items 9, 10).

A page of a mapping past its file's end kills the process that touches it with SIGBUS, which
Python cannot catch; so every scenario runs in a child process, and each test asserts that the
child exited normally and printed the error the store answered.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SIGBUS on a truncated mapping is Linux's")

_PRELUDE = """
import os, sys, time
from pathlib import Path
from rocketstore import Message, MessageStore, StoreConfig
from rocketstore.errors import RocketStoreError
# the children do not get conftest's disk patch: a busy shared disk must not refuse their puts
_ROOMY = {"disk_max_used_space_ratio": 100, "disk_clean_forcibly_ratio": 100, "disk_warning_ratio": 100}
CFG = StoreConfig(commitlog_segment_size=1 << 20, consume_queue_entries=1000, **_ROOMY)
root = Path(sys.argv[1])

def fill(store):
    store.put_messages([Message("T", b"x" * 200, queue_id=0, keys=[f"k{i}"]) for i in range(1990)])
    assert store.wait_dispatched(60)

def first(directory):
    return directory / sorted(p.name for p in directory.iterdir() if p.name.isdigit())[0]

def newest(directory):
    return directory / sorted(p.name for p in directory.iterdir() if p.name.isdigit())[-1]

def attempt(what, call):
    try:
        result = call()
    except RocketStoreError as exc:
        print(what, "error", type(exc).__name__, exc, flush=True)
    else:
        print(what, "ok", result, flush=True)
"""


def run_child(body: str, root: Path) -> list[str]:
    script = _PRELUDE + textwrap.dedent(body)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(root)], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, f"child exited with {proc.returncode}: {proc.stderr[-3000:]}"
    return proc.stdout.splitlines()


def test_a_writer_reading_a_commitlog_segment_truncated_under_it_answers_an_error(tmp_path: Path) -> None:
    out = run_child(
        """
        with MessageStore.open(root, CFG) as store:
            fill(store)
            os.truncate(first(root / "commitlog"), 4096)
            attempt("get", lambda: store.get_message("G", "T", 0, 0, 32).status)
            attempt("late", lambda: store.get_message("G", "T", 0, 1500, 32).status)
            attempt("batch", lambda: len(store.read_batch("T", 0, 1000, 100)))
            attempt("by offset", lambda: store.look_message_by_offset(500_000))
            attempt("early", lambda: store.look_message_by_offset(0).queue_offset)
        print("closed")
        """,
        tmp_path / "s",
    )
    assert out[0].startswith("get error CorruptDataError the file is 4096 bytes, not 1048576")
    assert "commitlog/00000000000000000000, offset 4096" in out[0]
    assert out[1].startswith("late error CorruptDataError")
    assert out[3].startswith("by offset error CorruptDataError")
    assert out[4] == "early ok 0"
    assert out[-1] == "closed"


def test_a_follower_reading_a_segment_the_writer_truncated_answers_an_error(tmp_path: Path) -> None:
    out = run_child(
        """
        with MessageStore.open(root, CFG) as store:
            fill(store)
        with MessageStore.open(root, CFG, readonly=True) as follower:
            attempt("before", lambda: follower.get_message("G", "T", 0, 1500, 4).status.name)
            os.truncate(first(root / "commitlog"), 8192)
            os.truncate(first(root / "consumequeue" / "T" / "0"), 160)
            attempt("record", lambda: follower.get_message("G", "T", 0, 1500, 4).status)
            attempt("entry", lambda: follower.get_message("G", "T", 0, 500, 4).status)
        print("closed")
        """,
        tmp_path / "s",
    )
    assert out[0] == "before ok FOUND"
    assert out[1].startswith("record error CorruptDataError the file is")
    assert out[2].startswith("entry error CorruptDataError the file is 160 bytes")
    assert out[-1] == "closed"


def test_the_newest_queue_segment_truncated_under_the_writer_is_rebuilt_at_the_next_open(
    tmp_path: Path,
) -> None:
    """The writer's dispatch finds the queue file it appends to emptied: it stops with the error
    (store.failure) instead of dying of SIGBUS, puts are refused from then on, and the next
    open drops the emptied segment, says so, and rebuilds the queue from the commitlog."""
    root = tmp_path / "s"
    out = run_child(
        """
        with MessageStore.open(root, CFG) as store:
            fill(store)
            print("truncated", newest(root / "consumequeue" / "T" / "0").name, flush=True)
            os.truncate(newest(root / "consumequeue" / "T" / "0"), 0)
            results = store.put_messages([Message("T", b"y" * 200, queue_id=0) for _ in range(300)])
            print("puts", sorted({r.status.name for r in results}), flush=True)
            store.wait_dispatched(60)
            deadline = time.monotonic() + 60  # the store learns of the failure just after dispatch
            while store.failure is None and time.monotonic() < deadline:
                time.sleep(0.01)
            print("failure", type(store.failure).__name__, store.failure, flush=True)
            attempt("put after", lambda: store.put_message(Message("T", b"z", queue_id=0)).status.name)
            try:
                store.close()
            except RocketStoreError as exc:
                print("close", type(exc).__name__, flush=True)
        print("exited")
        """,
        root,
    )
    assert out[0] == f"truncated {20000:020d}"
    assert out[2].startswith("failure CorruptDataError the file is 0 bytes")
    assert out[3:5] == ["put after ok SERVICE_NOT_AVAILABLE", "close CorruptDataError"]
    assert out[-1] == "exited"
    from rocketstore import MessageStore, StoreConfig
    from rocketstore.verify import verify_store

    config = StoreConfig(commitlog_segment_size=1 << 20, consume_queue_entries=1000)
    with MessageStore.open(root, config) as store:
        assert store.recovery is not None
        assert [line.split(" ")[0] for line in store.recovery.rebuilt] == [
            str(root / "consumequeue" / "T" / "0" / f"{20000:020d}")
        ]
        assert store.wait_dispatched(60)
        stored = int(out[1].count("PUT_OK") > 0) * 300 + 1990
        assert store.max_offset_in_queue("T", 0) == stored
        got = store.read_batch("T", 0, 1980, 20)
        assert len(got) == 20
    assert verify_store(root, config).clean


@pytest.mark.parametrize("replaced", [False, True], ids=["cut", "cut-then-replaced"])
def test_a_put_into_a_commitlog_segment_truncated_under_the_writer_answers_an_error(
    tmp_path: Path, replaced: bool
) -> None:
    """A small put is copied into the mapping: into a segment cut short under the writer it
    would die of SIGBUS; it raises CorruptDataError naming the file instead, and nothing is
    acknowledged that is not there. The size that matters is the mapped file's own, not what
    its path names now: a segment cut and then replaced by a whole file of the same name still
    has a cut mapping."""
    replace = 'os.rename(segment, segment.with_name("cut")); segment.write_bytes(bytes(1 << 20))'
    out = run_child(
        f"""
        with MessageStore.open(root, CFG) as store:
            fill(store)
            end = store.max_phy_offset()
            segment = first(root / "commitlog")  # the one written to (the next is made ahead)
            os.truncate(segment, 4096)
            {replace if replaced else "pass"}
            attempt("put", lambda: store.put_message(Message("T", b"z", queue_id=0)).status.name)
            print("end", store.max_phy_offset() == end, flush=True)
        print("exited")
        """,
        tmp_path / "s",
    )
    assert out[0].startswith("put error CorruptDataError the file is 4096 bytes, not 1048576")
    assert out[1:] == ["end True", "exited"]
