"""Floating-point arithmetic of the PTX checker: exact, or refused by name.

The checker runs f32 ``add``, ``sub`` and ``mul`` (round to nearest even, the
default ``.rn``; with or without ``.ftz``) and ``neg`` / ``abs`` (sign-bit
operations), on bit patterns, with NumPy's IEEE binary32 arithmetic, which
rounds each result once, to nearest even, as PTX's ``.rn`` does.  ``.ftz``
flushes subnormal inputs and results to a zero of the same sign (PTX ISA,
add/sub/mul: "subnormal numbers").  A result that is NaN is refused at run time
(``NotImplementedError``): the ISA does not fix the bit pattern this checker
would have to produce.  Every other floating-point type, rounding mode or
opcode (``fma``, ``min``/``max``, ``.sat``, f16/bf16/f64 and the packed x2
forms, ``cvt`` between float types) is refused when the kernel is parsed.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["FLOAT_OPS", "FLOAT_TYPE", "float_op"]

# A floating-point type qualifier: f16, f32, f64, bf16, f16x2, bf16x2, tf32, e4m3x2, ...
FLOAT_TYPE = re.compile(r"^(b?f|tf|e\d)\d")

FLOAT_OPS = ("add", "sub", "mul", "neg", "abs")
_ROUNDING = ("rn", "rz", "rm", "rp")
_SIGN, _EXP = 0x80000000, 0x7F800000


def _flush(bits: int) -> int:
  """A subnormal f32 bit pattern as the zero of its sign; others unchanged."""
  return bits & _SIGN if bits & _EXP == 0 else bits


def _f32(bits: int) -> np.float32:
  return np.array([bits & 0xFFFFFFFF], np.uint32).view(np.float32)[0]


def _bits(x: np.float32) -> int:
  return int(np.array([x], np.float32).view(np.uint32)[0])


def float_op(base: str, mods: list[str], opcode: str):
  """The function (bit patterns) -> bit pattern of a floating-point ``opcode``, or
  NotImplementedError naming it when the checker does not run it exactly."""
  t = mods[-1] if mods else ""
  extra = [m for m in mods[:-1] if m not in ("ftz", "rn")]
  if base in ("neg", "abs"):
    extra += [m for m in mods if m == "rn"]
  if t != "f32" or base not in FLOAT_OPS or extra:
    raise NotImplementedError(f"opcode {opcode} (the checker runs only f32 add/sub/mul "
                              ".rn{.ftz} and neg/abs{.ftz} exactly)")
  ftz = "ftz" in mods
  flush = _flush if ftz else (lambda b: b)
  if base == "neg":
    return lambda a: flush(a & 0xFFFFFFFF) ^ _SIGN
  if base == "abs":
    return lambda a: flush(a & 0xFFFFFFFF) & ~_SIGN & 0xFFFFFFFF
  fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[base]

  def run(a, b):
    with np.errstate(all="ignore"):
      r = fn(_f32(flush(a & 0xFFFFFFFF)), _f32(flush(b & 0xFFFFFFFF)))
    if np.isnan(r):
      raise NotImplementedError(f"{opcode} with a NaN result (its bit pattern is not "
                                "modelled)")
    return flush(_bits(r))
  return run
