"""The store planner: which bytes each thread stores, in which instructions.

``plan_store`` is pure data: it needs no MLIR context and no GPU.  Its result,
a :class:`StorePlan`, is what the emitter in ``mosaic_async_store.lowering``
turns into IR, and what :mod:`verify` checks byte by byte beforehand.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mosaic_async_store.plan import banks, packing, ptx_forms, subbyte, validate
from mosaic_async_store.plan.addressing import base_order, plan_addresses
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.plan.geometry import RefGeometry, RegisterMap, register_map
from mosaic_async_store.plan.plan_types import Exchange, Instruction, Part, Value
from mosaic_async_store.plan.register_steps import Gather
# The plan's data and the emitter's check live in store_plan.py; they are this
# module's public names too (the package's entry points import them from here).
from mosaic_async_store.plan.store_plan import StorePlan, check_emittable, plan_verified

__all__ = ["StorePlan", "plan_store", "plan_verified", "check_emittable"]


def _uses_plain_stores(*, peer: bool, cluster_size: int | None, atomic, plain_stores) -> bool:
  """Whether a store goes out as plain st.shared::cluster instead of st.async.

  Asked for explicitly (``plain_stores``, async_store's ``strategy="plain"``),
  or forced: st.async into a cluster of one CTA is undefined behaviour.
  Reductions keep their own forms.
  """
  one_cta = not peer and cluster_size == 1
  return atomic is None and (plain_stores or one_cta)


def _splat_in_address_order(regs: RegisterMap, geom: RefGeometry) -> RegisterMap:
  """A splat's elements are all equal, so any element may go anywhere: hand them
  out in destination-address order, which makes each thread's bytes contiguous
  and neighbouring threads' chunks adjacent (wide, conflict-free stores) even
  into transposed or strided refs."""
  flat = np.arange(int(np.prod(geom.shape)))
  order = np.argsort(geom.element_bit_address(flat), kind="stable")
  return RegisterMap(order[regs.elements], regs.writer, splat=True)


def _split_chain(chain: list[Value], writer: np.ndarray, widths, make) -> list[Instruction]:
  """Cuts a chain into the widest aligned pieces; ``make(width, parts, dst)``."""
  total = sum(v.size for v in chain)
  starts = np.cumsum([0] + [v.size for v in chain])
  base = chain[0].dst
  out, p = [], 0
  while p < total:
    for w in widths:
      if p + w <= total and not np.any((base[writer] + p) % w):
        break
    else:
      raise AssertionError("width 1 always fits")
    parts = []
    for v, s in zip(chain, starts):
      lo, hi = max(p, s), min(p + w, s + v.size)
      if lo < hi:
        parts.append(Part(v.id, int(lo - s), int(hi - lo)))
    out.append(make(w, tuple(parts), base + p))
    p += w
  return out


def _store_instructions(chains, writer, plain_only: bool) -> list[Instruction]:
  out = []
  for chain in chains:
    def make(w, parts, dst):
      if not plain_only and w in ptx_forms.ST_ASYNC_TYPES:
        return Instruction("st.async", w, ptx_forms.ST_ASYNC_TYPES[w], "", parts, dst)
      return Instruction("st", w, ptx_forms.PLAIN_ST_TYPES[w], "", parts, dst)
    out += _split_chain(chain, writer, (16, 8, 4, 2, 1), make)
  return out


def _atomic_instructions(chains, writer, dtype, op, peer) -> list[Instruction]:
  kind, elem_type, pair_type = ptx_forms.atomic_forms(op, dtype, peer)
  esize = ptx_forms.type_bytes(elem_type)   # half an element for 64-bit and/or/xor
  widths = (2 * esize, esize) if pair_type else (esize,)
  def make(w, parts, dst):
    return Instruction(kind, w, pair_type if w != esize else elem_type, op, parts, dst)
  return [i for c in chains for i in _split_chain(c, writer, widths, make)]


def _schedule(regs, geom, dt, atomic, peer, plain_stores, context):
  """(values, exchanges, instructions) storing the registers ``regs``."""
  bit_addr = geom.element_bit_address(regs.elements)
  values = packing.register_values(regs, bit_addr, dt.bits, context=context)
  all_values = {v.id: v for v in values}
  exchanges: list[Exchange] = []
  if atomic is None and not plain_stores:
    values, exchanges = packing.exchange_small_values(values, regs.writer, len(values))
    all_values.update((v.id, v) for v in values)
    for ex in exchanges:
      all_values.update(((ex.a.id, ex.a), (ex.b.id, ex.b)))
  chains = packing.chain_values(values, regs.writer)
  if atomic is None:
    instrs = _store_instructions(chains, regs.writer, plain_stores)
  else:
    instrs = _atomic_instructions(chains, regs.writer, dt, atomic, peer)
  ordered = tuple(sorted(all_values.values(), key=lambda v: v.id))
  return ordered, packing.lane_exchange_steps(exchanges, ordered), tuple(instrs)


def _plain_bytes(schedule, regs) -> int:
  """Bytes the warpgroup writes with plain st pieces."""
  return sum(i.width for i in schedule[2] if i.kind == "st") * int(regs.writer.sum())


def _gather_plain_pieces(regs, geom, dt, peer, context, schedule, max_levels=3):
  """Turns plain st pieces into st.async by gathering partner lanes' registers.

  Pieces no two-sided exchange can pair (a thread holding under a word) are
  otherwise plain ``st.shared::cluster``.  Here lanes with ``mask`` bit 0
  take their partner's registers too and write for both; the partners write
  nothing (like replicas).  Gathers are chained (1 byte -> 2 -> a word) while
  they do not add plain bytes; the result with the fewest plain bytes wins.
  """
  best = (_plain_bytes(schedule, regs), regs, (), schedule)
  gathers: tuple[int, ...] = ()
  while len(gathers) < max_levels and best[0]:
    current = _plain_bytes(schedule, regs)
    options = []
    for mask in (1, 2, 4, 8, 16):
      gathered = packing.gather_partner(regs, mask)
      if gathered is None:
        continue
      try:
        candidate = _schedule(gathered, geom, dt, None, peer, False, context)
      except AsyncStoreError:
        continue
      options.append((_plain_bytes(candidate, gathered), mask, gathered, candidate))
    options = [o for o in options if o[0] <= current]
    if not options:
      break
    plain, mask, regs, schedule = min(options, key=lambda o: o[:2])
    gathers += (mask,)
    if plain < best[0]:
      best = (plain, regs, gathers, schedule)
  return best[1:]


def _regroup_bytes(regs, bit_addr, geom, bits):
  """``(subbyte.byte_registers(...) or None, source gathers)`` for sub-byte data.

  When no lane pair can share out its split bytes evenly (each pair holds a
  single byte: a one-column 4-bit array), lanes first gather their partner's
  elements (``packing.gather_partner``) and then assemble the bytes alone.
  """
  regrouped = subbyte.byte_registers(regs, bit_addr, bits)
  if regrouped is not None or bits >= 8:
    return regrouped, ()
  for mask in (1, 2, 4, 8, 16):
    gathered = packing.gather_partner(regs, mask)
    if gathered is None:
      continue
    regrouped = subbyte.byte_registers(
        gathered, geom.element_bit_address(gathered.elements), bits)
    if regrouped is not None:
      return regrouped, (mask,)
  return None, ()


def plan_store(layout, shape, dtype, *, swizzle=None, tiling_rank=None,
               optimized=True, atomic=None, ref_shape=None, ref_strides=None,
               peer=None, plain_stores=False, cluster_size=None,
               target=None) -> StorePlan:
  """Plans the asynchronous store of a fragmented array; no MLIR context needed.

  Args:
    layout: the array's Mosaic GPU layout (TiledLayout, WGStridedFragLayout,
      WGSplatFragLayout).
    shape: the array's logical shape.
    dtype: element type (dtype-like or name).
    swizzle: 16, 32, 64, 128 or None (plain ref).
    tiling_rank: number of trailing ref dims that form the tile (default:
      ``len(ref_shape) - len(shape)``).
    optimized: refuse plans with shared-memory bank conflicts.
    atomic: None or one of ``ptx_forms.ATOMIC_OPS``.
    ref_shape, ref_strides: the destination memref's shape and strides in
      elements (default: the canonical tiled ref for ``swizzle``, row-major).
    peer: whether the target is another CTA (red.async needs one); default True.
    plain_stores: carry everything with plain st.shared::cluster
      (``async_store(strategy="plain")``); reductions keep their own forms.
    cluster_size: the CTAs in the cluster, when known: a store into the
      executing CTA (``peer=False``) of a cluster of one CTA uses plain stores
      (st.async needs ``%cluster_nctarank > 1``).
    target: a ``plan_types.Target`` (what ``async_store`` passes: peer or local,
      its cluster dimension, index and shape), instead of ``peer`` and
      ``cluster_size``; the plan carries it, and the emitter forms the rank
      from it.  A reduction into a target that ``may_be_own`` also gets its
      local form (``StorePlan.local_form``), the run-time choice stated in the plan.

  Returns:
    A :class:`StorePlan`; call ``plan.verify()`` to check it.
  """
  optimized = validate.check_flag("optimized", optimized)
  plain_stores = validate.check_flag("plain_stores", plain_stores)
  target = validate.check_target(target, peer, cluster_size)
  plan = _plan_one(layout, shape, dtype, swizzle, tiling_rank, optimized, atomic, ref_shape,
                   ref_strides, plain_stores, target)
  if target.may_be_own and plan.wants_local_form:
    # red.async into the executing CTA is undefined, a plain red.shared::cluster
    # there dear (wants_local_form): where the target is the own CTA, this form runs.
    local = _plan_one(layout, shape, dtype, swizzle, tiling_rank, optimized, atomic,
                      ref_shape, ref_strides, plain_stores,
                      dataclasses.replace(target, peer=False, may_be_own=False))
    plan = dataclasses.replace(plan, local_form=local)
  return plan


def _plan_one(layout, shape, dtype, swizzle, tiling_rank, optimized, atomic, ref_shape,
              ref_strides, plain_stores, target) -> StorePlan:
  """``plan_store`` for one target (checked flags and Target)."""
  peer, cluster_size = target.peer, target.cluster_size
  dt, geom, atomic = validate.plan_inputs(
      layout, shape, dtype, swizzle, tiling_rank, atomic, ref_shape, ref_strides, peer)
  plain_stores = _uses_plain_stores(peer=peer, cluster_size=cluster_size, atomic=atomic,
                                    plain_stores=plain_stores)
  regs = register_map(layout, geom.shape)
  if regs.splat:
    regs = _splat_in_address_order(regs, geom)
  bit_addr = geom.element_bit_address(regs.elements)
  source_regs, regroup, source_gathers = regs, None, ()
  if packing.register_runs(regs, bit_addr, dt.bits) is None:
    regrouped, source_gathers = _regroup_bytes(regs, bit_addr, geom, dt.bits)
    if regrouped is not None:
      regs, regroup = regrouped
  context = f"{dt} array of shape {geom.shape} in layout {layout}"
  schedule = _schedule(regs, geom, dt, atomic, peer, plain_stores, context)
  gathers: tuple[int, ...] = ()
  if atomic is None and not plain_stores:
    regs, gathers, schedule = _gather_plain_pieces(regs, geom, dt, peer, context, schedule)
  values, exchanges, instrs = schedule
  # The destination's state space, decided once here: the opcodes spell it.
  instrs = tuple(dataclasses.replace(i, space=target.state_space(i.kind)) for i in instrs)
  steps = (*(Gather(m) for m in source_gathers), *(() if regroup is None else (regroup,)),
           *(Gather(m) for m in gathers))
  plan = StorePlan(dt, geom, regs, values, exchanges, instrs, atomic, target,
                   optimized, source_regs, steps)
  plan = banks.remove_bank_conflicts(plan) if optimized else plan
  # Into the executing CTA the ref's base is its own shared address, which ptxas
  # keeps in a uniform register and folds into each store's address operand.
  base_add_free = not target.peer
  addresses = plan_addresses([i.dst for i in plan.instructions], geom.byte_address,
                             plan.registers.writer, base_add_free=base_add_free)
  order = base_order(addresses)
  if order != sorted(order):  # each base's stores together, then the steps again
    plan = dataclasses.replace(plan, instructions=tuple(plan.instructions[n] for n in order))
    addresses = plan_addresses([i.dst for i in plan.instructions], geom.byte_address,
                               plan.registers.writer, base_add_free=base_add_free)
  return dataclasses.replace(plan, address_steps=tuple(addresses))
