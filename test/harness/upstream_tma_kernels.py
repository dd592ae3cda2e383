"""Upstream's hardware-tested TMA kernels, rebuilt for the checker: the TMA calibration set.

Each entry of ``KERNELS`` (an ``UpstreamTma``) rebuilds one test of jax's
tests/pallas/mosaic_gpu_test.py (jax-ml/jax, main as of 2026-08) the way the test builds
its kernel: the same Pallas MGPU calls, shapes, dtypes, transforms, swizzles, grids and
clusters (one or two parameter sets of a parameterised test, named in ``name``).  Its
``make()`` returns ``(fn, args, expected)``: a jitted function ``check`` takes, NumPy
inputs, and a tuple with one NumPy array per output holding the values the upstream test
asserts, computed as the test computes its reference.  Elements the test does not assert
(an output it only compares in part) are masked (``numpy.ma``).

The kernels cover TMA loads and stores (``copy_gmem_to_smem`` / ``copy_smem_to_gmem``,
predicated, through transforms and indexers, out of bounds), TMA multicast over a
cluster (``collective_axes``), bulk groups (``commit_smem``, ``wait_smem_to_gmem``,
explicit commit groups), TMA prefetch, ``emit_pipeline`` and
``emit_pipeline_warp_specialized`` (memory warpgroup with ``setmaxnreg``), and copies
issued and awaited by different warps.  WGMMA, tcgen05/TMEM and im2col kernels are left
out (the checker does not run them), as are tests that only check error messages.

Upstream's Mosaic GPU tests (tests/mosaic/gpu_test.py, ``mgpu.as_gpu_kernel``) are not
here: ``check`` lowers a kernel through Pallas's call of Mosaic's lowering rule
(``tools.pallas_capture``), which an ``as_gpu_kernel`` kernel never reaches.

jax 0.11 and 0.12 have no Mosaic GPU lowering for ``pl.pallas_call`` itself, so the
``pl.pallas_call`` kernels are built inside the traced function (see tma_kernels.py).
An entry whose upstream API a jax lacks names the first version it supports in ``since``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402

from mosaic_async_store import compat  # noqa: E402

__all__ = ["UpstreamTma", "KERNELS", "BY_NAME"]

PALLAS = "tests/pallas/mosaic_gpu_test.py"


@dataclasses.dataclass(frozen=True)
class UpstreamTma:
  """One calibration kernel.

  Attributes:
    name: the upstream test and the parameters chosen, e.g. "copy_smem_to_gmem[...]".
    test: the upstream test's id ("tests/pallas/mosaic_gpu_test.py::Class::test_x").
    make: () -> (fn, args, expected); see the module docstring.
    exercises: PTX opcode fragments the test is about; each must occur in its PTX.
    grid, cluster, threads: the launch Mosaic builds (CUDA grid, cluster, block x).
    since: the first jax version that has every API the kernel uses.
    rtol: the relative tolerance of the upstream test's comparison (0: exact).
    finding: for an upstream test kernel that breaks a rule of the PTX ISA (it passes on
      hardware by timing), the rules the checker reports in every schedule, with
      ``why``; empty: the checker passes it with the test's expected values.
    finding_since: the first jax whose lowering of it breaks the rule.
    why: what the kernel does wrong, in words (docs/checker.md shows it).
    warnings: the warnings its run carries (docs/checker.md, "Warnings": the ISA's
      letter broken where widely used code relies on it), exactly; empty: none.
  """

  name: str
  test: str
  make: Callable[[], tuple]
  exercises: tuple[str, ...]
  grid: tuple[int, int, int] = (1, 1, 1)
  cluster: tuple[int, int, int] = (1, 1, 1)
  threads: int = 128
  since: tuple[int, int] = (0, 10)
  rtol: float = 0.0
  finding: tuple[str, ...] = ()
  finding_since: tuple[int, int] = (0, 10)
  why: str = ""
  warnings: tuple[str, ...] = ()


# What an entry exercises: regular expressions over its PTX, one per instruction form.
TMA_LOAD = (r"cp\.async\.bulk\.tensor\.\dd\.shared::(cta|cluster)\.global"
            r"\.mbarrier::complete_tx")
BULK_LOAD = r"cp\.async\.bulk\.shared::(cta|cluster)\.global\.mbarrier::complete_tx"
TMA_STORE = r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta\.bulk_group"
BULK_STORE = r"cp\.async\.bulk\.global\.shared::cta\.bulk_group"
MULTICAST = r"\.multicast::cluster"
COMMIT = r"cp\.async\.bulk\.commit_group"
WAIT = r"cp\.async\.bulk\.wait_group\s"           # reads and writes done
WAIT_READ = r"cp\.async\.bulk\.wait_group\.read"  # reads of SMEM done
EXPECT_TX = r"mbarrier\.arrive\.expect_tx"
PREFETCH = r"cp\.async\.bulk\.prefetch\.tensor"
PROXY_FENCE = r"fence\.proxy\.async"
SETMAXNREG = r"setmaxnreg\.(inc|dec)"
# Every form, by name, for tables and surveys.
FORMS = {name: globals()[name] for name in (
    "TMA_LOAD", "BULK_LOAD", "TMA_STORE", "BULK_STORE", "MULTICAST", "COMMIT", "WAIT",
    "WAIT_READ", "EXPECT_TX", "PREFETCH", "PROXY_FENCE", "SETMAXNREG")}


# -- building kernels as the tests do ------------------------------------------------


def _kernel(body, **kwargs):
  """The test's ``self.kernel`` (Lane semantics): ``plgpu.kernel``, jitted."""
  return jax.jit(plgpu.kernel(body, **kwargs))


def _pallas_call(body, **kwargs):
  """The test's ``self.pallas_call``: a ``pl.pallas_call`` built while traced."""
  compiler_params = kwargs.pop("compiler_params", plgpu.CompilerParams())
  return jax.jit(lambda *xs: pl.pallas_call(body, compiler_params=compiler_params,
                                            **kwargs)(*xs))


def _transforms(dtype, swizzle=128):
  """The test's ``default_transforms``: (8, swizzle bytes) tiles, swizzled."""
  elems = 8 * swizzle // (np.dtype(dtype).itemsize * 8)
  return (plgpu.TilingTransform((8, elems)), plgpu.SwizzleTransform(swizzle))


def _uniform(key, shape, dtype=jnp.float32):
  return np.asarray(jax.random.uniform(jax.random.key(key), shape, dtype=dtype))


def _arange(shape, dtype=np.float32):
  return np.arange(np.prod(shape)).reshape(shape).astype(dtype)


def _partial(data, asserted):
  """``data`` with only the elements under the index ``asserted`` left unmasked."""
  mask = np.ones(data.shape, bool)
  mask[asserted] = False
  return np.ma.masked_array(data, mask)


def _f32(shape):
  return jax.ShapeDtypeStruct(shape, jnp.float32)


# -- PallasCallTest: pl.pallas_call with block specs -----------------------------------


