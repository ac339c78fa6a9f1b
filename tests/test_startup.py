"""What a process loads before it does anything: commands and small stores never import numba
(nor pyarrow, gRPC, PySpark) unless they use them, and the kernels run as Python for small inputs
compute exactly what the compiled ones compute."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rocketstore
from rocketstore import Message, MessageStore, StoreConfig, jit
from rocketstore.codec import commitlog_record as cl
from rocketstore.codec import commitlog_scan
from rocketstore.codec.crc import crc32_function
from tests.test_scan_extent import assert_same, segment

HEAVY = ("numba", "pyarrow", "grpc", "pyspark", "rocketmq")
SMALL = StoreConfig(
    commitlog_segment_size=1 << 20, consume_queue_entries=1000, index_hash_slots=64, index_max_entries=256
)


def loaded_after(code: str, *args: str) -> tuple[list[str], str]:
    """Which of HEAVY a fresh interpreter has imported after running ``code``, and its stdout."""
    script = textwrap.dedent(code) + textwrap.dedent(f"""
        import sys as _sys
        print("\\nLOADED " + " ".join(m for m in {HEAVY!r} if m in _sys.modules))
        """)
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    out, _, last = done.stdout.rpartition("\nLOADED ")
    return last.split(), out


CLI = """
import sys
from rocketstore.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
"""


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("startup") / "store"
    with MessageStore.open(root, SMALL) as store:
        store.put_messages([Message("Orders", f"order {i}".encode(), keys=[f"k{i}"]) for i in range(300)])
        store.wait_dispatched()
    return root


def test_import_rocketstore_loads_no_compiler() -> None:
    loaded, _ = loaded_after("import rocketstore")
    assert loaded == []


def test_version_is_the_installed_distributions() -> None:
    """``rocketstore --version`` prints ``__version__`` (no metadata scan): it must be the
    version pyproject.toml gives the installed distribution."""
    from importlib.metadata import version

    _, out = loaded_after(CLI, "--version")
    assert out.strip() == f"rocketstore {version('rocketstore')}" == f"rocketstore {rocketstore.__version__}"


def test_the_names_it_exports_load_on_first_use() -> None:
    loaded, out = loaded_after("import rocketstore; print(rocketstore.StoreConfig().commitlog_segment_size)")
    assert (loaded, out.strip()) == ([], str(StoreConfig().commitlog_segment_size))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        getattr(rocketstore, "nothing")  # noqa: B009


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--help"], ["print", "--help"], ["decode-id", "7F00000100002A9F00000000000273DB"]],
)
def test_commands_that_need_no_store_load_nothing_heavy(argv: list[str]) -> None:
    loaded, out = loaded_after(CLI, *argv)
    assert loaded == []
    assert out.strip()


@pytest.mark.parametrize("argv", [["status", "--json"], ["print", "-m", "1", "--json"], ["topics", "--json"]])
def test_reading_a_small_store_needs_no_compiled_kernel(small_store: Path, argv: list[str]) -> None:
    loaded, out = loaded_after(CLI, argv[0], str(small_store), *argv[1:])
    assert loaded == []
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    if argv[0] == "status":
        assert rows[0]["commitlog_max_offset"] > 0 and rows[0]["recovery_would_cut_bytes"] == 0
    if argv[0] == "print":
        assert rows[0]["body"] == "order 0"
    if argv[0] == "topics":
        assert sum(r["max_offset"] for r in rows) == 300


def test_a_consumer_of_a_small_store_loads_no_compiler(small_store: Path) -> None:
    loaded, out = loaded_after(
        """
        import sys
        from rocketstore.consumer import open_consumer
        with open_consumer(sys.argv[1], "g", "Orders", start="earliest", auto_commit=False) as c:
            got = []
            while len(got) < 300:
                batch = c.poll(64, timeout=5.0)
                assert batch
                got += batch
            print(sorted(m.body.decode() for m in got) == sorted(f"order {i}" for i in range(300)))
        """,
        str(small_store),
    )
    assert (loaded, out.strip()) == ([], "True")


def test_a_process_past_the_interpreted_budget_loads_numba_and_agrees() -> None:
    """A segment with more records than the interpreted budget: the walk hands over to the
    compiled kernel where Python stopped, with SegmentScan's answer."""
    loaded, out = loaded_after(
        """
        import random
        from rocketstore.codec import commitlog_record as cl
        from rocketstore.codec.commitlog_scan import scan_extent
        from rocketstore.jit import INTERPRETED_ITEMS
        from tests.test_scan_extent import record
        rng = random.Random(5)
        buf = bytearray()
        while len(buf) < 2_000_000:
            buf += record(rng)
        buf += bytes(64)
        walk = cl.SegmentScan(buf, 0, len(buf), check_crc=True)
        count = sum(1 for _ in walk)
        e = scan_extent(buf, 0, len(buf), check_crc=True)
        print(count > INTERPRETED_ITEMS, (e.records, e.position, e.stop) == (count, walk.position, walk.stop))
        """
    )
    assert (loaded, out.split()) == (["numba"], ["True", "True"])


