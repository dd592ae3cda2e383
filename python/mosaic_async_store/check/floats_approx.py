"""The PTX checker's approximate float functions: one value within the ISA's bound, or
refused by name.

The ISA bounds the error of ``rcp``, ``rsqrt``, ``ex2``, ``lg2``, ``tanh``, ``sin`` and
``cos`` with ``.approx`` but fixes no value; the checker gives, for every input the ISA
bounds, the function computed in IEEE doubles by Python's ``math`` module (the C
library's, within a few double units in the last place) and rounded once to nearest in
the destination format: within half a unit in the last place of the destination plus
about 2^-50 relative, inside each bound below.  A value the ISA allows, not necessarily
a GPU's: a kernel whose protocol depends on the last bit of an approximation is not
checked for every value it may see.

========================  =============================================  ================
instruction               ISA bound (PTX ISA, per instruction)           where refused
========================  =============================================  ================
rcp.approx{.ftz}.f32      "maximum ulp error is 1 across the full        NaN input
                          range of inputs"
rsqrt.approx{.ftz}.f32    "maximum relative error ... 2^-22.9"           NaN, negative
                                                                         nonzero input
ex2.approx{.ftz}.f32      "maximum ulp error is 2 ulp from correctly     NaN input
                          rounded result"
lg2.approx{.ftz}.f32      absolute 2^-22 in (0.5, 2), else relative      NaN, negative
                          2^-22                                          nonzero input
sin/cos.approx{.ftz}.f32  absolute 2^-20.5 in [-2pi, 2pi], 2^-14.7 in    NaN, infinite,
                          [-100pi, 100pi]; beyond "no defined error      |a| > 100pi
                          guarantees"
tanh.approx.f32           relative 2^-11                                 NaN input
tanh.approx.{f16,bf16}    absolute 2^-10.987 (f16), 2^-8 (bf16)          NaN input
  and their x2 forms
ex2.approx.{f16,f16x2}    relative 2^-9.9                                NaN input, a
                                                                         subnormal result
ex2.approx.ftz.{bf16,     relative 2^-7                                  NaN input
  bf16x2}
========================  =============================================  ================

Special inputs give the ISA's tables' results (``_SPECIAL``); a NaN result is refused
everywhere (its bit pattern is not modelled).  ``.ftz`` (PTX ISA, each instruction:
"flushes subnormal inputs and results to sign-preserving zero") flushes the input, and a
result that rounds to a subnormal.  A subnormal ``tanh`` input is its own result ("The
subnormal inputs gets passed through to the output").  ``ex2.approx.f16``'s result
below the smallest normal f16 is refused: no f16 value meets a relative bound of 2^-9.9
for every such result, and the ISA says nothing of subnormal results there.

``rcp`` with a rounding modifier (``rcp.rn{.ftz}.f32`` ...: "IEEE 754 compliant
rounding") is exact: ``floats``' division of 1.0 by the operand, rounded once.
"""

from __future__ import annotations

import math
from fractions import Fraction

from mosaic_async_store.check import floats_f32
from mosaic_async_store.check.floats import FORMATS, NAN, decode, encode, float_op, packed_lanes

__all__ = ["APPROX_BASES", "float_function"]

APPROX_BASES = ("rcp", "rsqrt", "ex2", "lg2", "tanh", "sin", "cos")

_INF, _NAN = math.inf, math.nan
# Results for -inf, -0, +0, +inf (PTX ISA, each instruction's table; NaN: refused).
_SPECIAL = {"rcp": (-0.0, -_INF, _INF, 0.0), "rsqrt": (_NAN, -_INF, _INF, 0.0),
            "ex2": (0.0, 1.0, 1.0, _INF), "lg2": (_NAN, -_INF, -_INF, _INF),
            "tanh": (-1.0, -0.0, 0.0, 1.0), "sin": (_NAN, -0.0, 0.0, _NAN),
            "cos": (_NAN, 1.0, 1.0, _NAN)}
# beyond |a| <= 100 pi the ISA gives sin / cos no bound: "only best effort is provided"
_SIN_COS_RANGE = 100 * math.pi
# The forms that run: (base, lane type) -> the qualifiers allowed besides .approx
# and those required (PTX ISA syntax: ``tanh.approx.type``, ``ex2.approx.atype``,
# ``ex2.approx.ftz.btype`` with .atype f16 / f16x2, .btype bf16 / bf16x2).
_FORMS = {**{(b, "f32"): ({"ftz"}, set()) for b in APPROX_BASES if b != "tanh"},
          ("tanh", "f32"): (set(), set()), ("tanh", "f16"): (set(), set()),
          ("tanh", "bf16"): (set(), set()), ("ex2", "f16"): (set(), set()),
          ("ex2", "bf16"): ({"ftz"}, {"ftz"})}
_ROUNDING = ("rn", "rz", "rm", "rp")
_RUNS = ("rcp, rsqrt, ex2, lg2, sin, cos with .approx{.ftz}.f32; tanh.approx.f32; "
         "tanh.approx.{f16,bf16,f16x2,bf16x2}; ex2.approx.{f16,f16x2}; "
         "ex2.approx.ftz.{bf16,bf16x2}; rcp.{rn,rz,rm,rp}{.ftz}.f32")


