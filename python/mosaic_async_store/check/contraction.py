"""Float ``mul`` / ``add`` / ``sub`` without a rounding modifier, which the code
generator may contract into one ``fma``.

PTX ISA, add / sub / mul (floating point): "An add instruction with no rounding
modifier may be optimized aggressively by the code generator. In particular,
mul/add sequences with no rounding modifiers may be optimized to use
fused-multiply-add instructions on the target device" (and the same for mul/add
and mul/sub sequences).  So where the product of an unrounded ``mul`` reaches an
unrounded ``add`` / ``sub``, the ISA allows two results: the sum of the rounded
product, and the fused one (one rounding).  The checker computes both; where they
agree it goes on, where they differ it refuses the kernel (NotImplementedError,
naming both instructions and both results): it cannot say which one the device
computes, and a limit of the checker is never a finding.  A rounding modifier
(``.rn``) on either instruction forbids the contraction, and fixes the result.

A thread remembers the products of its unrounded ``mul``s by value
(``Thread.products``: (type, product) -> (a, b, qualifiers, instruction)), so a
product that reaches the ``add`` through a ``mov`` is still seen; an unrelated
value equal to a product can only make the checker refuse where both results
differ, never accept a wrong one.
"""

from __future__ import annotations

from mosaic_async_store.check.floats import float_op

__all__ = ["unrounded_mul", "unrounded_sum", "ROUNDING"]

ROUNDING = ("rn", "rz", "rm", "rp")
_SIGNS = {"f32": 0x80000000, "f16": 0x8000, "bf16": 0x8000, "f16x2": 0x80008000,
          "bf16x2": 0x80008000}


def unrounded_mul(k, ins, fn, put, args):
  """``mul`` without a rounding modifier: ``fn`` (float_op's) and remember the product."""
  pc, t, quals = len(k.program.code), ins.t, _qualifiers(ins)
  mask = (1 << ins.bits) - 1
  a, b = args
  def mul(th):
    x, y = a(th), b(th)
    product = fn(x, y) & mask
    th.products[(t, product)] = (x, y, quals, pc)
    put(th, product)
  return mul


def unrounded_sum(k, ins, fn, put, args):
  """``add`` / ``sub`` without a rounding modifier: the rounded result, after checking
  that a contraction with a remembered product would give the same bits."""
  program, t, quals, sub = k.program, ins.t, _qualifiers(ins), ins.base == "sub"
  fused = float_op("fma", ["rn", *quals, t], f"fma.rn.{t}")
  sign, mask = _SIGNS[t], (1 << ins.bits) - 1
  opcode, pc = ins.opcode, len(program.code)
  a, b = args
  def add(th):
    x, y = a(th), b(th)
    result = fn(x, y) & mask
    products = th.products
    for first, value, other in ((True, x, y), (False, y, x)):
      rec = products.get((t, value))
      if rec is None:
        continue
      p, q, mul_quals, mul_pc = rec
      if sub:   # p*q - other = fma(p, q, -other); other - p*q = fma(-p, q, other)
        alt = fused(p, q, other ^ sign) if first else fused(p ^ sign, q, other)
      else:
        alt = fused(p, q, other)
      if mul_quals != quals or alt & mask != result:
        why = (f"its qualifiers differ from the mul's ({'.'.join(mul_quals) or 'none'}), so "
               "the fused result is not defined" if mul_quals != quals else
               f"the results differ: {result:#x} rounded twice, {alt & mask:#x} fused")
        raise NotImplementedError(
            f"`{opcode}` (PTX line {program.lines[pc]}) takes the product of "
            f"`{program.texts[mul_pc]}` (PTX line {program.lines[mul_pc]}), neither with a "
            "rounding modifier: the code generator may contract them into one fma (PTX "
            "ISA, add/sub/mul: 'mul/add sequences with no rounding modifiers may be "
            f"optimized to use fused-multiply-add instructions'), and {why}; give either "
            "instruction a rounding modifier (.rn) to fix the result")
    put(th, result)
  return add


def _qualifiers(ins):
  """The qualifiers besides the type that change a result (``.ftz``)."""
  return tuple(m for m in ins.mods[:-1] if m == "ftz")
