"""The two descriptors a ``tcgen05.mma`` names, decoded and checked: the 32-bit
instruction descriptor (its kind's types, transposes, negations, M and N) and the
64-bit shared-memory matrix descriptor of sm_100 (where an operand lies).

Instruction descriptor, PTX ISA 9.7.16.4.2 Table 42 (``.kind::tf32``, ``f16``,
``f8f6f4``, ``i8``): bits 0-1 sparsity selector, 2 sparsity (dense 0), 3 saturate
(``i8`` only), 4-5 D type (F16 0, F32 1, S32 2), 6 reserved, 7-9 / 10-12 A / B type
(``f16``: F16 0, BF16 1; ``tf32``: TF32 2; ``f8f6f4``: E4M3 0, E5M2 1, E2M3 3, E3M2 4,
E2M1 5; ``i8``: unsigned 0, signed 1), 13 / 14 negate A / B (not for ``i8``), 15 / 16
transpose A / B (1: M- / N-major), 17-22 N >> 3, 23 reserved, 24-28 M >> 4, 29
reserved, 30-31 maximum shift (``.ws`` only).  The dense shapes without ``.ws``
(9.7.16.2.1 Table 39): ``.cta_group::1``, M 64 or 128, N 8..256 in steps of 8
(``i8``: 8, 16, 24, 32, then 48..256 in steps of 16); ``.cta_group::2``, M 128 or 256,
N 16..256 in steps of 16 (``i8``: 32..256 in steps of 32), the pair's M and N (jax
writes ``instr_m * 2`` and ``instr_n * 2``); K 16 (``f16``), 8 (``tf32``), 32
(``f8f6f4``, ``i8``), "implicitly determined by the MMA-kind".  ``.cta_group::2``
with M = 128 (layout B, 9.7.16.10.5, whose row placement is given by a figure only)
is refused by name.

Shared-memory descriptor, 9.7.16.4.1 Table 40: bits 0-13 start address, 16-29
leading-dimension byte offset (LBO), 32-45 stride-dimension byte offset (SBO), each
``(x & 0x3FFFF) >> 4``; 46-48 "fixed constant value of 0b001"; 49-51 matrix base
offset; 52 LBO mode (0 relative, 1 absolute: sm_103a); 53-60 fixed 0; 61-63 swizzle
(0 none, 1 128-byte with 32-byte atomicity, 2 128-byte, 4 64-byte, 6 32-byte; "Values
3, 5 and 7 are invalid").  jax (0.12.1) writes Hopper's form: bits 46-48 zero and the
swizzle as 1/2/3 at bit 62, which read as three bits at 61 are 2/4/6, the same modes,
and its kernels run on B200s; so bits 46-48 may be 0 or 1 here.  The canonical layouts
(9.7.16.3.3) and the meanings of LBO and SBO (9.7.16.3.1.1) are WGMMA's, so an
operand's addresses come from ``wgmma.layout.operand_addresses`` over the same
``layout.Descriptor``; what that refuses (a base offset, a start past the first row of
its swizzle pattern) stays refused.  Refused by name here: swizzle 1 (the 32-byte
atomicity layout is not modelled), the absolute LBO mode (bit 52).
"""

from __future__ import annotations

import dataclasses

from mosaic_async_store.check.families.wgmma import layout as wgmma_layout
from mosaic_async_store.check.findings import Finding, Stop

__all__ = ["Idesc", "decode_idesc", "decode_smem", "hopper_bits", "KINDS", "RULES"]

# kind -> (K, {A/B type code -> the type's name as wgmma.layout names it, None: refused},
# the D types it may have (code -> name)).
KINDS = {
    "f16": (16, {0: "f16", 1: "bf16"}, {0: "f16", 1: "f32"}),
    "tf32": (8, {2: "tf32"}, {1: "f32"}),
    "f8f6f4": (32, {0: "e4m3", 1: "e5m2", 3: None, 4: None, 5: None}, {0: "f16", 1: "f32"}),
    "i8": (32, {0: "u8", 1: "s8"}, {2: "s32"}),
}
_SUBBYTE = {3: "E2M3", 4: "E3M2", 5: "E2M1"}
# cta_group -> (the M values, N of .kind::i8, N of the other kinds) of Table 39.
_SHAPES = {1: ((64, 128), (8, 16, 24) + tuple(range(32, 257, 16)), range(8, 257, 8)),
           2: ((128, 256), range(32, 257, 32), range(16, 257, 16))}
