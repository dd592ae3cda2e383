"""Pallas MGPU: this project's ``async_store_smem``, its rules, and ``install()``.

One module, in upstream's recipe (``jax/_src/pallas/mosaic_gpu/primitives.py``):

* ``async_store_smem_p``: a primitive with upstream's parameters; its abstract
  evaluation checks the avals and the static parameters.
* its lowering rules, registered with upstream's decorator: Lane semantics
  straight through ``async_store``; Warpgroup semantics as the dialect op
  ``mosaic_gpu.async_store_smem`` marked for this project.  That op's lowering
  (after layout inference) is a dispatcher registered in upstream's place:
  marked ops, or every op after ``install()``, take this project's path;
  others keep upstream's rule.
* ``async_store_smem``: the wrapper, upstream's signature; it checks what the
  avals lose (the kinds of its Python arguments) and binds.
* ``install()`` points upstream's ``plgpu.async_store_smem`` primitive at the
  same rules, so existing kernels gain every dtype and atomic unchanged, and
  ``plgpu.barrier_wait`` at a rule that waits with a cluster-scope acquire,
  which the plain pieces of a store into a peer need (float reductions:
  ``red.shared::cluster`` ordered by a ``.release.cluster`` arrive; without
  install(), such stores are refused: docs/pallas.md), and ``plgpu.barrier_arrive``
  on a ``ClusterBarrier`` at a rule that releases at cluster scope (both rules in
  lowering/pallas_barriers.py).  ``uninstall()`` registers upstream's rules again.

The public face is ``mosaic_async_store.pallas``, which imports this module
(and with it jax's Pallas) on first use.
"""

from __future__ import annotations

from typing import Hashable

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, gpu

from mosaic_async_store import compat
from mosaic_async_store.plan import validate
from mosaic_async_store.plan.dtypes import as_dtype
from mosaic_async_store.plan.ref_swizzle import SWIZZLE_UNSET
from mosaic_async_store.errors import AsyncStoreError, refuse, refuse_type
from mosaic_async_store.lowering import pallas_barriers, pallas_layouts
from mosaic_async_store.lowering.store import async_store

__all__ = ["async_store_smem", "async_store_smem_p", "install", "uninstall", "is_installed",
           "MARK", "retries_unoptimized"]

_p = compat.pallas_internals()
_LANE = compat.mosaic_gpu().LoweringSemantics.Lane
_WG = compat.mosaic_gpu().LoweringSemantics.Warpgroup
_WG_PRIMITIVE = _p.gpu_core.PrimitiveSemantics.Warpgroup

MARK = "mas.async_store"          # unit attribute on dialect ops we lower
_OP = "mosaic_gpu.async_store_smem"
_state = {"installed": False}

async_store_smem_p = _p.jax_core.Primitive("mas_async_store_smem")
async_store_smem_p.multiple_results = True


@async_store_smem_p.def_effectful_abstract_eval
def _async_store_smem_abstract_eval(src, ref, barrier, cluster_idx, *flat_transforms_avals,
                                    ref_transforms_treedef, barrier_transforms_treedef,
                                    cluster_dim, optimized, atomic):
  """Shape, dtype, barrier and parameter checks with messages that say what to change."""
  del cluster_idx, cluster_dim  # the wrapper checks them: their Python kinds are lost here
  ref_avals, bar_avals = _p.util.split_list(flat_transforms_avals,
                                            [ref_transforms_treedef.num_leaves])
  dst = _p.pallas_core.TransformedRef(ref, ref_transforms_treedef.unflatten(ref_avals))
  if src.shape != dst.shape:
    raise TypeError(f"async_store_smem: src has shape {src.shape} but ref has shape "
                    f"{dst.shape}; allowed: equal shapes. Fix: slice the ref "
                    f"(ref.at[...]) or reshape the value")
  if src.dtype != dst.dtype:
    raise TypeError(f"async_store_smem: src has dtype {src.dtype} but ref has dtype "
                    f"{dst.dtype}; allowed: equal dtypes. Fix: src.astype("
                    f"{dst.dtype}) or a ref of dtype {src.dtype}")
  bar = _p.pallas_core.TransformedRef(barrier, barrier_transforms_treedef.unflatten(bar_avals))
  if bar.size != 1:
    raise TypeError(f"async_store_smem: barrier holds {bar.size} barriers; allowed: one. "
                    "Fix: index it, e.g. barrier.at[0]")
  if not src.shape:
    raise TypeError("async_store_smem: src is a scalar; allowed: arrays of rank >= 1. "
                    "Fix: broadcast it, e.g. jnp.full((128,), x)")
  validate.check_flag("optimized", optimized)
  validate.check_atomic(atomic, as_dtype(src.dtype, "src"), peer=True)
  return (), {_p.gpu_core._memory_effect, _p.state.WriteEffect(1)}


