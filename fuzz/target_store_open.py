"""Fuzz target: a whole-store open of a mutated copy of the RocketMQ fixture store.

    python fuzz/target_store_open.py [libFuzzer options] [corpus dir]

Each input chooses up to four mutations of the files of tests/fixtures/rocketmq-4.9.8/
store-sample (flip a byte, zero a range, truncate, extend, delete the file), applied to a fresh
copy. A child process (this file with ``--child DIR``), under an address-space limit
(``RLIMIT_AS``) and a wall-clock timeout, then opens the copy read-only and reads every message
of every queue (``get_message``, ``read_batch``, ``look_message_by_offset``, a key query),
checks no byte of the store changed, opens it read-write and reads everything again, and runs
``verify_store``.

Contract: the child ends with exit status 0: every step either succeeds or raises a
``RocketStoreError`` (CorruptDataError, StoreConfigError, DataLossError, ...). Any other
exception (exit 1, traceback on stderr), a crash of the interpreter, going over the memory
limit, a hang past the timeout, or a read-only open that changed a byte is a finding: the input
is saved by libFuzzer (``-artifact_prefix``), and the mutated directory can be rebuilt from it
with ``python fuzz/target_store_open.py --replay CRASH_FILE DIR``.

The child runs uninstrumented, so libFuzzer's coverage counts only the mutation choices; the
mutations are what the input steers.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import _harness

atheris = _harness.atheris
FIXTURE = _harness.FIXTURE
FILES = sorted(str(p.relative_to(FIXTURE)) for p in FIXTURE.rglob("*") if p.is_file() and p.name != "lock")
TIMEOUT_S = float(os.environ.get("FUZZ_STORE_TIMEOUT", "60"))
MEMORY_LIMIT = int(os.environ.get("FUZZ_STORE_MEMORY_MB", "3072")) << 20
_BASE = _harness.scratch("store")


def mutate(data: bytes, root: Path) -> list[str]:
    """Copy the fixture to ``root`` and apply the mutations ``data`` chooses; what was done."""
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(FIXTURE, root)
    for p in root.rglob("*"):
        p.chmod(p.stat().st_mode | 0o200)
    fdp = atheris.FuzzedDataProvider(data)
    done = []
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        name = FILES[fdp.ConsumeIntInRange(0, len(FILES) - 1)]
        path = root / name
        if not path.exists():
            continue
        size = path.stat().st_size
        op = fdp.ConsumeIntInRange(0, 4)
        at = fdp.ConsumeIntInRange(0, max(0, size - 1))
        if op == 0:  # flip bits of one byte
            mask = fdp.ConsumeIntInRange(1, 255)
            with path.open("r+b") as f:
                f.seek(at)
                byte = f.read(1)
                if byte:
                    f.seek(at)
                    f.write(bytes([byte[0] ^ mask]))
            done.append(f"flip {name}@{at}^{mask}")
        elif op == 1:  # zero a range
            n = fdp.ConsumeIntInRange(1, 4096)
            with path.open("r+b") as f:
                f.seek(at)
                f.write(bytes(min(n, size - at)))
            done.append(f"zero {name}@{at}+{n}")
        elif op == 2:
            os.truncate(path, at)
            done.append(f"truncate {name} to {at}")
        elif op == 3:
            n = fdp.ConsumeIntInRange(1, 70000)
            with path.open("ab") as f:
                f.write(bytes([fdp.ConsumeIntInRange(0, 255)]) * n)
            done.append(f"extend {name} by {n}")
        else:
            path.unlink()
            done.append(f"delete {name}")
    return done


def test_one_input(data: bytes) -> None:
    root = _BASE / "store"
    done = mutate(data, root)
    try:
        child = subprocess.run(
            [sys.executable, __file__, "--child", str(root)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"store open hung for {TIMEOUT_S:.0f} s after {done}") from None
    _outcome(child.stdout)
    if child.returncode != 0:
        raise AssertionError(
            f"store open failed (exit {child.returncode}) after {done}:\n{child.stderr[-4000:]}"
        )


def _outcome(report: str) -> int:
    """Branch on what the child reported, so each new kind of outcome (which step failed, with
    which error) counts as new coverage for libFuzzer: the inputs that reach it are kept."""
    kinds = 0
    for line in report.splitlines():
        step, _, rest = line.partition(": ")
        error = rest.partition(":")[0]
        if step == "read-only":
            kinds |= 1
        elif step == "read-write":
            kinds |= 2
        elif step == "verify":
            kinds |= 4
        if error == "CorruptDataError":
            kinds |= 8
        elif error == "StoreConfigError":
            kinds |= 16
        elif error == "DataLossError":
            kinds |= 32
        elif error:
            kinds |= 64
    return kinds


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


# --- the child ---------------------------------------------------------------------------------
def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _read_everything(store: object) -> None:
    from rocketstore import MessageStore

    assert isinstance(store, MessageStore)
    for topic, queues in store.topics().items():
        for queue_id in queues:
            offset = store.min_offset_in_queue(topic, queue_id)
            end = store.max_offset_in_queue(topic, queue_id)
            while offset < end:
                result = store.get_message("fuzz", topic, queue_id, offset, 32)
                for m in result.messages:
                    m.to_dict()
                if result.next_begin_offset <= offset:
                    break
                offset = result.next_begin_offset
            store.read_batch(topic, queue_id, store.min_offset_in_queue(topic, queue_id), 4096)
        list(store.iter_query_message(topic, "key-1", 0, 1 << 62))
    offset = store.min_phy_offset()
    for _ in range(10000):
        m = store.look_message_by_offset(offset)
        if m is None:
            break
        offset += m.store_size
    store.runtime_info()


def child(root: Path) -> int:
    from rocketstore import ManualClock, MessageStore, RocketStoreError, StoreConfig
    from rocketstore.verify import verify_store

    listing = FIXTURE.parent / "store-sample.expected.jsonl"
    now = max(
        row["storeTs"]
        for row in map(json.loads, listing.read_text().splitlines())
        if row.get("kind") == "clrec"
    )
    config = StoreConfig(
        commitlog_segment_size=65536, consume_queue_entries=40, index_hash_slots=64, index_max_entries=256
    )
    steps = []
    before = _snapshot(root)
    try:
        steps.append("read-only open")
        with MessageStore.open(root, config, clock=ManualClock(now), readonly=True) as store:
            _read_everything(store)
    except RocketStoreError as exc:
        print(f"read-only: {type(exc).__name__}: {exc}")
    if _snapshot(root) != before:
        print("a read-only open changed the store's files", file=sys.stderr)
        return 2
    try:
        steps.append("read-write open")
        with MessageStore.open(root, config, clock=ManualClock(now)) as store:
            _read_everything(store)
    except RocketStoreError as exc:
        print(f"read-write: {type(exc).__name__}: {exc}")
    try:
        steps.append("verify")
        verify_store(root, config)
    except RocketStoreError as exc:
        print(f"verify: {type(exc).__name__}: {exc}")
    return 0


def replay(crash: Path, root: Path) -> None:
    """Rebuild the mutated directory an input describes, to run anything against it by hand."""
    print("\n".join(mutate(crash.read_bytes(), root)))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        try:
            sys.exit(child(Path(sys.argv[2])))
        except Exception:
            traceback.print_exc()
            sys.exit(1)
    if sys.argv[1:2] == ["--replay"]:
        replay(Path(sys.argv[2]), Path(sys.argv[3]))
        sys.exit(0)
    atheris.instrument_func(mutate)
    atheris.instrument_func(_outcome)
    _harness.fuzz(test_one_input, lambda: [bytes(range(i, i + 24)) for i in range(0, 200, 25)])
