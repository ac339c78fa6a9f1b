"""verify_store: clean stores verify clean without a byte changing; each planted fault is found where it is.

The stores are written by rocketstore itself (small geometry: several segments, queue files and index
files) or are the RocketMQ fixtures, verified in place in their read-only directory. Faults are planted
with plain file writes at positions computed from the put results and the formats' layouts.
"""

from __future__ import annotations

import faulthandler
import hashlib
import itertools
import json
import os
import random
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketstore import Message, MessageStore, PutMessageResult, StoreConfig
from rocketstore.codec import index_layout
from rocketstore.codec.commitlog_record import decode_record
from rocketstore.codec.java_hash import tags_code
from rocketstore.verify import DAMAGE_KINDS, MAX_DAMAGE_PER_FILE, Damage, VerifyReport, verify_store
from tests.conftest import FIXTURE_CONFIG, FIXTURES, copy_fixture

SEG = 65536
CQ_ENTRIES = 40
SLOTS = 64
INDEX_ENTRIES = 256
CFG = StoreConfig(
    commitlog_segment_size=SEG,
    consume_queue_entries=CQ_ENTRIES,
    index_hash_slots=SLOTS,
    index_max_entries=INDEX_ENTRIES,
)
N = 400
TOPICS = ("TopicA", "TopicB", "TopicC")


def messages(n: int = N) -> list[Message]:
    return [
        Message(
            topic=TOPICS[i % 3],
            body=bytes([i % 251]) * (100 + i % 200),
            tags=f"tag{i % 5}",
            keys=[f"k{i}", f"order{i % 7}"],
            queue_id=i % 4,
        )
        for i in range(n)
    ]


def put_all(store: MessageStore, msgs: list[Message]) -> list[PutMessageResult]:
    results: list[PutMessageResult] = []
    for i in range(0, len(msgs), 50):
        results += store.put_messages(msgs[i : i + 50])
    assert all(r.ok for r in results)
    assert store.wait_dispatched(10)
    return results


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[PutMessageResult]]:
    root = tmp_path_factory.mktemp("pristine") / "s"
    with MessageStore.open(root, CFG) as store:
        results = put_all(store, messages())
    return root, results


@pytest.fixture
def store(
    tmp_path: Path, pristine: tuple[Path, list[PutMessageResult]]
) -> tuple[Path, list[PutMessageResult]]:
    """A fresh copy of a clean store of N messages (3 keys each: UNIQ_KEY and two KEYS)."""
    root = tmp_path / "s"
    shutil.copytree(pristine[0], root)
    return root, pristine[1]


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
    return out


