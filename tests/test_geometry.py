"""A store's geometry read from its files (``geometry.py``): what the CLI and verify open stores with."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, StoreConfig, StoreConfigError
from rocketstore.geometry import detect_geometry, survey_geometry
from tests.conftest import FIXTURE_CONFIG, FIXTURES

CFG = StoreConfig(
    commitlog_segment_size=8192, consume_queue_entries=30, index_hash_slots=32, index_max_entries=96
)


def written(root: Path) -> Path:
    with MessageStore.open(root, CFG) as store:
        for i in range(200):
            assert store.put_message(Message("T", b"x" * 50, keys=[f"k{i}"], queue_id=i % 2)).ok
    return root


def geometry(cfg: StoreConfig) -> tuple[int, int, int, int]:
    return (
        cfg.commitlog_segment_size,
        cfg.consume_queue_entries,
        cfg.index_hash_slots,
        cfg.index_max_entries,
    )


@pytest.mark.parametrize("name", ["store-sample", "store-sample-crash"])
def test_rocketmq_fixtures(name: str) -> None:
    assert geometry(detect_geometry(FIXTURES / name)) == geometry(FIXTURE_CONFIG)


def test_a_store_written_with_an_unusual_split(tmp_path: Path) -> None:
    """96 entries over 32 slots is a ratio of 3: the file's own chains settle it."""
    root = written(tmp_path / "s")
    assert geometry(detect_geometry(root)) == geometry(CFG)
    assert survey_geometry(root)[1] == []


def test_disagreeing_files_are_refused_but_surveyed(tmp_path: Path) -> None:
    root = written(tmp_path / "s")
    odd = sorted((root / "consumequeue" / "T" / "0").iterdir())[0]
    odd.write_bytes(odd.read_bytes()[:400])  # 20 entries where the others hold 30
    with pytest.raises(StoreConfigError, match="consume-queue files of different sizes"):
        detect_geometry(root)
    cfg, problems = survey_geometry(root)
    assert geometry(cfg) == geometry(CFG) and len(problems) == 1


def test_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(StoreConfigError, match="no store directory"):
        survey_geometry(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreConfigError, match="not a store directory"):
        survey_geometry(tmp_path / "empty")


def test_a_live_writers_index_file_whose_slots_run_ahead_of_its_count(tmp_path: Path) -> None:
    """The writer writes entries, then slots, then the header's count: a reader beside it can see
    slots naming entries the count does not cover yet. The split is still told."""
    root = written(tmp_path / "s")
    newest = sorted((root / "index").iterdir())[-1]
    data = bytearray(newest.read_bytes())
    data[36:40] = (2).to_bytes(4, "big")  # indexCount: as before the last batch's keys were counted
    newest.write_bytes(data)
    assert geometry(detect_geometry(root)) == geometry(CFG)
