"""Hostile store directories (issue 13): FIFOs, directories, devices and links where a store's
files belong, files where its directories belong, bad names, bad roots.

Each case is a copy of RocketMQ's store-sample fixture with one thing changed. The read-only
library open, ``status``, ``verify``, ``print`` and ``query-key`` run first and must change no
byte; then a read-write open that puts a message. Every run must end well or in a rocketstore
error naming the path, never hang, never leak an OSError/ValueError, never read or write
outside the root. Cases with a FIFO run in a subprocess with a time limit: a regression hangs
one test for seconds, not the suite.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

import rocketstore
from rocketstore import (
    CorruptDataError,
    Message,
    MessageStore,
    NotAStoreError,
    PutStatus,
    StoreAccessError,
    StoreConfig,
    StorePathError,
)
from rocketstore.cli import main
from rocketstore.message import MessageExt
from rocketstore.schedule import real_message
from rocketstore.storage.map_cache import MapCache
from rocketstore.storage.mapped_file import MappedFile
from rocketstore.storage.paths import (
    atomic_write,
    is_index_name,
    is_segment_name,
    open_store_file,
    parse_queue_id,
)
from rocketstore.verify import verify_store
from tests.conftest import FIXTURE_CONFIG, copy_fixture

SAMPLE = "store-sample"
SEGMENT = "commitlog/00000000000000065536"
QUEUE_FILE = "consumequeue/TopicA/0/00000000000000000000"
INDEX_FILE = "index/20261122051208239"
READ_ONLY_ACTIONS = ("open-ro", "status", "verify", "print", "query-key")
REPO = Path(__file__).resolve().parent.parent
SRC = Path(rocketstore.__file__).resolve().parent.parent


# --- running the store against a directory --------------------------------------------------------
def attempt(root: str, action: str) -> dict[str, Any]:
    """One action against ``root``: what it returned or raised (JSON-friendly, for subprocesses)."""
    if action in ("open-ro", "open-rw"):
        try:
            with MessageStore.open(root, FIXTURE_CONFIG, readonly=action == "open-ro") as store:
                if action == "open-rw":
                    r = store.put_message(Message("TopicA", b"hostile", queue_id=0))
                    assert r.status is PutStatus.PUT_OK, r
        except Exception as exc:
            return {"raised": [c.__name__ for c in type(exc).__mro__], "message": str(exc)}
        return {"raised": None}
    args = {
        "status": ["status", root],
        "verify": ["verify", "--no-crc", root],
        "print": ["print", root, "--no-body"],
        "query-key": ["query-key", root, "-t", "TopicA", "-k", "key-0"],  # in the sample
    }[action]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except BaseException as exc:  # main must not raise: record it for the assertion
            return {"code": None, "out": out.getvalue(), "err": f"{type(exc).__name__}: {exc}"}
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def attempt_all(root: str, actions: list[str]) -> dict[str, dict[str, Any]]:
    return {action: attempt(root, action) for action in actions}


def run_isolated(root: Path, actions: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """``attempt_all`` in a fresh interpreter, killed after 60 s (a FIFO that blocks an open)."""
    code = "import json, sys; from tests.test_hostile_dirs import attempt_all; " + (
        "print(json.dumps(attempt_all(sys.argv[1], sys.argv[2:])))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(REPO)])}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, str(root), *actions],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{actions} against {root} did not finish in 60 s (blocked on a FIFO?)")
    assert proc.returncode == 0, proc.stderr
    return cast(dict[str, dict[str, Any]], json.loads(proc.stdout.splitlines()[-1]))


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (links not followed): a hash of a regular file's bytes, a
    link's target, or the kind of anything else; FIFOs are never opened."""
    found: dict[str, str] = {}
    if not os.path.lexists(root):
        return found
    if not root.is_dir():
        return {".": _digest_entry(root)}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            found[str(p.relative_to(root))] = _digest_entry(p)
    return found


