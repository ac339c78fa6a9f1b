"""Crash tests: a writer process is SIGKILLed at random moments and the store must keep its promises.

Three modes, each a run of rounds against one store directory that grows across rounds (see
``tests/crash/harness.py`` for what a round does and checks):

- **SYNC_FLUSH, process kill** and **ASYNC_FLUSH, process kill**: the writer is killed, the
  page cache survives, so every acknowledged message must be there after reopening -- with
  ASYNC_FLUSH too, since an acknowledged put is in the mapping (STORE.md §6).

- **SYNC_FLUSH, power loss (simulated)**: a power cut keeps only what reached the disk. The
  writer runs with ``--shadow``: before it starts, the closed store is copied to a shadow
  directory, and then every place where the store makes something durable is wrapped so
  that, right after it, the shadow receives exactly what became durable
  (``tests.crash.writer.PowerLossShadow``):

  * ``MappedFile.sync`` -- the one fdatasync every commitlog, consume-queue and index flush
    goes through. fdatasync makes durable every write made to the file before the call. The
    commitlog and consume queues are append-only, so the bytes below the file's read
    position taken *before* the real sync are what it covered: the shadow file becomes those
    bytes followed by zeros (never shorter than an earlier snapshot of the same file). Index
    files are updated in place, so they are copied whole after the sync, under a lock that
    also wraps ``IndexService.build``: the copy is a consistent index as of a moment between
    dispatch batches, i.e. what the sync covered plus possibly later entries, which a kernel
    writing back those pages could equally have left.
  * ``MappedFile(create=True)`` -- the store creates a file under a temporary name, sizes and
    fsyncs it, renames it and fsyncs the directory: the shadow gets an all-zero file.
  * ``atomic_write`` of the checkpoint (temp file, fsync, rename, fsync of the directory): the
    shadow gets the same bytes.
  * ``abort``, which the store creates at open without fsyncing the directory, is created in
    the shadow once the store is open (assumed durable: on ext4/xfs the store's first fsync
    commits it).

  Each shadow file is replaced atomically (temp + rename, under one lock), so the kill cannot
  leave a half-copied snapshot. Nothing else reaches the shadow: unsynced writes (what a
  power cut loses), unlinks and tail zeroing at recovery (not fsynced by the store, so a
  deleted file may come back). After the kill -- and, in half the rounds, after writing back
  to the shadow a random subset of the 4 KiB pages of commitlog, consume-queue and index
  files the writer dirtied but never synced, as a kernel may have done before the cut
  (records, entries and index chains torn at page boundaries) -- the
  harness opens the shadow as the store: the disk a rebooted machine would find. Every
  acknowledged message must be there: under SYNC_FLUSH a put returns only after the sync
  that covers its bytes, hence after the snapshot holding them, and the writer prints the
  acknowledgement only after the put returned. The checked shadow (after a clean close) is
  the store of the next round.

  Not simulated: tearing inside a page, lost or reordered metadata operations, a disk that
  lies about what it made durable.

Rounds per mode: ``ROCKETSTORE_CRASH_ROUNDS`` (default 12; ``make crash`` runs 200). Seeds:
``ROCKETSTORE_CRASH_SEED`` (default: random, printed, and named in every failure); the writer
timing is not deterministic, so a seed reproduces the writes and kill targets, not the exact
interleaving. A failed round keeps its store, and a copy of it from before recovery, under
pytest's tmp_path. Also: ``ROCKETSTORE_CRASH_THREADS`` (writer threads, 4),
``ROCKETSTORE_CRASH_FULL_EVERY`` (a full check every N rounds, 25, and always in the last),
``ROCKETSTORE_CRASH_CQ_ENTRIES`` (consume-queue segment size, 100),
``ROCKETSTORE_CRASH_WRITE_BACK_INDEX`` (0: power-loss write-back spares index files).
"""

from __future__ import annotations

import filecmp
import os
import random
import shutil
import time
from pathlib import Path

import pytest

from tests.crash.harness import CrashHarness, DirMirror, env_int
from tests.crash.writer import BodyError, check_body, make_body

ROUNDS = env_int("ROCKETSTORE_CRASH_ROUNDS", 12)
THREADS = env_int("ROCKETSTORE_CRASH_THREADS", 4)
FULL_EVERY = env_int("ROCKETSTORE_CRASH_FULL_EVERY", 25)
CQ_ENTRIES = env_int("ROCKETSTORE_CRASH_CQ_ENTRIES", 100)
WRITE_BACK_INDEX = env_int("ROCKETSTORE_CRASH_WRITE_BACK_INDEX", 1) != 0


def _base_seed() -> int:
    return env_int("ROCKETSTORE_CRASH_SEED", 0) or int.from_bytes(os.urandom(3), "big")


def _run(tmp_path: Path, flush: str, *, power_loss: bool) -> None:
    seed = _base_seed()
    harness = CrashHarness(
        tmp_path / "crash",
        flush,
        power_loss=power_loss,
        threads=THREADS,
        base_seed=seed,
        full_every=FULL_EVERY,
        cq_entries=CQ_ENTRIES,
        write_back_index=WRITE_BACK_INDEX,
        log=print,
    )
    print(f"{harness.mode}: {ROUNDS} rounds, base seed {seed} (ROCKETSTORE_CRASH_SEED={seed})")
    harness.run(ROUNDS)
    print(harness.totals())
    shutil.rmtree(tmp_path / "crash", ignore_errors=True)  # kept only when a round failed


@pytest.mark.slow
@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_process_kill_loses_nothing_acknowledged(tmp_path: Path, flush: str) -> None:
    _run(tmp_path, flush, power_loss=False)


@pytest.mark.slow
def test_power_loss_sync_flush_loses_nothing_acknowledged(tmp_path: Path) -> None:
    _run(tmp_path, "SYNC_FLUSH", power_loss=True)


def test_bodies_check_themselves() -> None:
    body = make_body("w1-t0-0", random.Random(1))
    assert check_body(body) == "w1-t0-0"
    for damaged in (body[:-1], body[:40] + bytes([body[40] ^ 1]) + body[41:], b"", body[:20]):
        with pytest.raises(BodyError):
            check_body(damaged)


def _same_tree(a: Path, b: Path) -> bool:
    files_a = sorted(p.relative_to(a) for p in a.rglob("*"))
    files_b = sorted(p.relative_to(b) for p in b.rglob("*"))
    return files_a == files_b and all(
        filecmp.cmp(a / rel, b / rel, shallow=False) for rel in files_a if (a / rel).is_file()
    )


def test_dir_mirror_copies_only_what_changed_on_either_side(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    (a / "q" / "0").mkdir(parents=True)
    (a / "q" / "0" / "seg").write_bytes(b"1" * 100)
    (a / "log").write_bytes(b"2" * 100)
    mirror = DirMirror()
    assert mirror.sync(a, b) == 2 and _same_tree(a, b)
    assert mirror.sync(a, b) == 0
    assert mirror.sync(a, c) == 2 and mirror.sync(b, c) == 0  # same content, known on both sides
    time.sleep(0.02)  # past the file system's timestamp granularity
    (a / "log").write_bytes(b"3" * 100)  # changed at the source
    (b / "q" / "0" / "seg").write_bytes(b"9" * 100)  # changed at the destination
    (b / "q" / "1").mkdir()
    (b / "stray").write_bytes(b"")
    assert mirror.sync(a, b) == 2 and _same_tree(a, b)
    assert mirror.sync(b, c) == 1 and _same_tree(b, c)  # only "log" differs from c
