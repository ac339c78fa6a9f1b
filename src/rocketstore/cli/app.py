"""``rocketstore``: inspect, query, verify, recover and reclaim any store directory, rocketstore's or
RocketMQ's, live or dead.

Every command takes the store directory first (default ``./store``). Read commands open it
read-only: no lock taken, not one byte written, so they work beside a process that has the store
open. The geometry (segment sizes, index slots) is read from the files. ``--json`` prints JSON
Lines. Errors are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rocketstore.cli.output import Output, format_time, message_row
from rocketstore.cli.spark import spark_group
from rocketstore.codec.host import format_host
from rocketstore.codec.message_id import decode_offset_msg_id
from rocketstore.config import StoreConfig
from rocketstore.errors import RocketStoreError
from rocketstore.geometry import detect_geometry, looks_like_store
from rocketstore.message import Message, MessageExt
from rocketstore.results import GetStatus
from rocketstore.store import MessageStore

if TYPE_CHECKING:
    from rocketstore.verify import VerifyReport

__all__ = ["app", "main"]

_STORE = click.argument("store_dir", type=click.Path(path_type=Path), default="store", required=False)
_JSON = click.option("--json", "as_json", is_flag=True, help="JSON Lines, one object per row.")
_MAX_TIME = (1 << 63) - 1


def main(argv: list[str] | None = None) -> int:
    """Console entry point: never a traceback for a user's mistake or a damaged store."""
    try:
        rv = app.main(args=argv, prog_name="rocketstore", standalone_mode=False)
    except click.UsageError as exc:
        exc.show()  # with the usage line: the user typed something the command does not take
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"rocketstore: error: {exc.format_message()}", err=True)
        return exc.exit_code
    except click.Abort:
        click.echo("rocketstore: aborted", err=True)
        return 1
    except KeyboardInterrupt:
        return 130
    except (RocketStoreError, OSError, ValueError) as exc:
        click.echo(f"rocketstore: error: {exc}", err=True)
        return 1
    return rv if isinstance(rv, int) else 0


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="StoreConfig file (TOML or RocketMQ .properties); geometry found in the files still wins.",
)
@click.pass_context
def app(ctx: click.Context, config_file: Path | None) -> None:
    """Inspect, query, verify, recover and reclaim RocketMQ 4.9 / rocketstore store directories."""
    ctx.obj = StoreConfig.from_file(config_file) if config_file else StoreConfig()


# --- opening ---------------------------------------------------------------------------------------
def _config(ctx: click.Context, root: Path) -> StoreConfig:
    base: StoreConfig = ctx.find_root().obj
    if not root.exists():
        raise click.ClickException(f"no such directory: {root}")
    return detect_geometry(root, base)


@contextlib.contextmanager
def _read(ctx: click.Context, root: Path) -> Iterator[MessageStore]:
    with MessageStore.open(root, _config(ctx, root), readonly=True) as store:
        yield store


@contextlib.contextmanager
def _write(ctx: click.Context, root: Path, **changes: Any) -> Iterator[MessageStore]:
    if root.exists() and any(root.iterdir()) and not looks_like_store(root):
        raise click.ClickException(
            f"{root} is not a store directory (and not empty): refusing to write into it"
        )
    cfg = _config(ctx, root) if looks_like_store(root) else ctx.find_root().obj
    with MessageStore.open(root, cfg.replace(**changes) if changes else cfg) as store:
        yield store


def _parse_time(text: str | None) -> int | None:
    """Epoch milliseconds, ISO 8601 ('2026-11-22T10:00:00', local time unless it has an offset),
    or mqadmin's 'yyyy-MM-dd#HH:mm:ss:SSS'."""
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    for fmt in ("%Y-%m-%d#%H:%M:%S:%f",):
        with contextlib.suppress(ValueError):
            return int(dt.datetime.strptime(text, fmt).timestamp() * 1000)
    try:
        return int(dt.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a time (epoch ms, ISO 8601, or yyyy-MM-dd#HH:mm:ss:SSS)"
        ) from None


def _queues(store: MessageStore, topic: str | None, queue: int | None) -> list[tuple[str, int]]:
    topics = store.topics()
    if topic is not None and topic not in topics:
        raise click.ClickException(
            f"no topic {topic!r} in this store (it has: {', '.join(sorted(topics)) or 'none'})"
        )
    pairs = [(t, q) for t, qs in sorted(topics.items()) if topic in (None, t) for q in qs]
    if queue is not None:
        pairs = [(t, q) for t, q in pairs if q == queue]
        if not pairs:
            raise click.ClickException(f"topic {topic!r} has no queue {queue}")
    return pairs


def _read_queue(
    store: MessageStore, topic: str, queue: int, start: int, tags: str | None = None
) -> Iterator[MessageExt]:
    """Every message of a queue from ``start`` on, across holes and reclaimed ranges."""
    offset = max(start, store.min_offset_in_queue(topic, queue))
    end = store.max_offset_in_queue(topic, queue)
    while offset < end:
        res = store.get_message("rocketstore-cli", topic, queue, offset, 32, tags)
        yield from res.messages
        if res.status in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.OFFSET_OVERFLOW_BADLY):
            return
        if res.next_begin_offset <= offset:
            offset += 1
        else:
            offset = res.next_begin_offset


