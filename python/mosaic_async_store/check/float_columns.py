"""Warp forms (``program.Program.vcode``) of float arithmetic on NumPy columns: the
lanes' operands as arrays, one operation for the warp, the same bits as the lane
functions (``floats.float_op``) give lane by lane.

* f32 ``add``, ``sub``, ``mul``, ``div``, ``fma`` rounded to nearest, ``min``, ``max``:
  the double arithmetic of ``floats_f32`` element-wise (TwoSum for ``fma``), rounded by
  a C cast (NumPy's ``astype``);
* f16 and bf16 ``add``, ``sub``, ``mul`` rounded to nearest, scalar or packed (``x2``):
  the double result (exact for f16; for bf16 rounded once more, which gives the same
  result for these operations: 53 >= 2 * 8 + 2, and through f32 the same again,
  24 >= 2 * 8 + 2), rounded to the type by NumPy (f16) or ml_dtypes (bf16).

Where any lane is a case the lane function treats its own way (a NaN; an infinity, but
for ``min`` / ``max``, which order it like any value; a subnormal input or result, a
zero divisor, two zeros to order, an overflow, a result at the smallest normal under
``.ftz``) a form returns None and the caller runs every lane through the lane function.  test/checker/test_float_lanes.py compares the two.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np

from mosaic_async_store.check.ops import ints_array

__all__ = ["lanes_form", "on_lists"]

_SIGN = 0x80000000

_EXP = np.uint32(0x7F800000)
_MAGNITUDE = np.uint32(0x7FFFFFFF)
_ARITH = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
# The smallest magnitude that rounds to infinity in f32 (to nearest): halfway between
# the largest finite f32, (2 - 2^-23) * 2^127, and 2^128 (a tie rounds to even: 2^128).
_ROUNDS_TO_INF = (2 - 2.0 ** -24) * 2.0 ** 127


def lanes_form(base, mods):
  """The warp form of float ``base`` with qualifiers and type ``mods`` (those
  ``floats.float_op`` accepted): uint64 columns of the operands' bit patterns (one
  element per lane) -> the results' bit patterns (a list), or None where a lane needs
  the lane function (module doc).  None for an operation without one."""
  if mods[-1] != "f32":
    return _half_form(base, mods)
  quals = set(mods) - {"f32", "ftz"}
  if base in _ARITH or base == "fma":
    if not quals <= {"rn"}:
      return None
  elif base not in ("min", "max") or not quals <= {"NaN"}:
    return None
  ftz = "ftz" in mods

  def run(operands):   # (few NumPy calls: a warp's 32 lanes cost what a call costs)
    bits = operands.astype(np.uint32)   # (the low 32 bits of each register)
    xs = bits.view(np.float32).astype(np.float64)
    if base in ("min", "max"):   # (infinities are ordered like any value)
      if np.isnan(xs).any() or (ftz and _subnormal(bits, _EXP, _MAGNITUDE).any()):
        return None   # (a NaN, a subnormal to flush: lane by lane)
      a, b = xs
      if (xs == 0).all(axis=0).any():
        return None   # (two zeros: the lane function orders their signs)
      pick_a = (a <= b) if base == "min" else ~(a <= b)   # (as fast_minmax picks)
      return np.where(pick_a, bits[0], bits[1]).tolist()
    if not np.isfinite(xs).all() or (ftz and _subnormal(bits, _EXP, _MAGNITUDE).any()):
      return None   # (a NaN or infinity, a subnormal to flush: lane by lane)
    if base == "fma":
      out = _fma_columns(*xs)
    elif base == "div" and (xs[1] == 0).any():
      out = None
    else:   # (the double result of finite f32 operands is finite: only the cast overflows)
      exact = _ARITH[base](xs[0], xs[1])
      out = exact.astype(np.float32) if np.abs(exact).max() < _ROUNDS_TO_INF else None
    if out is None:
      return None   # (an overflow, a zero divisor: the lane function says)
    out_bits = out.view(np.uint32)
    if ftz:
      magnitude = out_bits & _MAGNITUDE
      if (magnitude == 0x00800000).any():
        return None   # (it may have rounded up from below: the exact function says)
      out_bits = np.where(magnitude < 0x00800000, out_bits & np.uint32(_SIGN), out_bits)
    return out_bits.tolist()
  return run


def _subnormal(bits, exp_mask, magnitude_mask):
  """Which of the bit patterns ``bits`` are subnormal (exponent field zero, not zero)."""
  return ((bits & exp_mask) == 0) & ((bits & magnitude_mask) != 0)


def on_lists(form, *lists):
  """``form`` (a ``lanes_form``, or None) on operand lists (one value per lane): the
  results, or None where there is no form, it declines, or a value is not a known
  int (``shfl``'s undefined: the lane function says where its bits are used)."""
  if form is None or set(map(type, itertools.chain.from_iterable(lists))) != {int}:
    return None
  return form(ints_array(lists))   # ([operand, lane]: one call for them all)


def _fma_columns(a, b, c):
  """``floats_f32._fma`` element-wise: float32 results, or None where a sum is not
  finite."""
  p = a * b
  s = p + c
  if not np.abs(s).max() < _ROUNDS_TO_INF:
    return None   # (an overflow; a sum that is not finite fails the test too)
  bv = s - p   # (TwoSum, as _fma)
  e = (p - (s - bv)) + (c - bv)
  out = s.astype(np.float32)
  d = out.astype(np.float64)
  near = (d != s) & (e != 0)
  if not near.any():
    return out
  out_bits = out.view(np.uint32)
  step = np.where(np.abs(s) > np.abs(d), 1, -1).astype(np.int64)
  toward = (out_bits.astype(np.int64) + step).astype(np.uint32)
  n = toward.view(np.float32).astype(np.float64)
  half = (s - d) == (n - s)
  take = near & half & ((e > 0) == (n > d))
  return np.where(take, toward, out_bits).view(np.float32)


# 16-bit float types: (NumPy type, exponent field mask, smallest normal's bits)
_HALVES = {"f16": (np.float16, 0x7C00, 0x0400), "bf16": (ml_dtypes.bfloat16, 0x7F80, 0x0080)}


def _half_form(base, mods):
  """``lanes_form`` for f16 / bf16 (scalar or packed) add, sub, mul rounded to nearest."""
  t = mods[-1]
  lane_t = t[:-2] if t.endswith("x2") else t
  if lane_t not in _HALVES or base not in ("add", "sub", "mul") or \
     not set(mods[:-1]) <= {"rn", "ftz"}:
    return None
  ftype, exp_mask, min_normal = _HALVES[lane_t]
  parts, ftz = 2 if t != lane_t else 1, "ftz" in mods

  def run(operands):
    # [operand][part, lane]: the low half is part 0
    halves = [np.stack([(c >> np.uint64(16 * i)) & np.uint64(0xFFFF) for i in range(parts)])
              .astype(np.uint16) for c in operands]
    if any(_subnormal(h, exp_mask, 0x7FFF).any() or ((h & exp_mask) == exp_mask).any()
           for h in halves):
      return None   # (a subnormal, an infinity or a NaN: lane by lane)
    x, y = (h.view(ftype).astype(np.float64) for h in halves)
    with np.errstate(over="ignore"):
      out = _ARITH[base](x, y).astype(ftype).view(np.uint16)
    if ((out & exp_mask) == exp_mask).any() or _subnormal(out, exp_mask, 0x7FFF).any() or \
       (ftz and ((out & 0x7FFF) == min_normal).any()):
      return None   # (an overflow, a subnormal result: lane by lane)
    words = out.astype(np.uint64)
    if parts == 2:
      words = words[0] | (words[1] << np.uint64(16))
    else:
      words = words[0]
    return words.tolist()
  return run
