"""Resource limits: consume-queue and index files are mapped while used, at most
``max_mapped_files`` at once (storage/map_cache.py), so a store with tens of thousands of queues
opens, takes puts and serves reads under ``ulimit -n 1024``."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.storage.map_cache import MapCache
from rocketstore.storage.mapped_file import MappedFile
from rocketstore.storage.paths import segment_name

from .many_queues_child import ROUNDS

SEGMENT = 4096


def mappings_of(directory: Path) -> int:
    """How many mappings this process holds of files under ``directory``."""
    prefix = str(directory.resolve())
    return sum(1 for line in Path("/proc/self/maps").read_text().splitlines() if prefix in line)


def segments(directory: Path, cache: MapCache, count: int, start: int = 0) -> list[MappedFile]:
    """``count`` new segments, each holding 100 bytes of its own number plus one (not yet flushed)."""
    files = []
    for i in range(start, start + count):
        mf = MappedFile(directory / segment_name(i * SEGMENT), SEGMENT, create=True, cache=cache)
        mf.write_at(0, bytes([i + 1]) * 100)
        mf.wrote_position = 100
        files.append(mf)
    return files


def test_cache_keeps_at_most_its_capacity_mapped_and_remaps_on_read(tmp_path: Path) -> None:
    cache = MapCache(3)
    files = segments(tmp_path, cache, 5)
    assert [mf.parked for mf in files] == [True, True, False, False, False]
    assert len(cache) == 3
    assert mappings_of(tmp_path) == 3
    # what was written before parking was flushed first, and is in the file
    for i, mf in enumerate(files[:2]):
        assert mf.flushed_position == 100
        assert (tmp_path / segment_name(i * SEGMENT)).read_bytes()[:101] == bytes([i + 1]) * 100 + b"\0"
    # reading a parked segment maps it again, with the same bytes; another one is parked for it
    assert bytes(files[0].buf[:100]) == b"\x01" * 100
    assert not files[0].parked
    assert len(cache) == 3 and mappings_of(tmp_path) == 3
    assert sum(mf.parked for mf in files) == 2
    for mf in files:
        mf.close()
    assert len(cache) == 0 and mappings_of(tmp_path) == 0


def test_recently_read_segments_are_parked_last(tmp_path: Path) -> None:
    cache = MapCache(3)
    a, b, c = segments(tmp_path, cache, 3)
    # the cache saw the three mapped in order a, b, c; a read of ``a`` since marks it used
    for mf in (a, b, c):
        mf.referenced = False
    a.referenced = True
    (d,) = segments(tmp_path, cache, 1, start=3)
    assert not a.parked and b.parked and not c.parked and not d.parked


def test_a_segment_being_read_is_not_unmapped_under_its_reader(tmp_path: Path) -> None:
    cache = MapCache(1)
    first, second = segments(tmp_path, cache, 2)
    assert first.parked
    view = first.buf  # a reader holds the mapping
    segments(tmp_path, cache, 1, start=2)
    assert not first.parked  # refused to park while read: the cache holds one more than its capacity
    assert bytes(view[:100]) == b"\x01" * 100
    del view
    third = MappedFile(tmp_path / segment_name(9 * SEGMENT), SEGMENT, create=True, cache=cache)
    assert first.parked and second.parked and not third.parked
    assert len(cache) == 1


def test_a_failed_flush_while_parking_is_raised_and_the_segment_stays_mapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = MapCache(1)
    (first,) = segments(tmp_path, cache, 1)

    def failing_sync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing_sync)
    with pytest.raises(OSError, match="Input/output error"):
        MappedFile(tmp_path / segment_name(SEGMENT), SEGMENT, create=True, cache=cache)
    assert not first.parked and first.flushed_position == 0
    assert bytes(first.buf[:100]) == b"\x01" * 100
    monkeypatch.undo()
    assert first.park() and first.flushed_position == 100


def test_parked_segments_hold_no_descriptor(tmp_path: Path) -> None:
    def descriptors() -> int:
        prefix = str(tmp_path.resolve())
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # the listing's own descriptor, gone already
                count += os.readlink(f"/proc/self/fd/{fd}").startswith(prefix)
        return count

    cache = MapCache(2)
    files = segments(tmp_path, cache, 6)
    assert descriptors() <= 2  # a mapping keeps a duplicate descriptor before Python 3.13, none after
    reopened = [MappedFile(mf.path, SEGMENT, cache=cache) for mf in files]
    assert all(mf.parked for mf in reopened) and descriptors() <= 2
    for mf in files + reopened:
        mf.close()
    assert descriptors() == 0


def test_reads_race_dispatch_under_a_tiny_cap(tmp_path: Path) -> None:
    """Readers read every queue while the dispatcher writes, with two files mapped at most: every
    message read is the one written at its offset, and no read fails."""
    cfg = StoreConfig(
        commitlog_segment_size=1 << 20,
        consume_queue_entries=4,
        index_hash_slots=16,
        index_max_entries=64,
        max_mapped_files=2,
    )
    queues, rounds = 6, 60
    errors: list[BaseException] = []
    done = threading.Event()
    with MessageStore.open(tmp_path / "store", cfg) as store:

        def read_queue(qid: int) -> list[bytes]:
            bodies: list[bytes] = []
            while r := store.get_message("g", "Race", qid, len(bodies), 64).messages:
                bodies += [m.body for m in r]
            return bodies

        def read() -> None:
            try:
                while not done.is_set():
                    for qid in range(queues):
                        bodies = read_queue(qid)
                        assert bodies == [f"{qid}:{n}".encode() for n in range(len(bodies))]
                        if bodies:
                            key = f"k{qid}:{len(bodies) - 1}"
                            assert [m.body for m in store.query_message("Race", key)] == [bodies[-1]]
            except BaseException as exc:
                errors.append(exc)

        readers = [threading.Thread(target=read) for _ in range(3)]
        for t in readers:
            t.start()
        for n in range(rounds):
            store.put_batch(
                "Race",
                [f"{q}:{n}".encode() for q in range(queues)],
                queue_ids=list(range(queues)),
                keys=[f"k{q}:{n}" for q in range(queues)],
            )
        assert store.wait_dispatched(timeout=60)
        done.set()
        for t in readers:
            t.join()
        assert not errors, errors[0]
        for qid in range(queues):
            assert read_queue(qid) == [f"{qid}:{n}".encode() for n in range(rounds)]
        # The cap holds at each mapping: a file a reader still held when the last one was mapped
        # stayed mapped (MapCache: "the count can exceed capacity by the files in use at that
        # moment") until the next. One more read of parked files maps them, the readers gone.
        for qid in range(queues):
            assert store.get_message("g", "Race", qid, 0, 1).messages[0].body == f"{qid}:0".encode()
        assert (
            mappings_of(tmp_path / "store" / "consumequeue") + mappings_of(tmp_path / "store" / "index") <= 2
        )


def test_the_flusher_leaves_a_parked_index_file_parked(tmp_path: Path) -> None:
    """The consume-queue/index flusher syncs a parked index file by its path: mapping it again
    would push out a file a reader uses, and over the cap while the two race."""
    cfg = StoreConfig(flush_consume_queue_interval=10, max_mapped_files=1)
    with MessageStore.open(tmp_path / "store", cfg) as store:
        store.put_batch("T", [b"a", b"b"], queue_ids=[0, 0], keys=["k1", "k2"])
        assert store.wait_dispatched(timeout=10)
        assert store.get_message("g", "T", 0, 0, 2).messages[1].body == b"b"  # parks the index file
        assert mappings_of(tmp_path / "store" / "index") == 0
        time.sleep(0.3)  # thirty flusher rounds
        assert mappings_of(tmp_path / "store" / "index") == 0
        assert mappings_of(tmp_path / "store" / "consumequeue") == 1
        assert [m.body for m in store.query_message("T", "k2")] == [b"b"]


CHILD = Path(__file__).with_name("many_queues_child.py")


def run_many_queues(root: Path, queues: int, nofile: int, cap: int) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    results = {}
    for phase in ("create", "reopen"):
        proc = subprocess.run(
            [sys.executable, str(CHILD), phase, str(root), str(queues), str(nofile), str(cap)],
            capture_output=True,
            text=True,
            env=env,
            timeout=1800,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[phase] = json.loads(proc.stdout.strip().splitlines()[-1])
    reopen = results["reopen"]
    assert reopen["wrong"] == [] and reopen["missing_keys"] == []
    assert reopen["max_offsets"] == [ROUNDS + 1]
    for phase, result in results.items():
        for when, held in result.items():
            if isinstance(held, dict):
                assert held["queue_maps"] <= cap, (phase, when, held)
                assert held["fds"] < nofile, (phase, when, held)
    # every queue has two segments: 2 * queues files, of which at most ``cap`` were mapped
    assert sum(1 for _ in (root / "consumequeue").glob("*/*/*")) == 2 * queues


def _fast_directory(tmp_path: Path) -> Path:
    """A tmpfs when there is one: creating tens of thousands of queue files fsyncs each twice,
    which is what a disk is slow at and no part of what is tested here."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="rocketstore-test-", dir=shm))
    return tmp_path


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    d = _fast_directory(tmp_path)
    yield d
    if d != tmp_path:
        shutil.rmtree(d, ignore_errors=True)


def test_six_hundred_queues_under_a_descriptor_limit_of_256(fast_dir: Path) -> None:
    """Every queue file mapped at once needs ~1,200 descriptors; with a cap of 64 the store runs
    in 256."""
    run_many_queues(fast_dir / "store", 600, 256, 64)


@pytest.mark.slow
def test_twenty_thousand_queues_under_ulimit_1024_with_the_default_cap(fast_dir: Path) -> None:
    run_many_queues(fast_dir / "store", 20_000, 1024, StoreConfig().max_mapped_files)