def _refuse(opcode):
  raise NotImplementedError(f"opcode {opcode} (the checker runs {_RUNS}; the ISA's other "
                            "forms are not run)")


def _function(base, x, opcode):
  """base(x) in doubles for a finite nonzero x, or a refusal where the ISA fixes no
  value (a NaN result, sin / cos beyond 100 pi)."""
  if base in ("rsqrt", "lg2") and x < 0:
    raise NotImplementedError(f"{opcode} of a negative value ({x!r}): the result is NaN, "
                              "whose bit pattern the checker does not model")
  if base in ("sin", "cos") and abs(x) > _SIN_COS_RANGE:
    raise NotImplementedError(f"{opcode} of {x!r}: beyond [-100pi, 100pi] the ISA gives no "
                              "error bound (\"only best effort is provided\"), so no value is "
                              "the instruction's; keep the argument within 100pi")
  if base == "rcp":
    return 1.0 / x
  if base == "rsqrt":
    return 1.0 / math.sqrt(x)
  if base == "ex2":
    try:
      return math.exp2(x)
    except OverflowError:
      return _INF
  return {"lg2": math.log2, "tanh": math.tanh, "sin": math.sin, "cos": math.cos}[base](x)


def _lane(base, fmt, ftz, opcode):
  """The lane function (bit pattern -> bit pattern) of one approximate ``base`` in
  ``fmt`` (a ``floats.Format``), ``ftz``: flush subnormal inputs and results."""
  sign_bit, exp_mask = 1 << (fmt.bits - 1), ((1 << fmt.exp_bits) - 1) << fmt.man_bits
  f32 = fmt.bits == 32 and fmt.man_bits == 23
  special = _SPECIAL[base]

  def subnormal(b):
    return not b & exp_mask and b & ~sign_bit

  def to_bits(r):   # the double r rounded to nearest in fmt
    if f32:
      return floats_f32.to_bits(r)
    return encode(fmt, int(math.copysign(1.0, r) < 0),
                  None if math.isinf(r) else Fraction(abs(r)), "rn")

  def run(a):
    if ftz and subnormal(a):
      a &= sign_bit
    if base == "tanh" and subnormal(a):
      return a   # ("The subnormal inputs gets passed through to the output")
    x = floats_f32.value(a) if f32 else decode(fmt, a)
    if not f32:
      x = _NAN if x == NAN else math.copysign(_INF if x[1] is None else float(x[1]),
                                              -1.0 if x[0] else 1.0)
    if x != x:
      raise NotImplementedError(f"{opcode} of a NaN: the result is NaN, whose bit pattern "
                                "the checker does not model")
    if x == 0 or math.isinf(x):
      r = special[_special_index(x)]
      if r != r:
        raise NotImplementedError(f"{opcode} of {x!r}: the result is NaN, whose bit pattern "
                                  "the checker does not model")
    else:
      r = _function(base, x, opcode)
    out = to_bits(r)
    if subnormal(out):
      if ftz:
        return out & sign_bit
      if base == "ex2" and not f32:
        raise NotImplementedError(
            f"{opcode} of {x!r}: the result is below the smallest normal f16, where the "
            "ISA's relative bound (2^-9.9) fixes no value; keep the exponent >= -14")
    return out
  return run


def _special_index(x):
  """The index in ``_SPECIAL``'s rows of -inf, -0, +0, +inf."""
  if math.isinf(x):
    return 0 if x < 0 else 3
  return 1 if math.copysign(1.0, x) < 0 else 2


def float_function(base: str, mods: list[str], opcode: str):
  """The function (bit patterns) -> bit pattern of a float ``opcode`` (``mods``: its
  qualifiers, its type last): for ``APPROX_BASES`` this module's, applied to each lane
  of a packed form, else ``floats.float_op``'s; or NotImplementedError naming it."""
  if base not in APPROX_BASES:
    return float_op(base, mods, opcode)
  t = mods[-1] if mods else ""
  lane_t = t[:-2] if t in ("f16x2", "bf16x2") else t
  quals = mods[:-1]
  rounding = [m for m in quals if m in _ROUNDING]
  if base == "rcp" and rounding:   # IEEE 754 compliant: exact division of 1.0
    if t != "f32" or len(rounding) != 1 or not set(quals) <= set(rounding) | {"ftz"}:
      _refuse(opcode)
    div = float_op("div", [*quals, "f32"], opcode)
    return lambda a: div(0x3F800000, a & 0xFFFFFFFF)
  allowed, required = _FORMS.get((base, lane_t), (None, None))
  rest = set(quals) - {"approx"}
  if allowed is None or "approx" not in quals or len(set(quals)) != len(quals) or \
     not rest <= allowed or not required <= rest:
    _refuse(opcode)
  return packed_lanes(_lane(base, FORMATS[lane_t], "ftz" in rest, opcode), 1 + (lane_t != t),
                      FORMATS[lane_t].bits)