def _unpack(ctx, ref, barrier, flat_transforms, ref_treedef, bar_treedef):
  """Applies the ref's Pallas transforms; returns (ref, remaining transforms, barrier)."""
  flat_ref_t, flat_bar_t = _p.util.split_list(flat_transforms, [ref_treedef.num_leaves])
  ref_t_avals, _ = _p.util.split_list(ctx.avals_in[4:], [ref_treedef.num_leaves])
  ref_smem, _, remaining = _p.lowering._handle_transforms(
      ctx, ctx.avals_in[1], ref, ref_treedef.unflatten(ref_t_avals),
      ref_treedef.unflatten(flat_ref_t), handle_transposes=True)
  base = _p.primitives._get_barrier_base_index(ctx.avals_in[2],
                                               bar_treedef.unflatten(flat_bar_t))
  if base is not None:
    barrier = barrier[base]
  return ref_smem, remaining, barrier


def _arrival(barrier_aval) -> str:
  """``async_store``'s arrival for a Pallas barrier: Pallas counts 128 arrivals per
  ``num_arrivals`` of a plain barrier (Lane; Warpgroup: its dialect initialisation),
  and only ``num_arrivals`` of one allocated with ``orders_tensor_core=True``, on
  which upstream arrives from one lane with the whole transfer (jax 0.10 to 0.12)."""
  dtype = getattr(barrier_aval, "inner_aval", barrier_aval).dtype
  return "tensor_core" if getattr(dtype, "orders_tensor_core", False) else "thread"


def _swizzle_tiling(remaining):
  match tuple(remaining):
    case (_p.gpu_core.UnswizzleRef(swizzle), _p.gpu_core.UntilingTransform(tiling)):
      return int(swizzle), len(tiling)
    case (_p.gpu_core.UntilingTransform(tiling),):
      return None, len(tiling)
    case ():
      return None, None
  raise refuse("ref", f"transforms {remaining}",
               "a plain SMEM ref or one with TilingTransform (+ SwizzleTransform)",
               "store into a ref allocated with plgpu.TilingTransform/SwizzleTransform")


@compat.register_lowering_rule(async_store_smem_p, _LANE)
def _lane_rule(ctx, src, ref, barrier, cluster_idx, *flat_transforms, ref_transforms_treedef,
               barrier_transforms_treedef, cluster_dim, optimized, atomic):
  ref_smem, remaining, barrier = _unpack(ctx, ref, barrier, flat_transforms,
                                         ref_transforms_treedef, barrier_transforms_treedef)
  swizzle, tiling_rank = _swizzle_tiling(remaining)
  dim = _p.lowering._resolve_cluster_axis(ctx.module_ctx.axis_names, cluster_dim)
  value = _p.lowering._ensure_fa(src, ctx.avals_in[0].dtype)
  async_store(value, ref_smem, barrier, cluster_dim=dim,
              cluster_idx=_p.lowering._as_index(cluster_idx), swizzle=swizzle,
              tiling_rank=tiling_rank, optimized=optimized, atomic=atomic,
              remote_plain_ok=_state["installed"], arrival=_arrival(ctx.avals_in[2]))
  return ()


