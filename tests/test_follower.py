"""A read-only open follows a store that another process writes (follow.py)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocketstore import GetStatus, Message, MessageStore, StoreConfig, follow
from rocketstore.codec.dispatch_signal import decode_signal
from rocketstore.storage.file_watch import FileWatch
from tests.live_writer import LiveWriter

# small geometry: a few hundred messages roll commitlog segments, queue segments and index files
CFG = StoreConfig(
    commitlog_segment_size=65536, consume_queue_entries=40, index_hash_slots=64, index_max_entries=256
)


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[LiveWriter]:
    w = LiveWriter(tmp_path / "s", CFG)
    yield w
    if w.process.is_alive():
        w.kill()


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[str]:
    bodies: list[str] = []
    offset = 0
    while True:
        res = store.get_message("g", topic, queue_id, offset, 32)
        if not res.messages:
            return bodies
        bodies += [m.body.decode() for m in res.messages]
        offset = res.next_begin_offset


def test_follower_sees_new_segments_queue_growth_and_index_files(tmp_path: Path, writer: LiveWriter) -> None:
    root = tmp_path / "s"
    writer.put("A", 10)
    with MessageStore.open(root, CFG, readonly=True) as store:
        assert store.max_offset_in_queue("A", 0) == 3
        index_files = len(store.index_headers())
        end = writer.put("A", 1000)  # rolls commitlog and queue segments, fills index files
        writer.put("B", 8)  # a topic that did not exist when the follower opened
        assert end > 2 * CFG.commitlog_segment_size
        assert store.max_phy_offset() >= end
        assert [store.max_offset_in_queue("A", q) for q in range(4)] == [253, 253, 252, 252]
        assert read_queue(store, "A", 1) == [f"A-{i}" for i in range(1, 1010, 4)]
        assert store.topics()["B"] == [0, 1, 2, 3]
        assert read_queue(store, "B", 2) == ["B-2", "B-6"]
        assert len(store.index_headers()) > index_files
        for i in (0, 205, 1009):
            hits = store.query_message("A", f"k{i}")
            assert [m.body for m in hits] == [f"A-{i}".encode()]


def test_a_follower_keeps_its_queue_and_index_mappings_under_the_cap(
    tmp_path: Path, writer: LiveWriter
) -> None:
    root = tmp_path / "s"
    writer.put("A", 10)
    with MessageStore.open(root, dataclasses.replace(CFG, max_mapped_files=2), readonly=True) as store:
        writer.put("A", 1000)  # 7 queue segments per queue, several index files
        for q in range(4):
            assert read_queue(store, "A", q) == [f"A-{i}" for i in range(q, 1010, 4)]
        for i in (0, 205, 1009):
            assert [m.body for m in store.query_message("A", f"k{i}")] == [f"A-{i}".encode()]
        maps = Path("/proc/self/maps").read_text()
        mapped = {line.split()[-1] for line in maps.splitlines() if str(root.resolve()) in line}
        assert len({m for m in mapped if "/consumequeue/" in m or "/index/" in m}) <= 2


def test_wait_for_message_wakes_for_a_message_of_another_process(tmp_path: Path, writer: LiveWriter) -> None:
    root = tmp_path / "s"
    writer.put("A", 4)
    with MessageStore.open(root, CFG, readonly=True) as store:
        assert not store.wait_for_message("A", 0, 1, 0.05)
        woke: list[bool] = []
        waiter = threading.Thread(target=lambda: woke.append(store.wait_for_message("A", 0, 1, 30)))
        waiter.start()
        writer.put("A", 4)
        waiter.join(60)
        assert woke == [True]
        assert store.get_message("g", "A", 0, 1, 1).messages[0].body == b"A-4"


def test_a_follower_logs_that_it_follows_a_live_writer_not_that_it_cut_or_deleted(
    tmp_path: Path, writer: LiveWriter, caplog: pytest.LogCaptureFixture
) -> None:
    """Beside a live writer the abort file is the writer's, the pre-allocated next segment and the
    record being copied in are its work in progress, and a read-only open changes no file: the
    log says it follows the writer, never that the log was cut or segments deleted."""
    root = tmp_path / "s"
    writer.put("A", 300)  # the writer allocates its next segment ahead of need
    files = sorted(p.name for p in (root / "commitlog").iterdir())
    caplog.set_level(logging.INFO, logger="rocketstore")
    with MessageStore.open(root, CFG, readonly=True) as store:
        assert store.recovery is not None and store.recovery.stop == "writer_live"
        end = store.max_phy_offset()
    assert sorted(p.name for p in (root / "commitlog").iterdir()) == files
    lines = [r.getMessage() for r in caplog.records if r.name == "rocketstore.recovery"]
    assert len(lines) == 1, lines
    assert lines[0].startswith("read-only open beside a live writer: ")
    assert f"following it from offset {end} " in lines[0]
    assert not any(word in lines[0] for word in ("abnormal", "cut", "deleted"))


def test_a_readonly_open_of_a_crashed_store_logs_what_it_left_unread(
    tmp_path: Path, writer: LiveWriter, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "s"
    writer.put("A", 300)
    writer.kill()  # abort file left, the next segment pre-allocated: what a crash leaves
    caplog.set_level(logging.INFO, logger="rocketstore")
    with MessageStore.open(root, CFG, readonly=True) as store:
        assert store.recovery is not None and store.recovery.abnormal
        skipped = store.recovery.segments_deleted
    assert skipped >= 1
    assert all(p.exists() for p in (root / "commitlog").iterdir())
    (line,) = [r.getMessage() for r in caplog.records if r.name == "rocketstore.recovery"]
    assert line.startswith("read-only recovery (abnormal): ")
    assert f"{skipped} later segment(s) past it left unread (no file changed)" in line
    assert "deleted" not in line


def test_a_follower_drops_queue_segments_the_writer_reclaims_after_the_log_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer deletes consume-queue segments after the commitlog's, a pause apart, and may
    write nothing after: a follower that looked in between (it saw the log's min move then)
    drops the rest as they go, not when the log's min moves again."""
    monkeypatch.setattr(follow, "_RESCAN_S", 0.0)  # every call rescans: the test never waits
    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as writing:  # in this process, to interleave exactly
        cleaner = writing._cleaner
        assert cleaner is not None
        cleaner.stop()  # rounds run only when the test asks
        for first in range(0, 1000, 50):
            writing.put_messages(
                [Message("A", f"A-{i}".encode(), queue_id=i % 4) for i in range(first, first + 50)]
            )
        assert writing.wait_dispatched(10)
        with MessageStore.open(root, dataclasses.replace(CFG, max_mapped_files=2), readonly=True) as store:
            assert [read_queue(store, "A", q)[:1] for q in range(4)] == [["A-0"], ["A-1"], ["A-2"], ["A-3"]]
            seen: list[list[int]] = []

            def pause(ms: int) -> None:  # between two deletions of the round: the follower looks
                seen.append([store.min_offset_in_queue("A", q) for q in range(4)])

            monkeypatch.setattr(cleaner, "_pause", pause)
            old = time.time() - 80 * 3600  # past the 72 h file_reserved_time
            for path in (root / "commitlog").iterdir():
                os.utime(path, (old, old))
            report = writing.reclaim()
            assert report.commitlog_segments_deleted >= 2 and report.queue_segments_deleted >= 8
            assert len(seen) > 4 and seen[-1] != [0, 0, 0, 0]
            for q in range(4):
                low = writing.min_offset_in_queue("A", q)
                assert low > 0
                assert store.min_offset_in_queue("A", q) == low
                cq = store._queues.get("A", q)
                assert cq is not None and all(mf.path.exists() for mf in cq.files.files)
                assert store.get_message("g", "A", q, low - 1).status is GetStatus.OFFSET_TOO_SMALL
                got = store.get_message("g", "A", q, low, 32)
                assert got.messages[0].body == f"A-{q + 4 * low}".encode()


