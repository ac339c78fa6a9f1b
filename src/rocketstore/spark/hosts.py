"""A cluster's stores read each on its own machine: ``read_on_hosts``.

``spark.read.format("rocketstore")`` plans on the driver and reads on whichever executor Spark
picks: PySpark's Python data source API gives a partition no preferred location (docs/spark.md,
"Stores on machines that share no disk"), so every machine must see every store. This reads a
list of ``(host, store path)`` through Spark's own task locality instead, in two jobs:

1. one task per store, preferring its host, plans the store's partitions there (the source's
   plan for that store alone, with the same options) and sends them back with the reader;
2. one task per partition, preferring the same host, reads it.

The rows are the source's, with the ``broker`` column: each store's broker is option
``brokers`` (one name per store, comma-separated), else its ``broker.conf``'s ``brokerName``,
else its directory's name; two stores with one name are refused. Spark's filters are not pushed
down into the scan (this is no data source): narrow it with the source's options (``topics``,
``startingTimestamp`` ...). Batch reads only.

Locality is Spark's preference, not a promise: when no executor on a store's host takes its task
within ``spark.locality.wait`` (3 s by default), Spark runs it elsewhere, where the store is not;
the task then fails naming the host it was meant for, and Spark retries it up to
``spark.task.maxFailures`` times. Run executors on every store's host, and give busy clusters a
longer ``spark.locality.wait``.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import socket
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rocketstore.spark.options import check_known

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.core.rdd import RDD
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["read_on_hosts"]

# the options that say which stores are read: this function's arguments instead
_STORE_OPTIONS = frozenset(("path", "paths", "brokers"))


def read_on_hosts(
    spark: SparkSession,
    stores: Sequence[tuple[str, str | os.PathLike[str]]],
    **options: str,
) -> DataFrame:
    """The rows of the stores ``[(host, path), ...]``, each planned and read by an executor on
    its host (see the module docstring); ``options`` are the source's (``brokers`` among them:
    one name per store, comma-separated)."""
    from rocketstore.spark.source import spark_schema

    if not stores:
        raise ValueError("read_on_hosts: no store given")
    given = {k.lower(): str(v) for k, v in options.items()}
    check_known(given)
    names = [n.strip() for n in given.pop("brokers").split(",")] if "brokers" in given else None
    misplaced = sorted(k for k in given if k in _STORE_OPTIONS)
    if misplaced:
        raise ValueError(f"read_on_hosts: the stores are its argument, not option {', '.join(misplaced)}")
    relative = [os.fspath(path) for _, path in stores if not os.path.isabs(os.fspath(path))]
    if relative:
        raise ValueError(
            f"read_on_hosts: store paths are read on other machines: give them whole, not {relative[0]!r}"
        )
    if names is not None and len(names) != len(stores):
        raise ValueError(f"option brokers names {len(names)} brokers for {len(stores)} stores")
    sc = spark.sparkContext
    if (sc.master or "").startswith("local"):
        # one machine: every store is here (and a local master never offers a task again to a
        # task set waiting for a host it has no executor on: it would wait for ever)
        stores = [(str(sc.getConf().get("spark.driver.host")), path) for _, path in stores]
    work = [
        json.dumps([i, str(host), os.fspath(path), names[i] if names else None, given])
        for i, (host, path) in enumerate(stores)
    ]
    planned = [
        json.loads(line) for line in _placed(spark, work, [h for h, _ in stores]).flatMap(_plan).collect()
    ]
    seen: dict[str, tuple[int, str]] = {}
    for i, host, root, broker, _ in planned:
        other, where = seen.setdefault(broker, (i, f"{host}:{root}"))
        if other != i:
            raise ValueError(
                f"stores {where} and {host}:{root} are both broker {broker!r}: name them apart with "
                "option brokers"
            )
    body_as = given.get("bodyas", "binary").lower()
    schema = spark_schema(
        "string" if body_as == "string" else "binary",
        given.get("includeheaders", "false").lower() == "true",
        broker=True,
    )
    parts = [(blob, host) for _, host, _, _, blob in planned if blob is not None]
    if not parts:
        return spark.createDataFrame([], schema)
    rdd = _placed(spark, [blob for blob, _ in parts], [host for _, host in parts])
    return spark.createDataFrame(rdd.map(lambda blob: (blob,)), "part string").mapInArrow(_read, schema)


def _placed(spark: SparkSession, items: list[str], hosts: list[str]) -> RDD[str]:
    """An RDD of ``items``, one partition each, ``items[i]`` preferring to run on ``hosts[i]``
    (SparkContext.makeRDD with location preferences, which PySpark does not expose)."""
    from pyspark.core.rdd import RDD
    from pyspark.serializers import UTF8Deserializer

    sc = spark.sparkContext
    jvm = sc._jvm
    assert jvm is not None

    def seq(values: list[Any]) -> Any:
        java_list = jvm.java.util.ArrayList()
        for v in values:
            java_list.add(v)
        return jvm.scala.jdk.javaapi.CollectionConverters.asScala(java_list).toSeq()

    pairs = seq([jvm.scala.Tuple2(item, seq([host])) for item, host in zip(items, hosts, strict=True)])
    strings = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("java.lang.String"))
    return RDD(sc._jsc.sc().makeRDD(pairs, strings).toJavaRDD(), sc, UTF8Deserializer())  # type: ignore[no-untyped-call]


def _plan(line: str) -> Iterator[str]:
    """On the store's host: its partitions, each as ``[store index, host, root, broker, blob]``
    (blob: the reader and the partition, pickled), or one line with no blob when it has none."""
    from pyspark.sql.datasource import CaseInsensitiveDict

    from rocketstore.spark.source import RocketStoreReader

    index, host, root, broker, given = json.loads(line)
    _check_here(host, root)
    options = CaseInsensitiveDict({**given, "paths": json.dumps([root])})
    if broker is not None:
        options["brokers"] = broker
    reader = RocketStoreReader(options)
    (name,) = reader.stores
    parts = reader.partitions()
    if not parts:
        yield json.dumps([index, host, root, name, None])
    for part in parts:
        blob = base64.b64encode(pickle.dumps((host, root, reader, part))).decode("ascii")
        yield json.dumps([index, host, root, name, blob])


def _read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """On the store's host: the rows of each pickled partition of ``batches``."""
    for batch in batches:
        for blob in batch.column(0).to_pylist():
            host, root, reader, part = pickle.loads(base64.b64decode(blob))
            _check_here(host, root)
            yield from reader.read(part)


def _check_here(host: str, root: str) -> None:
    if not os.path.isdir(root):
        raise FileNotFoundError(
            f"store {root} is not on this executor's machine ({socket.gethostname()}); its task was "
            f"meant for host {host}, which took no task within spark.locality.wait: run an executor "
            "there, or wait longer (spark.locality.wait)"
        )
