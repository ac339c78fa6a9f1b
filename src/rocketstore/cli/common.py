"""What every command shares: exit codes, the store argument, options, opening a store to read,
times given on the command line."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rocketstore.config import StoreConfig
from rocketstore.times import parse_time

if TYPE_CHECKING:  # the store loads with the first command that opens one, not with --help
    from rocketstore.store import MessageStore

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_USAGE",
    "JSON_OPTION",
    "MAX_MESSAGES_OPTION",
    "STORE_OPTION",
    "NotFound",
    "pick_store",
    "read_store",
    "store_config",
    "time_value",
    "with_store",
]

EXIT_ERROR = 1  # a damaged store, a refused put, a failed operation
EXIT_USAGE = 2  # an option or argument the command does not take (click's code)
EXIT_NOT_FOUND = 3  # no such topic, queue, message or consumer group in this store
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGTERM exits 143 after closing the store)

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="JSON Lines, one object per row.")
MAX_MESSAGES_OPTION = click.option(
    "--max-messages", "-m", type=click.IntRange(min=0), help="Stop after this many messages."
)
STORE_OPTION = click.option(
    "--store",
    "-s",
    "store_opt",
    type=click.Path(path_type=Path),
    help="The store directory (or give it as the first argument; default ./store).",
)


class NotFound(click.ClickException):
    """What the command was asked about is not in this store (exit 3)."""

    exit_code = EXIT_NOT_FOUND


def pick_store(positional: str | Path | None, option: Path | None) -> Path:
    if positional is not None and option is not None:
        raise click.UsageError(f"two store directories: {str(positional)!r} and --store {str(option)!r}")
    return Path(positional if positional is not None else option if option is not None else "store")


def with_store(f: Callable[..., Any]) -> Callable[..., Any]:
    """``[STORE_DIR]`` as the first argument or ``-s/--store``; the command gets ``store_dir``."""

    @functools.wraps(f)
    def command(*args: Any, store_dir: Path | None, store_opt: Path | None, **kwargs: Any) -> Any:
        return f(*args, store_dir=pick_store(store_dir, store_opt), **kwargs)

    command = click.argument("store_dir", type=click.Path(path_type=Path), required=False)(command)
    return STORE_OPTION(command)


def store_config(ctx: click.Context, root: Path) -> StoreConfig:
    base: StoreConfig = ctx.find_root().obj
    if not root.exists():
        raise click.ClickException(
            f"no such directory: {root} (the store directory is -s DIR, the first argument, or ./store)"
        )
    from rocketstore.geometry import detect_geometry

    return detect_geometry(root, base)


@contextlib.contextmanager
def read_store(ctx: click.Context, root: Path) -> Iterator[MessageStore]:
    from rocketstore.store import MessageStore

    with MessageStore.open(root, store_config(ctx, root), readonly=True) as store:
        yield store


def time_value(text: str | None, option: str) -> int | None:
    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
