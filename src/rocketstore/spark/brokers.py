"""Which stores a query reads, and the broker each one is: the ``path`` / ``paths`` / ``brokers``
options of the ``rocketstore`` source.

One store is ``load(path)`` (option ``path``): the rows have no ``broker`` column and streaming
offsets keep the one-store shape ``{"topic/queueId": offset}``.

A cluster's stores, one per broker, are ``load([path, ...])``: Spark hands a Python source a list
of paths as option ``paths``, a JSON array; the option may also be given by hand, as a JSON array
or comma-separated. The rows then carry a ``broker`` column, and streaming offsets are
``{"broker": {"topic/queueId": offset}}``. Each store's broker is, in this order:

1. the name at the same place in option ``brokers`` (comma-separated, one per path);
2. ``brokerName`` of a ``broker.conf`` in the store directory, else of one beside it (in the
   directory that holds it: one directory per broker, with its broker.conf and its store), in
   RocketMQ's properties format (or TOML, with that suffix);
3. the store directory's own name.

Two stores with the same broker name are refused, naming both: rows of two brokers under one
name could not be told apart, nor their streaming offsets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from rocketstore.config import read_settings_file
from rocketstore.errors import StoreConfigError

__all__ = ["BROKER_CONF", "broker_name", "store_paths"]

BROKER_CONF: Final = "broker.conf"
# a broker name is an offset key's first part and one item of a comma list
_BAD_NAME: Final = re.compile(r"[/,]|^\s|\s$|^$")


def store_paths(options: Mapping[str, Any]) -> dict[str, str] | None:
    """{broker: store directory} in the order given, for option ``paths``; None for option
    ``path`` (one store, no broker column). Raises ValueError naming what is wrong."""
    raw = options.get("paths")
    if raw is None:
        if options.get("brokers") is not None:
            raise ValueError(
                "option brokers: names the stores of option paths; give the stores as "
                "load([path, ...]) or option paths"
            )
        return None
    if options.get("path") is not None:
        raise ValueError("options path and paths: give one store (path) or several (paths), not both")
    paths = _path_list(str(raw))
    names_raw = options.get("brokers")
    if names_raw is not None:
        names = [n.strip() for n in str(names_raw).split(",")]
        if len(names) != len(paths):
            raise ValueError(
                f"option brokers={names_raw!r}: {len(names)} names for {len(paths)} stores "
                "(one name per path, in the same order)"
            )
    else:
        names = [broker_name(p) for p in paths]
    found: dict[str, str] = {}
    for name, path in zip(names, paths):
        if _BAD_NAME.search(name):
            raise ValueError(f"broker name {name!r} of store {path}: a broker name has no '/' or ','")
        if name in found:
            raise ValueError(
                f"stores {found[name]} and {path} are both broker {name!r}: "
                "name them with option brokers (one name per path)"
            )
        found[name] = path
    return found


def broker_name(root: str | Path) -> str:
    """The broker of the store at ``root``: ``brokerName`` of ``root/broker.conf``, else of
    ``root/../broker.conf``, when one has it; else the directory's name."""
    store = Path(root).resolve()
    for conf in (store / BROKER_CONF, store.parent / BROKER_CONF):
        if not conf.is_file():
            continue
        try:
            name = read_settings_file(conf).get("brokerName")
        except StoreConfigError as exc:
            raise ValueError(f"store {root}: {exc}") from None
        if name is not None and str(name).strip():
            return str(name).strip()
    return store.name


def _path_list(raw: str) -> list[str]:
    text = raw.strip()
    given: Any = text.split(",")
    if text.startswith("["):
        try:
            given = json.loads(text)
        except json.JSONDecodeError:
            given = None
        if not isinstance(given, list) or not all(isinstance(p, str) for p in given):
            raise ValueError(f"option paths={raw!r}: expected a JSON array of store directories")
    paths = [str(p).strip() for p in given]
    if not paths or not all(paths):
        raise ValueError(f"option paths={raw!r}: expected one or more store directories")
    return paths
