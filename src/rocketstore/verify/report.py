"""What ``rocketstore verify`` finds: ``Damage``, the ``VerifyReport``, and the ``DamageLog`` the
checkers add to while they read (at most ``MAX_DAMAGE_PER_FILE`` listed per file)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "DAMAGE_KINDS",
    "MAX_DAMAGE_PER_FILE",
    "Damage",
    "DamageLog",
    "Progress",
    "VerifyReport",
    "no_progress",
]

DAMAGE_KINDS: Final = (
    "file_size",
    "file_name",
    "missing_file",
    "commitlog_record",
    "commitlog_gap",
    "consume_queue_entry",
    "index_header",
    "index_chain",
    "index_entry",
    "index_missing",
    "timer_log_unit",
    "timer_file",
)
MAX_DAMAGE_PER_FILE: Final = 100

Progress = Callable[[str, int, int], None]  # (stage, files done, files in the stage)


def no_progress(stage: str, done: int, total: int) -> None:
    pass


@dataclass(frozen=True)
class Damage:
    """One thing wrong in a store. ``offset`` is a global commitlog offset for commitlog damage
    (records, gaps, segment files), a byte position within ``file`` otherwise."""

    kind: str
    file: str
    offset: int
    detail: str

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "file": self.file, "offset": self.offset, "detail": self.detail}


@dataclass(frozen=True)
class VerifyReport:
    damage: list[Damage]
    records: int  # valid commitlog records
    queue_entries: int  # consume-queue entries checked (fillPreBlank padding and unwritten space excluded)
    index_entries: int  # used index entries checked
    commitlog_range: tuple[int, int]  # (min offset, end of valid data), as recovery counts them

    @property
    def clean(self) -> bool:
        return not self.damage

    def to_dict(self) -> dict[str, object]:
        return {
            "clean": self.clean,
            "records": self.records,
            "queue_entries": self.queue_entries,
            "index_entries": self.index_entries,
            "commitlog_range": list(self.commitlog_range),
            "damage": [d.to_dict() for d in self.damage],
        }


class DamageLog:
    """Collects damage, listing at most MAX_DAMAGE_PER_FILE per file and counting the rest, so a
    file of garbage yields a readable report."""

    def __init__(self) -> None:
        self._items: list[Damage] = []
        self._per_file: Counter[str] = Counter()
        self._unlisted: dict[str, Damage] = {}

    def files(self) -> set[str]:
        """The files with damage added so far."""
        return set(self._per_file)

    def wants(self, file: str) -> bool:
        return self._per_file[file] < MAX_DAMAGE_PER_FILE

    def add(self, kind: str, file: str, offset: int, detail: str) -> None:
        n = self._per_file[file]
        self._per_file[file] = n + 1
        if n < MAX_DAMAGE_PER_FILE:
            self._items.append(Damage(kind, file, offset, detail))
        elif file not in self._unlisted:
            self._unlisted[file] = Damage(kind, file, offset, "")

    def add_each(self, kind: str, file: str, offsets: npt.ArrayLike, detail: Callable[[int], str]) -> None:
        """One damage per element ``i`` of ``offsets``, described by ``detail(i)`` (called only for
        those that are listed)."""
        where = np.asarray(offsets, dtype=np.int64)
        for i in range(len(where)):
            if not self.wants(file):
                self._per_file[file] += len(where) - i - 1
                self.add(kind, file, int(where[i]), "")
                return
            self.add(kind, file, int(where[i]), detail(i))

    def per_file(self) -> dict[str, tuple[list[Damage], int]]:
        """Per file: the damage listed, then the first one not listed (in the order added), and how
        many were added in all. What ``absorb`` needs to merge logs kept apart (one per worker)."""
        out: dict[str, tuple[list[Damage], int]] = {}
        for d in self._items:
            out.setdefault(d.file, ([], 0))[0].append(d)
        for file, first in self._unlisted.items():
            out.setdefault(file, ([], 0))[0].append(first)
        return {file: (items, self._per_file[file]) for file, (items, _) in out.items()}

    def absorb(self, part: dict[str, tuple[list[Damage], int]]) -> None:
        """Add another log's ``per_file``, as if its damage had been added here, after this log's."""
        for file, (items, count) in part.items():
            for d in items:
                self.add(d.kind, file, d.offset, d.detail)
            self._per_file[file] += count - len(items)

    def result(self) -> list[Damage]:
        items = list(self._items)
        for file, first in self._unlisted.items():
            more = self._per_file[file] - MAX_DAMAGE_PER_FILE
            items.append(
                Damage(first.kind, file, first.offset, f"{more} more problems in this file, not listed")
            )
        return sorted(items, key=lambda d: (d.file, d.offset, d.kind))
