"""TextColumn: many short texts as one UTF-8 buffer and offsets (Arrow's string layout).

Text i is ``data[offsets[i]:offsets[i + 1]]``; an empty text stands for "none" (the columns
that use it, KEYS and UNIQ_KEY, cannot hold an empty value). Batches of keys and ids travel
from the encoder to the index in this form, so compiled loops read them without a Python
object per text.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rocketstore.codec.byte_copy import copy_bytes
from rocketstore.jit import kernel

__all__ = ["TextColumn", "gather_spans"]


@dataclass(frozen=True, slots=True)
class TextColumn:
    data: bytes
    offsets: npt.NDArray[np.int64]  # n + 1 entries, offsets[0] == 0

    @classmethod
    def empty(cls, n: int) -> TextColumn:
        """n texts, every one absent."""
        return cls(b"", np.zeros(n + 1, dtype=np.int64))

    @classmethod
    def from_texts(cls, texts: Sequence[str | None]) -> TextColumn:
        """Encode ``texts`` (None for absent). Raises UnicodeEncodeError on a lone surrogate."""
        n = len(texts)
        plain = [t or "" for t in texts]
        joined = "".join(plain)
        data = joined.encode()
        # ASCII: a character is a byte. One numpy call: the dispatcher builds columns of one
        # or two keys per pass, where numpy's per-call cost is the whole cost
        lengths = map(len, plain) if len(data) == len(joined) else (len(t.encode()) for t in plain)
        offsets = np.fromiter(itertools.accumulate(lengths, initial=0), dtype=np.int64, count=n + 1)
        return cls(data, offsets)

    @classmethod
    def from_spans(
        cls, u8: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], length: npt.NDArray[np.int64]
    ) -> TextColumn:
        """The text of ``length[i]`` bytes at ``u8[at[i]:]`` for each i (absent: ``at[i] < 0``),
        bytes that are not UTF-8 read as U+FFFD (as the store's decoder reads them)."""
        data, offsets = gather_spans(u8, at, length)
        raw = data.tobytes()
        if not raw.isascii():
            try:
                raw.decode()
            except UnicodeDecodeError:
                bounds = offsets.tolist()
                return cls.from_texts(
                    [raw[a:b].decode("utf-8", "replace") or None for a, b in itertools.pairwise(bounds)]
                )
        return cls(raw, offsets)

    @classmethod
    def concat(cls, columns: Sequence[TextColumn]) -> TextColumn:
        bases = np.cumsum([0, *(len(c.data) for c in columns)])
        offsets = np.concatenate(
            [c.offsets[:-1] + base for c, base in zip(columns, bases.tolist())] + [bases[-1:]]
        )
        return cls(b"".join(c.data for c in columns), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def cut(self, start: int, stop: int) -> TextColumn:
        """Texts ``start`` to ``stop`` (exclusive) as a column of their own."""
        offsets = self.offsets[start : stop + 1]
        return TextColumn(self.data[int(offsets[0]) : int(offsets[-1])], offsets - offsets[0])

    @property
    def lengths(self) -> npt.NDArray[np.int64]:
        return np.diff(self.offsets)

    def any(self) -> bool:
        """Whether any text is present."""
        return bool(self.data)

    def __getitem__(self, i: int) -> str | None:
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"text {i} of a column of {len(self)}")
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.data[start:end].decode() if end > start else None

    def to_list(self) -> list[str | None]:
        data = self.data.decode()
        if len(data) != len(self.data):
            return [self[i] for i in range(len(self))]
        bounds = self.offsets.tolist()
        return [data[a:b] or None for a, b in itertools.pairwise(bounds)]


@kernel(cache=True, nogil=True)
def gather_spans(
    u8: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], length: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The bytes of each span (absent: ``at`` < 0) back to back, and their offsets."""
    n = len(at)
    offsets = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        offsets[i + 1] = offsets[i] + (length[i] if at[i] >= 0 else 0)
    data = np.empty(offsets[n], dtype=np.uint8)
    for i in range(n):
        a = at[i]
        if a >= 0:
            copy_bytes(data, offsets[i], u8, a, length[i])
    return data, offsets
