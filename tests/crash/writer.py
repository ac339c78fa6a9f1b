"""The crash harness's writer: puts messages into a store until it is killed.

Run as ``python -m tests.crash.writer STORE_DIR --flush SYNC_FLUSH|ASYNC_FLUSH --threads N --seed S``
(cwd: the repository root). It opens the store, prints ``READY`` and starts N producer threads.
Each thread puts self-checking messages to several topics and queues (``--routes``: how many of
the 12 topic/queue pairs; few make hot queues that roll often), alone or in batches
(``put_messages``: same-queue batches, which take the columnar path, and mixed batches). After a
put returns ``PUT_OK`` -- for a batch, after ``put_messages`` returns -- one line per message is
written to stdout at once (one ``write`` system call under a lock, so lines never interleave)::

    A <key> <topic> <queue_id> <physical_offset> <queue_offset> <msg_id> <store_timestamp> <sha256>

(tab-separated). Only acknowledged messages are printed, so every printed line is a promise the
store made. Other lines: ``OPENING`` before the store is opened, ``READY <pid>`` once it is
open, ``# ...`` comments (put statuses other than PUT_OK); the harness ignores an unterminated
last line (the process died mid-write).

``--shadow DIR`` turns on the power-loss simulation (``PowerLossShadow``): DIR must start as a
copy of STORE_DIR taken while the store was closed, and afterwards holds only what the writer
made durable. The harness opens DIR after the kill, as a machine that lost power would find
its disk.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from rocketstore import FlushDiskType, Message, MessageStore, PutMessageResult, PutStatus, StoreConfig

__all__ = [
    "PROBE_TOPIC",
    "QUEUES",
    "ROUTES",
    "TOPICS",
    "Ack",
    "BodyError",
    "PowerLossShadow",
    "check_body",
    "crash_config",
    "format_ack",
    "main",
    "make_body",
    "parse_ack",
]

TOPICS = ("CrashA", "CrashB", "CrashC")
QUEUES = 4
ROUTES = tuple((topic, qid) for topic in TOPICS for qid in range(QUEUES))
PROBE_TOPIC = "CrashProbe"  # the checker's own writes after recovery
BODY_MAGIC = b"RSCB"
DIGEST_SIZE = 32
MIN_PAYLOAD, MAX_PAYLOAD = 10, 3000
SHADOW_TMP_SUFFIX = ".shadow-tmp"


def crash_config(flush: str, segment_size: int = 65536, cq_entries: int = 100) -> StoreConfig:
    """A small geometry so that commitlog, consume-queue and index files roll often. Disk-usage
    reclamation is kept out: how full the test machine's disk is must not decide what survives."""
    return StoreConfig(
        flush_disk_type=FlushDiskType(flush),
        commitlog_segment_size=segment_size,
        consume_queue_entries=cq_entries,
        index_hash_slots=128,
        index_max_entries=512,
        disk_max_used_space_ratio=100,
        disk_clean_forcibly_ratio=100,
        disk_warning_ratio=100,
    )


# --- self-checking bodies -------------------------------------------------------------------------
class BodyError(ValueError):
    """A body that is not what the writer wrote: torn, corrupt or foreign."""


def make_body(key: str, rng: random.Random) -> bytes:
    """``magic + sha256(rest) + rest`` where ``rest = key | random payload of 10..3000 bytes``."""
    rest = key.encode() + b"|" + rng.randbytes(rng.randint(MIN_PAYLOAD, MAX_PAYLOAD))
    return BODY_MAGIC + hashlib.sha256(rest).digest() + rest


def check_body(body: bytes) -> str:
    """The key a body was made for; BodyError if the body is damaged."""
    head = len(BODY_MAGIC) + DIGEST_SIZE
    if len(body) < head + 2 or not body.startswith(BODY_MAGIC):
        raise BodyError(f"body of {len(body)} bytes does not start with {BODY_MAGIC!r}: {body[:48]!r}")
    rest = body[head:]
    if hashlib.sha256(rest).digest() != body[len(BODY_MAGIC) : head]:
        raise BodyError(f"body digest mismatch (body of {len(body)} bytes, starts {rest[:40]!r})")
    key, sep, _ = rest.partition(b"|")
    if not sep:
        raise BodyError(f"body has no key separator: {rest[:40]!r}")
    return key.decode()


