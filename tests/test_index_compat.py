"""The index writer produces RocketMQ's bytes: rebuilt from the commitlog of a store RocketMQ
4.9.8 wrote, every index file equals RocketMQ's own, header, slots and entries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rocketstore import ManualClock, StoreConfig
from rocketstore.clock import SystemClock
from rocketstore.commitlog import CommitLog
from rocketstore.dispatch_request import DispatchRequest
from rocketstore.index import IndexService
from tests.conftest import FIXTURE_CONFIG, FIXTURES


def fixture_commitlog(name: str) -> CommitLog:
    src = FIXTURES / name
    log = CommitLog(src / "commitlog", FIXTURE_CONFIG, SystemClock(), readonly=True)
    log.files.load()
    return log


@pytest.mark.parametrize("chunk", [1, 7, 10_000])
def test_rebuilt_index_is_byte_identical_to_rocketmq(tmp_path: Path, chunk: int) -> None:
    log = fixture_commitlog("store-sample")
    requests = list(log.dispatch_requests(0))
    assert len(requests) == 600
    index = IndexService(
        tmp_path,
        FIXTURE_CONFIG.index_hash_slots,
        FIXTURE_CONFIG.index_max_entries,
        ManualClock(1_700_000_000_000),
    )
    for i in range(0, len(requests), chunk):  # dispatch rounds of different sizes give the same bytes
        index.build(requests[i : i + chunk])
    index.flush()
    theirs = sorted((FIXTURES / "store-sample" / "index").iterdir())
    ours = [f.path for f in index.files]
    assert len(ours) == len(theirs) == 4
    for mine, rocketmq in zip(ours, theirs):
        assert mine.read_bytes() == rocketmq.read_bytes(), (mine.name, rocketmq.name)
    index.close()
    log.close()


def test_put_keys_matches_one_key_at_a_time(tmp_path: Path) -> None:
    cfg = StoreConfig(index_hash_slots=7, index_max_entries=64)
    rng = np.random.default_rng(5)
    hashes = rng.integers(0, 2**31 - 1, size=200)
    phys = np.cumsum(rng.integers(100, 300, size=200))
    stamps = 1_700_000_000_000 + np.cumsum(rng.integers(0, 900, size=200))
    a = IndexService(tmp_path / "a", cfg.index_hash_slots, cfg.index_max_entries, ManualClock())
    b = IndexService(tmp_path / "b", cfg.index_hash_slots, cfg.index_max_entries, ManualClock())
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    fa = a._writable_file()
    fb = b._writable_file()
    assert fa.put_keys(hashes, phys, stamps) == 63  # entry 0 is never used: 63 fit
    for i in range(63):
        assert fb.put_keys(hashes[i : i + 1], phys[i : i + 1], stamps[i : i + 1]) == 1
    assert fb.put_keys(hashes[63:64], phys[63:64], stamps[63:64]) == 0
    fa.write_header()
    fb.write_header()
    assert bytes(fa.buf) == bytes(fb.buf)
    a.close()
    b.close()


def test_a_few_requests_hashed_as_python_index_as_the_compiled_pass_does(tmp_path: Path) -> None:
    # a round of a few requests hashes its keys as Python, a larger one in the compiled pass:
    # spaces, empty keys, non-ASCII text and surrogate pairs must give the same bytes either way
    keys = ["a  b", " lead", "trail ", "", "ключ заказ", "\U0001f600 x", "k" * 300, "é"]
    uniqs: list[str | None] = [None, "", "0A0B0C0D", "Ü\U0001f680", None, "u-1", "u-2", "u-3"]
    requests = [
        DispatchRequest(1000 + 200 * i, 200, f"T{i % 3}", 0, i, 0, 1_700_000_000_000 + i, 0, k, u)
        for i, (k, u) in enumerate(zip(keys * 3, uniqs * 3))
    ]
    cfg = StoreConfig(index_hash_slots=11, index_max_entries=64)
    (tmp_path / "few").mkdir()
    (tmp_path / "many").mkdir()
    few = IndexService(tmp_path / "few", cfg.index_hash_slots, cfg.index_max_entries, ManualClock())
    many = IndexService(tmp_path / "many", cfg.index_hash_slots, cfg.index_max_entries, ManualClock())
    for i in range(len(requests)):
        few.build(requests[i : i + 1])
    many.build(requests)
    few.flush()
    many.flush()
    assert [f.path.read_bytes() for f in few.files] == [f.path.read_bytes() for f in many.files]
    assert len(few.files) == 1
    assert few.files[0].header.index_count == 1 + sum(
        (1 if u else 0) + len(k.split()) for k, u in zip(keys * 3, uniqs * 3)
    )
    few.close()
    many.close()
