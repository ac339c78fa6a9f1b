"""``rocketstore``: inspect, query, verify, recover and reclaim any store directory, rocketstore's or
RocketMQ's, live or dead.

Every command finds its store the same way: ``-s/--store DIR``, or the first argument, or
``./store``. Read commands open it read-only: no lock taken, not one byte written, so they work
beside a process that has the store open. Writing commands open it without delayed delivery:
they do only what they are named for. The geometry (segment sizes, index slots) is read from the
files. ``--json`` prints JSON Lines (snake_case keys). Errors are one line on stderr and a
non-zero exit (see ``EXIT_*``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from collections import Counter
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rocketstore.broker.state import read_state
from rocketstore.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    JSON_OPTION,
    MAX_MESSAGES_OPTION,
    STORE_OPTION,
    NotFound,
    pick_store,
    read_store,
    store_config,
    time_value,
    with_store,
)
from rocketstore.cli.consume import add_consume_commands
from rocketstore.cli.output import Output, message_line, message_out
from rocketstore.cli.serve import serve_command
from rocketstore.cli.spark import spark_group
from rocketstore.config import StoreConfig
from rocketstore.errors import CorruptDataError, RocketStoreError
from rocketstore.shutdown import exit_on_sigterm
from rocketstore.storage.paths import list_store_dir, looks_like_store
from rocketstore.times import format_time

# The store, its codecs and the broker are imported by the commands that use them: `--version`,
# `--help` and `decode-id` start in a fraction of a second (benchmarks/startup.py).
if TYPE_CHECKING:
    from rocketstore.message import MessageExt
    from rocketstore.results import PutMessageResult
    from rocketstore.store import MessageStore
    from rocketstore.verify import VerifyReport

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_NOT_FOUND", "EXIT_USAGE", "app", "main"]


def main(argv: list[str] | None = None) -> int:
    """Console entry point: never a traceback for a user's mistake or a damaged store; a closed
    pipe ends quietly (exit 0), Ctrl-C with 130, SIGTERM with 143 after closing the store."""
    try:
        with exit_on_sigterm():
            return _run(argv)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (| head). Python's advice: point stdout at devnull so the flush at
        # exit does not fail again.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0


def _run(argv: list[str] | None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        # not app.main(): click turns Ctrl-C into "Aborted!"; the caller handles it instead
        with app.make_context("rocketstore", list(args)) as ctx:
            rv = app.invoke(ctx)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        exc.show()  # with the usage line: the user typed something the command does not take
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"rocketstore: error: {exc.format_message()}", err=True)
        return exc.exit_code
    except (RocketStoreError, OSError, ValueError) as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        click.echo(f"rocketstore: error: {exc}", err=True)
        return EXIT_ERROR
    return rv if isinstance(rv, int) else 0


def _print_version(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    # the package's own __version__ (a test keeps it equal to the installed metadata's): looking
    # the metadata up scans every installed distribution, a tenth of a second
    if not value or ctx.resilient_parsing:
        return
    from rocketstore import __version__

    click.echo(f"rocketstore {__version__}")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--version",
    "-V",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="StoreConfig file (TOML or RocketMQ .properties); geometry found in the files still wins.",
)
@click.pass_context
def app(ctx: click.Context, config_file: Path | None) -> None:
    """Inspect, query, verify, recover and reclaim RocketMQ 4.9 / rocketstore store directories.

    \b
    The store directory: -s/--store DIR, or the first argument, or ./store.
    Exit codes: 0 ok, 1 error or damage, 2 usage, 3 no such topic/queue/message/group,
    130 Ctrl-C, 143 SIGTERM (the store closed cleanly first).
    Times: printed ISO 8601 with their offset; a time given without a zone is local time.
    """
    ctx.obj = StoreConfig.from_file(config_file) if config_file else StoreConfig()


# --- where the store is ----------------------------------------------------------------------
def _store_then(args: tuple[str, ...], store_opt: Path | None, what: str) -> tuple[Path, str]:
    """``[STORE_DIR] WHAT``: with one argument it is WHAT (the store is -s or ./store)."""
    if len(args) == 1:
        return pick_store(None, store_opt), args[0]
    if len(args) == 2:
        return pick_store(args[0], store_opt), args[1]
    raise click.UsageError(f"want [STORE_DIR] {what}, got {len(args)} arguments")


# --- opening ---------------------------------------------------------------------------------
@contextlib.contextmanager
def _write(ctx: click.Context, root: Path, *, create: bool = False, **changes: Any) -> Iterator[MessageStore]:
    """The store open for writing, without delayed delivery (a command does what it is named
    for). Only ``create`` makes a new store; a directory that is not a store is never written."""
    if looks_like_store(root):
        cfg = store_config(ctx, root)
    elif not create:
        raise click.ClickException(_not_a_store(root))
    elif root.exists() and any(root.iterdir()):
        raise click.ClickException(
            f"{root} is not a store directory (and not empty): refusing to write into it"
        )
    else:
        cfg = ctx.find_root().obj
    from rocketstore.store import MessageStore

    with MessageStore.open(root, cfg.replace(**changes) if changes else cfg, delayed_delivery=False) as store:
        yield store


def _not_a_store(root: Path) -> str:
    state = "is not a store directory" if root.exists() else "does not exist"
    command = click.get_current_context().command_path
    usage = "STORE_DIR -t TOPIC BODY..." if command.endswith(" put") else "STORE_DIR ..."
    create = "; --create makes a new store" if command.endswith((" put", " create")) else ""
    return (
        f"{str(root)!r} {state}. Did you forget the store directory? "
        f"({command} {usage}, or -s STORE_DIR{create})"
    )


def reserved_bytes(cfg: StoreConfig, queues: int = 1) -> int:
    """What a new store allocates at its first put: a commitlog segment, a consume-queue file per
    queue written, an index file (if indexing), plus the 4 KiB checkpoint."""
    from rocketstore.codec.consume_queue_entry import CQ_ENTRY_SIZE
    from rocketstore.codec.index_layout import file_size as index_file_size

    index = index_file_size(cfg.index_hash_slots, cfg.index_max_entries) if cfg.message_index_enable else 0
    return cfg.commitlog_segment_size + queues * cfg.consume_queue_entries * CQ_ENTRY_SIZE + index + 4096


def known_topics(store: MessageStore) -> dict[str, list[int]]:
    """The store's topics and their queue ids, as ``topics`` lists them and ``status`` counts
    them: every topic with consume queues on disk (those queues), and every configured one
    (config/topics.json, creation) without any yet (its read queues)."""
    topics = store.topics()
    for name, config in store.topic_configs().items():
        if name not in topics:  # created, no message yet
            topics[name] = list(range(config.read_queues))
    return topics


def _queues(store: MessageStore, topic: str | None, queue: int | None) -> list[tuple[str, int]]:
    topics = known_topics(store)
    if topic is not None and topic not in topics:
        raise NotFound(f"no topic {topic!r} in this store (it has: {', '.join(sorted(topics)) or 'none'})")
    pairs = [(t, q) for t, qs in sorted(topics.items()) if topic in (None, t) for q in qs]
    if queue is not None:
        pairs = [(t, q) for t, q in pairs if q == queue]
        if not pairs:
            raise NotFound(
                f"no queue {queue} in topic {topic!r}" if topic else f"no topic has a queue {queue}"
            )
    return pairs


def _read_queue(
    store: MessageStore, topic: str, queue: int, start: int, tags: str | None = None
) -> Iterator[MessageExt]:
    """Every message of a queue from ``start`` on, across holes and reclaimed ranges. A damaged
    record is reported on stderr and stepped over: one bad record does not end the listing."""
    from rocketstore.results import GetStatus

    offset = max(start, store.min_offset_in_queue(topic, queue))
    end = store.max_offset_in_queue(topic, queue)
    while offset < end:
        res = store.get_message("rocketstore-cli", topic, queue, offset, 32, tags)
        for m in res.messages:
            try:
                m.record  # noqa: B018 - decode now, to step over a damaged record
            except CorruptDataError as exc:
                click.echo(f"rocketstore: warning: {topic}/{queue}: damaged record skipped: {exc}", err=True)
                continue
            yield m
        if res.status in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.OFFSET_OVERFLOW_BADLY):
            return
        if res.next_begin_offset <= offset:
            offset += 1
        else:
            offset = res.next_begin_offset


# --- status, topics --------------------------------------------------------------------------
@app.command()
@with_store
@JSON_OPTION
@click.pass_context
def status(ctx: click.Context, store_dir: Path, as_json: bool) -> None:
    """Ranges, sizes, disk use, dispatch and flush progress, checkpoint (like brokerStatus)."""
    out = Output(as_json)
    broker = read_state(store_dir)
    # the serving broker's replication state (role, link, bytes behind) as it last wrote it
    # (every few seconds); without a broker, the role --config gives
    replication = broker.pop("replication", None) if broker else None
    with read_store(ctx, store_dir) as store:
        info = store.runtime_info()
        topics = known_topics(store)
        physic, logics, index = store.checkpoint
        rec = store.recovery
        earliest = int(info["earliestMessageTimeStamp"])  # type: ignore[call-overload]
        fields: dict[str, Any] = {
            "store": str(store_dir.resolve()),
            "abort_file_present": (store_dir / "abort").exists(),
            "commitlog_min_offset": info["commitLogMinOffset"],
            "commitlog_max_offset": info["commitLogMaxOffset"],
            "commitlog_bytes": _du(store_dir / "commitlog"),
            "consume_queue_bytes": _du(store_dir / "consumequeue"),
            "index_bytes": _du(store_dir / "index"),
            "commitlog_disk_ratio": info["commitLogDiskRatio"],
            "consume_queue_disk_ratio": info["consumeQueueDiskRatio"],
            "dispatch_behind_bytes": info["dispatchBehindBytes"],
            "topics": len(topics),
            "queues": sum(map(len, topics.values())),
            "earliest_message_timestamp": earliest,
            "earliest_message_time": format_time(earliest),
            "physic_msg_time": format_time(physic),
            "logics_msg_time": format_time(logics),
            "index_msg_time": format_time(index),
            "delayed_pending": info["delayedPending"],
            "timer_pending": info["timerPending"],
            "recovery_would_cut_bytes": rec.bytes_cut if rec else 0,
            "damage": rec.damage if rec else None,
            "replication": replication or store.ha_status(),
            # the broker serving the store (`rocketstore serve`), if one runs: its clients
            "broker": broker,
        }
    out.detail(f"store {store_dir}", fields)


def _du(path: Path) -> int:
    """Bytes in the regular files under ``path``, links not followed."""
    total = 0
    for entry in list_store_dir(path):
        if entry.is_file:
            with contextlib.suppress(FileNotFoundError):  # renamed or reclaimed while we looked
                total += entry.path.lstat().st_size
        elif entry.is_dir:
            total += _du(entry.path)
    return total


class _TopicsGroup(click.Group):
    """``topics [STORE_DIR] [--topic T]`` lists (as before there were subcommands);
    ``topics create|delete`` change the store."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("-h", "--help")):
            args = ["list", *args]
        return super().parse_args(ctx, args)


