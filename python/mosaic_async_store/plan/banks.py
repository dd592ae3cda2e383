"""Bank-conflict removal by staggering: lanes visit the same stores in different orders.

Threads of a warp that store to the same bank in the same instruction
serialise.  When the plan has such conflicts, lanes are made to execute the
stores of a group in a permuted order: at step ``k`` a thread performs store
``k ^ f(lane)``, where ``f`` maps a few lane bits onto bits of ``k``.  The
search is greedy over (lane bit -> step bit) pairs and every candidate is scored
with the verifier's wavefront model (``verify.store_wavefronts``, the only one).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.plan.geometry import WARP_SIZE, WARPGROUP_SIZE
from mosaic_async_store.plan.plan_types import Instruction, StoreOrder
from mosaic_async_store.plan.verify import plan_wavefronts, store_wavefronts

__all__ = ["remove_bank_conflicts", "plan_conflicts"]

_LANE = np.arange(WARPGROUP_SIZE) % WARP_SIZE


def _step_conflicts(addr: np.ndarray, width: int, writer: np.ndarray) -> int:
  """Extra wavefronts of one SIMT store (swizzled addresses ``addr``)."""
  waves, ideal = store_wavefronts(addr, width, writer)
  return waves - ideal


def plan_conflicts(plan) -> int:
  """Extra shared-memory wavefronts of the plan's stores, over the ideal."""
  waves, ideal = plan_wavefronts(plan)
  return waves - ideal


def _groups(instrs) -> list[list[int]]:
  """Instructions that may be permuted among each other: same kind, op and width."""
  groups: dict[tuple, list[int]] = {}
  for n, i in enumerate(instrs):
    groups.setdefault((i.kind, i.width, i.ptx_type, i.op), []).append(n)
  return list(groups.values())


def _choice(pairs) -> np.ndarray:
  f = np.zeros(WARPGROUP_SIZE, dtype=np.int64)
  for lane_bit, step_bit in pairs:
    f |= ((_LANE >> lane_bit) & 1) << step_bit
  return f


def _group_cost(plan, members, pairs) -> int:
  f = _choice(pairs)
  n = len(members)
  t = np.arange(WARPGROUP_SIZE)
  dsts = np.stack([plan.instructions[m].dst for m in members])
  cost = 0
  for k in range(n):
    src = k ^ f
    if np.any(src >= n):
      return 1 << 30
    cost += _step_conflicts(plan.geometry.byte_address(dsts[src, t]),
                            plan.instructions[members[0]].width, plan.registers.writer)
  return cost


def _stagger_group(plan, members):
  """Greedy search of up to three (lane bit, step bit) pairs for one group.
  Returns (pairs, extra wavefronts left, extra wavefronts in register order)."""
  pairs: list[tuple[int, int]] = []
  best = unstaggered = _group_cost(plan, members, pairs)
  step_bits = max(1, (len(members) - 1).bit_length())
  while best and len(pairs) < 3:
    cands = [(lb, sb) for lb in range(5) for sb in range(step_bits)
             if all(lb != p[0] and sb != p[1] for p in pairs)]
    scored = [(_group_cost(plan, members, pairs + [c]), c) for c in cands]
    if not scored:
      break
    cost, c = min(scored)
    if cost >= best:
      break
    best, pairs = cost, pairs + [c]
  return pairs, best, unstaggered


def _staggered(plan, members, pairs) -> list[Instruction]:
  bits = tuple(lb for lb, _ in pairs)
  t = np.arange(WARPGROUP_SIZE)
  f = _choice(pairs)
  out = []
  for k in range(len(members)):
    # choice index c (over lane bits) -> which member this lane runs at step k
    choices = []
    for c in range(1 << len(bits)):
      fk = sum(((c >> i) & 1) << sb for i, (_, sb) in enumerate(pairs))
      choices.append(plan.instructions[members[k ^ fk]].parts)
    dst = np.stack([plan.instructions[m].dst for m in members])[k ^ f, t]
    base = plan.instructions[members[k]]
    out.append(dataclasses.replace(base, dst=dst, choices=tuple(choices),
                                   choice_bits=bits))
  return out


def _order(plan, members, pairs, cost, unstaggered) -> StoreOrder:
  """The record of one group's order (``pairs`` staggered, ``cost`` extra wavefronts
  left of ``unstaggered`` in register order)."""
  first = plan.instructions[members[0]]
  choices = 1 << len(pairs)
  selects = (choices - 1) * -(-first.width // 4) * len(members) if pairs else 0
  saved = unstaggered - cost if pairs else 0
  return StoreOrder(first.kind, first.width, len(members), tuple(lb for lb, _ in pairs),
                    selects, saved)


def remove_bank_conflicts(plan):
  """Returns a conflict-free plan, or raises AsyncStoreError saying why.

  The plan's ``store_orders`` record, per group, the lane bits staggered on,
  the selects that adds and the wavefronts it saves (``StoreOrder.pays``).
  """
  if plan_conflicts(plan) == 0:
    return plan
  instrs = list(plan.instructions)
  left, orders = 0, []
  for members in _groups(instrs):
    pairs, cost, unstaggered = _stagger_group(plan, members)
    left += cost
    orders.append(_order(plan, members, pairs, cost, unstaggered))
    if pairs:
      for m, new in zip(members, _staggered(plan, members, pairs)):
        instrs[m] = new
  if left:
    raise AsyncStoreError(
        f"optimized=True is not supported for this store: no bank-conflict-free "
        f"order of its {len(instrs)} stores was found ({left} extra shared-memory "
        f"wavefronts remain; {plan.dtype} shape {plan.geometry.shape}, swizzle "
        f"{plan.geometry.swizzle}). Allowed: optimized=False, which stores in "
        "register order and accepts the conflicts. Fix: pass optimized=False, or "
        "use a swizzle or layout that spreads rows over banks (e.g. swizzle=128)",
        param="optimized", value="True")
  return dataclasses.replace(plan, instructions=tuple(instrs), store_orders=tuple(orders))
