"""The broker's state file: ``broker.json`` in the store directory while ``rocketstore serve``
serves it (its pid, listen address, clients), for ``rocketstore status``. ``Broker`` writes it;
this module reads it without loading gRPC."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["STATE_FILE", "read_state"]

STATE_FILE = "broker.json"  # in the store directory, while a broker serves it


def read_state(store_dir: Path) -> dict[str, Any] | None:
    """The state a running broker of ``store_dir`` last wrote; None when no broker runs there."""
    try:
        state = json.loads((store_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    pid = state.get("pid")
    if not isinstance(pid, int):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # left by a broker that was killed
    except PermissionError:
        pass
    return state