@app.group(cls=_TopicsGroup)
def topics() -> None:
    """List topics and queues (like topicStatus), or create / delete a topic (like mqadmin)."""


@topics.command("list")
@with_store
@click.option("--topic", "-t", help="Only this topic.")
@JSON_OPTION
@click.pass_context
def topics_list(ctx: click.Context, store_dir: Path, topic: str | None, as_json: bool) -> None:
    """Per topic and queue: min offset, max offset, last store time (the default)."""
    out = Output(as_json)
    with read_store(ctx, store_dir) as store:

        def rows() -> Iterator[dict[str, Any]]:
            for t, q in _queues(store, topic, None):
                lo, hi = store.min_offset_in_queue(t, q), store.max_offset_in_queue(t, q)
                last = store.get_message("rocketstore-cli", t, q, hi - 1, 1).messages if hi > lo else []
                ts = last[0].store_timestamp if last else None
                yield {
                    "topic": t,
                    "queue_id": q,
                    "min_offset": lo,
                    "max_offset": hi,
                    "last_store_time": format_time(ts),
                    "last_store_timestamp": ts,
                }

        out.rows(["topic", "queue_id", "min_offset", "max_offset", "last_store_time"], rows())


@topics.command("create")
@click.argument("args", nargs=-1, required=True, metavar="[STORE_DIR] TOPIC")
@STORE_OPTION
@click.option(
    "--queues", "-n", type=int, help="Read and write queues (default: default_topic_queue_nums, 4)."
)
@click.option(
    "--create", "create_store", is_flag=True, help="Make the store directory if it is not a store yet."
)
@JSON_OPTION
@click.pass_context
def topics_create(
    ctx: click.Context,
    args: tuple[str, ...],
    store_opt: Path | None,
    queues: int | None,
    create_store: bool,
    as_json: bool,
) -> None:
    """Create a topic, or change its queue count (mqadmin updateTopic); config/topics.json."""
    store_dir, topic = _store_then(args, store_opt, "TOPIC")
    with _write(ctx, store_dir, create=create_store) as store:
        config = store.create_topic(topic, queues)
    Output(as_json).detail(
        f"topic {topic}",
        {
            "topic": topic,
            "read_queues": config.read_queues,
            "write_queues": config.write_queues,
            "perm": config.perm,
        },
    )


