"""Fuzz target: consume-queue entries (codec/consume_queue_entry.py) and the queue reader
(consume_queue.ConsumeQueue) over queue files of hostile bytes.

    python fuzz/target_consume_queue.py [libFuzzer options] [corpus dir]

Contract: decoding entries raises nothing but CorruptDataError; ``ConsumeQueue`` loads,
recovers, reads (``entry_at``, ``entries``), cuts (``truncate_after``) and corrects its min
offset over up to three segments of any bytes and sizes with nothing escaping but
CorruptDataError / StoreConfigError; recovery keeps exactly the valid prefix of entries; every
entry read back is one of the file's entries at that queue offset.
"""

from __future__ import annotations

import contextlib
import shutil

import _harness
from rocketstore import consume_queue
from rocketstore.codec import consume_queue_entry as cq
from rocketstore.errors import CorruptDataError, StoreConfigError
from rocketstore.storage import mapped_file, mapped_file_queue
from rocketstore.storage.paths import segment_name

_harness.instrument(cq, consume_queue, mapped_file_queue, mapped_file)
atheris = _harness.atheris
_BASE = _harness.scratch("cq")
_ALLOWED = (CorruptDataError, StoreConfigError)


def seeds() -> list[bytes]:
    queue = _harness.FIXTURE / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    data = queue.read_bytes()
    return [bytes([3, 1, 0]) + data[:60], bytes([7, 2, 1]) + data[:280] + data[:280]]


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    per_file = fdp.ConsumeIntInRange(1, 8)
    segments = fdp.ConsumeIntInRange(1, 3)
    first = fdp.ConsumeIntInRange(0, 3)
    size = per_file * cq.CQ_ENTRY_SIZE
    directory = _BASE / "q"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    written = []
    for i in range(segments):
        exact = fdp.ConsumeBool()
        chunk = fdp.ConsumeBytes(size if exact else fdp.ConsumeIntInRange(0, 2 * size))
        (directory / segment_name((first + i) * size)).write_bytes(chunk)
        written.append(chunk)
    for chunk in written:
        entries = cq.decode_entries(chunk)
        cq.valid_prefix_length(entries)
        with contextlib.suppress(CorruptDataError):
            cq.decode_entry(chunk, fdp.ConsumeIntInRange(-1, len(chunk)))

    queue = consume_queue.ConsumeQueue("T", 0, directory, per_file)
    try:
        queue.load()
        queue.recover(fdp.ConsumeIntInRange(0, 1 << 20) if fdp.ConsumeBool() else None)
        low, high = queue.min_offset, queue.max_offset
        # invalid entries before valid ones are holes, kept for re-dispatch to fill (recover())
        in_hole = {o for first, stop in queue.holes for o in range(first, min(stop, first + 4 * per_file))}
        for offset in range(low - 1, min(high, low + 3 * per_file) + 1):
            entry = queue.entry_at(offset)
            if entry is not None and offset not in in_hole and (entry[0] < 0 or entry[1] <= 0):
                raise AssertionError(f"recovery kept an invalid entry {entry} at {offset}")
            queue.entries(offset, fdp.ConsumeIntInRange(1, 4))
        queue.correct_min_offset(fdp.ConsumeIntInRange(0, 1 << 20))
        queue.truncate_after(fdp.ConsumeIntInRange(0, 1 << 20))
        queue.max_offset  # noqa: B018 (the property reads the segments)
    except _ALLOWED:
        pass
    finally:
        queue.files.close()


if __name__ == "__main__":
    _harness.fuzz(test_one_input, seeds)
