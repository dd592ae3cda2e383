"""Pallas MGPU integration: our primitive, its lowering rules, and the install switch.

* ``async_store_smem_p``: a primitive with upstream's parameters, lowered under
  Lane semantics straight through ``async_store`` and under Warpgroup semantics
  as the dialect op ``mosaic_gpu.async_store_smem`` marked for this project.
* The dialect op's lowering (after layout inference) is replaced by a
  dispatcher: marked ops, or every op after ``install()``, take this
  project's path; others keep upstream's.
* ``install()`` also points upstream's ``plgpu.async_store_smem`` primitive at
  the same rules, so existing kernels gain every dtype and atomic unchanged,
  and Pallas' ``barrier_wait`` at a rule that waits with a cluster-scope
  acquire, which the plain pieces of a store into a peer need (float
  reductions: ``red.shared::cluster`` ordered by a ``.release.cluster``
  arrive).  Without install(), such stores are refused (docs/pallas.md).
"""

from __future__ import annotations


from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, memref

from mosaic_async_store import compat
from mosaic_async_store.errors import AsyncStoreError, refuse
from mosaic_async_store.lowering import ptx, target
from mosaic_async_store.lowering.store import async_store

__all__ = ["async_store_smem_p", "install", "uninstall", "is_installed", "MARK"]

MARK = "mas.async_store"          # unit attribute on dialect ops we lower
_OP = "mosaic_gpu.async_store_smem"
_state = {"installed": False, "originals": None}


def _p():
  return compat.pallas_internals()


def _abstract_eval(src, ref, barrier, cluster_idx, *flat_transforms_avals,
                   ref_transforms_treedef, barrier_transforms_treedef, **params):
  """Shape/dtype/barrier checks with messages that say what to change."""
  p = _p()
  ref_avals, bar_avals = p.util.split_list(flat_transforms_avals,
                                           [ref_transforms_treedef.num_leaves])
  target = p.pallas_core.TransformedRef(ref, ref_transforms_treedef.unflatten(ref_avals))
  if src.shape != target.shape:
    raise TypeError(f"async_store_smem: src has shape {src.shape} but ref has shape "
                    f"{target.shape}; allowed: equal shapes. Fix: slice the ref "
                    f"(ref.at[...]) or reshape the value")
  if src.dtype != target.dtype:
    raise TypeError(f"async_store_smem: src has dtype {src.dtype} but ref has dtype "
                    f"{target.dtype}; allowed: equal dtypes. Fix: src.astype("
                    f"{target.dtype}) or a ref of dtype {src.dtype}")
  bar = p.pallas_core.TransformedRef(barrier, barrier_transforms_treedef.unflatten(bar_avals))
  if bar.size != 1:
    raise TypeError(f"async_store_smem: barrier holds {bar.size} barriers; allowed: one. "
                    "Fix: index it, e.g. barrier.at[0]")
  dtype = getattr(barrier, "dtype", None)
  if isinstance(dtype, p.gpu_core.BarrierType) and dtype.orders_tensor_core:
    raise refuse("barrier", "Barrier(orders_tensor_core=True)",
                 "a plain plgpu.Barrier: an orders_tensor_core barrier counts one "
                 "arrival per warpgroup even under Lane semantics, so the 128 "
                 "per-thread arrivals of this store would overrun its phase",
                 "allocate plgpu.Barrier(num_arrivals=<stores per phase>)")
  if not src.shape:
    raise TypeError("async_store_smem: src is a scalar; allowed: arrays of rank >= 1. "
                    "Fix: broadcast it, e.g. jnp.full((128,), x)")
  from mosaic_async_store import validate
  from mosaic_async_store.dtypes import as_dtype
  dt = as_dtype(src.dtype, "src")
  validate.check_flag("optimized", params["optimized"])
  validate.check_atomic(params["atomic"], dt, peer=True)
  idx = getattr(cluster_idx, "dtype", None)
  if idx is not None and (not _is_integer_dtype(idx) or getattr(cluster_idx, "shape", ())):
    raise TypeError(str(refuse(
        "cluster_idx", f"<array> of dtype {idx} and shape {tuple(cluster_idx.shape)}",
        "an integer scalar", "pass a scalar index, e.g. idx.astype(jnp.int32)")))
  del params
  return (), {p.gpu_core._memory_effect, p.state.WriteEffect(1)}