@topics.command("delete")
@click.argument("args", nargs=-1, required=True, metavar="[STORE_DIR] TOPIC")
@STORE_OPTION
@JSON_OPTION
@click.pass_context
def topics_delete(ctx: click.Context, args: tuple[str, ...], store_opt: Path | None, as_json: bool) -> None:
    """Delete a topic (mqadmin deleteTopic): its queues, their files, its config and its consumer
    offsets. The commitlog keeps its records until they are reclaimed."""
    store_dir, topic = _store_then(args, store_opt, "TOPIC")
    with _write(ctx, store_dir) as store:
        if topic not in store.topic_configs():
            raise NotFound(f"no topic {topic!r} in this store")
        removed = store.delete_topic(topic)
    Output(as_json).detail(f"topic {topic} deleted", {"topic": topic, "queues_deleted": removed})


# --- printing and querying ---------------------------------------------------------------------
# the id early: on an 80-column terminal it stays whole on the first line
_MSG_COLUMNS = [
    "topic",
    "queue_id",
    "queue_offset",
    "msg_id",
    "physical_offset",
    "store_time",
    "tags",
    "keys",
    "body",
]


@app.command("print")
@with_store
@click.option("--topic", "-t", help="Only this topic (default: every topic).")
@click.option("--queue", "-q", type=int, help="Only this queue id.")
@click.option("--begin", "-b", help="Stored at or after this time.")
@click.option("--end", "-e", help="Stored at or before this time.")
@click.option("--tag", "tags", help="Tag expression: 'TagA || TagB', or '*'.")
@click.option("--charset", default="utf-8", show_default=True, help="To decode bodies as text.")
@click.option("--body/--no-body", default=True, show_default=True)
@click.option("--count-tags", is_flag=True, help="Count messages per tag instead of printing them.")
@MAX_MESSAGES_OPTION
@JSON_OPTION
@click.pass_context
def print_(
    ctx: click.Context,
    store_dir: Path,
    topic: str | None,
    queue: int | None,
    begin: str | None,
    end: str | None,
    tags: str | None,
    charset: str,
    body: bool,
    count_tags: bool,
    max_messages: int | None,
    as_json: bool,
) -> None:
    """Messages of every queue (or one topic / queue), like printMsg and printMsgByQueue."""
    out = Output(as_json)
    begin_ms, end_ms = time_value(begin, "--begin"), time_value(end, "--end")
    with read_store(ctx, store_dir) as store:
        pairs = _queues(store, topic, queue)

        def messages() -> Iterator[MessageExt]:
            for t, q in pairs:
                start = store.offset_in_queue_by_time(t, q, begin_ms) if begin_ms is not None else 0
                for m in _read_queue(store, t, q, start, tags):
                    if end_ms is not None and m.store_timestamp > end_ms:
                        break
                    yield m

        found = islice(messages(), max_messages)
        if count_tags:
            counts = Counter((m.topic, m.tags) for m in found)
            out.rows(
                ["topic", "tags", "count"],
                ({"topic": t, "tags": tag, "count": n} for (t, tag), n in sorted(counts.items(), key=str)),
            )
            return
        columns = _MSG_COLUMNS if body else _MSG_COLUMNS[:-1]
        rows = (message_out(out, m, body, charset) for m in found)
        from rocketstore.message import TIMER_TOPIC  # loaded with the store already

        if topic == TIMER_TOPIC:  # pending timers: when each is due, and where to
            columns = [*columns[:6], "due_time", "real_topic", *columns[6:]]
            rows = (_with_due_time(row) for row in rows)
        n = out.rows(columns, rows)
    out.note(f"{n} message(s)")


