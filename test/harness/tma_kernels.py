"""Pallas MGPU kernels that move data with TMA and compute with WGMMA, as users write them.

Each maker returns ``(fn, args)``, the form ``check`` and the ``compile``/``check`` CLI
take (``FILE.py:FUNCTION``): a jitted function that calls one Pallas kernel, and NumPy
inputs.  Two families:

* ``SMALL``: a 64x128 f16 TMA round trip (``copy_gmem_to_smem`` + ``barrier_wait``, then
  ``commit_smem`` + ``copy_smem_to_gmem``) under Lane and Warpgroup semantics, a
  ``pl.pallas_call`` WGMMA matmul whose blocks arrive by TMA, one whose A the threads
  write first, an ``emit_pipeline`` kernel, and a 2-CTA multicast copy
  (``collective_axes`` over the cluster).
* ``PRODUCTION``: upstream's hardware-tested kernels on small grids, built as upstream's
  tests build them (jax's ``pallas/ops/gpu`` modules and tests/pallas/mosaic_gpu_test.py):
  the Hopper matmul without and with a 2-CTA cluster (and with K = 256), flash attention
  (warp-specialised, ``setmaxnreg``), the warp-specialised pipelined copy, the realistic
  pipelined matmul and the mixed-type (int8 x bf16) matmul.
  Where upstream asks the GPU (its SM count, the CUDA runtime version) the maker answers
  for it, so that the kernel lowers on a CPU.

jax 0.11 and 0.12 have no Mosaic GPU lowering for ``pl.pallas_call`` itself; ``check``
and ``compile`` route a ``pl.pallas_call`` built while the kernel is traced through
upstream's current path (``compat.mosaic_gpu_pallas_call``), so the makers build theirs
inside the traced function, as a user's jitted code does.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402

__all__ = ["SMALL", "PRODUCTION", "ALL", "WGMMA", "SETMAXNREG", "EXPECTED", "CLOSE_TO"]

_TILE = (64, 128)


def _inputs(*shapes, dtype=np.float16):
  rng = np.random.default_rng(0)
  return tuple(rng.uniform(-1, 1, s).astype(dtype) for s in shapes)


def _round_trip(semantics, interpret=None):
  def body(x_ref, o_ref, smem, bar):
    plgpu.copy_gmem_to_smem(x_ref, smem, bar)
    plgpu.barrier_wait(bar)
    smem[...] = smem[...] + jnp.float16(1)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem, o_ref)
    plgpu.wait_smem_to_gmem(0)

  params = plgpu.CompilerParams(lowering_semantics=semantics)
  kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(_TILE, jnp.float16),
                        scratch_types=[plgpu.SMEM(_TILE, jnp.float16), plgpu.Barrier()],
                        compiler_params=params, interpret=interpret)
  return jax.jit(kernel), _inputs(_TILE)


def tma_round_trip_lane(interpret=None):
  """A 64x128 f16 tile: TMA load, +1 in registers, TMA store (Lane semantics);
  ``interpret``: plgpu.kernel's (jax's interpret mode, for the benchmarks)."""
  return _round_trip(plgpu.LoweringSemantics.Lane, interpret)


def tma_round_trip_warpgroup():
  """The same round trip under Warpgroup semantics."""
  return _round_trip(plgpu.LoweringSemantics.Warpgroup)


def _transforms(dtype, swizzle=128):
  elems = 8 * swizzle // (jnp.dtype(dtype).itemsize * 8)
  return (plgpu.TilingTransform((8, elems)), plgpu.SwizzleTransform(swizzle))


def wgmma_matmul(swizzle=128, dtype=jnp.float16):
  """``pl.pallas_call``: a 128x128x64 matmul (f16; or ``dtype``), A and B blocks by TMA
  with the ``swizzle`` (bytes) WGMMA's descriptors then carry, WGMMA into an f32
  accumulator, the result stored by TMA."""
  def body(a_smem, b_smem, o_smem, acc):
    plgpu.wgmma(acc, a_smem, b_smem)
    plgpu.wgmma_wait(0)
    o_smem[...] = acc[...].astype(dtype)

  return _one_block_matmul(body, dtype, _transforms(dtype, swizzle))


_M = _N = 128   # (the one-block matmuls: 128x128x64)
_K = 64


def _one_block_matmul(body, dtype, transforms, extra_scratch=()):
  """A ``pl.pallas_call`` of ``body(a_smem, b_smem, o_smem, acc, *extra_scratch)``: one
  128x128x64 block, A, B and the output by TMA with ``transforms``, an f32 accumulator;
  (jitted function, NumPy inputs)."""
  def matmul(a, b):   # built while traced (module docstring)
    return pl.pallas_call(
        body,
        in_specs=[plgpu.BlockSpec((_M, _K), lambda: (0, 0), transforms=transforms),
                  plgpu.BlockSpec((_K, _N), lambda: (0, 0), transforms=transforms)],
        out_specs=plgpu.BlockSpec((_M, _N), lambda: (0, 0), transforms=transforms),
        out_shape=jax.ShapeDtypeStruct((_M, _N), dtype),
        scratch_shapes=[plgpu.ACC((_M, _N), jnp.float32), *extra_scratch],
        compiler_params=plgpu.CompilerParams())(a, b)

  return jax.jit(matmul), _inputs((_M, _K), (_K, _N), dtype=dtype)


def wgmma_after_generic_write(overwrite_before_wait=False):
  """``pl.pallas_call``: A arrives by TMA, the threads write A + 1 into a second SMEM
  buffer (generic stores), ``commit_smem`` (the proxy fence), then WGMMA reads that
  buffer: (A + 1) @ B, 128x128x64 f16.  ``overwrite_before_wait``: the threads copy A over
  that buffer after issuing the WGMMA and before waiting for it (a bug: a race with its
  reads)."""
  transforms = _transforms(jnp.float16)

  def body(a_smem, b_smem, o_smem, acc, a2_smem):
    a2_smem[...] = a_smem[...] + jnp.float16(1)
    plgpu.commit_smem()
    plgpu.wgmma(acc, a2_smem, b_smem)
    if overwrite_before_wait:
      a2_smem[...] = a_smem[...]
    plgpu.wgmma_wait(0)
    o_smem[...] = acc[...].astype(jnp.float16)

  return _one_block_matmul(body, jnp.float16, transforms,
                           [plgpu.SMEM((_M, _K), jnp.float16, transforms=transforms)])


def pipelined_add(interpret=None):
  """``plgpu.emit_pipeline``: x + y over a 256x128 f32 array in 64x128 blocks, two
  blocks in flight (``interpret``: as tma_round_trip_lane's)."""
  shape, block = (256, 128), (64, 128)

  def body(x_gmem, y_gmem, o_gmem):
    def step(_, x_smem, y_smem, o_smem):
      o_smem[...] = x_smem[...] + y_smem[...]

    spec = pl.BlockSpec(block, lambda i: (i, 0))
    plgpu.emit_pipeline(step, grid=(shape[0] // block[0],), in_specs=[spec, spec],
                        out_specs=[spec], max_concurrent_steps=2)(x_gmem, y_gmem, o_gmem)

  kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(shape, jnp.float32),
                        interpret=interpret)
  return jax.jit(kernel), _inputs(shape, shape, dtype=np.float32)


def multicast_copy():
  """A 2-CTA cluster: one TMA load multicast to both CTAs (``collective_axes``), each
  CTA storing its copy into its own row of the output."""
  def body(x_ref, y_ref, smem, bar):
    plgpu.copy_gmem_to_smem(x_ref, smem, bar, collective_axes="cluster")
    plgpu.barrier_wait(bar)
    plgpu.copy_smem_to_gmem(smem, y_ref.at[jax.lax.axis_index("cluster")])
    plgpu.wait_smem_to_gmem(0)

  kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((2, 128), jnp.float32),
                        scratch_types=[plgpu.SMEM((128,), jnp.float32), plgpu.Barrier()],
                        cluster=(2,), cluster_names=("cluster",))
  return jax.jit(kernel), _inputs((128,), dtype=np.float32)