@compat.register_lowering_rule(async_store_smem_p, _WG)
def _warpgroup_rule(ctx, src, ref, barrier, cluster_idx, *flat_transforms,
                    ref_transforms_treedef, barrier_transforms_treedef, cluster_dim,
                    optimized, atomic):
  ref_smem, remaining, barrier = _unpack(ctx, ref, barrier, flat_transforms,
                                         ref_transforms_treedef, barrier_transforms_treedef)
  if remaining:
    raise refuse("ref", f"transforms {remaining}", "transforms Pallas folds into the ref",
                 "report this kernel")
  dim = _p.lowering._resolve_cluster_axis(ctx.module_ctx.axis_names, cluster_dim)
  idx = arith.index_cast(ir.IntegerType.get_signless(32), _p.lowering._as_index(cluster_idx))
  # Our parameters ride on discardable attributes: the dialect's atomic enum
  # lacks inc/dec, and Warpgroup vectors are signless, so the jax dtype's
  # signedness (needed for min/max) would otherwise be lost.
  op = compat.mosaic_gpu().dialect.async_store_smem(
      src, ref_smem, barrier.as_barrier_memref(), dim.value, idx, atomic_type=None,
      optimized=optimized)
  op = getattr(op, "operation", op)
  op.attributes[MARK] = ir.UnitAttr.get()
  # as_dtype, not np.issubdtype: ml_dtypes' int4 is no np.signedinteger.
  signed = as_dtype(ctx.avals_in[0].dtype).is_signed_int
  op.attributes["mas.signed"] = ir.BoolAttr.get(signed)
  if atomic is not None:
    op.attributes["mas.atomic"] = ir.StringAttr.get(atomic)
  # The dialect's barrier type carries orders_tensor_core only from jax 0.12 on.
  op.attributes["mas.arrival"] = ir.StringAttr.get(_arrival(ctx.avals_in[2]))
  return ()


# This project's rules by (lowering, primitive) semantics: install() gives them
# to upstream's primitive too.
_RULES = {(_LANE, _WG_PRIMITIVE): _lane_rule, (_WG, _WG_PRIMITIVE): _warpgroup_rule}


def _dialect_rule(ctx, op):
  """Lowers ``mosaic_gpu.async_store_smem`` (after layout inference) through async_store."""
  utils, dl = compat.mosaic_utils(), _p.dialect_lowering
  attrs = op.operation.attributes
  signed, atomic = pallas_layouts.op_signed_and_atomic(op)
  [layout] = _p.inference_utils.in_layouts(op)
  value = dl._fragmented_array_from_ir(
      op.valueToStore, layout,
      is_signed=signed if isinstance(ir.VectorType(op.valueToStore.type).element_type,
                                     ir.IntegerType) else None)
  # Without transforms the destination's type alone cannot say whether it is swizzled:
  # async_store refuses a tiled one that is laid out for a swizzle (plan/ref_swizzle.py).
  swizzle, tiling_rank, ref = SWIZZLE_UNSET, None, op.destination
  if "in_transforms" in attrs:
    transforms = _p.inference_utils.in_transforms(op)[0]
    sw = dl.swizzle_from_transforms_attr(transforms)
    swizzle = None if sw == dl.mgpu.SwizzlingMode.kNoSwizzle else int(sw.value)
    ref = dl.unwrap_transformed_memref(op.destination, transforms)
    tiling = [t for t in dl.memref_transforms_from_transforms_attr(transforms)
              if hasattr(t, "tiling")]
    tiling_rank = len(tiling[0].tiling) if tiling else None
  dialect_barrier = utils.DialectBarrierRef.from_barrier_memref(op.barrier)
  barrier = dialect_barrier.barrier_ref
  if "mas.arrival" in attrs:
    arrival = ir.StringAttr(attrs["mas.arrival"]).value
  else:  # an op built without Pallas' rule: its barrier type says (jax 0.12)
    arrival = ("tensor_core" if getattr(dialect_barrier, "orders_tensor_core", False)
               else "thread")
  optimized = op.optimized.value if op.optimized is not None else None
  kwargs = dict(cluster_dim=gpu.Dimension(op.cluster_dim.value),
                cluster_idx=arith.index_cast(ir.IndexType.get(), op.cluster_idx),
                swizzle=swizzle, tiling_rank=tiling_rank, atomic=atomic,
                remote_plain_ok=_state["installed"], arrival=arrival)
  try:
    async_store(value, ref, barrier, optimized=optimized is not False, **kwargs)
  except AsyncStoreError as e:
    if not retries_unoptimized(optimized, e):
      raise
    async_store(value, ref, barrier, optimized=False, **kwargs)
  return []


