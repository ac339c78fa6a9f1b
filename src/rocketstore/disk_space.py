"""How full the disk holding a path is, measured as RocketMQ measures it.

RocketMQ 4.9.8's ``UtilAll.getDiskPartitionSpaceUsedPercent`` (common module), from Java's
``File.getTotalSpace`` / ``getFreeSpace`` / ``getUsableSpace``, which on Linux are
``statvfs``'s ``f_blocks`` / ``f_bfree`` / ``f_bavail`` times ``f_frsize``::

    used   = total - free       blocks in use (the root-reserved blocks are free, not used)
    usable = f_bavail blocks    what an unprivileged process may still write
    ratio  = ceil(100 * used / (used + usable)) / 100

so the root-reserved blocks (5 % of an ext4 disk by default) count neither as used nor as room,
and the ratio is rounded up to a whole percent (0.29). Every place that judges or reports how full
the disk is uses this one function: reclamation and the disk-full refusal of puts
(``cleanup.CleanService``), ``runtime_info()``'s ``commitLogDiskRatio`` and
``consumeQueueDiskRatio`` (brokerStatus, clusterList's ``#SPACE``, ``rocketstore status``), so
rocketstore and RocketMQ read the same disk alike. A filesystem that reports no blocks (where
RocketMQ answers -1) reads as empty.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

__all__ = ["DiskUsage", "capacity", "disk_used_ratio", "used_ratio"]

DiskUsage = Callable[[Path], float]  # fraction (0..1) of the filesystem holding a path that is used


class StatVfs(Protocol):
    """The fields of ``os.statvfs_result`` the ratio reads."""

    @property
    def f_blocks(self) -> int: ...
    @property
    def f_bfree(self) -> int: ...
    @property
    def f_bavail(self) -> int: ...


def used_ratio(st: StatVfs) -> float:
    """RocketMQ's used fraction of a filesystem from its ``statvfs`` (see the module docstring);
    counted in blocks: Java's byte figures are the same blocks times one block size."""
    used = st.f_blocks - st.f_bfree
    entire = used + st.f_bavail
    if st.f_blocks <= 0 or entire <= 0:
        return 0.0
    percent = -(-used * 100 // entire)  # rounded up, as RocketMQ's
    return percent / 100.0


def capacity(path: Path) -> tuple[int, int]:
    """(total, free) bytes of the filesystem holding ``path``, as Java's ``File.getTotalSpace``
    and ``getFreeSpace`` (``f_blocks`` and ``f_bfree`` times ``f_frsize``: the root-reserved
    blocks count as free), which brokerStatus's ``commitLogDirCapacity`` prints."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bfree * st.f_frsize


def disk_used_ratio(path: Path) -> float:
    """Used fraction of the filesystem holding ``path``, as RocketMQ's
    getDiskPartitionSpaceUsedPercent (OSError when ``path`` cannot be looked at)."""
    return used_ratio(os.statvfs(path))
