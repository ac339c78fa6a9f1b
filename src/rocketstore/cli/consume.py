"""The consumer commands: ``consume``, ``reset-offset``, ``consumer-progress`` (docs/cli.md).

They read the store as a follower (read-only, beside a writer in another process) and change
only ``config/consumerOffset.json`` (through ``consumer.offset_store``: under its lock, merged)
and the group's membership files under ``{root}/consumers/``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from rocketstore.cli.output import Output, format_time, message_row
from rocketstore.consumer import open_consumer
from rocketstore.consumer.group import GroupMembership
from rocketstore.consumer.offset_store import commit_offsets
from rocketstore.geometry import detect_geometry
from rocketstore.message import MessageExt
from rocketstore.store import MessageStore

__all__ = ["add_consume_commands"]

_STORE = click.argument("store_dir", type=click.Path(path_type=Path), default="store", required=False)
_JSON = click.option("--json", "as_json", is_flag=True, help="JSON Lines, one object per row.")
_GROUP = click.option("--group", "-g", required=True, help="Consumer group.")
_TOPIC = click.option("--topic", "-t", required=True, help="Topic.")


def add_consume_commands(group: click.Group) -> None:
    for command in (consume, reset_offset, consumer_progress):
        group.add_command(command)


def _time(text: str) -> int:
    from rocketstore.cli.app import _parse_time  # the CLI's one time syntax

    ms = _parse_time(text)
    assert ms is not None
    return ms


@contextlib.contextmanager
def _follower(ctx: click.Context, root: Path) -> Iterator[MessageStore]:
    if not root.exists():
        raise click.ClickException(f"no such directory: {root}")
    with MessageStore.open(root, detect_geometry(root, ctx.find_root().obj), readonly=True) as store:
        yield store


@click.command()
@_STORE
@_GROUP
@_TOPIC
@click.option("--tag", "tags", default="*", show_default=True, help="Tag expression: 'TagA || TagB', or '*'.")
@click.option(
    "--from",
    "start",
    default="earliest",
    show_default=True,
    help="Where a queue the group never committed starts: earliest, latest, or a time.",
)
@click.option("--max-messages", "-n", type=click.IntRange(min=1), help="Stop after this many messages.")
@click.option("--no-commit", is_flag=True, help="Do not commit the group's offsets (a look only).")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new messages (Ctrl-C stops).")
@click.option("--body/--no-body", default=True, show_default=True)
@_JSON
@click.pass_context
def consume(
    ctx: click.Context,
    store_dir: Path,
    group: str,
    topic: str,
    tags: str,
    start: str,
    max_messages: int | None,
    no_commit: bool,
    follow: bool,
    body: bool,
    as_json: bool,
) -> None:
    """Print a topic's messages as consumer GROUP gets them, from its committed offsets, and
    commit what was printed. Without -f it stops when it has read everything there is; with
    several consumers of a group (other processes) each prints its share of the queues.

    \b
    rocketstore consume store -g billing -t Orders --from earliest -n 10
    rocketstore consume store -g billing -t Orders --tag 'TagA || TagB' -f
    """
    out = Output(as_json)
    start_at: Any = start if start in ("earliest", "latest") else _time(start)
    if not store_dir.exists():
        raise click.ClickException(f"no such directory: {store_dir}")
    config = detect_geometry(store_dir, ctx.find_root().obj)
    with open_consumer(
        store_dir, group, {topic: tags}, start=start_at, auto_commit=not no_commit, config=config
    ) as c:
        if not follow and topic not in c.store.topics():
            raise click.ClickException(f"no topic {topic!r} in this store")
        printed = 0
        while max_messages is None or printed < max_messages:
            want = 256 if max_messages is None else min(256, max_messages - printed)
            messages = c.poll(want, timeout=1.0 if follow else 0.0)
            if not messages and not follow:
                break
            for m in messages:
                _print_message(out, m, body)
            printed += len(messages)
            sys.stdout.flush()
            if not no_commit:
                c.commit()


def _print_message(out: Output, m: MessageExt, body: bool) -> None:
    row = message_row(m, body=body, charset="utf-8")
    if out.as_json:
        out.json(row)
        return
    text = ""
    if body:
        text = f" {row['body']}" if row.get("body") is not None else f" <{m.store_size} B binary>"
    where = f"{m.topic}/{m.queue_id}#{m.queue_offset}"
    out.line(f"{format_time(m.store_timestamp)} {where} tags={m.tags} keys={' '.join(m.keys)}{text}")


@click.command("reset-offset")
@_STORE
@_GROUP
@_TOPIC
@click.option(
    "--to",
    "to",
    required=True,
    help="earliest, latest, a time (ISO 8601, yyyy-MM-dd#HH:mm:ss:SSS, or @EPOCH_MS), or a queue offset.",
)
@click.option("--queue", "-q", "queue", type=int, help="Only this queue (default: every queue of the topic).")
@click.option("--force", is_flag=True, help="Reset even while consumers of the group are running.")
@_JSON
@click.pass_context
def reset_offset(
    ctx: click.Context,
    store_dir: Path,
    group: str,
    topic: str,
    to: str,
    queue: int | None,
    force: bool,
    as_json: bool,
) -> None:
    """Set GROUP's committed offsets in TOPIC's queues (mqadmin resetOffsetByTime): to the first
    or the next message, the first stored at or after a time, or an offset (kept inside each
    queue's range). Running consumers of the group would commit over the reset: stop them first.

    \b
    rocketstore reset-offset store -g billing -t Orders --to earliest
    rocketstore reset-offset store -g billing -t Orders --to 2026-11-22T10:00:00
    rocketstore reset-offset store -g billing -t Orders -q 1 --to 42
    """
    out = Output(as_json)
    with _follower(ctx, store_dir) as store:
        queues = store.topics().get(topic)
        if not queues:
            raise click.ClickException(f"no topic {topic!r} in this store")
        if queue is not None:
            if queue not in queues:
                raise click.ClickException(f"topic {topic!r} has no queue {queue}")
            queues = [queue]
        live = GroupMembership.live_members(store.layout.consumers / group)
        if live and not force:
            raise click.ClickException(
                f"group {group!r} has {len(live)} running consumer(s) ({', '.join(live)}): they would "
                "commit over the reset; stop them, or pass --force"
            )
        rows = []
        changes = {}
        for q in queues:
            lo, hi = store.min_offset_in_queue(topic, q), store.max_offset_in_queue(topic, q)
            if to == "earliest":
                new = lo
            elif to == "latest":
                new = hi
            elif to.isdigit():
                new = min(max(int(to), lo), hi)
            else:
                new = store.offset_in_queue_by_time(topic, q, _time(to[1:] if to.startswith("@") else to))
            changes[(topic, group, q)] = new
            rows.append(
                {
                    "group": group,
                    "topic": topic,
                    "queue_id": q,
                    "old_offset": store.query_offset(group, topic, q),
                    "new_offset": new,
                }
            )
        commit_offsets(store.layout.config / "consumerOffset.json", changes, forced=changes)
    out.rows(f"{group} reset in {topic}", ["group", "topic", "queue_id", "old_offset", "new_offset"], rows)


@click.command("consumer-progress")
@_STORE
@click.option("--group", "-g", help="Only this consumer group.")
@click.option("--topic", "-t", help="Only this topic.")
@_JSON
@click.pass_context
def consumer_progress(
    ctx: click.Context, store_dir: Path, group: str | None, topic: str | None, as_json: bool
) -> None:
    """Per group, topic and queue: the store's max offset, the committed offset, the lag; then the
    total lag of each group in each topic (mqadmin's Diff Total).

    \b
    rocketstore consumer-progress store -g billing
    """
    out = Output(as_json)
    with _follower(ctx, store_dir) as store:
        table = store.consumer_offsets()
        rows: list[dict[str, Any]] = []
        totals: list[dict[str, Any]] = []
        for (t, g), queues in sorted(table.items()):
            if group not in (None, g) or topic not in (None, t):
                continue
            lags = []
            for q, committed in sorted(queues.items()):
                hi = store.max_offset_in_queue(t, q)
                lags.append(max(0, hi - committed))
                rows.append(
                    {
                        "group": g,
                        "topic": t,
                        "queue_id": q,
                        "max_offset": hi,
                        "consumer_offset": committed,
                        "lag": lags[-1],
                    }
                )
            totals.append({"group": g, "topic": t, "queues": len(lags), "diff_total": sum(lags)})
    if not rows:
        out.line("no consumer offsets (config/consumerOffset.json is absent or empty)")
        return
    out.rows(
        "consumer progress", ["group", "topic", "queue_id", "max_offset", "consumer_offset", "lag"], rows
    )
    out.rows("lag per group and topic", ["group", "topic", "queues", "diff_total"], totals)