def inotify_fds() -> int:
    """How many inotify instances this process holds (0 where /proc is not Linux's)."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if _link(fd) == "anon_inode:inotify") if fds.exists() else 0


def _link(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:  # the descriptor of the listing itself, closed since
        return ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_a_file_watch_wakes_for_a_pwrite_and_consumes_it(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(64))
    watch = FileWatch.open(path)
    assert watch is not None
    try:
        assert not watch.wait(0)  # nothing written yet
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, b"x", 8)
            os.pwrite(fd, b"y", 9)
        finally:
            os.close(fd)
        assert watch.wait(30)
        assert not watch.wait(0)  # both writes' events consumed by the wake-up
    finally:
        watch.close()


def test_waiters_of_a_follower_share_one_watch_and_close_it(tmp_path: Path, writer: LiveWriter) -> None:
    """Threads waiting on one follower wake for the writer's publication; the follower opens one
    inotify instance for all of them (on Linux), and closing the store closes it."""
    root = tmp_path / "s"
    writer.put("A", 4)
    before = inotify_fds()
    with MessageStore.open(root, CFG, readonly=True) as store:
        woke: list[bool] = []
        threads = [
            threading.Thread(target=lambda q=q: woke.append(store.wait_for_message("A", q, 1, 30)))
            for q in range(4)
        ]
        for t in threads:
            t.start()
        writer.put("A", 4)
        for t in threads:
            t.join(60)
        assert woke == [True] * 4
        if sys.platform.startswith("linux"):
            assert inotify_fds() == before + 1
    assert inotify_fds() == before


def test_the_writer_publishes_its_dispatch_progress(tmp_path: Path, writer: LiveWriter) -> None:
    root = tmp_path / "s"
    end = writer.put("A", 50)
    signal = decode_signal((root / ".dispatch-seq").read_bytes())
    assert signal is not None and signal.dispatched_to == end


def test_a_writer_reopening_the_store_leaves_the_last_publication_until_its_first(
    tmp_path: Path, writer: LiveWriter
) -> None:
    """A writer opening the store (after a crash here) rewrites the signal file's header, and its
    recovery and catch-up may take a while before its first publication: meanwhile followers
    go on serving what the last writer published. A header that read as no progress made them
    cut their view of the log to nothing, and a queue whose view ended with an empty segment
    kept its entries: a consumer's read of them answered MESSAGE_WAS_REMOVING and stepped over
    them, losing them."""
    root = tmp_path / "s"
    end = writer.put("A", 160)  # 40 entries a queue: each queue's view ends at a segment's end
    with MessageStore.open(root, CFG, readonly=True) as store:
        assert store.get_message("g", "A", 0, 30, 32).status is GetStatus.FOUND
        writer.kill()
        before = decode_signal((root / ".dispatch-seq").read_bytes())
        assert before is not None and before.dispatched_to == end
        reopened = follow.SignalWriter(root / ".dispatch-seq", CFG, lambda: 0)
        try:
            assert decode_signal((root / ".dispatch-seq").read_bytes()) == before
            res = store.get_message("g", "A", 0, 30, 32)
            assert (res.status, [m.body for m in res.messages]) == (
                GetStatus.FOUND,
                [f"A-{i}".encode() for i in range(120, 160, 4)],
            )
            reopened.publish(end)
            after = decode_signal((root / ".dispatch-seq").read_bytes())
            assert after is not None and after.generation != before.generation
            assert (after.dispatched_to, after.queue_changes) == (end, 0)
            assert read_queue(store, "A", 0) == [f"A-{i}" for i in range(0, 160, 4)]
        finally:
            reopened.close()


def test_a_writer_reopening_a_crashed_store_publishes_only_once_caught_up(
    tmp_path: Path, writer: LiveWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery re-dispatches a crashed store from its checkpoint, over several segments here: a
    publication in between would tell followers that only the entries below it are valid, and
    their consumers would see every queue shrink to there and grow back (read again, out of order)."""
    root = tmp_path / "s"
    writer.put("A", 1500)  # several 64 KiB segments
    writer.kill()
    published: list[int] = []
    real_publish = follow.SignalWriter.publish

    def spy(self: follow.SignalWriter, dispatched_to: int) -> None:
        published.append(dispatched_to)
        real_publish(self, dispatched_to)

    monkeypatch.setattr(follow.SignalWriter, "publish", spy)
    with MessageStore.open(root, CFG) as store:
        assert store.recovery.abnormal and store.recovery.reput_from < store.max_phy_offset() - 65536
        end = store.max_phy_offset()
    assert published and min(published) == end, published