def _is_integer_dtype(dtype) -> bool:
  import numpy as np
  return bool(np.issubdtype(dtype, np.integer))


def _make_primitive():
  p = _p()
  prim = p.jax_core.Primitive("mas_async_store_smem")
  prim.multiple_results = True
  prim.def_effectful_abstract_eval(_abstract_eval)
  return prim


async_store_smem_p = _make_primitive()


def _unpack(ctx, ref, barrier, flat_transforms, ref_treedef, bar_treedef):
  """Applies the ref's Pallas transforms; returns (ref, swizzle, tiling_rank, barrier)."""
  p = _p()
  flat_ref_t, flat_bar_t = p.util.split_list(flat_transforms, [ref_treedef.num_leaves])
  ref_t_avals, _ = p.util.split_list(ctx.avals_in[4:], [ref_treedef.num_leaves])
  ref_smem, _, remaining = p.lowering._handle_transforms(
      ctx, ctx.avals_in[1], ref, ref_treedef.unflatten(ref_t_avals),
      ref_treedef.unflatten(flat_ref_t), handle_transposes=True)
  base = p.primitives._get_barrier_base_index(ctx.avals_in[2], bar_treedef.unflatten(flat_bar_t))
  if base is not None:
    barrier = barrier[base]
  return ref_smem, remaining, barrier


def _swizzle_tiling(remaining):
  p = _p()
  match tuple(remaining):
    case (p.gpu_core.UnswizzleRef(swizzle), p.gpu_core.UntilingTransform(tiling)):
      return int(swizzle), len(tiling)
    case (p.gpu_core.UntilingTransform(tiling),):
      return None, len(tiling)
    case ():
      return None, None
  raise refuse("ref", f"transforms {remaining}",
               "a plain SMEM ref or one with TilingTransform (+ SwizzleTransform)",
               "store into a ref allocated with plgpu.TilingTransform/SwizzleTransform")


def _lane_rule(ctx, src, ref, barrier, cluster_idx, *flat_transforms, ref_transforms_treedef,
               barrier_transforms_treedef, cluster_dim, optimized, atomic):
  p = _p()
  ref_smem, remaining, barrier = _unpack(ctx, ref, barrier, flat_transforms,
                                         ref_transforms_treedef, barrier_transforms_treedef)
  swizzle, tiling_rank = _swizzle_tiling(remaining)
  dim = p.lowering._resolve_cluster_axis(ctx.module_ctx.axis_names, cluster_dim)
  value = p.lowering._ensure_fa(src, ctx.avals_in[0].dtype)
  async_store(value, ref_smem, barrier, cluster_dim=dim,
              cluster_idx=p.lowering._as_index(cluster_idx), swizzle=swizzle,
              tiling_rank=tiling_rank, optimized=optimized, atomic=atomic,
              remote_plain_ok=_state["installed"])
  return ()


def _warpgroup_rule(ctx, src, ref, barrier, cluster_idx, *flat_transforms,
                    ref_transforms_treedef, barrier_transforms_treedef, cluster_dim,
                    optimized, atomic):
  p, mgpu = _p(), compat.mosaic_gpu()
  ref_smem, remaining, barrier = _unpack(ctx, ref, barrier, flat_transforms,
                                         ref_transforms_treedef, barrier_transforms_treedef)
  if remaining:
    raise refuse("ref", f"transforms {remaining}", "transforms Pallas folds into the ref",
                 "report this kernel")
  dim = p.lowering._resolve_cluster_axis(ctx.module_ctx.axis_names, cluster_dim)
  idx = arith.index_cast(ir.IntegerType.get_signless(32), p.lowering._as_index(cluster_idx))
  # Our parameters ride on discardable attributes: the dialect's atomic enum
  # lacks inc/dec, and Warpgroup vectors are signless, so the jax dtype's
  # signedness (needed for min/max) would otherwise be lost.
  op = mgpu.dialect.async_store_smem(src, ref_smem, barrier.as_barrier_memref(), dim.value,
                                     idx, atomic_type=None, optimized=optimized)
  op = getattr(op, "operation", op)
  _mark(op, atomic, ctx.avals_in[0].dtype)
  return ()


