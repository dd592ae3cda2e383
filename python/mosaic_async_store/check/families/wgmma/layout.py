"""WGMMA's data layout as pure functions: the forms of ``wgmma.mma_async``, the shared-memory
matrix descriptor, where each element of A and B lies in shared memory, and which element
of A or of the accumulator each register of each lane holds.

Sources.  The PTX ISA's own text of 9.7.15 (``wgmma``) was not among the stored copies
this module was written from; the facts below are the ISA's as restated by NVIDIA's
CUTLASS (``cute/arch/mma_sm90_desc.hpp``: the descriptor's bit fields and the canonical
layouts; ``cute/atom/mma_traits_sm90_gmma.hpp``: the fragment layouts) and by other
public descriptions of the descriptor (Modular's ``WGMMADescriptor``), and the ISA's
sentences as recalled where marked "(ISA, recalled)".  Every layout here is also
checked against the kernels Mosaic GPU emits: their outputs equal NumPy's
(test/checker/test_wgmma.py), which a wrong field or stride would break.

* The matrix descriptor (64 bits): start address ``(d & 0x3FFF) << 4``, leading-dimension
  byte offset (LBO) ``((d >> 16) & 0x3FFF) << 4``, stride-dimension byte offset (SBO)
  ``((d >> 32) & 0x3FFF) << 4``, matrix base offset ``(d >> 49) & 7``, swizzle
  ``d >> 62``: 0 none ("interleave"), 1 128-byte, 2 64-byte, 3 32-byte.
* A matrix is made of *core matrices* of 8 rows of 16 bytes.  K-major (A not transposed,
  B not transposed: K contiguous): element (r, k), r along M or N, at
  ``(r % 8) * W + (r // 8) * SBO + k * s`` with a swizzle of W bytes (the instruction's
  K extent, 32 bytes, lies in one swizzle row: LBO unused), and at
  ``(r % 8) * 16 + (r // 8) * SBO + (k*s % 16) + (k*s // 16) * LBO`` without one.
  MN-major (transposed: M or N contiguous): ``(x % W) + (x // W) * LBO + (k % 8) * W +
  (k // 8) * SBO`` with ``x = r * s`` and a swizzle of W bytes, and ``(x % 16) +
  (x // 16) * SBO + (k % 8) * 16 + (k // 8) * LBO`` without one.  The swizzle is then
  applied to the absolute shared-memory address, as a TMA copy's is
  (``addresses.swizzle_address``).  A start address that is not in the first row of
  its swizzle pattern's repeat, or a non-zero base offset, is refused by name (the
  base offset's exact use is not modelled).
* Fragments (warp w of the warpgroup, lane l): the accumulator's register 4i + 2h + c
  (f32, s32) holds row ``16w + l // 4 + 8h``, column ``8i + 2 (l % 4) + c``; with an f16
  accumulator register 2i + h holds columns c = 0, 1 of that row in its low and high
  halves.  A from registers: register 2j + h holds row ``16w + l // 4 + 8h``, columns
  ``(K/2) j + e (l % 4) + t`` for the register's e elements t, low bytes first (e = 4 /
  element bytes, K the instruction's).
"""

from __future__ import annotations

import dataclasses
import functools

import ml_dtypes
import numpy as np

from mosaic_async_store.check.addresses import swizzle_address

__all__ = ["MmaForm", "Descriptor", "ATYPES", "RULES", "parse_form", "decode_descriptor",
           "operand_addresses", "accumulator_map", "a_register_map", "elements",
           "encode_accumulator"]