# --- status, topics --------------------------------------------------------------------------------
@app.command()
@_STORE
@_JSON
@click.pass_context
def status(ctx: click.Context, store_dir: Path, as_json: bool) -> None:
    """Ranges, sizes, disk use, dispatch and flush progress, checkpoint (like brokerStatus)."""
    out = Output(as_json)
    with _read(ctx, store_dir) as store:
        info = store.runtime_info()
        physic, logics, index = store.checkpoint
        rec = store.recovery
        fields: dict[str, Any] = {
            "store": str(store_dir.resolve()),
            "abortFilePresent": (store_dir / "abort").exists(),
            "commitLogMinOffset": info["commitLogMinOffset"],
            "commitLogMaxOffset": info["commitLogMaxOffset"],
            "commitLogBytes": _du(store_dir / "commitlog"),
            "consumeQueueBytes": _du(store_dir / "consumequeue"),
            "indexBytes": _du(store_dir / "index"),
            "commitLogDiskRatio": info["commitLogDiskRatio"],
            "consumeQueueDiskRatio": info["consumeQueueDiskRatio"],
            "dispatchBehindBytes": info["dispatchBehindBytes"],
            "topics": len(store.topics()),
            "queues": sum(len(q) for q in store.topics().values()),
            "earliestMessageTimeStamp": info["earliestMessageTimeStamp"],
            "earliestMessageTime": format_time(int(info["earliestMessageTimeStamp"])),  # type: ignore[call-overload]
            "physicMsgTimestamp": format_time(physic),
            "logicsMsgTimestamp": format_time(logics),
            "indexMsgTimestamp": format_time(index),
            "delayedPending": info["delayedPending"],
            "recoveryWouldCutBytes": rec.bytes_cut if rec else 0,
            "damage": rec.damage if rec else None,
            # the role from --config; the live link state is in the process that runs the store
            "replication": store.ha_status(),
        }
    out.detail(f"store {store_dir}", fields)


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


@app.command()
@_STORE
@click.option("--topic", "-t", help="Only this topic.")
@_JSON
@click.pass_context
def topics(ctx: click.Context, store_dir: Path, topic: str | None, as_json: bool) -> None:
    """Per topic and queue: min offset, max offset, last store time (like topicStatus)."""
    out = Output(as_json)
    with _read(ctx, store_dir) as store:

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

        out.rows("topics", ["topic", "queue_id", "min_offset", "max_offset", "last_store_time"], rows())


# --- printing and querying ---------------------------------------------------------------------
_MSG_COLUMNS = [
    "topic",
    "queue_id",
    "queue_offset",
    "physical_offset",
    "msg_id",
    "tags",
    "keys",
    "store_time",
    "body",
]


def _message_out(out: Output, msg: MessageExt, body: bool, charset: str) -> dict[str, Any]:
    row = message_row(msg, body=body, charset=charset)
    if not out.as_json:
        row["store_time"] = format_time(msg.store_timestamp)
        if body and row.get("body") is None:
            row["body"] = f"<{msg.store_size} B binary>"
    return row


