"""How the command prints: rich tables and detail blocks on a terminal (plain text when piped),
or JSON Lines with ``--json`` (one object per row; message fields named as ``MessageExt``)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from rocketstore.message import MessageExt

__all__ = ["Output", "format_time", "message_row"]


def format_time(ms: int | None) -> str:
    """Store times as mqadmin prints them, in local time; '-' for none; the raw number, said to be
    no date, for one no calendar holds (a garbage or far-future checkpoint)."""
    if ms is None or ms < 0:
        return "-"
    try:
        return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (ValueError, OverflowError, OSError):
        return f"{ms} (ms, not a representable date)"


def message_row(msg: MessageExt, *, body: bool, charset: str) -> dict[str, Any]:
    """A message as plain JSON values, its fields named as MessageExt's properties."""
    row = msg.to_dict(body=False)
    row["tags_code"] = msg.tags_code
    row["uniq_key"] = msg.uniq_key
    if body:
        raw = msg.body
        try:
            row["body"] = raw.decode(charset)
        except UnicodeDecodeError:
            row["body"] = None
        row["body_base64"] = base64.b64encode(raw).decode("ascii")
    return row


class Output:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.console = Console(highlight=False, soft_wrap=False)
        self.errors = Console(stderr=True, highlight=False)

    def rows(self, title: str, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> int:
        """A table (or JSON Lines); returns how many rows were printed."""
        n = 0
        if self.as_json:
            for row in rows:
                self.json(row)
                n += 1
            return n
        if not self.console.is_terminal:  # piped: plain aligned columns, nothing wrapped or boxed
            cells = [[_cell(row.get(c)) for c in columns] for row in rows]
            widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
            for line in [list(columns), *cells]:
                sys.stdout.write("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() + "\n")
            return len(cells)
        table = Table(title=title, title_justify="left")
        for c in columns:
            table.add_column(c, overflow="fold")
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in columns))
            n += 1
        self.console.print(table)
        return n

    def detail(self, title: str, fields: Mapping[str, Any]) -> None:
        """One object: a block of 'name: value' lines, or one JSON line."""
        if self.as_json:
            self.json(fields)
            return
        self.console.print(f"[bold]{title}[/bold]")
        width = max((len(k) for k in fields), default=0)
        for key, value in fields.items():
            self.line(f"  {key:<{width}}  {_cell(value)}")

    def json(self, obj: Mapping[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj, ensure_ascii=False, default=_jsonable) + "\n")

    def line(self, text: str) -> None:
        if not self.as_json:
            self.console.print(text, markup=False, crop=False, overflow="ignore")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    return str(value)
