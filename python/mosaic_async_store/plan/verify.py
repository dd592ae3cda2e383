"""Static checks of a store plan, for all 128 threads, before any IR exists.

The plan is run as a program on bit labels (``landing.plan_landing``: the
array's own registers through the plan's register steps and instructions, as
the emitter runs them) and the result is compared with where the ref geometry
puts every bit of the array (``landing.element_bit_positions``).  Neither side
uses the planner's code or its derived register map, so a planner bug shows up
here.  Each check in ``CHECKS`` can fail, and test/planner/test_verify_mutations.py
shows each one failing on a corrupted real plan.

The bank-wavefront model lives here too: the verifier reports a plan's
wavefronts with it, and ``banks`` scores candidate store orders with it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mosaic_async_store.plan.geometry import WARP_SIZE, WARPGROUP_SIZE
from mosaic_async_store.plan.landing import (PlanDefect, element_bit_positions, plan_landing,
                                        source_bit_elements)
from mosaic_async_store.plan.address_steps import AddressState, AddressStep
from mosaic_async_store.plan.plan_types import ASYNC_KINDS
from mosaic_async_store.plan.register_steps import StepDefect

__all__ = ["Report", "PlanDefect", "CHECKS", "verify_plan", "bank_wavefronts",
           "store_wavefronts", "plan_wavefronts"]

# Every check, in the order it runs; the first four are raised by plan_landing.
CHECKS = {
    "form": "each instruction is a store or reduction form of its width, for the "
            "plan's operation, element type and target",
    "steps": "the register steps are well formed and leave the registers the plan declares",
    "values": "every value is a slice inside a register or a listed lane exchange",
    "data width": "each instruction's parts give exactly its width in bytes",
    "swizzle chunk": "no instruction spans two 16-byte chunks, which the swizzle moves apart",
    "alignment": "each store address is a multiple of its width",
    "stray": "no bit is written outside the array's bits",
    "contents": "each written bit is the array's bit that the geometry puts there",
    "duplicate": "no bit is written twice",
    "missing": "every bit of the array is written",
    "tx bytes": "each thread announces exactly the bytes its async instructions complete",
    "address steps": "the plan's address steps, run as the emitter runs them, give each "
                     "instruction's swizzled destination address for every writer thread, "
                     "with immediates that ptxas folds into [reg+imm]",
    "local form": "a reduction into a target that may be the executing CTA carries its "
                  "local form (the plan run there, chosen at run time): the same bytes "
                  "into the own CTA, itself verified; no other plan carries one",
    "bank conflicts": "an optimized plan costs no extra shared-memory wavefronts",
}


@dataclasses.dataclass(frozen=True)
class Report:
  """What verification measured."""

  total_bytes: int
  async_bytes: int
  bank_conflicts: int        # extra shared-memory wavefronts over the ideal
  wavefronts: int


# --- the bank-wavefront model (shared with banks) -----------------------------


def bank_wavefronts(addr: np.ndarray, width: int) -> int:
  """Shared-memory wavefronts for one warp's store of ``width`` bytes per thread.

  Requests wider than 4 bytes are split into phases of 128 bytes (16 threads
  for 8 bytes, 8 for 16); in each phase the busiest bank sets the count.
  """
  per_phase = max(1, min(WARP_SIZE, 128 // max(width, 4)))
  total = 0
  for p in range(0, len(addr), per_phase):
    a = addr[p:p + per_phase]
    words = np.unique((a[:, None] // 4 + np.arange(max(1, width // 4))[None, :]).ravel())
    total += int(np.bincount(words % 32, minlength=32).max()) if words.size else 0
  return total


def store_wavefronts(address: np.ndarray, width: int, writer: np.ndarray) -> tuple[int, int]:
  """``(wavefronts, ideal)`` of one SIMT store of ``width`` bytes per thread.

  ``address[t]`` is thread ``t``'s swizzled byte address; only ``writer``
  threads store.  The ideal is one wavefront per 128 bytes each warp stores
  (narrow stores count as 4 bytes: a bank serves one word per wavefront).
  """
  waves = ideal = 0
  for w in range(WARPGROUP_SIZE // WARP_SIZE):
    warp = slice(w * WARP_SIZE, (w + 1) * WARP_SIZE)
    a = np.asarray(address)[warp][writer[warp]]
    if a.size:
      waves += bank_wavefronts(a, width)
      ideal += -(-a.size * max(width, 4) // 128)
  return waves, ideal


def plan_wavefronts(plan) -> tuple[int, int]:
  """``(wavefronts, ideal)`` summed over the plan's instructions."""
  waves = ideal = 0
  for ins in plan.instructions:
    w, i = store_wavefronts(plan.geometry.byte_address(ins.dst), ins.width,
                            plan.registers.writer)
    waves, ideal = waves + w, ideal + i
  return waves, ideal