def _with_due_time(row: dict[str, Any]) -> dict[str, Any]:
    """A timer record's row with its due time (TIMER_OUT_MS: the start of the slot it is
    delivered from, within one timer precision after; right for a rolled record too, whose
    store time is not the put's) and its real topic."""
    props = row.get("properties") or {}
    try:
        due = int(props["TIMER_OUT_MS"]) if "TIMER_OUT_MS" in props else None
    except ValueError:  # the put writes a number: only a damaged record has another
        due = None
    row["due_time"] = format_time(due) if due is not None else None
    row["real_topic"] = props.get("REAL_TOPIC")
    return row


def _detail(out: Output, msg: MessageExt | None, what: str, charset: str = "utf-8") -> None:
    if msg is None:
        raise NotFound(f"no message {what}")
    row = message_out(out, msg, True, charset)
    if not out.as_json:
        row.pop("body_base64", None)
    out.detail(f"message {msg.msg_id}", row)


@app.command("query-key")
@with_store
@click.option("--topic", "-t", required=True)
@click.option("--key", "-k", required=True)
@click.option("--begin", "-b", help="Stored at or after this time.")
@click.option("--end", "-e", help="Stored at or before this time.")
@click.option("--max", "max_num", type=int, default=None, help="Newest N only.")
@JSON_OPTION
@click.pass_context
def query_key(
    ctx: click.Context,
    store_dir: Path,
    topic: str,
    key: str,
    begin: str | None,
    end: str | None,
    max_num: int | None,
    as_json: bool,
) -> None:
    """Messages with this KEYS key (or UNIQ_KEY) through the index, newest first (queryMsgByKey)."""
    out = Output(as_json)
    begin_ms, end_ms = time_value(begin, "--begin") or 0, time_value(end, "--end")
    with read_store(ctx, store_dir) as store:
        _queues(store, topic, None)
        found = islice(store.iter_query_message(topic, key, begin_ms, end_ms), max_num)
        first = next(found, None)
        if first is None:
            raise NotFound(f"no message with key {key!r} in topic {topic!r} in this time range")
        rows = (message_out(out, m, False, "utf-8") for m in itertools.chain([first], found))
        n = out.rows(_MSG_COLUMNS[:-1], rows)
    out.note(f"{n} message(s)")


