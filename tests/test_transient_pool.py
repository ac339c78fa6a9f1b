"""ASYNC_FLUSH with the transient store pool, and warmed segments."""

from __future__ import annotations

import time
from pathlib import Path

from rocketstore import ManualClock, Message, MessageStore, StoreConfig
from rocketstore.storage.mapped_file import MappedFile

GEOMETRY = {
    "commitlog_segment_size": 65536,
    "consume_queue_entries": 40,
    "index_hash_slots": 64,
    "index_max_entries": 256,
    "generate_uniq_key": False,
}


def pool_config(**kw: object) -> StoreConfig:
    return StoreConfig(transient_store_pool_enable=True, **{**GEOMETRY, **kw})  # type: ignore[arg-type]


def workload() -> list[Message]:
    return [
        Message(
            topic=f"T{i % 3}",
            body=bytes([i % 251]) * (50 + i % 700),
            tags=f"tag{i % 4}",
            keys=[f"k{i}"],
            queue_id=i % 4,
        )
        for i in range(900)
    ]


def test_nothing_is_visible_before_it_is_committed(tmp_path: Path) -> None:
    cfg = pool_config(
        commit_interval=3_600_000, commit_least_pages=10_000, commit_thorough_interval=3_600_000
    )
    with MessageStore.open(tmp_path / "s", cfg) as store:
        r = store.put_message(Message(topic="T", body=b"pooled"))
        assert r.ok
        assert store.max_phy_offset() == 0
        assert store.look_message_by_offset(r.physical_offset) is None
        assert store.wait_dispatched(0.2)  # nothing readable is waiting
        assert store.max_offset_in_queue("T", 0) == 0
        assert (tmp_path / "s" / "commitlog" / "00000000000000000000").read_bytes()[: r.wrote_bytes] == bytes(
            r.wrote_bytes
        )
        assert store._committer is not None
        store._committer._thorough._interval_ms = 0  # the next round commits everything
        store._committer.run_once()
        assert store.max_phy_offset() == r.wrote_bytes
        assert store.wait_dispatched(5)
        got = store.get_message("g", "T", 0, 0)
        assert [m.body for m in got.messages] == [b"pooled"]


def test_close_commits_everything_and_reopen_reads_it(tmp_path: Path) -> None:
    cfg = pool_config(
        commit_interval=3_600_000, commit_least_pages=10_000, commit_thorough_interval=3_600_000
    )
    msgs = workload()
    with MessageStore.open(tmp_path / "s", cfg) as store:
        results = store.put_messages(msgs[:450]) + [store.put_message(m) for m in msgs[450:]]
        assert all(r.ok for r in results)
    with MessageStore.open(tmp_path / "s", StoreConfig(**GEOMETRY)) as store:  # type: ignore[arg-type]
        assert store.max_phy_offset() == max(r.physical_offset + r.wrote_bytes for r in results)
        for m, r in zip(msgs, results):
            got = store.look_message_by_offset(r.physical_offset)
            assert got is not None and got.body == m.body and got.keys == list(m.keys)
        assert len(store.query_message("T1", "k1")) == 1


def test_files_are_byte_identical_to_writing_through_the_mapping(tmp_path: Path) -> None:
    def write(root: Path, cfg: StoreConfig) -> None:
        with MessageStore.open(root, cfg, clock=ManualClock(1_700_000_000_000)) as store:
            msgs = workload()
            for i in range(0, len(msgs), 100):
                assert all(r.ok for r in store.put_messages(msgs[i : i + 100]))
            assert store.wait_dispatched(5)

    write(tmp_path / "pool", pool_config(transient_store_pool_size=2, commit_interval=5))
    write(tmp_path / "direct", StoreConfig(**GEOMETRY))  # type: ignore[arg-type]
    for sub in ("commitlog", "consumequeue/T0/0", "consumequeue/T2/3"):
        a = sorted((tmp_path / "pool" / sub).iterdir())
        b = sorted((tmp_path / "direct" / sub).iterdir())
        assert [p.name for p in a] == [p.name for p in b]
        for x, y in zip(a, b):
            assert x.read_bytes() == y.read_bytes(), x


def test_an_exhausted_pool_falls_back_to_the_mapping(tmp_path: Path) -> None:
    with MessageStore.open(
        tmp_path / "s", pool_config(transient_store_pool_size=1, commit_interval=5)
    ) as store:
        results = store.put_messages(workload())
        assert all(r.ok for r in results)
        assert len(store._commitlog.files.files) > 3
        end = results[-1].physical_offset + results[-1].wrote_bytes
        deadline = time.monotonic() + 30
        while store.max_phy_offset() < end:  # the pooled segment's tail: readable once committed
            assert time.monotonic() < deadline, "the committer did not commit within 30 s"
            time.sleep(0.005)
        assert store.wait_dispatched(5)
        for r in results[::37]:
            got = store.look_message_by_offset(r.physical_offset)
            assert got is not None and got.physical_offset == r.physical_offset


def test_warmed_segments_store_and_read_back(tmp_path: Path) -> None:
    cfg = StoreConfig(warm_mapped_file_enable=True, **GEOMETRY)  # type: ignore[arg-type]
    with MessageStore.open(tmp_path / "s", cfg) as store:
        results = store.put_messages(workload())
        assert all(r.ok for r in results)
        assert store.wait_dispatched(5)
        assert store.look_message_by_offset(results[-1].physical_offset) is not None


def test_warm_touches_and_syncs_a_fresh_segment(tmp_path: Path) -> None:
    mf = MappedFile(tmp_path / "00000000000000000000", 65536, create=True)
    locked = mf.warm()
    assert isinstance(locked, bool)
    assert bytes(mf.buf[:16]) == bytes(16)  # touching does not change content
    mf.close()


def test_a_rolled_segments_uncommitted_tail_is_not_readable_yet(tmp_path: Path) -> None:
    """Appends roll on to the next segment before the committer reached the tail of the one
    before: the log is readable, and dispatched, up to that tail's committed end only, so every
    message a consume queue lists can be read (before, the queue listed the tail's records and
    reading them answered MESSAGE_WAS_REMOVING until the next commit)."""
    cfg = pool_config(
        commit_interval=3_600_000, commit_least_pages=10_000, commit_thorough_interval=3_600_000
    )
    with MessageStore.open(tmp_path / "s", cfg) as store:
        results = []
        while not results or results[-1].physical_offset < GEOMETRY["commitlog_segment_size"]:
            results.append(store.put_message(Message(topic="T", body=b"x" * 1000, queue_id=0)))
            assert results[-1].ok
        assert store.max_phy_offset() == 0  # nothing committed: nothing readable
        assert store.wait_dispatched(5)
        assert store.max_offset_in_queue("T", 0) == 0
        assert store._committer is not None
        store._committer._thorough._interval_ms = 0  # the next round commits everything
        store._committer.run_once()
        assert store.max_phy_offset() == results[-1].physical_offset + results[-1].wrote_bytes
        assert store.wait_dispatched(5)
        seen = []
        while len(seen) < len(results):  # a get stops at the end of a consume-queue segment
            got = store.get_message("g", "T", 0, len(seen), max_msgs=len(results), transfer_limits=False)
            assert got.messages, got.status
            seen += [m.physical_offset for m in got.messages]
        assert seen == [r.physical_offset for r in results]
