"""Arrays of sub-byte elements as a kernel's global memory holds them: packed.

NumPy (ml_dtypes) keeps ``int4``, ``uint4``, ``float4_e2m1fn``, ``int2`` and ``uint2``
one element per byte, the value in the low bits; a kernel reads them packed, ``8 //
bits`` elements per byte, the first element in the lowest bits (element ``2k`` of an
int4 array in the low nibble of byte ``k``, ``2k + 1`` in the high one).  That is the
layout Mosaic GPU's code reads and writes (so the one jax's arrays hand its kernels), in
jax 0.10.2 and 0.12.1 alike: ``FragmentedArray.load_strided``
(jax/experimental/mosaic/gpu/fragmented_array.py) loads a ``vector<N x i4>`` straight
from the memref's address with ``llvm.load``, and LLVM packs a vector of sub-byte
elements with element 0 in the least significant bits (little-endian);
``FragmentedArray.astype``'s i4 -> bf16 conversion shifts a register right by 4 "to put
the high int4 in low bits", i.e. the odd elements.  test/unit/test_subbyte_check.py
runs Mosaic's own 4- and 2-bit <-> 8-bit conversions through ``check`` to hold the
checker to it.

An array is packed flat, in C order: a row whose element count is odd shares its last
byte with the next row, as Mosaic addresses a memref (the element of flat index ``i``,
from the strides in elements, at bit ``i * bits``); an odd total is padded with zero
bits to a whole byte (``ceil(n * bits / 8)`` bytes), which ``unpack`` drops.

Widths that no kernel layout fixes are refused by name (``refusal``): 1-bit types
(Mosaic GPU lowers ``int1`` and ``bool`` to the same ``i1``, and jax keeps ``bool`` one
per byte) and 6-bit ones (no whole number per byte; Mosaic GPU takes power-of-2 widths).

    raw = pack(x)                      # uint8, nbytes(x.dtype, x.shape) of them
    y = unpack(raw, x.dtype, x.shape)  # == x
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from mosaic_async_store.errors import AsyncStoreError, refuse, refuse_limit

__all__ = ["PACKED_BITS", "element_bits", "is_packed", "refusal", "nbytes", "pack",
           "unpack"]

PACKED_BITS = (2, 4)   # the widths packed as above; others below 8 are refused


def element_bits(dtype) -> int:
  """Bits per element of ``dtype`` in a kernel's memory: 8 * itemsize, or an ml_dtypes
  sub-byte type's own width (``ml_dtypes.iinfo`` / ``finfo``: 4 for int4)."""
  dt = np.dtype(dtype)
  if dt.kind != "V" or dt.itemsize != 1:   # ml_dtypes' types are opaque ("V") scalars
    return 8 * dt.itemsize
  for info in (ml_dtypes.iinfo, ml_dtypes.finfo):
    try:
      return int(info(dt).bits)
    except (ValueError, TypeError):
      pass
  return 8   # a raw one-byte void


def is_packed(dtype) -> bool:
  """Whether arrays of ``dtype`` are packed (an int2, uint2, int4, uint4 or float4)."""
  return element_bits(dtype) in PACKED_BITS


def refusal(param: str, dtype, what: str = "an array") -> AsyncStoreError | None:
  """The refusal of ``what`` (an array) of ``dtype`` given as ``param``, for a sub-byte
  width whose memory layout no kernel fixes (1 or 6 bits); None where it is laid out
  exactly."""
  bits = element_bits(dtype)
  if bits >= 8 or bits in PACKED_BITS:
    return None
  why = ("1-bit elements: Mosaic GPU lowers them and bool alike to i1, and jax keeps bool "
         "one per byte" if bits == 1 else f"{bits}-bit elements: no whole number fits a "
         "byte, and Mosaic GPU takes power-of-2 widths only")
  return refuse_limit(param, f"{what} of dtype {np.dtype(dtype).name}", "arrays of "
                "byte-sized elements, or of 2- or 4-bit ones (int2, uint2, int4, uint4, "
                f"float4_e2m1fn), which the checker packs as the kernel reads them ({why})",
                "pack the elements into a uint8 array the way your kernel reads them and "
                "pass that (or widen them to a byte-sized type)")


def _bits(dtype) -> int:
  if (refused := refusal("dtype", dtype)) is not None:
    raise refused
  return element_bits(dtype)


def nbytes(dtype, shape) -> int:
  """The bytes an array of ``dtype`` and ``shape`` takes in a kernel's memory."""
  count = int(np.prod(shape, dtype=np.int64))
  return -(-count * _bits(dtype) // 8)


def pack(array) -> np.ndarray:
  """``array``'s elements in C order as a kernel's memory holds them: a 1-D uint8 array
  of ``nbytes(array.dtype, array.shape)`` (sub-byte elements packed, the module doc)."""
  array = np.ascontiguousarray(array)
  bits = _bits(array.dtype)
  if bits >= 8:
    return array.reshape(-1).view(np.uint8)
  per = 8 // bits
  values = array.reshape(-1).view(np.uint8) & np.uint8((1 << bits) - 1)
  values = np.concatenate([values, np.zeros(-values.size % per, np.uint8)])
  shifts = np.arange(per, dtype=np.uint8) * np.uint8(bits)
  return np.bitwise_or.reduce(values.reshape(-1, per) << shifts, axis=1).astype(np.uint8)


def unpack(raw, dtype, shape) -> np.ndarray:
  """The array of ``dtype`` and ``shape`` whose memory is the first ``nbytes(dtype,
  shape)`` of the bytes ``raw`` (``pack``'s inverse; a new array)."""
  raw = (np.ascontiguousarray(raw).reshape(-1).view(np.uint8) if isinstance(raw, np.ndarray)
         else np.frombuffer(raw, np.uint8))
  size, bits = nbytes(dtype, shape), _bits(dtype)
  if raw.size < size:
    raise ValueError(f"{raw.size} bytes hold no {np.dtype(dtype).name} array of shape "
                     f"{tuple(shape)} ({size} bytes)")
  raw = raw[:size]
  if bits >= 8:
    return raw.view(dtype).reshape(shape).copy()
  per, count = 8 // bits, int(np.prod(shape, dtype=np.int64))
  shifts = np.arange(per, dtype=np.uint8) * np.uint8(bits)
  values = (raw[:, None] >> shifts) & np.uint8((1 << bits) - 1)
  return values.reshape(-1)[:count].copy().view(dtype).reshape(shape)
