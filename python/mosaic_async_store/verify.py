"""Static checks of a store plan, by simulating all 128 threads in NumPy.

The simulation follows the plan as the emitted code would run it: register
bytes, lane exchanges (shfl.bfly), then each store's bytes at its swizzled
address.  It then compares every written byte with where the ref geometry says
that byte belongs.  This is independent of how the planner chose the
instructions, so a planner bug shows up here, before any IR exists.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.geometry import WARP_SIZE, WARPGROUP_SIZE

__all__ = ["Report", "verify_plan", "bank_wavefronts"]


@dataclasses.dataclass(frozen=True)
class Report:
  """What verification measured."""

  total_bytes: int
  async_bytes: int
  bank_conflicts: int        # extra shared-memory wavefronts over the ideal
  wavefronts: int


def _fail(what: str, plan) -> AsyncStoreError:
  return AsyncStoreError(
      f"internal planner defect ({what}) for {plan.dtype} shape "
      f"{plan.geometry.shape}, swizzle {plan.geometry.swizzle}: the plan was "
      "rejected before emitting any IR. Fix: report this configuration; "
      "optimized=False may avoid it", param="plan", value=what)


def _contents(plan) -> dict[int, np.ndarray]:
  """Source byte ids held by each thread for every value: [thread, byte]."""
  regs = plan.registers
  reg_bytes = regs.vector_length * plan.dtype.bits // 8
  t = np.arange(WARPGROUP_SIZE)[:, None]
  lane = np.arange(WARPGROUP_SIZE) % WARP_SIZE
  out: dict[int, np.ndarray] = {}
  for v in plan.values:
    if v.exchange is None:
      out[v.id] = (t * regs.num_registers + v.reg) * reg_bytes + v.byte + np.arange(v.size)
      continue
    ex = v.exchange
    bit = (lane & ex.lane_mask) != 0
    partner = np.arange(WARPGROUP_SIZE) ^ ex.lane_mask
    mine = np.where(bit[:, None], out[ex.b.id], out[ex.a.id])
    recv = np.where(bit[:, None], out[ex.b.id][partner], out[ex.a.id][partner])
    low = np.array([ex.keep_low[int(b)] for b in bit])[:, None]
    out[v.id] = np.where(low, np.concatenate([mine, recv], 1),
                         np.concatenate([recv, mine], 1))
  return out


def _expected_address(plan, src: np.ndarray) -> np.ndarray:
  """Swizzled byte address where source byte id ``src`` belongs."""
  regs, bits = plan.registers, plan.dtype.bits
  reg_bytes = regs.vector_length * bits // 8
  thread_reg, byte = np.divmod(src, reg_bytes)
  thread, reg = np.divmod(thread_reg, regs.num_registers)
  if bits >= 8:
    j, k = np.divmod(byte * 8, bits)
    k = k // 8
  else:
    j, k = byte * (8 // bits), 0
  lin = plan.geometry.element_bit_address(regs.elements[thread, reg, j]) // 8 + k
  return plan.geometry.byte_address(lin)


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


def _conflicts(plan, addrs: list[np.ndarray]) -> tuple[int, int]:
  writer = plan.registers.writer
  waves = ideal = 0
  for ins, addr in zip(plan.instructions, addrs):
    for w in range(4):
      sel = writer[w * WARP_SIZE:(w + 1) * WARP_SIZE]
      a = addr[w * WARP_SIZE:(w + 1) * WARP_SIZE][sel]
      if a.size:
        waves += bank_wavefronts(a, ins.width)
        ideal += -(-a.size * max(ins.width, 4) // 128)
  return waves - ideal, waves


def verify_plan(plan) -> Report:
  """Raises AsyncStoreError if any byte is lost, doubled, misplaced or misaligned."""
  contents = _contents(plan)
  writer = np.flatnonzero(plan.registers.writer)
  geom = plan.geometry
  written, addrs, async_bytes = [], [], 0
  for ins in plan.instructions:
    addr = geom.byte_address(ins.dst)
    addrs.append(addr)
    if np.any(addr[writer] % ins.width):
      raise _fail(f"misaligned {ins.opcode}", plan)
    for t in writer:
      data = np.concatenate([contents[p.value][t, p.byte:p.byte + p.size]
                             for p in ins.parts_for(int(t))])
      if data.size != ins.width:
        raise _fail(f"{ins.opcode} carries {data.size} bytes", plan)
      actual = addr[t] + np.arange(ins.width)
      if np.any(_expected_address(plan, data) != actual):
        raise _fail(f"{ins.opcode} writes bytes to the wrong address", plan)
      written.append(actual)
    if ins.is_async:
      async_bytes += ins.width * len(writer)
  written = np.concatenate(written) if written else np.zeros(0, np.int64)
  expected_total = int(np.prod(geom.shape)) * plan.dtype.bits // 8
  if written.size != expected_total or np.unique(written).size != written.size:
    raise _fail(f"{written.size} bytes written, {np.unique(written).size} distinct, "
                f"{expected_total} expected", plan)
  if async_bytes != sum(plan.bytes_for_thread(int(t)) for t in range(WARPGROUP_SIZE)):
    raise _fail("announced tx bytes differ from async bytes", plan)
  conflicts, waves = _conflicts(plan, addrs)
  return Report(written.size, async_bytes, conflicts, waves)
