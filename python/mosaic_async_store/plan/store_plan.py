"""The store plan: the data ``plan_store`` returns and the emitter turns into IR.

A :class:`StorePlan` is pure data (no MLIR context, no GPU): the registers, the
values and lane exchanges, the instructions, the address steps, the store orders,
and, where a reduction's target may be the executing CTA, its local form.
``verify()`` checks it byte by byte (``plan/verify.py``); ``check_emittable`` is
what the emitter asks before it emits one.
"""

from __future__ import annotations

import dataclasses
import functools
import weakref

import numpy as np

from mosaic_async_store.errors import refuse, refuse_type
from mosaic_async_store.plan import validate
from mosaic_async_store.plan.address_steps import AddressStep
from mosaic_async_store.plan.dtypes import DType
from mosaic_async_store.plan.geometry import RefGeometry, RegisterMap
from mosaic_async_store.plan.plan_types import (Instruction, LaneExchange, StoreOrder, Target,
                                               Value)
from mosaic_async_store.plan.register_steps import ByteRegroup, Gather
from mosaic_async_store.plan.verify import verify_plan

__all__ = ["StorePlan", "plan_verified", "check_emittable"]


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
    report = verify_plan(self)
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
    split = sum(s.kind == "xor" and s.low_mask != 0 for s in self.address_steps)
    lines.append(f"  addresses: {kinds.count('compute')} computed bases, "
                 f"{kinds.count('xor')} xor-derived bases"
                 + (f" ({split} from shared high and low parts)" if split else "")
                 + f", {kinds.count('offset')} immediate reuses")
    for opcode, n in sorted(self.instruction_counts.items()):
      lines.append(f"  {n:4d} x {opcode}")
    lines += [f"  store order: {o.describe()}" for o in self.store_orders]
    if self.local_form is not None:
      lines.append("  where the target is the executing CTA at run time (%cluster_ctarank), "
                   "the local form:")
      lines += [f"  {n:4d} x {opcode}"
                for opcode, n in sorted(self.local_form.instruction_counts.items())]
    return "\n".join(lines)
