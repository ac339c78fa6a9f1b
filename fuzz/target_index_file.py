"""Fuzz target: the index file (codec/index_layout.py) and its reader (index.IndexFile).

    python fuzz/target_index_file.py [libFuzzer options] [corpus dir]

Contract: decoding the header, slots and entries raises nothing but CorruptDataError;
``IndexFile`` opened on any bytes (of the right size, or not) raises nothing but
CorruptDataError / StoreConfigError; ``lookup`` of any key terminates (chains strictly
decrease) and yields only offsets stored in the file's entries; ``repair_slots`` leaves no slot
pointing at or past indexCount.
"""

from __future__ import annotations

import numpy as np

import _harness
from rocketstore import index
from rocketstore.codec import index_layout as layout
from rocketstore.errors import CorruptDataError, StoreConfigError
from rocketstore.storage import mapped_file

_harness.instrument(layout, index, mapped_file)
atheris = _harness.atheris
_DIR = _harness.scratch("index")
_ALLOWED = (CorruptDataError, StoreConfigError)
_KEYS = ["TopicA#key-1", "TopicB#k", "TopicC#key-17", "T#", "TopicA#key-3"]


def seeds() -> list[bytes]:
    # the fixture's geometry is 64 slots x 256 entries
    return [
        bytes([63, 255, 1]) + p.read_bytes()[:4000]
        for p in sorted((_harness.FIXTURE / "index").iterdir())[:2]
    ]


def edge_values(fdp: atheris.FuzzedDataProvider, raw: bytearray, slots: int, entries: int) -> bytes:
    """Set indexCount and every slot to values at the edges a reader must respect (0, 1, the
    count, one past it, the file's capacity): random bytes rarely line them up."""
    count = fdp.PickValueInList(
        [entries, entries - 1, 1, 0, fdp.ConsumeIntInRange(-(1 << 31), (1 << 31) - 1)]
    )
    header = layout.decode_header(raw)
    header.index_count = count
    raw[: layout.HEADER_SIZE] = layout.encode_header(header)
    for slot in range(slots):
        value = fdp.PickValueInList([count, count - 1, count + 1, entries, 0, 1, -1])
        layout.SLOT.pack_into(raw, layout.slot_position(slot), max(-(1 << 31), min(value, (1 << 31) - 1)))
    return bytes(raw)


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    slots = fdp.ConsumeIntInRange(1, 64)
    entries = fdp.ConsumeIntInRange(1, 256)
    exact = fdp.ConsumeBool()
    size = layout.file_size(slots, entries)
    raw = fdp.ConsumeBytes(size if exact else fdp.ConsumeIntInRange(0, 2 * size))
    if exact:
        raw = raw.ljust(size, b"\x00")
        if fdp.ConsumeBool():
            raw = edge_values(fdp, bytearray(raw), slots, entries)

    try:
        header = layout.decode_header(raw)
        for slot in (0, slots - 1, slots):
            number = layout.decode_slot(raw, slot)
            if 0 < number <= entries:
                layout.decode_entry(raw, slots, number)
        layout.decode_entry(raw, slots, header.index_count)
    except CorruptDataError:
        pass

    path = _DIR / "20240101000000000"
    path.write_bytes(raw)
    try:
        f = index.IndexFile(path, slots, entries, readonly=fdp.ConsumeBool())
    except _ALLOWED:
        return
    try:
        stored = {
            int(x)
            for x in np.frombuffer(
                raw, dtype=layout.ENTRY_DTYPE, count=entries, offset=layout.entry_position(slots, 0)
            )["phy_offset"]
        }
        for key in [*_KEYS, fdp.ConsumeUnicodeNoSurrogates(12)]:
            for phy in f.lookup(key, 0, 1 << 62):
                if phy not in stored:
                    raise AssertionError(f"lookup({key!r}) yielded {phy}, which no entry holds")
        if not f._file.readonly:
            f.repair_slots()
            heads = np.frombuffer(f.buf, dtype=layout.SLOT_DTYPE, count=slots, offset=layout.HEADER_SIZE)
            if (heads >= f.header.index_count).any():
                raise AssertionError("repair_slots left a slot past indexCount")
            del heads
    except _ALLOWED:
        pass
    finally:
        f.close()


if __name__ == "__main__":
    _harness.fuzz(test_one_input, seeds)