@contextlib.contextmanager
def _patched(module, name, value):
  old = getattr(module, name)
  setattr(module, name, value)
  try:
    yield
  finally:
    setattr(module, name, old)


class _Deferred:
  """A callable that enters ``patches`` around each call (upstream's kernels ask the GPU
  for its SM count and CUDA version while they are traced, which happens on each
  lowering, after the maker returned)."""

  def __init__(self, fn: Callable, patches: Callable[[], contextlib.AbstractContextManager]):
    self._fn, self._patches = fn, patches
    functools.update_wrapper(self, fn)

  def __call__(self, *args):
    with self._patches():
      return self._fn(*args)


@contextlib.contextmanager
def _sms_and_interpret(hm, interpret):
  """Four SMs; with ``interpret``, every ``plgpu.kernel`` built meanwhile runs in jax's
  interpret mode with those parameters."""
  with _patched(hm, "get_num_sms", lambda: 4), contextlib.ExitStack() as stack:
    if interpret is not None:
      stack.enter_context(_patched(plgpu, "kernel", functools.partial(plgpu.kernel,
                                                                      interpret=interpret)))
    yield


def _hopper_matmul(cluster: bool, k: int = 128, interpret=None):
  from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm
  m, n = 256, 256
  config = hm.TuningConfig(
      tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
      cluster_dimension=hm.MatmulDimension.M if cluster else None)
  fn = _Deferred(jax.jit(lambda a, b: hm.matmul(a, b, None, config)),
                 lambda: _sms_and_interpret(hm, interpret))
  return fn, _inputs((m, k), (k, n))


