"""Where every file of a store lives, how segment names map to offsets, and safe replacement.

::

    {root}/commitlog/{20-digit start offset}
    {root}/consumequeue/{topic}/{queueId}/{20-digit start offset}
    {root}/index/{yyyyMMddHHmmssSSS}
    {root}/checkpoint  {root}/abort  {root}/lock  {root}/config/*.json
    {root}/.dispatch-seq (rocketstore's, not RocketMQ's: see codec/dispatch_signal.py)
    {root}/consumers/{group}/ (rocketstore's: consumer group membership, see consumer/group.py)
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = [
    "StoreLayout",
    "atomic_write",
    "fsync_directory",
    "index_file_name",
    "is_segment_name",
    "offset_from_name",
    "segment_files",
    "segment_name",
]

_NAME_DIGITS = 20


def segment_name(offset: int) -> str:
    """A segment's file name: its first byte's global offset, zero-padded to 20 digits."""
    if offset < 0:
        raise ValueError(f"segment offsets are non-negative, not {offset}")
    return f"{offset:0{_NAME_DIGITS}d}"


def is_segment_name(name: str) -> bool:
    return len(name) == _NAME_DIGITS and name.isdigit()


def segment_files(directory: Path) -> list[tuple[int, Path]]:
    """The files of ``directory`` named like segments, as (offset, path) in offset order;
    nothing when the directory does not exist."""
    if not directory.is_dir():
        return []
    return sorted((int(p.name), p) for p in directory.iterdir() if is_segment_name(p.name) and p.is_file())


def offset_from_name(name: str) -> int:
    if not is_segment_name(name):
        raise ValueError(f"{name!r} is not a segment file name (20 digits)")
    return int(name)


def index_file_name(ms: int) -> str:
    """An index file's name: local time ``yyyyMMddHHmmssSSS``, as RocketMQ names them."""
    t = time.localtime(ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


def fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


class StoreLayout:
    """The paths of one store directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.commitlog = self.root / "commitlog"
        self.consume_queue = self.root / "consumequeue"
        self.index = self.root / "index"
        self.checkpoint = self.root / "checkpoint"
        self.abort = self.root / "abort"
        self.lock = self.root / "lock"
        self.config = self.root / "config"
        self.dispatch_signal = self.root / ".dispatch-seq"
        self.consumers = self.root / "consumers"

    def queue_dir(self, topic: str, queue_id: int) -> Path:
        return self.consume_queue / topic / str(queue_id)

    def create_directories(self) -> None:
        for d in (self.root, self.commitlog, self.consume_queue, self.index, self.config):
            d.mkdir(parents=True, exist_ok=True)