_SWIZZLE = {0: 0, 2: 128, 4: 64, 6: 32}     # bits 61-63 -> bytes (1: refused; 3, 5, 7 invalid)
_HOPPER = {0: 0, 128: 1, 64: 2, 32: 3}      # bytes -> WGMMA's 2-bit code at bit 62

RULES = {
    "tcgen05-mma": "PTX ISA 9.7.16.4.2 Table 42 (the instruction descriptor's fields and the "
                   "values each .kind allows; reserved bits 0) and 9.7.16.2.1 Table 39 (for "
                   ".cta_group::1 without .ws, M is 64 or 128 and N a multiple of 8 from 8 "
                   "to 256; .kind::i8: N 8, 16, 24, 32, then multiples of 16 to 256; for "
                   ".cta_group::2, M is 128 or 256 and N a multiple of 16 from 16 to 256; "
                   ".kind::i8: multiples of 32 from 32 to 256); "
                   "9.7.16.4.1 Table 40, the shared memory descriptor: bits 46-48 \"Fixed "
                   "constant value of 0b001\" (0 accepted: jax's kernels), bits 53-60 fixed "
                   "0, swizzle \"Values 3, 5 and 7 are invalid\"; 9.7.16.10.1: \"For "
                   ".kind::tf32, the transpose operations on matrices A and B are supported "
                   "only with 128B swizzling mode with 32B swizzle-atomicity. For all other "
                   "MMA-Kinds, the transpose operations on matrices A and B are not "
                   "supported on 128B swizzling mode with 32B swizzle-atomicity\"; "
                   "9.7.16.10.5: an M = 64 matrix D (layout F) is at lane 0 or 16, an "
                   "M = 128 one, and each CTA's half of an M = 256 one (layout A), at "
                   "lane 0",
}


@dataclasses.dataclass(frozen=True)
class Idesc:
  """A decoded instruction descriptor: ``m``, ``n``, ``k``, ``dtype`` / ``atype`` /
  ``btype`` (wgmma.layout's names: "f32", "f16", "s32", "bf16", "e4m3", ...),
  ``trans_a`` / ``trans_b`` (M- / N-major), ``neg_a`` / ``neg_b``, ``saturate``."""

  m: int
  n: int
  k: int
  dtype: str
  atype: str
  btype: str
  trans_a: bool
  trans_b: bool
  neg_a: bool
  neg_b: bool
  saturate: bool

  @property
  def elem_bytes(self) -> int:
    return 4 if self.atype == "tf32" else 2 if self.atype in ("f16", "bf16") else 1


def _bad(where, what) -> Finding:
  """A ``tcgen05-mma`` finding about the instruction ``where`` names."""
  return Finding("tcgen05-mma", f"{where}: {what}")


def decode_idesc(value: int, kind: str, where: str, cta_group: int = 1) -> Idesc:
  """``value``'s fields for ``.kind::{kind}`` of ``.cta_group::{cta_group}`` (module
  doc).  A field the ISA does not allow is ``tcgen05-mma`` (Stop, ``where`` names the
  instruction); a type the checker does not run (the 6- and 4-bit types), or the pair's
  M = 128, is refused by name."""
  value &= 0xFFFFFFFF
  k, types, dtypes = KINDS[kind]

  def field(lo, n):
    return (value >> lo) & ((1 << n) - 1)
  name = f"instruction descriptor {value:#010x}"
  if field(2, 1) or field(0, 2):
    raise Stop(_bad(where, f"{name} is sparse (bit 2) or names a sparsity selector in a dense "
                      "tcgen05.mma (.sp is the sparse form)"))
  if field(6, 1) or field(23, 1) or field(29, 1):
    raise Stop(_bad(where, f"{name} sets a reserved bit (6, 23 or 29)"))
  if field(30, 2):
    raise Stop(_bad(where, f"{name} sets the maximum shift (bits 30-31): only for .ws"))
  if field(3, 1) and kind != "i8":
    raise Stop(_bad(where, f"{name} sets saturate (bit 3): only .kind::i8 has it"))
  neg_a, neg_b = bool(field(13, 1)), bool(field(14, 1))
  if kind == "i8" and (neg_a or neg_b):
    raise Stop(_bad(where, f"{name} negates A or B (bits 13-14): .kind::i8 does not"))
  codes = field(7, 3), field(10, 3)
  for which, code in zip("AB", codes):
    if code not in types:
      raise Stop(_bad(where, f"{name}: {which} type code {code} is not one of .kind::{kind}'s "
                        f"({sorted(types)})"))
    if types[code] is None:
      raise NotImplementedError(f"opcode tcgen05.mma.kind::{kind} ({which} of type "
                                f"{_SUBBYTE[code]}: the 6- and 4-bit types are not run)")
  atype, btype = types[codes[0]], types[codes[1]]
  if kind == "f16" and atype != btype:
    raise NotImplementedError(f"opcode tcgen05.mma.kind::f16 (A {atype} with B {btype}: "
                              "the checker runs A and B of one type)")
  if field(4, 2) not in dtypes:
    raise Stop(_bad(where, f"{name}: D type code {field(4, 2)} is not one of .kind::{kind}'s "
                      f"({sorted(dtypes)})"))
  dtype = dtypes[field(4, 2)]
  if kind == "f16" and dtype == "f16" and atype != "f16":
    raise Stop(_bad(where, f"{name}: an F16 D takes F16 A and B, not {atype}"))
  m, n = field(24, 5) << 4, field(17, 6) << 3
  ms, i8_n, other_n = _SHAPES[cta_group]
  group = f".cta_group::{cta_group}"
  if m not in ms:
    raise Stop(_bad(where, f"{name}: M = {m}; {group} without .ws has M {ms[0]} or {ms[1]}"))
  if n not in (i8_n if kind == "i8" else other_n):
    raise Stop(_bad(where, f"{name}: N = {n} is not one .kind::{kind} has with {group}"))
  if cta_group == 2 and m == 128:
    raise NotImplementedError(f"opcode tcgen05.mma.cta_group::2.kind::{kind} (M = 128: "
                              "layout B, whose rows the ISA places by a figure only, is "
                              "not run by the checker; M = 256 is)")
  return Idesc(m, n, k, dtype, atype, btype, bool(field(15, 1)), bool(field(16, 1)), neg_a,
               neg_b, bool(field(3, 1)))