def hopper_matmul(interpret=None):
  """Upstream's Hopper matmul (pallas/ops/gpu/hopper_matmul_mgpu.py): Warpgroup
  semantics, warp-specialised, TMA pipeline, WGMMA; 256x128x256 f16 on 4 SMs
  (``interpret``: as tma_round_trip_lane's)."""
  return _hopper_matmul(cluster=False, interpret=interpret)


def hopper_matmul_k256():
  """The Hopper matmul with K = 256: four steps through its two slots, so that each slot
  is loaded again after its consumers released it."""
  return _hopper_matmul(cluster=False, k=256)


def hopper_matmul_cluster():
  """The same matmul with a 2-CTA cluster along M (TMA multicast of B)."""
  return _hopper_matmul(cluster=True)


class _CudaVersions:
  """What upstream's attention asks of the CUDA runtime: a version past its workaround."""

  @staticmethod
  def cuda_runtime_get_version():
    return 12091


def flash_attention():
  """Upstream's flash attention forward (pallas/ops/gpu/attention_mgpu.py): two compute
  warpgroups and a memory warpgroup, ``setmaxnreg``; batch 1, 256 queries and keys,
  2 heads, head dim 64."""
  from jax.experimental.pallas.ops.gpu import attention_mgpu as am
  config = am.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2)
  shape = (1, 256, 2, 64)
  fn = _Deferred(jax.jit(lambda q, k, v: am.attention(q, k, v, config)),
                 lambda: _patched(am, "cuda_versions", _CudaVersions))
  return fn, _inputs(shape, shape, shape)


