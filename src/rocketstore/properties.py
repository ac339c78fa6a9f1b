"""Java ``.properties`` text, as ``java.util.Properties`` reads and writes it: RocketMQ's
``broker.conf``, the bodies of GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG.

A line ending in an odd number of backslashes continues on the next (whose leading blanks are
dropped); a line whose first non-blank character is ``#`` or ``!`` is a comment. The key ends at
the first unescaped ``=``, ``:`` or blank; blanks around the separator are dropped, and a key
alone has the empty value. ``\\t``, ``\\n``, ``\\r``, ``\\f`` and ``\\uXXXX`` are escapes; a
backslash before any other character stands for that character.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Final

from rocketstore.errors import StoreConfigError

__all__ = ["format_line", "logical_lines", "natural_lines", "parse", "parse_line", "text_of"]

_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")
_BLANKS: Final = " \t\f"
_SEPARATORS: Final = "=:"
_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_WRITTEN: Final = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def natural_lines(text: str) -> list[str]:
    """``text``'s lines, split at ``\\n``, ``\\r\\n`` or ``\\r`` only (as Java's reader; other line
    breaks ``str.splitlines`` knows belong to a line)."""
    lines = _LINE_BREAK.split(text)
    return lines[:-1] if lines and not lines[-1] else lines


def logical_lines(text: str) -> Iterator[tuple[int, int, str]]:
    """(first natural line index, lines it spans, logical line) for each line that is neither
    blank nor a comment; continuation lines joined."""
    lines = natural_lines(text)
    i = 0
    while i < len(lines):
        first, line = i, lines[i].lstrip(_BLANKS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(_BLANKS)
            i += 1
        if _continues(line):  # at the end of the text: the backslash goes
            line = line[:-1]
        yield first, i - first, line


def _unescape(text: str, where: str) -> str:
    if "\\" not in text:
        return text
    out, i = [], 0
    while i < len(text):
        c = text[i]
        i += 1
        if c != "\\" or i == len(text):
            out.append(c)
            continue
        c = text[i]
        i += 1
        if c == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise StoreConfigError(f"{where}: malformed \\uxxxx escape \\u{digits}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)


def parse_line(line: str, where: str = "properties") -> tuple[str, str]:
    """(key, value) of one logical line (see ``logical_lines``)."""
    line = line.lstrip(_BLANKS)
    end, escaped = 0, False
    while end < len(line):
        c = line[end]
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in _SEPARATORS or c in _BLANKS:
            break
        end += 1
    rest = line[end:].lstrip(_BLANKS)
    if rest[:1] and rest[0] in _SEPARATORS:
        rest = rest[1:].lstrip(_BLANKS)
    return _unescape(line[:end], where), _unescape(rest, where)


def parse(text: str, name: str = "properties") -> dict[str, str]:
    """Every key and value of ``text`` (a later line wins); StoreConfigError for a malformed
    ``\\u`` escape, naming ``name`` and the line."""
    return {
        key: value
        for key, value in (parse_line(line, f"{name}:{first + 1}") for first, _, line in logical_lines(text))
    }


def _escape(text: str, key: bool) -> str:
    out = "".join(_WRITTEN.get(c, c) for c in text)
    if key:
        return "".join("\\" + c if c in " =:#!" else c for c in out)
    return "\\" + out if out.startswith(" ") else out


def format_line(key: str, value: str) -> str:
    """``key=value``, escaped so that ``parse_line`` gives back ``key`` and ``value``."""
    return f"{_escape(key, True)}={_escape(value, False)}"


def text_of(values: Mapping[str, str]) -> str:
    """One ``key=value`` line per entry."""
    return "".join(format_line(key, value) + "\n" for key, value in values.items())
