"""A store's geometry read from its files (``geometry.py``): what the CLI and verify open stores with."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketstore import Message, MessageStore, NotAStoreError, StoreConfig, StoreConfigError
from rocketstore.geometry import detect_geometry, survey_geometry
from tests.conftest import FIXTURE_CONFIG, FIXTURES, copy_fixture, fixture_clock

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


def test_a_split_no_ratio_guesses_comes_from_the_writers_record_or_the_config(tmp_path: Path) -> None:
    """64 slots and 1,000 entries (a ratio no guess tries): the split the writer recorded in
    ``.dispatch-seq``, or the one the config gives, makes the files' size and is taken."""
    odd = CFG.replace(index_hash_slots=64, index_max_entries=1000)
    root = tmp_path / "s"
    with MessageStore.open(root, odd) as store:
        store.put_messages([Message("T", b"x", keys=[f"k{i}"]) for i in range(50)])
    assert geometry(detect_geometry(root)) == geometry(odd)
    (root / ".dispatch-seq").unlink()  # no record: only the config can tell
    with pytest.raises(StoreConfigError, match="cannot tell the hash slots"):
        detect_geometry(root)
    assert geometry(detect_geometry(root, StoreConfig(index_hash_slots=64, index_max_entries=1000))) == (
        geometry(odd)
    )
    with MessageStore.open(root, detect_geometry(root, odd), readonly=True) as store:
        assert [m.body for m in store.query_message("T", "k7")] == [b"x"]


def test_disagreeing_files_are_refused_but_surveyed(tmp_path: Path) -> None:
    root = written(tmp_path / "s")
    odd = sorted((root / "consumequeue" / "T" / "0").iterdir())[0]
    odd.write_bytes(odd.read_bytes()[:400])  # 20 entries where the others hold 30
    with pytest.raises(StoreConfigError, match="consume-queue files of different sizes") as info:
        detect_geometry(root)
    assert f"not {odd} (400 bytes)" in str(info.value)  # the odd file is named
    cfg, problems = survey_geometry(root)
    assert geometry(cfg) == geometry(CFG) and len(problems) == 1


def test_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(NotAStoreError, match="missing is not a store directory: nothing is there"):
        survey_geometry(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotAStoreError, match="empty is not a store directory: it has no commitlog"):
        survey_geometry(tmp_path / "empty")


def test_verify_names_the_odd_sized_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``rocketstore verify`` of a store whose files disagree on the geometry names the file."""
    from rocketstore.cli import main

    root = written(tmp_path / "s")
    odd = sorted((root / "commitlog").iterdir())[1]
    odd.write_bytes(odd.read_bytes()[:4096])
    code = main(["verify", str(root)])
    captured = capsys.readouterr()
    assert code != 0
    assert "commitlog segments of different sizes" in captured.out + captured.err
    assert str(odd) in (captured.out + captured.err).replace("\n", "")


@pytest.mark.parametrize("name", ["store-sample", "store-sample-crash"])
def test_open_takes_the_geometry_from_the_files_where_the_config_leaves_the_defaults(
    tmp_path: Path, name: str
) -> None:
    expected = _listing_msgs(name)
    with MessageStore.open(FIXTURES / name, readonly=True) as ro:  # no config at all
        assert geometry(ro.config) == geometry(FIXTURE_CONFIG)
        assert _all_messages(ro) == expected
    with MessageStore.open(FIXTURES / name, StoreConfig(), readonly=True) as ro:
        assert _all_messages(ro) == expected
    root = copy_fixture(name, tmp_path)  # read-write: recovery, dispatch, a put, a reopen
    clock = fixture_clock(name)  # no delayed message falls due meanwhile
    with MessageStore.open(root, StoreConfig(flush_interval=200), clock=clock) as store:
        assert geometry(store.config) == geometry(FIXTURE_CONFIG) and store.config.flush_interval == 200
        assert _all_messages(store) == expected
        assert store.put_message(Message("TopicA", b"more", keys=["more"], queue_id=0)).ok
    with MessageStore.open(root, clock=clock) as store:
        assert _all_messages(store) == sorted([*expected, ("TopicA", 0, b"more")])
        assert [m.body for m in store.query_message("TopicA", "more")] == [b"more"]


def test_a_set_size_the_files_disagree_with_is_refused_naming_the_sizes(tmp_path: Path) -> None:
    root = written(tmp_path / "s")
    for cfg, problem in [
        (
            StoreConfig(commitlog_segment_size=16384),
            "commitlog/00000000000000000000 is 8192 bytes where the config's commitlog_segment_size=16384 "
            "makes 16384: pass commitlog_segment_size=8192",
        ),
        (
            CFG.replace(consume_queue_entries=60, index_hash_slots=64, index_max_entries=256),
            "consumequeue/T/[01]/[0-9]{20} is 600 bytes where the config's consume_queue_entries=60 "
            "makes 1200: pass consume_queue_entries=30; index/[0-9]+ is 2088 bytes where the config's "
            "index_hash_slots=64, index_max_entries=256 make 5416: pass index_hash_slots=32, "
            "index_max_entries=96",
        ),
    ]:
        with pytest.raises(StoreConfigError, match=problem):
            MessageStore.open(root, cfg)
    # a size set to what the files have, the others from the files
    with MessageStore.open(root, StoreConfig(consume_queue_entries=30), readonly=True) as ro:
        assert geometry(ro.config) == geometry(CFG)


def test_a_new_store_takes_the_config_geometry(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "new", CFG) as store:
        assert store.put_message(Message("T", b"x", queue_id=0)).ok
    assert (tmp_path / "new" / "commitlog" / f"{0:020d}").stat().st_size == 8192


def _listing_msgs(name: str) -> list[tuple[str, int, bytes]]:
    import json

    rows = [
        json.loads(line) for line in (FIXTURES / f"{name}.expected.jsonl").read_text("utf-8").splitlines()
    ]
    return sorted((r["topic"], r["queueId"], _body(r)) for r in rows if r["kind"] == "msg")


def _body(row: dict[str, object]) -> bytes:
    if "body_utf8" in row:
        return str(row["body_utf8"]).encode()
    return bytes.fromhex(str(row["body_hex"]))


def _all_messages(store: MessageStore) -> list[tuple[str, int, bytes]]:
    out = []
    for topic, queues in store.topics().items():
        for q in queues:
            offset = store.min_offset_in_queue(topic, q)
            while offset < store.max_offset_in_queue(topic, q):
                r = store.get_message("g", topic, q, offset)
                out += [(m.topic, m.queue_id, m.body) for m in r.messages]
                offset = r.next_begin_offset
    return sorted(out)


def test_a_live_writers_index_file_whose_slots_run_ahead_of_its_count(tmp_path: Path) -> None:
    """The writer writes entries, then slots, then the header's count: a reader beside it can see
    slots naming entries the count does not cover yet. The split is still told."""
    root = written(tmp_path / "s")
    newest = sorted((root / "index").iterdir())[-1]
    data = bytearray(newest.read_bytes())
    data[36:40] = (2).to_bytes(4, "big")  # indexCount: as before the last batch's keys were counted
    newest.write_bytes(data)
    assert geometry(detect_geometry(root)) == geometry(CFG)
