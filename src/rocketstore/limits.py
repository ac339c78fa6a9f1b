"""The ranges of the numbers a store keeps for clients: a queue id is 0..65535 (what a put, a
topic's queue count and the config files take) and a queue or commitlog offset 0..2^63-1 (a
Java long), whoever gives them: a put, a commit, a config file read back."""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_OFFSET", "MAX_QUEUE_ID"]

MAX_QUEUE_ID: Final = 65535
MAX_OFFSET: Final = (1 << 63) - 1