def test_a_follower_opens_files_read_only(
    tmp_path: Path, writer: LiveWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "s"
    writer.put("A", 20)
    flags_seen: list[tuple[str, int]] = []
    real_open = os.open

    def spy(path: str | os.PathLike[str], flags: int, *args: int, **kwargs: int) -> int:
        flags_seen.append((str(path), flags))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    with MessageStore.open(root, CFG, readonly=True) as store:
        writer.put("A", 400)
        assert len(read_queue(store, "A", 3)) == 105
        assert store.query_message("A", "k333")
    inside = [(p, f) for p, f in flags_seen if p.startswith(str(root))]
    assert inside
    assert all(f & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC) == 0 for _, f in inside), inside


@pytest.mark.slow
def test_follower_survives_a_writer_killed_mid_stream_and_goes_on_after_recovery(tmp_path: Path) -> None:
    root = tmp_path / "s"
    first = LiveWriter(root, CFG)
    first.put("A", 40)
    seen: dict[int, list[str]] = {q: [] for q in range(4)}
    positions = dict.fromkeys(range(4), 0)

    def drain(store: MessageStore) -> None:
        for q in range(4):
            while True:
                res = store.get_message("g", "A", q, positions[q], 32)
                if not res.messages:
                    break
                seen[q] += [m.body.decode() for m in res.messages]
                positions[q] = res.next_begin_offset

    with MessageStore.open(root, CFG, readonly=True) as store:
        first.stream("A", 3000, batch=4)
        while sum(map(len, seen.values())) < 400:
            store.wait_for_message("A", 0, positions[0], 5)
            drain(store)
        first.kill()
        drain(store)
        before = sum(map(len, seen.values()))
        second = LiveWriter(root, CFG)  # recovers the crashed store
        try:
            second.put("A", 200)
            drain(store)
        finally:
            second.close()
    assert sum(map(len, seen.values())) > before
    with MessageStore.open(root, CFG, readonly=True) as fresh:
        # what the follower saw is exactly what is stored: every message, once, in queue order
        for q in range(4):
            assert seen[q] == read_queue(fresh, "A", q)