def _mark(op, atomic, dtype) -> None:
  import numpy as np
  op.attributes[MARK] = ir.UnitAttr.get()
  op.attributes["mas.signed"] = ir.BoolAttr.get(bool(np.issubdtype(dtype, np.signedinteger)))
  if atomic is not None:
    op.attributes["mas.atomic"] = ir.StringAttr.get(atomic)


def _is_ours(op) -> bool:
  return _state["installed"] or MARK in op.attributes


def _upstream_atomic(op):
  if op.atomic_type is None:
    return None
  return str(_p().dialect_lowering.mgpu.AtomicOpType(op.atomic_type.value))


def _dialect_rule(ctx, op):
  """Lowers ``mosaic_gpu.async_store_smem`` (after layout inference) through async_store."""
  from jaxlib.mlir.dialects import gpu
  p, utils = _p(), compat.mosaic_utils()
  dl = p.dialect_lowering
  attrs = op.operation.attributes
  signed = ir.BoolAttr(attrs["mas.signed"]).value if "mas.signed" in attrs else True
  [layout] = p.inference_utils.in_layouts(op)
  value = dl._fragmented_array_from_ir(
      op.valueToStore, layout,
      is_signed=signed if isinstance(ir.VectorType(op.valueToStore.type).element_type,
                                     ir.IntegerType) else None)
  swizzle, tiling_rank, ref = None, None, op.destination
  if "in_transforms" in attrs:
    transforms = p.inference_utils.in_transforms(op)[0]
    sw = dl.swizzle_from_transforms_attr(transforms)
    swizzle = None if sw == dl.mgpu.SwizzlingMode.kNoSwizzle else int(sw.value)
    ref = dl.unwrap_transformed_memref(op.destination, transforms)
    tiling = [t for t in dl.memref_transforms_from_transforms_attr(transforms)
              if hasattr(t, "tiling")]
    tiling_rank = len(tiling[0].tiling) if tiling else None
  barrier = utils.DialectBarrierRef.from_barrier_memref(op.barrier).barrier_ref
  atomic = ir.StringAttr(attrs["mas.atomic"]).value if "mas.atomic" in attrs else _upstream_atomic(op)
  optimized = op.optimized.value if op.optimized is not None else None
  kwargs = dict(cluster_dim=gpu.Dimension(op.cluster_dim.value),
                cluster_idx=arith.index_cast(ir.IndexType.get(), op.cluster_idx),
                swizzle=swizzle, tiling_rank=tiling_rank, atomic=atomic,
                remote_plain_ok=_state["installed"])
  try:
    async_store(value, ref, barrier, optimized=optimized is not False, **kwargs)
  except AsyncStoreError as e:
    if optimized is not None or e.param != "optimized":
      raise
    async_store(value, ref, barrier, optimized=False, **kwargs)  # upstream's "downgradable"
  return []


def _dispatch(ours, original):
  def rule(ctx, op):
    return (ours if _is_ours(op.operation if hasattr(op, "operation") else op) else original)(ctx, op)
  return rule


def _register_dialect_rules() -> None:
  """Puts dispatchers in front of upstream's rules for the dialect op (once)."""
  if _state["originals"] is not None:
    return
  # Layout inference keeps upstream's rule: the layouts it admits for this op
  # (WGMMA even for 8- and 4-bit data) are all ones this store handles.
  lower_table = compat.dialect_lowering_table()
  _state["originals"] = {"lower": lower_table[_OP]}
  lower_table[_OP] = _dispatch(_dialect_rule, _state["originals"]["lower"])



