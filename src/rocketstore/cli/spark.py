"""``rocketstore spark ...``: the Spark jobs and the Spark maintenance from the command line.

    rocketstore spark export STORE OUT [--format parquet|json] [--topic T ...] [--source commitlog|queues]
    rocketstore spark stats STORE OUT
    rocketstore spark verify STORE          # exit 0 clean, 1 damaged (printed as `rocketstore verify` does)
    rocketstore spark rebuild STORE         # new consumequeue/ and index/ from the commitlog

Each command starts a SparkSession on ``--master`` (default ``local[*]``) and stops it when done,
unless the process already had one (then that one is used, and left running). PySpark and the jobs
are imported inside the commands: ``rocketstore --help`` and the other commands never load them.
Errors are one line on stderr and a non-zero exit, Spark's included.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rocketstore.cli.output import Output

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


__all__ = ["spark_group"]

_STORE = click.argument("store_dir", metavar="STORE", type=click.Path(path_type=Path))
_OUT = click.argument("out", metavar="OUT", type=click.Path(path_type=Path))
_MASTER = click.option(
    "--master", default="local[*]", show_default=True, help="Spark master URL (local[N], spark://..., yarn)."
)
_JSON = click.option("--json", "as_json", is_flag=True, help="One JSON object instead of text.")
_TOPICS = click.option("--topic", "-t", "topics", multiple=True, help="Only this topic (repeatable).")
_SOURCE = click.option(
    "--source",
    type=click.Choice(["commitlog", "queues"]),
    default="commitlog",
    show_default=True,
    help="commitlog: every record; queues: dispatched messages only, through the consume queues.",
)
# a Python exception raised inside a Spark worker arrives as text ending in "module.Class: message"
_ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception): (.*)$")
_CONDITION = re.compile(r"^\[[A-Z0-9_.]+\]\s*")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+\s*$")


@click.group("spark")
def spark_group() -> None:
    """Spark jobs and maintenance: export, stats, verify, rebuild (PySpark, Java 17+)."""


@spark_group.command()
@_STORE
@_OUT
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["parquet", "json"]),
    default="parquet",
    show_default=True,
    help="parquet: partitioned by topic and UTC date; json: JSON Lines.",
)
@_TOPICS
@_SOURCE
@_MASTER
@_JSON
def export(
    store_dir: Path, out: Path, fmt: str, topics: tuple[str, ...], source: str, master: str, as_json: bool
) -> None:
    """Write STORE's messages to the new directory OUT (Parquet or JSON Lines)."""
    from rocketstore.spark import jobs

    _check_store(store_dir)
    jobs.refuse_existing(out)
    with _session(master, store_dir) as spark:
        rows = jobs.export(spark, str(store_dir), str(out), fmt=fmt, **_read_options(topics, source))
    Output(as_json).detail("exported", {"rows": rows, "format": fmt, "out": str(out)})


@spark_group.command()
@_STORE
@_OUT
@_TOPICS
@_SOURCE
@_MASTER
@_JSON
def stats(
    store_dir: Path, out: Path, topics: tuple[str, ...], source: str, master: str, as_json: bool
) -> None:
    """Per topic/queue/hour figures (OUT/stats.parquet) and two charts (OUT/*.png)."""
    from rocketstore.spark import jobs

    _check_store(store_dir)
    for path in jobs.stats_paths(out).values():
        jobs.refuse_existing(path)
    with _session(master, store_dir) as spark:
        summary = jobs.stats(spark, str(store_dir), str(out), **_read_options(topics, source))
    output = Output(as_json)
    if as_json:
        output.json(summary)
        return
    paths = summary.pop("paths")
    output.detail("stats", {**summary, **paths})


@spark_group.command()
@_STORE
@click.option("--no-crc", is_flag=True, help="Skip body CRCs (structure only; faster).")
@_MASTER
@_JSON
@click.pass_context
def verify(ctx: click.Context, store_dir: Path, no_crc: bool, master: str, as_json: bool) -> None:
    """`rocketstore verify` with the work on Spark tasks. Exit 0 clean, 1 damaged."""
    maintenance = _maintenance()
    _check_store(store_dir)
    with _session(master, store_dir) as spark:
        report = maintenance.verify(spark, str(store_dir), check_crc=not no_crc)
    from rocketstore.cli.app import print_verify_report

    print_verify_report(Output(as_json), report)
    ctx.exit(0 if report.clean else 1)


@spark_group.command()
@_STORE
@_MASTER
@_JSON
def rebuild(store_dir: Path, master: str, as_json: bool) -> None:
    """Rebuild consumequeue/ and index/ of the closed store STORE from its commitlog, on Spark."""
    maintenance = _maintenance()
    _check_store(store_dir)
    with _session(master, store_dir) as spark:
        summary = maintenance.rebuild(spark, str(store_dir))
    Output(as_json).detail("rebuilt", summary)


# --- helpers ------------------------------------------------------------------------------------
def _read_options(topics: tuple[str, ...], source: str) -> dict[str, str]:
    options = {"source": source}
    if topics:
        options["topics"] = ",".join(topics)
    return options


def _check_store(root: Path) -> None:
    """The messages `rocketstore` gives, before a Spark session is started for nothing."""
    from rocketstore.storage.paths import looks_like_store

    if not root.is_dir():
        raise click.ClickException(f"no such directory: {root}")
    if not looks_like_store(root):
        raise click.ClickException(
            f"{root} is not a store directory (no commitlog, consumequeue or checkpoint)"
        )


def _maintenance() -> Any:
    try:
        from rocketstore.spark import maintenance
    except ImportError as exc:
        raise click.ClickException(f"Spark maintenance is not available: {exc}") from None
    return maintenance


@contextlib.contextmanager
def _session(master: str, store_dir: Path) -> Iterator[SparkSession]:
    """A SparkSession with the source registered (and, for a small store, a JVM that starts
    quicker: ``small_job_conf``); Spark's errors become one-line ClickExceptions."""
    try:
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]
        from pyspark.errors import PySparkException
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise click.ClickException(f"PySpark is needed for `rocketstore spark`: {exc}") from None
    from rocketstore.spark import session, small_job_conf

    owned = SparkSession.getActiveSession() is None
    # the progress bar is for a person watching; in a pipe or a log it is noise
    conf = {"spark.ui.showConsoleProgress": "true"} if sys.stderr.isatty() else {}
    if owned:
        conf.update(small_job_conf(store_dir, master))
    try:
        spark = session(master, "rocketstore-cli", **conf)
    except (PySparkException, Py4JError) as exc:
        raise click.ClickException(f"cannot start Spark on {master}: {_one_line(exc)}") from None
    if owned:
        spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    except (PySparkException, Py4JError) as exc:
        raise click.ClickException(_one_line(exc)) from None
    finally:
        if owned:
            spark.stop()


def _one_line(exc: BaseException) -> str:
    """Spark's message without its stack traces: for an error raised by our code in a Python
    worker, that error's own message; otherwise the first line, without the SQLSTATE."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if "Traceback (most recent call last)" in str(exc):
        for line in reversed(lines):
            found = _ERROR_LINE.match(_SQLSTATE.sub("", line))
            if found:
                return found.group(1)
    if not lines:
        return type(exc).__name__
    return _SQLSTATE.sub("", _CONDITION.sub("", lines[0])) or type(exc).__name__