def decode_smem(d: int, *, transposed: bool, kind: str, where: str, which: str,
                opcode: str = ""):
  """The sm_100 shared-memory descriptor ``d`` of operand ``which`` ("A" or "B"; "the
  source" of ``tcgen05.cp``) as a ``wgmma.layout.Descriptor`` (module doc);
  ``transposed``: the operand is M- or N-major.  A malformed one is ``tcgen05-mma``
  (the rule of Table 40 for every instruction that takes it); the layouts not modelled
  are refused by name, naming ``opcode`` (default ``tcgen05.mma.kind::{kind}``)."""
  opcode = opcode or f"tcgen05.mma.kind::{kind}"
  d &= (1 << 64) - 1
  name = f"{which}'s shared memory descriptor {d:#018x}"
  if (d >> 46) & 7 not in (0, 1):
    raise Stop(_bad(where, f"{name}: bits 46-48 are {(d >> 46) & 7}, not the fixed 0b001 (or 0, "
                      "as jax writes)"))
  if (d >> 53) & 0xFF:
    raise Stop(_bad(where, f"{name}: bits 53-60 are not the fixed 0"))
  code = d >> 61
  if code in (3, 5, 7):
    raise Stop(_bad(where, f"{name}: swizzle mode {code} (bits 61-63) is invalid"))
  if code == 1:
    if transposed and kind != "tf32":
      raise Stop(_bad(where, f"{name}: a transposed .kind::{kind} operand may not use 128-byte "
                        "swizzling with 32-byte atomicity (mode 1)"))
    raise NotImplementedError(f"opcode {opcode} ({name}: 128-byte swizzle "
                              "with 32-byte atomicity is not modelled by the checker)")
  if kind == "tf32" and transposed:
    raise Stop(_bad(where, f"{name}: a transposed .kind::tf32 operand must use 128-byte "
                      "swizzling with 32-byte atomicity (mode 1)"))
  if (d >> 52) & 1:
    raise NotImplementedError(f"opcode {opcode} ({name}: the absolute "
                              "leading-dimension address mode (bit 52, sm_103a) is not run)")
  return wgmma_layout.Descriptor((d & 0x3FFF) << 4, ((d >> 16) & 0x3FFF) << 4,
                                 ((d >> 32) & 0x3FFF) << 4, (d >> 49) & 7, _SWIZZLE[code])


def hopper_bits(desc) -> int:
  """``desc`` (a ``wgmma.layout.Descriptor``) as WGMMA's 64-bit descriptor: the form
  ``wgmma.execute``'s operand reader takes (its byte offsets are cached per value)."""
  return ((desc.start >> 4) | (desc.lbo >> 4) << 16 | (desc.sbo >> 4) << 32 |
          desc.base_offset << 49 | _HOPPER[desc.swizzle] << 62)