# atype -> (K of the instruction, element bytes, accumulator types, may be transposed,
# how many immediate operands follow scale-d: imm-scale-a/b and the transposes).
ATYPES = {
    "f16": (16, 2, ("f16", "f32"), True, 4),
    "bf16": (16, 2, ("f32",), True, 4),
    "tf32": (8, 4, ("f32",), False, 2),
    "e4m3": (32, 1, ("f16", "f32"), False, 2),
    "e5m2": (32, 1, ("f16", "f32"), False, 2),
    "s8": (32, 1, ("s32",), False, 0),
    "u8": (32, 1, ("s32",), False, 0),
}
# Which A and B types may be paired (ISA, recalled: the floating-point types pair with
# themselves, the two FP8 formats and the two 8-bit integer types with each other).
_FAMILY = {"f16": "f16", "bf16": "bf16", "tf32": "tf32", "e4m3": "fp8", "e5m2": "fp8",
           "s8": "int", "u8": "int"}
# The N each family may have (ISA, recalled): 8..256 in steps of 8; the integer types
# 8, 16, 24, then 32..256 in steps of 16.
_INT_N = (8, 16, 24) + tuple(range(32, 257, 16))
_SWIZZLE = {0: 0, 1: 128, 2: 64, 3: 32}

RULES = {
    "wgmma-fence": "(ISA, recalled, wgmma.fence) \"The wgmma.fence instruction must be issued "
                   "by all warps of the warpgroup ... before the first wgmma.mma_async "
                   "operation in a warpgroup; between a register access by a thread in the "
                   "warpgroup and any wgmma.mma_async instruction that accesses the same "
                   "registers, either as accumulator or input register containing fragments "
                   "of matrix A, except when these are accumulator register accesses across "
                   "multiple wgmma.mma_async instructions of the same shape\"",
    "wgmma-registers": "(ISA, recalled, wgmma.mma_async) \"Accessing the accumulator register "
                       "or the input registers containing fragments of matrix A of a "
                       "wgmma.mma_async instruction without first performing a "
                       "wgmma.wait_group instruction that waits on a wgmma-group including "
                       "that wgmma.mma_async instruction is undefined behavior\"",
    "wgmma-aligned": "(ISA, wgmma.fence / mma_async / commit_group / wait_group) \"The "
                     "mandatory .aligned qualifier indicates that all threads in the "
                     "warpgroup must execute the same wgmma.[...] instruction\" (the "
                     "warps' n-th wgmma instruction of any of the four kinds must be one "
                     "instruction; their n-th wgmma.mma_async's descriptors and group "
                     "must agree)",
    "wgmma-operands": "(ISA, wgmma.mma_async) \"The contents of a matrix descriptor must be "
                      "same across all the warps in the warpgroup\"; \"The mandatory "
                      ".aligned qualifier indicates that all threads in the warpgroup must "
                      "execute the same wgmma.mma_async instruction\" (one operation of the "
                      "warpgroup: a-desc, b-desc or the scale-d predicate that differs "
                      "between its threads leaves the operation undefined)",
}


@dataclasses.dataclass(frozen=True)
class MmaForm:
  """One ``wgmma.mma_async`` form: shape m64 n ``n`` k ``k``, accumulator ``dtype``,
  ``atype`` / ``btype``, ``a_regs`` (A from registers), ``satfinite``, and the operand
  count it takes."""

  n: int
  k: int
  dtype: str
  atype: str
  btype: str
  a_regs: bool
  satfinite: bool
  elem_bytes: int
  transposable: bool
  imms: int

  @property
  def shape(self) -> str:
    return f"m64n{self.n}k{self.k}"

  @property
  def d_count(self) -> int:
    """The accumulator's registers per thread."""
    return self.n // 4 if self.dtype == "f16" else self.n // 2


