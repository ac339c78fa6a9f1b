"""Consumer groups across processes: who is a member, which queues each one consumes.

Everything lives in ``{root}/consumers/{group}/`` (rocketstore's, not RocketMQ's)::

    members/{client id}        one file per live member, flock'ed by it for its whole life
    queues/{topic}@{queue id}  one lock file per queue: its holder is the only member reading it

A member creates its file under a hidden temporary name, locks it, then renames it into place, so
no one ever sees a member file that is not locked. A member whose file is not locked any more
has stopped (``close`` removes the file; a killed process's locks go with it): whoever notices
removes the file. ``flock`` locks belong to an open file, not to a process, so two consumers of
one group in one process exclude each other as two processes do.

Queues are shared out by RocketMQ's ``AllocateMessageQueueAveragely`` over the sorted member
ids and each topic's sorted queues. A member takes a queue only once it holds the queue's lock,
and the previous holder commits its offset before it lets the lock go, so the new holder starts
where the old one stopped. A member that stopped releases its queues at once (its locks go with
it); the others take them at their next rebalance.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
from itertools import count
from pathlib import Path

from rocketstore.storage.paths import DEFAULT_DIR_MODE, DEFAULT_FILE_MODE, make_store_dir

__all__ = ["GroupMembership", "QueueLock", "allocate_averagely"]

log = logging.getLogger(__name__)
_serial = count()
_serial_lock = threading.Lock()


def allocate_averagely(queues: list[int], members: list[str], me: str) -> list[int]:
    """RocketMQ's AllocateMessageQueueAveragely: ``me``'s share of ``queues`` (sorted) among
    ``members`` (sorted); nothing when ``me`` is not among them."""
    if me not in members or not queues:
        return []
    index = members.index(me)
    n, m = len(queues), len(members)
    mod = n % m
    if n <= m:
        average = 1
    elif mod > 0 and index < mod:
        average = n // m + 1
    else:
        average = n // m
    start = index * average if mod > 0 and index < mod else index * average + mod
    return [queues[(start + i) % n] for i in range(min(average, n - start))]


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class GroupMembership:
    """This consumer's membership of its group (see the module docstring)."""

    def __init__(
        self, directory: Path, *, file_mode: int = DEFAULT_FILE_MODE, dir_mode: int = DEFAULT_DIR_MODE
    ) -> None:
        self.directory = directory
        self._file_mode = file_mode  # the store's (docs/store-format.md, "Modes"), as its other files
        self._members = directory / "members"
        make_store_dir(self._members, dir_mode)
        make_store_dir(directory / "queues", dir_mode)
        with _serial_lock:
            serial = next(_serial)
        self.client_id = f"{socket.gethostname()}@{os.getpid()}@{serial}"
        tmp = self._members / f".{self.client_id}.joining"
        self._fd: int | None = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, file_mode)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        os.replace(tmp, self._members / self.client_id)

    def members(self) -> list[str]:
        """The live members, sorted (this one included); files of stopped members are removed."""
        return sorted({self.client_id, *self.live_members(self.directory, skip=self.client_id)})

    @classmethod
    def live_members(cls, directory: Path, *, skip: str | None = None) -> list[str]:
        """The live members of the group at ``directory``, sorted, without joining it (``skip``:
        a member known to be alive, not probed)."""
        members = directory / "members"
        if not members.is_dir():
            return []
        return sorted(
            path.name
            for path in members.iterdir()
            if not path.name.startswith(".") and path.name != skip and cls._alive(path)
        )

    @staticmethod
    def _alive(path: Path) -> bool:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            if not _try_lock(fd):
                return True
            log.info("consumer %s stopped without leaving its group: removing it", path.name)
            path.unlink(missing_ok=True)
            return False
        finally:
            os.close(fd)

    def queue_lock(self, topic: str, queue_id: int) -> QueueLock:
        return QueueLock(self.directory / "queues" / f"{topic}@{queue_id}", self._file_mode)

    def leave(self) -> None:
        if self._fd is None:
            return
        (self._members / self.client_id).unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None


class QueueLock:
    """The right to read one queue for the group: ``acquire`` without waiting, ``release``."""

    def __init__(self, path: Path, mode: int = DEFAULT_FILE_MODE) -> None:
        self.path = path
        self._mode = mode
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, self._mode)
        if not _try_lock(fd):
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
