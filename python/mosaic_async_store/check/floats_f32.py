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
``float_columns`` runs the same operations on a warp's lanes at once.
"""

from __future__ import annotations

import struct

__all__ = ["fast_arith", "fast_minmax", "value", "to_bits"]

_F32, _U32 = struct.Struct("<f"), struct.Struct("<I")
_SIGN, _MIN_NORMAL, _INF = 0x80000000, 0x00800000, 0x7F800000


def value(bits):
  """The f32 bit pattern ``bits`` as a double (exactly: every f32 value is one)."""
  return _F32.unpack(_U32.pack(bits))[0]


def to_bits(x):
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
  out = to_bits(s)
  d = value(out)
  if d == s or e == 0:
    return out
  toward = out + 1 if (abs(s) > abs(d)) else out - 1   # the other f32 around s
  n = value(toward)
  if s - d != n - s:   # s is not half-way: s and s + e round alike
    return out
  return toward if (e > 0) == (n > d) else out


def fast_arith(base, ftz, flush, exact):
  """The f32 lane function of ``base`` (add, sub, mul, fma, div) rounded to nearest:
  ``flush`` the inputs' ``.ftz`` flush, ``exact`` the exact function for what the
  fast path does not cover."""
  def run(*args):
    xs = [value(flush(a)) for a in args]
    if base == "fma":
      out = _fma(*xs)
    else:
      try:
        r = {"add": lambda: xs[0] + xs[1], "sub": lambda: xs[0] - xs[1],
             "mul": lambda: xs[0] * xs[1], "div": lambda: xs[0] / xs[1]}[base]()
      except ZeroDivisionError:
        return exact(*args)
      out = None if r != r else to_bits(r)
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
    fa, fb = value(flush(a)), value(flush(b))
    if fa != fa or fb != fb or (fa == 0 and fb == 0):
      return exact(a, b)
    return flush(a) if (fa <= fb) == want_min else flush(b)
  return run

