"""Address steps: how each store instruction's shared-memory address is formed.

A plan holds one ``AddressStep`` per store instruction.  Each step's formula is
written once, with Python operators on the values of an ``AddressState``: on
``U32`` (per-thread NumPy integers in i32 arithmetic) it computes what the code
does, for the verifier; on lowering/target.py's ``I32`` it emits the same
arithmetic as MLIR, one arith op per operator.  Nothing here touches MLIR.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mosaic_async_store.plan.geometry import WARPGROUP_SIZE, swizzle_bytes
from mosaic_async_store.plan.register_steps import StepDefect

__all__ = ["U32", "Affine", "AddressStep", "AddressState", "IMMEDIATE_LIMIT",
           "formula_arithmetic", "U32_MASK"]

U32_MASK = (1 << 32) - 1
_I32 = (-(1 << 31), 1 << 31)
# |imm| in [reg+imm] must fit ptxas's signed 24-bit offset.
IMMEDIATE_LIMIT = 1 << 23


def formula_arithmetic(cls):
  """Class decorator: the operators the address formulas use, each made from the op
  the class's ``OPS`` table names for it (``self._with(other, op)``); a shift by 0
  is the value itself, so the emitter builds nothing for it."""
  for name, op in cls.OPS.items():
    if name in ("__lshift__", "__rshift__"):
      method = lambda self, n, _op=op: self if n == 0 else self._with(n, _op)
    else:
      method = lambda self, other, _op=op: self._with(other, _op)
    setattr(cls, name, method)
  return cls


@formula_arithmetic
class U32:
  """Per-thread NumPy integers in the emitter's i32 arithmetic (every op wraps mod
  2**32), with the operators the address formulas use.

  The formulas (``Affine.evaluate``, ``geometry.swizzle_bytes``, ``AddressStep.run``)
  are written once with Python operators and a ``constant``: on a ``U32`` they compute
  what the code does (the verifier, the planner), on lowering/target.py's ``I32`` they
  emit it, one arith op per operator.
  """

  __slots__ = ("array",)
  OPS = {"__add__": np.add, "__mul__": np.multiply, "__xor__": np.bitwise_xor,
         "__and__": np.bitwise_and, "__lshift__": np.left_shift, "__rshift__": np.right_shift}

  def __init__(self, array):
    self.array = np.asarray(array, dtype=np.int64) & U32_MASK

  def constant(self, value: int) -> "U32":
    return U32(np.full(self.array.shape, int(value), dtype=np.int64))

  def _with(self, other, op) -> "U32":
    other = other.array if isinstance(other, U32) else int(other) & U32_MASK
    return U32(op(self.array, other))


@dataclasses.dataclass(frozen=True)
class Affine:
  """``offset + sum(((tid >> shift) & mask) * scale for shift, mask, scale in terms)``."""

  offset: int
  terms: tuple[tuple[int, int, int], ...]

  def evaluate(self, tid):
    """The formula on ``tid``: a ``U32`` of thread indices, or the emitter's ``I32``."""
    out = tid.constant(self.offset)
    for shift, mask, scale in self.terms:
      out = out + ((tid >> shift) & mask) * scale
    return out


class AddressState:
  """What the address steps have formed so far, in one arithmetic (``U32`` or ``I32``).

  ``offsets[i]``: base i's swizzled byte offset from the ref's base, or None where
  base i was formed from parts and keeps no offset of its own.  ``addresses[i]``:
  base i's address, ``ref_base + offsets[i]``.  ``parts``: the high and low parts
  of split xor steps, each formed once (at its first use) and shared by every
  step that names it.  For the verifier ``ref_base`` is 0, so addresses are offsets.
  """

  def __init__(self, tid, ref_base, swizzle):
    self.tid, self.ref_base, self.swizzle = tid, ref_base, swizzle
    self.offsets: list = []
    self.addresses: list = []
    self.parts: dict = {}

  @classmethod
  def numpy(cls, swizzle) -> "AddressState":
    """The verifier's state: all 128 threads as ``U32``, the ref at offset 0."""
    tid = U32(np.arange(WARPGROUP_SIZE))
    return cls(tid, tid.constant(0), swizzle)

  def part(self, key, make):
    """The part named ``key``, made by ``make()`` the first time it is asked for."""
    if key not in self.parts:
      self.parts[key] = make()
    return self.parts[key]

  def new_base(self, offset, address) -> int:
    self.offsets.append(offset)
    self.addresses.append(address)
    return len(self.addresses) - 1