# --- the same kernels run as Python and compiled ----------------------------------------------
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    flips=st.lists(st.tuples(st.integers(0, 8191), st.integers(1, 255)), max_size=4),
    check_crc=st.booleans(),
    budget=st.integers(0, 40),
)
def test_scan_extent_handing_over_mid_segment_agrees_with_segment_scan(
    seed: int, flips: list[tuple[int, int]], check_crc: bool, budget: int
) -> None:
    buf = segment(seed)
    for pos, xor in flips:
        buf[pos] ^= xor
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jit, "loaded", lambda: False)  # as in a process that has not loaded numba
        patch.setattr(jit, "_budget", [budget])
        patch.setattr(commitlog_scan, "_WALK_STEP", 3)
        assert_same(buf, check_crc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    flips=st.lists(st.tuples(st.integers(0, 8191), st.integers(1, 255)), max_size=3),
    check_crc=st.booleans(),
)
def test_the_scan_kernel_as_python_is_the_compiled_one(
    seed: int, flips: list[tuple[int, int]], check_crc: bool
) -> None:
    buf = segment(seed)
    for pos, xor in flips:
        buf[pos] ^= xor
    u8 = np.frombuffer(buf, dtype=np.uint8)
    args = (u8, 0, len(buf), check_crc, crc32_function())
    assert jit.interpret(commitlog_scan._scan, *args) == commitlog_scan._scan(*args)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), damage=st.lists(st.integers(0, 8191), max_size=3))
def test_the_gather_kernel_as_python_is_the_compiled_one(seed: int, damage: list[int]) -> None:
    rng = random.Random(seed)
    buf = segment(seed)
    walk = cl.SegmentScan(buf, 0, len(buf))
    found = [(walk.position, r.total_size) for r in walk]
    found = [(p - size, size) for p, size in found]  # SegmentScan's position is past each record
    positions = np.array([p for p, _ in found] + [rng.randrange(len(buf))], dtype=np.int64)
    sizes = np.array([s for _, s in found] + [rng.randint(0, 500)], dtype=np.int64)
    for at in damage:
        buf[at] ^= 0xFF
    u8 = np.frombuffer(buf, dtype=np.uint8)
    limit = rng.randint(0, len(buf))
    slow = jit.interpret(commitlog_scan._gather, u8, positions, sizes, limit)
    fast = commitlog_scan._gather(u8, positions, sizes, limit)
    ok = fast[4]
    assert slow[4] == ok
    for a, b in zip(slow[:4], fast[:4]):
        assert a[:ok].tolist() == b[:ok].tolist()


def test_interpreted_kernels_copy_bytes_as_the_intrinsic_does() -> None:
    from rocketstore.codec.byte_copy import copy_bytes

    src = np.frombuffer(bytes(range(200)), dtype=np.uint8)
    slow, fast = np.zeros(64, dtype=np.uint8), np.zeros(64, dtype=np.uint8)
    assert jit.interpret(copy_bytes, slow, 3, src, 100, 50) == copy_bytes(fast, 3, src, 100, 50) == 53
    assert slow.tobytes() == fast.tobytes()
    with pytest.raises(ValueError, match="outside its array"):
        jit.interpret(copy_bytes, slow, 30, src, 0, 50)


def test_warm_leaves_every_kernel_in_numbas_cache(tmp_path: Path) -> None:
    """``python -m rocketstore.warm`` (``make`` runs it after installing) compiles the kernels into
    numba's cache, saying so; a second run, like any later process, compiles nothing."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    runs = [
        subprocess.run(
            [sys.executable, "-m", "rocketstore.warm"], env=env, capture_output=True, text=True, timeout=1200
        )
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr
    counts = [
        re.search(r"\((\d+) compiled into numba's cache now, (\d+) loaded from it\)", r.stderr) for r in runs
    ]
    assert counts[0] is not None and counts[1] is not None, runs[0].stderr
    first, second = (tuple(map(int, m.groups())) for m in counts)  # type: ignore[union-attr]
    assert first[0] >= 20 and first[1] == 0
    assert second[0] == 0 and second[1] >= 20  # (the kernels others call were compiled with them)
    assert "preparing the compiled kernels" in runs[0].stderr


def test_a_local_job_over_a_small_store_gets_a_quicker_jvm(
    small_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rocketstore import spark

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-class-archive"))  # (test_spark_class_archive)

    quick = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    two_segments = tmp_path / "store"
    with MessageStore.open(two_segments, SMALL) as store:
        store.put_batch("T", [bytes(2000)] * 800)  # ~1.6 MiB: a full 1 MiB segment and part of the next
        written = store.max_phy_offset()
    with MessageStore.open(small_store, SMALL, readonly=True) as store:
        small = store.max_phy_offset()
    assert spark._commitlog_bytes(two_segments) == written > SMALL.commitlog_segment_size
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spark, "SMALL_STORE_BYTES", small)
        assert spark.small_job_conf(small_store, "local[2]") == quick
        assert spark.small_job_conf(small_store, "spark://host:7077") == {}
        assert spark.small_job_conf(two_segments, "local[*]") == {}
        patch.setattr(spark, "SMALL_STORE_BYTES", small - 1)
        assert spark.small_job_conf(small_store, "local") == {}
