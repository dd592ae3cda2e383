"""``async_store``: the Lane-semantics asynchronous store of a FragmentedArray.

Data path: validate the Python-level inputs -> plan (pure NumPy, see
``mosaic_async_store.plan.planner``) -> verify the plan -> emit IR: lane exchanges,
``mapa`` of the buffer and the barrier, the stores, one ``arrive.expect_tx``.
"""

from __future__ import annotations

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, gpu, scf

from mosaic_async_store import compat
from mosaic_async_store.plan import validate
from mosaic_async_store.plan.dtypes import as_dtype
from mosaic_async_store.plan.ref_swizzle import SWIZZLE_UNSET, given_swizzle
from mosaic_async_store.errors import AsyncStoreError, refuse, refuse_type
from mosaic_async_store.plan.geometry import WARPGROUP_SIZE
from mosaic_async_store.lowering import ptx, target
from mosaic_async_store.lowering.ref_offset import ref_offset
from mosaic_async_store.lowering.values_ir import ValueBuilder
from mosaic_async_store.plan.plan_types import Target
from mosaic_async_store.plan.planner import check_emittable, plan_store

__all__ = ["async_store", "dtype_name", "emit_plan"]


def dtype_name(mlir_type: ir.Type, is_signed: bool | None) -> str:
  """The project's dtype name for a Mosaic element type (``i32`` + signed -> ``i32``)."""
  text = str(mlir_type)
  if isinstance(mlir_type, ir.IntegerType):
    width = ir.IntegerType(mlir_type).width
    return f"{'u' if is_signed is False else 'i'}{width}"
  return text.lower()


# One op of each dialect the emitter builds: a context without them (a bare
# ``ir.Context()``) fails or crashes deep inside IR construction.
_REQUIRED_OPS = ("arith.constant", "gpu.thread_id", "llvm.inline_asm", "scf.if",
                 "vector.extract", "memref.extract_aligned_pointer_as_index", "nvvm.mapa")
_WHERE = ("calls while a kernel body is built: an MLIR context with jax's dialects, "
          "a location and an insertion point")
_IN_KERNEL = ("call it inside the body passed to mgpu.as_gpu_kernel / a Pallas kernel "
              "(or under compat.make_ir_context(), ir.Location and ir.InsertionPoint)")


def _check_context():
  """Refuses calls outside a kernel body, before any IR is built."""
  try:
    ctx = ir.Context.current
  except ValueError:
    ctx = None
  if ctx is None:
    raise refuse("context", "none (called outside any MLIR context)", _WHERE, _IN_KERNEL)
  missing = [op for op in _REQUIRED_OPS if not ctx.is_registered_operation(op)]
  if missing:
    raise refuse("context", f"an ir.Context without the dialects of {', '.join(missing)}",
                 _WHERE + " (a bare jaxlib ir.Context() loads none)",
                 "build under compat.make_ir_context() (jax's context) or inside a kernel")
  for what, current in (("location", lambda: ir.Location.current),
                        ("insertion point", lambda: ir.InsertionPoint.current)):
    try:
      current()
    except ValueError:
      raise refuse("context", f"an MLIR context with no {what}", _WHERE, _IN_KERNEL) from None


def _check_options(expect_tx, strategy, arrival):
  """The plain-Python options that the planner does not see (it checks the rest)."""
  validate.check_flag("expect_tx", expect_tx)
  validate.check_strategy(strategy)
  validate.check_arrival(arrival, expect_tx)


def _check_same_context(param, v):
  if v.type.context != ir.Context.current:
    raise refuse(param, f"a value of type {v.type} built in another MLIR context",
                 "values of the context the kernel is being built in",
                 "build the value, ref and barrier inside the same kernel body "
                 "as the store")


def _check_ref(ref, value):
  fa = compat.fragmented_array()
  if not isinstance(value, fa.FragmentedArray):
    raise refuse_type("value", value, "an mgpu.FragmentedArray",
                      "load or compute the array in registers first")
  if not isinstance(ref, ir.Value) or not isinstance(ref.type, ir.MemRefType):
    raise refuse_type("ref", ref, "an SMEM memref ir.Value",
                      "pass a shared-memory scratch ref of the kernel")
  registers = [r for r in np.asarray(value.registers).flat if isinstance(r, ir.Value)]
  if registers:
    _check_same_context("value", registers[0])
  _check_same_context("ref", ref)
  ref_ty = ir.MemRefType(ref.type)
  if not compat.mosaic_utils().is_smem_ref(ref_ty):
    space = ref_ty.memory_space
    where = space if space is not None else "none: global memory"
    raise refuse("ref", f"{ref_ty} (memory space {where})",
                 "a ref in shared memory (#gpu.address_space<workgroup>)",
                 "store into an SMEM scratch buffer; use TMA for global memory")
  if ref_ty.element_type != value.mlir_dtype:
    raise refuse("ref", f"element type {ref_ty.element_type}",
                 f"the value's element type {value.mlir_dtype}",
                 "convert the value (astype) or use a ref of the value's dtype")
  return ref_ty


