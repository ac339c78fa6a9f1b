"""Compile the kernels into numba's cache before anyone waits on them.

    python -m rocketstore.warm

numba compiles a kernel the first time it runs with given argument types and keeps the machine
code in ``__pycache__`` beside its source (``cache=True``); without this, the first put, ``verify``
or Spark read of a fresh install spends tens of seconds compiling, without a word. ``warm()`` runs
every kernel's work once on a throwaway store in a temporary directory: puts (single, batch,
columnar, delayed, and producers' encoded batches as the remoting broker's SEND_BATCH_MESSAGE
stores them), dispatch, reads, queries, recovery, ``verify`` and the Spark source's reads
(without Spark); ``tests/test_warm.py`` fails when a kernel is reached by none of it. ``make``
runs it after installing and the demo before it times anything; when the cache is already there
it loads in about a second. The cache follows the source files: an edited module compiles again
on its next use (or the next ``warm``). ``preload()`` loads the kernels a broker's first sends
run into the running process (``rocketstore serve`` calls it as it starts); ``preload_reads()``
those a consumer's reads run (a process that follows a busy writer calls it before it reads).

With Java and PySpark present it also records, once, the class archive that local Spark jobs'
driver JVM maps to start quicker (``rocketstore.spark.class_archive``: about a minute, about 180 MB
in the user's cache directory).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocketstore.config import StoreConfig
    from rocketstore.store import MessageStore

__all__ = ["preload", "preload_reads", "warm", "warm_spark"]


def warm(say: Callable[[str], None] = print) -> tuple[int, int]:
    """Load (or compile) every kernel; returns (compiled now, loaded from the cache)."""
    import numba  # noqa: F401 - first: with numba loaded every kernel runs compiled (jit.small)

    from rocketstore import jit

    say("rocketstore: preparing the compiled kernels (the first time numba compiles them: about a minute)")
    started = time.perf_counter()
    logging.disable(logging.WARNING)  # the damage it makes on purpose is not news
    try:
        with tempfile.TemporaryDirectory(prefix="rocketstore-warm-") as tmp:
            _workload(Path(tmp) / "store")
    finally:
        logging.disable(logging.NOTSET)
    compiled = hits = 0
    for _, dispatcher in jit.kernels():
        if dispatcher is not None:
            compiled += sum(dispatcher.stats.cache_misses.values())
            hits += sum(dispatcher.stats.cache_hits.values())
    elapsed = time.perf_counter() - started
    say(
        f"rocketstore: kernels ready in {elapsed:.1f} s "
        f"({compiled} compiled into numba's cache now, {hits} loaded from it)"
    )
    return compiled, hits


def preload() -> None:
    """Load numba and the kernels a broker's first sends run into this process, from numba's
    cache, without a store (no file written, no log line): ``rocketstore serve`` runs it on a
    thread as it starts, so its first sends do not wait a second or more for numba to load (its
    import, its compiler's start, the kernels of the batch encoder and the remoting reader)."""
    from rocketstore.clock import SystemClock
    from rocketstore.codec.message_batch import BatchEntry, EncodedBatch, encode_batch_body
    from rocketstore.codec.properties import encode_properties
    from rocketstore.prepare import MessageEncoder

    props = encode_properties({"TAGS": "a", "KEYS": "k", "UNIQ_KEY": "U"})
    body = encode_batch_body([BatchEntry(0, b"x", props)])
    MessageEncoder(scratch_config(), SystemClock()).prepare_encoded(
        [EncodedBatch("Warm", 0, body, "127.0.0.1:10911", int(time.time() * 1000))]
    )
    _remoting_frames()


def preload_reads() -> None:
    """Load numba and the kernels a consumer's reads run (``poll``, ``poll_batch``, ``read_batch``,
    ``get_message``) into this process, from numba's cache, without a store: about half a second,
    which a process that reads a writer's every message would otherwise spend in its first large
    read, with the writer going on (``benchmarks/follower.py --all``). A short-lived reader of a few
    messages does without: it reads them as Python (``jit.small``)."""
    import numba  # noqa: F401 - loaded: small() then runs the kernels compiled
    import numpy as np

    from rocketstore.codec.commitlog_scan import copy_spans, gather_records

    none = np.zeros(0, dtype=np.int64)
    for segment in (bytes(8), bytearray(8)):  # a follower's map is read-only, a writer's is not
        gather_records(segment, none, none, 0)
        copy_spans(segment, none, none, bytearray(), 0)


def scratch_config() -> StoreConfig:
    """The geometry of a throwaway store in a temporary directory (warm's, the class archive's
    job): a few MB, which a nearly full disk must not refuse."""
    from rocketstore.config import StoreConfig

    return StoreConfig(
        commitlog_segment_size=1 << 20,
        consume_queue_entries=1000,
        index_hash_slots=64,
        index_max_entries=1024,
        disk_max_used_space_ratio=100,
        disk_clean_forcibly_ratio=100,
        disk_warning_ratio=100,
    )


def _workload(root: Path) -> None:
    from rocketstore.codec.checkpoint import Checkpoint, encode_checkpoint
    from rocketstore.ha.transfer_check import prepare_transfer_check
    from rocketstore.message import Message
    from rocketstore.results import RecordRead
    from rocketstore.store import MessageStore
    from rocketstore.verify import verify_store

    cfg = scratch_config()
    with MessageStore.open(root, cfg) as store:
        store.put_messages(
            [
                Message("Warm", b"x" * i, tags="a", keys=[f"k{i}", "k"], properties={"p": "v"})
                for i in range(64)
            ]
        )
        one = store.put_message(Message("Warm", b"one", tags="b", keys=["one"], queue_id=0))
        store.put_message(Message("Warm", b"later", delay_level=1, queue_id=1))
        store.put_batch("Warm", [b"c" * 10] * 64, tags="c", keys=[f"c{i}" for i in range(64)])
        store.put_batch("Warm", [b"d"] * 8, queue_ids=2)
        _producer_batches(store)  # the remoting broker's SEND_BATCH_MESSAGE
        _remoting_frames()  # and its reader's frames, sends in bulk
        store.wait_dispatched()
        for q in store.topics()["Warm"]:
            store.get_message("warm", "Warm", q, 0, 32)
            store.get_message("warm", "Warm", q, 0, 32, "a || c")
            store.read_batch("Warm", q, 0)
            store.read_batch("Warm", q, 0, bodies=False)
        store.get_records([RecordRead("Warm", q, 0, 32) for q in store.topics()["Warm"]])
        store.query_message("Warm", "k")
        store.query_by_uniq_key("Warm", "none")
        store.view_message_by_id(one.msg_id or "")
    with MessageStore.open(root, cfg, readonly=True) as readonly:  # recovery's scan
        readonly.get_records([RecordRead("Warm", 0, 0, 32)])  # a follower's maps are read-only
    verify_store(root, cfg)
    verify_store(root, cfg, check_crc=False)
    _spark_reads(root)
    prepare_transfer_check()  # a replica's check of what its master sends
    # a restart that lost its queues and index dispatches again from the log, in columns
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    with MessageStore.open(root, cfg) as store:
        store.wait_dispatched()
        store.offset_in_queue_by_time("Warm", 0, int(time.time() * 1000))
    # a crash whose checkpoint was flushed before the last records: recovery looks at them for a
    # page a power cut lost
    (root / "checkpoint").write_bytes(encode_checkpoint(Checkpoint(1, 1, 1)))
    (root / "abort").touch()
    with MessageStore.open(root, cfg) as store:
        store.wait_dispatched()
    # damage: verify and recovery look for where valid records start again
    second = int.from_bytes((root / "commitlog" / f"{0:020d}").read_bytes()[:4], "big")
    with open(root / "commitlog" / f"{0:020d}", "r+b") as segment:
        segment.seek(second + 4)
        segment.write(b"\0\0\0\0")
    verify_store(root, cfg)
    with MessageStore.open(root, cfg, readonly=True):
        pass


def _producer_batches(store: MessageStore) -> None:
    """Producers' batches in RocketMQ's encoding, as the remoting broker stores a
    SEND_BATCH_MESSAGE (``put_encoded_batches``), and the properties splitter over them."""
    import numpy as np

    from rocketstore.codec.message_batch import BatchEntry, EncodedBatch, encode_batch_body
    from rocketstore.codec.properties import encode_properties, property_spans

    props = [encode_properties({"TAGS": "e", "KEYS": f"e{i}", "UNIQ_KEY": f"U{i:030d}"}) for i in range(16)]
    body = encode_batch_body([BatchEntry(0, b"e" * i, p) for i, p in enumerate(props)])
    born = int(time.time() * 1000)
    store.put_encoded_batches(
        [
            EncodedBatch("Warm", 3, body, "127.0.0.1:10911", born, {"CLUSTER": "warm"}),
            EncodedBatch("Warm", 0, body, "[::1]:10911", born),
        ]
    )
    text = "".join(props).encode()
    lengths = np.array([len(p.encode()) for p in props], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    property_spans(text, starts, lengths, ("TAGS", "KEYS"))


def _remoting_frames() -> None:
    """The remoting broker's compiled reader and answers: a read of single and batch sends in
    both header encodings taken apart (``scan_frames``), checked and counted (``bulk_sends``'
    ``_kept``, ``_round_counts``) and answered (``encode_send_answers``), and pulls' answers
    (``encode_pull_answers``), with the argument types the broker passes."""
    import numpy as np

    from rocketstore.broker.remoting.bulk_sends import _kept, _round_counts
    from rocketstore.broker.remoting.codes import RequestCode
    from rocketstore.broker.remoting.command import (
        SCAN_KIND,
        SCAN_TOPIC,
        SERIALIZE_JSON,
        SERIALIZE_ROCKETMQ,
        RemotingCommand,
        encode_command,
        encode_pull_answers,
        encode_send_answers,
        scan_consumer_request,
        scan_frames,
    )
    from rocketstore.broker.remoting.headers import SendMessageHeader
    from rocketstore.codec.message_batch import BatchEntry, encode_batch_body

    born = int(time.time() * 1000)
    props = "TAGS\x01a\x02UNIQ_KEY\x01U\x02WAIT\x01true"
    frames = []
    for kind in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
        for batch in (False, True):
            header = SendMessageHeader(
                "g", "Warm", "TBW102", 4, 0, 0, born, 0, props, 0, False, None, batch, None
            )
            body = encode_batch_body([BatchEntry(0, b"x", "UNIQ_KEY\x01V")]) if batch else b"x"
            code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
            cmd = RemotingCommand(code, ext_fields=header.to_ext(), body=body, serialize_type=kind)
            frames.append(b"".join(bytes(part) for part in encode_command(cmd)))
    cluster = np.frombuffer(b"CLUSTER\x01Warm", dtype=np.uint8)
    _, _, cols, _, _, _, _ = scan_frames(
        np.frombuffer(b"".join(frames), dtype=np.uint8), 1 << 20, 1 << 20, cluster
    )
    sends = np.ascontiguousarray(cols[:, cols[SCAN_KIND] >= 0])
    ends = np.arange(1, sends.shape[1] + 1, dtype=np.int64)
    text = np.frombuffer(b"", dtype=np.uint8)
    encode_send_answers(
        sends, ends - 1, ends - 1, ends, 0, np.frombuffer(b"7F00000100002A9F", dtype=np.uint8), text, text
    )
    _kept(sends, np.array([8]), np.array([8]))
    _round_counts(sends[SCAN_TOPIC] * 0, sends, ends, ends)
    # a pull request in either encoding, read as the broker's reader reads it
    for kind in (SERIALIZE_JSON, SERIALIZE_ROCKETMQ):
        pull = RemotingCommand(
            RequestCode.PULL_MESSAGE,
            ext_fields={"consumerGroup": "g", "topic": "Warm", "queueId": "0", "queueOffset": "0",
                        "maxMsgNums": "32", "sysFlag": "2", "suspendTimeoutMillis": "1000"},
            serialize_type=kind,
        )  # fmt: skip
        encoded = b"".join(bytes(part) for part in encode_command(pull))
        scan_consumer_request(np.frombuffer(encoded, dtype=np.uint8), 4, len(encoded) - 4)
    # pulls' answers, as bulk_pulls writes them: one found, one not
    two = np.arange(2, dtype=np.int64)
    records = np.frombuffer(bytearray(8), dtype=np.uint8)
    encode_pull_answers(
        two, two, two * 19, np.zeros((4, 2), dtype=np.int64), two - 1, np.zeros(4, dtype=np.uint8),
        np.array([0, 4], dtype=np.int64), records, two * 4, two * 4 + 4,
    )  # fmt: skip


def _spark_reads(root: Path) -> None:
    """The Spark source's column builders, without Spark (they need pyarrow, which PySpark brings)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return
    from rocketstore.spark.scan import (
        ScanBounds,
        ScanOptions,
        StoreFiles,
        plan_commitlog,
        plan_queues,
        read_commitlog_range,
        read_queue_range,
    )

    files = StoreFiles.at(root)
    now = int(time.time() * 1000)
    for bounds in (
        ScanBounds(),
        ScanBounds(store_time=(now - 3_600_000, now + 3_600_000), queue_offset=(1, 50)),
        ScanBounds(topics=frozenset(("Warm",))),
    ):
        for options in (ScanOptions(bounds=bounds), ScanOptions(body_as="string", bounds=bounds)):
            for part in plan_commitlog(files, bounds, 2):
                for _ in read_commitlog_range(part, options):
                    pass
            for qpart in plan_queues(files, bounds):
                for _ in read_queue_range(files, qpart, options):
                    pass


def warm_spark(say: Callable[[str], None] = print) -> None:
    """Record the local driver JVM's class archive (``rocketstore.spark.class_archive``) when
    Java and PySpark are here and there is none yet; a failure is said, not raised (Spark jobs
    then start slower, nothing else)."""
    try:
        from rocketstore.spark import class_archive
    except ImportError:
        return
    if class_archive.archive() is not None:
        return
    say("rocketstore: recording Spark's class archive for quicker local jobs (about a minute, once)")
    started = time.perf_counter()
    try:
        path = class_archive.build()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        say(f"rocketstore: no class archive, local Spark jobs start slower: {exc}")
        return
    if path is not None:
        say(f"rocketstore: class archive ready in {time.perf_counter() - started:.0f} s: {path}")


def main() -> int:
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    warm(say)
    warm_spark(say)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
