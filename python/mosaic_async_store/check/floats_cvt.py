"""Conversions between float types for the PTX checker: ``cvt``, exact or refused by name.

What runs (``float_cvt``: a function of the source bit patterns, and the destination's
width): ``cvt`` from f32 to f16 / bf16 (``.rn``/``.rz``/``.rm``/``.rp``), from f16 /
bf16 to f32 (exact), and the packing forms ``cvt.rn.f16x2.f32``, ``cvt.rn.bf16x2.f32``
and ``cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`` (``d = {a, b}`` with ``a`` in the upper
half; ``.satfinite`` clamps to the largest finite value).  Each is ``floats``' exact
rounding of the decoded value (``floats.decode`` / ``floats.encode``, one rounding in
the named mode); the conversions rounded to nearest between f32 and f16 / bf16 go
through NumPy (f16) and ml_dtypes (bf16), which round them the same way
(test_float_ops checks), and ``float_cvt_lanes`` runs those on a warp's lanes at once.
Also ``cvt{.irnd}{.ftz}{.sat}.f32.f32`` (``_f32_to_f32``: rounding to an integral
value, clamping to [0.0, 1.0]) and integer to f32 (``_int_to_f32``: one rounding).
A NaN source is refused (the result's bit pattern is not modelled; ``.sat`` makes it
+0.0); every other conversion (float to integer, integer to f16 / bf16, other types or
qualifiers) is refused when the kernel is parsed.

Apart from ``floats`` (the formats and the arithmetic) because a conversion changes
format rather than computing in one, and has its own fast path and warp form.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np

from mosaic_async_store.check.floats import (_ROUNDING, FLOAT_TYPE, FORMATS, NAN, Format, decode,
                                             encode)

__all__ = ["float_cvt", "float_cvt_lanes", "bits_type_of"]


# Conversions between f32 and f16 / bf16 rounded to nearest even, which NumPy (f16) and
# ml_dtypes (bf16) compute exactly so (subnormals and overflow to infinity included):
# (source, destination) -> (NumPy source type, destination type, source bits type).
_NUMPY_RN = {(FORMATS["f32"], FORMATS["f16"]): (np.float32, np.float16, np.uint32),
             (FORMATS["f32"], FORMATS["bf16"]): (np.float32, ml_dtypes.bfloat16, np.uint32),
             (FORMATS["f16"], FORMATS["f32"]): (np.float16, np.float32, np.uint16),
             (FORMATS["bf16"], FORMATS["f32"]): (ml_dtypes.bfloat16, np.float32, np.uint16)}


def bits_type_of(fmt: Format):
  """The unsigned NumPy type of ``fmt``'s bit patterns."""
  return {16: np.uint16, 32: np.uint32}[fmt.bits]


def float_cvt(mods: list[str], opcode: str, nsrc: int):
  """(function of the source bit patterns, destination bits) of a ``cvt`` between
  float types (module docstring), or NotImplementedError naming it."""
  types = [m for m in mods if FLOAT_TYPE.match(m)]
  quals = [m for m in mods if m not in types]
  if types == ["f32", "f32"] and nsrc == 1:
    return _f32_to_f32(quals, opcode), 32
  if types == ["f32"] == mods[-2:-1] and nsrc == 1 and mods[-1] in _INTEGER_SOURCES and \
     len(quals) == 2 and quals[0] in _ROUNDING:
    return _int_to_f32(mods[-1], quals[0]), 32
  mode = next((m for m in quals if m in _ROUNDING), None)
  satfinite = "satfinite" in quals
  if len(types) != 2 or not set(quals) <= set(_ROUNDING) | {"satfinite"} or \
     len([m for m in quals if m in _ROUNDING]) > 1:
    raise NotImplementedError(f"opcode {opcode}")
  dst, src = types
  packed = {"f16x2": "f16", "bf16x2": "bf16", "e4m3x2": "e4m3", "e5m2x2": "e5m2"}
  if src == "f32" and dst in packed and nsrc == 2 and mode == "rn" and \
     satfinite == (dst[0] == "e"):
    lane = FORMATS[packed[dst]]
    one = _convert(FORMATS["f32"], lane, "rn", satfinite, opcode)
    return (lambda a, b: one(a) << lane.bits | one(b)), 2 * lane.bits
  if nsrc == 1 and not satfinite and src == "f32" and dst in ("f16", "bf16") and mode:
    return _convert(FORMATS["f32"], FORMATS[dst], mode, False, opcode), 16
  if nsrc == 1 and not satfinite and src in ("f16", "bf16") and dst == "f32" and not mode:
    return _convert(FORMATS[src], FORMATS["f32"], "rn", False, opcode), 32
  raise NotImplementedError(f"opcode {opcode}")


def float_cvt_lanes(mods: list[str], nsrc: int):
  """The warp form of the ``cvt`` that ``float_cvt`` runs through NumPy (rounded to
  nearest, between f32 and f16 / bf16, packed or not): a function of one uint64 array
  of source bit patterns, operand by operand (the lanes' first operand, then their
  second) -> the destination bit patterns (a list, one per lane), or None where a lane
  holds a NaN (then lane by lane: refused); None where the conversion is not one of
  these."""
  types = [m for m in mods if FLOAT_TYPE.match(m)]
  if len(types) != 2 or [m for m in mods if m not in types] != ["rn"] * (types[1] == "f32"):
    return None
  dst, src = types
  lane = {"f16x2": "f16", "bf16x2": "bf16"}.get(dst, dst)
  fast = _NUMPY_RN.get((FORMATS.get(src), FORMATS.get(lane)))
  if fast is None or nsrc != (2 if lane != dst else 1):
    return None
  src_type, dst_type, bits_type = fast
  out_bits, mask = bits_type_of(FORMATS[lane]), np.uint64((1 << FORMATS[src].bits) - 1)

  def run(bits):   # (every operand at once: a warp's 32 lanes are few for NumPy's calls)
    x = (bits & mask).astype(bits_type).view(src_type)
    if np.isnan(x.astype(np.float32, copy=False)).any():
      return None
    with np.errstate(over="ignore"):
      out = x.astype(dst_type).view(out_bits).astype(np.uint64)
    if nsrc == 1:
      return out.tolist()
    half = len(out) // 2   # (d = {a, b}: a high)
    return ((out[:half] << np.uint64(16)) | out[half:]).tolist()
  return run


