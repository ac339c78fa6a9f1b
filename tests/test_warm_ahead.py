"""Pages faulted in ahead of the commitlog's writer (``MappedFile.populate``, ``WarmAheadService``):
nothing in the file changes, a write there is a copy into memory rather than a pwrite, the
service keeps ahead of an ASYNC_FLUSH store's puts, and where the OS cannot, puts write as ever."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from rocketstore import MessageStore, StoreConfig
from rocketstore.storage import mapped_file
from rocketstore.storage.mapped_file import OS_PAGE_SIZE, MappedFile
from rocketstore.storage.warm_ahead import AHEAD

SIZE = 1 << 20


def _segment(tmp_path: Path) -> MappedFile:
    mf = MappedFile(tmp_path / "00000000000000000000", SIZE, create=True)
    mf.keep_fd = True  # as the commitlog's segments: a write of a page or more may be a pwrite
    return mf


def _populated(mf: MappedFile, start: int, end: int) -> None:
    failed = mf.populate(start, end)
    if failed == errno.EINVAL:
        pytest.skip("this OS cannot fault pages in ahead (MADV_POPULATE_WRITE: Linux 5.14+)")
    assert failed == 0


def test_populating_changes_no_byte_and_covers_whole_pages(tmp_path: Path) -> None:
    mf = _segment(tmp_path)
    data = os.urandom(10_000)
    mf.write_at(0, data)
    mf.wrote_position = len(data)
    _populated(mf, len(data), 3 * OS_PAGE_SIZE + 1)
    assert mf.populated_end == 4 * OS_PAGE_SIZE  # rounded up to the page
    assert mf.path.read_bytes() == data + bytes(SIZE - len(data))
    # a range that starts past both the populated pages and the write position leaves the mark
    _populated(mf, 64 * OS_PAGE_SIZE, 65 * OS_PAGE_SIZE)
    assert mf.populated_end == 4 * OS_PAGE_SIZE
    _populated(mf, 0, 2 * SIZE)  # never past the file
    assert mf.populated_end == SIZE
    mf.close()


def test_a_write_below_the_populated_end_is_a_copy_not_a_pwrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mf = _segment(tmp_path)
    pwrites: list[int] = []
    real = os.pwrite

    def pwrite(fd: int, data: bytes, pos: int) -> int:
        pwrites.append(pos)
        return real(fd, data, pos)

    monkeypatch.setattr(os, "pwrite", pwrite)
    first, second = os.urandom(64 << 10), os.urandom(64 << 10)
    mf.write_at(0, first)  # not populated: a pwrite, as ever
    mf.wrote_position = len(first)
    assert pwrites == [0]
    _populated(mf, len(first), len(first) + len(second))
    mf.write_at(len(first), second)
    mf.wrote_position += len(second)
    assert pwrites == [0]
    assert mf.path.read_bytes()[: 2 * len(first)] == first + second
    mf.close()


def test_a_parked_file_is_not_populated_and_forgets_its_pages(tmp_path: Path) -> None:
    mf = _segment(tmp_path)
    _populated(mf, 0, 8 * OS_PAGE_SIZE)
    assert mf.park()
    assert mf.populated_end == 0
    assert mf.populate(0, OS_PAGE_SIZE) == errno.ENOMEM
    mf.close()


def _put_kib_batches(store: MessageStore, count: int) -> list[bytes]:
    bodies = [os.urandom(1024) for _ in range(count)]
    for start in range(0, count, 32):
        result = store.put_batch("WarmTopic", bodies[start : start + 32], queue_ids=start // 32 % 4)
        assert result.status.name == "PUT_OK"
    return bodies


def _read_back(store: MessageStore, count: int) -> list[bytes]:
    found: list[bytes] = []
    for queue in range(4):
        offset = 0
        while True:
            got = store.get_message("group", "WarmTopic", queue, offset, 64)
            if not got.messages:
                break
            found += [m.body for m in got.messages]
            offset = got.next_begin_offset
    assert len(found) == count
    return found


def _warm_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "rocketstore-warm-ahead"]


def test_an_async_flush_store_keeps_pages_warm_ahead_of_its_puts(tmp_path: Path) -> None:
    config = StoreConfig(commitlog_segment_size=64 << 20)
    with MessageStore.open(tmp_path / "store", config) as store:
        assert _warm_threads() == ["rocketstore-warm-ahead"]
        bodies = _put_kib_batches(store, 4096)  # 4 MiB and more: past what was warmed at first
        segment = store._commitlog.files.last
        assert segment is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            populated, wrote = segment.populated_end, segment.wrote_position
            if populated >= wrote + AHEAD // 2:
                break
            time.sleep(0.01)
        if populated == 0:
            pytest.skip("this OS cannot fault pages in ahead (MADV_POPULATE_WRITE: Linux 5.14+)")
        assert wrote + AHEAD // 2 <= populated <= wrote + AHEAD + OS_PAGE_SIZE
        assert sorted(_read_back(store, len(bodies))) == sorted(bodies)
    with MessageStore.open(tmp_path / "store", config) as store:  # and after a restart
        assert sorted(_read_back(store, len(bodies))) == sorted(bodies)


@pytest.mark.parametrize(
    "settings",
    [
        {"flush_disk_type": "SYNC_FLUSH"},
        {"flush_commit_log_timed": False},
        {"transient_store_pool_enable": True},
    ],
    ids=["sync-flush", "flusher-woken-by-puts", "transient-pool"],
)
def test_a_store_that_flushes_as_puts_come_or_writes_to_a_pool_warms_nothing_ahead(
    tmp_path: Path, settings: dict[str, object]
) -> None:
    config = StoreConfig(commitlog_segment_size=64 << 20, **settings)  # type: ignore[arg-type]
    with MessageStore.open(tmp_path / "store", config) as store:
        assert _warm_threads() == []
        _put_kib_batches(store, 256)
        segment = store._commitlog.files.last
        assert segment is not None and segment.populated_end == 0


def test_where_the_os_cannot_warm_ahead_puts_write_as_ever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(mapped_file, "_MADV_POPULATE_WRITE", 0x7FFF)  # no such advice: EINVAL
    caplog.set_level(logging.INFO, logger="rocketstore.storage.warm_ahead")
    with MessageStore.open(tmp_path / "store", StoreConfig(commitlog_segment_size=64 << 20)) as store:
        bodies = _put_kib_batches(store, 512)
        deadline = time.monotonic() + 10
        while "cannot fault pages in ahead" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "cannot fault pages in ahead" in caplog.text
        segment = store._commitlog.files.last
        assert segment is not None and segment.populated_end == 0
        more = _put_kib_batches(store, 512)
        assert sorted(_read_back(store, 1024)) == sorted(bodies + more)
