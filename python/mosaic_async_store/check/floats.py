"""Floating-point arithmetic of the PTX checker: exact, or refused by name.

Every operation is computed on bit patterns with exact rational arithmetic
(``fractions.Fraction``) and rounded once to the destination format, in the
rounding mode the instruction names (``.rn`` by default; ``.rz``, ``.rm``,
``.rp``; a ``mul`` and an ``add`` / ``sub`` without one may also be fused by the
code generator: contraction.py).  Formats: f32, f16, bf16, and as conversion targets the 8-bit
e4m3 / e5m2 (OCP FP8; e4m3 has no infinity, its NaN is S.1111.111).

What runs (and each packed ``x2`` form of f16 / bf16 / f32 (sm_100a's ``.f32x2`` in a
64-bit register), lane by lane; the low
half is the first lane):

* ``add``, ``sub``, ``mul``, ``fma`` (f32, f16, bf16; ``.ftz`` on f32 and f16
  flushes subnormal inputs and results to a zero of the same sign, PTX ISA
  "subnormal numbers");
* ``neg``, ``abs`` (sign-bit operations; ``.ftz`` flushes first);
* ``div`` (f32, with a rounding mode: the exact quotient rounded once);
* (``floats_approx``, on top of this module: the ``.approx`` functions ``rcp``,
  ``rsqrt``, ``ex2``, ``lg2``, ``tanh``, ``sin``, ``cos``, whose error the ISA bounds,
  and ``rcp`` with a rounding mode);
* ``setp``'s comparisons of f32 (``float_compare``: the ISA's ordered and unordered
  comparisons, ``num``, ``nan``);
* ``min``, ``max`` (PTX ISA min/max: a NaN operand yields the other operand,
  two NaNs the canonical NaN; with ``.NaN`` any NaN operand yields the canonical
  NaN; ``.ftz`` as above);
* ``cvt`` between float types (``floats_cvt``: which ones run; each rounds by
  ``encode`` here);
* ``red.add`` / ``atom.add`` of f32, f16, bf16, f16x2, bf16x2 (``reduce_add``): f32
  flushes subnormals on global memory, not on shared memory (PTX ISA, red / atom).

Refused at run time (``NotImplementedError``): an arithmetic result that is NaN
(the ISA does not fix its bit pattern), ``min``/``max`` of two zeros of
different signs (the ISA does not order them), an ``.ftz`` result that rounds up
from the subnormal range to the smallest normal (whether it is flushed is not
specified).  Refused when the kernel is parsed: every other type, qualifier or
opcode (``.sat``, ``.relu``, f64, ``xorsign``, ``cvt`` between floats and integers,
...).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from fractions import Fraction

from mosaic_async_store.check import floats_f32

__all__ = ["FLOAT_COMPARISONS", "FLOAT_OPS", "FLOAT_TYPE", "FORMATS", "Format",
           "float_compare", "float_op", "packed_lanes", "reduce_add"]

# A floating-point type qualifier: f16, f32, f64, bf16, f16x2, bf16x2, tf32, e4m3x2, ...
FLOAT_TYPE = re.compile(r"^(b?f\d|tf\d|e\dm\d)")

FLOAT_OPS = ("add", "sub", "mul", "fma", "neg", "abs", "min", "max", "div")
_ROUNDING = ("rn", "rz", "rm", "rp")


@dataclasses.dataclass(frozen=True)
class Format:
  """A binary floating-point format: exponent and mantissa widths; ``finite_only``:
  no infinities, NaN is the all-ones pattern (e4m3)."""

  exp_bits: int
  man_bits: int
  finite_only: bool = False

  @property
  def bits(self) -> int:
    return 1 + self.exp_bits + self.man_bits

  @property
  def bias(self) -> int:
    return (1 << (self.exp_bits - 1)) - 1

  @property
  def max_finite(self) -> int:
    """The bit pattern of the largest finite value."""
    top = (1 << (self.exp_bits + self.man_bits)) - 1
    return top - 1 if self.finite_only else top - (1 << self.man_bits)

  @property
  def canonical_nan(self) -> int:
    return (1 << (self.exp_bits + self.man_bits)) - 1   # e.g. 0x7FFFFFFF for f32


FORMATS = {"f32": Format(8, 23), "f16": Format(5, 10), "bf16": Format(8, 7),
           "e4m3": Format(4, 3, finite_only=True), "e5m2": Format(5, 2)}
NAN = "nan"


def decode(fmt: Format, bits: int):
  """NAN, or (sign, value) with value a Fraction or None for an infinity."""
  sign = bits >> (fmt.bits - 1) & 1
  e = bits >> fmt.man_bits & ((1 << fmt.exp_bits) - 1)
  m = bits & ((1 << fmt.man_bits) - 1)
  if fmt.finite_only and e == (1 << fmt.exp_bits) - 1 and m == (1 << fmt.man_bits) - 1:
    return NAN
  if not fmt.finite_only and e == (1 << fmt.exp_bits) - 1:
    return NAN if m else (sign, None)
  mag = Fraction(m, 1 << fmt.man_bits) * Fraction(2) ** (1 - fmt.bias) if e == 0 else \
      Fraction((1 << fmt.man_bits) + m, 1 << fmt.man_bits) * Fraction(2) ** (e - fmt.bias)
  return sign, mag


def _subnormal(fmt: Format, bits: int) -> bool:
  return bits >> fmt.man_bits & ((1 << fmt.exp_bits) - 1) == 0 and bits & ((1 << fmt.man_bits) - 1)


def encode(fmt: Format, sign: int, mag, mode: str = "rn", satfinite: bool = False) -> int:
  """The bit pattern of ``(-1)^sign * mag`` (mag: a Fraction >= 0, or None for an
  infinity) rounded to ``fmt`` in ``mode``."""
  s = sign << (fmt.bits - 1)
  if mag is None:
    if satfinite or fmt.finite_only:
      return s | fmt.max_finite
    return s | ((1 << fmt.exp_bits) - 1) << fmt.man_bits
  if mag == 0:
    return s
  e = mag.numerator.bit_length() - mag.denominator.bit_length()   # 2^e <= mag < 2^(e+1)
  if Fraction(2) ** e > mag:
    e -= 1
  e = max(e, 1 - fmt.bias)                                         # subnormals: one scale
  scaled = mag / Fraction(2) ** (e - fmt.man_bits)
  n, rest = divmod(scaled.numerator, scaled.denominator)
  rest = Fraction(rest, scaled.denominator)
  up = {"rn": rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n & 1),
        "rz": False, "rm": bool(rest) and sign == 1, "rp": bool(rest) and sign == 0}[mode]
  n += up
  if n == 1 << (fmt.man_bits + 1):
    n, e = n >> 1, e + 1
  if n < 1 << fmt.man_bits:                                        # subnormal (or zero)
    return s | n
  biased = e + fmt.bias
  pattern = biased << fmt.man_bits | (n - (1 << fmt.man_bits))
  if pattern > fmt.max_finite:                                     # overflow
    to_inf = {"rn": True, "rz": False, "rm": sign == 1, "rp": sign == 0}[mode]
    return s | (fmt.max_finite if satfinite or fmt.finite_only or not to_inf
                else ((1 << fmt.exp_bits) - 1) << fmt.man_bits)
  return s | pattern


def _add(x, y, mode):
  (sx, vx), (sy, vy) = x, y
  if vx is None or vy is None:
    if vx is None and vy is None and sx != sy:
      return NAN
    return (sx, None) if vx is None else (sy, None)
  total = (-vx if sx else vx) + (-vy if sy else vy)
  if total == 0:   # exact zero: the sign of equal-signed zeros, else +0 (-0 rounding down)
    return (sx if sx == sy and vx == 0 and vy == 0 else int(mode == "rm")), Fraction(0)
  return int(total < 0), abs(total)


def _mul(x, y):
  (sx, vx), (sy, vy) = x, y
  if (vx is None and vy == 0) or (vy is None and vx == 0):
    return NAN
  return sx ^ sy, None if vx is None or vy is None else vx * vy


def _arith(base, xs, mode):
  if NAN in xs:
    return NAN
  if base == "add":
    return _add(xs[0], xs[1], mode)
  if base == "sub":
    return _add(xs[0], (1 - xs[1][0], xs[1][1]), mode)
  if base == "mul":
    return _mul(xs[0], xs[1])
  if base == "div":
    return _div(xs[0], xs[1])
  p = _mul(xs[0], xs[1])   # fma: the exact product, then one rounding of the sum
  return NAN if p == NAN else _add(p, xs[2], mode)


def _div(x, y):
  """The exact quotient (IEEE 754 division's special cases: 0/0 and inf/inf are NaN,
  x/0 and inf/y are infinities, x/inf is a zero)."""
  (sx, vx), (sy, vy) = x, y
  if (vx is None and vy is None) or (vx == 0 and vy == 0):
    return NAN
  if vx is None or vy == 0:
    return sx ^ sy, None
  return sx ^ sy, Fraction(0) if vy is None else vx / vy


def _lane_op(base, fmt, mods, opcode):
  """(lane bit patterns) -> lane bit pattern of one ``base`` operation."""
  ftz = "ftz" in mods
  mode = next((m for m in mods if m in _ROUNDING), "rn")
  def flush(b):
    return b & (1 << (fmt.bits - 1)) if ftz and _subnormal(fmt, b) else b
  sign_bit = 1 << (fmt.bits - 1)
  if base == "neg":
    return lambda a: flush(a) ^ sign_bit
  if base == "abs":
    return lambda a: flush(a) & ~sign_bit
  if base in ("min", "max"):
    nan_wins = "NaN" in mods
    def minmax(a, b):
      a, b = flush(a), flush(b)
      x, y = decode(fmt, a), decode(fmt, b)
      if NAN in (x, y):
        if nan_wins or x == y:
          return fmt.canonical_nan
        return b if x == NAN else a
      if x[1] == 0 and y[1] == 0 and x[0] != y[0]:
        raise NotImplementedError(f"{opcode} of +0 and -0 (the ISA does not order them)")
      vx = None if x[1] is None else (-x[1] if x[0] else x[1])
      vy = None if y[1] is None else (-y[1] if y[0] else y[1])
      inf = Fraction(1 << 200)
      vx = (-inf if x[0] else inf) if vx is None else vx
      vy = (-inf if y[0] else inf) if vy is None else vy
      return a if (vx <= vy) == (base == "min") else b
    if fmt == FORMATS["f32"]:
      return floats_f32.fast_minmax(base, flush, minmax)
    return minmax

  def run(*args):
    r = _arith(base, [decode(fmt, flush(a)) for a in args], mode)
    if r == NAN:
      raise NotImplementedError(f"{opcode} with a NaN result (its bit pattern is not "
                                "modelled)")
    out = encode(fmt, r[0], r[1], mode)
    if ftz and _subnormal(fmt, out):
      return out & sign_bit
    if ftz and r[1] is not None and out & ~sign_bit == 1 << fmt.man_bits and \
       r[1] < Fraction(2) ** (1 - fmt.bias):
      raise NotImplementedError(f"{opcode}: a subnormal result rounded up to the smallest "
                                "normal (whether .ftz flushes it is not specified)")
    return out
  if fmt == FORMATS["f32"] and mode == "rn" and base in ("add", "sub", "mul", "fma", "div"):
    return floats_f32.fast_arith(base, ftz, flush, run)   # (the same bits, faster)
  return run


def packed_lanes(fn, lanes, lane_bits):
  """A lane function applied to each ``lane_bits``-wide lane of packed operands."""
  if lanes == 1:
    return lambda *args: fn(*(a & ((1 << lane_bits) - 1) for a in args))
  mask = (1 << lane_bits) - 1
  return lambda *args: sum(fn(*((a >> (lane_bits * i)) & mask for a in args))
                           << (lane_bits * i) for i in range(lanes))


def float_op(base: str, mods: list[str], opcode: str):
  """The function (bit patterns) -> bit pattern of a floating-point ``opcode``, or
  NotImplementedError naming it when the checker does not run it exactly."""
  t = mods[-1] if mods else ""
  lane_t, lanes = (t[:-2], 2) if t in ("f16x2", "bf16x2", "f32x2") else (t, 1)
  fmt = FORMATS.get(lane_t) if lane_t in ("f32", "f16", "bf16") else None
  allowed = {"ftz"} if lane_t in ("f32", "f16") else set()
  if base == "div" and t != "f32":
    fmt = None   # (div.rn.f32 exactly; no f16 / bf16 forms)
  if base in ("add", "sub", "mul", "fma", "div"):
    allowed |= set(_ROUNDING)
  if base in ("min", "max"):
    allowed |= {"NaN"}
  rounding = [m for m in mods[:-1] if m in _ROUNDING]
  if fmt is None or base not in FLOAT_OPS or not set(mods[:-1]) <= allowed or \
     len(rounding) > 1 or (base in ("fma", "div") and not rounding):
    raise NotImplementedError(
        f"opcode {opcode} (the checker runs f32/f16/bf16 and f16x2/bf16x2/f32x2 add, sub, mul, "
        "fma with a rounding mode, neg, abs, min, max{.NaN}, with .ftz on f32/f16, "
        "and f32 div with a rounding mode; floats_approx.float_function: rcp and the "
        ".approx functions)")
  return packed_lanes(_lane_op(base, fmt, mods[:-1], opcode), lanes, fmt.bits)


# setp's float comparisons (PTX ISA, setp, Floating Point Notes): ordered ones are False
# with a NaN operand, unordered ones (a trailing u) True; num / nan test for NaNs.
FLOAT_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu",
                     "geu", "num", "nan")
_ORDERED = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y, "lt": lambda x, y: x < y,
            "le": lambda x, y: x <= y, "gt": lambda x, y: x > y, "ge": lambda x, y: x >= y}


def float_compare(mods: list[str], opcode: str, nsrc: int):
  """(test, BoolOp or None) of ``setp.CmpOp{.BoolOp}{.ftz}.f32`` (``mods``: its
  qualifiers; ``nsrc``: its source operands, 3 with BoolOp's c): ``test(a, b)`` -> 0 / 1
  compares two bit patterns; ``.ftz``: subnormal inputs are zeros of their sign
  ("setp.ftz.dtype.f32 flushes subnormal inputs to sign-preserving zero").  Other types
  and forms: NotImplementedError naming the opcode."""
  cmp, quals = mods[0], mods[1:-1]
  boolops = [m for m in quals if m in ("and", "or", "xor")]
  if mods[-1] != "f32" or cmp not in FLOAT_COMPARISONS or len(boolops) > 1 or \
     not set(quals) <= {"and", "or", "xor", "ftz"} or len(set(quals)) != len(quals) or \
     nsrc != (3 if boolops else 2):
    raise NotImplementedError(
        f"opcode {opcode} (the checker runs setp.CmpOp{{.BoolOp}}{{.ftz}}.f32 with CmpOp one "
        f"of {', '.join(FLOAT_COMPARISONS)}; f16 / bf16 / f64 comparisons are not run)")
  ftz = "ftz" in quals
  fmt, sign_bit = FORMATS["f32"], 1 << 31
  unordered, ordered = cmp.endswith("u"), _ORDERED.get(cmp.rstrip("u"))

  def compare(a, b):
    a, b = a & 0xFFFFFFFF, b & 0xFFFFFFFF   # (the register's low 32 bits)
    if ftz:
      a, b = (v & sign_bit if _subnormal(fmt, v) else v for v in (a, b))
    x, y = floats_f32.value(a), floats_f32.value(b)
    if x != x or y != y:
      return int(cmp == "nan" or unordered)
    return int(cmp == "num" or (cmp != "nan" and ordered(x, y)))
  return compare, (boolops[0] if boolops else None)


def reduce_add(t: str, old: int, new: int, *, shared: bool) -> int:
  """The bit pattern ``red.add`` / ``atom.add`` of float type ``t`` leaves in memory
  (``shared``: the location is in shared memory, whatever the address's spelling).

  PTX ISA, red / atom: "The floating-point operation .add operation rounds to nearest
  even.  Current implementation of red.add.f32 on global memory flushes subnormal
  inputs and results to sign-preserving zero; whereas red.add.f32 on shared memory
  supports subnormal inputs and results and doesn't flush them to zero" (atom.add.f32
  the same); the 16-bit forms need ``.noftz``, which "preserves subnormal inputs and
  results".  So: one rounding to nearest even, flushed (``.ftz``) for f32 outside
  shared memory only.  A NaN result is refused (its bit pattern is not fixed)."""
  return _reduce_fn(t, t == "f32" and not shared)(old, new)


@functools.lru_cache(maxsize=None)
def _reduce_fn(t, ftz):
  return float_op("add", ["rn", "ftz", t] if ftz else ["rn", t],
                  f"red.add.{t} ({'global' if ftz else 'shared'} memory)")
