"""Pallas MGPU: barrier rules that order at cluster scope, which ``install()`` registers.

``cluster_wait_rule``: ``plgpu.barrier_wait`` polling with ``.acquire.cluster``.
``cluster_arrive_rule``: an arrive on a ``plgpu.ClusterBarrier`` that releases at
cluster scope.

The usual way to make a peer CTA's SMEM ready before reducing into it is a
``plgpu.ClusterBarrier``: every thread fills its SMEM with plain stores, then
``plgpu.barrier_arrive(b)`` and ``plgpu.barrier_wait(b)``.  Upstream lowers that
arrive (``CollectiveBarrierRef.arrive``) as one elected thread per warpgroup
and collective CTA, ``mapa`` + ``mbarrier.arrive.shared::cluster.b64``, with no
thread barrier before it and the default ``.release.cta``.  So the other
threads' fill is released by nothing, and even the elected thread's release is
not morally strong with a wait in another CTA (PTX ISA, Memory Consistency
Model: "Morally strong operations"): the peer's ``red.async`` into that SMEM
races the fill.

``cluster_arrive_rule`` is the rule that ``install()`` (lowering/pallas.py)
registers for ``barrier_arrive`` in upstream's place.  On a ``ClusterBarrier``
it arrives exactly as upstream's does (same elected threads, same CTAs, same
count), after a warpgroup barrier (``bar.sync 1 + warpgroup, 128``) and with
``.release.cluster``: every thread of the warpgroup's earlier accesses happen
before the elected arrive, which releases them to every CTA of the cluster by
cumulativity.  ``install()``'s ``barrier_wait`` acquires at cluster scope, so
the pair synchronizes.  Each warpgroup arrives once (Pallas counts a cluster
barrier's ``num_arrivals`` in warpgroups), so the barrier before the arrive is
the warpgroup's, not the whole CTA's: a CTA-wide ``bar.sync 0`` would hang a
kernel in which only some warpgroups arrive.  Every other barrier, and the
Warp-primitive semantics (which upstream refuses for a cluster barrier), keep
upstream's rule.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, llvm

from mosaic_async_store import compat
from mosaic_async_store.lowering import debug, ptx

__all__ = ["cluster_arrive_rule", "cluster_wait_rule", "CLUSTER_ARRIVE"]

# The elected arrive on each collective CTA's barrier: upstream's inline PTX,
# with .release.cluster where upstream's has the default .release.cta.
CLUSTER_ARRIVE = "mbarrier.arrive.release.cluster.shared::cluster.b64"
_ARRIVE_ASM = f"""
    {{
        .reg .b32 mapped_addr;
        @$0 mapa.shared::cluster.u32 mapped_addr, $1, $2;
        @$0 {CLUSTER_ARRIVE} _, [mapped_addr];
    }}"""


def cluster_arrive_rule(upstream_rule):
  """Pallas' ``barrier_arrive`` rule, with a cluster-scope release on a ClusterBarrier.

  ``upstream_rule`` is the rule it replaces for one (lowering, primitive)
  semantics; it still lowers every barrier that is not a ClusterBarrier, and
  every arrive under Warp-primitive semantics.
  """
  p = compat.pallas_internals()

  def rule(ctx, barrier, *flat_args, transforms_treedef, **params):
    aval = ctx.avals_in[0]
    if (not isinstance(aval.inner_aval.dtype, p.gpu_core.ClusterBarrierType)
        or ctx.module_ctx.primitive_semantics == p.gpu_core.PrimitiveSemantics.Warp):
      return upstream_rule(ctx, barrier, *flat_args, transforms_treedef=transforms_treedef,
                           **params)
    flat_transforms, predicate = compat.barrier_arrive_operands(flat_args, params)
    base = p.primitives._get_barrier_base_index(aval,
                                                transforms_treedef.unflatten(flat_transforms))
    if base is not None:
      barrier = barrier[base]
    _arrive(barrier, tensor_core=getattr(aval.inner_aval.dtype, "orders_tensor_core", False),
            predicate=predicate)
    return ()
  return rule


def _arrive(collective, *, tensor_core: bool, predicate: ir.Value | None) -> None:
  """The arrive of one warpgroup on ``collective`` (upstream's ``CollectiveBarrierRef``)."""
  utils = compat.mosaic_utils()
  if collective.barrier.num_barriers != 1:
    raise ValueError("Can only arrive on a single barrier")   # as upstream's arrive
  i32 = ir.IntegerType.get_signless(32)
  if tensor_core:   # orders this warpgroup's tcgen05 work before the thread barrier
    ptx.emit_tcgen05_fence_before_thread_sync()
  # Every thread's earlier accesses happen before the elected thread's arrive.
  utils.warpgroup_barrier()
  if collective.cluster_mask is None:
    # Every collective axis has one CTA: the barrier is this CTA's own, so a
    # .cta release reaches every waiter; upstream's local arrive by thread 0.
    elected = utils.single_thread_predicate(utils.ThreadSubset.WARPGROUP)
    if predicate is not None:
      elected = arith.andi(predicate, elected)
    collective.barrier.arrive(predicate=elected)
    return
  # Upstream's election: thread 8k of the warpgroup arrives on CTA k's barrier
  # when CTA k is in the collective mask (up to 16 CTAs).
  per_block = utils.WARPGROUP_SIZE // 16
  thread = arith.remui(utils.thread_idx(), arith.constant(i32, utils.WARPGROUP_SIZE))
  block = arith.divui(thread, arith.constant(i32, per_block))
  in_mask = arith.cmpi(arith.CmpIPredicate.ne,
                       arith.andi(collective.cluster_mask,
                                  arith.shli(arith.constant(i32, 1), block)),
                       arith.constant(i32, 0))
  signals = arith.cmpi(arith.CmpIPredicate.eq,
                       arith.remui(thread, arith.constant(i32, per_block)),
                       arith.constant(i32, 0))
  should_arrive = arith.andi(in_mask, signals)
  if predicate is not None:
    should_arrive = arith.andi(predicate, should_arrive)
  llvm.inline_asm(ir.Type.parse("!llvm.void"),
                  [should_arrive, collective.barrier.get_ptr(), block],
                  _ARRIVE_ASM, "b,r,r", has_side_effects=True)


def cluster_wait_rule(_upstream_rule):
  """Pallas' ``barrier_wait`` rule, waiting with ``.acquire.cluster`` (``install()``,
  lowering/pallas.py, registers it).

  It does what upstream's rule (and ``BarrierRef.wait``) does: pick the
  barrier, flip its phase bit, poll until that phase completes.  Only the
  poll differs: ``mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64``
  instead of upstream's unqualified form, which is ``.acquire.cta`` (PTX ISA,
  mbarrier.try_wait: absent .sem means .acquire, absent .scope means .cta).
  An ``orders_tensor_core`` barrier's wait is followed, as upstream's is, by
  ``tcgen05.fence::after_thread_sync`` (later tcgen05 operations after the wait).
  It replaces upstream's rule (``_upstream_rule``) for every barrier.
  """
  def rule(ctx, barrier, *flat_transforms, transforms_treedef):
    utils, _p = compat.mosaic_utils(), compat.pallas_internals()
    aval = ctx.avals_in[0]
    tensor_core = getattr(aval.inner_aval.dtype, "orders_tensor_core", False)
    base = _p.primitives._get_barrier_base_index(aval,
                                                 transforms_treedef.unflatten(flat_transforms))
    if base is not None:
      barrier = barrier[base]
    if isinstance(barrier, utils.DialectBarrierRef):
      barrier = barrier.barrier_ref
    elif isinstance(barrier, utils.CollectiveBarrierRef):
      barrier = barrier.barrier
    if barrier._ptx_scope != "cta":
      raise ValueError("Can only await on CTA-local barriers")  # as upstream's wait_parity
    debug.wait(barrier, debug=False)   # mas.wait: upstream's loop, cluster-scoped
    if tensor_core:
      ptx.emit_tcgen05_fence_after_thread_sync()
    return ()
  return rule