def _check_barrier(barrier):
  utils = compat.mosaic_utils()
  if isinstance(barrier, utils.DialectBarrierRef if hasattr(utils, "DialectBarrierRef") else ()):
    barrier = barrier.barrier_ref
  if not isinstance(barrier, utils.BarrierRef):
    raise refuse_type("barrier", barrier, "an mgpu.BarrierRef",
                      "pass a barrier from the kernel's scratch (e.g. bar[0])")
  if barrier.num_barriers != 1:
    raise refuse("barrier", f"BarrierRef of {barrier.num_barriers} barriers",
                  "a single barrier", "index the barrier group, e.g. barrier[0]")
  if isinstance(barrier.base_address, ir.Value):
    _check_same_context("barrier", barrier.base_address)
  return barrier


def _writer_predicate(writer: np.ndarray, tid: ir.Value) -> ir.Value | None:
  """i1 `(tid & M) == 0` selecting the writer threads, or None if all write."""
  if writer.all():
    return None
  t = np.arange(WARPGROUP_SIZE)
  mask = 0
  for b in range(7):
    if not np.any(((t >> b) & 1)[writer]):
      mask |= 1 << b
  if np.any(((t & mask) == 0) != writer):
    raise AsyncStoreError("internal planner defect (replica threads are not a "
                          "bit pattern)", param="layout", value="replicated")
  i32 = ir.IntegerType.get_signless(32)
  return arith.cmpi(arith.CmpIPredicate.eq, arith.andi(tid, arith.constant(i32, mask)),
                    arith.constant(i32, 0))


def _thread_index() -> ir.Value:
  i32 = ir.IntegerType.get_signless(32)
  tid = arith.index_cast(i32, gpu.thread_id(gpu.Dimension.x))
  return arith.andi(tid, arith.constant(i32, WARPGROUP_SIZE - 1))


def _emit_stores(plan, builder, addresses, barrier_addr):
  """Each instruction as the plan spells it (``Instruction.opcode``, state space included)."""
  for ins, (addr, imm) in zip(plan.instructions, addresses, strict=True):
    data = builder.instruction_data(ins)
    if ins.kind == "st.async":
      ptx.emit_st_async(addr, imm, builder.words(data, ins.width), ins.opcode, barrier_addr)
    elif ins.kind == "st":
      ptx.emit_st_plain(addr, imm, builder.words(data, ins.width), ins.opcode)
    elif ins.kind == "red.async":
      ptx.emit_red_async(addr, imm, builder.scalar(data, ins.width), ins.opcode, barrier_addr)
    else:
      ptx.emit_red_plain(addr, imm, builder.scalar(data, ins.width), ins.opcode)