# --- the checks -----------------------------------------------------------------


def _where(n: int, store, row: int) -> str:
  ins = store.instruction
  return f"instruction {n} ({ins.kind}.{ins.ptx_type}) of thread {int(store.threads[row])}"


def _check_addresses(plan, landing) -> None:
  """Swizzle chunk, then alignment, for every writer thread."""
  for n, store in enumerate(landing.stores):
    ins = store.instruction
    dst = np.asarray(ins.dst, dtype=np.int64)[store.threads]
    crossing = np.flatnonzero(dst // 16 != (dst + ins.width - 1) // 16)
    if crossing.size:
      r = crossing[0]
      raise PlanDefect("swizzle chunk", f"{_where(n, store, r)} stores bytes {dst[r]}.."
                       f"{dst[r] + ins.width - 1}, across a 16-byte chunk", plan)
    off = np.flatnonzero(store.address % ins.width)
    if off.size:
      r = off[0]
      raise PlanDefect("alignment", f"{_where(n, store, r)} stores {ins.width} bytes at "
                       f"address {store.address[r]}", plan)


def _element(label: int, bits: int) -> str:
  return f"bit {label % bits} of element {label // bits}" if label >= 0 else "no array bit"


def _check_bits(plan, landing) -> int:
  """Stray, contents, duplicate, missing; returns the bytes written."""
  bits = plan.dtype.bits
  pos = element_bit_positions(plan.geometry).reshape(-1)
  size = int(pos.max()) + 1
  belongs = np.full(size, -1, dtype=np.int64)     # bit address -> element * bits + bit
  belongs[pos] = np.arange(pos.size)
  holds = source_bit_elements(plan)                # source bit -> element * bits + bit
  splat = plan.source_registers.splat              # one value: any element may go anywhere
  written = []
  for n, store in enumerate(landing.stores):
    addr = store.address[:, None] * 8 + np.arange(8 * store.instruction.width)
    want = np.where((addr >= 0) & (addr < size), belongs[np.clip(addr, 0, size - 1)], -1)
    if np.any(want < 0):
      r, c = np.argwhere(want < 0)[0]
      raise PlanDefect("stray", f"{_where(n, store, r)} writes byte {addr[r, c] // 8}, "
                       "which holds no bit of the array", plan)
    got = np.where(store.source_bits >= 0, holds[np.maximum(store.source_bits, 0)], -1)
    wrong = (got % bits != want % bits) | (got < 0) if splat else got != want
    if np.any(wrong):
      r, c = np.argwhere(wrong)[0]
      raise PlanDefect("contents", f"{_where(n, store, r)} puts {_element(got[r, c], bits)} "
                       f"at byte {addr[r, c] // 8}, where {_element(want[r, c], bits)} "
                       "belongs", plan)
    written.append(addr.reshape(-1))
  counts = np.bincount(np.concatenate(written), minlength=size) if written else \
      np.zeros(size, dtype=np.int64)
  if np.any(counts > 1):
    raise PlanDefect("duplicate", f"byte {int(np.argmax(counts > 1)) // 8} is written "
                     f"{int(counts.max())} times", plan)
  unwritten = np.flatnonzero(counts[pos] == 0)
  if unwritten.size:
    raise PlanDefect("missing", f"{unwritten.size // bits or 1} element(s) never written, "
                     f"first {_element(int(unwritten[0]), bits)}", plan)
  return int(counts.sum()) // 8


def _check_tx(plan, landing) -> int:
  """Each thread's announced bytes against its async stores; returns their total."""
  covered = np.zeros(WARPGROUP_SIZE, dtype=np.int64)
  for store in landing.stores:
    if store.instruction.kind in ASYNC_KINDS:
      covered[store.threads] += store.instruction.width
  for t in range(WARPGROUP_SIZE):
    announced = plan.bytes_for_thread(t)
    if announced != covered[t]:
      raise PlanDefect("tx bytes", f"thread {t} announces {announced} bytes; its async "
                       f"instructions complete {int(covered[t])}", plan)
  return int(covered.sum())


_U32_MASK = (1 << 32) - 1


def _check_address_steps(plan) -> None:
  """Runs ``plan.address_steps`` on all 128 threads, each by its own ``apply`` (the
  emitter's i32 arithmetic), and compares every writer thread's address with its
  instruction's destination through the geometry."""
  steps, instrs = plan.address_steps, plan.instructions
  if len(steps) != len(instrs):
    raise PlanDefect("address steps", f"{len(steps)} address steps for {len(instrs)} "
                     "instructions", plan)
  state = AddressState.numpy(plan.geometry.swizzle)
  for n, (step, ins) in enumerate(zip(steps, instrs)):
    if not isinstance(step, AddressStep):
      raise PlanDefect("address steps", f"address step {n} is not an AddressStep: {step!r}",
                       plan)
    where = f"address step {n} ({step.kind}) of instruction {n} ({ins.kind}.{ins.ptx_type})"
    try:
      addr = step.apply(state)
    except StepDefect as e:
      raise PlanDefect("address steps", f"{where} {e}", plan) from None
    want = np.asarray(plan.geometry.byte_address(ins.dst), dtype=np.int64) & _U32_MASK
    wrong = np.flatnonzero(plan.registers.writer & (addr != want))
    if wrong.size:
      t = int(wrong[0])
      raise PlanDefect("address steps", f"{where} gives thread {t} address {int(addr[t])}, "
                       f"where its destination is byte {int(want[t])}", plan)


def _check_local_form(plan) -> None:
  """The run-time choice: present exactly where a reduction's target may be the
  executing CTA, and a local plan of the same store; then verified itself."""
  local, where = plan.local_form, plan.target
  if local is None:
    if where.may_be_own and plan.wants_local_form:
      raise PlanDefect("local form", f"a {plan.atomic} reduction into a target that may be "
                       "the executing CTA has no local form to run there (red.async into "
                       "the executing CTA is undefined)", plan)
    return
  if not where.may_be_own:
    raise PlanDefect("local form", f"a local form for a target ({where.describe()}) that "
                     "is never the executing CTA at run time", plan)
  same = (local.dtype == plan.dtype and local.geometry == plan.geometry
          and local.atomic == plan.atomic and local.total_bytes == plan.total_bytes)
  if local.peer or local.local_form is not None or not same:
    raise PlanDefect("local form", f"the local form ({local.target.describe()}, "
                     f"{local.total_bytes} bytes of {local.dtype}) is not this store's "
                     f"{plan.total_bytes} bytes into the executing CTA", plan)
  verify_plan(local)


def verify_plan(plan) -> Report:
  """Raises PlanDefect (an AsyncStoreError) naming the first failed check of
  ``CHECKS``: a byte lost, doubled, misplaced, misaligned, wrongly
  announced or wrongly addressed.

  Returns the bytes written and completed on the barrier, and the wavefronts.
  """
  landing = plan_landing(plan)
  _check_addresses(plan, landing)
  total = _check_bits(plan, landing)
  async_bytes = _check_tx(plan, landing)
  _check_address_steps(plan)
  _check_local_form(plan)
  waves, ideal = plan_wavefronts(plan)
  if plan.optimized and waves > ideal:
    raise PlanDefect("bank conflicts", f"optimized=True, but the stores take {waves} "
                     f"wavefronts where {ideal} would do", plan)
  return Report(total, async_bytes, waves - ideal, waves)
