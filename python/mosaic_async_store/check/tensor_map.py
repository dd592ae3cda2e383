"""``TensorMap``: a TMA descriptor (a CUDA ``CUtensorMap``) as the checker knows it.

A kernel that copies with TMA names a tensor map, a 128-byte opaque object that the
host encodes with ``cuTensorMapEncodeTiled`` and passes as a kernel parameter
(``.param .align 64 .b8 NAME[128]``; Mosaic packs its maps into one parameter of
``128 * n`` bytes).  ``check_ptx`` takes a ``TensorMap`` argument for each such map;
``tools/host_tma.py`` makes them from a Mosaic module's host code, and a user can
build one by hand:

    x = np.zeros((64, 128), np.float16)
    tmap = TensorMap.of(x, box=(64, 128))              # the whole array, no swizzle
    tmap = TensorMap(x, offset=0, elem_bytes=np.float16, dims=(64, 128),
                     strides=(256, 2), box=(64, 64), swizzle=128)

Order: ``dims``, ``strides``, ``box`` and ``element_strides`` are in NumPy order,
outermost dimension first (``dims == array.shape`` and ``strides == array.strides``
for a whole C-contiguous array); CUDA's arrays are innermost first and leave the
innermost stride out, which here is given and must equal ``elem_bytes`` (TMA's
innermost dimension is contiguous).  ``strides`` are in bytes, ``dims`` / ``box`` in
elements.  ``array``: the NumPy array the global tensor lives in; the same array
object passed as another argument (an array, a ``Memref``, another map) is the same
global buffer.  ``offset``: the byte offset of the tensor's first element in it.

Limits, each checked in ``__post_init__`` and refused naming the field (CUDA Driver
API, "Tensor Map Object Management", ``cuTensorMapEncodeTiled``; the tensor map
itself must be 64-byte aligned, which the parameter's ``.align 64`` gives):

  ============================  ===============================================
  field                         requirement (source: cuTensorMapEncodeTiled)
  ============================  ===============================================
  rank (``len(dims)``)          1..5; 3..5 with an interleave
  ``elem_bytes``                1, 2, 4 or 8 (the tensorDataType sizes; the packed
                                sub-byte types are not taken)
  global address                ``offset`` 16-byte aligned, 32 with interleave 32
                                (the array's start counts as aligned: the checker
                                places each buffer on a 2**40 boundary)
  ``dims``                      each 1..2**32
  ``strides``                   each outer one a multiple of 16 (32 with interleave
                                32) and < 2**40; the innermost == ``elem_bytes``
  ``box``                       each 1..256; without interleave the inner box's
                                bytes a multiple of 16
  ``element_strides``           each 1..8
  ``swizzle``                   0 (none), 32, 64, 128 (CUtensorMapSwizzle's
                                sm_90 spans); without interleave the inner box's
                                bytes at most the span; interleave 32 needs 32
  ``interleave``                0 (none), 16, 32 (CUtensorMapInterleave)
  ``oob_fill``                  "zero" or "nan" (NAN_REQUEST_ZERO_FMA: a floating
                                point ``dtype`` only)
  ============================  ===============================================

Two more, the checker's own: the tensor lies inside ``array`` (every element the
map can address is a byte of that buffer), and ``array`` holds byte-sized elements
(an array of 2- or 4-bit ones, which a kernel reads packed, is refused: map its
packed bytes, ``subbyte.pack``, instead).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mosaic_async_store.check import subbyte
from mosaic_async_store.errors import refuse, refuse_type

__all__ = ["TensorMap", "TENSOR_MAP_BYTES", "MAGIC"]

TENSOR_MAP_BYTES = 128          # sizeof(CUtensorMap)
MAGIC = b"ASTMAP01"             # the first 8 bytes of ``TensorMap.encode``'s encoding

SWIZZLES = (0, 32, 64, 128)
INTERLEAVES = (0, 16, 32)
OOB_FILLS = ("zero", "nan")
_FLOAT_NAMES = ("float16", "float32", "float64", "bfloat16", "tfloat32")
MAX_RANK, MAX_BOX, MAX_ELEMENT_STRIDE = 5, 256, 8
MAX_DIM, STRIDE_LIMIT = 1 << 32, 1 << 40


def _ints(name, value):
  """``value`` as a tuple of Python ints (refused by name otherwise)."""
  try:
    items = tuple(value)
  except TypeError:
    raise refuse_type(name, value, "a sequence of ints, NumPy order (outermost first)",
                      f"pass {name}=(64, 128)") from None
  if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
    raise refuse_type(name, value, "a sequence of ints, NumPy order (outermost first)",
                      f"pass {name}=(64, 128)")
  return tuple(int(v) for v in items)


def _element(elem_bytes, dtype):
  """(bytes, dtype name or None) from ``elem_bytes``: an int or anything ``np.dtype``
  takes (``"bfloat16"`` too)."""
  if isinstance(elem_bytes, (int, np.integer)) and not isinstance(elem_bytes, bool):
    return int(elem_bytes), dtype
  try:
    dt = np.dtype(elem_bytes)
  except TypeError:
    if elem_bytes in ("bfloat16", "tfloat32"):
      return 2 if elem_bytes == "bfloat16" else 4, elem_bytes
    raise refuse_type("elem_bytes", elem_bytes, "an element size in bytes (1, 2, 4, 8) or "
                      "a NumPy dtype", "pass elem_bytes=x.dtype") from None
  return dt.itemsize, dt.name


@dataclasses.dataclass(frozen=True, eq=False)
class TensorMap:
  """A tiled TMA descriptor over ``array`` (the module doc: fields, order, limits).

  Attributes:
    array: the NumPy array holding the global tensor (its object is the buffer).
    offset: byte offset of the tensor's first element in ``array``.
    elem_bytes: element size in bytes; a dtype given here sets ``dtype`` too.
    dims: the tensor's size per dimension, in elements, outermost first.
    strides: bytes between consecutive indices per dimension, outermost first.
    box: the box one copy moves, in elements per dimension, outermost first.
    element_strides: the traversal step per dimension (default all 1).
    swizzle: the SMEM swizzle span in bytes (0: none).
    interleave: 0 (none), 16 or 32 bytes.
    oob_fill: what out-of-bounds elements read as: "zero" or "nan".
    dtype: the element type's name ("float16", ...) or None where only its size is
      known.
  """

  array: np.ndarray
  offset: int
  elem_bytes: int
  dims: tuple
  strides: tuple
  box: tuple
  element_strides: tuple | None = None
  swizzle: int = 0
  interleave: int = 0
  oob_fill: str = "zero"
  dtype: str | None = None

  @classmethod
  def of(cls, array, box, **kwargs) -> "TensorMap":
    """The map of the whole C-ordered ``array`` (dims, strides and element type its own)
    with boxes of ``box``; ``kwargs``: the other fields."""
    array = np.asarray(array)
    return cls(array, 0, array.dtype, array.shape, array.strides, box, **kwargs)

  def __post_init__(self):
    put = lambda name, v: object.__setattr__(self, name, v)
    if not isinstance(self.array, np.ndarray):
      raise refuse_type("array", self.array, "a NumPy array (the global buffer)",
                        "pass np.asarray(x); the same object elsewhere aliases it")
    if subbyte.element_bits(self.array.dtype) < 8:
      raise refuse("array", f"an array of dtype {self.array.dtype.name}", "arrays of "
                   "byte-sized elements (a map's offset, strides and box count whole "
                   "bytes; the checker's TMA does not copy packed sub-byte elements)",
                   "map the packed bytes instead: p = mosaic_async_store.check.subbyte"
                   ".pack(x).reshape(rows, -1); TensorMap.of(p, box=...) with the box in "
                   "bytes; unpack the output with subbyte.unpack(out, x.dtype, x.shape)")
    size, dtype = _element(self.elem_bytes, self.dtype)
    put("elem_bytes", size)
    put("dtype", dtype)
    for name in ("dims", "strides", "box"):
      put(name, _ints(name, getattr(self, name)))
    rank = len(self.dims)
    put("element_strides", (1,) * rank if self.element_strides is None
        else _ints("element_strides", self.element_strides))
    self._check_kinds()
    self._check_rank(rank)
    self._check_sizes()
    self._check_layout()
    self._check_inside()

  def _check_kinds(self):
    if self.elem_bytes not in (1, 2, 4, 8):
      raise refuse("elem_bytes", self.elem_bytes, "1, 2, 4 or 8 (cuTensorMapEncodeTiled's "
                   "data types; packed sub-byte types are not taken)", "pass the element "
                   "size of a byte-sized type")
    if self.swizzle not in SWIZZLES:
      raise refuse("swizzle", self.swizzle, f"one of {SWIZZLES} (bytes; 0: none)",
                   "pass the swizzle span in bytes (Mosaic's 16 means none: pass 0)")
    if self.interleave not in INTERLEAVES:
      raise refuse("interleave", self.interleave, f"one of {INTERLEAVES} (bytes; 0: none)",
                   "pass interleave=0")
    if self.oob_fill not in OOB_FILLS:
      raise refuse("oob_fill", self.oob_fill, f"one of {OOB_FILLS}", 'pass oob_fill="zero"')
    if self.oob_fill == "nan" and self.dtype not in _FLOAT_NAMES:
      raise refuse("oob_fill", self.oob_fill, "'nan' with a floating-point dtype only "
                   f"(dtype is {self.dtype}; cuTensorMapEncodeTiled)",
                   'pass elem_bytes=<a float dtype>, or oob_fill="zero"')
    if not isinstance(self.offset, (int, np.integer)) or isinstance(self.offset, bool) \
       or self.offset < 0:
      raise refuse("offset", self.offset, "an int >= 0 (bytes into the array)",
                   "pass the byte offset of the tensor's first element")

  def _check_rank(self, rank):
    low = 3 if self.interleave else 1
    if not low <= rank <= MAX_RANK:
      raise refuse("dims", self.dims, f"{low}..{MAX_RANK} dimensions"
                   + (" (an interleaved map)" if self.interleave else ""),
                   "describe the tensor with at most 5 dimensions")
    for name in ("strides", "box", "element_strides"):
      if len(getattr(self, name)) != rank:
        raise refuse(name, getattr(self, name), f"{rank} entries, one per dimension of "
                     f"dims={self.dims} (NumPy order)", f"give {name} for every dimension")

  def _check_sizes(self):
    for i, d in enumerate(self.dims):
      if not 1 <= d <= MAX_DIM:
        raise refuse(f"dims[{i}]", d, "1..2**32 elements", "pass the tensor's real size")
    for i, b in enumerate(self.box):
      if not 1 <= b <= MAX_BOX:
        raise refuse(f"box[{i}]", b, f"1..{MAX_BOX} elements", "copy a smaller box")
    for i, e in enumerate(self.element_strides):
      if not 1 <= e <= MAX_ELEMENT_STRIDE:
        raise refuse(f"element_strides[{i}]", e, f"1..{MAX_ELEMENT_STRIDE}",
                     "pass element_strides of ones")

  def _check_layout(self):
    align = 32 if self.interleave == 32 else 16
    if self.offset % align:
      raise refuse("offset", self.offset, f"a multiple of {align} (the global address "
                   "must be 16-byte aligned, 32 with interleave 32)",
                   "start the tensor at an aligned byte of the array")
    *outer, inner = self.strides
    if inner != self.elem_bytes:
      raise refuse("strides", self.strides, f"an innermost stride of elem_bytes="
                   f"{self.elem_bytes} (TMA's innermost dimension is contiguous)",
                   "make the last dimension contiguous")
    for i, s in enumerate(outer):
      if s <= 0 or s % align or s >= STRIDE_LIMIT:
        raise refuse(f"strides[{i}]", s, f"a positive multiple of {align} below 2**40 "
                     "bytes", "pad the rows to a multiple of 16 bytes")
    inner_bytes = self.box[-1] * self.elem_bytes
    if not self.interleave and inner_bytes % 16:
      raise refuse("box", self.box, f"an inner box of a multiple of 16 bytes (here "
                   f"{self.box[-1]} x {self.elem_bytes} = {inner_bytes})",
                   "widen the innermost box dimension")
    if not self.interleave and self.swizzle and inner_bytes > self.swizzle:
      raise refuse("box", self.box, f"an inner box of at most the swizzle span, "
                   f"{self.swizzle} bytes (here {inner_bytes})",
                   "narrow the innermost box dimension or swizzle wider")
    if self.interleave == 32 and self.swizzle != 32:
      raise refuse("swizzle", self.swizzle, "32 with interleave=32", "pass swizzle=32")

  def _check_inside(self):
    last = self.offset + sum((d - 1) * s for d, s in zip(self.dims, self.strides))
    if last + self.elem_bytes > self.array.nbytes:
      raise refuse("dims", self.dims, f"a tensor inside the array's {self.array.nbytes} "
                   f"bytes (its last element ends at byte {last + self.elem_bytes})",
                   "check offset, dims and strides against the array")

  @property
  def rank(self) -> int:
    return len(self.dims)

  def encode(self, global_address: int) -> bytes:
    """The map's 128 parameter bytes, in the checker's own layout (not CUDA's, which is
    undocumented): ``MAGIC``, the global address (u64), rank, element bytes, swizzle
    / 16, interleave / 16, OOB fill (0 zero, 1 NaN), 3 zero bytes, then per dimension,
    innermost first as CUDA orders them, 5 slots each: dims (u64), strides (u64),
    box (u16), element strides (u8); unused slots and the tail are zero.  Kernels may
    not read these bytes (the checker refuses it): they only make a map recognisable
    in a dump of the parameter window."""
    pad = lambda t: list(reversed(t)) + [0] * (MAX_RANK - len(t))
    head = MAGIC + global_address.to_bytes(8, "little") + bytes(
        [self.rank, self.elem_bytes, self.swizzle // 16, self.interleave // 16,
         OOB_FILLS.index(self.oob_fill), 0, 0, 0])
    body = b"".join(v.to_bytes(8, "little") for v in pad(self.dims) + pad(self.strides))
    body += b"".join(v.to_bytes(2, "little") for v in pad(self.box))
    body += bytes(pad(self.element_strides))
    out = head + body
    return out + bytes(TENSOR_MAP_BYTES - len(out))

  def __repr__(self) -> str:
    a = self.array
    return (f"TensorMap(array=<{a.dtype}{list(a.shape)}>, offset={self.offset}, "
            f"elem_bytes={self.elem_bytes}, dims={self.dims}, strides={self.strides}, "
            f"box={self.box}, swizzle={self.swizzle}"
            + (f", element_strides={self.element_strides}"
               if set(self.element_strides) != {1} else "")
            + (f", interleave={self.interleave}" if self.interleave else "")
            + (f", oob_fill={self.oob_fill!r}" if self.oob_fill != "zero" else "")
            + (f", dtype={self.dtype!r}" if self.dtype else "") + ")")