@app.command("print")
@_STORE
@click.option("--topic", "-t", help="Only this topic (default: every topic).")
@click.option("--queue", "-q", type=int, help="Only this queue id.")
@click.option("--begin", "-b", help="Stored at or after this time.")
@click.option("--end", "-e", help="Stored at or before this time.")
@click.option("--tag", "tags", help="Tag expression: 'TagA || TagB', or '*'.")
@click.option("--charset", default="utf-8", show_default=True, help="To decode bodies as text.")
@click.option("--body/--no-body", default=True, show_default=True)
@click.option("--count-tags", is_flag=True, help="Count messages per tag instead of printing them.")
@_JSON
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
    as_json: bool,
) -> None:
    """Messages of every queue (or one topic / queue), like printMsg and printMsgByQueue."""
    out = Output(as_json)
    begin_ms, end_ms = _parse_time(begin), _parse_time(end)
    with _read(ctx, store_dir) as store:

        def messages() -> Iterator[MessageExt]:
            for t, q in _queues(store, topic, queue):
                start = store.offset_in_queue_by_time(t, q, begin_ms) if begin_ms is not None else 0
                for m in _read_queue(store, t, q, start, tags):
                    if end_ms is not None and m.store_timestamp > end_ms:
                        break
                    yield m

        if count_tags:
            counts = Counter((m.topic, m.tags) for m in messages())
            out.rows(
                "messages per tag",
                ["topic", "tags", "count"],
                ({"topic": t, "tags": tag, "count": n} for (t, tag), n in sorted(counts.items(), key=str)),
            )
            return
        columns = _MSG_COLUMNS if body else _MSG_COLUMNS[:-1]
        n = out.rows("messages", columns, (_message_out(out, m, body, charset) for m in messages()))
        out.line(f"{n} message(s)")


def _detail(out: Output, msg: MessageExt | None, what: str, charset: str = "utf-8") -> None:
    if msg is None:
        raise click.ClickException(f"no message {what}")
    row = _message_out(out, msg, True, charset)
    if not out.as_json:
        row["born_time"] = format_time(msg.born_timestamp)
        row.pop("body_base64", None)
    out.detail(f"message {msg.msg_id}", row)


@app.command("query-key")
@_STORE
@click.option("--topic", "-t", required=True)
@click.option("--key", "-k", required=True)
@click.option("--begin", "-b", help="Stored at or after this time.")
@click.option("--end", "-e", help="Stored at or before this time.")
@click.option("--max", "max_num", type=int, default=None, help="Newest N only.")
@_JSON
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
    with _read(ctx, store_dir) as store:
        found = store.query_message(topic, key, max_num, _parse_time(begin) or 0, _parse_time(end))
        out.rows(
            f"{topic} key {key!r}", _MSG_COLUMNS[:-1], (_message_out(out, m, False, "utf-8") for m in found)
        )


@app.command("query-uniq")
@_STORE
@click.option("--topic", "-t", required=True)
@click.option("--id", "uniq", required=True, help="The client message id (UNIQ_KEY).")
@_JSON
@click.pass_context
def query_uniq(ctx: click.Context, store_dir: Path, topic: str, uniq: str, as_json: bool) -> None:
    """The message with this UNIQ_KEY (queryMsgByUniqueKey)."""
    with _read(ctx, store_dir) as store:
        _detail(Output(as_json), store.query_by_uniq_key(topic, uniq), f"with UNIQ_KEY {uniq} in {topic}")


@app.command("query-id")
@_STORE
@click.argument("msg_id")
@_JSON
@click.pass_context
def query_id(ctx: click.Context, store_dir: Path, msg_id: str, as_json: bool) -> None:
    """The message with this offsetMsgId (queryMsgById)."""
    with _read(ctx, store_dir) as store:
        _detail(Output(as_json), store.view_message_by_id(msg_id), f"with id {msg_id}")


@app.command("query-offset")
@_STORE
@click.argument("offset", type=int)
@_JSON
@click.pass_context
def query_offset(ctx: click.Context, store_dir: Path, offset: int, as_json: bool) -> None:
    """The message whose record starts at this commitlog offset."""
    with _read(ctx, store_dir) as store:
        _detail(Output(as_json), store.look_message_by_offset(offset), f"at commitlog offset {offset}")


@app.command("query-queue")
@_STORE
@click.option("--topic", "-t", required=True)
@click.option("--queue", "-q", type=int, required=True)
@click.option("--offset", "-o", type=int, required=True, help="Queue offset.")
@_JSON
@click.pass_context
def query_queue(
    ctx: click.Context, store_dir: Path, topic: str, queue: int, offset: int, as_json: bool
) -> None:
    """The message at a queue offset."""
    with _read(ctx, store_dir) as store:
        res = store.get_message("rocketstore-cli", topic, queue, offset, 1)
        msg = res.messages[0] if res.messages and res.messages[0].queue_offset == offset else None
        _detail(Output(as_json), msg, f"at {topic}/{queue} offset {offset} ({res.status.name})")


