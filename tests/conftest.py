from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from rocketstore import ManualClock, StoreConfig
from rocketstore.storage.mapped_file import MappedFile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Store directories written by RocketMQ 4.9.8 itself (their README says how), kept with the tests.
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "rocketmq-4.9.8"

# The geometry the RocketMQ fixtures were written with (their README).
FIXTURE_CONFIG = StoreConfig(
    commitlog_segment_size=65536, consume_queue_entries=40, index_hash_slots=64, index_max_entries=256
)


def copy_fixture(name: str, dest: Path) -> Path:
    """A writable copy of a read-only fixture store directory (recovery writes to it)."""
    src = FIXTURES / name
    target = dest / name
    shutil.copytree(src, target)
    for root, dirs, files in os.walk(target):
        for n in dirs + files:
            p = Path(root) / n
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    return target


@contextlib.contextmanager
def held_syncs() -> Iterator[threading.Event]:
    """Every fsync of a segment held until the event is set (10 s at most)."""
    gate = threading.Event()
    real = MappedFile.sync

    def held(self: MappedFile) -> None:
        gate.wait(10)
        real(self)

    MappedFile.sync = held  # type: ignore[method-assign]
    try:
        yield gate
    finally:
        gate.set()
        MappedFile.sync = real  # type: ignore[method-assign]


@pytest.fixture
def small_config() -> StoreConfig:
    return FIXTURE_CONFIG


def fixture_clock(name: str) -> ManualClock:
    """A clock stopped at the last record RocketMQ stored in the fixture: none of its delayed
    messages is due yet (each fixture was written in under 5 s; the shortest delay is 30 s), so
    the store holds exactly what RocketMQ read back. Their delivery is tested on its own."""
    listing = FIXTURES / f"{name}.expected.jsonl"
    last = max(
        row["storeTs"]
        for row in map(json.loads, listing.read_text("utf-8").splitlines())
        if row.get("kind") == "clrec"
    )
    return ManualClock(last)


@pytest.fixture(autouse=True, scope="session")
def half_full_disk() -> Iterator[None]:
    """Stores opened in this process without their own ``disk_usage`` probe see a half-full disk,
    from the first fixture of the session on (module-scoped ones included): how full the machine
    running the tests is must not trigger reclamation or the disk-full flag. (Tests of those pass
    a probe of their own; stores opened by other processes, Spark's workers among them, are given
    disk ratios of 100 in their configuration instead.)"""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("rocketstore.store.disk_used_ratio", lambda _path: 0.5)
        yield


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local[2] SparkSession for the Spark tests, Python workers on this interpreter, the
    source registered with pushdown. Without Java the Spark tests skip (fail in CI)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        if os.environ.get("CI"):
            pytest.fail("Spark tests need Java 17+ (`make test` installs it where it can)")
        pytest.skip("Spark tests need Java 17+")
    from rocketstore.spark import session

    s = session("local[2]", "rocketstore-tests", **{"spark.sql.shuffle.partitions": "4"})
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()
