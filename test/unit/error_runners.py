"""The harnesses that run error_cases' IR-building cases (async_store, Pallas, toolchain).

Imported only by ``error_cases.py`` when it runs as a subprocess: anything
here may touch native code.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, gpu

import mosaic_async_store as mas
from mosaic_async_store import compat
from mosaic_async_store.tools import toolchain
from error_cases import _outcome

_BF16 = jnp.bfloat16


def _kernel_namespace(cluster: int, use):
  """Builds a kernel whose body calls ``use(namespace)``; returns its result."""
  mgpu, fa = compat.mosaic_gpu(), compat.fragmented_array()
  scratch = (jax.ShapeDtypeStruct((8, 2, 8, 64), _BF16),   # (64, 128) tiled for 128B swizzle
             jax.ShapeDtypeStruct((64, 128), _BF16),
             jax.ShapeDtypeStruct((64, 128), jnp.float32),
             jax.ShapeDtypeStruct((64, 128), jnp.int32),
             mgpu.Barrier(arrival_count=128, num_barriers=1),
             mgpu.Barrier(arrival_count=128, num_barriers=2))
  out = {}

  def body(ctx, gmem, out_ref, s):
    del ctx, out_ref
    tiled, plain, plain32, plain_i32, bar, bars = s
    value = fa.FragmentedArray.splat(arith.constant(ir.BF16Type.get(), 1.0), (64, 128),
                                     fa.WGMMA_LAYOUT)
    i32 = ir.IntegerType.get_signless(32)
    ivalue = fa.FragmentedArray.splat(arith.constant(i32, 1), (64, 128), fa.WGMMA_LAYOUT,
                                      is_signed=True)
    ns = dict(mas=mas, np=np, gpu=gpu, ir=ir, arith=arith, mgpu=mgpu, value=value,
              ivalue=ivalue, tiled=tiled, plain=plain, plain32=plain32, plain_i32=plain_i32,
              gmem=gmem, bar=bar[0], bars=bars, peer=arith.constant(ir.IndexType.get(), 1),
              shifted=_shifted)
    out["result"] = use(ns)

  spec = jax.ShapeDtypeStruct((128,), jnp.float32)
  with compat.make_ir_context() as context, ir.Location.unknown():
    module, *_ = compat.kernel_to_module(body, (cluster, 1, 1), (128, 1, 1), (spec,), spec,
                                         scratch, cluster=(cluster, 1, 1))
  # The values in the namespace die with the module: it must outlive their use.
  return out["result"], (context, module)


def _shifted(ref, offset):
  """``ref`` with the same shape and strides at ``offset`` elements further (an int)
  or at a dynamic offset (``offset=None``: a run-time value nothing traces)."""
  from jaxlib.mlir.dialects import memref
  ty = ir.MemRefType(ref.type)
  strides, _ = ty.get_strides_and_offset()
  dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
  layout = ir.StridedLayoutAttr.get(dynamic if offset is None else offset, strides)
  new_ty = ir.MemRefType.get(ty.shape, ty.element_type, layout, ty.memory_space)
  offsets = [] if offset is not None else [gpu.thread_id(gpu.Dimension.y)]
  return memref.reinterpret_cast(new_ty, ref, offsets, [], [],
                                 static_offsets=[dynamic if offset is None else offset],
                                 static_sizes=list(ty.shape), static_strides=list(strides))


def run_async_store(case) -> dict:
  if case.setup in ("kernel", "cluster1"):
    cluster = 1 if case.setup == "cluster1" else 2
    result, _ = _kernel_namespace(cluster, lambda ns: _outcome(lambda: eval(case.code, ns)))
    return result
  ns, (context, module) = _kernel_namespace(2, lambda ns: ns)  # values outlive the body
  call = lambda: eval(case.code, ns)  # noqa: E731
  if case.setup == "none":
    return _outcome(call)
  if case.setup == "bare":
    new_context = ir.Context  # a jaxlib context with no dialects loaded
  elif case.setup in ("noip", "foreign"):
    new_context = compat.make_ir_context
  else:
    raise ValueError(case.setup)
  with (new_context() if case.setup != "noip" else context), ir.Location.unknown():
    if case.setup == "noip":
      return _outcome(call)
    other = ir.Module.create()
    with ir.InsertionPoint(other.body):
      return _outcome(call)


def _pallas_store(*, dtype="int32", shape=(64, 128), cluster=2, semantics="lane", api="mas",
                  src=None, ref=None, barrier=None, cluster_idx=None, **store_kwargs):
  """Lowers a Pallas kernel whose body stores with the given overrides (see PALLAS)."""
  from jax.experimental.pallas import mosaic_gpu as plgpu

  from mosaic_async_store import pallas as mas_pallas
  from mosaic_async_store.tools.pallas_capture import lower_pallas_to_mosaic_modules
  sem = {"lane": plgpu.LoweringSemantics.Lane,
         "warpgroup": plgpu.LoweringSemantics.Warpgroup}[semantics]
  dt = jnp.dtype(dtype)
  store = mas_pallas.async_store_smem
  if api == "upstream":
    mas_pallas.install()
    store = plgpu.async_store_smem

  def body(x_ref, o_ref, smem, bar, bars):
    del o_ref
    peer = (1 - jax.lax.axis_index("cluster")) if cluster > 1 else jax.lax.axis_index("cluster")
    layout = dict(layout=plgpu.Layout.WGMMA) if sem == plgpu.LoweringSemantics.Lane else {}
    x = compat.pallas_load(x_ref, optimized=False, **layout)
    idx = cluster_idx(peer) if callable(cluster_idx) else (
        peer if cluster_idx is None else cluster_idx)
    kwargs = dict(dict(cluster_dim="cluster", optimized=True, atomic=None), **store_kwargs)
    store(src(x) if src else x, ref(smem) if ref else smem,
          barrier(bars) if barrier else bar.at[0], cluster_idx=idx, **kwargs)
    plgpu.barrier_wait(bar.at[0])

  kernel = plgpu.kernel(
      body, out_type=jax.ShapeDtypeStruct(shape, dt), grid=(cluster,), grid_names=("g",),
      cluster=(cluster,), cluster_names=("cluster",),
      scratch_types=[plgpu.SMEM(shape, dt), plgpu.Barrier(num_arrivals=1, num_barriers=1),
                     plgpu.Barrier(num_arrivals=1, num_barriers=2)],
      compiler_params=plgpu.CompilerParams(lowering_semantics=sem))
  try:
    return lower_pallas_to_mosaic_modules(kernel, jax.ShapeDtypeStruct(shape, dt))
  finally:
    mas_pallas.uninstall()


def _eager_store():
  """The primitive called as a plain function, on concrete arrays: no kernel at all."""
  from mosaic_async_store import pallas as mas_pallas
  x = jnp.arange(64 * 128, dtype=jnp.int32).reshape(64, 128)
  return mas_pallas.async_store_smem(x, jnp.zeros_like(x), jnp.zeros((1,)), cluster_idx=1,
                                     cluster_dim="cluster")


def run_pallas(case) -> dict:
  jax.clear_caches()
  return _outcome(lambda: eval(case.code, dict(store=_pallas_store, jnp=jnp, eager=_eager_store)))


def _with_env(var, value, fn):
  old = os.environ.get(var)
  os.environ[var] = value
  toolchain.find_tool.cache_clear()
  try:
    return fn()
  finally:
    if old is None:
      del os.environ[var]
    else:
      os.environ[var] = old
    toolchain.find_tool.cache_clear()


def _dialect_module():
  from mosaic_async_store.tools.pallas_capture import lower_pallas_to_mosaic_modules
  from kernel_text import pallas_store_kernel
  [module] = lower_pallas_to_mosaic_modules(*pallas_store_kernel(semantics="warpgroup"))
  return module


def _store_module():
  from mosaic_async_store.demo.config import StoreConfig
  from mosaic_async_store.demo.kernel import build_store_module
  with compat.make_ir_context(), ir.Location.unknown():
    return build_store_module(StoreConfig(), bare=True)[0]


def run_toolchain(case) -> dict:
  ns = dict(toolchain=toolchain, mas=mas, with_env=_with_env, dialect_module=_dialect_module,
            store_module=_store_module)
  return _outcome(lambda: eval(case.code, ns))
