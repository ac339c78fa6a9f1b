"""Where every file of a store lives, how names map to offsets, and how store files are opened,
listed, created and replaced.

::

    {root}/commitlog/{20-digit start offset}
    {root}/consumequeue/{topic}/{queueId}/{20-digit start offset}
    {root}/index/{yyyyMMddHHmmssSSS}
    {root}/checkpoint  {root}/abort  {root}/lock  {root}/config/*.json
    {root}/.dispatch-seq (rocketstore's, not RocketMQ's: see codec/dispatch_signal.py)
    {root}/consumers/{group}/ (rocketstore's: consumer group membership, see consumer/group.py)
    {root}/poplog (rocketstore's: the gRPC broker's pop consumer state, see broker/pop_log.py)

Files and links (docs/store-format.md §1.1): every store file is opened here, and only as a
regular file: ``O_NOFOLLOW`` (a link inside the root is never followed), ``O_NONBLOCK`` (a FIFO
cannot block the open; the flag is cleared once the file is known to be regular), then
``fstat``. Directories are listed without following links, and a directory of the store must be
a real directory. Anything else is a ``StorePathError`` naming the path, what belongs there and
what is there; a refusal by the system is a ``StoreAccessError``. The root itself may be a link.
Names are parsed strictly (ASCII digits, in range): anything else is not a store name.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from rocketstore.errors import (
    CorruptDataError,
    NotAStoreError,
    StoreAccessError,
    StoreIOError,
    StorePathError,
)

__all__ = [
    "DEFAULT_DIR_MODE",
    "DEFAULT_FILE_MODE",
    "IO_FAULTS",
    "REGULAR_FILE",
    "StoreEntry",
    "StoreLayout",
    "atomic_write",
    "create_store_file",
    "fsync_directory",
    "index_file_name",
    "is_index_name",
    "is_leftover_name",
    "is_segment_name",
    "list_store_dir",
    "looks_like_store",
    "make_store_dir",
    "offset_from_name",
    "open_store_file",
    "parse_queue_id",
    "read_store_file",
    "read_store_text",
    "segment_files",
    "segment_name",
    "store_dir_exists",
    "store_file_exists",
    "store_file_size",
]

log = logging.getLogger(__name__)

DEFAULT_FILE_MODE = 0o600
DEFAULT_DIR_MODE = 0o700
REGULAR_FILE = "a regular file"
DIRECTORY = "a directory"

_NAME_DIGITS = 20
_INDEX_NAME_DIGITS = 17
_MAX_OFFSET = (1 << 63) - 1  # offsets are Java longs
_MAX_QUEUE_ID = (1 << 31) - 1  # queue ids are Java ints
_REFUSED = (errno.EACCES, errno.EPERM, errno.EROFS)
# failed I/O, reported as StoreIOError
IO_FAULTS = frozenset(
    (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EMFILE, errno.ENFILE, errno.EFBIG, errno.ENOMEM)
)
_LEFTOVER_SUFFIXES = (".creating", ".tmp")  # of a creation or replacement a crash interrupted


# --- names ------------------------------------------------------------------------------------
def _ascii_digits(name: str) -> bool:
    # str.isdigit alone accepts '²' and other digits int() refuses
    return name.isascii() and name.isdigit()


def segment_name(offset: int) -> str:
    """A segment's file name: its first byte's global offset, zero-padded to 20 digits."""
    if not 0 <= offset <= _MAX_OFFSET:
        raise ValueError(f"segment offsets are in 0..2^63-1, not {offset}")
    return f"{offset:0{_NAME_DIGITS}d}"


def is_segment_name(name: str) -> bool:
    """Exactly 20 ASCII digits naming an offset a Java long holds."""
    return len(name) == _NAME_DIGITS and _ascii_digits(name) and int(name) <= _MAX_OFFSET


def offset_from_name(name: str) -> int:
    if not is_segment_name(name):
        raise ValueError(f"{name!r} is not a segment file name (20 digits, at most 2^63-1)")
    return int(name)


def is_index_name(name: str) -> bool:
    """Exactly 17 ASCII digits (``yyyyMMddHHmmssSSS``)."""
    return len(name) == _INDEX_NAME_DIGITS and _ascii_digits(name)


def is_leftover_name(name: str) -> bool:
    """A file a creation or replacement in progress (or interrupted by a crash) stands under until
    it is renamed into place: not part of the store."""
    return name.endswith(_LEFTOVER_SUFFIXES)


def parse_queue_id(text: str) -> int | None:
    """The queue id a consume-queue directory name (or a REAL_QID property) gives: ASCII digits
    without leading zeros, at most 2^31-1. None for anything else."""
    if not _ascii_digits(text) or len(text) > 10 or (len(text) > 1 and text[0] == "0"):
        return None
    qid = int(text)
    return qid if qid <= _MAX_QUEUE_ID else None


def index_file_name(ms: int) -> str:
    """An index file's name: local time ``yyyyMMddHHmmssSSS``, as RocketMQ names them."""
    t = time.localtime(ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


# --- what is at a path ------------------------------------------------------------------------
def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return REGULAR_FILE
    if stat.S_ISDIR(mode):
        return DIRECTORY
    if stat.S_ISLNK(mode):
        return "a symbolic link (links inside a store are not followed)"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "a special file"


def _refused(path: str | os.PathLike[str], exc: OSError, access: str) -> Exception:
    """The error to raise for ``exc``: a refusal, a path through a non-directory or a failed
    I/O (a full disk, an I/O error, too many open files) becomes the store's error; anything
    else (a missing file, which callers look for) stays what it is."""
    if exc.errno in _REFUSED:
        return StoreAccessError(path, access, exc.strerror or str(exc))
    if exc.errno == errno.ENOTDIR:
        return StorePathError(path, "a path through directories", "a part of it that is not a directory")
    if exc.errno in IO_FAULTS:
        return StoreIOError(path, access, exc)
    return exc


def _found(path: Path) -> str:
    """What is at ``path`` (not following a link), for an error message."""
    try:
        return _kind(os.lstat(path).st_mode)
    except OSError as exc:
        return exc.strerror or str(exc)


class StoreEntry(NamedTuple):
    """One entry of a store directory and what it is, as ``lstat`` sees it."""

    path: Path
    kind: str

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def is_file(self) -> bool:
        return self.kind == REGULAR_FILE

    @property
    def is_dir(self) -> bool:
        return self.kind == DIRECTORY


def store_dir_exists(directory: Path) -> bool:
    """True for a real directory, False when nothing is there; StorePathError for anything else
    (a link, a file ...)."""
    return _exists(directory, stat.S_ISDIR, DIRECTORY)


def store_file_exists(path: Path) -> bool:
    """True for a regular file, False when nothing is there; StorePathError for anything else."""
    return _exists(path, stat.S_ISREG, REGULAR_FILE)


def _exists(path: Path, is_kind: Callable[[int], bool], expected: str) -> bool:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _refused(path, exc, "look up") from None
    if not is_kind(mode):
        raise StorePathError(path, expected, _kind(mode))
    return True


def store_file_size(path: Path) -> int:
    """The size of the regular file at ``path``, looked up without opening it (a link is not
    followed). FileNotFoundError when nothing is there; StorePathError for anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _refused(path, exc, "look up") from None
    if not stat.S_ISREG(st.st_mode):
        raise StorePathError(path, REGULAR_FILE, _kind(st.st_mode))
    return st.st_size


def list_store_dir(directory: Path) -> list[StoreEntry]:
    """The entries of a store directory by name, each with its kind; links are not followed.
    Nothing when the directory does not exist; StorePathError when it is not a real directory."""
    if not store_dir_exists(directory):
        return []
    entries = []
    try:
        with os.scandir(directory) as it:
            for e in it:
                # the kinds come from the directory itself (d_type): no stat per entry
                if e.is_file(follow_symlinks=False):
                    kind = REGULAR_FILE
                elif e.is_dir(follow_symlinks=False):
                    kind = DIRECTORY
                else:
                    kind = _kind(e.stat(follow_symlinks=False).st_mode)
                entries.append(StoreEntry(directory / e.name, kind))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise _refused(directory, exc, "list") from None
    entries.sort()
    return entries


def segment_files(directory: Path) -> list[tuple[int, Path]]:
    """The segments of ``directory`` as (offset, path) in offset order; nothing when the
    directory does not exist. An entry named like a segment that is not a regular file is a
    StorePathError: skipping it would hide a part of the log."""
    found = []
    for e in list_store_dir(directory):
        if is_segment_name(e.name):
            if not e.is_file:
                raise StorePathError(e.path, f"{REGULAR_FILE} (a segment)", e.kind)
            found.append((int(e.name), e.path))
        elif not is_leftover_name(e.name):
            log.warning("ignoring %s: not a segment name (20 digits, at most 2^63-1)", e.path)
    return found


# --- opening and reading ----------------------------------------------------------------------
def open_store_file(path: Path, *, writable: bool = False, create_mode: int | None = None) -> int:
    """A descriptor of the regular file at ``path`` (the caller closes it), read-only or
    read-write; created with ``create_mode`` when given and missing. Never through a link,
    never blocked by a FIFO. FileNotFoundError when nothing is there (and not creating);
    StorePathError for anything but a regular file; StoreAccessError when the system refuses."""
    flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    if create_mode is not None:
        flags |= os.O_CREAT
    try:
        fd = os.open(path, flags, create_mode if create_mode is not None else 0)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):
            raise StorePathError(path, REGULAR_FILE, _found(path)) from None
        raise _refused(path, exc, "write" if writable else "read") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise StorePathError(path, REGULAR_FILE, _kind(mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_store_file(path: Path) -> bytes | None:
    """The bytes of the regular file at ``path``, None when nothing is there (see open_store_file)."""
    try:
        fd = open_store_file(path)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def read_store_text(path: Path) -> str | None:
    """The UTF-8 text of the regular file at ``path``, None when nothing is there;
    CorruptDataError when it is not UTF-8."""
    data = read_store_file(path)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptDataError(f"not UTF-8 text: {exc.reason}", path=str(path), offset=exc.start) from None


def looks_like_store(root: Path) -> bool:
    """Whether ``root`` holds any of a store's files (commitlog/, consumequeue/, checkpoint): the
    one test of "is this a store" for read-only opens, tools and the CLI."""
    layout = StoreLayout(root)
    return any(os.path.lexists(p) for p in (layout.commitlog, layout.consume_queue, layout.checkpoint))


# --- creating and replacing -------------------------------------------------------------------
def make_store_dir(directory: Path, mode: int = DEFAULT_DIR_MODE) -> None:
    """Create ``directory`` (and missing parents) with ``mode``; an existing real directory is
    fine, anything else at the path is a StorePathError."""
    try:
        os.mkdir(directory, mode)
    except FileExistsError:
        store_dir_exists(directory)  # raises unless it is a real directory
    except FileNotFoundError:
        make_store_dir(directory.parent, mode)
        make_store_dir(directory, mode)
    except OSError as exc:
        raise _refused(directory, exc, "create a directory") from None


def fsync_directory(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _refused(path, exc, "sync the directory") from None


def create_store_file(path: Path, mode: int, *, writable: bool = False) -> int:
    """A new, empty file at ``path`` opened for writing (read-write if ``writable``). A leftover
    of an interrupted write there (a file, a link, a FIFO) is removed first, never followed."""
    flags = (os.O_RDWR if writable else os.O_WRONLY) | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags, mode)
    except FileExistsError:
        pass
    except OSError as exc:
        raise _refused(path, exc, "create") from None
    try:
        os.unlink(path)  # a link itself goes, not what it names
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise StorePathError(path, "nothing (a new file is created there)", DIRECTORY) from None
    except OSError as exc:
        raise _refused(path, exc, "remove a leftover file") from None
    try:
        return os.open(path, flags, mode)
    except OSError as exc:
        raise _refused(path, exc, "create") from None


def atomic_write(path: Path, data: bytes, mode: int = DEFAULT_FILE_MODE) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file, never a mix:
    a temporary file (created afresh, never through a link), fsync, rename, fsync of the directory."""
    tmp = path.with_name(path.name + ".tmp")
    fd = create_store_file(tmp, mode)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as exc:
        tmp.unlink(missing_ok=True)  # the old file stays, whole
        raise _refused(path, exc, "write") from None
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise StorePathError(path, REGULAR_FILE, _found(path)) from None
        raise _refused(path, exc, "replace") from None
    fsync_directory(path.parent)


# --- the layout -------------------------------------------------------------------------------
class StoreLayout:
    """The paths of one store directory, and the modes its new files and directories get."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        file_mode: int = DEFAULT_FILE_MODE,
        dir_mode: int = DEFAULT_DIR_MODE,
    ) -> None:
        self.root = Path(root)
        self.file_mode = file_mode
        self.dir_mode = dir_mode
        self.commitlog = self.root / "commitlog"
        self.consume_queue = self.root / "consumequeue"
        self.index = self.root / "index"
        self.checkpoint = self.root / "checkpoint"
        self.abort = self.root / "abort"
        self.lock = self.root / "lock"
        self.config = self.root / "config"
        self.dispatch_signal = self.root / ".dispatch-seq"
        self.consumers = self.root / "consumers"
        self.pop_log = self.root / "poplog"

    @property
    def directories(self) -> tuple[Path, ...]:
        return (self.commitlog, self.consume_queue, self.index, self.config)

    def queue_dir(self, topic: str, queue_id: int) -> Path:
        return self.consume_queue / topic / str(queue_id)

    def require_store(self) -> None:
        """NotAStoreError unless the root is a directory holding a store's files (StorePathError
        when the root is a file or the like)."""
        if self._root_mode() is None:
            raise NotAStoreError(self.root, "nothing is there")
        if not looks_like_store(self.root):
            raise NotAStoreError(self.root, "it has no commitlog, consumequeue or checkpoint")

    def _root_mode(self) -> int | None:
        """The root's mode (None when missing); StorePathError when it is not a directory."""
        root = self.root
        try:
            mode: int | None = os.stat(root).st_mode  # the root may be a link
        except FileNotFoundError:
            mode = None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StorePathError(root, DIRECTORY, "a symbolic link that never resolves") from None
            raise _refused(root, exc, "look up") from None
        if mode is not None and not stat.S_ISDIR(mode):
            raise StorePathError(root, "a store directory", _kind(mode))
        return mode

    def open_root(self, *, readonly: bool) -> None:
        """Check the root before a store opens it: read-only, it must be a store directory;
        read-write, it is created if missing (with its directories) and must be writable. A
        directory of the store that is something else is a StorePathError."""
        if readonly:
            self.require_store()
            for d in self.directories:
                store_dir_exists(d)
            return
        root = self.root
        if self._root_mode() is None:
            try:
                os.makedirs(root, self.dir_mode)
            except FileExistsError:  # a link to nothing (or created meanwhile)
                if self._root_mode() is None:
                    raise StorePathError(root, "a store directory", "a symbolic link to nothing") from None
            except OSError as exc:
                raise _refused(root, exc, "create the store directory") from None
        if not os.access(root, os.W_OK | os.X_OK):
            raise StoreAccessError(root, "write", "the store directory is not writable")
        for d in self.directories:
            make_store_dir(d, self.dir_mode)
