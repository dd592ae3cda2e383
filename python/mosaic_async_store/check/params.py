"""A kernel's parameters: their layout in the parameter space, and the launch
arguments packed into it.

Layout.  ``parse`` reads each ``.entry`` parameter's type, alignment and size:
``.param .u64 NAME`` (8 bytes), ``.param .u64 .ptr .global .align 16 NAME`` (8 bytes:
the ``.align`` after ``.ptr`` is the pointee's, not the parameter's),
``.param .align 64 .b8 NAME[128]`` (128 bytes, 64-aligned).  Each parameter starts at
the next multiple of its alignment (its ``.align``, else its element size) after the
one before, as the CUDA ABI lays kernel parameters out; the PTX names a parameter by
that offset in the parameter space (``ld.param [NAME]``, ``mov.b64 %rd, NAME``).

Arguments (``pack``), in parameter order:

  ====================  ==================================================
  argument              fills
  ====================  ==================================================
  NumPy array           one 8-byte parameter: the buffer's global address
  ``Memref(array)``     3 + 2 * ndim 8-byte parameters: allocated and
                        aligned pointer, offset 0, sizes, strides (elements)
  ``TensorMap``         128 bytes of a ``.align 64 .b8`` array parameter;
                        n consecutive maps fill one ``.b8 NAME[128 * n]``
                        (Mosaic packs a kernel's maps into one parameter)
  ====================  ==================================================

Buffers.  Every distinct array object is one global buffer, in the order of first
appearance (a bare array, a ``Memref``'s array, a ``TensorMap``'s array): buffer j
lives at (j + 1) << ``GLOBAL_SHIFT`` and holds the array's elements in C order, 2- and
4-bit ones packed as the kernel reads them (``subbyte``; a ``Memref``'s sizes and
strides stay in elements, as the memref's are).  ``buffer_slots`` says which buffer each
argument names; the run returns the buffers' final bytes, one per buffer.
"""

from __future__ import annotations

import collections
import dataclasses
import re

import numpy as np

from mosaic_async_store.check import subbyte
from mosaic_async_store.check.addresses import GLOBAL_SHIFT
from mosaic_async_store.check.tensor_map import TENSOR_MAP_BYTES, TensorMap

__all__ = ["Param", "Packed", "parse", "pack", "buffer_slots", "array_of", "Memref",
           "ParamMismatch"]


class ParamMismatch(ValueError):
  """The launch's arguments do not make the kernel's parameters (``pack_params``): the
  caller's error, raised as is (never an internal error of the checker)."""


class Memref:
  """A launch argument passed as a memref descriptor, as Mosaic kernels take their
  buffers: allocated pointer, aligned pointer, offset 0, sizes, row-major strides in
  elements (3 + 2 * ndim 8-byte parameters).  A bare NumPy array is one pointer."""

  def __init__(self, array):
    self.array = np.asarray(array)

# Element sizes of the parameter types (the PTX ISA's fundamental types).
_TYPE_BYTES = {**{f"{k}8": 1 for k in "bus"}, **{f"{k}16": 2 for k in "busf"},
               **{f"{k}32": 4 for k in "busf"}, **{f"{k}64": 8 for k in "busf"},
               "b128": 16, "pred": 1}
_PARAM = re.compile(r"\.param\s+(?P<decl>[^,]*?)\s*(?P<name>[$\w]+)\s*(?:\[\s*(?P<n>\d+)\s*\])?"
                    r"\s*$")


@dataclasses.dataclass(frozen=True)
class Param:
  """One kernel parameter: its name, PTX type (``"u64"``, ``"b8"``), element count
  (None: a scalar), size and alignment in bytes, and offset in the parameter space."""

  name: str
  type: str
  count: int | None
  size: int
  align: int
  offset: int

  @property
  def is_word(self) -> bool:
    """An 8-byte scalar: a pointer or a memref descriptor word."""
    return self.count is None and self.size == 8

  @property
  def maps(self) -> int:
    """How many tensor maps it holds (0: it is not a tensor-map parameter)."""
    if self.type != "b8" or self.count is None or self.align < 64 or \
       self.size % TENSOR_MAP_BYTES:
      return 0
    return self.size // TENSOR_MAP_BYTES

  @property
  def shown(self) -> str:
    """Its type as declared: ``.u64``, ``.b8[128]``."""
    return f".{self.type}" + ("" if self.count is None else f"[{self.count}]")

  def __str__(self) -> str:
    return f"{self.name} ({self.shown}, {self.size} bytes at offset {self.offset})"


