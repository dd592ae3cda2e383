"""The geometry of a tensor copy (``cp.async.bulk.tensor``, tile mode): where each
element of the box lies in shared and in global memory, in one NumPy call per copy.

A tensor map (``MapFields`` here, or any object with these fields) is given in NumPy
order, outermost dimension first: ``dims`` (elements), ``strides`` (bytes; the
innermost, which must equal ``elem_bytes``, may be left out as the driver's
``globalStrides`` leave it out), ``box`` (elements), ``element_strides`` (the traversal
stride per dimension; None: all 1), ``elem_bytes``, ``swizzle`` (bytes: 0, 32, 64 or
128), ``interleave`` (0: none; others refused) and ``oob_fill`` (0 or "zero": zeros;
1 or "nan": NaN, refused by ``oob_fill_element``); check.tensor_map.TensorMap has them.  An instruction's coordinates are in PTX order:
``c0`` is the INNERMOST dimension (PTX ISA 9.7.9.25, cp.async.bulk.tensor:
"tensorCoords" is a vector of .s32 coordinates, one per dimension, the first the
innermost as in the tensor map; the CUDA driver API, cuTensorMapEncodeTiled, orders
``globalDim[0]`` as the innermost, "the fastest-moving" dimension).

* ``box_layout(tmap, coords, smem_addr)`` -> ``BoxLayout``: for every element of the box
  (C order over the box shape in NumPy order), its shared-memory byte offset relative to
  ``smem_addr`` (the copy's destination / source), its global byte offset relative to
  the tensor's base address, and ``oob``, the elements outside the tensor.  The box is
  laid out densely in shared memory, innermost contiguous; each dimension holds
  ceil(box / element_stride) elements (cuTensorMapEncodeTiled: the elements traversed
  are every elementStrides[i]-th).  Then the swizzle is applied as the hardware does,
  to the shared-memory ADDRESS: inside each swizzle span (32, 64, 128 bytes), the
  16-byte chunk index (address bits 4 and up, span/16 values) is XORed with the same
  number of bits of the address taken from bit 7 up (the index of the 128-byte row
  within the 256 / 512 / 1024-byte repeat).  So a destination that is 128-byte aligned
  (the ISA's requirement, ``bulk_rules.tensor_smem_aligned``) but not aligned to the
  repeat sees the pattern start part-way, as it would on hardware; Mosaic aligns its
  buffers to the repeat, where this is upstream's ``offset ^ ((offset >> 7) % (span/16))
  << 4`` on the buffer offset (mosaic/gpu/fragmented_array.py's swizzled transfers;
  this project's ``plan.geometry.swizzle_bytes``), as test_tma_geometry checks.
* Out of bounds.  Coordinates are signed; an element whose coordinate in any dimension
  is negative or at least that dimension's size is out of bounds.  A load fills it
  (zeros, or NaN per the tensor map's oobFill) and still counts its bytes: the
  complete_tx count of a load is the whole box, ``box_bytes``.  A store does not
  write it (PTX ISA 5.5.3.3: the tensor operation "can detect and handle the case when
  the Bounding Box crosses the tensor boundary"); a store's box must not start at a
  negative coordinate (``bulk_rules.store_coords_non_negative``).
* ``runs(layout)``: maximal stretches of consecutive box elements that are contiguous in
  shared memory and in global memory (out-of-bounds elements: contiguous in shared
  memory), as arrays ``smem_off``, ``global_off`` (-1 for out-of-bounds runs),
  ``nbytes``, ``oob``: a 64x64 f16 box with the 128-byte swizzle is at most 512 runs,
  one without swizzle of full rows one run.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from mosaic_async_store.check.addresses import swizzle_address

__all__ = ["MapFields", "BoxLayout", "Runs", "box_layout", "box_shape", "box_bytes",
           "runs", "swizzle_address", "oob_fill_element", "SWIZZLES"]

SWIZZLES = (0, 32, 64, 128)


@dataclasses.dataclass(frozen=True)
class MapFields:
  """A tiled tensor map's fields alone, NumPy order (outermost first; the module doc):
  what the geometry reads of ``check.tensor_map.TensorMap``, which also holds the array
  and refuses a map the driver would; this record takes any fields (the rules' tests
  describe maps the driver refuses)."""

  dims: tuple
  strides: tuple
  box: tuple
  elem_bytes: int
  element_strides: tuple | None = None
  swizzle: int = 0
  interleave: int = 0
  oob_fill: int = 0


@dataclasses.dataclass(frozen=True)
class BoxLayout:
  """Per box element (C order over ``shape``): ``smem_off`` (bytes from the copy's
  shared-memory address), ``global_off`` (bytes from the tensor's base; meaningless
  where ``oob``), ``oob``; ``elem_bytes``."""

  shape: tuple
  smem_off: np.ndarray
  global_off: np.ndarray
  oob: np.ndarray
  elem_bytes: int


@dataclasses.dataclass(frozen=True)
class Runs:
  """Runs of contiguous elements: byte offsets, lengths, and whether out of bounds."""

  smem_off: np.ndarray
  global_off: np.ndarray
  nbytes: np.ndarray
  oob: np.ndarray


def _fields(tmap):
  """(dims, strides incl. the innermost, box, element strides, elem_bytes, swizzle) as
  tuples in NumPy order, checked; the unmodelled modes refused by name."""
  dims, box = tuple(int(d) for d in tmap.dims), tuple(int(b) for b in tmap.box)
  eb, n = int(tmap.elem_bytes), len(dims)
  strides = tuple(int(s) for s in tmap.strides)
  if len(strides) == n - 1:
    strides += (eb,)
  estr = tuple(int(e) for e in (getattr(tmap, "element_strides", None) or (1,) * n))
  if not 1 <= n <= 5 or len(box) != n or len(strides) != n or len(estr) != n:
    raise ValueError(f"tensor map of {n} dims with box {box}, strides {strides}, element "
                     f"strides {estr}: one entry per dimension, 1 to 5 dimensions")
  if strides[-1] != eb:
    raise NotImplementedError(f"tensor map whose innermost stride is {strides[-1]} bytes, "
                              f"not the element's {eb} (TMA has no such tensor)")
  if getattr(tmap, "interleave", 0):
    raise NotImplementedError(f"tensor map with interleave {tmap.interleave} (the checker "
                              "runs non-interleaved tensor maps only)")
  swizzle = int(getattr(tmap, "swizzle", 0) or 0)
  if swizzle not in SWIZZLES:
    raise ValueError(f"swizzle of {swizzle} bytes (the tensor map has 0, 32, 64 or 128)")
  inner = -(-box[-1] // estr[-1]) * eb   # the bytes of one box row in shared memory
  if swizzle and inner != swizzle:
    raise NotImplementedError(
        f"a {swizzle}-byte swizzle over an inner box of {inner} bytes (the checker "
        "runs swizzled boxes whose inner dimension is exactly the swizzle span, as Mosaic "
        "emits; a shorter one's shared-memory layout is not documented)")
  return dims, strides, box, estr, eb, swizzle


def box_shape(tmap) -> tuple:
  """The box as laid out in shared memory: ceil(box / element stride) per dimension."""
  _, _, box, estr, _, _ = _fields(tmap)
  return tuple(-(-b // e) for b, e in zip(box, estr))


def box_bytes(tmap) -> int:
  """The bytes a tensor load of this map counts on its mbarrier (complete_tx): the whole
  box, out-of-bounds elements included (they are written, filled)."""
  return math.prod(box_shape(tmap)) * int(tmap.elem_bytes)


def box_layout(tmap, coords, smem_addr=0) -> BoxLayout:
  """Every box element's shared and global byte offsets and its out-of-bounds flag, for
  the copy at ``coords`` (PTX order, c0 innermost) whose shared-memory operand is the
  address ``smem_addr`` (the swizzle is a function of the absolute address)."""
  dims, strides, box, estr, eb, swizzle = _fields(tmap)
  n = len(dims)
  coords = tuple(int(c) for c in coords)
  if len(coords) != n:
    raise ValueError(f"{len(coords)} coordinates for a {n}-dimensional tensor map")
  coords = coords[::-1]   # NumPy order
  shape = tuple(-(-b // e) for b, e in zip(box, estr))
  grids = np.indices(shape, dtype=np.int64).reshape(n, -1)
  tensor_idx = np.asarray(coords, np.int64)[:, None] + grids * np.asarray(estr, np.int64)[:, None]
  oob = ((tensor_idx < 0) | (tensor_idx >= np.asarray(dims, np.int64)[:, None])).any(axis=0)
  global_off = (tensor_idx * np.asarray(strides, np.int64)[:, None]).sum(axis=0)
  dense_strides = np.asarray([math.prod(shape[i + 1:]) * eb for i in range(n)], np.int64)
  dense = (grids * dense_strides[:, None]).sum(axis=0)
  base = int(smem_addr)
  smem_off = swizzle_address(base + dense, swizzle) - base
  return BoxLayout(shape, smem_off, global_off, oob, eb)


def runs(layout: BoxLayout) -> Runs:
  """The layout's elements grouped into maximal runs of consecutive elements contiguous
  in shared memory and (in bounds) in global memory, in box order."""
  eb, sm, gl, oob = layout.elem_bytes, layout.smem_off, layout.global_off, layout.oob
  if sm.size == 0:
    empty = np.zeros(0, np.int64)
    return Runs(empty, empty, empty, np.zeros(0, bool))
  breaks = (np.diff(sm) != eb) | (oob[1:] != oob[:-1]) | (~oob[1:] & (np.diff(gl) != eb))
  starts = np.concatenate(([0], np.nonzero(breaks)[0] + 1))
  ends = np.concatenate((starts[1:], [sm.size]))
  run_oob = oob[starts]
  return Runs(sm[starts], np.where(run_oob, -1, gl[starts]), (ends - starts) * eb, run_oob)


def oob_fill_element(tmap) -> bytes:
  """The bytes a load writes for one out-of-bounds element: zeros for oobFill NONE;
  oobFill NAN_REQUEST_ZERO_FMA is refused (which NaN bit pattern the hardware writes is
  not documented)."""
  if getattr(tmap, "oob_fill", 0) not in (0, None, "zero"):   # 1 / "nan": NaN fill
    raise NotImplementedError("tensor map with oobFill NAN_REQUEST_ZERO_FMA (the NaN bit "
                              "pattern the hardware writes is not documented)")
  return bytes(int(tmap.elem_bytes))
