"""The main job of ``make run``: write a sample workload into a store, read it back, show it.

    python -m rocketstore.demo [STORE_DIR]      (default ./store)

Running it again appends another round: queue offsets continue where the last run stopped.
The store uses a small geometry (64 MiB commitlog segments, small index files) so that a demo
store does not reserve gigabytes of disk; open it with ``DEMO_CONFIG``.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from rocketstore.cli import main as cli
from rocketstore.config import StoreConfig
from rocketstore.message import Message
from rocketstore.shutdown import exit_on_sigterm
from rocketstore.store import MessageStore
from rocketstore.times import format_time
from rocketstore.warm import warm

__all__ = ["DEMO_CONFIG", "main"]

DEMO_CONFIG = StoreConfig(
    commitlog_segment_size=64 << 20,
    consume_queue_entries=30_000,
    index_hash_slots=65_536,
    index_max_entries=262_144,
)
TOPICS = ("Orders", "Payments", "Audit")  # 4 queues each (default_topic_queue_nums)


def main(argv: list[str] | None = None) -> int:
    """The demo; a SIGTERM closes the store cleanly on the way out (exit 143)."""
    with exit_on_sigterm():
        return _demo(sys.argv[1:] if argv is None else argv)


def _demo(args: list[str]) -> int:
    root = Path(args[0] if args else "store")
    # compiled before anything is timed: the figures below are the store's, not numba's
    warm(lambda line: print(line, file=sys.stderr, flush=True))
    with MessageStore.open(root, DEMO_CONFIG) as store:
        run = store.max_offset_in_queue("Orders", 0)
        last_exit = "a crash" if store.abnormal_shutdown_detected else "a clean close"
        end = store.recovery.end_offset if store.recovery else 0
        print(f"store {root.resolve()}: opened after {last_exit}, recovered the commitlog up to offset {end}")
        batch = [
            Message(
                topic=topic,
                body=f"{topic.lower()} event {run + i}: amount={i * 7 % 100}".encode(),
                tags=("created", "paid", "shipped")[i % 3],
                keys=[f"{topic.lower()}-{run + i}", f"customer-{i % 5}"],
                properties={"source": "demo"},
            )  # no queue_id: the store spreads each topic's messages round robin over its queues
            for topic in TOPICS
            for i in range(40)
        ]
        new = store.max_phy_offset() == 0
        started = time.perf_counter()
        results = store.put_messages(batch)
        single = store.put_message(
            Message(topic="Orders", body="héllo, 世界".encode(), tags="greeting", keys=["hello"], queue_id=0)
        )
        delayed = store.put_message(
            Message(topic="Orders", body=b"remind me in 10s", keys=["reminder"], delay_level=3, queue_id=1)
        )
        store.wait_dispatched()
        elapsed = time.perf_counter() - started
        print(
            f"put {len(results) + 2} messages in {elapsed * 1000:.1f} ms "
            f"(all ok: {all(r.ok for r in [*results, single, delayed])}); "
            f"commitlog now {store.min_phy_offset()}..{store.max_phy_offset()}"
        )
        if new:
            print("  (a new store: that time includes creating its commitlog segment, queue and index files)")

        print("\nqueues (topic/queue: min..max offset)")
        for topic, queues in store.topics().items():
            ranges = ", ".join(
                f"{q}: {store.min_offset_in_queue(topic, q)}..{store.max_offset_in_queue(topic, q)}"
                for q in queues
            )
            print(f"  {topic:<22} {ranges}")

        group = "demo-group"
        start = max(store.query_offset(group, "Orders", 0), 0)
        got = store.get_message(group, "Orders", 0, start, max_msgs=5)
        print(f"\nconsumer {group!r} reads Orders/0 from its committed offset {start}:")
        print(f"  {got.status.name}: {len(got.messages)} messages, next offset {got.next_begin_offset}")
        for m in got.messages:
            print(f"  #{m.queue_offset} tags={m.tags} keys={m.keys} body={m.body.decode()!r}")
        store.commit_offset(group, "Orders", 0, got.next_begin_offset)
        print(f"  committed offset {got.next_begin_offset} (config/consumerOffset.json, kept across runs)")

        paid = store.get_message("demo-group", "Payments", 1, 0, max_msgs=32, tags="paid")
        print(f"\nPayments/1 filtered by tag 'paid': {len(paid.messages)} of {paid.next_begin_offset} read")

        hits = store.query_message("Orders", "customer-1")
        print(
            f"query Orders key 'customer-1': {len(hits)} messages over all runs, newest "
            f"{hits[0].body.decode()!r}"
            if hits
            else "query found nothing"
        )
        by_id = store.view_message_by_id(single.msg_id or "")
        print(f"by offsetMsgId {single.msg_id}: {by_id.body.decode() if by_id else None!r}")
        sched = store.look_message_by_offset(delayed.physical_offset)
        if sched is not None:
            print(
                f"delayed message waits in {sched.topic}/{sched.queue_id} until "
                f"{format_time(sched.tags_code)} "
                f"(real topic {sched.properties['REAL_TOPIC']})"
            )
    print("\nstore closed cleanly. What the `rocketstore` command says about it:\n")
    cli(["status", str(root)])
    print()
    cli(["topics", str(root)])
    _on_spark(root)
    print("\nrun again to append another round; try `.venv/bin/rocketstore --help`")
    return 0


def _on_spark(root: Path) -> None:
    """The store read back as a DataFrame through the `rocketstore` Spark source."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        print("\n(Java is not installed: the Spark part of the demo is skipped)")
        return
    from pyspark.sql import functions as F

    from rocketstore.spark import session, small_job_conf

    print("\nthe same store as a Spark DataFrame (spark.read.format('rocketstore')):\n", flush=True)
    spark = session("local[2]", "rocketstore-demo", **small_job_conf(root, "local[2]"))
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = spark.read.format("rocketstore").option("source", "queues").load(str(root))
        df.groupBy("topic").agg(
            F.count("*").alias("messages"),
            F.sum(F.length("body")).alias("body_bytes"),
            F.max("store_timestamp").alias("last_stored"),
        ).orderBy("topic").show(truncate=False)
    finally:
        spark.stop()


if __name__ == "__main__":
    raise SystemExit(main())
