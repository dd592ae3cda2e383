"""Float ``mul`` / ``add`` / ``sub`` without a rounding modifier, which the code
generator may contract into one ``fma``.

PTX ISA, add / sub / mul (floating point): "An add instruction with no rounding
modifier may be optimized aggressively by the code generator. In particular,
mul/add sequences with no rounding modifiers may be optimized to use
fused-multiply-add instructions on the target device" (and the same for mul/add
and mul/sub sequences).  So where the product of an unrounded ``mul`` reaches an
unrounded ``add`` / ``sub``, the ISA allows two results: the sum of the rounded
product, and the fused one (one rounding).  The checker computes both; where they
agree it goes on, where they differ it runs the kernel under each legal result, as
the schedule chooses: the code generator decides once per pair of instructions (one
binary runs every thread and every iteration), so a schedule fixes the choice per
pair (the ``add`` and its ``mul``) for its whole run: schedule 0 leaves every pair
unfused, schedule 1 fuses every pair, the others choose at random, per pair.  So the
CI schedules (0, 1, 2) cover both results, and a kernel whose protocol depends on the
result (a branch on it into a race) is reported in the schedule that takes it.  A
rounding modifier (``.rn``) on either instruction forbids the contraction and fixes
the result.  Where the two instructions' ``.ftz`` differ, the fused result is not
defined (one fma cannot both flush and not flush): refused by name.

A thread remembers the products of its unrounded ``mul``s by value
(``Thread.products``: (type, product) -> (a, b, qualifiers, instruction)), so a
product that reaches the ``add`` through a ``mov`` is still seen; an unrelated
value equal to a product can only add a result the schedule may choose (the fused
one of a pair the code does not have), never drop the one the code computes.
"""

from __future__ import annotations

import weakref

from mosaic_async_store.check.floats import float_op
from mosaic_async_store.check.float_columns import on_lists
from mosaic_async_store.check.outcomes import FALLBACK
from mosaic_async_store.check.program import lanes_getter

__all__ = ["unrounded_mul", "unrounded_sum", "fused_here", "ROUNDING"]

ROUNDING = ("rn", "rz", "rm", "rp")
# Each run's choices (its ``schedule.Schedule`` -> {(add, mul instruction): fused}).
_CHOICES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_SIGNS = {"f32": 0x80000000, "f16": 0x8000, "bf16": 0x8000, "f16x2": 0x80008000,
          "bf16x2": 0x80008000, "f32x2": 0x8000000080000000}


def unrounded_mul(k, ins, fn, put, args, vec=None):
  """``mul`` without a rounding modifier: ``fn`` (float_op's) and remember the product.
  ``vec``: the operation's ``float_columns.lanes_form`` (its warp form's), or None."""
  pc, t, quals = len(k.program.code), ins.t, _qualifiers(ins)
  mask = (1 << ins.bits) - 1
  a, b = args
  def mul(th):
    x, y = a(th), b(th)
    product = fn(x, y) & mask
    th.products[(t, product)] = (x, y, quals, pc)
    put(th, product)
  if vec is not None:
    a_lanes, b_lanes = lanes_getter(a), lanes_getter(b)
    def mul_lanes(lanes):   # the products at once (else lane by lane)
      xs, ys = a_lanes(lanes), b_lanes(lanes)
      out = on_lists(vec, xs, ys)
      if out is None:
        return FALLBACK
      for th, x, y, product in zip(lanes, xs, ys, out):
        th.products[(t, product)] = (x, y, quals, pc)
        put(th, product)
    mul.lanes, mul_lanes.wide = mul_lanes, True   # (each lane's own: lockstep.piece)
  return mul


