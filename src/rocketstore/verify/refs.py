"""The pointers into the commitlog gathered from the consume queues and the index files, checked
against the records they name as each segment is scanned."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["I32", "I64", "Refs"]

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]


class Refs:
    """Pointers into the commitlog read from queue or index files, one numpy column per field,
    sorted by commitlog offset (column ``phy``) once ``seal`` is called."""

    def __init__(self, **dtypes: type[np.integer[Any]]) -> None:
        self._dtypes = dtypes
        self._parts: dict[str, list[npt.NDArray[Any]]] = {name: [] for name in dtypes}
        self.cols: dict[str, npt.NDArray[Any]] = {}
        self.done = np.zeros(0, dtype=bool)

    def add(self, **cols: npt.ArrayLike) -> None:
        n = len(np.asarray(cols["phy"]))
        for name, dtype in self._dtypes.items():
            self._parts[name].append(np.broadcast_to(np.asarray(cols[name], dtype=dtype), (n,)))

    def seal(self) -> None:
        cols = {
            name: np.concatenate(parts) if parts else np.zeros(0, dtype=self._dtypes[name])
            for name, parts in self._parts.items()
        }
        self._parts = {}
        # each queue's and each index file's offsets are sorted runs: the stable sort merges them
        order = np.argsort(cols["phy"], kind="stable")
        self.cols = {name: col[order] for name, col in cols.items()}
        self.done = np.zeros(len(order), dtype=bool)

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        return self.cols[name]

    def span(self, lo: int, hi: int) -> slice:
        """The refs pointing into [lo, hi)."""
        phy = self.cols["phy"]
        return slice(int(np.searchsorted(phy, lo)), int(np.searchsorted(phy, hi)))
