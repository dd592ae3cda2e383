"""Where every element lives: in the registers of a warpgroup, and in shared memory.

Both sides are computed as NumPy arrays with no MLIR context:

* :func:`register_map` says, for each of the 128 threads, each register and each
  vector lane of that register, which logical element (flat row-major index) it
  holds, and which threads are replicas that must not write.
* :class:`RefGeometry` maps a logical element to its bit address in the
  destination ref (tiled or plain, any strides), and applies the swizzle.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from mosaic_async_store import compat
from mosaic_async_store.errors import refuse, refuse_type

__all__ = ["RegisterMap", "register_map", "RefGeometry", "swizzle_bytes",
           "WARPGROUP_SIZE"]

WARPGROUP_SIZE = 128
WARP_SIZE = 32


@dataclasses.dataclass(frozen=True)
class RegisterMap:
  """The register side of a fragmented array.

  Attributes:
    elements: int array [thread, register, vector_lane] of flat logical indices.
    writer: bool array [thread]: False for threads whose data is a replica of
      another thread's (replicated warp/lane dims); they store nothing.
    splat: True when every register holds the same single scalar.
  """

  elements: np.ndarray
  writer: np.ndarray
  splat: bool = False

  @property
  def num_registers(self) -> int:
    return self.elements.shape[1]

  @property
  def vector_length(self) -> int:
    return self.elements.shape[2]


def _digits(index: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
  """Splits an index into mixed-radix digits, the first one most significant."""
  out = []
  for size in reversed(sizes):
    out.append(index % size)
    index = index // size
  return out[::-1]


def _tiled_map(layout, shape: tuple[int, ...]) -> RegisterMap:
  fa = compat.fragmented_array()
  try:
    tiled_shape = layout.tiling.tile_shape(tuple(shape))
  except ValueError:
    raise refuse(
        "shape", tuple(shape),
        f"a shape whose trailing dims are multiples of the layout's base tile "
        f"{layout.base_tile_shape}",
        "pad the array or pick a layout whose tile divides the shape") from None
  strides = layout.tiling.tile_strides(
      tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape))))
  tiling_shape = layout.tiled_tiling_shape
  threads = np.arange(WARPGROUP_SIZE)
  offset = np.zeros(WARPGROUP_SIZE, dtype=np.int64)
  writer = np.ones(WARPGROUP_SIZE, dtype=bool)
  for dims, index in ((layout.warp_dims, threads // WARP_SIZE),
                      (layout.lane_dims, threads % WARP_SIZE)):
    sizes = [d.times if isinstance(d, fa.Replicated) else tiling_shape[d]
             for d in dims]
    for d, digit in zip(dims, _digits(index, sizes)):
      if isinstance(d, fa.Replicated):
        writer &= digit == 0  # replica 0 of each replicated dim writes
      else:
        offset += digit * strides[d]
  reg_shape = layout.registers_shape(tuple(shape))
  reg_offsets = np.array(
      [sum(i * s for i, s in zip(idx, strides)) for idx in np.ndindex(*reg_shape)],
      dtype=np.int64)
  vec = np.arange(layout.vector_length) * strides[layout.vector_dim]
  del tiled_shape
  elements = offset[:, None, None] + reg_offsets[None, :, None] + vec[None, None, :]
  return RegisterMap(elements, writer)


def _refuse_unreduced(layout) -> None:
  """jax 0.12's ``Unreduced`` dimensions: several threads hold partial values of one
  element, still to be combined with ``layout.unreduced_operation``.  Storing them
  would write a partial value (upstream refuses them too)."""
  operation = getattr(layout, "unreduced_operation", None)  # jax 0.12
  if operation is not None:
    raise refuse("layout", layout,
                 "a layout whose elements are fully reduced (no Unreduced warp or lane "
                 "dimension)",
                 f"combine the partial values first, value.reduce({operation!r}, axis=()), "
                 "and store the result")


def register_map(layout, shape: tuple[int, ...]) -> RegisterMap:
  """Element map of a Mosaic GPU layout (TiledLayout, strided or splat)."""
  fa = compat.fragmented_array()
  shape = tuple(int(d) for d in shape)
  if isinstance(layout, fa.TiledLayout):
    _refuse_unreduced(layout)
    return _tiled_map(layout, shape)
  if isinstance(layout, fa.WGStridedFragLayout):
    if tuple(layout.shape) != shape:
      raise refuse("layout", layout, f"a strided layout of shape {shape}",
                   "build the array with the same shape as the layout")
    vec, size = layout.vec_size, math.prod(shape)
    regs = size // (WARPGROUP_SIZE * vec)
    t = np.arange(WARPGROUP_SIZE)[:, None, None]
    r = np.arange(regs)[None, :, None]
    j = np.arange(vec)[None, None, :]
    return RegisterMap(t * vec + r * WARPGROUP_SIZE * vec + j,
                       np.ones(WARPGROUP_SIZE, dtype=bool))
  if isinstance(layout, fa.WGSplatFragLayout):
    return _splat_map(shape)
  raise refuse_type("layout", layout,
                    "a TiledLayout, WGStridedFragLayout or WGSplatFragLayout",
                    "pass FragmentedArray.layout")


def _splat_map(shape: tuple[int, ...]) -> RegisterMap:
  """A splat holds one value; spread the destination over threads like a strided map."""
  size = math.prod(shape)
  if size % WARPGROUP_SIZE:
    raise refuse("shape", shape,
                 "a splat whose element count is a multiple of 128",
                 "store a non-splat array (e.g. broadcast to a tiled layout first)")
  vec = 1
  while vec < 16 and size % (WARPGROUP_SIZE * vec * 2) == 0:
    vec *= 2
  regs = size // (WARPGROUP_SIZE * vec)
  t = np.arange(WARPGROUP_SIZE)[:, None, None]
  r = np.arange(regs)[None, :, None]
  j = np.arange(vec)[None, None, :]
  return RegisterMap(t * vec + r * WARPGROUP_SIZE * vec + j,
                     np.ones(WARPGROUP_SIZE, dtype=bool), splat=True)


def swizzle_bytes(offset, swizzle: int | None):
  """Mosaic's (and TMA's) swizzle: 16-byte chunk bits [4, 4+b) ^= bits [7, 7+b).

  The one spelling of it: ``offset`` may be a NumPy array or int, a
  ``address_steps.U32`` (the verifier's i32 replay) or lowering's ``I32`` (IR).
  """
  if not swizzle or swizzle == 16:
    return offset
  mask = swizzle // 16 - 1
  return offset ^ (((offset >> 7) & mask) << 4)


@dataclasses.dataclass(frozen=True)
class RefGeometry:
  """A destination ref: logical shape, tiled shape, element strides, swizzle.

  ``ref_shape`` is the memref's shape: the logical dims tiled by the trailing
  ``tiling_rank`` dims (upstream's convention), or the logical shape itself when
  ``tiling_rank == 0``.  ``strides`` are the memref's strides in elements, so a
  transposed view is described by permuted strides.
  """

  shape: tuple[int, ...]
  ref_shape: tuple[int, ...]
  strides: tuple[int, ...]
  tiling_rank: int
  swizzle: int | None
  bits: int

  @property
  def tile(self) -> tuple[int, ...]:
    return self.ref_shape[len(self.ref_shape) - self.tiling_rank:] if self.tiling_rank else ()

  def element_bit_address(self, flat: np.ndarray) -> np.ndarray:
    """Unswizzled bit address (from the ref base) of each flat logical index."""
    flat = np.asarray(flat)
    # Unravel a 1-D view and restore the shape: numpy 2.4's unravel_index
    # returns wrong indices for some multi-dimensional inputs past 8192
    # elements (seen with (128, R, 1) register maps; numpy#31980).
    idx = tuple(i.reshape(flat.shape) for i in np.unravel_index(flat.reshape(-1), self.shape))
    n, k = len(self.shape), self.tiling_rank
    ref_idx = list(idx[:n - k])
    outer, inner = [], []
    for i, t in zip(idx[n - k:], self.tile):
      outer.append(i // t)
      inner.append(i % t)
    ref_idx += outer + inner
    elem = sum(np.asarray(i, dtype=np.int64) * s for i, s in zip(ref_idx, self.strides))
    return elem * self.bits

  def byte_address(self, linear_bytes: np.ndarray) -> np.ndarray:
    """Applies the swizzle to unswizzled byte offsets."""
    return swizzle_bytes(np.asarray(linear_bytes), self.swizzle)

  @property
  def footprint_bytes(self) -> int:
    """Bytes spanned from the base to the last element (for bounds checks)."""
    last = sum((d - 1) * s for d, s in zip(self.ref_shape, self.strides))
    return (last + 1) * self.bits // 8 if self.bits >= 8 else (last * self.bits) // 8 + 1