def retries_unoptimized(optimized: bool | None, error: AsyncStoreError) -> bool:
  """Whether the dialect rule retries a store refused for ``error`` with bank conflicts
  allowed: only for an op whose ``optimized`` is unset, refused for having no
  conflict-free plan, on a jax whose unset means "downgradable" (0.10, 0.11; on 0.12
  unset means "optimized required", as upstream's dialect lowering reads it)."""
  return (optimized is None and error.param == "optimized"
          and compat.unset_optimized_downgrades())


_upstream_dialect_rule = compat.dialect_lowering_table()[_OP]


def _is_ours(op) -> bool:
  """Marked ops, and every op after install(), go through this project."""
  return _state["installed"] or MARK in getattr(op, "operation", op).attributes


@compat.register_dialect_lowering(_OP)
def _dialect_dispatch(ctx, op):
  """This project's ops through ``_dialect_rule``; others through upstream's.

  The dialect is lowered after the kernel's trace, where no Python frame of the user's
  is left: a refusal carries the op's location (``mlir_location``; jax gives each op
  its equation's, the user's line that made the store), which ``check`` and
  ``compile`` name (tools/kernel_errors.py)."""
  if not _is_ours(op):
    return _upstream_dialect_rule(ctx, op)
  try:
    return _dialect_rule(ctx, op)
  except (AsyncStoreError, TypeError) as e:
    if not hasattr(e, "mlir_location"):
      e.mlir_location = str(op.location)
    raise


# Layout inference: this project's ops admit every layout the planner stores
# (lowering/pallas_layouts.py); others keep upstream's constraints.
pallas_layouts.register(_is_ours)


def _reregister(prim, make) -> dict:
  """Registers ``make(key, rule)`` with upstream's decorator in place of each
  ``rule`` that a table (``key``: lowering and primitive semantics) has for
  ``prim``; returns the rules it replaced, by key."""
  old = {key: table[prim] for key, table in compat.rule_tables_with(prim).items()}
  for key, rule in old.items():
    compat.register_lowering_rule(prim, *key)(make(key, rule))
  return old


def install() -> None:
  """Routes upstream's ``plgpu.async_store_smem`` (Lane and Warpgroup) and its dialect
  op through this project. Idempotent; ``uninstall()`` restores upstream's rules.

  Also routes ``plgpu.barrier_wait`` (every semantics upstream registers it
  for: Lane, Warpgroup, the Warp-primitive combinations) through a wait with
  ``.acquire.cluster`` (upstream's is ``.acquire.cta``), so stores with plain
  pieces into a peer (e.g. float reductions), which are refused without
  install(), become visible to the waiting CTA (docs/pallas.md).  And
  ``plgpu.barrier_arrive`` on a ``ClusterBarrier`` through a warpgroup barrier
  and a ``.release.cluster`` arrive (lowering/pallas_barriers.py), so every
  thread's SMEM fill before it is visible to the peers after their wait.
  """
  if _state["installed"]:
    return
  upstream = _p.primitives
  _state["saved"] = {
      upstream.async_store_smem_p: _reregister(upstream.async_store_smem_p,
                                               lambda key, rule: _RULES.get(key, rule)),
      upstream.barrier_wait_p: _reregister(upstream.barrier_wait_p,
                                           lambda key, rule: pallas_barriers.cluster_wait_rule(rule)),
      upstream.barrier_arrive_p: _reregister(
          upstream.barrier_arrive_p,
          lambda key, rule: pallas_barriers.cluster_arrive_rule(rule))}
  _state["installed"] = True


def uninstall() -> None:
  """Restores upstream's lowering of ``plgpu.async_store_smem``, ``plgpu.barrier_wait``
  and ``plgpu.barrier_arrive``; a no-op when not installed."""
  if not _state["installed"]:
    return
  for prim, saved in _state.pop("saved").items():
    _reregister(prim, lambda key, rule, saved=saved: saved.get(key, rule))
  _state["installed"] = False


def is_installed() -> bool:
  """Whether install() is in effect."""
  return _state["installed"]


def _called_eagerly(src, ref) -> bool:
  """Whether the store was called on concrete values, outside any trace (no kernel):
  neither ``src`` nor ``ref`` is a tracer or a Pallas ref."""
  import jax
  def concrete(x):
    return isinstance(x, (np.ndarray, jax.Array)) and not isinstance(x, _p.jax_core.Tracer)
  return concrete(src) and concrete(ref)