@app.command("decode-id")
@click.argument("args", nargs=-1, required=True, metavar="[STORE_DIR] MSG_ID")
@_JSON
def decode_id(args: tuple[str, ...], as_json: bool) -> None:
    """Store host, port and commitlog offset inside an offsetMsgId (no store needed)."""
    if len(args) > 2:
        raise click.UsageError("decode-id takes one message id (after an optional store directory)")
    msg_id = args[-1]
    addr, port, offset = decode_offset_msg_id(msg_id)
    Output(as_json).detail(
        f"offsetMsgId {msg_id}",
        {"msg_id": msg_id, "store_host": format_host(addr, port), "physical_offset": offset},
    )


@app.command("consumer-progress")
@_STORE
@click.option("--group", "-g", help="Only this consumer group.")
@click.option("--topic", "-t", help="Only this topic.")
@_JSON
@click.pass_context
def consumer_progress(
    ctx: click.Context, store_dir: Path, group: str | None, topic: str | None, as_json: bool
) -> None:
    """Per group, topic and queue: the store's max offset, the committed offset, the lag."""
    out = Output(as_json)
    with _read(ctx, store_dir) as store:
        table = store.consumer_offsets()

        def rows() -> Iterator[dict[str, Any]]:
            for (t, g), queues in sorted(table.items()):
                if group not in (None, g) or topic not in (None, t):
                    continue
                for q, committed in sorted(queues.items()):
                    hi = store.max_offset_in_queue(t, q)
                    yield {
                        "group": g,
                        "topic": t,
                        "queue_id": q,
                        "max_offset": hi,
                        "consumer_offset": committed,
                        "lag": max(0, hi - committed),
                    }

        n = out.rows(
            "consumer progress",
            ["group", "topic", "queue_id", "max_offset", "consumer_offset", "lag"],
            rows(),
        )
        if n == 0:
            out.line("no consumer offsets (config/consumerOffset.json is absent or empty)")


# --- maintenance ---------------------------------------------------------------------------------
@app.command()
@_STORE
@click.option("--no-crc", is_flag=True, help="Skip body CRCs (structure only; faster).")
@_JSON
@click.pass_context
def verify(ctx: click.Context, store_dir: Path, no_crc: bool, as_json: bool) -> None:
    """Check every record (structure, CRC), queue entry and index chain. Exit 0 clean, 1 damaged."""
    from rocketstore.verify import verify_store

    out = Output(as_json)
    cfg = _config(ctx, store_dir)
    with _progress(out, "verifying") as progress:
        report = verify_store(store_dir, cfg, check_crc=not no_crc, progress=progress)
    print_verify_report(out, report)
    ctx.exit(0 if report.clean else 1)


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
        out.rows("damage", ["kind", "file", "offset", "detail"], (d.to_dict() for d in report.damage))
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
@_STORE
@click.option("--dry-run", is_flag=True, help="Only say what recovery would keep and cut; write nothing.")
@_JSON
@click.pass_context
def recover(ctx: click.Context, store_dir: Path, dry_run: bool, as_json: bool) -> None:
    """Recover the store as an open would (spec §7): what is kept, what is cut."""
    out = Output(as_json)
    if dry_run:
        with _read(ctx, store_dir) as store:
            rec = store.recovery
    else:
        with _write(ctx, store_dir) as store:
            rec = store.recovery
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
        "reput_from": rec.reput_from,
    }
    out.detail("recovery (dry run: nothing written)" if dry_run else "recovery done", fields)


@app.command()
@_STORE
@click.option(
    "--reserved-hours",
    type=int,
    help="Keep segments written in the last N hours (default: file_reserved_time, 72).",
)
@_JSON
@click.pass_context
def reclaim(ctx: click.Context, store_dir: Path, reserved_hours: int | None, as_json: bool) -> None:
    """One manual reclamation round (spec §9): expired segments, then queues and index."""
    changes = {"file_reserved_time": reserved_hours} if reserved_hours is not None else {}
    with _write(ctx, store_dir, **changes) as store:
        before = store.min_phy_offset()
        report = store.reclaim()
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
    }
    Output(as_json).detail("reclamation round", fields)


