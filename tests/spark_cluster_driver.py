"""The Spark driver of tests/test_spark_cluster.py, run in its own process (a process has one
SparkContext, and the other Spark tests hold a local one).

    python tests/spark_cluster_driver.py MASTER_URL STORE OUT_DIR RESULT_JSON

Connects to the standalone cluster at MASTER_URL, waits (bounded) until both of its executors
have registered, then, each through the ``rocketstore`` source on the executors:

- reads every row of STORE from the commitlog (4 partitions), each row tagged, in the scan's own
  tasks, with its partition and the work directory of the executor that ran it;
- reads them again with ``read_on_hosts``, each task preferring the executors' host;
- reads one topic through the consume queues with Kafka's options (``subscribe``,
  ``startingOffsets`` as JSON, ``endingOffsets``);
- streams two topics of STORE into the store OUT_DIR/stream with the streaming sink
  (``maxOffsetsPerTrigger``, ``Trigger.AvailableNow``), twice on one checkpoint (the second run
  finds nothing new and must append nothing);
- writes the rows of one topic into the store OUT_DIR/batch with the batch sink.

What it saw goes to RESULT_JSON; the test checks it and the stores written.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from rocketstore.spark import session
from rocketstore.spark.hosts import read_on_hosts

WAIT_EXECUTORS_S = 180
SCAN_COLUMNS = "topic string, queue_id int, queue_offset long, body binary"


def wait_for_executors(spark: Any, count: int) -> None:
    """Until ``count`` executors have registered (the driver counts as one more)."""
    deadline = time.monotonic() + WAIT_EXECUTORS_S
    while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < count + 1:
        if time.monotonic() > deadline:
            raise SystemExit(f"{count} executors did not register within {WAIT_EXECUTORS_S} s")
        time.sleep(0.5)


def where_it_ran(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows, each with the task's partition and its executor's work directory (a standalone
    executor runs, with its Python workers, in ``WORKER_DIR/APP_ID/EXECUTOR_ID``)."""
    from pyspark import TaskContext

    here, task = os.getcwd(), TaskContext.get()
    partition = task.partitionId() if task is not None else -1
    for b in batches:
        yield pa.RecordBatch.from_arrays(
            [*b.columns, pa.array([here] * b.num_rows), pa.array([partition] * b.num_rows, type=pa.int32())],
            names=[*b.schema.names, "executor_dir", "partition"],
        )


def main(master: str, store: str, out_dir: str, result_path: str) -> None:
    spark = session(
        master,
        "rocketstore-cluster-test",
        **{
            "spark.ui.showConsoleProgress": "false",
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": "2",
            "spark.sql.shuffle.partitions": "4",
        },
    )
    spark.sparkContext.setLogLevel("WARN")
    result: dict[str, Any] = {}
    try:
        wait_for_executors(spark, 2)

        scan = spark.read.format("rocketstore").option("minPartitions", "4").load(store)
        rows = (
            scan.select("topic", "queue_id", "queue_offset", "body")
            .mapInArrow(where_it_ran, f"{SCAN_COLUMNS}, executor_dir string, partition int")
            .collect()
        )
        result["scan_partitions"] = scan.rdd.getNumPartitions()
        result["scan_tasks"] = sorted({(r.partition, r.executor_dir) for r in rows})
        result["scan_rows"] = sorted(
            [r.topic, r.queue_id, r.queue_offset, bytes(r.body).decode()] for r in rows
        )

        # the same rows, planned and read by tasks preferring the executors' host
        status = spark.sparkContext._jsc.sc().getExecutorMemoryStatus()
        host = str(status.keys().head()).rpartition(":")[0]
        placed = read_on_hosts(spark, [(host, store)], minPartitions="4")
        result["hosts_rows"] = sorted(
            [r.topic, r.queue_id, r.queue_offset, bytes(r.body).decode()]
            for r in placed.select("topic", "queue_id", "queue_offset", "body").collect()
        )

        kafka = (
            spark.read.format("rocketstore")
            .option("subscribe", "Orders")
            .option("startingOffsets", json.dumps({"Orders": {"0": 10, "1": -2}}))
            .option("endingOffsets", json.dumps({"Orders": {"1": 20}}))
            .load(store)
        )
        result["kafka_rows"] = sorted(
            [r.topic, r.queue_id, r.queue_offset]
            for r in kafka.select("topic", "queue_id", "queue_offset").collect()
        )

        # the executors' stores must not reclaim or refuse what the test writes, however full the
        # test machine's disk is (they have no half-full stand-in: see conftest.half_full_disk)
        sink_config = Path(out_dir) / "sink.toml"
        sink_config.write_text(
            "disk_max_used_space_ratio = 100\ndisk_clean_forcibly_ratio = 100\ndisk_warning_ratio = 100\n"
        )
        checkpoint = str(Path(out_dir) / "checkpoint")
        for _ in range(2):  # the second run of the query finds nothing new
            (
                spark.readStream.format("rocketstore")
                .option("subscribe", "Orders,Payments")
                .option("maxOffsetsPerTrigger", "700")
                .load(store)
                .select("topic", "body", "tags", "keys")
                .writeStream.format("rocketstore")
                .option("config", str(sink_config))
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start(str(Path(out_dir) / "stream"))
                .awaitTermination(300)
            )
        result["stream_batches"] = len(list((Path(checkpoint) / "commits").glob("[0-9]*")))

        (
            spark.read.format("rocketstore")
            .option("subscribe", "Shipments")
            .load(store)
            .select("topic", "body", "tags", "keys")
            .write.format("rocketstore")
            .mode("append")
            .option("config", str(sink_config))
            .save(str(Path(out_dir) / "batch"))
        )
    finally:
        spark.stop()
    Path(result_path).write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:5])