def async_store(value, ref, barrier, *, cluster_dim=None, cluster_idx=None,
                swizzle=SWIZZLE_UNSET, tiling_rank=None, optimized=True, atomic=None,
                expect_tx=True, strategy="st.async", remote_plain_ok=True,
                arrival="thread") -> int:
  """The store behind ``mosaic_async_store.async_store``, whose docstring documents
  every parameter, what is refused, and an example (docs/api.md too).

  Validates everything before any IR is built (``_check_*``, ``given_swizzle``, the
  planner), plans and verifies, then emits through ``emit_plan``.  The target's kind
  (``target.target_kind``: the executing CTA's own SMEM, a peer's, or either depending
  on the CTA) picks the local form, the peer form, or the peer form carrying its local
  form (``StorePlan.local_form``), chosen at run time.
  """
  _check_context()
  _check_options(expect_tx, strategy, arrival)
  ref_ty = _check_ref(ref, value)
  barrier = _check_barrier(barrier)
  cluster = target.static_cluster_shape()
  target.check_cluster_args(cluster_dim, cluster_idx, cluster)
  kind = target.target_kind(cluster_dim, cluster_idx, cluster)
  strides, _ = ref_ty.get_strides_and_offset()

  # The local form (the executing CTA's own SMEM, no mapa) where the target is
  # always the executing CTA; the peer form where it never is; where it is in some
  # CTAs, the peer form, which for a reduction carries its local form, chosen at run
  # time (``Target.may_be_own``, ``StorePlan.local_form``): red.async is undefined
  # there, and a plain red.shared::cluster far dearer than red.shared::cta.
  where = Target(peer=kind != "local", cluster_dim=cluster_dim, cluster_idx=cluster_idx,
                 cluster_shape=cluster, may_be_own=kind == "either")
  dtype = dtype_name(value.mlir_dtype, value.is_signed)
  swizzle = given_swizzle(swizzle, tuple(value.shape), tuple(ref_ty.shape), tuple(strides),
                          as_dtype(dtype).bits)
  plan = plan_store(value.layout, value.shape, dtype, swizzle=swizzle,
                    tiling_rank=tiling_rank, optimized=optimized, atomic=atomic,
                    ref_shape=tuple(ref_ty.shape), ref_strides=tuple(strides),
                    plain_stores=strategy == "plain", target=where)
  plan.verify()
  local_form = plan.local_form
  if not remote_plain_ok and plan.peer and plan.needs_release_arrive:
    raise refuse(*(("atomic", atomic) if atomic else ("strategy", strategy)
                   if strategy == "plain" else ("dtype", plan.dtype.name)),
                 "a store into a peer that st.async/red.async complete entirely: this "
                 f"{plan.dtype.name} store puts plain st/red .shared::cluster into the "
                 "peer, ordered only by a .release.cluster arrive, and an .acquire.cta wait "
                 "(Pallas' barrier_wait) does not synchronize with it (PTX ISA: morally "
                 "strong operations)",
                 "call mosaic_async_store.pallas.install() first: its barrier_wait waits "
                 "at cluster scope (a Mosaic kernel: wait with mas.wait and pass "
                 "remote_plain_ok=True)")
  if local_form is not None and not expect_tx and local_form.async_bytes != plan.async_bytes:
    raise refuse("expect_tx", False,
                 "True for this store: its target may be the executing CTA at run time, "
                 f"where plain reductions complete {local_form.async_bytes} tx bytes "
                 f"instead of red.async's {plan.async_bytes}, so no caller can "
                 "announce the count",
                 "pass expect_tx=True (the default), or a cluster_idx that is always "
                 "another CTA, e.g. (gpu.cluster_block_id(dim) + 1) % n")
  plans = [p for p in (local_form, plan) if p is not None]
  # An explicit strategy="plain" caller orders its own stores (a fence, a
  # barrier); otherwise plain pieces need the release arrive to be seen.
  if not expect_tx and strategy != "plain" and any(p.needs_release_arrive for p in plans):
    raise refuse("expect_tx", False,
                 "True for this store: part of it uses plain st/red .shared::cluster "
                 "that only the release arrive orders before the barrier",
                 "pass expect_tx=True (the default)")
  offset, step = ref_offset(ref)
  validate.check_ref_offset(offset, step, plan.dtype.bits, plan.geometry.swizzle,
                            max(p.widest for p in plans))
  return emit_plan(plan, value.registers, ref, barrier, expect_tx, arrival)


def _emit_elected_arrive(plan, bar, tid, arrival):
  """One arrival for the warpgroup, by thread 0, announcing every thread's tx bytes.

  The warpgroup barrier (upstream's ``warpgroup_barrier``: ``bar.sync 1 + wg, 128``)
  makes every thread's stores happen before thread 0's arrive, whose
  ``.release.cluster`` (plans with plain pieces) then releases them to the
  target CTA by cumulativity.  For a tensor-core barrier,
  ``tcgen05.fence::before_thread_sync`` first orders this warpgroup's earlier
  tcgen05 operations before the barrier, as upstream's ``arrive_expect_tx``
  with a ``tensor_core_order_scope`` does."""
  i32 = ir.IntegerType.get_signless(32)
  tx = sum(plan.bytes_for_thread(t) for t in range(WARPGROUP_SIZE))
  assert tx == plan.async_bytes, (tx, plan.async_bytes)
  if arrival == "tensor_core":
    ptx.emit_tcgen05_fence_before_thread_sync()
  compat.mosaic_utils().warpgroup_barrier()
  elected = scf.IfOp(arith.cmpi(arith.CmpIPredicate.eq, tid, arith.constant(i32, 0)))
  with ir.InsertionPoint(elected.then_block):
    ptx.emit_arrive_expect_tx(bar, arith.constant(i32, tx),
                              release_cluster=plan.needs_release_arrive, peer=plan.peer)
    scf.yield_([])