def _register_primitive_rules(prim, table_rules=None) -> dict:
  mgpu = compat.mosaic_gpu()
  saved = {}
  for sem, rule in ((mgpu.LoweringSemantics.Lane, _lane_rule),
                    (mgpu.LoweringSemantics.Warpgroup, _warpgroup_rule)):
    table = compat.lowering_rule_table(sem)
    saved[sem] = table.get(prim)
    table[prim] = rule if table_rules is None else table_rules[sem]
  return saved


_register_dialect_rules()
_register_primitive_rules(async_store_smem_p)

# Upstream's BarrierRef.wait polls mbarrier.try_wait.parity with a suspend-time hint.
_WAIT_TICKS = 10_000_000


def _cluster_wait_rule(original):
  """Pallas' ``barrier_wait`` rule, waiting with ``.acquire.cluster`` (see install()).

  It does what upstream's rule (and ``BarrierRef.wait``) does: pick the
  barrier, flip its phase bit, poll until that phase completes.  Only the
  poll differs: ``mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64``
  instead of upstream's unqualified form, which is ``.acquire.cta`` (PTX ISA,
  mbarrier.try_wait: absent .sem means .acquire, absent .scope means .cta).
  ``orders_tensor_core`` barriers keep upstream's rule (its tcgen05 fence).
  """
  def rule(ctx, barrier, *flat_transforms, transforms_treedef):
    p, utils = _p(), compat.mosaic_utils()
    aval = ctx.avals_in[0]
    if getattr(aval.inner_aval.dtype, "orders_tensor_core", False):
      return original(ctx, barrier, *flat_transforms, transforms_treedef=transforms_treedef)
    base = p.primitives._get_barrier_base_index(aval, transforms_treedef.unflatten(flat_transforms))
    if base is not None:
      barrier = barrier[base]
    if isinstance(barrier, utils.DialectBarrierRef):
      barrier = barrier.barrier_ref
    elif isinstance(barrier, utils.CollectiveBarrierRef):
      barrier = barrier.barrier
    if barrier._ptx_scope != "cta":
      raise ValueError("Can only await on CTA-local barriers")  # as upstream's wait_parity
    parity, flipped = barrier.update_parities(memref.load(barrier.phases, []))
    memref.store(flipped, barrier.phases, [])
    i32 = ir.IntegerType.get_signless(32)
    ptx.emit_wait_parity_cluster(target.smem_address(barrier.get_ptr()),
                                 arith.extui(i32, parity), arith.constant(i32, _WAIT_TICKS))
    return ()
  return rule


def _route_barrier_wait(saved=None) -> dict:
  """Points ``barrier_wait`` at the cluster-scope rule in every table upstream
  registers it in (Lane, Warpgroup and the Warp-primitive combinations), or back
  to ``saved``; returns the rules that were there."""
  prim = _p().primitives.barrier_wait_p
  old = {}
  for key, table in compat.rule_tables_with(prim).items():
    old[key] = table[prim]
    table[prim] = _cluster_wait_rule(table[prim]) if saved is None else saved[key]
  return old


def install() -> None:
  """Routes upstream's ``plgpu.async_store_smem`` and its dialect op through this
  project, and ``plgpu.barrier_wait`` through a wait with cluster-scope acquire.

  Idempotent; ``uninstall()`` restores upstream's rules.
  """
  if _state["installed"]:
    return
  _state["upstream_rules"] = _register_primitive_rules(_p().primitives.async_store_smem_p)
  _state["wait_rules"] = _route_barrier_wait()
  _state["installed"] = True


def uninstall() -> None:
  """Undoes install(); a no-op when not installed."""
  if not _state["installed"]:
    return
  prim = _p().primitives.async_store_smem_p
  _register_primitive_rules(prim, table_rules=_state.pop("upstream_rules"))
  _route_barrier_wait(saved=_state.pop("wait_rules"))
  _state["installed"] = False


def is_installed() -> bool:
  return _state["installed"]