@pytest.mark.slow
def test_read_commands_beside_a_live_writer_never_fail_nor_call_its_tail_damage(
    tmp_path: Path, writer: LiveWriter, capsys: pytest.CaptureFixture[str]
) -> None:
    from rocketstore.cli import main

    root = str(tmp_path / "s")
    writer.put("A", 100)
    writer.stream("A", 100_000, batch=8)
    commands = [
        ["status", root],
        ["verify", root, "--no-crc"],
        ["print", root, "-t", "A", "-q", "1", "--no-body"],
        ["query-key", root, "-t", "A", "-k", "k5"],
        ["recover", root, "--dry-run"],
    ]
    for _ in range(5):
        for args in commands:
            code = main([*args, "--json"])
            out, err = capsys.readouterr()
            assert code == 0, (args, err)
            assert "Traceback" not in err, (args, err)
            if args[0] in ("status", "recover"):
                row = json.loads(out.splitlines()[-1])
                assert row["damage"] is None, (args, row)


@pytest.mark.slow
def test_threads_reading_one_follower_while_the_writer_writes(tmp_path: Path, writer: LiveWriter) -> None:
    root = tmp_path / "s"
    writer.put("A", 4)
    got: dict[int, list[str]] = {q: [] for q in range(4)}
    errors: list[BaseException] = []

    with MessageStore.open(root, CFG, readonly=True) as store:

        def reader(q: int) -> None:
            try:
                offset = 0
                while offset < 201 and store.wait_for_message("A", q, offset, 30):
                    res = store.get_message("g", "A", q, offset, 32)
                    got[q] += [m.body.decode() for m in res.messages]
                    offset = res.next_begin_offset
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(q,)) for q in range(4)]
        for t in threads:
            t.start()
        writer.stream("A", 800, batch=8)
        for t in threads:
            t.join(60)
    assert errors == []
    assert got == {q: [f"A-{i}" for i in range(q, 804, 4)] for q in range(4)}


@pytest.mark.parametrize("made_with", [CFG, StoreConfig()], ids=["made-small", "made-default"])
def test_a_follower_opened_before_the_first_message_maps_the_writers_files_at_their_size(
    tmp_path: Path, made_with: StoreConfig
) -> None:
    """A store with no segment yet: the follower cannot measure the files. Made small, it takes
    the geometry recorded when the store was made; made with the defaults and then written small
    (a writer given a config), it takes the writer's when that one publishes it."""
    root = tmp_path / "s"
    MessageStore.open(root, made_with).close()
    with MessageStore.open(root, readonly=True) as store:
        writer = LiveWriter(root, CFG)
        try:
            assert store.wait_for_message("A", 3, 0, 0.0) is False
            end = writer.put("A", 1000)  # rolls commitlog and queue segments, fills index files
            assert end > 2 * CFG.commitlog_segment_size
            assert store.wait_for_message("A", 3, 249, 60)
            for q in range(4):
                assert read_queue(store, "A", q) == [f"A-{i}" for i in range(q, 1000, 4)]
            for i in (0, 205, 999):
                assert [m.body for m in store.query_message("A", f"k{i}")] == [f"A-{i}".encode()]
        finally:
            writer.close()