def _convert(src: Format, dst: Format, mode: str, satfinite: bool, opcode: str):
  fast = _NUMPY_RN.get((src, dst)) if mode == "rn" and not satfinite else None
  if fast is not None:   # the same rounding (test_float_ops checks), at NumPy's speed
    src_type, dst_type, bits_type = fast
    nan_exp = ((1 << src.exp_bits) - 1) << src.man_bits

    def cvt_numpy(a):
      a &= (1 << src.bits) - 1
      if a & nan_exp == nan_exp and a & ((1 << src.man_bits) - 1):
        raise NotImplementedError(f"{opcode} of a NaN (the result's bit pattern is not "
                                  "modelled)")
      with np.errstate(over="ignore"):   # (rounding to nearest: an overflow is infinity)
        return int(bits_type(a).view(src_type).astype(dst_type).view(bits_type_of(dst)))
    return cvt_numpy

  def cvt(a):
    x = decode(src, a & ((1 << src.bits) - 1))
    if x == NAN:
      raise NotImplementedError(f"{opcode} of a NaN (the result's bit pattern is not "
                                "modelled)")
    return encode(dst, x[0], x[1], mode, satfinite)
  return cvt


# cvt.f32.f32's integer rounding modifiers (PTX ISA, cvt: "A floating-point value may be
# rounded to an integral value using the integer rounding modifiers"): mode -> rounding
# of a Fraction to an integer (rni: ties to even).
_INTEGER_ROUNDING = {"rni": round, "rzi": math.trunc, "rmi": math.floor, "rpi": math.ceil}


def _f32_to_f32(quals, opcode):
  """``cvt{.irnd}{.ftz}{.sat}.f32.f32``: the value, rounded to an integer with ``.irnd``
  (``_INTEGER_ROUNDING``), clamped to [0.0, 1.0] with ``.sat`` ("For floating-point
  destination types, .sat limits the result to the range [0.0, 1.0]. NaN results are
  flushed to positive zero"), ``.ftz`` flushing a subnormal input or result to a zero
  of its sign.  Refused: a NaN without ``.sat`` (its bit pattern is not modelled), and
  a zero result of a negative operand under ``.irnd`` or ``.sat`` (-0.0 or +0.0: the ISA
  says neither).  A float rounding modifier is refused ("Floating-point rounding is
  illegal in all other instances")."""
  irnd = [m for m in quals if m in _INTEGER_ROUNDING]
  if not set(quals) <= {*_INTEGER_ROUNDING, "ftz", "sat"} or len(irnd) > 1 or \
     len(set(quals)) != len(quals):
    raise NotImplementedError(
        f"opcode {opcode} (the checker runs cvt{{.rni,.rzi,.rmi,.rpi}}{{.ftz}}{{.sat}}.f32.f32; "
        "a float rounding modifier is illegal on a conversion that loses no precision)")
  fmt, sat, ftz = FORMATS["f32"], "sat" in quals, "ftz" in quals
  to_int = _INTEGER_ROUNDING[irnd[0]] if irnd else None
  one, sign_bit = 0x3F800000, 0x80000000

  def cvt(a):
    a &= 0xFFFFFFFF
    if ftz and not a & 0x7F800000:
      a &= sign_bit
    x = decode(fmt, a)
    if x == NAN:
      if sat:
        return 0   # ("NaN results are flushed to positive zero")
      raise NotImplementedError(f"{opcode} of a NaN (the result's bit pattern is not "
                                "modelled)")
    sign, mag = x
    if to_int is not None and mag is not None:
      mag = Fraction(abs(to_int(-mag if sign else mag)))
    if mag == 0 and sign and (sat or (to_int is not None and a & ~sign_bit)):
      raise NotImplementedError(
          f"{opcode} of {a:#010x}: a negative operand whose result is zero; the ISA does "
          "not say whether that zero is -0.0 or +0.0")
    if sat and sign:
      return 0
    if sat and (mag is None or mag > 1):
      return one
    out = encode(fmt, sign, mag)   # (exact: an f32 value, or an integer no wider)
    return out & sign_bit if ftz and not out & 0x7F800000 else out
  return cvt


_INTEGER_SOURCES = {f"{k}{n}" for k in "su" for n in (8, 16, 32, 64)}


def _int_to_f32(src, mode):
  """``cvt.{rn,rz,rm,rp}.f32.{s,u}{8,16,32,64}``: the integer (the low bits of the
  register the type names, sign-extended for .s types) rounded once in ``mode``
  ("Floating-point rounding is required ... for integer-to-float conversions")."""
  bits, signed, fmt = int(src[1:]), src[0] == "s", FORMATS["f32"]

  def cvt(a):
    v = a & ((1 << bits) - 1)
    if signed and v >> (bits - 1):
      v -= 1 << bits
    return encode(fmt, int(v < 0), Fraction(abs(v)), mode)
  return cvt
