"""How the command prints: tables on a terminal, plain aligned columns when piped, JSON Lines with
``--json`` (one object per row, keys in snake_case; message fields named as ``MessageExt``).

Everything streams: rows are printed in chunks of ``CHUNK`` as they come, so the first line
appears at once and memory stays bounded however many rows follow. Each chunk is aligned on its
own, column widths only growing from one chunk to the next. Widths are terminal cells
(``rich.cells.cell_len``), so CJK text lines up. Nothing is folded inside a cell: on a terminal
a line too wide for it has its last column (a body, keys) cropped with "…", never an id.
Counts, footers and progress go to stderr: stdout carries only the data, for pipes. Times are
ISO 8601 with their offset (``rocketstore.times``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len, set_cell_size
from rich.console import Console

from rocketstore.times import format_time

if TYPE_CHECKING:
    from rocketstore.message import MessageExt

__all__ = ["CHUNK", "Output", "message_line", "message_out", "message_row"]

CHUNK = 100
# a last column that may be cropped to fit a terminal's width (ids, numbers and times never are)
_ELASTIC = frozenset({"body", "keys", "properties", "detail"})


def message_row(msg: MessageExt, *, body: bool, charset: str) -> dict[str, Any]:
    """A message as plain JSON values, its fields named as MessageExt's properties, with
    ``store_time`` and ``born_time`` as ISO 8601 beside the epoch milliseconds."""
    row = msg.to_dict(body=False)
    row["store_time"] = format_time(msg.store_timestamp)
    row["born_time"] = format_time(msg.born_timestamp)
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
    """Where a command's rows go. ``console`` replaces the terminal (tests)."""

    def __init__(self, as_json: bool, console: Console | None = None) -> None:
        self.as_json = as_json
        self.console = console or Console(highlight=False, soft_wrap=False)
        self.errors = Console(stderr=True, highlight=False)

    def rows(self, columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> int:
        """Rows as a table (or JSON Lines), printed as they come; returns how many."""
        n = 0
        if self.as_json:
            for row in rows:
                self.json(row, flush=False)
                n += 1
                if n % CHUNK == 0:
                    self.flush()
            self.flush()
            return n
        widths = [_width(c) for c in columns]
        fit = self.console.width if self.console.is_terminal and columns[-1] in _ELASTIC else None
        for chunk in _chunks(rows):
            cells = [[_cell(row.get(c)) for c in columns] for row in chunk]
            widths = [max([w, *(_width(r[i]) for r in cells)]) for i, w in enumerate(widths)]
            lines = [list(columns), *cells] if n == 0 else cells
            self.console.file.write("".join(_plain(line, widths, fit) for line in lines))
            self.console.file.flush()
            n += len(cells)
        if n == 0:
            self.console.file.write(_plain(list(columns), widths, fit))
        return n

    def detail(self, title: str, fields: Mapping[str, Any]) -> None:
        """One object: a block of 'name: value' lines, or one JSON line."""
        if self.as_json:
            self.json(fields)
            return
        self.line(title)
        width = max((len(k) for k in fields), default=0)
        for key, value in fields.items():
            self.line(f"  {key:<{width}}  {_cell(value)}")

    def json(self, obj: Mapping[str, Any], *, flush: bool = True) -> None:
        self.console.file.write(json.dumps(obj, ensure_ascii=False, default=_jsonable) + "\n")
        if flush:
            self.flush()

    def flush(self) -> None:
        self.console.file.flush()

    def line(self, text: str, *, flush: bool = True) -> None:
        """A line of data on stdout (nothing with --json)."""
        if not self.as_json:
            self.console.file.write(text + "\n")
            if flush:
                self.flush()

    def note(self, text: str) -> None:
        """A count, footer or remark: on stderr, so stdout stays data only."""
        self.errors.print(text, markup=False, highlight=False, soft_wrap=True)


def _chunks(rows: Iterable[Mapping[str, Any]]) -> Iterator[list[Mapping[str, Any]]]:
    it = iter(rows)
    while chunk := list(islice(it, CHUNK)):
        yield chunk


def _width(text: str) -> int:
    """Terminal cells: one per character for ASCII (most cells, and cheap), else rich's count."""
    return len(text) if text.isascii() else cell_len(text)


def _plain(line: Sequence[str], widths: Sequence[int], fit: int | None) -> str:
    """One aligned line; with ``fit`` (a terminal's width) its last column is cropped to fit."""
    head = "".join(v + " " * (w - _width(v)) + "  " for v, w in zip(line[:-1], widths))
    last = line[-1]
    room = fit - _width(head) - 1 if fit is not None else 0
    if fit is not None and _width(head) + _width(last) > fit and room > 0:
        last = set_cell_size(last, room) + "…"
    return (head + last).rstrip() + "\n"


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, dict | list | tuple) and not value):
        return "-"  # nothing: a blank would read as a missing column
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value).replace("\n", "\\n")


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    return str(value)


def message_out(out: Output, msg: MessageExt, body: bool, charset: str) -> dict[str, Any]:
    """``message_row`` for ``out``: a body that is not text is described in a table, not printed."""
    row = message_row(msg, body=body, charset=charset)
    if not out.as_json and body and row.get("body") is None:
        row["body"] = f"<{msg.store_size} B binary>"
    return row


def message_line(out: Output, m: MessageExt, body: bool, *, flush: bool = False) -> None:
    """One message as a line (``tail``, ``consume``): time, where, tags and keys when it has them,
    the body; or one JSON object. Printed, not flushed unless asked."""
    row = message_out(out, m, body, "utf-8")
    if out.as_json:
        out.json(row, flush=flush)
        return
    parts = [row["store_time"], f"{m.topic}/{m.queue_id}#{m.queue_offset}"]
    if m.tags is not None:
        parts.append(f"tags={m.tags}")
    if m.keys:
        parts.append(f"keys={' '.join(m.keys)}")
    if body:
        parts.append(str(row["body"]).replace("\n", "\\n"))
    out.line(" ".join(parts), flush=flush)
