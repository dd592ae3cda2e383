"""Helpers for the lit/FileCheck tests: print a labelled kernel as IR or PTX.

A lit test file prints each kernel under a ``TEST: name`` label (``emit``),
following MLIR's Python test habit (``# CHECK-LABEL: TEST: name``).
Importing this module changes no environment: lit (test/lit/lit.cfg.py) and pytest
(test/conftest.py) set ``JAX_PLATFORMS`` and ``TF_CPP_MIN_LOG_LEVEL``.
"""

from __future__ import annotations

from mosaic_async_store.demo.config import StoreConfig

__all__ = ["kernel_text", "emit", "retargeted_ptx", "pallas_store_kernel", "pallas_module"]


def retargeted_ptx(ptx: str, arch: str) -> str:
  """sm_90a PTX under ``arch``'s header (its ``.target`` and PTX ``.version``): what
  mlir-opt emits for ``arch`` (test/unit/test_runtime_configs.py,
  ``test_mlir_opt_emits_the_same_ptx_for_every_arch``), without running it again."""
  import re
  from mosaic_async_store.tools import toolchain
  version = {"+ptx86": "8.6", "+ptx88": "8.8"}[toolchain.ARCHS[arch]]
  out, n = re.subn(r"\.version \S+\n\.target sm_90a\b", f".version {version}\n.target {arch}",
                   ptx)
  if n != 1:
    raise ValueError("not sm_90a PTX with one .version/.target header")
  return out


def kernel_text(cfg: StoreConfig, what: str, *, bare: bool = True,
                arch: str | None = None) -> str:
  """The store kernel of ``cfg`` as "mlir" (generic IR), "ptx" or "sass" for ``arch``
  (default: the oldest target ``cfg`` runs on, ``cfg.arch``)."""
  from jaxlib.mlir import ir
  from mosaic_async_store import compat
  from mosaic_async_store.tools import toolchain
  from mosaic_async_store.demo.kernel import build_store_module
  with compat.make_ir_context(), ir.Location.unknown():
    module, _ = build_store_module(cfg, bare=bare)
    if what == "mlir":
      return module.operation.get_asm(enable_debug_info=False)
    compiled = toolchain.compile_module(module, arch or cfg.arch)
  return {"ptx": compiled.ptx, "sass": compiled.sass}[what]


def pallas_store_kernel(*, dtype="bfloat16", shape=(64, 128), swizzle=128, semantics="lane",
                        atomic=None, api="mas", transposed=False, optimized=True,
                        target="peer", layout=None, tiling=None, tensor_core=False):
  """A 2-CTA Pallas MGPU kernel in which each CTA stores into the other's SMEM
  (``target="cta0"``: both CTAs store into CTA 0's, ``cluster_idx=0``; for lowering
  checks only, its barrier still expects one warpgroup's arrivals).

  ``api`` picks ``mas_pallas.async_store_smem`` ("mas") or upstream's
  ``plgpu.async_store_smem`` ("upstream").  ``layout`` names the registers'
  ``plgpu.Layout`` (Lane: the load's, WGMMA if None; Warpgroup: a ``layout_cast``
  after the load, none if None: layout inference picks).  ``tiling`` replaces the
  swizzle's transforms by a bare ``TilingTransform`` (an unswizzled tiled ref).
  ``tensor_core`` allocates the barrier with ``orders_tensor_core=True`` (Blackwell).
  Returns (kernel, input spec).
  """
  import jax
  import jax.numpy as jnp
  from jax.experimental.pallas import mosaic_gpu as plgpu

  from mosaic_async_store import compat
  from mosaic_async_store import pallas as mas_pallas
  from mosaic_async_store.plan.dtypes import as_dtype
  sem = {"lane": plgpu.LoweringSemantics.Lane,
         "warpgroup": plgpu.LoweringSemantics.Warpgroup}[semantics]
  dt = as_dtype(dtype)
  store = plgpu.async_store_smem if api == "upstream" else mas_pallas.async_store_smem
  transforms = ()
  if swizzle:
    transforms = (plgpu.TilingTransform((8, swizzle * 8 // dt.bits)),
                  plgpu.SwizzleTransform(swizzle))
  if tiling is not None:
    transforms = (plgpu.TilingTransform(tuple(tiling)),)
  alloc = shape[::-1] if transposed else shape

  def body(x_ref, o_ref, smem, bar):
    del o_ref
    peer = 0 if target == "cta0" else 1 - jax.lax.axis_index("cluster")
    if sem == plgpu.LoweringSemantics.Lane:
      x = compat.pallas_load(x_ref, layout=getattr(plgpu.Layout, layout or "WGMMA"),
                             optimized=False)
    else:
      x = compat.pallas_load(x_ref, optimized=False)
      if layout is not None:
        x = plgpu.layout_cast(x, getattr(plgpu.Layout, layout))
    dst = compat.transpose_smem_ref(smem, (1, 0)) if transposed else smem
    store(x, dst, bar.at[0], cluster_idx=peer, cluster_dim="cluster", atomic=atomic,
          optimized=optimized)
    plgpu.barrier_wait(bar.at[0])

  kernel = plgpu.kernel(
      body, out_type=jax.ShapeDtypeStruct(shape, dt.numpy), grid=(2,), grid_names=("g",),
      cluster=(2,), cluster_names=("cluster",),
      scratch_types=[plgpu.SMEM(alloc, dt.numpy, transforms=transforms),
                     plgpu.Barrier(num_arrivals=1, num_barriers=1,
                                   **({"orders_tensor_core": True} if tensor_core else {}))],
      compiler_params=plgpu.CompilerParams(lowering_semantics=sem))
  return kernel, jax.ShapeDtypeStruct(shape, jnp.dtype(dt.numpy))


def pallas_module(**kwargs):
  """The Mosaic module of ``pallas_store_kernel(**kwargs)``, ready for compile_module."""
  from mosaic_async_store.tools.pallas_capture import (lower_pallas_to_mosaic_modules,
                                                 lower_warpgroup_dialect)
  kernel, spec = pallas_store_kernel(**kwargs)
  [module] = lower_pallas_to_mosaic_modules(kernel, spec)
  if kwargs.get("semantics") == "warpgroup":
    module = lower_warpgroup_dialect(module)
  return module


def emit(name: str, **cfg) -> None:
  """Prints IR or PTX for a lit test, by the first command-line argument.

  One lit file then carries two RUN lines (IREE's habit), and a PTX line per
  architecture where the text differs (the second argument, default sm_90a)::

      # RUN: %PYTHON %s ir  | FileCheck %s
      # RUN: %PYTHON %s ptx | FileCheck %s --check-prefix=PTX
      # RUN: %PYTHON %s ptx sm_100a | FileCheck %s --check-prefix=PTX100
  """
  import sys
  what = sys.argv[1] if len(sys.argv) > 1 else "ir"
  arch = sys.argv[2] if len(sys.argv) > 2 else None
  print(f"TEST: {name}")
  print(kernel_text(StoreConfig(**cfg), "mlir" if what == "ir" else what, arch=arch))