@app.command("query-uniq")
@with_store
@click.option("--topic", "-t", required=True)
@click.option("--id", "uniq", required=True, help="The client message id (UNIQ_KEY).")
@JSON_OPTION
@click.pass_context
def query_uniq(ctx: click.Context, store_dir: Path, topic: str, uniq: str, as_json: bool) -> None:
    """The message with this UNIQ_KEY (queryMsgByUniqueKey)."""
    with read_store(ctx, store_dir) as store:
        _queues(store, topic, None)
        _detail(Output(as_json), store.query_by_uniq_key(topic, uniq), f"with UNIQ_KEY {uniq} in {topic}")


@app.command("query-id")
@click.argument("args", nargs=-1, required=True, metavar="[STORE_DIR] MSG_ID")
@STORE_OPTION
@JSON_OPTION
@click.pass_context
def query_id(ctx: click.Context, args: tuple[str, ...], store_opt: Path | None, as_json: bool) -> None:
    """The message with this offsetMsgId (queryMsgById)."""
    store_dir, msg_id = _store_then(args, store_opt, "MSG_ID")
    with read_store(ctx, store_dir) as store:
        _detail(Output(as_json), store.view_message_by_id(msg_id), f"with id {msg_id}")


@app.command("query-offset")
@click.argument("args", nargs=-1, required=True, metavar="[STORE_DIR] OFFSET")
@STORE_OPTION
@JSON_OPTION
@click.pass_context
def query_offset(ctx: click.Context, args: tuple[str, ...], store_opt: Path | None, as_json: bool) -> None:
    """The message whose record starts at this commitlog offset."""
    store_dir, text = _store_then(args, store_opt, "OFFSET")
    if not text.isdigit():
        raise click.BadParameter(f"{text!r} is not a commitlog offset", param_hint="OFFSET")
    offset = int(text)
    with read_store(ctx, store_dir) as store:
        _detail(Output(as_json), store.look_message_by_offset(offset), f"at commitlog offset {offset}")


@app.command("query-queue")
@with_store
@click.option("--topic", "-t", required=True)
@click.option("--queue", "-q", type=int, required=True)
@click.option("--offset", "-o", type=int, required=True, help="Queue offset.")
@JSON_OPTION
@click.pass_context
def query_queue(
    ctx: click.Context, store_dir: Path, topic: str, queue: int, offset: int, as_json: bool
) -> None:
    """The message at a queue offset."""
    with read_store(ctx, store_dir) as store:
        _queues(store, topic, queue)
        res = store.get_message("rocketstore-cli", topic, queue, offset, 1)
        msg = res.messages[0] if res.messages and res.messages[0].queue_offset == offset else None
        _detail(Output(as_json), msg, f"at {topic}/{queue} offset {offset} ({res.status.name})")


@app.command("decode-id")
@click.argument("args", nargs=-1, required=True, metavar="[STORE_DIR] MSG_ID")
@STORE_OPTION
@JSON_OPTION
def decode_id(args: tuple[str, ...], store_opt: Path | None, as_json: bool) -> None:
    """Store host, port and commitlog offset inside an offsetMsgId (no store needed)."""
    from rocketstore.codec.host import format_host
    from rocketstore.codec.message_id import decode_offset_msg_id

    _, msg_id = _store_then(args, store_opt, "MSG_ID")
    addr, port, offset = decode_offset_msg_id(msg_id)
    Output(as_json).detail(
        f"offsetMsgId {msg_id}",
        {"msg_id": msg_id, "store_host": format_host(addr, port), "physical_offset": offset},
    )


