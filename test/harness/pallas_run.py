"""Runtime checks of the Pallas primitive: Lane and Warpgroup kernels on a GPU.

Each check is a Pallas MGPU kernel of one 2-CTA cluster.  CTA ``c`` loads its
own slice of ``x`` from GMEM and stores it, with ``async_store_smem``, into CTA
``1 - c``'s SMEM.  It then waits on its own barrier for what its peer sent and
copies its SMEM back to GMEM with a TMA store (``commit_smem``,
``copy_smem_to_gmem``, ``wait_smem_to_gmem``), as users' kernels do; 4-bit and 64-bit
data go back through registers (``tma_out``).  The kernels also run in the PTX checker
(test/emu/test_pallas_execution.py).  For a reduction, each
CTA first fills its SMEM from ``init`` through registers, then every thread of
the cluster fences and synchronises (``_cluster_sync``), so the peer reduces
into known values.  The host compares every element with NumPy (random data,
never 0).

Used by test/gpu/test_pallas_runtime.py (in a subprocess with a timeout: a
Pallas barrier wait has no time limit) and, without a GPU, by
test/unit/test_pallas_runtime_lowers.py, which lowers every kernel for CUDA:

    python -m pallas_run --out results.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time

import ml_dtypes
import numpy as np

from mosaic_async_store import compat
from mosaic_async_store.plan.dtypes import as_dtype

__all__ = ["PallasCase", "tma_out", "PALLAS_CASES", "TENSOR_CORE_CASES", "CLUSTER_BARRIER_CASES",
           "LAYOUT_CASES", "WIDENED_LAYOUTS", "layout_case",
           "roundtrip_kernel", "make_inputs", "expected", "device_bytes", "traced", "run_case"]


@dataclasses.dataclass(frozen=True)
class PallasCase:
  """One Pallas runtime check (see the module doc)."""

  dtype: str
  semantics: str                 # "lane" or "warpgroup"
  shape: tuple[int, int] = (64, 128)
  swizzle: int | None = 128
  atomic: str | None = None
  transposed: bool = False       # store through a transposed view of the SMEM ref
  optimized: bool = True
  api: str = "mas"               # "mas": our primitive; "upstream": plgpu's, routed by install()
  install: bool = False          # run under install() (api="upstream" implies it)
  cta0: bool = False             # both CTAs reduce into CTA 0 (CTA 0 into itself: the
                                 # local form, chosen at run time); only CTA 0 waits
  layout: str | None = None      # the registers' plgpu.Layout: Lane loads with it (default
                                 # WGMMA), Warpgroup layout_casts to it (default: inferred)
  tensor_core: bool = False      # the barrier is Barrier(orders_tensor_core=True): one
                                 # arrival per store (Blackwell: compiled for sm_100a)
  barrier_index: int = 0         # store and wait on barrier k of an array of k + 1
  cluster_barrier: bool = False  # a reduction's init fill is published to the peer with
                                 # plgpu.ClusterBarrier (barrier_arrive, barrier_wait), as
                                 # a user writes it, instead of _cluster_sync
  auto_barriers: bool = True     # False: CompilerParams(unsafe_no_auto_barriers=True), so
                                 # no warpgroup barrier of Pallas' follows the fill

  @property
  def arch(self) -> str:
    """The target the case compiles for: tcgen05 fences need Blackwell."""
    return "sm_100a" if self.tensor_core else "sm_90a"

  @property
  def installs(self) -> bool:
    """Whether the kernel is built under ``mas_pallas.install()``: upstream's
    primitive needs it, and so does a store with plain pieces into the peer
    (float add), whose consumer must wait at cluster scope (docs/pallas.md)."""
    return self.install or self.api == "upstream"

  def describe(self) -> str:
    return (f"pallas {self.semantics} {self.api} {self.dtype}{list(self.shape)} "
            f"swizzle={self.swizzle}" + (" transposed" if self.transposed else "") +
            ("" if self.optimized else " unoptimized") +
            (f" atomic={self.atomic}" if self.atomic else "") +
            (" installed" if self.install and self.api == "mas" else "") +
            (" into cta0" if self.cta0 else "") +
            (f" layout={self.layout}" if self.layout else "") +
            (" orders_tensor_core" if self.tensor_core else "") +
            (f" barrier[{self.barrier_index}]" if self.barrier_index else "") +
            (" ClusterBarrier" if self.cluster_barrier else "") +
            ("" if self.auto_barriers else " no_auto_barriers"))


PALLAS_CASES = (
    PallasCase("bfloat16", "lane"),
    PallasCase("float32", "lane", shape=(64, 64)),
    PallasCase("int8", "lane"),                       # 8-bit WGMMA layout: lane exchanges
    PallasCase("bfloat16", "lane", swizzle=64),
    PallasCase("bfloat16", "lane", swizzle=None, transposed=True, shape=(64, 64),
               optimized=False),
    PallasCase("int32", "lane", atomic="min", shape=(64, 64)),
    PallasCase("bfloat16", "lane", api="upstream"),   # upstream's primitive, our lowering
    PallasCase("bfloat16", "warpgroup"),
    PallasCase("float32", "warpgroup", shape=(64, 64)),
    PallasCase("int32", "warpgroup", atomic="min", shape=(64, 64)),   # upstream: min.u32
    PallasCase("uint32", "warpgroup", atomic="max", shape=(64, 64)),
    PallasCase("float32", "warpgroup", atomic="add", shape=(64, 64), install=True),
    PallasCase("int32", "warpgroup", atomic="min", shape=(64, 64), api="upstream"),
    PallasCase("int32", "lane", atomic="add", shape=(64, 64), cta0=True),
    PallasCase("int32", "warpgroup", atomic="max", shape=(64, 64), cta0=True),
    # Barrier k of an array: the peer's barrier k gets the arrival (upstream's
    # remap_to_cluster offset it twice before jax 0.12; this project forms its own mapa).
    PallasCase("bfloat16", "lane", barrier_index=1),
    PallasCase("int32", "warpgroup", atomic="max", shape=(64, 64), api="upstream",
               barrier_index=2),
)

# Barriers allocated with orders_tensor_core=True (Blackwell only: run in the PTX
# checker, not on the Hopper GPU): one elected arrival per store with the whole tx,
# after tcgen05.fence::before_thread_sync and a warpgroup barrier, as upstream's
# store arrives on them; plain stores and reductions, both semantics, both primitives.
TENSOR_CORE_CASES = tuple(
    dataclasses.replace(c, tensor_core=True) for c in (
        PallasCase("bfloat16", "lane"),
        PallasCase("bfloat16", "warpgroup"),
        PallasCase("int8", "lane", api="upstream"),
        PallasCase("int8", "warpgroup", api="upstream"),
        PallasCase("bfloat16", "warpgroup", api="upstream", barrier_index=1),
        PallasCase("int32", "lane", atomic="min", shape=(64, 64)),
        PallasCase("int32", "warpgroup", atomic="min", shape=(64, 64), api="upstream"),
        PallasCase("float32", "lane", atomic="add", shape=(64, 64), install=True),
        PallasCase("float32", "warpgroup", atomic="add", shape=(64, 64), install=True),
        PallasCase("int32", "lane", atomic="add", shape=(64, 64), cta0=True),
        PallasCase("uint32", "warpgroup", atomic="max", shape=(64, 64), cta0=True)))


# A reduction into the peer whose init fill is published with Pallas' ClusterBarrier:
# every thread fills its SMEM, then plgpu.barrier_arrive / barrier_wait on the cluster
# barrier, then the store.  Correct under install() (lowering/pallas_barriers.py: a
# warpgroup barrier before the elected arrive, .release.cluster; the cluster-scope
# wait); the same kernel without install() races (test/emu/test_pallas_execution.py).
CLUSTER_BARRIER_CASES = (
    PallasCase("int32", "lane", atomic="min", shape=(64, 64), install=True,
               cluster_barrier=True),
    PallasCase("int32", "warpgroup", atomic="min", shape=(64, 64), install=True,
               cluster_barrier=True),
    PallasCase("int32", "warpgroup", atomic="max", shape=(64, 64), api="upstream",
               cluster_barrier=True),
    PallasCase("float32", "lane", atomic="add", shape=(64, 64), install=True,
               cluster_barrier=True),
    # Without Pallas' barrier after the fill, only the arrive's own warpgroup barrier
    # orders the other threads' fill before the elected arrive.
    PallasCase("int32", "lane", atomic="min", shape=(64, 64), install=True,
               cluster_barrier=True, auto_barriers=False),
    PallasCase("int32", "warpgroup", atomic="max", shape=(64, 64), install=True,
               cluster_barrier=True, auto_barriers=False),
)


# Layouts by dtype that upstream's layout inference rejects under Warpgroup semantics
# (upstream's store cannot transfer them; Lane semantics stores them through this
# project): 64-bit data in every layout, 32-bit data in WGMMA_UPCAST_4X, the
# TMEM-native layout for every width below 32 bits.  Each in both semantics.
WIDENED_LAYOUTS = tuple(
    (dtype, layout)
    for dtype in ("float64", "int64")
    for layout in ("WGMMA", "WGMMA_8BIT", "WGMMA_UPCAST_2X", "WGMMA_UPCAST_4X", "TCGEN05",
                   "TCGEN05_TMEM_NATIVE")) + tuple(
    (dtype, "WGMMA_UPCAST_4X") for dtype in ("float32", "int32", "uint32")) + tuple(
    (dtype, "TCGEN05_TMEM_NATIVE") for dtype in (
        "bfloat16", "float16", "int16", "float8_e4m3fn", "float8_e5m2", "int8", "uint8",
        "int4", "uint4", "float4_e2m1fn"))


def layout_case(dtype: str, layout: str, semantics: str) -> PallasCase:
  """The roundtrip of a (128, 128) tile (4-bit: (128, 256)) in ``layout``, 128-byte swizzle."""
  return PallasCase(dtype, semantics, shape=(128, 256 if as_dtype(dtype).bits == 4 else 128),
                    layout=layout)


LAYOUT_CASES = tuple(layout_case(d, l, s) for d, l in WIDENED_LAYOUTS
                     for s in ("lane", "warpgroup")) + tuple(
    # No layout_cast: Warpgroup inference itself must find a layout the planner stores
    # (pallas_layouts.Storable); upstream's constraint admits none for 64-bit data.
    dataclasses.replace(layout_case(d, "WGMMA", "warpgroup"), layout=None)
    for d in ("float64", "int64"))


def _cluster_sync():
  """Every thread of the cluster: ``fence.proxy.async.shared::cta`` (its generic
  SMEM stores ordered for asynchronous-proxy accesses: the peer's red.async
  completes through the tx mechanism, like bulk copies), then
  ``barrier.cluster.arrive`` / ``wait`` (default ``.release`` / ``.acquire`` at
  cluster scope), so every thread's init stores happen before the peer's
  reductions.  Pallas' ClusterBarrier would not do without install(): one thread per
  CTA arrives on each CTA's barrier, with no CTA barrier before it and the default
  ``.release.cta``, and its wait is ``.acquire.cta`` (``CLUSTER_BARRIER_CASES`` use
  it, under install())."""
  from jax.experimental.pallas import mosaic_gpu as plgpu
  from jaxlib.mlir.dialects import nvvm

  @plgpu.inline_mgpu()
  def sync(_):
    nvvm.fence_proxy(nvvm.ProxyKind.async_shared, space=nvvm.SharedSpace.shared_cta)
    nvvm.cluster_arrive(aligned=True)
    nvvm.cluster_wait(aligned=True)
  sync()


def tma_out(case: PallasCase) -> bool:
  """Whether the kernel copies its SMEM out with a TMA store: 8- to 32-bit data (Mosaic
  encodes no TMA descriptor for 4-bit or f64 elements)."""
  return 8 <= as_dtype(case.dtype).bits <= 32


def roundtrip_kernel(case: PallasCase):
  """``(kernel, out ShapeDtypeStruct)``: kernel(x, init) -> every CTA's SMEM afterwards.

  Build it under ``mas_pallas.install()`` when ``case.installs``."""
  import jax
  from jax.experimental.pallas import mosaic_gpu as plgpu

  from mosaic_async_store import pallas as mas_pallas
  dt = as_dtype(case.dtype)
  sem = {"lane": plgpu.LoweringSemantics.Lane,
         "warpgroup": plgpu.LoweringSemantics.Warpgroup}[case.semantics]
  store = mas_pallas.async_store_smem if case.api == "mas" else plgpu.async_store_smem
  transforms = ()
  if case.swizzle:
    transforms = (plgpu.TilingTransform((8, case.swizzle * 8 // dt.bits)),
                  plgpu.SwizzleTransform(case.swizzle))
  alloc = case.shape[::-1] if case.transposed else case.shape
  # Lane semantics needs a layout for register loads: WGMMA for the store and
  # for swizzled SMEM; plain SMEM and GMEM copies take the strided default.
  lane = sem == plgpu.LoweringSemantics.Lane
  wgmma = {"layout": plgpu.Layout.WGMMA} if lane else {}
  smem_layout = wgmma if case.swizzle else {}
  x_layout = {"layout": getattr(plgpu.Layout, case.layout)} if lane and case.layout else wgmma

  def body(x_ref, init_ref, o_ref, smem, bar, *cluster_barrier):
    cta = jax.lax.axis_index("cluster")
    if case.atomic:  # known starting values, visible before the peer reduces into them
      smem[...] = compat.pallas_load(init_ref.at[cta], optimized=False, **smem_layout)
      if case.cluster_barrier:
        plgpu.barrier_arrive(cluster_barrier[0])
        plgpu.barrier_wait(cluster_barrier[0])
      else:
        _cluster_sync()
    x = compat.pallas_load(x_ref.at[cta], optimized=False, **x_layout)
    if case.layout and not lane:  # the kernel fixes the layout; inference keeps it
      x = plgpu.layout_cast(x, getattr(plgpu.Layout, case.layout))
    dst = compat.transpose_smem_ref(smem, (1, 0)) if case.transposed else smem
    k = case.barrier_index
    store(x, dst, bar.at[k], cluster_idx=0 if case.cta0 else 1 - cta, cluster_dim="cluster",
          atomic=case.atomic, optimized=case.optimized)
    if case.cta0:  # CTA 0's barrier counts both CTAs' stores; CTA 1's receives none
      jax.lax.cond(cta == 0, lambda: plgpu.barrier_wait(bar.at[k]), lambda: None)
    else:
      plgpu.barrier_wait(bar.at[k])  # what the peer sent has landed (and is visible)
    if tma_out(case):   # TMA out, as users' kernels copy SMEM to GMEM
      plgpu.commit_smem()   # (the init fill was generic-proxy: fence before the copy)
      plgpu.copy_smem_to_gmem(smem, o_ref.at[cta])
      plgpu.wait_smem_to_gmem(0)
    else:   # 4-bit and 64-bit data: through registers (Mosaic's TMA takes neither)
      compat.pallas_store(o_ref.at[cta], compat.pallas_load(smem, optimized=False,
                                                             **smem_layout))

  out = jax.ShapeDtypeStruct((2, *alloc), dt.numpy)
  kernel = plgpu.kernel(
      body, out_type=out, grid=(1,), grid_names=("g",), cluster=(2,),
      cluster_names=("cluster",),
      scratch_types=[plgpu.SMEM(alloc, dt.numpy, transforms=transforms),
                     plgpu.Barrier(num_arrivals=2 if case.cta0 else 1,
                                   num_barriers=case.barrier_index + 1,
                                   **({"orders_tensor_core": True} if case.tensor_core
                                      else {}))] +
                    ([plgpu.ClusterBarrier(collective_axes=("cluster",))]
                     if case.cluster_barrier else []),
      compiler_params=plgpu.CompilerParams(
          lowering_semantics=sem,
          **({} if case.auto_barriers else {"unsafe_no_auto_barriers": True})))
  return kernel, out


def make_inputs(case: PallasCase, seed: int = 0):
  """``(x, init)``: random, never-zero data for both CTAs (init in SMEM's shape)."""
  rng = np.random.default_rng(seed)
  info_of = as_dtype(case.dtype)
  dt = info_of.numpy
  alloc = case.shape[::-1] if case.transposed else case.shape

  def draw(shape):
    if not info_of.is_float:  # ml_dtypes.iinfo also knows int4 / uint4
      info = ml_dtypes.iinfo(dt)
      lo, hi = max(int(info.min), -1000), min(int(info.max), 1000)
      v = rng.integers(lo, hi + 1, size=shape)
      return np.where(v == 0, 1, v).astype(dt)
    v = rng.uniform(0.5, 4.0, size=shape) * rng.choice([-1, 1], size=shape)
    return v.astype(dt)
  return draw((2, *case.shape)), draw((2, *alloc))


def device_bytes(array: np.ndarray) -> np.ndarray:
  """The bytes a kernel sees of ``array``, as uint8 of the same rank (the last dim in
  bytes): as NumPy holds it, except 4-bit data, which NumPy keeps one element per byte
  and the GPU two (element ``2k`` in the low nibble)."""
  array = np.ascontiguousarray(array)
  if as_dtype(array.dtype).bits != 4:
    return array.view(np.uint8).reshape(*array.shape[:-1], -1)
  nibbles = array.view(np.uint8) & 0xF
  return (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).astype(np.uint8)


def expected(case: PallasCase, x: np.ndarray, init: np.ndarray) -> np.ndarray:
  """Every CTA's SMEM (in its allocated shape) after the kernel: the peer's data
  (or, into CTA 0, both CTAs' reduced into its init; CTA 1 keeps its init)."""
  if case.cta0:
    op = {"add": np.add, "min": np.minimum, "max": np.maximum}[case.atomic]
    return np.stack([op(op(init[0], x[0]), x[1]), init[1]]).astype(init.dtype)
  got = x[::-1]                                       # CTA c receives from CTA 1 - c
  if case.transposed:
    got = np.swapaxes(got, 1, 2)
  if case.atomic is None:
    return got
  if case.atomic == "add":                            # f32 add, rounded once per element
    return (init.astype(np.float64) + got.astype(np.float64)).astype(init.dtype)
  return {"min": np.minimum, "max": np.maximum}[case.atomic](init, got)


def traced(case: PallasCase):
  """The context to build and run ``case`` in: jax's 64-bit mode for 64-bit data
  (without it jax makes float64 arrays float32), else nothing."""
  return compat.enable_x64() if as_dtype(case.dtype).bits == 64 else contextlib.nullcontext()


def run_case(case: PallasCase, seed: int = 0) -> dict:
  """Runs one case on the GPU; returns a JSON-able result."""
  import jax.numpy as jnp
  from mosaic_async_store import pallas as mas_pallas
  start = time.perf_counter()
  if case.installs:
    mas_pallas.install()
  try:
    with traced(case):
      kernel, _ = roundtrip_kernel(case)
      x, init = make_inputs(case, seed)
      out = np.asarray(kernel(jnp.asarray(x), jnp.asarray(init)))
  finally:
    if case.installs:
      mas_pallas.uninstall()
  want = expected(case, x, init)
  bad = np.flatnonzero(out.reshape(-1).view(np.uint8) != want.reshape(-1).view(np.uint8))
  return {"config": case.describe(), "ok": bool(bad.size == 0),
          "mismatched_bytes": int(bad.size), "seconds": time.perf_counter() - start}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", required=True, help="JSON-lines results file (appended)")
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  failures = 0
  for case in PALLAS_CASES:
    try:
      res = run_case(case, args.seed)
    except Exception as e:  # noqa: BLE001  (record and go on with the batch)
      res = {"config": case.describe(), "ok": False, "mismatched_bytes": -1,
             "detail": f"{type(e).__name__}: {e}"[:500]}
    failures += not res["ok"]
    with open(args.out, "a") as f:
      f.write(json.dumps(res) + "\n")
    print(("PASS " if res["ok"] else "FAIL ") + res["config"], flush=True)
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