def add_one_grid_with_scratch():
  def body(x_ref, o_ref, scratch_ref):
    scratch_ref[...] = x_ref[...] + 1
    o_ref[...] = scratch_ref[...]
  fn = _pallas_call(body, out_shape=_f32([256]),
                    in_specs=[pl.BlockSpec((128,), lambda i: i)],
                    out_specs=pl.BlockSpec((128,), lambda i: i),
                    scratch_shapes=[plgpu.SMEM((128,), jnp.float32)], grid=(2,))
  x = _arange(256)
  return fn, (x,), (x + 1,)


def add_one_grid_pipelined():
  def body(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0
  fn = _pallas_call(
      body, in_specs=[pl.BlockSpec((128, 16), lambda i, j: (i, j))],
      out_specs=pl.BlockSpec((128, 16), lambda i, j: (i, j)), out_shape=_f32([256, 64]),
      compiler_params=plgpu.CompilerParams(dimension_semantics=["parallel", "sequential"],
                                           max_concurrent_steps=2), grid=(2, 4))
  x = _arange((256, 64))
  return fn, (x,), (x + 1,)


def add_one_grid_pipelined_program_id():
  def body(o_ref):
    o_ref[...] = jnp.broadcast_to(pl.program_id(1), o_ref.shape)
  fn = _pallas_call(
      body, out_specs=pl.BlockSpec((16, 16), lambda i, j: (i, j)),
      out_shape=jax.ShapeDtypeStruct([16, 64], jnp.int32),
      compiler_params=plgpu.CompilerParams(dimension_semantics=["parallel", "sequential"],
                                           max_concurrent_steps=2), grid=(4, 4))
  want = np.repeat(np.repeat(np.arange(4), 16)[None], 16, axis=0).astype(np.int32)
  return fn, (), (want,)


def add_one_grid_pipelined_sequential_invariant_output():
  def body(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0
  fn = _pallas_call(
      body, in_specs=[pl.BlockSpec((32, 16), lambda i, j: (i, j))],
      out_specs=pl.BlockSpec((32, 16), lambda i, j: (i, 0)), out_shape=_f32([64, 64]),
      compiler_params=plgpu.CompilerParams(dimension_semantics=["parallel", "sequential"],
                                           max_concurrent_steps=2), grid=(2, 4))
  x = _arange((64, 64))
  y = np.zeros_like(x)
  for i in range(2):   # the last sequential step's block lands in the first 16 columns
    y[32 * i:32 * (i + 1), :16] = x[32 * i:32 * (i + 1), 48:64] + 1
  return fn, (x,), (_partial(y, np.s_[:, :16]),)


def gmem_to_smem_with_multiple_smem_indexers():
  def body(x_ref_gmem, o_ref, scratch_ref, barrier_ref):
    plgpu.copy_gmem_to_smem(x_ref_gmem, scratch_ref, barrier_ref)
    plgpu.barrier_wait(barrier_ref)
    x_sliced = scratch_ref.at[0, :, :]
    o_ref[pl.ds(0, 32), :] = x_sliced[pl.ds(0, 32), :]
    o_ref[pl.ds(32, 32), :] = x_sliced[pl.ds(32, 32), :]
  x = _uniform(0, (2, 64, 64))
  fn = _pallas_call(body, out_shape=_f32([64, 64]),
                    in_specs=(pl.BlockSpec(memory_space=plgpu.GMEM),),
                    scratch_shapes=[plgpu.SMEM(x.shape, jnp.float32), plgpu.Barrier()])
  return fn, (x,), (x[0],)


def _copy_with_transforms(to_smem):
  def body(x_ref, o_ref, barrier_ref):
    if to_smem:
      plgpu.copy_gmem_to_smem(x_ref, o_ref, barrier_ref)
      plgpu.barrier_wait(barrier_ref)
    else:
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(x_ref, o_ref)
      plgpu.wait_smem_to_gmem(0)
  gmem = pl.BlockSpec(memory_space=plgpu.GMEM)
  smem = plgpu.BlockSpec(transforms=_transforms(np.float32), memory_space=plgpu.SMEM)
  in_spec, out_spec = (gmem, smem) if to_smem else (smem, gmem)
  fn = _pallas_call(body, out_shape=_f32([128, 128]), in_specs=(in_spec,),
                    out_specs=out_spec, scratch_shapes=[plgpu.Barrier()])
  x = _arange((128, 128))
  return fn, (x,), (x,)


def scoped_copy_with_transforms():
  ts = _transforms(np.float32)

  def body(x_ref, o_ref, barrier_ref):
    def scoped(tmp_ref):
      plgpu.copy_gmem_to_smem(x_ref, tmp_ref, barrier_ref)
      plgpu.barrier_wait(barrier_ref)
      o_ref[...] = tmp_ref[...] * 2
    pl.run_scoped(scoped, plgpu.SMEM((128, 64), jnp.float32, transforms=ts))
  fn = _pallas_call(body, out_shape=_f32([128, 64]),
                    in_specs=(pl.BlockSpec(memory_space=plgpu.GMEM),),
                    out_specs=plgpu.BlockSpec(transforms=ts, memory_space=plgpu.SMEM),
                    scratch_shapes=[plgpu.Barrier()])
  x = _arange((128, 64))
  return fn, (x,), (x * 2,)


# -- PallasCallTest: plgpu.kernel with explicit copies -----------------------------------


def _copy_smem_to_gmem(indexer):
  def body(x_ref, o_ref_gmem, scratch_ref):
    scratch_ref[...] = x_ref[...] + 1
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(scratch_ref.at[indexer], o_ref_gmem.at[indexer])
    plgpu.wait_smem_to_gmem(0)
  fn = _kernel(body, out_type=_f32([256]), scratch_types=[plgpu.SMEM((256,), jnp.float32)])
  x = _arange(256)
  return fn, (x,), (_partial(x + 1, indexer),)


def _copy_smem_to_gmem_predicate(predicate):
  def body(o_ref_gmem, scratch_ref):
    o_ref_gmem[...] = jnp.zeros([256], dtype=jnp.float32)
    scratch_ref[...] = jnp.ones([256], dtype=jnp.float32)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(scratch_ref, o_ref_gmem, predicate=predicate)
    plgpu.wait_smem_to_gmem(0)
  fn = _kernel(body, out_type=_f32([256]), scratch_types=[plgpu.SMEM((256,), jnp.float32)])
  return fn, (), (np.full(256, 1.0 if predicate else 0.0, np.float32),)


def copy_smem_to_gmem_explicit_commit_group():
  def body(x_ref, o_ref_gmem, scratch_ref):
    scratch_ref[...] = x_ref[...] + 1
    plgpu.commit_smem()

    def copy_to_gmem():
      plgpu.copy_smem_to_gmem(scratch_ref, o_ref_gmem, commit_group=False)
      plgpu.commit_smem_to_gmem_group()
      plgpu.wait_smem_to_gmem(0)
    plgpu.warp_map(lambda warp_id: pl.when(warp_id == 0)(copy_to_gmem))
  fn = _kernel(body, out_type=_f32([256]), scratch_types=[plgpu.SMEM((256,), jnp.float32)])
  x = _arange(256)
  return fn, (x,), (x + 1,)


def _copy_gmem_to_smem(indexer):
  def body(x_ref_gmem, o_ref, scratch_ref, barrier_ref):
    plgpu.copy_gmem_to_smem(x_ref_gmem.at[indexer], scratch_ref.at[indexer], barrier_ref,
                            oob_mode=plgpu.OOBFillMode.PROMISE_IN_BOUNDS)
    plgpu.barrier_wait(barrier_ref)
    o_ref[...] = scratch_ref[...] + 1
  fn = _kernel(body, out_type=_f32([256]),
               scratch_types=[plgpu.SMEM((256,), jnp.float32), plgpu.Barrier()])
  x = _arange(256)
  return fn, (x,), (_partial(x + 1, indexer),)


def copy_gmem_to_smem_dynamic_slice():
  def body(x_ref_gmem, o_ref, scratch_ref, barrier_ref):
    @pl.loop(0, o_ref.size // scratch_ref.size)
    def _(i):
      s = pl.ds(i * 128, 128)
      plgpu.copy_gmem_to_smem(x_ref_gmem.at[s], scratch_ref, barrier_ref,
                              oob_mode=plgpu.OOBFillMode.PROMISE_IN_BOUNDS)
      plgpu.barrier_wait(barrier_ref)
      o_ref[s] = scratch_ref[...] + 1
  fn = _kernel(body, out_type=_f32([256]),
               scratch_types=[plgpu.SMEM((128,), jnp.float32), plgpu.Barrier()])
  x = _arange(256)
  return fn, (x,), (x + 1,)


def copy_gmem_to_smem_squeeze():
  def body(x_ref_gmem, o_ref, scratch_ref, barrier_ref):
    @pl.loop(0, o_ref.shape[0])
    def _(i):
      plgpu.copy_gmem_to_smem(x_ref_gmem.at[i], scratch_ref, barrier_ref,
                              oob_mode=plgpu.OOBFillMode.PROMISE_IN_BOUNDS)
      plgpu.barrier_wait(barrier_ref)
      o_ref[i] = scratch_ref[...] + 1
  fn = _kernel(body, out_type=_f32([4, 8, 32]),
               scratch_types=[plgpu.SMEM((8, 32), jnp.float32), plgpu.Barrier()])
  x = _arange((4, 8, 32))
  return fn, (x,), (x + 1,)


def copy_gmem_to_smem_predicate():
  def body(x_ref, o_ref, scratch_ref, barrier_ref):
    scratch_ref[...] = jnp.zeros([256], dtype=jnp.float32)
    block_id = lax.axis_index("block")
    idx = pl.ds(block_id * 128, 128)
    plgpu.copy_gmem_to_smem(x_ref.at[idx], scratch_ref.at[idx], barrier_ref,
                            predicate=block_id == 0)
    plgpu.barrier_wait(barrier_ref)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(scratch_ref.at[idx], o_ref.at[idx])
    plgpu.wait_smem_to_gmem(0)
  fn = _kernel(body, out_type=_f32([256]), grid=(2,), grid_names=("block",),
               scratch_types=[plgpu.SMEM([256], jnp.float32), plgpu.Barrier()])
  x = _arange(256)
  return fn, (x,), (np.concatenate([x[:128], np.zeros(128, np.float32)]),)


def collective_copy_gmem_to_smem():
  def body(x_ref, y_ref, smem_ref, barrier_ref):
    plgpu.copy_gmem_to_smem(x_ref, smem_ref, barrier_ref, collective_axes="cluster")
    plgpu.barrier_wait(barrier_ref)
    plgpu.copy_smem_to_gmem(smem_ref, y_ref.at[lax.axis_index("cluster")])
    plgpu.wait_smem_to_gmem(0)
  fn = _kernel(body, out_type=_f32((2, 128)), cluster=(2,), cluster_names=("cluster",),
               scratch_types=dict(smem_ref=plgpu.SMEM((128,), jnp.float32),
                                  barrier_ref=plgpu.Barrier()))
  x = _arange(128)
  return fn, (x,), (np.stack([x, x]),)


def kernel_scratch_kwargs():
  def body(x_ref, y_ref, *, smem_ref, barrier_ref):
    plgpu.copy_gmem_to_smem(x_ref, smem_ref, barrier_ref)
    plgpu.barrier_wait(barrier_ref)
    plgpu.copy_smem_to_gmem(smem_ref, y_ref)
    plgpu.wait_smem_to_gmem(0)
  fn = _kernel(body, out_type=_f32((128,)),
               scratch_types=dict(smem_ref=plgpu.SMEM((128,), jnp.float32),
                                  barrier_ref=plgpu.Barrier()))
  x = _arange(128)
  return fn, (x,), (x,)


def async_prefetch():
  def body(x_ref_gmem, o_ref, scratch_ref, barrier_ref):
    plgpu.async_prefetch(x_ref_gmem.at[...])
    plgpu.copy_gmem_to_smem(x_ref_gmem.at[...], scratch_ref.at[...], barrier_ref)
    plgpu.barrier_wait(barrier_ref)
    o_ref[...] = scratch_ref[...] + 1
  fn = _kernel(body, out_type=_f32([256]),
               scratch_types=[plgpu.SMEM((256,), jnp.float32), plgpu.Barrier()])
  x = _arange(256)
  return fn, (x,), (x + 1,)


def copy_gmem_to_smem_with_indexed_barrier():
  indexer, num_barriers = (1, 1), (2, 2)

  def body(x_ref_gmem, o_ref, scratch_ref, barrier_ref):
    plgpu.copy_gmem_to_smem(x_ref_gmem, scratch_ref, barrier_ref.at[indexer])
    plgpu.barrier_wait(barrier_ref.at[indexer])
    o_ref[...] = scratch_ref[...] + 1
  fn = _kernel(body, out_type=_f32([128]),
               scratch_types=[plgpu.SMEM((128,), jnp.float32),
                              plgpu.Barrier(num_barriers=num_barriers)])
  x = _arange(128)
  return fn, (x,), (x + 1,)


def copy_with_transforms_and_indexing():
  def body(x_ref, o_ref, scratch_ref, barrier_ref):
    transposed = compat.transpose_smem_ref(scratch_ref, (1, 0, 2, 3))
    for i in range(2):
      plgpu.copy_gmem_to_smem(x_ref, transposed.at[:, i], barrier_ref)
      plgpu.barrier_wait(barrier_ref)
    plgpu.copy_smem_to_gmem(transposed, o_ref)
    plgpu.wait_smem_to_gmem(0)
  fn = _kernel(body, out_type=_f32([1, 2, 64, 64]),
               scratch_types=(plgpu.SMEM((2, 1, 64, 64), jnp.float32,
                                         transforms=_transforms(np.float32)),
                              plgpu.Barrier()))
  x = _arange((1, 64, 64))
  return fn, (x,), (np.stack([x, x], axis=1),)


def copy_gmem_to_smem_in_run_scoped():
  def body(x_ref_gmem, o_ref):
    def with_barrier(barrier_ref):
      def with_scratch(scratch_ref):
        plgpu.copy_gmem_to_smem(x_ref_gmem, scratch_ref, barrier_ref)
        plgpu.barrier_wait(barrier_ref)
        o_ref[...] = scratch_ref[...] + 1
      pl.run_scoped(with_scratch, plgpu.SMEM((256,), jnp.float32))
    pl.run_scoped(with_barrier, plgpu.Barrier())
  fn = _kernel(body, out_type=_f32([256]))
  x = _arange(256)
  return fn, (x,), (x + 1,)


def out_of_bounds_tma_reads():
  """Parameters (start_offset=192, ZEROS): 16 bytes in bounds, 112 filled with zeros."""
  gmem_size, smem_size, start = 208, 128, 192

  def body(start_idx, x_ref, o_ref, scratch_ref, barrier):
    scratch_ref[...] = jnp.full(scratch_ref.shape, -1, jnp.int8)
    plgpu.commit_smem()
    idx = pl.ds(start_idx[...], smem_size)
    plgpu.copy_gmem_to_smem(x_ref.at[idx], scratch_ref, barrier,
                            oob_mode=plgpu.OOBFillMode.ZEROS)
    plgpu.barrier_wait(barrier)
    o_ref[...] = scratch_ref[...]
  fn = _kernel(body, out_type=jax.ShapeDtypeStruct((smem_size,), jnp.int8),
               scratch_types=[plgpu.SMEM((smem_size,), jnp.int8), plgpu.Barrier()])
  x = np.arange(gmem_size, dtype=np.int8)   # wraps past 127, as jnp.arange does
  want = np.zeros(smem_size, np.int8)
  want[:gmem_size - start] = x[start:]
  return fn, (np.array(start, np.int32), x), (want,)


def _tma_load_multicast(collective_size):
  """Parameters: collective_dims=("x",), no non-collective dims: a 1-D cluster."""
  dtype = jnp.float16
  swizzle_elems = 128 // 2
  transforms = (plgpu.TilingTransform((8, swizzle_elems)), plgpu.SwizzleTransform(128))
  shape = (1, collective_size * 8, swizzle_elems)

  def body(x_gmem, out_gmem, smem, tma_barrier):
    collective_idx = lax.axis_index("x")
    plgpu.copy_gmem_to_smem(x_gmem.at[0], smem, tma_barrier, collective_axes=("x",))
    plgpu.barrier_wait(tma_barrier)
    plgpu.commit_smem()
    collective_slice = pl.ds(8 * collective_idx, 8)
    plgpu.copy_smem_to_gmem(smem.at[collective_slice], out_gmem.at[0, collective_slice, :])
    plgpu.wait_smem_to_gmem(0)
  cluster = (collective_size, 1, 1)
  fn = _kernel(body, grid=cluster, grid_names=("grid_x", "grid_y", "grid_z"),
               cluster=cluster, cluster_names=("x", "y", "z"),
               out_type=jax.ShapeDtypeStruct(shape, dtype),
               scratch_types=(plgpu.SMEM(shape[1:], dtype, transforms=transforms),
                              plgpu.Barrier()))
  x = np.arange(np.prod(shape)).astype(np.float16).reshape(shape)
  return fn, (x,), (x,)


# -- PallasCallWarpPrimitiveSemanticsTest: copies issued and awaited by warps ----------


def copy_gmem_to_smem_from_different_warps():
  """Parameter wait_smem_to_gmem_in_warp=True."""
  def body(x_ref, y_ref):
    def scope(smem_ref, tma_barrier):
      @plgpu.warp_map
      def _(warp_id):
        @pl.when(warp_id == 0)
        def _():
          plgpu.copy_gmem_to_smem(x_ref.at[32:64], smem_ref, tma_barrier)

        @pl.when(warp_id == 1)
        def _():
          plgpu.barrier_wait(tma_barrier)
          plgpu.copy_smem_to_gmem(smem_ref, y_ref)
          plgpu.wait_smem_to_gmem(0)
    pl.run_scoped(scope, smem_ref=plgpu.SMEM((32, 32), jnp.float32),
                  tma_barrier=plgpu.Barrier())
  fn = _kernel(body, out_type=_f32((32, 32)))
  x = _uniform(42, (64, 32))
  return fn, (x,), (x[32:64],)


def warp_specialized_transpose():
  h, w, s = 2, 4, 64

  def body(in_ref, out_ref, smem):
    smem[...] = in_ref[...]

    @plgpu.warp_map
    def _(warp_id):
      @pl.when(warp_id == 0)
      def _():
        plgpu.copy_smem_to_gmem(compat.transpose_smem_ref(smem, (1, 0, 2)), out_ref)
        plgpu.wait_smem_to_gmem(0)
  fn = _kernel(body, out_type=_f32((w, h, s)), scratch_types=(plgpu.SMEM((h, w, s),
                                                                         jnp.float32),))
  x = _uniform(0, (h, w, s))
  return fn, (x,), (np.transpose(x, (1, 0, 2)),)


def warp_specialized_smem_slice():
  shape = (2, 64, 128)

  def body(in_ref, out_ref, smem):
    smem[...] = in_ref[...]

    @plgpu.warp_map
    def _(warp_id):
      @pl.when(warp_id == 0)
      def _():
        plgpu.copy_smem_to_gmem(smem.at[0], out_ref.at[0])
        plgpu.copy_smem_to_gmem(smem.at[1], out_ref.at[1])
        plgpu.wait_smem_to_gmem(0)
  fn = _kernel(body, out_type=_f32(shape), scratch_types=(plgpu.SMEM(shape, jnp.float32),))
  x = _uniform(0, shape)
  return fn, (x,), (x,)


# -- PipelineTest: hand-written and emit_pipeline pipelines ----------------------------


def manual():
  steps, num_steps = 2, 4

  def body(x_gmem, o_gmem):
    pl.run_scoped(functools.partial(scoped, x_gmem, o_gmem),
                  plgpu.SMEM((steps, 32, 16), jnp.float32),
                  plgpu.SMEM((steps, 32, 16), jnp.float32),
                  plgpu.Barrier(num_barriers=steps))

  def scoped(x_gmem, o_gmem, x_smem, o_smem, barrier):
    rows = pl.ds(lax.axis_index("x") * 32, 32)

    def step(i, _):
      slot = i % steps
      plgpu.barrier_wait(barrier.at[slot])
      plgpu.wait_smem_to_gmem(steps - 1)
      o_smem.at[slot][...] = x_smem.at[slot][...] + 1.0
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(o_smem.at[slot], o_gmem.at[rows, pl.ds(i * 16, 16)])
      fetch = i + steps
      lax.cond(fetch < num_steps,
               lambda: plgpu.copy_gmem_to_smem(x_gmem.at[rows, pl.ds(fetch * 16, 16)],
                                               x_smem.at[slot], barrier.at[slot]),
               lambda: None)
      return ()
    for slot in range(min(steps, num_steps)):
      plgpu.copy_gmem_to_smem(x_gmem.at[rows, pl.ds(slot * 16, 16)], x_smem.at[slot],
                              barrier.at[slot])
    lax.fori_loop(0, num_steps, step, ())
    plgpu.wait_smem_to_gmem(0)
  x = _arange((128, 64))
  fn = _kernel(body, out_type=_f32(x.shape), grid=(4, 1), grid_names=("x", "y"))
  return fn, (x,), (x + 1,)


def _emit(transforms):
  """Parameters: the given transforms, repeats=1."""
  num_steps = 4

  def step(_, x_smem, o_smem):
    o_smem[...] = x_smem[...] + 1.0

  def body(x_gmem, o_gmem):
    spec = plgpu.BlockSpec((64, 64), lambda i: (0, i), transforms=transforms)
    plgpu.emit_pipeline(step, in_specs=[spec], out_specs=[spec], grid=(num_steps,),
                        max_concurrent_steps=2)(x_gmem, o_gmem)
  x = _arange((64, num_steps * 64))
  return _kernel(body, out_type=_f32(x.shape)), (x,), (x + 1,)


def nested_emit():
  num_steps = 4

  def inner_step(_, x_smem, o_smem):
    o_smem[...] = x_smem[...] + 1.0

  def outer_step(_, x_gmem, o_gmem):
    spec = pl.BlockSpec((32, 16), lambda i: (0, i))
    plgpu.emit_pipeline(inner_step, in_specs=[spec], out_specs=[spec], grid=(num_steps,),
                        max_concurrent_steps=2)(x_gmem, o_gmem)

  def body(x_gmem, o_gmem):
    gmem = pl.BlockSpec(memory_space=plgpu.GMEM)
    plgpu.emit_pipeline(outer_step, in_specs=[gmem], out_specs=[gmem], grid=())(x_gmem,
                                                                                 o_gmem)
  x = _arange((32, num_steps * 16))
  return _kernel(body, out_type=_f32(x.shape)), (x,), (x + 1,)


def emit_with_grid_invariant_output():
  num_steps = 4

  def step(_, x_smem, o_smem):
    o_smem[...] = x_smem[...] + 1.0

  def body(x_gmem, o_gmem):
    plgpu.emit_pipeline(step, in_specs=[pl.BlockSpec((32, 16), lambda i: (0, i))],
                        out_specs=[pl.BlockSpec((32, 16), lambda i: (0, 0))],
                        grid=(num_steps,), max_concurrent_steps=2)(x_gmem, o_gmem)
  x = _arange((32, num_steps * 16))
  y = np.zeros_like(x)
  y[:, :16] = x[:, 16 * (num_steps - 1):] + 1   # the last step's block wins
  return _kernel(body, out_type=_f32(x.shape)), (x,), (_partial(y, np.s_[:, :16]),)


def emit_with_no_output():
  m, n = 16, 128

  def body(x_gmem, o_gmem):
    def acc_scope(acc_ref):
      acc_ref[...] = jnp.zeros_like(acc_ref)

      def step(_, x_smem):
        acc_ref[...] += x_smem[...]
      plgpu.emit_pipeline(step, in_specs=[plgpu.BlockSpec((1, n), lambda i: (i, 0),
                                                          delay_release=1)],
                          grid=(m,), max_concurrent_steps=2)(x_gmem)
      return acc_ref[...]
    o_gmem[...] = pl.run_scoped(acc_scope, plgpu.SMEM((1, n), dtype=jnp.float32))
  x = _uniform(0, (m, n))
  return _kernel(body, out_type=_f32((1, n))), (x,), (x.sum(0, keepdims=True),)


def emit_with_parallel_grid():
  num_steps1, num_steps2 = 4, 5

  def step(_, x_smem, o_smem):
    o_smem[...] = x_smem[...] + 1.0

  def body(x_gmem, o_gmem):
    pid = lax.axis_index("x")
    spec = pl.BlockSpec((32, 16), lambda i: (pid, i))
    plgpu.emit_pipeline(step, in_specs=[spec], out_specs=[spec], grid=(num_steps2,),
                        max_concurrent_steps=2)(x_gmem, o_gmem)
  x = _arange((num_steps1 * 32, num_steps2 * 16))
  fn = _kernel(body, out_type=_f32(x.shape), grid=(num_steps1,), grid_names=("x",))
  return fn, (x,), (x + 1,)


def emit_with_2d_grid():
  """Parameters static=True, short=False."""
  num_steps1, num_steps2 = 4, 5

  def step(_, x_smem, o_smem):
    o_smem[...] = x_smem[...] + 1.0

  def body(x_gmem, o_gmem):
    spec = pl.BlockSpec((32, 16, 8), lambda i, j: (0, i, j))
    grid = jax.tree.map(jnp.asarray, (num_steps1, num_steps2))
    plgpu.emit_pipeline(step, in_specs=[spec], out_specs=[spec], grid=grid,
                        max_concurrent_steps=2)(x_gmem, o_gmem)
  x = _arange((32, num_steps1 * 16, num_steps2 * 8))
  return _kernel(body, out_type=_f32(x.shape)), (x,), (x + 1,)


def emit_with_carry():
  num_steps = 4

  def step(_, o_smem, carry):
    o_smem[...] = lax.broadcast(carry, o_smem.shape)
    return carry + 1

  def body(o_gmem):
    plgpu.emit_pipeline(step, out_specs=[pl.BlockSpec((64, 64), lambda i: (0, i))],
                        grid=(num_steps,), max_concurrent_steps=2, init_carry=0)(o_gmem)
  fn = _kernel(body, out_type=jax.ShapeDtypeStruct((64, num_steps * 64), jnp.int32))
  want = np.tile(np.repeat(np.arange(num_steps), 64), (64, 1)).astype(np.int32)
  return fn, (), (want,)


def different_delay_release():
  m, n, blk_m, blk_n = 128, 64, 32, 32
  in_specs = [plgpu.BlockSpec((blk_m, blk_n), lambda i, j: (i, j), delay_release=d)
              for d in range(3)]

  def step(_, x_smem, y_smem, z_smem, o_smem):
    o_smem[...] = x_smem[...] + y_smem[...] + z_smem[...]

  def body(*gmem_refs):
    plgpu.emit_pipeline(step, grid=(m // blk_m, n // blk_n), max_concurrent_steps=4,
                        in_specs=in_specs,
                        out_specs=[pl.BlockSpec((blk_m, blk_n), lambda i, j: (i, j))])(
                            *gmem_refs)
  x, y, z = (_uniform(k, (m, n)) for k in (0, 1, 3))
  return _kernel(body, out_type=_f32((m, n))), (x, y, z), (x + y + z,)


def pipeline_oob_mode():
  block_size = 512

  def step(_, x_smem, o_smem):
    o_smem[...] = x_smem[...]

  def body(x_gmem, o_gmem):
    plgpu.emit_pipeline(
        step, grid=(1,), max_concurrent_steps=1,
        in_specs=[plgpu.BlockSpec((block_size,), lambda i: (i,),
                                  oob_fill_mode=plgpu.OOBFillMode.UNDEFINED)],
        out_specs=[plgpu.BlockSpec((block_size,), lambda i: (i,))])(x_gmem, o_gmem)
  x = np.arange(block_size).astype(np.int8)
  return _kernel(body, out_type=jax.ShapeDtypeStruct((block_size,), jnp.int8)), (x,), (x,)


# -- WarpSpecializedPipelineTest: a memory warpgroup feeding compute warpgroups --------

_WS = dict(memory_registers=40, wg_axis="wg")


def _ws_kernel(body, num_threads=2, **kwargs):
  return _kernel(body, num_threads=num_threads, thread_name="wg", **kwargs)


def pipelined_copy():
  """Parameters m=n=512, repeats=1, manual_consumed_barriers=False, 2 steps."""
  m = n = 512
  blk_m = blk_n = 32

  def step(_, x_smem, o_smem, o_last_block_smem):
    o_smem[...] = x_smem[...]
    o_last_block_smem[...] = x_smem[...]
  spec = pl.BlockSpec((2 * blk_m, blk_n), lambda i, j: (i, j))

  def body(*gmem_refs):
    plgpu.emit_pipeline_warp_specialized(
        step, grid=(m // (2 * blk_m), n // blk_n), max_concurrent_steps=2,
        num_compute_wgs=1, in_specs=[spec],
        out_specs=[spec, pl.BlockSpec((2 * blk_m, blk_n), lambda i, j: (0, 0))], **_WS)(
            *gmem_refs)
  fn = _ws_kernel(body, out_type=(jax.ShapeDtypeStruct((m, n), jnp.float16),
                                  jax.ShapeDtypeStruct((2 * blk_m, blk_n), jnp.float16)),
                  compiler_params=plgpu.CompilerParams(approx_math=True))
  x = _uniform(0, (m, n), jnp.float16)
  return fn, (x,), (x, x[-(2 * blk_m):, -blk_n:])


def elementwise_add():
  """Parameters m=n=64, one compute warpgroup, static grid, no manual barriers,
  in_tree_template=(0, 1)."""
  m = n = blk_m = blk_n = 64
  spec = pl.BlockSpec((blk_m, blk_n), lambda i, j: (i, j))

  def step(_, x_smem, y_smem, o_smem):
    m_slice = pl.ds(lax.axis_index("wg") * blk_m, blk_m)
    o_smem[m_slice] = x_smem[m_slice] + y_smem[m_slice]

  def body(*gmem_refs):
    plgpu.emit_pipeline_warp_specialized(
        step, grid=(m // blk_m, n // blk_n), max_concurrent_steps=2, num_compute_wgs=1,
        in_specs=(spec, spec), out_specs=[spec], **_WS)(*gmem_refs)
  fn = _ws_kernel(body, out_type=_f32((m, n)),
                  compiler_params=plgpu.CompilerParams(approx_math=True))
  x, y = _uniform(0, (m, n)), _uniform(1, (m, n))
  return fn, (x, y), (x + y,)


def carry_accumulate():
  m = n = 256
  blk_m = blk_n = 64
  num_compute_wgs = 2

  def body(x_gmem, acc_gmem, acc_smem):
    def compute_thread(pipeline_fn):
      zeros = plgpu.layout_cast(jnp.full((blk_m, blk_n), 0, dtype=jnp.float32),
                                plgpu.Layout.WG_STRIDED((blk_m, blk_n), vec_size=2))
      acc_smem[...] = pipeline_fn(zeros)   # both compute WGs store the same values
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(acc_smem, acc_gmem)
      plgpu.wait_smem_to_gmem(0)

    def step(_, x_smem, carry):
      return x_smem[...] + carry
    plgpu.emit_pipeline_warp_specialized(
        step, grid=(m // blk_m, n // blk_n), max_concurrent_steps=2,
        num_compute_wgs=num_compute_wgs, compute_context=compute_thread,
        in_specs=[pl.BlockSpec((blk_m, blk_n), lambda i, j: (i, j))], out_specs=[],
        **_WS)(x_gmem)
  fn = _ws_kernel(body, num_threads=num_compute_wgs + 1, out_type=_f32((blk_m, blk_n)),
                  scratch_types=[plgpu.SMEM((blk_m, blk_n), jnp.float32)],
                  compiler_params=plgpu.CompilerParams(approx_math=True))
  x = _uniform(0, (m, n))
  ref = np.sum(np.stack(np.split(x, m // blk_m, axis=0)), axis=0)
  ref = np.sum(np.stack(np.split(ref, n // blk_n, axis=1)), axis=0)
  return fn, (x,), (ref,)


def delay_release():
  """Parameters: one compute warpgroup, static grid, manual_consumed_barriers=True,
  small_shape=True (64x64), max_concurrent_steps=2."""
  m = n = 64
  blk_m, blk_n = 32, 64
  spec = plgpu.BlockSpec((blk_m, blk_n), lambda i, j: (i, j), delay_release=1)

  def step(idx, x_smem, y_smem, o_smem, *consumed_barriers):
    m_slice = pl.ds(lax.axis_index("wg") * blk_m, blk_m)
    o_smem[m_slice] = x_smem[m_slice] + y_smem[m_slice]

    @pl.when(jnp.logical_or(idx[0] != 0, idx[1] != 0))
    def _():
      for barrier in consumed_barriers:
        plgpu.barrier_arrive(barrier)

  def body(*gmem_refs):
    plgpu.emit_pipeline_warp_specialized(
        step, grid=(m // blk_m, n // blk_n), max_concurrent_steps=2,
        manual_consumed_barriers=True, num_compute_wgs=1, in_specs=[spec, spec],
        out_specs=[pl.BlockSpec((blk_m, blk_n), lambda i, j: (i, j))], **_WS)(*gmem_refs)
  fn = _ws_kernel(body, out_type=_f32((m, n)),
                  compiler_params=plgpu.CompilerParams(approx_math=True))
  x, y = _uniform(0, (m, n)), _uniform(1, (m, n))
  return fn, (x, y), (x + y,)


def repeat():
  """Parameter delay_release=1."""
  num_steps = 4

  def step(_, x_smem, o_smem):
    o_smem[...] = x_smem[...] + 1.0

  def body(x_gmem, o_gmem):
    for _ in range(3):
      plgpu.emit_pipeline_warp_specialized(
          step, in_specs=[plgpu.BlockSpec((64, 64), lambda i: (0, i), delay_release=1)],
          out_specs=[plgpu.BlockSpec((64, 64), lambda i: (0, i))], grid=(num_steps,),
          max_concurrent_steps=2, num_compute_wgs=1, **_WS)(x_gmem, o_gmem)
  x = _arange((64, num_steps * 64))
  return _ws_kernel(body, out_type=_f32(x.shape)), (x,), (x + 1,)


def collective():
  num_steps = 4

  def body(x_gmem, o_gmem):
    cluster_idx = lax.axis_index("cluster")
    in_specs = [plgpu.BlockSpec((64, 64), lambda i: (0, i), collective_axes=("cluster",))]
    out_specs = [plgpu.BlockSpec((1, 64, 64), lambda i: (cluster_idx, 0, i))]
    for _ in range(3):   # upstream: leaves the barriers in a good state for the next run
      def step(_, x_smem, o_smem):
        o_smem[0, ...] = x_smem[...] + 1.0
      plgpu.emit_pipeline_warp_specialized(
          step, in_specs=in_specs, out_specs=out_specs, grid=(num_steps,),
          max_concurrent_steps=2, num_compute_wgs=1, **_WS)(x_gmem, o_gmem)
  x = _arange((64, num_steps * 64))
  fn = _ws_kernel(body, out_type=_f32((2, *x.shape)), cluster=(2,),
                  cluster_names=("cluster",))
  return fn, (x,), (np.stack([x + 1, x + 1]),)


def ws_emit_with_squeezed_dim():
  """Parameter squeezed_dim=None."""
  shape = (16, 256)

  def step(_, in_smem, o_smem):
    o_smem[...] = in_smem[...] + 1

  def body(x_gmem, o_gmem):
    spec = pl.BlockSpec((None, shape[1]), lambda i: (i, 0))
    plgpu.emit_pipeline_warp_specialized(
        step, in_specs=[spec], out_specs=[spec], grid=(shape[0],), max_concurrent_steps=2,
        num_compute_wgs=1, **_WS)(x_gmem, o_gmem)
  x = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
  return _ws_kernel(body, out_type=jax.ShapeDtypeStruct(shape, jnp.int32)), (x,), (x + 1,)


# -- the registry -----------------------------------------------------------------------


_TILED_SWIZZLED = (plgpu.TilingTransform((8, 32)), plgpu.SwizzleTransform(128))
_P = functools.partial


def _entry(name, cls, test, make, forms, options=None):
  """A row of the table below: ``forms`` names what it exercises (``FORMS``' keys)."""
  return UpstreamTma(name, f"{PALLAS}::{cls}::{test}", make,
                     tuple(FORMS[f] for f in forms.split()), **(options or {}))


# (name, upstream test class, test, make, PTX forms every supported jax emits, launch
# and versions).  The forms are those jax 0.10.2, 0.11.2 and 0.12.0.1 all emit for it.
KERNELS: tuple[UpstreamTma, ...] = tuple(_entry(*row) for row in (
    ("add_one_grid_with_scratch", "PallasCallTest", "test_add_one_grid_with_scratch",
     add_one_grid_with_scratch,
     "TMA_LOAD BULK_STORE COMMIT WAIT EXPECT_TX PROXY_FENCE", dict(grid=(2, 1, 1))),
    ("add_one_grid_pipelined[max_concurrent_steps=2]", "PallasCallTest",
     "test_add_one_grid_pipelined", add_one_grid_pipelined,
     "TMA_LOAD TMA_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE",
     dict(grid=(2, 1, 1))),
    ("add_one_grid_pipelined_program_id", "PallasCallTest",
     "test_add_one_grid_pipelined_program_id", add_one_grid_pipelined_program_id,
     "TMA_STORE COMMIT WAIT WAIT_READ PROXY_FENCE", dict(grid=(4, 1, 1))),
    ("add_one_grid_pipelined_sequential_invariant_output", "PallasCallTest",
     "test_add_one_grid_pipelined_sequential_invariant_output",
     add_one_grid_pipelined_sequential_invariant_output,
     "TMA_LOAD TMA_STORE COMMIT WAIT EXPECT_TX PROXY_FENCE", dict(warnings=("proxy-fence-read",), grid=(2, 1, 1))),
    ("gmem_to_smem_with_multiple_smem_indexers", "PallasCallTest",
     "test_gmem_to_smem_with_multiple_smem_indexers",
     gmem_to_smem_with_multiple_smem_indexers,
     "TMA_LOAD BULK_STORE COMMIT WAIT EXPECT_TX PROXY_FENCE"),
    ("copy_with_transforms[_g2s]", "PallasCallTest", "test_copy_with_transforms",
     _P(_copy_with_transforms, True),
     "TMA_LOAD TMA_STORE COMMIT WAIT EXPECT_TX PROXY_FENCE"),
    ("copy_with_transforms[_s2g]", "PallasCallTest", "test_copy_with_transforms",
     _P(_copy_with_transforms, False),
     "TMA_LOAD TMA_STORE COMMIT WAIT EXPECT_TX PROXY_FENCE"),
    ("scoped_copy_with_transforms", "PallasCallTest", "test_scoped_copy_with_transforms",
     scoped_copy_with_transforms,
     "TMA_LOAD TMA_STORE COMMIT WAIT EXPECT_TX PROXY_FENCE"),
    ("copy_smem_to_gmem[...]", "PallasCallTest", "test_copy_smem_to_gmem",
     _P(_copy_smem_to_gmem, ...),
     "BULK_STORE COMMIT WAIT PROXY_FENCE"),
    ("copy_smem_to_gmem[:128]", "PallasCallTest", "test_copy_smem_to_gmem",
     _P(_copy_smem_to_gmem, slice(128)),
     "BULK_STORE COMMIT WAIT PROXY_FENCE"),
    ("copy_smem_to_gmem_predicate[True]", "PallasCallTest",
     "test_copy_smem_to_gmem_predicate", _P(_copy_smem_to_gmem_predicate, True),
     "BULK_STORE COMMIT WAIT PROXY_FENCE",
     dict(finding=("proxy-fence",),
          why="the threads zero the output with st.global, then the TMA store writes it "
          "through the asynchronous proxy; commit_smem fences shared memory only, so no "
          "fence.proxy.async.global orders the two writes")),
    ("copy_smem_to_gmem_predicate[False]", "PallasCallTest",
     "test_copy_smem_to_gmem_predicate", _P(_copy_smem_to_gmem_predicate, False),
     "BULK_STORE COMMIT WAIT PROXY_FENCE"),
    ("copy_smem_to_gmem_explicit_commit_group[use_single_warp=True]", "PallasCallTest",
     "test_copy_smem_to_gmem_explicit_commit_group",
     copy_smem_to_gmem_explicit_commit_group,
     "BULK_STORE COMMIT WAIT PROXY_FENCE"),
    ("copy_gmem_to_smem[...]", "PallasCallTest", "test_copy_gmem_to_smem",
     _P(_copy_gmem_to_smem, ...),
     "BULK_LOAD EXPECT_TX"),
    ("copy_gmem_to_smem[:128]", "PallasCallTest", "test_copy_gmem_to_smem",
     _P(_copy_gmem_to_smem, slice(128)),
     "BULK_LOAD EXPECT_TX"),
    ("copy_gmem_to_smem_dynamic_slice", "PallasCallTest",
     "test_copy_gmem_to_smem_dynamic_slice", copy_gmem_to_smem_dynamic_slice,
     "BULK_LOAD EXPECT_TX",
     dict(warnings=("proxy-fence-read",))),
    ("copy_gmem_to_smem_squeeze", "PallasCallTest", "test_copy_gmem_to_smem_squeeze",
     copy_gmem_to_smem_squeeze,
     "BULK_LOAD EXPECT_TX",
     dict(warnings=("proxy-fence-read",))),
    ("copy_gmem_to_smem_predicate", "PallasCallTest", "test_copy_gmem_to_smem_predicate",
     copy_gmem_to_smem_predicate,
     "TMA_LOAD BULK_STORE COMMIT WAIT EXPECT_TX PROXY_FENCE",
     dict(finding=("proxy-fence", "hang"),
          why="the TMA load overwrites SMEM the threads zeroed with st.shared, with no "
          "commit_smem (fence.proxy.async) between; and jax 0.12 lowers predicate= onto "
          "the barrier arrival too, so block 1 never arrives on the barrier it then waits "
          "for (a hang; jax 0.11 arrives with 0 bytes)",
          grid=(2, 1, 1), since=(0, 11))),
    ("collective_copy_gmem_to_smem", "PallasCallTest",
     "test_collective_copy_gmem_to_smem", collective_copy_gmem_to_smem,
     "TMA_LOAD BULK_STORE MULTICAST COMMIT WAIT EXPECT_TX",
     dict(grid=(2, 1, 1), cluster=(2, 1, 1))),
    ("kernel_scratch_kwargs[vmap=False]", "PallasCallTest", "test_kernel_scratch_kwargs",
     kernel_scratch_kwargs,
     "TMA_LOAD BULK_STORE COMMIT WAIT EXPECT_TX"),
    ("async_prefetch[...]", "PallasCallTest", "test_async_prefetch",
     async_prefetch,
     "TMA_LOAD EXPECT_TX PREFETCH"),
    ("copy_gmem_to_smem_with_indexed_barrier[(1, 1)]", "PallasCallTest",
     "test_copy_gmem_to_smem_with_indexed_barrier", copy_gmem_to_smem_with_indexed_barrier,
     "TMA_LOAD EXPECT_TX"),
    ("copy_with_transforms_and_indexing", "PallasCallTest",
     "test_copy_with_transforms_and_indexing", copy_with_transforms_and_indexing,
     "TMA_LOAD TMA_STORE COMMIT WAIT EXPECT_TX"),
    ("copy_gmem_to_smem_in_run_scoped", "PallasCallTest",
     "test_copy_gmem_to_smem_in_run_scoped", copy_gmem_to_smem_in_run_scoped,
     "TMA_LOAD EXPECT_TX"),
    ("out_of_bounds_tma_reads[192-ZEROS]", "PallasCallTest",
     "test_out_of_bounds_tma_reads", out_of_bounds_tma_reads,
     "TMA_LOAD EXPECT_TX PROXY_FENCE"),
    ("tma_load_multicast[x=2]", "PallasCallTest", "test_tma_load_multicast",
     _P(_tma_load_multicast, 2),
     "TMA_LOAD TMA_STORE MULTICAST COMMIT WAIT EXPECT_TX PROXY_FENCE",
     dict(grid=(1, 1, 4), cluster=(1, 1, 2))),
    ("copy_gmem_to_smem_from_different_warps[True]", "PallasCallWarpPrimitiveSemanticsTest",
     "test_copy_gmem_to_smem_from_different_warps", copy_gmem_to_smem_from_different_warps,
     "TMA_LOAD BULK_STORE COMMIT WAIT EXPECT_TX"),
    ("warp_specialized_transpose", "PallasCallWarpPrimitiveSemanticsTest",
     "test_warp_specialized_transpose", warp_specialized_transpose,
     "TMA_STORE COMMIT WAIT",
     dict(finding=("proxy-fence",), why="all threads write SMEM with st.shared and warp 0 stores it by TMA with no commit_smem (fence.proxy.async) between")),
    ("warp_specialized_smem_slice", "PallasCallWarpPrimitiveSemanticsTest",
     "test_warp_specialized_smem_slice", warp_specialized_smem_slice,
     "BULK_STORE COMMIT WAIT",
     dict(finding=("proxy-fence",), why="as warp_specialized_transpose: no commit_smem before the TMA stores")),
    ("manual", "PipelineTest", "test_manual",
     manual,
     "TMA_LOAD TMA_STORE COMMIT WAIT EXPECT_TX PROXY_FENCE", dict(grid=(1, 4, 1))),
    ("emit[transforms=(),repeats=1]", "PipelineTest", "test_emit",
     _P(_emit, ()),
     "TMA_LOAD TMA_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE"),
    ("emit[tiled+swizzle128,repeats=1]", "PipelineTest", "test_emit",
     _P(_emit, _TILED_SWIZZLED),
     "TMA_LOAD TMA_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE"),
    ("nested_emit", "PipelineTest", "test_nested_emit",
     nested_emit,
     "TMA_LOAD TMA_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE"),
    ("emit_with_grid_invariant_output", "PipelineTest",
     "test_emit_with_grid_invariant_output", emit_with_grid_invariant_output,
     "TMA_LOAD TMA_STORE COMMIT WAIT EXPECT_TX PROXY_FENCE",
     dict(warnings=("proxy-fence-read",))),
    ("emit_with_no_output", "PipelineTest", "test_emit_with_no_output",
     emit_with_no_output,
     "TMA_LOAD EXPECT_TX", dict(warnings=("proxy-fence-read",), rtol=1e-06)),
    ("emit_with_parallel_grid", "PipelineTest", "test_emit_with_parallel_grid",
     emit_with_parallel_grid,
     "TMA_LOAD TMA_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE",
     dict(grid=(4, 1, 1))),
    ("emit_with_2d_grid[static=True,short=False]", "PipelineTest",
     "test_emit_with_2d_grid", emit_with_2d_grid,
     "TMA_LOAD TMA_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE"),
    ("emit_with_carry", "PipelineTest", "test_emit_with_carry",
     emit_with_carry,
     "TMA_STORE COMMIT WAIT WAIT_READ PROXY_FENCE"),
    ("different_delay_release", "WarpSpecializedPipelineTest",
     "test_different_delay_release", different_delay_release,
     "TMA_LOAD TMA_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE", {}),
    ("pipeline_oob_mode", "PipelineTest", "test_pipeline_oob_mode",
     pipeline_oob_mode,
     "BULK_LOAD BULK_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE",
     dict(since=(0, 11))),
    ("pipelined_copy[512x512,repeats=1,steps=2]", "WarpSpecializedPipelineTest",
     "test_pipelined_copy", pipelined_copy,
     "TMA_LOAD TMA_STORE BULK_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE SETMAXNREG",
     dict(warnings=("proxy-fence-read",), threads=256)),
    ("elementwise_add[64x64,static]", "WarpSpecializedPipelineTest",
     "test_elementwise_add", elementwise_add,
     "TMA_LOAD BULK_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE SETMAXNREG",
     dict(threads=256)),
    ("carry_accumulate", "WarpSpecializedPipelineTest", "test_carry_accumulate",
     carry_accumulate,
     "TMA_LOAD BULK_STORE COMMIT WAIT EXPECT_TX PROXY_FENCE SETMAXNREG",
     dict(finding=("race", "proxy-fence"), why="both compute warpgroups store the same values into one SMEM buffer unsynchronised (the test says so), and each stores the other's bytes by TMA with no fence between", warnings=("proxy-fence-read",), threads=384, rtol=1e-06)),
    ("delay_release[small,static,manual_consumed,steps=2]", "WarpSpecializedPipelineTest",
     "test_delay_release", delay_release,
     "TMA_LOAD BULK_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE SETMAXNREG",
     dict(threads=256)),
    ("repeat[delay_release=1]", "WarpSpecializedPipelineTest", "test_repeat",
     repeat,
     "TMA_LOAD TMA_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE SETMAXNREG",
     dict(threads=256)),
    ("collective", "WarpSpecializedPipelineTest", "test_collective",
     collective,
     "TMA_LOAD TMA_STORE MULTICAST COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE SETMAXNREG",
     dict(warnings=("peer-arrive-cta", "proxy-fence-read"), grid=(2, 1, 1), cluster=(2, 1, 1), threads=256)),
    ("ws_emit_with_squeezed_dim[None]", "WarpSpecializedPipelineTest",
     "test_emit_with_squeezed_dim", ws_emit_with_squeezed_dim,
     "TMA_LOAD BULK_STORE COMMIT WAIT WAIT_READ EXPECT_TX PROXY_FENCE SETMAXNREG",
     dict(warnings=("proxy-fence-read",), threads=256)),
))

BY_NAME = {k.name: k for k in KERNELS}
assert len(BY_NAME) == len(KERNELS), "duplicate entry names"