def unrounded_sum(k, ins, fn, put, args, vec=None):
  """``add`` / ``sub`` without a rounding modifier: the rounded result, or where a
  remembered product makes the fused one differ, the one the schedule chooses for
  this pair of instructions (``fused_here``).  ``vec``: as ``unrounded_mul``'s."""
  program, t, quals, sub = k.program, ins.t, _qualifiers(ins), ins.base == "sub"
  fused = float_op("fma", ["rn", *quals, t], f"fma.rn.{t}")
  sign, mask = _SIGNS[t], (1 << ins.bits) - 1
  opcode, pc = ins.opcode, len(program.code)
  a, b = args
  def fuse(th, x, y, result):   # the result, given the rounded one
    products = th.products
    for first, value, other in ((True, x, y), (False, y, x)):
      rec = products.get((t, value))
      if rec is None:
        continue
      p, q, mul_quals, mul_pc = rec
      if mul_quals == quals and _chosen(k.sched, pc, mul_pc) is False:
        continue   # (this run leaves the pair unfused: the rounded result stands)
      if sub:   # p*q - other = fma(p, q, -other); other - p*q = fma(-p, q, other)
        alt = fused(p, q, other ^ sign) if first else fused(p ^ sign, q, other)
      else:
        alt = fused(p, q, other)
      if mul_quals != quals:   # (which fma it would be is not defined: refused as such)
        raise NotImplementedError(
            f"`{opcode}` (PTX line {program.lines[pc]}) takes the product of "
            f"`{program.texts[mul_pc]}` (PTX line {program.lines[mul_pc]}), neither with a "
            "rounding modifier: the code generator may contract them into one fma (PTX "
            "ISA, add/sub/mul: 'mul/add sequences with no rounding modifiers may be "
            "optimized to use fused-multiply-add instructions'), and its qualifiers differ "
            f"from the mul's ({'.'.join(mul_quals) or 'none'}), so the fused result is not "
            "defined; give either instruction a rounding modifier (.rn) to fix the result")
      if alt & mask != result and fused_here(k.sched, pc, mul_pc):
        return alt & mask
    return result
  def add(th):
    x, y = a(th), b(th)
    put(th, fuse(th, x, y, fn(x, y) & mask))
  if vec is not None:
    a_lanes, b_lanes = lanes_getter(a), lanes_getter(b)
    def add_lanes(lanes):   # the rounded sums at once; a lane with a product, its own way
      xs, ys = a_lanes(lanes), b_lanes(lanes)
      out = on_lists(vec, xs, ys)
      if out is None:
        return FALLBACK
      held = [i for i, (th, x, y) in enumerate(zip(lanes, xs, ys))   # (lanes whose
              if (t, x) in th.products or (t, y) in th.products]      # operand is a product)
      if any(rec is not None and rec[2] != quals for i in held
             for rec in (lanes[i].products.get((t, xs[i])), lanes[i].products.get((t, ys[i])))):
        return FALLBACK   # (lane by lane: a refusal names its lane)
      for i in held:   # (in lane order: a random schedule's draws keep theirs)
        out[i] = fuse(lanes[i], xs[i], ys[i], out[i])
      put.lanes(lanes, out)
    add.lanes, add_lanes.wide = add_lanes, True
  return add


def fused_here(sched, add_pc, mul_pc) -> bool:
  """Whether the run of ``sched`` fuses the ``add`` at ``add_pc`` with the ``mul`` at
  ``mul_pc``: never in schedule 0, always in schedule 1, else a seeded coin flip made
  once per pair and kept for the run."""
  chosen = _chosen(sched, add_pc, mul_pc)
  if chosen is None:
    chosen = _CHOICES.setdefault(sched, {})[(add_pc, mul_pc)] = sched.rng.random() < 0.5
  return chosen


def _chosen(sched, add_pc, mul_pc):
  """``fused_here``'s answer where the run has made it (schedules 0 and 1, or a pair
  already drawn), else None (drawing it is ``fused_here``'s: the draws keep their
  order)."""
  if sched.seed in (0, 1):
    return sched.seed == 1
  return _CHOICES.get(sched, {}).get((add_pc, mul_pc))


def _qualifiers(ins):
  """The qualifiers besides the type that change a result (``.ftz``)."""
  return tuple(m for m in ins.mods[:-1] if m == "ftz")