def _digest_entry(p: Path) -> str:
    st = os.lstat(p)
    if stat.S_ISREG(st.st_mode):
        return hashlib.sha256(p.read_bytes()).hexdigest() + f" {stat.S_IMODE(st.st_mode):o}"
    if stat.S_ISLNK(st.st_mode):
        return "link to " + os.readlink(p)
    return f"kind {stat.S_IFMT(st.st_mode):o} mode {stat.S_IMODE(st.st_mode):o}"


# --- the cases ----------------------------------------------------------------------------------
@dataclass
class Case:
    """``damage(root, outside)`` changes a fixture copy; ``path`` (relative to the root) is
    what the errors must name. ``read_only``/``read_write``: the error class the library open
    raises, or None when it opens. ``verify_names``: verify's report names the path. ``fifo``:
    the case could block an open (run it in a subprocess)."""

    name: str
    damage: Callable[[Path, Path], None]
    path: str
    read_only: type[Exception] | None = StorePathError
    read_write: type[Exception] | None = StorePathError
    verify_names: bool = True
    fifo: bool = False
    outside_files: list[str] = field(default_factory=list)


def _replace(rel: str, make: Callable[[Path], None]) -> Callable[[Path, Path], None]:
    def damage(root: Path, outside: Path) -> None:
        p = root / rel
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif os.path.lexists(p):
            p.unlink()
        p.parent.mkdir(parents=True, exist_ok=True)
        make(p)

    return damage


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _directory(p: Path) -> None:
    p.mkdir()
    (p / "inside").write_bytes(b"x")


def _file(p: Path) -> None:
    p.write_bytes(b"not a directory")


def _socket(p: Path) -> None:
    cwd = os.getcwd()
    os.chdir(p.parent)  # a relative name: socket paths are limited to 107 bytes
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(p.name)  # the name stays after the socket closes
    finally:
        os.chdir(cwd)