def patch(path: Path, pos: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(pos)
        f.write(data)


def segment_of(root: Path, phy: int) -> tuple[Path, int]:
    start = phy - phy % SEG
    return root / "commitlog" / f"{start:020d}", phy - start


def queue_file(root: Path, r: PutMessageResult) -> tuple[Path, int]:
    logic = r.queue_offset * 20
    start = logic - logic % (CQ_ENTRIES * 20)
    return root / "consumequeue" / r.topic / str(r.queue_id) / f"{start:020d}", logic - start


def rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def index_files(root: Path) -> list[Path]:
    return sorted((root / "index").iterdir())


def only(report: VerifyReport) -> Damage:
    assert len(report.damage) == 1, report.damage
    return report.damage[0]


# --- clean stores ---------------------------------------------------------------------------
def test_a_store_written_by_rocketstore_verifies_clean_with_every_count(
    store: tuple[Path, list[PutMessageResult]],
) -> None:
    root, results = store
    before = snapshot(root)
    report = verify_store(root, CFG)
    assert report.clean and report.damage == []
    assert report.records == N
    assert report.queue_entries == N
    assert report.index_entries == 3 * N
    last = results[-1]
    assert report.commitlog_range == (0, last.physical_offset + last.wrote_bytes)
    assert len(list((root / "commitlog").iterdir())) >= 3 and len(index_files(root)) >= 4
    assert verify_store(root) == report  # geometry read from the files
    assert snapshot(root) == before


@pytest.mark.parametrize("name", ["store-sample", "store-sample-crash"])
def test_rocketmq_fixtures_verify_clean_in_their_read_only_directory(name: str) -> None:
    root = FIXTURES / name
    rows = [
        json.loads(line) for line in (FIXTURES / f"{name}.expected.jsonl").read_text("utf-8").splitlines()
    ]
    before = snapshot(root)
    for config in (FIXTURE_CONFIG, None):
        report = verify_store(root, config)
        assert report.damage == []
        assert report.records == sum(1 for r in rows if r["kind"] == "clrec")
        assert report.queue_entries == sum(1 for r in rows if r["kind"] == "msg")
        assert report.index_entries == sum(r["indexCount"] - 1 for r in rows if r["kind"] == "index_file")
        info = next(r for r in rows if r["kind"] == "info" and "maxPhyOffset" in r)
        assert report.commitlog_range == (info["minPhyOffset"], info["maxPhyOffset"])
    # the crash sample keeps its abort file and its all-zero newest segment: nothing was recovered
    assert snapshot(root) == before


def test_a_store_held_open_by_a_writer_verifies_clean_and_stays_open(tmp_path: Path) -> None:
    root = tmp_path / "s"
    store = MessageStore.open(root, CFG)
    try:
        put_all(store, messages(150))
        report = verify_store(root)
        assert report.clean, report.damage
        assert (report.records, report.queue_entries, report.index_entries) == (150, 150, 450)
        assert (root / "abort").exists()
        more = put_all(store, messages(20))  # the writer is undisturbed
        assert more[-1].queue_offset > 0
    finally:
        store.close()
    assert verify_store(root, CFG).records == 170


def test_verifying_while_a_writer_appends_finds_nothing(tmp_path: Path) -> None:
    """Where a writer works (the tails of the newest queue files and segments, index headers),
    what looks half written is read again, not reported."""
    root = tmp_path / "s"
    store = MessageStore.open(root, CFG)
    started, done = threading.Event(), threading.Event()

    def write() -> None:
        rng = random.Random(7)
        try:
            for _ in range(300):
                store.put_messages(messages(rng.randint(1, 40)))
                started.set()
                time.sleep(0.0005)
        finally:
            done.set()

    writer = threading.Thread(target=write)
    writer.start()
    reports: list[VerifyReport] = []
    try:
        started.wait(10)
        while not done.is_set() or len(reports) < 3:
            reports.append(verify_store(root, CFG))
    finally:
        writer.join()
        store.close()
    assert [r.damage for r in reports if r.damage] == []
    assert reports[0].records <= reports[-1].records <= verify_store(root, CFG).records


@pytest.mark.parametrize("completes", [True, False])
def test_a_record_copied_in_after_the_one_behind_it_is_looked_at_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, completes: bool
) -> None:
    """A writer's copy of several records can land a later record before an earlier one: the
    newest segment holds a half-copied record with a whole one after it. Looked at again a
    moment later, the copy is done and nothing is reported; a record that stays half is."""
    import rocketstore.verify.segments as segments

    root = tmp_path / "s"
    with MessageStore.open(root, CFG) as store:
        results = store.put_messages(messages(40))
        store.wait_dispatched()
    torn = results[20]
    (segment,) = sorted((root / "commitlog").iterdir())
    whole = segment.read_bytes()
    half = torn.physical_offset + torn.wrote_bytes // 2
    with open(segment, "r+b") as f:
        f.seek(half)
        f.write(bytes(torn.wrote_bytes - torn.wrote_bytes // 2))
    looks: list[float] = []

    def pause(seconds: float) -> None:  # the writer's copy finishes while verify waits
        looks.append(seconds)
        if completes:
            segment.write_bytes(whole)

    monkeypatch.setattr(segments.time, "sleep", pause)
    report = verify_store(root, CFG)
    assert looks, "the half-copied record was reported without a second look"
    if completes:
        assert report.damage == []
    else:
        assert [d.offset for d in report.damage if d.kind == "commitlog_record"] == [torn.physical_offset]


def test_progress_reports_every_stage_up_to_its_total(store: tuple[Path, list[PutMessageResult]]) -> None:
    calls: list[tuple[str, int, int]] = []
    verify_store(store[0], CFG, progress=lambda stage, done, total: calls.append((stage, done, total)))
    stages = [c[0] for c in calls]
    assert stages.index("consumequeue") < stages.index("index") < stages.index("commitlog")
    for stage in ("consumequeue", "index", "commitlog"):
        mine = [c for c in calls if c[0] == stage]
        assert mine[0][1] == 0 and mine[-1][1] == mine[-1][2] > 0
        assert all(a[1] <= b[1] for a, b in itertools.pairwise(mine))


def test_reports_serialise_to_json(store: tuple[Path, list[PutMessageResult]]) -> None:
    root, results = store
    path, pos = queue_file(root, results[7])
    patch(path, pos + 8, struct.pack(">i", 3))
    data = json.loads(json.dumps(verify_store(root, CFG).to_dict()))
    assert data["clean"] is False and data["records"] == N
    assert data["damage"] == [
        {
            "kind": "consume_queue_entry",
            "file": rel(root, path),
            "offset": pos,
            "detail": data["damage"][0]["detail"],
        }
    ]


# --- commitlog ------------------------------------------------------------------------------
def test_a_flipped_body_byte_is_a_crc_error_at_its_record(store: tuple[Path, list[PutMessageResult]]) -> None:
    root, results = store
    victim = results[200]
    path, pos = segment_of(root, victim.physical_offset)
    data = path.read_bytes()
    body = decode_record(data, pos).body_start
    patch(path, body + 3, bytes([data[body + 3] ^ 0x5A]))
    d = only(verify_store(root, CFG))
    assert (d.kind, d.file, d.offset) == ("commitlog_record", rel(root, path), victim.physical_offset)
    assert "CRC" in d.detail
    report = verify_store(root, CFG, check_crc=False)
    assert report.clean and report.records == N


def test_a_wrong_totalsize_is_found_and_the_records_after_it_still_count(
    store: tuple[Path, list[PutMessageResult]],
) -> None:
    root, results = store
    victim = results[150]
    path, pos = segment_of(root, victim.physical_offset)
    patch(path, pos, struct.pack(">i", victim.wrote_bytes + 4))
    report = verify_store(root, CFG)
    d = only(report)  # queue and index entries of the unreadable record are covered by this one
    assert (d.kind, d.file, d.offset) == ("commitlog_record", rel(root, path), victim.physical_offset)
    assert "TOTALSIZE" in d.detail
    assert report.records == N - 1  # the scan resumed at the next record


def test_zero_fill_followed_by_data_is_a_gap(store: tuple[Path, list[PutMessageResult]]) -> None:
    root, results = store
    victim = results[-10]
    path, pos = segment_of(root, victim.physical_offset)
    patch(path, pos, bytes(victim.wrote_bytes))
    report = verify_store(root, CFG)
    d = only(report)
    assert (d.kind, d.file, d.offset) == ("commitlog_gap", rel(root, path), victim.physical_offset)
    assert report.records == N - 1


def test_a_segment_ending_in_zeros_before_later_data_is_a_gap(
    store: tuple[Path, list[PutMessageResult]],
) -> None:
    root, results = store
    first = root / "commitlog" / f"{0:020d}"
    in_first = [r for r in results if r.physical_offset < SEG]
    blank_at = in_first[-1].physical_offset + in_first[-1].wrote_bytes
    patch(first, blank_at, bytes(8))  # the BLANK record that closes the segment
    d = only(verify_store(root, CFG))
    assert (d.kind, d.file, d.offset) == ("commitlog_gap", rel(root, first), blank_at)


@pytest.mark.parametrize("extra", [100, -1000])
def test_a_segment_of_the_wrong_size_is_reported(
    store: tuple[Path, list[PutMessageResult]], extra: int
) -> None:
    root, _ = store
    path = root / "commitlog" / f"{SEG:020d}"
    os.truncate(path, SEG + extra)
    for config in (CFG, None):
        report = verify_store(root, config)
        sizes = [d for d in report.damage if d.kind == "file_size"]
        assert [(d.file, d.offset) for d in sizes] == [(rel(root, path), SEG + min(SEG, SEG + extra))]
        if extra > 0:
            assert report.damage == sizes  # the segment's own bytes are all there


def test_a_missing_segment_is_reported_and_pointers_into_it_too(
    store: tuple[Path, list[PutMessageResult]],
) -> None:
    root, _ = store
    (root / "commitlog" / f"{SEG:020d}").unlink()
    report = verify_store(root, CFG)
    kinds = {d.kind for d in report.damage}
    assert ("missing_file", f"commitlog/{SEG:020d}", SEG) in {
        (d.kind, d.file, d.offset) for d in report.damage
    }
    assert kinds == {"missing_file", "consume_queue_entry", "index_entry"}


# --- consume queues -------------------------------------------------------------------------
def test_a_queue_entry_into_the_middle_of_a_record(store: tuple[Path, list[PutMessageResult]]) -> None:
    root, results = store
    victim = results[123]
    path, pos = queue_file(root, victim)
    patch(path, pos, struct.pack(">q", victim.physical_offset + 10))
    d = only(verify_store(root, CFG))
    assert (d.kind, d.file, d.offset) == ("consume_queue_entry", rel(root, path), pos)
    assert f"inside the record at {victim.physical_offset}" in d.detail


def test_a_queue_entry_whose_size_disagrees(store: tuple[Path, list[PutMessageResult]]) -> None:
    root, results = store
    victim = results[321]
    path, pos = queue_file(root, victim)
    patch(path, pos + 8, struct.pack(">i", victim.wrote_bytes - 1))
    d = only(verify_store(root, CFG))
    assert (d.kind, d.file, d.offset) == ("consume_queue_entry", rel(root, path), pos)
    assert f"is {victim.wrote_bytes} bytes" in d.detail


def test_a_queue_entry_of_another_queue_or_position_or_tags(
    store: tuple[Path, list[PutMessageResult]],
) -> None:
    root, results = store
    a, b = results[10], results[11]  # neighbours: another queue, another topic
    path_a, pos_a = queue_file(root, a)
    patch(path_a, pos_a, struct.pack(">qi", b.physical_offset, b.wrote_bytes))
    same_queue = [r for r in results if (r.topic, r.queue_id) == (a.topic, a.queue_id)]
    c, d = same_queue[20], same_queue[21]
    path_c, pos_c = queue_file(root, c)
    patch(path_c, pos_c, struct.pack(">qi", d.physical_offset, d.wrote_bytes))
    e = same_queue[30]
    path_e, pos_e = queue_file(root, e)
    patch(path_e, pos_e + 12, struct.pack(">q", tags_code("nope")))
    found = {(x.file, x.offset): x.detail for x in verify_store(root, CFG).damage}
    assert set(found) == {(rel(root, path_a), pos_a), (rel(root, path_c), pos_c), (rel(root, path_e), pos_e)}
    assert f"topic {b.topic!r}" in found[(rel(root, path_a), pos_a)]
    assert f"queue offset {d.queue_offset}" in found[(rel(root, path_c), pos_c)]
    assert "tagsCode" in found[(rel(root, path_e), pos_e)]


def test_an_entry_after_unwritten_entries_is_a_hole(store: tuple[Path, list[PutMessageResult]]) -> None:
    root, results = store
    path, pos = queue_file(root, results[40])
    patch(path, pos, bytes(20))
    d = only(verify_store(root, CFG))
    assert (d.kind, d.file, d.offset) == ("consume_queue_entry", rel(root, path), pos + 20)


def test_tags_that_are_not_utf8_are_hashed_as_the_store_decodes_them(
    store: tuple[Path, list[PutMessageResult]],
) -> None:
    root, results = store
    victim = results[42]  # tags "tag2"
    path, pos = segment_of(root, victim.physical_offset)
    record = path.read_bytes()[pos : pos + victim.wrote_bytes]
    at = record.index(b"TAGS\x01tag2") + 5
    patch(path, pos + at, b"\xff")  # properties are not under the CRC
    cq, cq_pos = queue_file(root, victim)
    d = only(verify_store(root, CFG))
    assert (d.kind, d.file, d.offset) == ("consume_queue_entry", rel(root, cq), cq_pos)
    patch(cq, cq_pos + 12, struct.pack(">q", tags_code("\ufffdag2")))
    assert verify_store(root, CFG).clean


# --- index ----------------------------------------------------------------------------------
@pytest.mark.parametrize("beyond", [False, True])
def test_a_broken_index_chain_is_found_at_its_entry(
    store: tuple[Path, list[PutMessageResult]], beyond: bool
) -> None:
    root, _ = store
    path = index_files(root)[1]
    number = 100
    header = index_layout.decode_header(path.read_bytes())
    prev = header.index_count + 5 if beyond else number
    at = index_layout.entry_position(SLOTS, number)
    patch(path, at + 16, struct.pack(">i", prev))
    d = only(verify_store(root, CFG))
    assert (d.kind, d.file, d.offset) == ("index_chain", rel(root, path), at)
    assert f"prevIndex {prev}" in d.detail


def test_an_index_entry_that_no_key_of_its_record_hashes_to(
    store: tuple[Path, list[PutMessageResult]],
) -> None:
    root, results = store
    path = index_files(root)[0]
    at = index_layout.entry_position(SLOTS, 7)
    patch(path, at + 4, struct.pack(">q", results[0].physical_offset + results[0].wrote_bytes))
    damage = verify_store(root, CFG).damage
    assert sorted(d.kind for d in damage) == ["index_entry", "index_missing"]
    d = next(d for d in damage if d.kind == "index_entry")
    assert (d.kind, d.file, d.offset) == ("index_entry", rel(root, path), at)
    assert "matches no key" in d.detail
    # and the record the entry was for has lost that key's entry
    missing = next(d for d in damage if d.kind == "index_missing")
    assert missing.file == rel(root, path) and "no index entry for key" in missing.detail


def test_a_key_that_is_not_utf8_still_gets_its_entry_checked(
    store: tuple[Path, list[PutMessageResult]],
) -> None:
    root, results = store
    victim = results[5]  # keys k5 order5
    path, pos = segment_of(root, victim.physical_offset)
    record = path.read_bytes()[pos : pos + victim.wrote_bytes]
    patch(path, pos + record.index(b"order5"), b"\xfe")
    damage = verify_store(root, CFG).damage
    assert sorted(d.kind for d in damage) == ["index_entry", "index_missing"]
    d = next(d for d in damage if d.kind == "index_entry")  # the entries of UNIQ_KEY and k5 still match
    assert "matches no key" in d.detail and "\ufffdrder5" in d.detail
    # and the record's changed key has no entry: a query by it misses the record
    missing = next(d for d in damage if d.kind == "index_missing")
    assert f"commitlog offset {victim.physical_offset}" in missing.detail and "\ufffdrder5" in missing.detail


def test_an_unreachable_index_entry(store: tuple[Path, list[PutMessageResult]]) -> None:
    root, _ = store
    path = index_files(root)[0]
    data = path.read_bytes()
    heads = set(struct.unpack_from(f">{SLOTS}i", data, index_layout.HEADER_SIZE))
    number = next(n for n in range(50, INDEX_ENTRIES) if n not in heads)  # a newer entry links to it
    key_hash = struct.unpack_from(">i", data, index_layout.entry_position(SLOTS, number))[0]
    # unlink it: the entry in front of it in its chain now skips it
    newer = struct.unpack_from(">i", data, index_layout.slot_position(key_hash % SLOTS))[0]
    while True:
        prev = struct.unpack_from(">i", data, index_layout.entry_position(SLOTS, newer) + 16)[0]
        if prev == number:
            break
        newer = prev
    skip = struct.unpack_from(">i", data, index_layout.entry_position(SLOTS, number) + 16)[0]
    patch(path, index_layout.entry_position(SLOTS, newer) + 16, struct.pack(">i", skip))
    d = only(verify_store(root, CFG))
    assert (d.kind, d.file, d.offset) == (
        "index_chain",
        rel(root, path),
        index_layout.entry_position(SLOTS, number),
    )
    assert "not reachable" in d.detail


@pytest.mark.parametrize("which", [0, -1])
def test_a_truncated_index_file(store: tuple[Path, list[PutMessageResult]], which: int) -> None:
    root, _ = store
    path = index_files(root)[which]
    size = index_layout.file_size(SLOTS, INDEX_ENTRIES)
    os.truncate(path, size - 20)
    for config in (CFG, None):  # the oldest, then the newest: geometry follows the other files
        d = only(verify_store(root, config))
        assert (d.kind, d.file, d.offset) == ("file_size", rel(root, path), size - 20)


def test_a_bad_index_header(store: tuple[Path, list[PutMessageResult]]) -> None:
    root, _ = store
    path = index_files(root)[0]
    patch(path, 36, struct.pack(">i", INDEX_ENTRIES + 1))
    d = only(verify_store(root, CFG))
    assert (d.kind, d.file, d.offset) == ("index_header", rel(root, path), 36)


def test_a_checkpoint_of_the_wrong_size(store: tuple[Path, list[PutMessageResult]]) -> None:
    root, _ = store
    os.truncate(root / "checkpoint", 100)
    d = only(verify_store(root, CFG))
    assert (d.kind, d.file, d.offset) == ("file_size", "checkpoint", 100)


def test_stray_files_and_a_missing_directory(
    tmp_path: Path, store: tuple[Path, list[PutMessageResult]]
) -> None:
    root, _ = store
    (root / "commitlog" / "notes.txt").write_text("hi")
    (root / "consumequeue" / "TopicA" / "x").mkdir()
    d = {(x.kind, x.file) for x in verify_store(root, CFG).damage}
    assert d == {("file_name", "commitlog/notes.txt"), ("file_name", "consumequeue/TopicA/x")}
    with pytest.raises(FileNotFoundError):
        verify_store(tmp_path / "nothing")


def test_damage_is_listed_up_to_a_cap_per_file(store: tuple[Path, list[PutMessageResult]]) -> None:
    root, _ = store
    path = index_files(root)[0]
    for number in range(1, INDEX_ENTRIES):
        patch(path, index_layout.entry_position(SLOTS, number) + 12, struct.pack(">i", -1))  # timeDiff
    report = verify_store(root, CFG)
    assert {d.file for d in report.damage} == {rel(root, path)}
    assert len(report.damage) == MAX_DAMAGE_PER_FILE + 1
    assert sum("negative timeDiff" in d.detail for d in report.damage) == MAX_DAMAGE_PER_FILE
    assert f"{INDEX_ENTRIES - 1 - MAX_DAMAGE_PER_FILE} more problems" in report.damage[-1].detail


# --- any damage -----------------------------------------------------------------------------
SMALL = StoreConfig(
    commitlog_segment_size=4096, consume_queue_entries=8, index_hash_slots=8, index_max_entries=32
)


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("small") / "s"
    with MessageStore.open(root, SMALL) as store:
        msgs = [
            Message(
                topic=("T1", "T2")[i % 2],
                body=bytes(range(i % 50, i % 50 + 40 + i % 90)),
                tags=("a", "b", "标签")[i % 3],
                keys=[f"k{i}", "dup"],
                queue_id=i % 2,
                delay_level=3 if i % 10 == 0 else 0,
            )
            for i in range(80)
        ]
        put_all(store, msgs)
    assert verify_store(root, SMALL).clean
    yield root


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    flips=st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=6
    ),
    words=st.lists(
        st.tuples(
            st.integers(0, 10**6),
            st.integers(0, 10**6),
            st.sampled_from([0, -1, 1, 0x7FFFFFFF, -0x80000000, 4096, 20, 33]),
        ),
        max_size=3,
    ),
    crc=st.booleans(),
)
def test_random_damage_never_raises_and_always_ends(
    small_store: Path, flips: list[tuple[int, int, int]], words: list[tuple[int, int, int]], crc: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "s"
        shutil.copytree(small_store, root)
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.stat().st_size)
        for which, where, xor in flips:
            path = files[which % len(files)]
            pos = where % path.stat().st_size
            patch(path, pos, bytes([path.read_bytes()[pos] ^ xor]))
        for which, where, value in words:
            path = files[which % len(files)]
            patch(path, where % max(1, path.stat().st_size - 3), struct.pack(">i", value))
        faulthandler.dump_traceback_later(120, exit=True)  # a hang fails loudly instead of stalling CI
        try:
            reports = [verify_store(root, SMALL, check_crc=crc), verify_store(root, check_crc=crc)]
        finally:
            faulthandler.cancel_dump_traceback_later()
        for report in reports:
            assert all(d.kind in DAMAGE_KINDS and d.detail for d in report.damage)
            json.dumps(report.to_dict())