# --- raw files ---------------------------------------------------------------------------------
@app.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--kind",
    type=click.Choice(["commitlog", "consumequeue", "index"]),
    help="What the file is (default: from its path: commitlog/, consumequeue/T/Q/, index/).",
)
@click.option("--index-slots", type=int, help="Hash slots of an index file (default: read from the file).")
@MAX_MESSAGES_OPTION
@JSON_OPTION
def dump(
    file: Path, kind: str | None, index_slots: int | None, max_messages: int | None, as_json: bool
) -> None:
    """One raw file entry by entry: a commitlog segment's records, a consume-queue file's entries,
    an index file's header and entries (like kafka-dump-log). Exit 1 if it stops at damage."""
    from rocketstore.cli.dump import dump_file

    out = Output(as_json)
    columns, rows, summary = dump_file(file, kind, index_slots)
    n = out.rows(columns, islice(rows, max_messages))
    out.note(f"{n} entries; {summary()}" if summary.text else f"{n} entries (--max-messages reached)")
    if summary.damaged:
        raise click.exceptions.Exit(EXIT_ERROR)


# --- maintenance ---------------------------------------------------------------------------------
@app.command()
@with_store
@click.option("--no-crc", is_flag=True, help="Skip body CRCs (structure only; faster).")
@JSON_OPTION
@click.pass_context
def verify(ctx: click.Context, store_dir: Path, no_crc: bool, as_json: bool) -> None:
    """Check every record (structure, CRC), queue entry and index chain. Exit 0 clean, 1 damaged."""
    from rocketstore.verify import verify_store

    out = Output(as_json)
    cfg = store_config(ctx, store_dir)
    with _progress(out, "verifying") as progress:
        report = verify_store(store_dir, cfg, check_crc=not no_crc, progress=progress)
    print_verify_report(out, report)
    ctx.exit(0 if report.clean else EXIT_ERROR)


def print_verify_report(out: Output, report: VerifyReport) -> None:
    """A verify report as `rocketstore verify` prints it (also `rocketstore spark verify`)."""
    if out.as_json:
        out.json(report.to_dict())
        return
    lo, hi = report.commitlog_range
    out.line(
        f"checked {report.records:,} records (commitlog {lo}..{hi}), "
        f"{report.queue_entries:,} queue entries, {report.index_entries:,} index entries"
    )
    if report.damage:
        out.rows(["kind", "file", "offset", "detail"], (d.to_dict() for d in report.damage))
    out.line("clean" if report.clean else f"DAMAGED: {len(report.damage)} problem(s)")


@contextlib.contextmanager
def _progress(out: Output, what: str) -> Iterator[Any]:
    if out.as_json or not out.errors.is_terminal:
        yield None
        return
    from rich.progress import Progress

    with Progress(console=out.errors, transient=True) as bar:
        task = bar.add_task(what, total=None)

        def report(stage: str, done: int, total: int) -> None:
            bar.update(task, description=f"{what}: {stage}", completed=done, total=total or None)

        yield report


@app.command()
@with_store
@click.option("--dry-run", is_flag=True, help="Only say what recovery would keep and cut; write nothing.")
@JSON_OPTION
@click.pass_context
def recover(ctx: click.Context, store_dir: Path, dry_run: bool, as_json: bool) -> None:
    """Recover the store as an open would (spec §7): what is kept, what is cut."""
    out = Output(as_json)
    if dry_run:
        with read_store(ctx, store_dir) as store:
            rec, timers = store.recovery, store.timer_status()
    else:
        with _write(ctx, store_dir) as store:
            rec, timers = store.recovery, store.timer_status()
    assert rec is not None
    fields = {
        "dry_run": dry_run,
        "abnormal": rec.abnormal,
        "scan_start": rec.scan_start,
        "end_offset": rec.end_offset,
        "records_scanned": rec.records_scanned,
        "stop": rec.stop,
        "damage": rec.damage,
        "segments_deleted": rec.segments_deleted,
        "bytes_cut": rec.bytes_cut,
        "queue_entries_dropped": rec.queue_entries_dropped,
        "queue_bytes_damaged": rec.queue_bytes_damaged,
        "queue_holes": rec.queue_holes,
        # damage in older segments, stepped over (not cut): "start..end: reason; ..."
        "stepped_over": "; ".join(f"{d.start}..{d.end}: {d.reason}" for d in rec.stepped_over) or None,
        "reput_from": rec.reput_from,
        # the timer files (docs/timers.md): what recovery cut, and the timers still to deliver
        "timer_log_bytes_cut": timers["recovery_log_bytes_cut"],
        "timer_slots_emptied": timers["recovery_slots_cleared"],
        "timer_pending": timers["pending"],
    }
    out.detail("recovery (dry run: nothing written)" if dry_run else "recovery done", fields)