def warp_specialized_copy(interpret=None):
  """Upstream's test_pipelined_copy (WarpSpecializedPipelineTest): a 512x512 f16 copy
  through ``emit_pipeline_warp_specialized`` (a memory warpgroup with 40 registers, one
  compute warpgroup), with an index-invariant second output (``interpret``: as
  tma_round_trip_lane's)."""
  from jax._src.pallas.mosaic_gpu import pipeline as mgpu_pipeline
  m = n = 512
  blk_m = blk_n = 32

  def copy_step(_, x_smem, o_smem, o_last_smem):
    o_smem[...] = x_smem[...]
    o_last_smem[...] = x_smem[...]

  spec = pl.BlockSpec((2 * blk_m, blk_n), lambda i, j: (i, j))

  def body(*gmem_refs):
    mgpu_pipeline.emit_pipeline_warp_specialized(
        copy_step, grid=(m // (2 * blk_m), n // blk_n), memory_registers=40,
        max_concurrent_steps=2, num_compute_wgs=1, wg_axis="wg",
        in_specs=[spec],
        out_specs=[spec, pl.BlockSpec((2 * blk_m, blk_n), lambda i, j: (0, 0))],
    )(*gmem_refs)

  kernel = plgpu.kernel(
      body, out_type=(jax.ShapeDtypeStruct((m, n), jnp.float16),
                      jax.ShapeDtypeStruct((2 * blk_m, blk_n), jnp.float16)),
      compiler_params=plgpu.CompilerParams(approx_math=True),
      num_threads=2, thread_name="wg", interpret=interpret)
  return jax.jit(kernel), _inputs((m, n))


class _FourSms:
  """What upstream's mixed-type matmul asks of the default device: its SM count."""

  @staticmethod
  def get_default_device():
    return type("Device", (), {"core_count": 4})()


def mixed_type_matmul():
  """Upstream's mixed-type matmul (pallas/ops/gpu/hopper_mixed_type_matmul_mgpu.py): int8
  A converted to bf16 in registers (WGMMA's A from registers), bf16 B by TMA, bf16 out;
  256x128x256 on 4 SMs."""
  from jax.experimental.pallas.ops.gpu import hopper_mixed_type_matmul_mgpu as mm
  m, k, n = 256, 128, 256
  config = mm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2)
  fn = _Deferred(jax.jit(lambda a, b: mm.mixed_matmul_kernel(a, b, out_dtype=jnp.bfloat16,
                                                             config=config)),
                 lambda: _patched(mm, "backend", _FourSms))
  rng = np.random.default_rng(0)
  a = rng.integers(-128, 128, (m, k)).astype(np.int8)
  b = rng.uniform(-1, 1, (k, n)).astype(jnp.bfloat16)
  return fn, (a, b)


def realistic_matmul(delay_release=1):
  """Upstream's test_realistic_matmul (PipelineSm90ATest) on a 2x2 grid: a
  ``pl.pallas_call`` whose body runs ``emit_pipeline`` over K with WGMMA and
  ``delay_release`` (``delay_release=0``: a bug, the pipeline refills a slot with its
  next TMA load while the step's WGMMA, left in flight by ``wgmma_wait(1)``, still
  reads it)."""
  dtype = jnp.float16
  tile_m = tile_n = 128
  tile_k = 64
  grid_m, grid_k, grid_n = 2, 4, 2
  m, k, n = grid_m * tile_m, grid_k * tile_k, grid_n * tile_n
  transforms = _transforms(dtype)

  def body(a_gmem, b_gmem, o_smem, acc):
    def step(_, a_smem, b_smem):
      plgpu.wgmma(acc, a_smem, b_smem)
      plgpu.wgmma_wait(1)

    pid_m, pid_n = pl.program_id(0), pl.program_id(1)
    plgpu.emit_pipeline(
        step,
        in_specs=[plgpu.BlockSpec((tile_m, tile_k), lambda kk: (pid_m, kk),
                                  transforms=transforms, delay_release=delay_release),
                  plgpu.BlockSpec((tile_k, tile_n), lambda kk: (kk, pid_n),
                                  transforms=transforms, delay_release=delay_release)],
        grid=(grid_k,), max_concurrent_steps=2)(a_gmem, b_gmem)
    o_smem[...] = acc[...].astype(dtype)

  def matmul(a, b):   # built while traced (module docstring)
    return pl.pallas_call(
        body,
        in_specs=[pl.BlockSpec(memory_space=plgpu.GMEM),
                  pl.BlockSpec(memory_space=plgpu.GMEM)],
        out_specs=plgpu.BlockSpec((tile_m, tile_n), lambda i, j: (i, j),
                                  transforms=transforms),
        out_shape=jax.ShapeDtypeStruct((m, n), dtype),
        scratch_shapes=[plgpu.ACC((tile_m, tile_n), jnp.float32)],
        grid=(grid_m, grid_n), compiler_params=plgpu.CompilerParams())(a, b)

  return jax.jit(matmul), _inputs((m, k), (k, n))