# --- acknowledgement lines ------------------------------------------------------------------------
class Ack(NamedTuple):
    """One acknowledged message, as the writer printed it (``round`` is filled by the harness)."""

    key: str
    topic: str
    queue_id: int
    physical_offset: int
    queue_offset: int
    msg_id: str
    store_timestamp: int
    sha256: str
    round: int = -1


def format_ack(key: str, body: bytes, r: PutMessageResult) -> str:
    return (
        f"A\t{key}\t{r.topic}\t{r.queue_id}\t{r.physical_offset}\t{r.queue_offset}\t{r.msg_id}\t"
        f"{r.store_timestamp}\t{hashlib.sha256(body).hexdigest()}\n"
    )


def parse_ack(line: str, round_no: int) -> Ack:
    tag, key, topic, qid, phys, qo, msg_id, ts, sha = line.rstrip("\n").split("\t")
    if tag != "A":
        raise ValueError(f"not an acknowledgement line: {line!r}")
    return Ack(key, topic, int(qid), int(phys), int(qo), msg_id, int(ts), sha, round_no)


class _Out:
    """stdout as raw, unbuffered writes: a line is out of the process as soon as write returns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def write(self, text: str) -> None:
        data = memoryview(text.encode())
        with self._lock:
            while data:
                data = data[os.write(1, data) :]


# --- power-loss simulation ------------------------------------------------------------------------
class PowerLossShadow:
    """Mirror, in ``shadow``, only what the writer made durable (see tests/crash/test_crash.py).

    The store makes bytes durable in few places, all wrapped here:

    - ``MappedFile.sync`` (fdatasync of a commitlog, consume-queue or index file: every flush
      goes through it). fdatasync makes durable every write to the file made before the call.
      Data files (commitlog, consume queue) are append-only: their bytes before the read
      position taken *before* the real sync are durable once it returns, so the shadow file
      becomes ``file[0:extent] + zeros`` (the extent never moves back). Index files are
      rewritten in place (slots, header), so the whole file is copied after the sync, while
      holding the lock that also wraps ``IndexService.build``: the copy is the index as it
      was between two dispatch batches, a superset of what the sync covered and a state a
      kernel writing those pages back at that moment could leave.
    - ``MappedFile(create=True)`` (file created, sized, fsynced, renamed, directory fsynced):
      an all-zero shadow file of the same size.
    - ``TimerWheel.flush`` and ``TimerCheckpoint.flush`` (fdatasync of the timer wheel, fsync of
      ``timercheck``, both updated in place): the shadow gets the whole file as it is after the
      sync, as for index files (the timer log's segments are mapped files: ``MappedFile.sync``).
    - ``atomic_write`` as used by the checkpoint (temp file, fsync, rename, fsync directory):
      the same bytes in the shadow.

    Every shadow file is replaced atomically (temp file + rename), under one lock, so a kill
    mid-snapshot leaves the previous snapshot. Acknowledgements are printed after the put
    returns, and under SYNC_FLUSH a put returns only after the sync that covers it -- and so
    after its snapshot -- has returned. Not mirrored: writes that were never synced (lost by a
    power cut), unlinks (not fsynced by the store: a deleted file may come back), the
    ``abort`` marker (created in the shadow once the store is open: see ``mark_open``).
    """

    def __init__(self, root: Path, shadow: Path) -> None:
        self.root = os.path.abspath(root)
        self.shadow = os.path.abspath(shadow)
        self.lock = threading.RLock()
        self._extent: dict[str, int] = {}
        self.snapshots = 0

    def _target(self, path: str | os.PathLike[str]) -> str:
        rel = os.path.relpath(os.path.abspath(path), self.root)
        if rel.startswith(".."):
            raise ValueError(f"{path} is not inside the store {self.root}")
        return os.path.join(self.shadow, rel)

    def _replace(self, path: str | os.PathLike[str], data: bytes, size: int) -> None:
        target = self._target(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = target + SHADOW_TMP_SUFFIX
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        self.snapshots += 1

    def created(self, path: Path, size: int) -> None:
        with self.lock:
            if not os.path.exists(self._target(path)):
                self._replace(path, b"", size)

    def synced(self, mf: Any, extent: int | None) -> None:
        """After a real sync of ``mf``: ``extent`` bytes are durable (None: the whole file)."""
        with self.lock:
            if extent is None:
                data = bytes(mf.mm[:])
            else:
                key = str(mf.path)
                extent = max(extent, self._extent.get(key, 0))
                self._extent[key] = extent
                data = bytes(mf.mm[:extent])
            self._replace(mf.path, data, mf.size)

    def replaced(self, path: Path, data: bytes) -> None:
        with self.lock:
            self._replace(path, data, len(data))

    def mark_open(self) -> None:
        """The store created ``abort`` at open. It does not fsync the directory after that, so
        strictly a power cut could lose the marker; the simulation assumes it survives (ext4
        and xfs commit it with the next fsync of any file, and the store's first flush is one)."""
        with self.lock:
            self._replace(os.path.join(self.root, "abort"), b"", 0)

    def install(self) -> None:
        """Wrap the store's durability points (call before opening the store).

        ``os.fsync`` and ``os.fdatasync`` are wrapped too: a sync of a store file from anywhere
        else is a durability point this simulation does not know about, reported on stderr as
        ``UNMIRRORED-SYNC`` (the harness fails the round: the simulation needs updating).
        """
        import rocketstore.store  # noqa: F401 - every module that may bind atomic_write
        from rocketstore import index as index_module
        from rocketstore.storage import paths
        from rocketstore.storage.mapped_file import MappedFile
        from rocketstore.timer.timercheck import TimerCheckpoint
        from rocketstore.timer.timerwheel import TimerWheel

        shadow = self
        real_init = MappedFile.__init__
        real_sync = MappedFile.sync
        real_atomic_write = paths.atomic_write
        real_build = index_module.IndexService.build
        real_wheel_flush, real_check_flush = TimerWheel.flush, TimerCheckpoint.flush
        real_fsync, real_fdatasync = os.fsync, os.fdatasync
        index_mapping = getattr(index_module, "_IndexMapping", None)
        inside = threading.local()  # depth of mirrored durability points on this thread

        class _Mirrored:
            def __enter__(self) -> None:
                inside.depth = getattr(inside, "depth", 0) + 1

            def __exit__(self, *exc: object) -> None:
                inside.depth -= 1

        mirrored = _Mirrored()

        def init(self: MappedFile, path: Path, size: int, *args: Any, **kwargs: Any) -> None:
            with mirrored:
                real_init(self, path, size, *args, **kwargs)
            if kwargs.get("create"):
                shadow.created(path, size)

        def sync(self: MappedFile) -> None:
            whole = index_mapping is not None and isinstance(self, index_mapping)
            extent = None if whole else int(getattr(self, "read_position", self.wrote_position))
            with mirrored:
                real_sync(self)
            shadow.synced(self, extent)

        def atomic_write(path: Path, data: bytes, mode: int = paths.DEFAULT_FILE_MODE) -> None:
            with mirrored:
                real_atomic_write(path, data, mode)
            shadow.replaced(path, data)

        def wheel_flush(self: TimerWheel) -> None:
            # the wheel is updated in place: copied whole after its sync, as index files are
            with mirrored:
                real_wheel_flush(self)
            if self._mm is not None and not self.readonly:
                shadow.replaced(self.path, bytes(self._mm))

        def check_flush(self: TimerCheckpoint, progress: Any) -> None:
            with mirrored:
                real_check_flush(self, progress)
            shadow.replaced(self.path, Path(self.path).read_bytes())

        def build(self: Any, requests: Any) -> None:
            with shadow.lock:
                real_build(self, requests)

        def check(fd: Any) -> None:
            if getattr(inside, "depth", 0):
                return
            try:
                path = os.readlink(f"/proc/self/fd/{fd if isinstance(fd, int) else fd.fileno()}")
            except (OSError, ValueError, AttributeError):
                return
            rel = os.path.relpath(path, shadow.root)
            if not rel.startswith("..") and rel != "lock":
                sys.stderr.write(f"UNMIRRORED-SYNC {path}\n{''.join(traceback.format_stack(limit=8))}\n")
                sys.stderr.flush()

        def fsync(fd: Any) -> None:
            check(fd)
            real_fsync(fd)

        def fdatasync(fd: Any) -> None:
            check(fd)
            real_fdatasync(fd)

        MappedFile.__init__ = init  # type: ignore[method-assign]
        MappedFile.sync = sync  # type: ignore[method-assign]
        index_module.IndexService.build = build  # type: ignore[method-assign]
        TimerWheel.flush = wheel_flush  # type: ignore[method-assign]
        TimerCheckpoint.flush = check_flush  # type: ignore[method-assign]
        for name, module in list(sys.modules.items()):  # wherever it was imported by name
            if name.startswith("rocketstore") and getattr(module, "atomic_write", None) is real_atomic_write:
                module.atomic_write = atomic_write  # type: ignore[attr-defined]
        os.fsync = fsync
        os.fdatasync = fdatasync


# --- producers ------------------------------------------------------------------------------------
class Producer:
    """One producer thread: single puts, same-queue batches and mixed batches, forever."""

    def __init__(
        self,
        store: MessageStore,
        seed: int,
        tid: int,
        out: _Out,
        *,
        pace_ms: float = 0.0,
        routes: Sequence[tuple[str, int]] = ROUTES,
    ) -> None:
        self.store = store
        self.routes = routes
        self.pace = pace_ms / 1000
        self.seed = seed
        self.tid = tid
        self.out = out
        self.rng = random.Random(f"{seed}-{tid}")
        self.seq = 0

    def _message(self, topic: str, queue_id: int) -> tuple[str, Message]:
        key = f"w{self.seed}-t{self.tid}-{self.seq}"
        self.seq += 1
        body = make_body(key, self.rng)
        return key, Message(topic, body, tags=f"T{self.seq % 3}", keys=[key], queue_id=queue_id)

    def _route(self) -> tuple[str, int]:
        return self.rng.choice(self.routes)

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.6:
            batch = [self._message(*self._route())]
        elif r < 0.8:
            topic, qid = self._route()
            batch = [self._message(topic, qid) for _ in range(self.rng.randint(2, 24))]
        else:
            batch = [self._message(*self._route()) for _ in range(self.rng.randint(2, 12))]
        msgs = [m for _, m in batch]
        results = self.store.put_messages(msgs) if len(msgs) > 1 else [self.store.put_message(msgs[0])]
        lines = []
        for (key, msg), res in zip(batch, results):
            if res.status is PutStatus.PUT_OK:
                lines.append(format_ack(key, msg.body, res))
            else:
                lines.append(f"# {key} {res.status.value}\n")
        self.out.write("".join(lines))

    def run(self) -> None:
        try:
            while True:
                self.step()
                if self.pace:
                    time.sleep(self.rng.uniform(0, self.pace))
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(3)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.crash.writer", description=__doc__.split("\n")[0])
    parser.add_argument("store_dir", type=Path)
    parser.add_argument("--flush", choices=["SYNC_FLUSH", "ASYNC_FLUSH"], default="SYNC_FLUSH")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--segment-size", type=int, default=65536)
    parser.add_argument("--cq-entries", type=int, default=100)
    parser.add_argument(
        "--routes", type=int, default=len(ROUTES), help="how many (topic, queue) pairs to use"
    )
    parser.add_argument("--pace-ms", type=float, default=0.0, help="sleep up to this long between puts")
    parser.add_argument("--shadow", type=Path, default=None, help="power-loss simulation: the shadow dir")
    args = parser.parse_args(argv)

    shadow = None
    if args.shadow is not None:
        shadow = PowerLossShadow(args.store_dir, args.shadow)
        shadow.install()
    out = _Out()
    out.write("OPENING\n")
    store = MessageStore.open(args.store_dir, crash_config(args.flush, args.segment_size, args.cq_entries))
    if shadow is not None:
        shadow.mark_open()
    out.write(f"READY\t{os.getpid()}\n")
    routes = random.Random(args.seed).sample(ROUTES, max(1, min(args.routes, len(ROUTES))))
    starters: list[Callable[[], None]] = [
        Producer(store, args.seed, tid, out, pace_ms=args.pace_ms, routes=routes).run
        for tid in range(args.threads)
    ]
    threads = [threading.Thread(target=s, name=f"producer-{i}", daemon=True) for i, s in enumerate(starters)]
    for t in threads:
        t.start()
    while True:  # until killed; a producer that fails ends the process with status 3
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