def parse(decls: str) -> list[Param]:
  """The parameters of an ``.entry``'s parenthesised list ``decls`` (comments gone),
  laid out in the parameter space (module doc)."""
  params, end = [], 0
  for decl in (d.strip() for d in decls.split(",")):
    if not decl:
      continue
    m = _PARAM.fullmatch(decl)
    if m is None:
      raise NotImplementedError(f"kernel parameter `{decl}`: not a .param declaration")
    words = m["decl"].split()
    own = words[:words.index(".ptr")] if ".ptr" in words else words   # pointee's .align
    types = [w[1:] for w in own if w[1:] in _TYPE_BYTES]
    if len(types) != 1:
      raise NotImplementedError(f"kernel parameter `{decl}`: no single type")
    align = next((int(own[i + 1]) for i, w in enumerate(own[:-1]) if w == ".align"), None)
    elem = _TYPE_BYTES[types[0]]
    count = None if m["n"] is None else int(m["n"])
    align = align or elem
    offset = -(-end // align) * align
    size = elem * (count or 1)
    params.append(Param(m["name"], types[0], count, size, align, offset))
    end = offset + size
  return params


def array_of(arg) -> np.ndarray:
  """The array an argument names (a bare array, a ``Memref``'s, a ``TensorMap``'s)."""
  return arg.array if isinstance(arg, (Memref, TensorMap)) else arg


def buffer_slots(args) -> list[int]:
  """For each argument, the index of its global buffer: distinct array objects are
  distinct buffers, numbered in order of first appearance."""
  seen, slots = {}, []
  for a in args:
    slots.append(seen.setdefault(id(array_of(a)), len(seen)))
  return slots


@dataclasses.dataclass
class Packed:
  """``pack``'s result: the global buffers' bytes and names (one per distinct array),
  the parameter space's bytes, and each tensor-map parameter's offset -> its map."""

  gbufs: list
  names: list
  param_buf: bytes
  tensor_maps: dict


def _pieces(args, slots):
  """What each argument makes: (argument, [("word", int) | ("map", TensorMap)], label)."""
  out = []
  for i, (a, j) in enumerate(zip(args, slots)):
    addr = (j + 1) << GLOBAL_SHIFT
    if isinstance(a, TensorMap):
      out.append((i, [("map", a)], "TensorMap: 128 bytes"))
    elif isinstance(a, Memref):
      arr = np.asarray(a.array)
      strides = [int(np.prod(arr.shape[d + 1:])) for d in range(arr.ndim)]
      words = [addr, addr, 0, *arr.shape, *strides]
      out.append((i, [("word", w) for w in words], f"Memref{arr.shape}: {len(words)}"))
    else:
      out.append((i, [("word", addr)], "array: 1"))
  return out


def _mismatch(params, pieces, why):
  made = sum(len(p) for _, p, _ in pieces)
  kinds = collections.Counter(p.shown for p in params)
  return ParamMismatch(
      f"the kernel takes {len(params)} parameters, the arguments make {made} "
      f"({', '.join(label for _, _, label in pieces) or 'none'}); the kernel's: "
      f"{', '.join(f'{n} x {k}' for k, n in kinds.items()) or 'none'}; {why}; expected: "
      "one per NumPy array (its address) and 3 + 2 * ndim per Memref (a memref "
      "descriptor), each an 8-byte parameter, and one TensorMap per 128 bytes of a "
      "`.param .align 64 .b8 NAME[128 * n]` (a tensor-map parameter)")


def pack(program, args) -> Packed:
  """The launch arguments ``args`` packed into ``program``'s parameters (its
  ``param_specs``, ``parse``'s layout), or ``ParamMismatch`` naming what each argument
  makes and where the two part."""
  params, slots = program.param_specs, buffer_slots(args)
  pieces = _pieces(args, slots)
  flat = [(i, kind, v) for i, made, _ in pieces for kind, v in made]
  buf = bytearray(params[-1].offset + params[-1].size if params else 0)
  maps, first_param, at = {}, {}, 0
  for p in params:
    want = p.maps or (1 if p.is_word else 0)
    if not want:
      raise _mismatch(params, pieces, f"parameter {p} is neither an 8-byte word nor "
                      "a tensor-map parameter")
    got, kind = flat[at:at + want], "map" if p.maps else "word"
    wrong = next((i for i, k, _ in got if k != kind), None)
    if len(got) < want or wrong is not None:
      what = "TensorMap" if p.maps else "8-byte word"
      raise _mismatch(params, pieces, f"parameter {p} needs {want} {what}"
                      + ("s" * (want > 1)) + (", the arguments ran out" if wrong is None
                      else f", argument {wrong} makes " + ("a word" if p.maps else
                                                            "a TensorMap")))
    for k, (i, _, v) in enumerate(got):
      first_param.setdefault(i, p.name)
      if p.maps:
        off = p.offset + k * TENSOR_MAP_BYTES
        buf[off:off + TENSOR_MAP_BYTES] = v.encode(((slots[i] + 1) << GLOBAL_SHIFT)
                                                   + v.offset)
        maps[off] = v
      else:
        buf[p.offset:p.offset + 8] = v.to_bytes(8, "little")
    at += want
  if at != len(flat):
    raise _mismatch(params, pieces, f"{len(flat) - at} left over after the last parameter")
  gbufs, names = [], []
  for i, (a, j) in enumerate(zip(args, slots)):
    named = f"argument {i}, parameter {first_param[i]}"
    if j == len(gbufs):
      gbufs.append(bytearray(subbyte.pack(array_of(a)).tobytes()))
      names.append(named)
    else:
      names[j] += f" (also {named})"
  return Packed(gbufs, names, bytes(buf), maps)
