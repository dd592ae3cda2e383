"""f32 arithmetic rounded to nearest at the speed of Python floats, exact all the same.

``floats`` computes every operation on exact rationals and rounds once; for f32 in
round-to-nearest-even this module gives the same bit patterns through IEEE doubles:

* ``add``, ``sub``, ``mul``, ``div`` of two f32 values: the double result, rounded to
  f32.  Rounding twice (to 53 bits, then to 24) is the same as rounding once for these
  four operations because 53 >= 2 * 24 + 2 (the classical double-rounding result for
  +, -, *, / and sqrt; a product of two f32 is even exact in a double);
* ``fma``: the product is exact in a double; the sum is a double ``s`` plus its exact
  error ``e`` (TwoSum); ``s`` rounded to f32 is the correct rounding of ``s + e`` unless
  ``s`` lies exactly half-way between two f32 values, where the sign of ``e`` decides;
* ``min`` / ``max``: compared as doubles (each f32 value is one exactly).

Whatever these paths do not cover (a NaN, an infinity in an ``fma``, a division by
zero, ``.ftz`` at the normal boundary, +0 against -0) is handed to ``floats``' exact
function, which runs it or refuses it by name as before.  test_float_ops and
test_opcode_table compare both paths.

``lanes_form`` is the warp form (``program.Program.vcode``) of the same operations: the
lanes' operands as NumPy columns, the same double arithmetic and the same rounding (a
C cast, NumPy's ``astype``), TwoSum element-wise for ``fma``; where any lane is a case
the lane function hands on (a NaN or infinity, a zero divisor or two zeros, a
subnormal under ``.ftz``, an overflow) it returns None and the caller runs every lane
through the lane function.  test_float_ops compares the two.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["fast_arith", "fast_minmax", "lanes_form", "on_lists", "value", "to_bits"]

_F32, _U32 = struct.Struct("<f"), struct.Struct("<I")
_SIGN, _MIN_NORMAL, _INF = 0x80000000, 0x00800000, 0x7F800000


def _value(bits):
  return _F32.unpack(_U32.pack(bits))[0]


def _bits(x):
  """``x`` (a double) rounded to the nearest f32, ties to even (a C cast), as bits."""
  try:
    return _U32.unpack(_F32.pack(x))[0]
  except OverflowError:   # (beyond the largest f32 after rounding: infinity)
    return _INF | (_SIGN if x < 0 else 0)


def _fma(a, b, c):
  """The f32 bits of a * b + c rounded once, or None (an infinity or NaN on the way)."""
  p = a * b
  s = p + c
  if s - s != 0 or p - p != 0:   # (inf or NaN)
    return None
  bv = s - p   # TwoSum (Knuth): s + e == p + c exactly
  e = (p - (s - bv)) + (c - bv)
  out = _bits(s)
  d = _value(out)
  if d == s or e == 0:
    return out
  toward = out + 1 if (abs(s) > abs(d)) else out - 1   # the other f32 around s
  n = _value(toward)
  if s - d != n - s:   # s is not half-way: s and s + e round alike
    return out
  return toward if (e > 0) == (n > d) else out


def fast_arith(base, ftz, flush, exact):
  """The f32 lane function of ``base`` (add, sub, mul, fma, div) rounded to nearest:
  ``flush`` the inputs' ``.ftz`` flush, ``exact`` the exact function for what the
  fast path does not cover."""
  def run(*args):
    xs = [_value(flush(a)) for a in args]
    if base == "fma":
      out = _fma(*xs)
    else:
      try:
        r = {"add": lambda: xs[0] + xs[1], "sub": lambda: xs[0] - xs[1],
             "mul": lambda: xs[0] * xs[1], "div": lambda: xs[0] / xs[1]}[base]()
      except ZeroDivisionError:
        return exact(*args)
      out = None if r != r else _bits(r)
    if out is None:
      return exact(*args)
    if ftz and out & ~_SIGN < _MIN_NORMAL and out & ~_SIGN:
      return out & _SIGN                 # a subnormal result: flushed
    if ftz and out & ~_SIGN == _MIN_NORMAL:
      return exact(*args)                # (it may have rounded up from below: exact says)
    return out
  return run


def fast_minmax(base, flush, exact):
  """f32 ``min`` / ``max`` of two patterns (after ``flush``): the smaller / larger
  operand's bits; NaNs and two zeros go to ``exact``."""
  want_min = base == "min"

  def run(a, b):
    fa, fb = _value(flush(a)), _value(flush(b))
    if fa != fa or fb != fb or (fa == 0 and fb == 0):
      return exact(a, b)
    return flush(a) if (fa <= fb) == want_min else flush(b)
  return run


