"""The consumer commands: ``consume``, ``reset-offset``, ``consumer-progress`` (docs/cli.md).

They read the store as a follower (read-only, beside a writer in another process) and change
only ``config/consumerOffset.json`` (through ``consumer.offset_store``: under its lock, merged)
and the group's membership files under ``{root}/consumers/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from rocketstore.cli.common import (
    JSON_OPTION,
    MAX_MESSAGES_OPTION,
    NotFound,
    read_store,
    store_config,
    time_value,
    with_store,
)
from rocketstore.cli.output import Output, message_line
from rocketstore.storage.paths import store_dir_exists
from rocketstore.times import parse_time

__all__ = ["add_consume_commands"]

_GROUP = click.option("--group", "-g", required=True, help="Consumer group.")
_TOPIC = click.option("--topic", "-t", required=True, help="Topic.")


def add_consume_commands(group: click.Group) -> None:
    for command in (consume, reset_offset, consumer_progress):
        group.add_command(command)


@click.command()
@with_store
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
@MAX_MESSAGES_OPTION
@click.option("--no-commit", is_flag=True, help="Do not commit the group's offsets (a look only).")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new messages (Ctrl-C stops).")
@click.option("--body/--no-body", default=True, show_default=True)
@JSON_OPTION
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
    start_at: Any = start if start in ("earliest", "latest") else time_value(start, "--from")
    config = store_config(ctx, store_dir)
    from rocketstore.consumer import open_consumer  # here, not with --help

    with open_consumer(
        store_dir, group, {topic: tags}, start=start_at, auto_commit=not no_commit, config=config
    ) as c:
        if not follow and topic not in c.store.topics():
            raise NotFound(f"no topic {topic!r} in this store")
        printed = 0
        while max_messages is None or printed < max_messages:
            want = 256 if max_messages is None else min(256, max_messages - printed)
            messages = c.poll(want, timeout=1.0 if follow else 0.0)
            if not messages and not follow:
                break
            for m in messages:
                message_line(out, m, body)
            printed += len(messages)
            out.flush()
            if not no_commit:
                c.commit()


@click.command("reset-offset")
@with_store
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
@JSON_OPTION
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
    at = _reset_target(to)
    with read_store(ctx, store_dir) as store:
        queues = store.topics().get(topic)
        if not queues:
            raise NotFound(f"no topic {topic!r} in this store")
        groups = {g for _, g in store.consumer_offsets()}
        if group not in groups and not store_dir_exists(store.layout.consumers / group):
            # a misspelt group would otherwise become a new one, silently (as consumer-progress)
            raise NotFound(
                f"no consumer group {group!r} in this store (it has offsets of: "
                f"{', '.join(sorted(groups)) or 'none'}); a new group starts where its consumers' "
                "--from says"
            )
        if queue is not None:
            if queue not in queues:
                raise NotFound(f"no queue {queue} in topic {topic!r}")
            queues = [queue]
        from rocketstore.consumer.group import GroupMembership

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
            elif at is None:
                new = min(max(int(to), lo), hi)
            else:
                new = store.offset_in_queue_by_time(topic, q, at)
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
        from rocketstore.consumer.offset_store import commit_offsets

        commit_offsets(store.layout.config / "consumerOffset.json", changes, forced=changes)
    out.rows(["group", "topic", "queue_id", "old_offset", "new_offset"], rows)


def _reset_target(to: str) -> int | None:
    """The time (epoch ms) ``--to`` names; None for earliest, latest and a queue offset. A bare
    number is a queue offset here: a time in epoch ms is written ``@EPOCH_MS``."""
    if to in ("earliest", "latest") or to.isdigit():
        return None
    try:
        return parse_time(to[1:] if to.startswith("@") else to)
    except ValueError:
        raise click.BadParameter(
            f"{to!r} is not earliest, latest, a queue offset (a number) or a time (@EPOCH_MS, "
            "ISO 8601 such as 2026-11-22T09:00:00 or 2026-11-22T09:00:00+08:00, or "
            "yyyy-MM-dd#HH:mm:ss:SSS)",
            param_hint="--to",
        ) from None


@click.command("consumer-progress")
@with_store
@click.option("--group", "-g", help="Only this consumer group.")
@click.option("--topic", "-t", help="Only this topic.")
@JSON_OPTION
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
    with read_store(ctx, store_dir) as store:
        table = store.consumer_offsets()
        if group is not None and all(g != group for _, g in table):
            known = sorted({g for _, g in table})
            raise NotFound(
                f"no consumer group {group!r} in this store (it has offsets of: {', '.join(known) or 'none'})"
            )
        if topic is not None and topic not in store.topics():
            raise NotFound(f"no topic {topic!r} in this store")
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
        out.note("no consumer offsets (config/consumerOffset.json is absent or empty)")
        return
    out.rows(["group", "topic", "queue_id", "max_offset", "consumer_offset", "lag"], rows)
    out.rows(["group", "topic", "queues", "diff_total"], totals)