def _emit_form(plan, builder, base, bar, tid, expect_tx, arrival="thread"):
  """The stores of one verified plan from ``base``, and the arrival on ``bar``:
  each thread's (``arrival="thread"``) or the warpgroup's elected one."""
  i32 = ir.IntegerType.get_signless(32)
  writer = _writer_predicate(plan.registers.writer, tid)
  if writer is None:
    _emit_stores(plan, builder, target.emit_addresses(plan, base, tid), bar)
  else:
    if_op = scf.IfOp(writer)
    with ir.InsertionPoint(if_op.then_block):
      _emit_stores(plan, builder, target.emit_addresses(plan, base, tid), bar)
      scf.yield_([])
  if expect_tx and arrival != "thread":
    _emit_elected_arrive(plan, bar, tid, arrival)
  elif expect_tx:
    nbytes = plan.bytes_for_thread(int(np.flatnonzero(plan.registers.writer)[0]))
    tx = arith.constant(i32, nbytes)
    if writer is not None:
      tx = arith.select(writer, tx, arith.constant(i32, 0))
    ptx.emit_arrive_expect_tx(bar, tx, release_cluster=plan.needs_release_arrive,
                              peer=plan.peer)


def _builder(plan, registers, tid):
  lane = arith.andi(tid, arith.constant(ir.IntegerType.get_signless(32), 31))
  builder = ValueBuilder(plan, registers, lane)
  builder.prepare()  # every lane must take part in the shuffles
  return builder


def emit_plan(plan, registers, ref, barrier, expect_tx=True, arrival="thread"):
  """Emits IR for a verified plan into ``plan.target``; returns its total bytes.

  ``registers`` are the FragmentedArray's registers, ``ref`` and ``barrier`` the
  executing CTA's (a peer target's copies are reached with ``mapa``, its rank
  formed from the target's cluster dimension, index and shape).  ``expect_tx`` is
  whether anyone arrives ((False) nothing is announced and the caller accounts
  for the returned count), ``arrival`` who (``async_store``'s parameter).

  With ``arrival="thread"`` every thread of the warpgroup arrives exactly once
  on the target barrier with the bytes its own asynchronous instructions
  complete (0 for threads that write nothing): Pallas initialises a plain
  barrier with 128 arrivals per ``num_arrivals`` under Lane and Warpgroup
  semantics alike, and upstream's own Warpgroup rule also arrives from every
  thread.  An ``orders_tensor_core`` barrier keeps its count (one arrival per
  store): ``arrival="tensor_core"``.

  A plan with a local form (``StorePlan.local_form``: the target may be the
  executing CTA at run time) emits ``scf.if (target rank == %cluster_ctarank)``:
  the local form, else ``mapa`` and the plan.  Each arm's threads arrive once on
  the target barrier (the executing CTA's own in the local arm) with exactly the
  tx bytes that arm's asynchronous instructions complete: none for the local
  arm's plain reductions, which its ``.release.cluster`` arrive orders instead.
  """
  validate.check_arrival(arrival, expect_tx)
  check_emittable(plan)
  utils = compat.mosaic_utils()
  tid = _thread_index()
  forms = [p for p in (plan.local_form, plan) if p is not None]
  builders = [_builder(p, registers, tid) for p in forms]
  base = target.smem_address(utils.memref_ptr(ref))
  bar = target.smem_address(barrier.get_ptr())
  if plan.local_form is None:
    if plan.target.peer:
      rank = _target_rank(plan.target)
      base, bar = ptx.emit_mapa(base, rank), ptx.emit_mapa(bar, rank)
    _emit_form(plan, builders[0], base, bar, tid, expect_tx, arrival)
    return plan.total_bytes
  rank = _target_rank(plan.target)
  if_op = scf.IfOp(target.is_own_rank(rank), has_else=True)
  with ir.InsertionPoint(if_op.then_block):
    _emit_form(plan.local_form, builders[0], base, bar, tid, expect_tx, arrival)
    scf.yield_([])
  with ir.InsertionPoint(if_op.else_block):
    _emit_form(plan, builders[1], ptx.emit_mapa(base, rank), ptx.emit_mapa(bar, rank),
               tid, expect_tx, arrival)
    scf.yield_([])
  return plan.total_bytes


def _target_rank(where) -> ir.Value:
  """The i32 rank of a plan's target CTA in the cluster."""
  return target.target_rank(where.cluster_dim, where.cluster_idx, where.cluster_shape)