def _check_call(src, ref, barrier, cluster_idx, cluster_dim, optimized, atomic) -> None:
  """Refuses, while tracing, the arguments whose kinds the avals lose or that cannot
  be bound (the abstract evaluation checks the rest)."""
  # Static parameters must be hashable to be bound; an unhashable one is refused by
  # the check the abstract evaluation applies to it, with the same message.
  for value, check in ((optimized, lambda v: validate.check_flag("optimized", v)),
                       (atomic, validate.check_atomic_name)):
    try:
      hash(value)
    except TypeError:
      check(value)
  if _called_eagerly(src, ref):
    raise refuse("async_store_smem", "called outside a kernel (on concrete arrays)",
                 "calls inside the body of a Pallas Mosaic GPU kernel (plgpu.kernel, or "
                 "pl.pallas_call with the Mosaic GPU backend), on a register array, a "
                 "scratch SMEM ref and a barrier",
                 "call it from the kernel body, e.g. async_store_smem(plgpu.load(x_ref, ()), "
                 "smem, bar.at[0], cluster_idx=..., cluster_dim=...)")
  for param, x, example in (("ref", ref, "smem or smem.at[...]"),
                            ("barrier", barrier, "bar.at[0]")):
    try:
      is_ref = isinstance(x, _p.state_types.TransformedRef) or isinstance(
          compat.typeof(x), _p.state_types.AbstractRef)
    except TypeError:
      is_ref = False
    if not is_ref:
      raise refuse_type(param, x, "a Pallas Ref (a scratch buffer of the kernel)",
                        f"pass the kernel's scratch ref, e.g. {example}")
  if not hasattr(src, "dtype") and not isinstance(src, (int, float)):
    raise refuse_type("src", src, "an array (the registers of the warpgroup)",
                      "pass a jax array, e.g. plgpu.load(x_ref, ())")
  if isinstance(cluster_dim, (bool, np.bool_, float)) or not isinstance(cluster_dim, (str, int)):
    raise refuse_type("cluster_dim", cluster_dim, "a cluster axis name (str) or int",
                      'pass a name from plgpu.kernel(cluster_names=...), e.g. "cluster"')
  names = compat.axis_names_in_scope()
  if isinstance(cluster_dim, str) and names and cluster_dim not in names:
    raise refuse("cluster_dim", repr(cluster_dim),
                 "a cluster axis name of the enclosing kernel (axes in scope: "
                 + ", ".join(map(repr, names)) + ")",
                 "pass one of the cluster_names given to plgpu.kernel")
  # An axis of one CTA is fine: the target is then the executing CTA, which the
  # lowering stores into with the local form.
  validate.check_cluster_idx(cluster_idx, traced=True)


def async_store_smem(src, ref, barrier, *, cluster_idx, cluster_dim: Hashable | int,
                     optimized: bool = True, atomic: str | None = None) -> None:
  """The store behind ``mosaic_async_store.pallas.async_store_smem``, whose docstring
  documents every parameter, what is refused, and an example (docs/pallas.md too).

  Checks what the avals lose (``_check_call``), then binds ``async_store_smem_p`` with the
  ref's and the barrier's transforms flattened, as upstream's wrapper does; the
  abstract evaluation and the lowering rules above check the rest.
  """
  _check_call(src, ref, barrier, cluster_idx, cluster_dim, optimized, atomic)
  get = _p.state_primitives.get_ref_and_transforms
  ref, ref_transforms = get(ref, None, "async_store_smem")
  barrier, barrier_transforms = get(barrier, None, "async_store_smem")
  flat_ref_transforms, ref_transforms_treedef = _p.tree_util.tree_flatten(ref_transforms)
  flat_bar_transforms, bar_transforms_treedef = _p.tree_util.tree_flatten(barrier_transforms)
  async_store_smem_p.bind(
      src, ref, barrier, cluster_idx, *flat_ref_transforms, *flat_bar_transforms,
      ref_transforms_treedef=ref_transforms_treedef,
      barrier_transforms_treedef=bar_transforms_treedef,
      cluster_dim=cluster_dim, optimized=optimized, atomic=atomic)
