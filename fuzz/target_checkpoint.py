"""Fuzz target: the checkpoint file (codec/checkpoint.py, and the store's loader of it).

    python fuzz/target_checkpoint.py [libFuzzer options] [corpus dir]

Contract: ``decode_checkpoint`` raises nothing but CorruptDataError; a decoded checkpoint
encodes back to the same first 24 bytes; ``StoreCheckpoint`` opened read-only on the bytes as
a file raises nothing but CorruptDataError and reads the same three timestamps from a file of
4096 bytes; a file of another size it ignores (``damage`` says why, the times are 0).
"""

from __future__ import annotations

import _harness
from rocketstore import checkpoint as store_checkpoint
from rocketstore.codec import checkpoint
from rocketstore.errors import CorruptDataError, StoreConfigError

_harness.instrument(checkpoint, store_checkpoint)
atheris = _harness.atheris
_DIR = _harness.scratch("checkpoint")


def seeds() -> list[bytes]:
    return [(_harness.FIXTURE / "checkpoint").read_bytes(), b"\x00" * 24, b"\xff" * 4096]


def test_one_input(data: bytes) -> None:
    try:
        cp = checkpoint.decode_checkpoint(data)
    except CorruptDataError:
        cp = None
    if cp is not None and checkpoint.encode_checkpoint(cp)[:24] != bytes(data[:24]):
        raise AssertionError("a decoded checkpoint does not encode back to its bytes")
    path = _DIR / "checkpoint"
    path.write_bytes(data)
    try:
        loaded = store_checkpoint.StoreCheckpoint(path, readonly=True)
    except (CorruptDataError, StoreConfigError):
        return
    if len(data) != checkpoint.CHECKPOINT_FILE_SIZE:
        if loaded.damage is None or loaded.value != checkpoint.Checkpoint():
            raise AssertionError(f"a checkpoint of {len(data)} bytes was read: {loaded.value}")
        return
    if cp is not None and loaded.value != cp:
        raise AssertionError(f"StoreCheckpoint read {loaded.value}, the codec {cp}")


if __name__ == "__main__":
    _harness.fuzz(test_one_input, seeds)
