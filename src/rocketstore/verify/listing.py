"""Listing a store's directories for the checkers, links not followed: what does not belong
there (a stray name, a link, a file where a directory belongs) is damage, never an error."""

from __future__ import annotations

from pathlib import Path

from rocketstore.errors import StorePathError
from rocketstore.storage.paths import (
    StoreEntry,
    StoreLayout,
    is_leftover_name,
    is_segment_name,
    list_store_dir,
)
from rocketstore.verify.report import DamageLog

__all__ = ["list_entries", "named_files", "store_relative", "wrong_kind"]


def list_entries(paths: StoreLayout, directory: Path, damage: DamageLog) -> list[StoreEntry]:
    """The entries of a store directory (links not followed); something other than a real
    directory there is damage, and read as empty."""
    try:
        return list_store_dir(directory)
    except StorePathError as exc:
        wrong_kind(paths, directory, exc.found, exc.expected, damage)
        return []


def wrong_kind(paths: StoreLayout, path: Path, found: str, expected: str, damage: DamageLog) -> None:
    damage.add("file_type", store_relative(paths, path), 0, f"{found} where {expected} belongs; not read")


def named_files(
    paths: StoreLayout, directory: Path, damage: DamageLog
) -> tuple[list[tuple[int, Path]], list[Path]]:
    """(segment files by offset, other entries) of a directory of 20-digit-named files; an entry
    named like a segment that is not a regular file is reported here."""
    named: list[tuple[int, Path]] = []
    strays: list[Path] = []
    for e in list_entries(paths, directory, damage):
        if is_leftover_name(e.name):
            continue
        if not is_segment_name(e.name):
            strays.append(e.path)
        elif e.is_file:
            named.append((int(e.name), e.path))
        else:
            wrong_kind(paths, e.path, e.kind, "a regular file (a segment)", damage)
    return sorted(named), strays


def store_relative(paths: StoreLayout, p: Path) -> str:
    return p.relative_to(paths.root).as_posix()
