"""Byte runs copied inside compiled loops as one C ``memcpy``.

Numba compiles a slice assignment between uint8 arrays (``out[q:q + n] = src[a:a + n]``) to a
byte loop, not to ``memcpy``: measured on this project's kernels, 21 against 4 ns for 20 bytes,
72 against 13 ns for 100 and 510 against 160 ns for 1 KiB. Every kernel that moves bodies,
topics or property text between buffers copies through ``copy_bytes``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from rocketstore.jit import intrinsic, kernel

__all__ = ["copy_bytes"]


def _memcpy_typer(
    typingctx: Any, dst: Any, dst_at: Any, src: Any, src_at: Any, n: Any
) -> tuple[Any, Any] | None:
    from numba import types
    from numba.core import cgutils

    def byte_array(t: Any) -> bool:
        return isinstance(t, types.Array) and t.dtype == types.uint8 and t.ndim == 1 and t.layout == "C"

    # a raw memcpy is right only for contiguous bytes: anything else does not compile
    if not (byte_array(dst) and dst.mutable and byte_array(src)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        d, d_at, s, s_at, size = args
        dst_data = context.make_array(signature.args[0])(context, builder, d).data
        src_data = context.make_array(signature.args[2])(context, builder, s).data
        to, frm = builder.gep(dst_data, [d_at]), builder.gep(src_data, [s_at])
        cgutils.raw_memcpy(builder, to, frm, size, 1)  # type: ignore[no-untyped-call]
        return context.get_dummy_value()

    return types.void(dst, dst_at, src, src_at, n), codegen


def _memcpy_interpreted(
    dst: npt.NDArray[np.uint8], dst_at: int, src: npt.NDArray[np.uint8], src_at: int, n: int
) -> None:
    dst[dst_at : dst_at + n] = src[src_at : src_at + n]


_memcpy: Any = intrinsic(_memcpy_typer, _memcpy_interpreted)


@kernel(cache=True, nogil=True, inline="always")
def copy_bytes(
    dst: npt.NDArray[np.uint8], dst_at: int, src: npt.NDArray[np.uint8], src_at: int, n: int
) -> int:
    """``dst[dst_at:dst_at + n] = src[src_at:src_at + n]`` for contiguous 1-D uint8 arrays that
    do not overlap (other arrays, strided views and a read-only destination do not compile);
    returns ``dst_at + n``, where the next run goes. A run outside either array raises
    ValueError, as the slice assignment did: lengths read from a damaged file never make it
    read or write beyond the arrays."""
    if n < 0 or src_at < 0 or dst_at < 0 or src_at + n > len(src) or dst_at + n > len(dst):
        raise ValueError("copy_bytes: a run of bytes outside its array")
    _memcpy(dst, dst_at, src, src_at, n)
    return dst_at + n
