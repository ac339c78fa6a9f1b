"""``rocketstore spark ...``: the Spark jobs and the Spark maintenance from the command line.

    rocketstore spark export STORE... OUT [--format parquet|json] [--topic T ...] [--source commitlog|queues]
    rocketstore spark stats STORE... OUT
    rocketstore spark verify STORE...       # exit 0 clean, 1 damaged (printed as `rocketstore verify` does)
    rocketstore spark rebuild STORE...      # new consumequeue/ and index/ from the commitlog

Several STOREs are a cluster's stores, one per broker (``--broker NAME`` per STORE names them;
else ``rocketstore.spark.brokers``'s rule): export and stats read them as one data set with a
``broker`` column; verify and rebuild take them one after the other, each report naming its broker.

Each command starts a SparkSession on ``--master`` (default ``local[*]``) and stops it when done,
unless the process already had one (then that one is used, and left running). PySpark and the jobs
are imported inside the commands: ``rocketstore --help`` and the other commands never load them.
Errors are one line on stderr and a non-zero exit, Spark's included.
"""

from __future__ import annotations

import contextlib
import json
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

_STORES = click.argument(
    "store_dirs", metavar="STORE...", nargs=-1, required=True, type=click.Path(path_type=Path)
)
_BROKERS = click.option(
    "--broker",
    "brokers",
    multiple=True,
    help="The broker of each STORE, in order (repeat it once per STORE). Default: brokerName of "
    "STORE/broker.conf, else the directory's name. With it, or several STOREs, rows get a broker column.",
)
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
@_STORES
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
@_BROKERS
@_MASTER
@_JSON
def export(
    store_dirs: tuple[Path, ...],
    out: Path,
    fmt: str,
    topics: tuple[str, ...],
    source: str,
    brokers: tuple[str, ...],
    master: str,
    as_json: bool,
) -> None:
    """Write the messages of STORE (or of several, one per broker) to the new directory OUT
    (Parquet or JSON Lines)."""
    from rocketstore.spark import jobs

    stores, options = _stores(store_dirs, brokers)
    jobs.refuse_existing(out)
    with _session(master, store_dirs) as spark:
        rows = jobs.export(spark, stores, str(out), fmt=fmt, **options, **_read_options(topics, source))
    Output(as_json).detail("exported", {"rows": rows, "format": fmt, "out": str(out)})


@spark_group.command()
@_STORES
@_OUT
@_TOPICS
@_SOURCE
@_BROKERS
@_MASTER
@_JSON
def stats(
    store_dirs: tuple[Path, ...],
    out: Path,
    topics: tuple[str, ...],
    source: str,
    brokers: tuple[str, ...],
    master: str,
    as_json: bool,
) -> None:
    """Per (broker,) topic/queue/hour figures (OUT/stats.parquet) and two charts (OUT/*.png)."""
    from rocketstore.spark import jobs

    stores, options = _stores(store_dirs, brokers)
    for path in jobs.stats_paths(out).values():
        jobs.refuse_existing(path)
    with _session(master, store_dirs) as spark:
        summary = jobs.stats(spark, stores, str(out), **options, **_read_options(topics, source))
    output = Output(as_json)
    if as_json:
        output.json(summary)
        return
    paths = summary.pop("paths")
    output.detail("stats", {**summary, **paths})


@spark_group.command()
@_STORES
@click.option("--no-crc", is_flag=True, help="Skip body CRCs (structure only; faster).")
@_BROKERS
@_MASTER
@_JSON
@click.pass_context
def verify(
    ctx: click.Context,
    store_dirs: tuple[Path, ...],
    no_crc: bool,
    brokers: tuple[str, ...],
    master: str,
    as_json: bool,
) -> None:
    """`rocketstore verify` with the work on Spark tasks, for each STORE. Exit 0 clean, 1 damaged."""
    maintenance = _maintenance()
    named = _named(store_dirs, brokers)
    from rocketstore.cli.app import print_verify_report

    output = Output(as_json)
    clean = True
    with _session(master, store_dirs) as spark:
        for broker, store in named.items():
            report = maintenance.verify(spark, store, check_crc=not no_crc)
            clean = clean and report.clean
            if not broker:
                print_verify_report(output, report)
            elif as_json:  # JSON Lines: one report per store
                output.json({"broker": broker, "store": store, **report.to_dict()})
            else:
                output.line(f"broker {broker} ({store}):")
                print_verify_report(output, report)
    ctx.exit(0 if clean else 1)


@spark_group.command()
@_STORES
@_BROKERS
@_MASTER
@_JSON
def rebuild(store_dirs: tuple[Path, ...], brokers: tuple[str, ...], master: str, as_json: bool) -> None:
    """Rebuild consumequeue/ and index/ of each closed STORE from its commitlog, on Spark."""
    maintenance = _maintenance()
    named = _named(store_dirs, brokers)
    output = Output(as_json)
    with _session(master, store_dirs) as spark:
        for broker, store in named.items():
            summary = maintenance.rebuild(spark, store)
            if broker:
                output.detail(f"rebuilt broker {broker}", {"broker": broker, "store": store, **summary})
            else:
                output.detail("rebuilt", summary)


# --- helpers ------------------------------------------------------------------------------------
def _read_options(topics: tuple[str, ...], source: str) -> dict[str, str]:
    options = {"source": source}
    if topics:
        options["topics"] = ",".join(topics)
    return options


def _named(store_dirs: tuple[Path, ...], brokers: tuple[str, ...]) -> dict[str, str]:
    """{broker: store} of the STOREs, checked before Spark starts; {"": store} for one STORE
    given without --broker (today's output, no broker named)."""
    for root in store_dirs:
        _check_store(root)
    listed = [b for b in brokers if "," in b]
    if listed:
        raise click.ClickException(f"--broker {listed[0]!r}: one name per --broker, repeated once per STORE")
    if len(store_dirs) == 1 and not brokers:
        return {"": str(store_dirs[0])}
    from rocketstore.spark.brokers import store_paths

    options = {"paths": json.dumps([str(p) for p in store_dirs])}
    if brokers:
        options["brokers"] = ",".join(brokers)
    try:
        named = store_paths(options)
    except ValueError as exc:
        raise click.ClickException(str(exc).replace("option brokers", "--broker")) from None
    assert named is not None
    return named


def _stores(store_dirs: tuple[Path, ...], brokers: tuple[str, ...]) -> tuple[str | list[str], dict[str, str]]:
    """What the jobs read: one store, or the list, with the broker names as option brokers."""
    named = _named(store_dirs, brokers)
    if "" in named:
        return named[""], {}
    return list(named.values()), {"brokers": ",".join(named)}


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
def _session(master: str, store_dirs: tuple[Path, ...]) -> Iterator[SparkSession]:
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
        conf.update(small_job_conf(store_dirs, master))
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
