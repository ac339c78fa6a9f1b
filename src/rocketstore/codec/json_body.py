"""JSON bodies of RocketMQ's remoting commands as its fastjson writes them: keys sorted, no
spaces, UTF-8 (what mqadmin, the Java client and brokers parse, and tests compare byte for byte)."""

from __future__ import annotations

import json

__all__ = ["json_body"]


def json_body(value: object) -> bytes:
    """``value`` as a fastjson body: keys sorted, no spaces, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
