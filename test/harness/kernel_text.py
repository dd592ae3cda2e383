"""Helpers for the lit/FileCheck tests: print a labelled kernel as IR or PTX.

A lit test file prints each kernel under a ``TEST: name`` label (``emit``),
following MLIR's Python test habit (``# CHECK-LABEL: TEST: name``).
Importing this module changes no environment: lit (test/lit/lit.cfg.py) and pytest
(test/conftest.py) set ``JAX_PLATFORMS`` and ``TF_CPP_MIN_LOG_LEVEL``.
"""

from __future__ import annotations

from mosaic_async_store.demo.config import StoreConfig

__all__ = ["kernel_text", "emit", "write_ptx", "retargeted_ptx", "pallas_store_kernel",
           "pallas_module"]


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


# The PTX files ``write_ptx`` has written in this process (the first write truncates).
_PTX_FILES: set[str] = set()


def write_ptx(path: str, name: str, ptx: str) -> None:
  """Appends ``ptx`` under its ``TEST: name`` label to the file ``path`` (truncated by
  this process's first write to it): the PTX half of an ``ir+ptx`` run (``emit``)."""
  with open(path, "a" if path in _PTX_FILES else "w") as f:
    f.write(f"TEST: {name}\n{ptx}\n")
  _PTX_FILES.add(path)


def emit(name: str, **cfg) -> None:
  """Prints IR or PTX for a lit test, by the first command-line argument.

  One lit file then carries two RUN lines (IREE's habit), and a PTX line per
  architecture where the text differs (the second argument, default sm_90a)::

      # RUN: %PYTHON %s ir  | FileCheck %s
      # RUN: %PYTHON %s ptx | FileCheck %s --check-prefix=PTX
      # RUN: %PYTHON %s ptx sm_100a | FileCheck %s --check-prefix=PTX100

  ``ir+ptx FILE`` does both in one process, each kernel built once (a RUN line's
  Python spends most of its time importing jax and building the kernels): the IR
  printed, the PTX (labelled alike) written to FILE for a second FileCheck::

      # RUN: %PYTHON %s ir+ptx %t.ptx | FileCheck %s
      # RUN: FileCheck %s --check-prefix=PTX --input-file %t.ptx
  """
  import sys
  what = sys.argv[1] if len(sys.argv) > 1 else "ir"
  print(f"TEST: {name}")
  if what != "ir+ptx":
    arch = sys.argv[2] if len(sys.argv) > 2 else None
    print(kernel_text(StoreConfig(**cfg), "mlir" if what == "ir" else what, arch=arch))
    return
  ir, ptx = _ir_and_ptx(StoreConfig(**cfg))
  print(ir)
  write_ptx(sys.argv[2], name, ptx)


def _ir_and_ptx(cfg: StoreConfig) -> tuple[str, str]:
  """``kernel_text(cfg, "mlir")`` and ``kernel_text(cfg, "ptx")`` of one build."""
  from jaxlib.mlir import ir
  from mosaic_async_store import compat
  from mosaic_async_store.tools import toolchain
  from mosaic_async_store.demo.kernel import build_store_module
  with compat.make_ir_context(), ir.Location.unknown():
    module, _ = build_store_module(cfg, bare=True)
    text = module.operation.get_asm(enable_debug_info=False)
    return text, toolchain.compile_module(module, cfg.arch).ptx