@app.command()
@_STORE
@click.option("--topic", "-t", required=True)
@click.option("--tag", help="Tags of every message.")
@click.option("--key", "keys", multiple=True, help="A key (repeatable).")
@click.option("--property", "props", multiple=True, metavar="K=V", help="A user property (repeatable).")
@click.option("--queue", "-q", type=int, help="Queue id (default: the store picks, round robin).")
@click.option("--delay", type=int, default=0, help="Delay level (1 = 1 s, ... 18 = 2 h).")
@click.option(
    "--file", "body_file", type=click.File("rb"), help="One message: this file's bytes ('-' for stdin)."
)
@click.option("--lines", is_flag=True, help="One message per line of stdin.")
@click.argument("bodies", nargs=-1)
@_JSON
@click.pass_context
def put(
    ctx: click.Context,
    store_dir: Path,
    topic: str,
    tag: str | None,
    keys: tuple[str, ...],
    props: tuple[str, ...],
    queue: int | None,
    delay: int,
    body_file: Any,
    lines: bool,
    bodies: tuple[str, ...],
    as_json: bool,
) -> None:
    """Put messages: the BODIES arguments, a --file, or --lines of stdin."""
    properties = {}
    for p in props:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"{p!r}: want K=V", param_hint="--property")
        properties[k] = v
    payloads: list[bytes] = [b.encode() for b in bodies]
    if body_file is not None:
        payloads.append(body_file.read())
    if lines:
        payloads.extend(line.rstrip(b"\r\n") for line in sys.stdin.buffer)
    if not payloads:
        raise click.UsageError("nothing to put: give BODIES, --file or --lines")
    msgs = [
        Message(
            topic,
            body,
            tags=tag,
            keys=list(keys),
            properties=properties or None,
            queue_id=queue,
            delay_level=delay,
        )
        for body in payloads
    ]
    out = Output(as_json)
    with _write(ctx, store_dir) as store:
        results = store.put_messages(msgs)
    rows = [
        {
            "status": r.status.name,
            "msg_id": r.msg_id,
            "queue_id": r.queue_id,
            "queue_offset": r.queue_offset,
            "physical_offset": r.physical_offset,
        }
        for r in results
    ]
    out.rows("put", ["status", "msg_id", "queue_id", "queue_offset", "physical_offset"], rows)
    if not all(r.ok for r in results):
        ctx.exit(1)


@app.command()
@_STORE
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
@_JSON
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
    as_json: bool,
) -> None:
    """Print a queue's (or a topic's queues') newest messages, and with -f new ones as they come.

    The store is reopened read-only at each look: it may be written by another process.
    """
    out = Output(as_json)
    since_ms = _parse_time(since)
    positions: dict[tuple[str, int], int] = {}
    while True:
        with _read(ctx, store_dir) as store:
            for t, q in _queues(store, topic, queue):
                if (t, q) not in positions:
                    hi = store.max_offset_in_queue(t, q)
                    if offset is not None:
                        positions[(t, q)] = offset
                    elif since_ms is not None:
                        positions[(t, q)] = store.offset_in_queue_by_time(t, q, since_ms)
                    else:
                        positions[(t, q)] = max(store.min_offset_in_queue(t, q), hi - lines)
                for m in _read_queue(store, t, q, positions[(t, q)]):
                    row = _message_out(out, m, body, "utf-8")
                    if out.as_json:
                        out.json(row)
                    else:
                        text = f" {row['body']}" if body else ""
                        where = f"{t}/{q}#{m.queue_offset}"
                        out.line(f"{row['store_time']} {where} tags={m.tags} keys={' '.join(m.keys)}{text}")
                    positions[(t, q)] = m.queue_offset + 1
        if not follow:
            return
        sys.stdout.flush()
        time.sleep(interval)


@app.command()
@click.argument("work_dir", type=click.Path(file_okay=False, path_type=Path), default=None, required=False)
@click.option("--messages", "-n", type=int, default=100_000, show_default=True)
@click.option("--body-size", type=int, default=100, show_default=True)
@_JSON
def bench(work_dir: Path | None, messages: int, body_size: int, as_json: bool) -> None:
    """Put/get throughput on a fresh temporary store made in WORK_DIR (default: the system's temp dir)."""
    from rocketstore.cli.bench import run_bench

    out = Output(as_json)
    out.rows(
        f"rocketstore bench: {messages:,} x {body_size} B, one thread, ASYNC_FLUSH",
        ["workload", "msgs_per_s", "mb_per_s"],
        run_bench(work_dir, messages, body_size),
    )


app.add_command(spark_group)
