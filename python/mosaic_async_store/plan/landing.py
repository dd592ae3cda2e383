"""Where a store plan puts each bit of the array, and where each bit belongs.

Two models, and neither uses the planner's code:

* **Where each bit belongs** (:func:`element_bit_positions`): every element's
  bits at their swizzled address in the ref, from the ref geometry alone.
* **Where the plan puts each bit** (:func:`plan_landing`): the plan replayed as
  the emitted code runs it, on labels instead of data.  Each bit of the
  array's own registers (``plan.source_registers``, the layout's register map)
  is labelled by its position; the plan's register steps move the labels by
  their own ``apply`` (``register_steps``: gathers, byte regrouping), then the
  lane exchange steps by theirs (``plan_types.LaneExchange``), and each
  instruction's parts take them to its swizzled address.
  The planner's own account of where the steps leave each element
  (``plan.registers.elements``) is never read, so a defect in regrouping,
  gathering or exchanging shows up as bits in the wrong place.

``verify`` compares the two; ``executor.execute_plan`` runs the landing on real
bytes.  A plan the landing cannot run (an unknown form, a malformed step, a
value outside its register, parts of the wrong size) raises :class:`PlanDefect`
with the check it breaks: "form", "steps", "values" or "data width".
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.plan.geometry import WARP_SIZE, WARPGROUP_SIZE, RefGeometry
from mosaic_async_store.plan.plan_types import Instruction, LaneExchange
from mosaic_async_store.plan.register_steps import ByteRegroup, Gather, StepDefect

__all__ = ["PlanDefect", "Store", "Landing", "plan_landing", "source_bit_elements",
           "element_bit_positions"]

_THREADS = np.arange(WARPGROUP_SIZE)
_LANES = _THREADS % WARP_SIZE
# Bytes per thread of each kind (PTX ISA: st.async b32/v2.b32/v4.b32; red.async
# 32- and 64-bit; plain st u8..v4.b32; plain red f16/bf16 up to 64-bit).
_WIDTHS = {"st.async": (4, 8, 16), "red.async": (4, 8), "st": (1, 2, 4, 8, 16),
           "red": (2, 4, 8)}
# A PTX type suffix: [noftz.][vN.]<letter><bits>[x2], e.g. v4.b32, s32, noftz.bf16x2.
_PTX_TYPE = re.compile(r"(?:noftz\.)?(?:v([248])\.)?(bf|[bsuf])(8|16|32|64)(x2)?")


class PlanDefect(AsyncStoreError):
  """A plan that breaks one of ``verify.CHECKS``; ``check`` names it."""

  def __init__(self, check: str, detail: str, plan):
    super().__init__(
        f"internal planner defect ({check}: {detail}) for {plan.dtype} shape "
        f"{plan.geometry.shape}, swizzle {plan.geometry.swizzle}: the plan was "
        "rejected before emitting any IR. Fix: report this configuration; "
        "optimized=False may avoid it", param="plan", value=check)
    self.check = check


@dataclasses.dataclass(frozen=True, eq=False)
class Store:
  """One instruction as its writer threads execute it.

  Attributes:
    instruction: the plan's instruction.
    threads: int array [n]: the writer threads, ascending.
    address: int array [n]: swizzled byte address of each thread's first byte.
    source_bits: int array [n, width * 8]: for each stored bit (low bit first)
      its index into the flattened source register bits (``Landing.source_shape``
      with each byte as 8 bits, low bit first), or -1 where no register bit is.
  """

  instruction: Instruction
  threads: np.ndarray
  address: np.ndarray
  source_bits: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class Landing:
  """Where a plan puts the bits of the array's own registers.

  ``source_shape`` is (threads, registers, bytes per register) of those
  registers, each register's vector lanes packed low lane first; ``stores``
  are the plan's instructions in order.
  """

  source_shape: tuple[int, int, int]
  stores: tuple[Store, ...]


def element_bit_positions(geometry: RefGeometry) -> np.ndarray:
  """[element, bit] -> swizzled bit address in the ref, from the geometry alone.

  Element ``e`` is the flat row-major index into ``geometry.shape``; bit ``k``
  is bit ``k`` of its little-endian bit pattern.
  """
  lin_bits = geometry.element_bit_address(np.arange(math.prod(geometry.shape)))
  byte = geometry.byte_address(lin_bits // 8)
  return (byte * 8 + lin_bits % 8)[:, None] + np.arange(geometry.bits)[None, :]


def source_bit_elements(plan) -> np.ndarray:
  """For each flattened source register bit: ``element * bits + bit`` of the
  array bit it holds (``plan.source_registers``, the layout's map), or -1."""
  regs, bits = plan.source_registers, plan.dtype.bits
  labels = (regs.elements[..., None] * bits + np.arange(bits)).reshape(
      WARPGROUP_SIZE, regs.num_registers, -1)
  padded = np.full(_source_labels(plan).shape, -1, dtype=np.int64)
  padded[:, :, :labels.shape[2]] = labels
  return padded.reshape(-1)


# --- instruction forms --------------------------------------------------------


def _form_defect(ins, plan) -> str | None:
  """Why ``ins`` is not an instruction the emitter can run for this plan, or None."""
  if ins.kind not in _WIDTHS or ins.width not in _WIDTHS[ins.kind]:
    return f"{ins.kind} of {ins.width} bytes"
  m = _PTX_TYPE.fullmatch(str(ins.ptx_type))
  if m is None:
    return f"PTX type {ins.ptx_type!r}"
  letter, elem_bits = m[2], int(m[3])
  if int(m[1] or 1) * (2 if m[4] else 1) * elem_bits != 8 * ins.width:
    return f"{ins.kind}.{ins.ptx_type} does not move {ins.width} bytes"
  dt, atomic = plan.dtype, plan.atomic
  if (atomic is None) != (ins.kind in ("st.async", "st")) or ins.op != (atomic or ""):
    return f"{ins.kind} {ins.op!r} in a plan of atomic={atomic}"
  if atomic is not None:
    is_float = letter in ("f", "bf")
    # and/or/xor act bit by bit: a 64-bit element may be reduced as 32-bit halves.
    halves = atomic in ("and", "or", "xor") and letter == "b" and dt.bits == 2 * elem_bits
    if (elem_bits != dt.bits and not halves) or is_float != dt.is_float or (
        letter == "bf") != (dt.name == "bfloat16"):
      return f"{ins.kind}.{ins.ptx_type} does not reduce {dt} elements"
    if atomic in ("min", "max") and letter != ("s" if dt.is_signed_int else "u"):
      return f"{atomic}.{ins.ptx_type} compares {dt} with the wrong signedness"
  if ins.kind == "red.async" and not plan.peer:
    return "red.async into the executing CTA (undefined: PTX ISA, red.async)"
  dst = np.asarray(ins.dst)
  if dst.shape != (WARPGROUP_SIZE,) or not np.issubdtype(dst.dtype, np.integer):
    return "a destination that is not one integer per thread"
  bits = tuple(ins.choice_bits)
  if len(ins.choices) != (1 << len(bits) if ins.choices else 0) or \
      len(set(bits)) != len(bits) or any(not 0 <= b < 5 for b in bits):
    return f"{len(ins.choices)} staggered choices over lane bits {bits}"
  return None


# --- the register steps, replayed on bit labels -------------------------------


def _source_labels(plan) -> np.ndarray:
  """[thread, register, bit] -> index of that bit in the flattened source bits."""
  regs = plan.source_registers
  used = regs.vector_length * plan.dtype.bits
  shape = (WARPGROUP_SIZE, regs.num_registers, 8 * -(-used // 8))
  labels = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
  labels[:, :, used:] = -1          # the padding of a register narrower than a byte
  return labels


def _register_labels(plan) -> np.ndarray:
  """The registers the values are cut from, after every register step."""
  labels = _source_labels(plan)
  steps = plan.register_steps
  if not all(isinstance(s, (Gather, ByteRegroup)) for s in steps) or \
      sum(isinstance(s, ByteRegroup) for s in steps) > 1:
    raise PlanDefect("steps", "register steps other than gathers and at most one byte "
                     f"regrouping: {[type(s).__name__ for s in steps]}", plan)
  for step in steps:  # each step's own definition (register_steps), as the emitter runs it
    try:
      labels = step.apply(labels, plan.dtype.bits, plan.source_registers.vector_length)
    except StepDefect as e:
      raise PlanDefect("steps", str(e), plan) from None
  regs = plan.registers
  declared = (regs.num_registers, regs.vector_length * plan.dtype.bits)
  if labels.shape[1:] != declared or np.shape(regs.writer) != (WARPGROUP_SIZE,):
    raise PlanDefect("steps", f"the steps leave {labels.shape[1]} registers of "
                     f"{labels.shape[2]} bits; the plan declares {declared[0]} of "
                     f"{declared[1]} bits for 128 threads", plan)
  return labels


def _value_labels(plan, registers: np.ndarray) -> dict[int, np.ndarray]:
  """Value id -> [thread, bit] labels: register slices, then the plan's lane exchange
  steps in order, each by its own ``apply`` (``plan_types.LaneExchange``)."""
  by_id, out = {}, {}
  for v in plan.values:
    if v.id in by_id:
      raise PlanDefect("values", f"two values have id {v.id}", plan)
    by_id[v.id] = v
    if v.exchange is None:
      if not (0 <= v.reg < registers.shape[1] and v.byte >= 0 and v.size > 0
              and 8 * (v.byte + v.size) <= registers.shape[2]):
        raise PlanDefect("values", f"value {v.id} (register {v.reg}, bytes {v.byte}.."
                         f"{v.byte + v.size}) is not inside a register", plan)
      out[v.id] = registers[:, v.reg, 8 * v.byte:8 * (v.byte + v.size)]
  made = {id(v.exchange): v for v in plan.values if v.exchange is not None}
  for n, step in enumerate(plan.exchanges):
    where = f"lane exchange step {n}"
    if not isinstance(step, LaneExchange):
      raise PlanDefect("values", f"{where} is not a LaneExchange: {step!r}", plan)
    for ex in step.exchanges:
      if id(ex) not in made:
        raise PlanDefect("values", f"{where}: an exchange that makes no value", plan)
      if made[id(ex)].id in out:
        raise PlanDefect("values", f"{where}: value {made[id(ex)].id} is made twice", plan)
      missing = [x.id for x in (ex.a, ex.b) if x.id not in out]
      if missing:
        raise PlanDefect("values", f"{where} reads value {missing[0]}, which no register "
                         "slice or earlier step makes", plan)
    try:
      merged = step.apply(out)
    except StepDefect as e:
      raise PlanDefect("values", f"{where}: {e}", plan) from None
    for ex, labels in zip(step.exchanges, merged, strict=True):
      v = made[id(ex)]
      if out[ex.a.id].shape != out[ex.b.id].shape or labels.shape[1] != 8 * v.size:
        raise PlanDefect("values", f"value {v.id} is not an exchange of two equal halves",
                         plan)
      out[v.id] = labels
  unmade = [v.id for v in plan.values if v.id not in out]
  if unmade:
    raise PlanDefect("values", f"value {unmade[0]} is made by an exchange no step lists",
                     plan)
  return out


# --- the instructions ---------------------------------------------------------


def _choice(ins) -> np.ndarray:
  """Per thread: which of ``ins.choices`` it stores (bit ``i`` of the choice is lane
  bit ``ins.choice_bits[i]``, as ``Instruction`` defines it)."""
  k = np.zeros(WARPGROUP_SIZE, dtype=np.int64)
  for i, b in enumerate(ins.choice_bits):
    k |= ((_LANES >> b) & 1) << i
  return k


def _store(n, ins, plan, values, writers) -> Store:
  """The source bits instruction ``n`` stores from each writer thread, and where."""
  where = f"instruction {n} ({ins.kind}.{ins.ptx_type})"
  choice = _choice(ins)[writers]
  data = np.full((writers.size, 8 * ins.width), -1, dtype=np.int64)
  for k, parts in enumerate(ins.choices or (ins.parts,)):
    pieces = []
    for p in parts:
      v = values.get(p.value)
      if v is None or p.byte < 0 or p.size <= 0 or 8 * (p.byte + p.size) > v.shape[1]:
        raise PlanDefect("data width", f"{where} reads bytes {p.byte}..{p.byte + p.size} "
                         f"of value {p.value}, which has no such bytes", plan)
      pieces.append(v[:, 8 * p.byte:8 * (p.byte + p.size)])
    carried = sum(p.size for p in parts)
    if carried != ins.width:
      raise PlanDefect("data width", f"{where} carries {carried} bytes", plan)
    sel = choice == k
    data[sel] = np.concatenate(pieces, axis=1)[writers[sel]]
  address = plan.geometry.byte_address(np.asarray(ins.dst, dtype=np.int64)[writers])
  return Store(ins, writers, np.asarray(address, dtype=np.int64), data)


def plan_landing(plan) -> Landing:
  """Runs ``plan`` on bit labels, as the emitted code would; see the module doc.

  Raises PlanDefect ("form", "steps", "values", "data width") for a plan that
  is not a runnable program; whether it stores the right bits is ``verify``'s.
  """
  for n, ins in enumerate(plan.instructions):
    why = _form_defect(ins, plan)
    if why:
      raise PlanDefect("form", f"instruction {n}: {why}", plan)
  values = _value_labels(plan, _register_labels(plan))
  writers = np.flatnonzero(plan.registers.writer)
  stores = tuple(_store(n, ins, plan, values, writers)
                 for n, ins in enumerate(plan.instructions))
  regs = plan.source_registers
  return Landing((WARPGROUP_SIZE, regs.num_registers,
                  -(-regs.vector_length * plan.dtype.bits // 8)), stores)
