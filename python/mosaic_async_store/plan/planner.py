"""The store planner: which bytes each thread stores, in which instructions.

``plan_store`` is pure data: it needs no MLIR context and no GPU.  Its result,
a :class:`StorePlan`, is what the emitter in ``mosaic_async_store.lowering``
turns into IR, and what :mod:`verify` checks byte by byte beforehand.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref

import numpy as np

from mosaic_async_store.plan import banks, packing, ptx_forms, subbyte, validate
from mosaic_async_store.plan.addressing import AddressStep, base_order, plan_addresses
from mosaic_async_store.plan.dtypes import DType
from mosaic_async_store.errors import AsyncStoreError, refuse, refuse_type
from mosaic_async_store.plan.geometry import RefGeometry, RegisterMap, register_map
from mosaic_async_store.plan.plan_types import (Exchange, Instruction, LaneExchange, Part,
                                               StoreOrder, Target, Value)
from mosaic_async_store.plan.register_steps import ByteRegroup, Gather

__all__ = ["StorePlan", "plan_store", "plan_verified", "check_emittable"]


def _uses_plain_stores(*, peer: bool, cluster_size: int | None, atomic, plain_stores) -> bool:
  """Whether a store goes out as plain st.shared::cluster instead of st.async.

  Asked for explicitly (``plain_stores``, async_store's ``strategy="plain"``),
  or forced: st.async into a cluster of one CTA is undefined behaviour.
  Reductions keep their own forms.
  """
  one_cta = not peer and cluster_size == 1
  return atomic is None and (plain_stores or one_cta)


# Plans that passed verify() (frozen, compared by identity): emit_plan checks here.
_VERIFIED: "weakref.WeakSet[StorePlan]" = weakref.WeakSet()


def plan_verified(plan) -> bool:
  """Whether ``plan`` passed ``verify()`` (a changed copy has to pass again)."""
  return plan in _VERIFIED


def check_emittable(plan) -> None:
  """What ``emit_plan`` checks before it emits: refuses (AsyncStoreError) a plan the
  verifier rejects (one that passed ``verify()`` is not replayed again), and a peer
  plan with no target index to form the rank from."""
  if not plan_verified(plan):
    plan.verify()
  where = plan.target
  if where.peer and (where.cluster_dim is None or where.cluster_idx is None):
    raise refuse(
        "plan.target", where.describe(), "a peer target with cluster_dim and cluster_idx",
        "plan with target=Target(peer=True, cluster_dim=..., cluster_idx=...) (async_store "
        "does), or a local target")


@dataclasses.dataclass(frozen=True, eq=False)
class StorePlan:
  """A verified-able schedule of stores for one warpgroup.

  Attributes:
    dtype, geometry, registers: what is stored, where, and from which registers.
    values: every value the instructions read (register slices, exchanges).
    exchanges: the lane exchanges, in order, after the register steps: one
      ``LaneExchange`` step per ``shfl.sync.bfly`` (its ``apply`` and ``emit``).
    instructions: the stores, in emission order.
    atomic: the reduction op or None.
    target: where the stores land (``Target``: peer or local, the caller's cluster
      dimension and index, the cluster's shape); ``peer`` is ``target.peer``.
  """

  dtype: DType
  geometry: RefGeometry
  registers: RegisterMap
  values: tuple[Value, ...]
  exchanges: tuple[LaneExchange, ...]
  instructions: tuple[Instruction, ...]
  atomic: str | None
  target: Target
  optimized: bool
  # The registers as the FragmentedArray holds them; ``registers`` are what the
  # ``register_steps`` leave (after gathers, or sub-byte data regrouped into
  # one-byte virtual registers).
  source_registers: RegisterMap | None = None
  # The register preparation, in order (``register_steps``: Gather, ByteRegroup),
  # each with one NumPy ``apply`` (landing, the verifier, the executor) and one
  # ``emit`` (the IR builder).
  register_steps: tuple["Gather | ByteRegroup", ...] = ()
  # How each instruction's address is formed (``addressing.plan_addresses``),
  # one step per instruction, in order; the emitter replays them.
  address_steps: tuple[AddressStep, ...] = ()
  # optimized=True with bank conflicts in register order: per group, the order
  # taken, what its selects cost and what it saves (``banks``, ``StoreOrder``).
  store_orders: tuple[StoreOrder, ...] = ()
  # A target that may be the executing CTA at run time (``target.may_be_own``) and a
  # plan that reduces (``wants_local_form``): the plan the emitter runs where it is
  # (``scf.if`` target rank == ``%cluster_ctarank``), the same bytes into the own CTA.
  local_form: "StorePlan | None" = None

  def __post_init__(self):
    if self.source_registers is None:
      object.__setattr__(self, "source_registers", self.registers)

  @property
  def peer(self) -> bool:
    """Whether the target is another CTA of the cluster (``target.peer``)."""
    return self.target.peer

  @functools.cached_property
  def _per_thread_async(self) -> np.ndarray:
    w = self.registers.writer
    return sum((i.width * w.astype(np.int64) for i in self.instructions if i.is_async),
               np.zeros(w.shape, dtype=np.int64))

  @property
  def total_bytes(self) -> int:
    """Bytes the warpgroup writes into the destination (every kind of store)."""
    w = int(self.registers.writer.sum())
    return sum(i.width for i in self.instructions) * w

  @property
  def async_bytes(self) -> int:
    """Bytes that complete on the barrier's tx count (st.async / red.async)."""
    return int(self._per_thread_async.sum())

  def bytes_for_thread(self, thread: int) -> int:
    """Bytes thread ``thread`` announces with its arrive.expect_tx."""
    if not validate.is_int(thread):
      raise refuse_type("thread", thread, "an int, 0 <= thread < 128",
                        "pass a warpgroup thread index")
    if not 0 <= thread < 128:
      raise refuse("thread", thread, "0 <= thread < 128", "pass a warpgroup thread index")
    return int(self._per_thread_async[thread])

  @property
  def needs_release_arrive(self) -> bool:
    """True when plain st/red pieces must be ordered by a release arrive."""
    return any(not i.is_async for i in self.instructions)

  @property
  def needs_other_cta(self) -> bool:
    """True when the plan issues red.async, whose target must be another CTA.

    PTX ISA 9.1, red.async: the destination and the mbarrier must belong to a
    CTA that "is different from the CTA of the executing thread", else the
    behaviour is undefined.  st.async only needs a cluster of more than one CTA.
    """
    return any(i.kind == "red.async" for i in self.instructions)

  @property
  def wants_local_form(self) -> bool:
    """True when this peer plan should not run where its target turns out to be the
    executing CTA at run time: it reduces (a target that ``may_be_own`` then gets
    its ``local_form``, which the emitter branches to on ``%cluster_ctarank``).

    red.async there is undefined (``needs_other_cta``).  A plain
    ``red.shared::cluster`` there is defined but dear: ptxas cannot tell a cluster
    address of the executing CTA from a peer's, and emits a generic ``ATOM`` with
    state-space queries (``QSPC``) and compare-and-swap fallbacks for every float
    add and 64-bit reduction (f32 add: about 26 SASS instructions each), where the
    local form's ``red.shared::cta`` is a native shared-memory atomic (``ATOMS``,
    or an ``ATOMS.CAST`` loop: about 8); bench/reduction_forms.py measures each.
    Plain stores keep one form: ``st.async`` may target the executing CTA.
    """
    return any(i.kind in ("red.async", "red") for i in self.instructions)

  @property
  def widest(self) -> int:
    """Bytes of the widest instruction (the alignment the ref's base needs)."""
    return max((i.width for i in self.instructions), default=1)

  @property
  def instruction_counts(self) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in self.instructions:
      counts[i.opcode] = counts.get(i.opcode, 0) + 1
    return counts

  def verify(self):
    """Simulates the plan for all 128 threads; raises AsyncStoreError on a defect.

    Returns a :class:`verify.Report` (bank conflicts, bytes) when it holds.
    """
    from mosaic_async_store.plan import verify  # verify imports this module's types
    report = verify.verify_plan(self)
    # A frozen plan stays verified (emit_plan does not replay it), its local form too.
    _VERIFIED.update(p for p in (self, self.local_form) if p is not None)
    return report

  def summary(self) -> str:
    lines = [f"dtype={self.dtype} shape={self.geometry.shape} "
             f"ref_shape={self.geometry.ref_shape} swizzle={self.geometry.swizzle} "
             f"target={self.target.describe()} atomic={self.atomic}",
             f"total bytes {self.total_bytes}, async (tx) bytes {self.async_bytes}, "
             f"writer threads {int(self.registers.writer.sum())}, "
             f"lane exchanges {sum(len(s.exchanges) for s in self.exchanges)}"]
    if self.register_steps:
      lines.append("  register steps: " + ", ".join(s.describe() for s in self.register_steps))
    kinds = [s.kind for s in self.address_steps]
    lines.append(f"  addresses: {kinds.count('compute')} computed bases, "
                 f"{kinds.count('xor')} xor-derived bases, "
                 f"{kinds.count('offset')} immediate reuses")
    for opcode, n in sorted(self.instruction_counts.items()):
      lines.append(f"  {n:4d} x {opcode}")
    lines += [f"  store order: {o.describe()}" for o in self.store_orders]
    if self.local_form is not None:
      lines.append("  where the target is the executing CTA at run time (%cluster_ctarank), "
                   "the local form:")
      lines += [f"  {n:4d} x {opcode}"
                for opcode, n in sorted(self.local_form.instruction_counts.items())]
    return "\n".join(lines)


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
  addresses = plan_addresses([i.dst for i in plan.instructions], geom.byte_address,
                             plan.registers.writer)
  order = base_order(addresses)
  if order != sorted(order):  # each base's stores together, then the steps again
    plan = dataclasses.replace(plan, instructions=tuple(plan.instructions[n] for n in order))
    addresses = plan_addresses([i.dst for i in plan.instructions], geom.byte_address,
                               plan.registers.writer)
  return dataclasses.replace(plan, address_steps=tuple(addresses))