def parse_form(mods, ops) -> MmaForm:
  """The form of ``wgmma.mma_async`` with qualifiers ``mods`` (after ``wgmma``) and parsed
  operands ``ops``; NotImplementedError names what is not a form the checker runs."""
  rest = list(mods)
  head = ["mma_async", "sync", "aligned"]
  if rest[:3] != head or len(rest) < 7:
    raise NotImplementedError("(wgmma.mma_async.sync.aligned.shape.dtype.atype.btype: the "
                              "dense forms the checker runs; .sp is not run)")
  shape, *types = rest[3:]
  satfinite = types[:1] == ["satfinite"]
  types = types[1:] if satfinite else types
  if len(types) != 3 or len(shape) < 7 or not shape.startswith("m64n"):
    raise NotImplementedError("(shape m64nNkK and three types: dtype, atype, btype)")
  dtype, atype, btype = types
  if atype not in ATYPES or btype not in ATYPES or _FAMILY[atype] != _FAMILY[btype]:
    raise NotImplementedError(f"(.{atype}.{btype}: A and B of one of the pairs f16, bf16, "
                              "tf32, e4m3/e5m2, s8/u8; .b1 is not run)")
  k, size, dtypes, transposable, imms = ATYPES[atype]
  n_text, _, k_text = shape[4:].partition("k")
  if not n_text.isdigit() or k_text != str(k):
    raise NotImplementedError(f"(shape {shape}: .{atype} takes m64nNk{k})")
  n = int(n_text)
  if n not in (_INT_N if atype in ("s8", "u8") else range(8, 257, 8)):
    raise NotImplementedError(f"(shape {shape}: N = {n} is not one the ISA gives .{atype})")
  if dtype not in dtypes:
    raise NotImplementedError(f"(.{dtype} accumulator with .{atype}: {', '.join(dtypes)})")
  if satfinite and dtype != "s32":
    raise NotImplementedError("(.satfinite: only with the integer types)")
  a_regs = len(ops) > 1 and ops[1][0] == "vec"
  want = 4 + imms - (1 if a_regs and transposable else 0)
  if len(ops) != want:
    raise NotImplementedError(f"({want} operands for this form, not {len(ops)})")
  return MmaForm(n, k, dtype, atype, btype, a_regs, satfinite, size, transposable, imms)


@dataclasses.dataclass(frozen=True)
class Descriptor:
  """A decoded matrix descriptor: ``start`` (shared::cta address), ``lbo``, ``sbo``
  (bytes), ``base_offset``, ``swizzle`` (bytes; 0: none)."""

  start: int
  lbo: int
  sbo: int
  base_offset: int
  swizzle: int


def decode_descriptor(d: int) -> Descriptor:
  """The descriptor's fields (module doc)."""
  return Descriptor((d & 0x3FFF) << 4, ((d >> 16) & 0x3FFF) << 4, ((d >> 32) & 0x3FFF) << 4,
                    (d >> 49) & 7, _SWIZZLE[(d >> 62) & 3])


