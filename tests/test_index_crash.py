"""The index after a crash inside an index write: no surviving record loses a key."""

from __future__ import annotations

from pathlib import Path

from rocketstore import Message, MessageStore, StoreConfig

CFG = StoreConfig(
    commitlog_segment_size=65536,
    consume_queue_entries=40,
    index_hash_slots=4,
    index_max_entries=8,
    generate_uniq_key=False,
)


def test_a_record_whose_keys_span_two_index_files_is_indexed_whole_after_a_crash(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as store:
        for i in range(4):  # 7 entries per file: the 4th message's keys are split 1 + 1
            store.put_message(Message(topic="T", body=b"m", keys=[f"a{i}", f"b{i}"]))
        store.wait_dispatched()
        files = [f.path for f in store._index.files]  # type: ignore[union-attr]
    assert len(files) == 2
    files[-1].unlink()  # killed before the second file reached the disk
    (root / "abort").touch()
    with MessageStore.open(root, CFG) as store:
        store.wait_dispatched()
        for i in range(4):
            assert len(store.query_message("T", f"a{i}")) == 1, f"a{i}"
            assert len(store.query_message("T", f"b{i}")) == 1, f"b{i}"


def test_slots_written_past_a_stale_header_are_restored(tmp_path: Path) -> None:
    cfg = CFG.replace(index_max_entries=64)
    root = tmp_path / "s"
    with MessageStore.open(root, cfg) as store:
        for i in range(10):
            store.put_message(Message(topic="T", body=b"m", keys=[f"old{i}"]))
        store.wait_dispatched()
        index_file = store._index.files[-1].path  # type: ignore[union-attr]
    header = index_file.read_bytes()[:40]  # indexCount covers old0..old9
    checkpoint = (root / "checkpoint").read_bytes()  # and so does the checkpoint's index time
    with MessageStore.open(root, cfg) as store:
        store.put_messages([Message(topic="T", body=b"n", keys=[f"new{i}"]) for i in range(20)])
        store.wait_dispatched()
    data = bytearray(index_file.read_bytes())
    data[:40] = header  # killed after entries and slots were written, before the header
    index_file.write_bytes(data)
    (root / "checkpoint").write_bytes(checkpoint)  # ... and so before any later index flush
    (root / "abort").touch()
    with MessageStore.open(root, cfg) as store:
        store.wait_dispatched()
        for i in range(10):
            assert len(store.query_message("T", f"old{i}")) == 1, f"old{i}"
        for i in range(20):
            assert len(store.query_message("T", f"new{i}")) == 1, f"new{i}"


def test_index_pages_lost_in_a_power_loss_are_rebuilt(tmp_path: Path) -> None:
    cfg = CFG.replace(index_hash_slots=64, index_max_entries=1024)
    root = tmp_path / "s"
    with MessageStore.open(root, cfg) as store:
        store.put_message(Message(topic="T", body=b"first", keys=["k-first"]))
    checkpoint = (root / "checkpoint").read_bytes()  # the last checkpoint that reached the disk
    with MessageStore.open(root, cfg) as store:
        store.put_messages([Message(topic="T", body=b"m", keys=[f"k{i}"]) for i in range(300)])
        store.wait_dispatched()
        index_file = store._index.files[-1].path  # type: ignore[union-attr]
    data = bytearray(index_file.read_bytes())
    data[4096:] = bytes(len(data) - 4096)  # only the first page (header, slots, first entries) survived
    index_file.write_bytes(data)
    (root / "checkpoint").write_bytes(checkpoint)
    (root / "abort").touch()
    with MessageStore.open(root, cfg) as store:
        store.wait_dispatched()
        assert len(store.query_message("T", "k-first")) == 1
        missing = [i for i in range(300) if len(store.query_message("T", f"k{i}")) != 1]
        assert missing == []