@dataclasses.dataclass(frozen=True)
class AddressStep:
  """How to get one store's address (one step per instruction, in order).

  kind "compute": evaluate ``linear`` (an Affine of the unswizzled offset) and
  swizzle it; the result becomes a new base.  kind "offset": base ``base``
  plus the immediate ``constant``.  kind "xor": base ``base``'s offset XOR
  ``constant``, a new base.

  An xor step with ``low_mask`` 0 costs an xor and an add (the ref's base plus the
  new offset).  With a ``low_mask`` m it is split: the new address is a high part,
  ``ref_base + ((offset ^ (constant & ~m)) & ~m)``, plus a low part,
  ``(offset ^ (constant & m)) & m``: the same address (the two parts share no
  bit), but each part is formed once per (base, its bits of ``constant``, m) and
  shared, so a grid of H high by L low variants costs H high parts, L low parts
  and one add per step instead of two instructions per step.  A split base keeps no
  offset, so no xor step may start from it.

  ``run`` is the step's one definition; ``apply`` runs it on NumPy (the verifier),
  ``emit`` on IR (``lowering/target.py``).
  """

  kind: str
  base: int = -1
  constant: int = 0
  linear: Affine | None = None
  low_mask: int = 0

  def run(self, state: AddressState):
    """Forms this step's new base, if it makes one, in ``state``; returns
    ``(base, immediate)``: the store's address is base ``base`` plus the immediate."""
    if self.kind == "offset":
      return self.base, self.constant
    if self.kind == "compute":
      offset = swizzle_bytes(self.linear.evaluate(state.tid), state.swizzle)
    elif not self.low_mask:
      offset = state.offsets[self.base] ^ self.constant
    else:
      return self._run_split(state), 0
    return state.new_base(offset, state.ref_base + offset), 0

  def split_parts(self) -> tuple[tuple, tuple]:
    """The names of a split step's high and low parts, ``(kind, base, its bits of
    constant, low_mask)``: steps that name a part share it (``AddressState.part``;
    ``addressing.instruction_cost`` prices each part once by the same names)."""
    high = ~self.low_mask & U32_MASK
    return (("high", self.base, self.constant & high, self.low_mask),
            ("low", self.base, self.constant & self.low_mask, self.low_mask))

  def _run_split(self, state: AddressState) -> int:
    (high_key, low_key), offset = self.split_parts(), state.offsets[self.base]

    def masked(bits, mask):   # (offset ^ bits) & mask, with no xor for bits 0
      return (offset ^ bits if bits else offset) & mask

    high_part = state.part(high_key, lambda: state.ref_base + masked(
        high_key[2], ~self.low_mask & U32_MASK))
    low_part = state.part(low_key, lambda: masked(low_key[2], self.low_mask))
    return state.new_base(None, high_part + low_part)

  def defect(self, state: AddressState) -> str | None:
    """Why this step cannot run after what ``state`` holds, or None."""
    if self.low_mask and self.kind != "xor":
      return f"splits a {self.kind} step (low_mask {self.low_mask}): only xor steps split"
    if self.kind == "compute":
      lin = self.linear
      if not isinstance(lin, Affine):
        return f"computes no affine offset: {lin!r}"
      consts = [lin.offset] + [c for term in lin.terms for c in term]
      if any(not _I32[0] <= int(c) < _I32[1] for c in consts) or \
          any(not 0 <= int(t[0]) < 32 for t in lin.terms):
        return f"uses a constant outside i32: {lin}"
      return None
    if self.kind not in ("xor", "offset"):
      return "is neither compute, xor nor offset"
    bases = len(state.addresses)
    if not 0 <= self.base < bases:
      return f"reads base {self.base}, but {bases} base(s) are formed before it"
    if self.kind == "offset":
      if not -IMMEDIATE_LIMIT < int(self.constant) < IMMEDIATE_LIMIT:
        return (f"adds the immediate {self.constant}, beyond ptxas's [reg+imm] "
                f"(|imm| < {IMMEDIATE_LIMIT})")
      return None
    if not _I32[0] <= int(self.constant) < _I32[1]:
      return f"xors with {self.constant}, outside i32"
    if not 0 <= int(self.low_mask) <= U32_MASK:
      return f"splits at the low mask {self.low_mask}, outside 32 bits"
    if state.offsets[self.base] is None:
      return (f"xors base {self.base}, which was formed from parts and keeps no "
              "offset to xor")
    return None

  def apply(self, state: AddressState) -> np.ndarray:
    """[thread] -> the store's swizzled byte offset from the ref base, as the emitted
    i32 code computes it, in ``AddressState.numpy``'s ``state`` (which it extends
    by any new base).  Raises StepDefect."""
    why = self.defect(state)
    if why:
      raise StepDefect(why)
    base, imm = self.run(state)
    return (state.addresses[base] + imm).array

  def emit(self, builder):
    """``(address value, immediate)`` in IR (``lowering/target.AddressBuilder``)."""
    return builder.emit_address(self)
