"""A whole file mapped read-only, for readers that must not disturb a store (verify, Spark)."""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

from rocketstore.storage.paths import open_store_file

__all__ = ["mapped_readonly"]


@contextlib.contextmanager
def mapped_readonly(path: Path) -> Iterator[memoryview]:
    """The file's bytes, mapped read-only (an empty file gives an empty view). Nothing is
    written, locked or touched: another process may be appending to the file meanwhile.
    StorePathError when ``path`` is not a regular file (see ``open_store_file``)."""
    fd = open_store_file(path)
    try:
        size = os.fstat(fd).st_size
        mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
    finally:
        os.close(fd)
    if mm is None:
        yield memoryview(b"")
        return
    view = memoryview(mm)
    try:
        yield view
    finally:
        # every numpy view of the mapping is gone by now; if one leaked, the GC unmaps it later
        with contextlib.suppress(BufferError):
            view.release()
            mm.close()