def _device(p: Path) -> None:
    """A character device like /dev/null, where this user may make one; else a socket."""
    try:
        os.mknod(p, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        _socket(p)


def _dangling(p: Path) -> None:
    p.symlink_to(p.parent / "nothing-here")


def _loop(p: Path) -> None:
    p.symlink_to(p.name)  # a link to itself


def _to_outside(what: str) -> Callable[[Path, Path], None]:
    """``what`` moved out of the root, a link to it left in its place."""

    def damage(root: Path, outside: Path) -> None:
        target = outside / Path(what).name
        shutil.move(root / what, target)
        (root / what).symlink_to(target)

    return damage


def _copy_as(src: str, dest: str) -> Callable[[Path, Path], None]:
    def damage(root: Path, outside: Path) -> None:
        (root / dest).parent.mkdir(parents=True, exist_ok=True)
        if (root / src).is_dir():
            shutil.copytree(root / src, root / dest)
        else:
            shutil.copyfile(root / src, root / dest)

    return damage


_STORE_FILES = {
    "segment": SEGMENT,
    "queue-file": QUEUE_FILE,
    "index-file": INDEX_FILE,
    "checkpoint": "checkpoint",
    "topics-json": "config/topics.json",
    "delay-offsets-json": "config/delayOffset.json",
    "lock": "lock",
    "abort": "abort",
}
_VERIFY_READS = {"segment", "queue-file", "index-file", "checkpoint"}


def _file_cases() -> list[Case]:
    cases = []
    for what, rel in _STORE_FILES.items():
        # the lock is a read-write open's business only
        read_only = None if what == "lock" else StorePathError
        for how, make in (("fifo", _fifo), ("directory", _directory), ("dangling-link", _dangling)):
            cases.append(
                Case(
                    f"{how}-as-{what}",
                    _replace(rel, make),
                    rel,
                    read_only=read_only,
                    verify_names=what in _VERIFY_READS,
                    fifo=how == "fifo",
                )
            )
    for what in ("segment", "queue-file", "checkpoint"):
        rel = _STORE_FILES[what]
        cases.append(Case(f"socket-as-{what}", _replace(rel, _socket), rel))
        cases.append(Case(f"device-as-{what}", _replace(rel, _device), rel, fifo=True))
    for what in ("segment", "checkpoint", "topics-json"):
        rel = _STORE_FILES[what]
        cases.append(
            Case(f"looping-link-as-{what}", _replace(rel, _loop), rel, verify_names=what != "topics-json")
        )
    return cases


CASES = [
    *_file_cases(),
    # a file where a directory belongs
    *(
        Case(f"file-as-{d.replace('/', '-')}", _replace(d, _file), d)
        for d in (
            "commitlog",
            "consumequeue",
            "index",
            "config",
            "consumequeue/TopicA",
            "consumequeue/TopicA/0",
        )
    ),
    # links out of the root: never read, never written through
    Case("segment-linked-outside", _to_outside(SEGMENT), SEGMENT, outside_files=["00000000000000065536"]),
    Case("queue-dir-linked-outside", _to_outside("consumequeue/TopicA/0"), "consumequeue/TopicA/0"),
    Case("topic-dir-linked-outside", _to_outside("consumequeue/TopicB"), "consumequeue/TopicB"),
    Case("commitlog-linked-outside", _to_outside("commitlog"), "commitlog"),
    Case(
        "delay-offsets-linked-outside",
        _to_outside("config/delayOffset.json"),
        "config/delayOffset.json",
        verify_names=False,
        outside_files=["delayOffset.json"],
    ),
    # names that are not store names: left alone (verify reports them), never a crash
    Case("superscript-queue-dir", _copy_as("consumequeue/TopicA/0", "consumequeue/TopicA/²"), "", None, None),
    Case(
        "huge-queue-dir",
        _copy_as("consumequeue/TopicA/0", "consumequeue/TopicA/99999999999999999999"),
        "",
        None,
        None,
    ),
    Case("huge-segment-name", _copy_as(SEGMENT, "commitlog/99999999999999999999"), "", None, None),
    Case("superscript-index-name", _copy_as(INDEX_FILE, "index/" + "²" * 17), "", None, None),
    Case("bad-topic-dir-name", _copy_as("consumequeue/TopicA", "consumequeue/not a topic"), "", None, None),
    # a segment name in range but not a multiple of the segment size
    Case(
        "misaligned-segment",
        _copy_as(SEGMENT, "commitlog/09223372036854775807"),
        "commitlog/09223372036854775807",
        CorruptDataError,
        CorruptDataError,
    ),
]


def _check_library(outcome: dict[str, Any], expected: type[Exception] | None, named: str) -> None:
    if expected is None:
        assert outcome["raised"] is None, outcome
        return
    assert outcome["raised"] is not None, f"expected {expected.__name__}, the open succeeded"
    assert expected.__name__ in outcome["raised"], outcome
    assert "RocketStoreError" in outcome["raised"], outcome
    assert named in outcome["message"], outcome


def _check_cli(action: str, outcome: dict[str, Any], case: Case, named: str) -> None:
    assert outcome["code"] is not None, f"{action} raised {outcome['err']}"
    assert "Traceback" not in outcome["err"] and "[Errno" not in outcome["err"], outcome
    if action == "verify":
        assert outcome["code"] in (0, 1), outcome
        if case.verify_names and case.path:
            assert case.path in outcome["out"] + outcome["err"], outcome
    elif case.read_only is None:
        assert outcome["code"] == 0, outcome
    else:
        assert outcome["code"] == 1, outcome
        assert named in outcome["err"], outcome


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hostile_directory(case: Case, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = copy_fixture(SAMPLE, tmp_path)
    case.damage(root, outside)
    named = str(root / case.path) if case.path else str(root)
    before, outside_before = tree_digest(root), tree_digest(outside)

    def run(actions: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        if case.fifo:
            return run_isolated(root, actions)
        return attempt_all(str(root), list(actions))

    results = run(READ_ONLY_ACTIONS)
    assert tree_digest(root) == before, "a read-only run changed the store"
    results.update(run(("open-rw",)))

    _check_library(results["open-ro"], case.read_only, named)
    for action in ("status", "verify", "print", "query-key"):
        _check_cli(action, results[action], case, named)
    _check_library(results["open-rw"], case.read_write, named)
    assert tree_digest(outside) == outside_before, "something outside the root changed"
    if case.read_write is not None:
        assert tree_digest(root) == before, "a refused read-write open changed the store"


# --- roots ----------------------------------------------------------------------------------------
def test_missing_root(tmp_path: Path) -> None:
    root = tmp_path / "nowhere"
    with pytest.raises(NotAStoreError, match="nowhere is not a store directory: nothing is there"):
        MessageStore.open(root, FIXTURE_CONFIG, readonly=True)
    assert isinstance(NotAStoreError(root, "x"), FileNotFoundError)  # what callers caught before
    with pytest.raises(NotAStoreError):
        verify_store(root)
    assert not root.exists()
    with MessageStore.open(root, FIXTURE_CONFIG) as store:  # read-write: created
        assert store.put_message(Message("T", b"x")).status is PutStatus.PUT_OK
    assert (root / "commitlog").is_dir()


def test_a_directory_that_is_no_store(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    before = tree_digest(tmp_path)
    with pytest.raises(NotAStoreError, match="it has no commitlog, consumequeue or checkpoint"):
        MessageStore.open(tmp_path, FIXTURE_CONFIG, readonly=True)
    for command in (["status"], ["verify"], ["print"]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            assert main([*command, str(tmp_path)]) == 1
        assert "not a store directory" in err.getvalue()
    assert tree_digest(tmp_path) == before


@pytest.mark.parametrize("readonly", [True, False])
def test_root_is_a_file(tmp_path: Path, readonly: bool) -> None:
    root = tmp_path / "store"
    root.write_bytes(b"a file")
    with pytest.raises(StorePathError, match="expected a store directory, found a regular file") as info:
        MessageStore.open(root, FIXTURE_CONFIG, readonly=readonly)
    assert info.value.path == str(root)
    assert root.read_bytes() == b"a file"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # never opened: its kind is known from stat
    with pytest.raises(StorePathError, match="expected a store directory, found a FIFO"):
        MessageStore.open(fifo, FIXTURE_CONFIG, readonly=readonly)
    with pytest.raises(StorePathError, match="found a part of it that is not a directory"):
        MessageStore.open(root / "below-a-file", FIXTURE_CONFIG, readonly=readonly)


def test_root_may_be_a_link(tmp_path: Path) -> None:
    """Users link store directories into place: the root is the one link a store follows."""
    real = copy_fixture(SAMPLE, tmp_path)
    link = tmp_path / "linked"
    link.symlink_to(real)
    with MessageStore.open(link, FIXTURE_CONFIG, readonly=True) as store:
        assert store.topics()
    with MessageStore.open(link, FIXTURE_CONFIG) as store:
        assert store.put_message(Message("TopicA", b"x", queue_id=0)).status is PutStatus.PUT_OK
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")
    with pytest.raises(NotAStoreError):
        MessageStore.open(dangling, FIXTURE_CONFIG, readonly=True)
    with pytest.raises(StorePathError, match="a symbolic link to nothing"):
        MessageStore.open(dangling, FIXTURE_CONFIG)
    assert not (tmp_path / "gone").exists()


def test_read_only_root_opened_read_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A root the process cannot write. Permissions do not bind root (the user the suite may run
    as): then the system's answer for this one directory is made "not writable" instead."""
    root = copy_fixture(SAMPLE, tmp_path)
    root.chmod(0o500)
    try:
        if os.access(root, os.W_OK):
            real_access = os.access

            def access(path: Any, mode: int, **kwargs: Any) -> bool:
                return False if Path(path) == root and mode & os.W_OK else real_access(path, mode, **kwargs)

            monkeypatch.setattr(os, "access", access)
        before = tree_digest(root)
        with pytest.raises(StoreAccessError, match="not writable") as info:
            MessageStore.open(root, FIXTURE_CONFIG)
        assert isinstance(info.value, PermissionError) and info.value.path == str(root)
        assert tree_digest(root) == before
        with MessageStore.open(root, FIXTURE_CONFIG, readonly=True) as store:  # reading is fine
            assert store.topics()
    finally:
        root.chmod(0o700)


# --- names ----------------------------------------------------------------------------------------
def test_names_are_parsed_strictly() -> None:
    assert is_segment_name("00000000000000065536")
    assert is_segment_name("09223372036854775807")
    assert not is_segment_name("09223372036854775808")  # past a Java long
    assert not is_segment_name("99999999999999999999")
    assert not is_segment_name("0000000000000006553²")
    assert not is_segment_name("0000000000000006553")
    assert is_index_name("20261122051208239") and not is_index_name("2026112205120823²")
    assert [parse_queue_id(t) for t in ("0", "7", "2147483647")] == [0, 7, 2147483647]
    for bad in ("²", "2147483648", "99999999999999999999", "07", "-1", "", " 1", "1.0", "١"):
        assert parse_queue_id(bad) is None, bad


@pytest.mark.parametrize("qid", ["²", "99999999999999999999", "", "-1"])
def test_delayed_message_with_a_bad_real_queue_id(qid: str) -> None:
    msg = types.SimpleNamespace(properties={"REAL_TOPIC": "T", "REAL_QID": qid}, physical_offset=123)
    with pytest.raises(CorruptDataError, match="names no real topic/queue"):
        real_message(cast(MessageExt, msg))


# --- files on disk: modes, replacement ------------------------------------------------------------
def _modes(root: Path) -> dict[str, int]:
    return {
        str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode)
        for p in [root, *root.rglob("*")]
        if not p.name.endswith(".tmp")
    }


@pytest.mark.parametrize(
    ("config", "file_mode", "dir_mode"),
    [
        ({}, 0o600, 0o700),
        ({"file_mode": 0o640, "dir_mode": 0o750}, 0o640, 0o750),
    ],
)
def test_created_files_and_directories_get_the_store_modes(
    tmp_path: Path, config: dict[str, int], file_mode: int, dir_mode: int
) -> None:
    cfg = StoreConfig(commitlog_segment_size=65536, consume_queue_entries=40).replace(**config)
    root = tmp_path / "store"
    old = os.umask(0o022)
    try:
        with MessageStore.open(root, cfg) as store:
            store.create_topic("T", 1)
            assert store.put_message(Message("T", b"x", keys="k")).status is PutStatus.PUT_OK
            assert store.wait_dispatched(30)
            store.commit_offset("g", "T", 0, 1)
            assert stat.S_IMODE((root / "abort").stat().st_mode) == file_mode
    finally:
        os.umask(old)
    modes = _modes(root)
    for name in (
        "checkpoint",
        "lock",
        "config/topics.json",
        "config/consumerOffset.json",
        "commitlog/00000000000000000000",
        "consumequeue/T/0/00000000000000000000",
    ):
        assert modes[name] == file_mode, name
    assert any(n.startswith("index/") and m == file_mode for n, m in modes.items())
    for name in ("", "commitlog", "consumequeue", "consumequeue/T", "consumequeue/T/0", "index", "config"):
        assert modes[name or "."] == dir_mode, name


def test_file_modes_from_a_properties_file(tmp_path: Path) -> None:
    p = tmp_path / "store.properties"
    p.write_text("fileMode=0640\ndir_mode=0o750\n")
    cfg = StoreConfig.from_file(p)
    assert (cfg.file_mode, cfg.dir_mode) == (0o640, 0o750)
    with pytest.raises(rocketstore.StoreConfigError, match="file_mode"):
        StoreConfig(file_mode=0o400)


def test_atomic_write_never_follows_a_planted_temporary(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(b"keep me")
    target = tmp_path / "checkpoint"
    (tmp_path / "checkpoint.tmp").symlink_to(outside)
    atomic_write(target, b"new")
    assert outside.read_bytes() == b"keep me"
    assert target.read_bytes() == b"new" and not target.is_symlink()
    os.mkfifo(tmp_path / "checkpoint.tmp")
    atomic_write(target, b"newer")
    assert target.read_bytes() == b"newer" and not (tmp_path / "checkpoint.tmp").exists()
    (tmp_path / "checkpoint.tmp").mkdir()
    with pytest.raises(StorePathError, match=r"checkpoint\.tmp"):
        atomic_write(target, b"newest")
    assert target.read_bytes() == b"newer"


def test_replacing_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "topics.json").mkdir()
    with pytest.raises(StorePathError, match=r"topics\.json: expected a regular file, found a directory"):
        atomic_write(tmp_path / "topics.json", b"{}")
    assert not (tmp_path / "topics.json.tmp").exists()


def test_open_store_file_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_bytes(b"x")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    for name, found in (("fifo", "a FIFO"), ("dir", "a directory"), ("link", "a symbolic link")):
        for writable in (False, True):
            with pytest.raises(StorePathError, match=f"{name}: expected a regular file, found {found}"):
                open_store_file(tmp_path / name, writable=writable)
    with pytest.raises(FileNotFoundError):
        open_store_file(tmp_path / "missing")
    os.close(open_store_file(tmp_path / "file", writable=True))


def test_lazily_mapped_files_are_opened_only_as_regular_files(tmp_path: Path) -> None:
    """A file opened with a map cache is looked at (lstat) when opened and opened when first read
    or mapped again after parking: a link or FIFO there is refused at either point, never
    followed, never blocking."""
    size = 4096
    (tmp_path / "target").write_bytes(bytes(size))
    (tmp_path / "link").symlink_to(tmp_path / "target")
    os.mkfifo(tmp_path / "fifo")
    cache = MapCache(1)
    for name, found in (("link", "a symbolic link"), ("fifo", "a FIFO")):
        with pytest.raises(StorePathError, match=f"{name}: expected a regular file, found {found}"):
            MappedFile(tmp_path / name, size, named_by_offset=False, cache=cache)
    # a parked file replaced by a link: mapping it again refuses the link
    files = [MappedFile(tmp_path / f"{i:020d}", size, create=True, cache=cache) for i in (0, size)]
    first = files[0]
    assert first.parked and not files[1].parked
    first.path.unlink()
    first.path.symlink_to(tmp_path / "target")
    with pytest.raises(StorePathError, match=f"{first.path.name}: expected a regular file, found a symbolic"):
        first.buf  # noqa: B018 -- reading it is what maps it
    assert first.parked
    for mf in files:
        mf.close()


def test_spark_scan_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    from rocketstore.spark.scan import ScanBounds, StoreFiles, plan_commitlog

    root = copy_fixture(SAMPLE, tmp_path)
    os.unlink(root / SEGMENT)
    os.mkfifo(root / SEGMENT)
    files = StoreFiles.at(root, FIXTURE_CONFIG)
    with pytest.raises(StorePathError, match="00000000000000065536: expected a regular file"):
        plan_commitlog(files, ScanBounds(), 2)
    shutil.rmtree(root / "consumequeue/TopicA/0")
    (root / "consumequeue/TopicA/0").symlink_to(tmp_path)
    with pytest.raises(StorePathError, match="TopicA/0: expected a queue directory, found a symbolic link"):
        files.queues()
    (root / "consumequeue/TopicA/0").unlink()
    queues = files.queues()
    shutil.copytree(root / "consumequeue/TopicB/0", root / "consumequeue/TopicB/²")
    assert files.queues() == queues and ("TopicB", 0) in queues