def operand_addresses(desc: Descriptor, rows: int, k: int, size: int, mn_major: bool):
  """The shared::cta address of each element of a ``rows`` x ``k`` operand (A: M x K, B:
  N x K) of ``size``-byte elements: an int64 array [rows, k], swizzled.  Refuses
  (NotImplementedError) what the module doc says is not modelled."""
  w = desc.swizzle
  if desc.base_offset:
    raise NotImplementedError(f"(matrix descriptor with base offset {desc.base_offset}: the "
                              "checker runs descriptors whose base offset is 0)")
  if w and (desc.start >> 7) & (w // 16 - 1):
    raise NotImplementedError(f"(matrix descriptor start {desc.start:#x} is not in the first "
                              f"row of its {w}-byte swizzle pattern: a base offset would be "
                              "needed, which the checker does not model)")
  r = np.arange(rows, dtype=np.int64)[:, None]
  kk = np.arange(k, dtype=np.int64)[None, :]
  if not mn_major:
    kb = kk * size
    if w:
      if desc.start % w + k * size > w:
        raise NotImplementedError(f"(a K-major operand from {desc.start:#x} crosses its "
                                  f"{w}-byte swizzle row)")
      off = (r % 8) * w + (r // 8) * desc.sbo + kb
    else:
      off = (r % 8) * 16 + (r // 8) * desc.sbo + kb % 16 + (kb // 16) * desc.lbo
  else:
    x = r * size
    if w:
      off = x % w + (x // w) * desc.lbo + (kk % 8) * w + (kk // 8) * desc.sbo
    else:
      off = x % 16 + (x // 16) * desc.sbo + (kk % 8) * 16 + (kk // 8) * desc.lbo
  return swizzle_address(desc.start + off, w)


@functools.lru_cache(maxsize=None)
def accumulator_map(n: int, dtype: str):
  """(rows, cols) of the accumulator's elements in each lane of a warp of the warpgroup,
  rows relative to the warp's 16: int arrays [32 lanes, registers, elements per
  register] (1 element for f32 / s32, 2 for f16); read-only views, made once per form."""
  lane = np.arange(32)[:, None, None]
  per = 2 if dtype == "f16" else 1
  count = n // 4 if per == 2 else n // 2
  reg = np.arange(count)[None, :, None]
  elem = np.arange(per)[None, None, :]
  if per == 1:   # register 4i + 2h + c
    i, h, c = reg // 4, reg // 2 % 2, reg % 2
  else:          # register 2i + h, element c
    i, h, c = reg // 2, reg % 2, elem
  rows = lane // 4 + 8 * h + 0 * c
  cols = 8 * i + 2 * (lane % 4) + c
  return np.broadcast_to(rows, (32, count, per)), np.broadcast_to(cols, (32, count, per))


@functools.lru_cache(maxsize=None)
def a_register_map(k: int, size: int):
  """(rows, cols) of A's elements in a lane's four registers (A from registers), rows
  relative to the warp's 16: int arrays [32 lanes, 4 registers, 4 // size elements]."""
  per = 4 // size
  lane = np.arange(32)[:, None, None]
  reg = np.arange(4)[None, :, None]
  t = np.arange(per)[None, None, :]
  rows = lane // 4 + 8 * (reg % 2) + 0 * t
  cols = (k // 2) * (reg // 2) + per * (lane % 4) + t
  return np.broadcast_to(rows, (32, 4, per)), np.broadcast_to(cols, (32, 4, per))


_NUMPY = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
          "e5m2": ml_dtypes.float8_e5m2, "s8": np.int8, "u8": np.uint8, "tf32": np.float32}


def elements(raw: np.ndarray, atype: str) -> np.ndarray:
  """Elements of type ``atype`` from their bytes (``raw``: uint8 [..., size]) as exact
  float64 (or int64 for the integer types).  A tf32 element is a 32-bit float whose 13
  low mantissa bits the ISA says are ignored (ISA, recalled); one with any of them set is
  refused (NotImplementedError): whether the hardware truncates or rounds is not given."""
  vals = np.ascontiguousarray(raw).view(_NUMPY[atype])[..., 0]
  if atype == "tf32":
    bits = np.ascontiguousarray(raw).view(np.uint32)[..., 0]
    if (bits & 0x1FFF).any():
      raise NotImplementedError("(a .tf32 operand element with its 13 low mantissa bits "
                                "set: the checker runs tf32 values only)")
  return vals.astype(np.int64 if atype in ("s8", "u8") else np.float64)


def encode_accumulator(d: np.ndarray, dtype: str, satfinite: bool) -> np.ndarray:
  """The accumulator values ``d`` (float64 or int64 [..., elements per register]) as
  register bits (uint32 [...]): f32 rounded once to nearest even; f16 pairs packed low
  first; s32 wrapped modulo 2**32 or, with ``.satfinite``, clamped."""
  if dtype == "f32":
    return d[..., 0].astype(np.float32).view(np.uint32)
  if dtype == "f16":
    halves = d.astype(np.float16).view(np.uint16).astype(np.uint32)
    return halves[..., 0] | (halves[..., 1] << 16)
  v = d[..., 0]
  if satfinite:
    v = np.clip(v, -2**31, 2**31 - 1)
  return (v & 0xFFFFFFFF).astype(np.uint32)