value, to_bits = _value, _bits   # (for floats' ex2: a double from f32 bits and back)

_EXP = np.uint32(0x7F800000)
_MAGNITUDE = np.uint32(0x7FFFFFFF)
_ARITH = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


def lanes_form(base, mods):
  """The warp form of f32 ``base`` with qualifiers ``mods`` (those ``floats.float_op``
  accepted): uint64 columns of the operands' bit patterns (one element per lane) ->
  the results' bit patterns (a list), or None where a lane needs the lane function
  (module doc).  None for an operation without one (only add, sub, mul, div, fma
  rounded to nearest, and min / max, have one)."""
  quals = set(mods) - {"f32", "ftz"}
  if base in _ARITH or base == "fma":
    if not quals <= {"rn"}:
      return None
  elif base not in ("min", "max") or not quals <= {"NaN"}:
    return None
  ftz = "ftz" in mods

  def run(*columns):
    bits = [(c & 0xFFFFFFFF).astype(np.uint32) for c in columns]
    xs = [b.view(np.float32).astype(np.float64) for b in bits]
    if not all(np.isfinite(x).all() for x in xs) or \
       (ftz and any((((b & _EXP) == 0) & ((b & _MAGNITUDE) != 0)).any() for b in bits)):
      return None   # (a NaN or infinity, a subnormal to flush: lane by lane)
    if base in ("min", "max"):
      a, b = xs
      if ((a == 0) & (b == 0)).any():
        return None
      pick_a = (a <= b) if base == "min" else ~(a <= b)   # (as fast_minmax picks)
      return np.where(pick_a, bits[0], bits[1]).tolist()
    if base == "fma":
      out = _fma_columns(*xs)
    else:
      if base == "div" and (xs[1] == 0).any():
        return None
      with np.errstate(over="ignore"):
        out = _ARITH[base](xs[0], xs[1]).astype(np.float32)
    if out is None or not np.isfinite(out).all():
      return None   # (an overflow: the lane function says how it rounds)
    out_bits = out.view(np.uint32)
    if ftz:
      magnitude = out_bits & _MAGNITUDE
      if (magnitude == 0x00800000).any():
        return None   # (it may have rounded up from below: the exact function says)
      out_bits = np.where(magnitude < 0x00800000, out_bits & np.uint32(_SIGN), out_bits)
    return out_bits.tolist()
  return run


def on_lists(form, *lists):
  """``form`` (a ``lanes_form``, or None) on operand lists (one value per lane): the
  results, or None where there is no form, it declines, or a value is not a known
  int (``shfl``'s undefined: the lane function says where its bits are used)."""
  if form is None or not all(type(v) is int for values in lists for v in values):
    return None
  return form(*(np.array(values, np.uint64) for values in lists))


def _fma_columns(a, b, c):
  """``_fma`` element-wise: float32 results, or None where a sum is not finite."""
  p = a * b
  s = p + c
  if not np.isfinite(s).all():
    return None
  bv = s - p   # (TwoSum, as _fma)
  e = (p - (s - bv)) + (c - bv)
  with np.errstate(over="ignore"):
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