@app.command()
@with_store
@click.option(
    "--reserved-hours",
    type=int,
    help="Keep segments written in the last N hours (default: file_reserved_time, 72).",
)
@JSON_OPTION
@click.pass_context
def reclaim(ctx: click.Context, store_dir: Path, reserved_hours: int | None, as_json: bool) -> None:
    """One manual reclamation round (spec §9): expired segments, then queues and index."""
    changes: dict[str, Any] = {"file_reserved_time": reserved_hours} if reserved_hours is not None else {}
    with _write(ctx, store_dir, **changes) as store:
        before = store.min_phy_offset()
        report = store.reclaim()
        max_offset = store.max_phy_offset()
    fields = {
        "triggered_by": list(report.triggered_by),
        "disk_used_ratio": round(report.disk_used_ratio, 4),
        "clean_immediately": report.clean_immediately,
        "disk_full": report.disk_full,
        "commitlog_segments_deleted": report.commitlog_segments_deleted,
        "queue_segments_deleted": report.queue_segments_deleted,
        "index_files_deleted": report.index_files_deleted,
        "min_physical_offset_before": before,
        "min_physical_offset": report.min_physical_offset,
        "max_physical_offset": max_offset,
    }
    Output(as_json).detail("reclamation round", fields)


@app.command()
@click.argument("args", nargs=-1, metavar="[STORE_DIR] BODIES...")
@STORE_OPTION
@click.option("--topic", "-t", required=True)
@click.option("--tag", help="Tags of every message.")
@click.option("--key", "keys", multiple=True, help="A key (repeatable).")
@click.option("--property", "props", multiple=True, metavar="K=V", help="A user property (repeatable).")
@click.option("--queue", "-q", type=int, help="Queue id (default: the store picks, round robin).")
@click.option("--delay", type=int, default=0, help="Delay level (1 = 1 s, ... 18 = 2 h).")
@click.option(
    "--deliver-at", help="A timer: delivered at this time (see Times), by the process that serves the store."
)
@click.option(
    "--file", "body_file", type=click.File("rb"), help="One message: this file's bytes ('-' for stdin)."
)
@click.option("--lines", is_flag=True, help="One message per line of stdin.")
@click.option(
    "--create",
    is_flag=True,
    help="Make a new store if STORE_DIR is not one (it reserves about 1.4 GiB at RocketMQ's defaults).",
)
@JSON_OPTION
@click.pass_context
def put(
    ctx: click.Context,
    args: tuple[str, ...],
    store_opt: Path | None,
    topic: str,
    tag: str | None,
    keys: tuple[str, ...],
    props: tuple[str, ...],
    queue: int | None,
    delay: int,
    deliver_at: str | None,
    body_file: Any,
    lines: bool,
    create: bool,
    as_json: bool,
) -> None:
    """Put messages into an existing store: the BODIES arguments, a --file, or --lines of stdin."""
    # the store is -s, or else the first argument: never guessed from a body
    store_dir, bodies = (
        (store_opt, args) if store_opt is not None else (Path(args[0] if args else "store"), args[1:])
    )
    if not looks_like_store(store_dir) and not create:
        raise click.ClickException(_not_a_store(store_dir))
    properties = {}
    for p in props:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"{p!r}: want K=V", param_hint="--property")
        properties[k] = v
    payloads: list[bytes] = [b.encode() for b in bodies]
    if body_file is not None:
        payloads.append(body_file.read())
    if not payloads and not lines:
        raise click.UsageError("nothing to put: give BODIES, --file or --lines")
    from rocketstore.message import Message

    deliver_ms = time_value(deliver_at, "--deliver-at")

    def message(body: bytes) -> Message:
        return Message(
            topic,
            body,
            tags=tag,
            keys=list(keys),
            properties=properties or None,
            queue_id=queue,
            delay_level=delay,
            deliver_at=deliver_ms,
        )

    out = Output(as_json)
    new = not looks_like_store(store_dir)
    refused = 0
    queues: set[int] = set()
    with _write(ctx, store_dir, create=create) as store:

        def results() -> Iterator[PutMessageResult]:
            yield from store.put_messages([message(b) for b in payloads]) if payloads else ()
            if lines:  # one put per line as it comes: stdin may be a stream that never ends
                for line in sys.stdin.buffer:
                    yield store.put_message(message(line.rstrip(b"\r\n")))

        def rows() -> Iterator[dict[str, Any]]:
            nonlocal refused
            for r in results():
                refused += not r.ok
                queues.add(r.queue_id)
                yield {
                    "status": r.status.name,
                    "msg_id": r.msg_id,
                    "queue_id": r.queue_id,
                    "queue_offset": r.queue_offset,
                    "physical_offset": r.physical_offset,
                }

        out.rows(["status", "msg_id", "queue_id", "queue_offset", "physical_offset"], rows())
        if new:
            size = reserved_bytes(store.config, len(queues) or 1)
            out.note(
                f"created a new store at {store_dir}: it reserves {size:,} bytes ({size / (1 << 30):.2f} GiB)"
            )
    if refused:
        ctx.exit(EXIT_ERROR)