# --- the index must find every key ----------------------------------------------------------
@pytest.mark.parametrize("which", [0, 1, -1], ids=["oldest", "middle", "newest"])
@pytest.mark.parametrize("name", ["store-sample", "store-sample-crash"])
def test_a_zero_filled_index_file_is_found_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, which: int
) -> None:
    """A zero-filled index file of a RocketMQ fixture reads as an empty file with consistent
    chains: its keys are missing (every key of every record the index covers must be found
    through it) and, unless it is the newest, a full file was expected there. ``rocketstore
    verify`` exits 1 naming the file."""
    from rocketstore.cli import main

    root = copy_fixture(name, tmp_path)
    path = index_files(root)[which]
    path.write_bytes(bytes(path.stat().st_size))
    report = verify_store(root, CFG)
    named = {d.file for d in report.damage}
    assert named == {rel(root, path)}, report.damage
    kinds = {d.kind for d in report.damage}
    assert kinds == ({"index_missing"} if which == -1 else {"index_header"}) or "index_missing" in kinds
    if which != -1:
        assert any(d.kind == "index_header" and "newer index file follows" in d.detail for d in report.damage)
    code = main(["verify", str(root)])
    out = capsys.readouterr().out
    assert code == 1 and rel(root, path) in out


def test_a_store_whose_index_lacks_keys_of_its_last_records_is_not_clean(
    store: tuple[Path, list[PutMessageResult]],
) -> None:
    """The newest index file zero-filled after a clean close: the header still reads as a valid
    empty file, but the records it held keys of are not findable by key."""
    root, results = store
    path = index_files(root)[-1]
    path.write_bytes(bytes(path.stat().st_size))
    damage = verify_store(root, CFG).damage
    assert damage and {(d.kind, d.file) for d in damage} == {("index_missing", rel(root, path))}
    assert f"commitlog offset {results[-1].physical_offset}" in damage[-1].detail or len(damage) > 1