SMALL = {f.__name__: f for f in (tma_round_trip_lane, tma_round_trip_warpgroup,
                                 wgmma_matmul, wgmma_after_generic_write, pipelined_add,
                                 multicast_copy)}
PRODUCTION = {f.__name__: f for f in (hopper_matmul, hopper_matmul_k256, hopper_matmul_cluster,
                                      flash_attention,
                                      warp_specialized_copy, realistic_matmul,
                                      mixed_type_matmul)}
ALL = {**SMALL, **PRODUCTION}
# The kernels that multiply with WGMMA (sm_90a only: Blackwell has tcgen05 instead).
WGMMA = ("wgmma_matmul", "wgmma_after_generic_write", "hopper_matmul", "hopper_matmul_k256",
         "hopper_matmul_cluster", "flash_attention", "realistic_matmul", "mixed_type_matmul")
# The kernels whose warpgroups re-balance registers with setmaxnreg.
SETMAXNREG = ("hopper_matmul", "hopper_matmul_k256", "hopper_matmul_cluster",
              "flash_attention", "warp_specialized_copy", "mixed_type_matmul")
# What each kernel without WGMMA leaves in its outputs, from its inputs (NumPy): the
# checker's tests and bench/checker_real_kernels.py compare with these.
EXPECTED = {
    "tma_round_trip_lane": lambda x: [x + np.float16(1)],
    "tma_round_trip_warpgroup": lambda x: [x + np.float16(1)],
    "pipelined_add": lambda x, y: [x + y],
    "multicast_copy": lambda x: [np.stack([x, x])],
    "warp_specialized_copy": lambda x: [x, x[-64:, -32:]],   # the last step's block
}


def _matmul(a, b):
  return a.astype(np.float64) @ b.astype(np.float64)


def _attention(q, k, v):
  q, k, v = (x.astype(np.float64) for x in (q, k, v))
  s = np.einsum("bqhd,bkhd->bhqk", q, k)
  p = np.exp(s - s.max(-1, keepdims=True))
  return np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), v)


# What each WGMMA kernel computes, in float64 (NumPy), and how close its output must be:
# (reference, rtol, atol).  A WGMMA's sum is rounded once by the checker
# (check/wgmma.py), a GPU's may round otherwise, so the outputs are compared to the
# rounding of their type (f16: 2^-11, bf16: 2^-8, relative), as upstream's tests do.
CLOSE_TO = {
    "wgmma_matmul": (lambda a, b: [_matmul(a, b)], 2e-3, 2e-3),
    "wgmma_after_generic_write": (lambda a, b: [_matmul(a + np.float16(1), b)], 2e-3, 8e-3),
    "hopper_matmul": (lambda a, b: [_matmul(a, b)], 2e-3, 4e-3),
    "hopper_matmul_cluster": (lambda a, b: [_matmul(a, b)], 2e-3, 4e-3),
    "hopper_matmul_k256": (lambda a, b: [_matmul(a, b)], 2e-3, 8e-3),
    "realistic_matmul": (lambda a, b: [_matmul(a, b)], 2e-3, 8e-3),
    "flash_attention": (lambda q, k, v: [_attention(q, k, v)], 2e-3, 2e-3),
    "mixed_type_matmul": (lambda a, b: [_matmul(a, b)], 8e-3, 1e-1),
}