@app.command()
@with_store
@click.option("--topic", "-t", required=True)
@click.option("--queue", "-q", type=int, help="One queue (default: every queue of the topic).")
@click.option("--offset", "-o", type=int, help="Start at this queue offset.")
@click.option("--since", help="Start at the first message stored at or after this time.")
@click.option(
    "--lines",
    "-n",
    type=int,
    default=10,
    show_default=True,
    help="Without --offset/--since: the last N per queue.",
)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new messages (Ctrl-C stops).")
@click.option(
    "--interval", type=float, default=0.5, show_default=True, help="Seconds between looks, with -f."
)
@click.option("--body/--no-body", default=True, show_default=True)
@MAX_MESSAGES_OPTION
@JSON_OPTION
@click.pass_context
def tail(
    ctx: click.Context,
    store_dir: Path,
    topic: str,
    queue: int | None,
    offset: int | None,
    since: str | None,
    lines: int,
    follow: bool,
    interval: float,
    body: bool,
    max_messages: int | None,
    as_json: bool,
) -> None:
    """Print a queue's (or a topic's queues') newest messages, and with -f new ones as they come.

    The store is opened read-only once and follows the process that writes it: new messages,
    queues and segments show as the writer publishes them (at most --interval seconds apart
    where nothing wakes it sooner).
    """
    out = Output(as_json)
    since_ms = time_value(since, "--since")
    positions: dict[tuple[str, int], int] = {}
    left = max_messages
    first_look = True
    with read_store(ctx, store_dir) as store:
        events = store.dispatch_events
        while left is None or left > 0:
            seen = events.position()
            try:
                pairs = _queues(store, topic, queue)
            except click.ClickException:
                if not follow:
                    raise
                pairs = []  # -f on a topic that does not exist yet: wait for it
            for t, q in pairs:
                if (t, q) not in positions:
                    hi = store.max_offset_in_queue(t, q)
                    if offset is not None:
                        positions[(t, q)] = offset
                    elif since_ms is not None:
                        positions[(t, q)] = store.offset_in_queue_by_time(t, q, since_ms)
                    elif not first_look:  # a queue that appeared while following: all of it is new
                        positions[(t, q)] = store.min_offset_in_queue(t, q)
                    else:
                        positions[(t, q)] = max(store.min_offset_in_queue(t, q), hi - lines)
                for m in islice(_read_queue(store, t, q, positions[(t, q)]), left):
                    message_line(out, m, body)  # flushed at the end of each look
                    positions[(t, q)] = m.queue_offset + 1
                    if left is not None:
                        left -= 1
            out.flush()
            if not follow:
                return
            first_look = False
            events.wait(seen, interval)


@app.command()
@click.argument("work_dir", type=click.Path(file_okay=False, path_type=Path), default=None, required=False)
@click.option("--messages", "-n", type=int, default=100_000, show_default=True)
@click.option("--body-size", type=int, default=100, show_default=True)
@JSON_OPTION
def bench(work_dir: Path | None, messages: int, body_size: int, as_json: bool) -> None:
    """Put/get throughput on a fresh temporary store made in WORK_DIR (default: the system's temp dir)."""
    from rocketstore.cli.bench import run_bench

    out = Output(as_json)
    out.note(f"rocketstore bench: {messages:,} x {body_size} B, one thread, ASYNC_FLUSH")
    out.rows(["workload", "msgs_per_s", "mb_per_s"], run_bench(work_dir, messages, body_size))


app.add_command(spark_group)
app.add_command(serve_command)
add_consume_commands(app)
