"""Upstream's hardware-tested tcgen05 kernels, rebuilt for the checker: the tcgen05
calibration set.

Each entry of ``KERNELS`` (an ``UpstreamTc``) rebuilds one test of jax's
tests/pallas/mosaic_gpu_test.py (jax-ml/jax, its Blackwell class
``PallasCallTCGen05Test``, Lane semantics; read at the newest snapshot stored,
2026-08-08, the tree of jax 0.11.1's development) the way the test builds its
kernel: the same Pallas MGPU calls (``plgpu.TMEM``, ``async_store_tmem`` /
``async_load_tmem`` / ``commit_tmem`` / ``wait_load_tmem``, ``tcgen05_mma``,
``tcgen05_commit_arrive``, ``async_copy_smem_to_tmem``, ``Barrier(orders_tensor_core=
True)``), shapes, dtypes, transforms, swizzles and clusters, for one parameter set of a
parameterised test (named in ``name``).  ``make()`` returns ``(fn, args, expected)``: a
jitted function ``check`` takes, NumPy inputs, and one NumPy array per output holding
the values the test asserts, computed as the test computes its reference (``rtol`` and
``atol`` are the test's tolerances; 0: exact).

Where jax 0.12.1 no longer lowers the test's code as written, the entry changes the
least it can and says so in ``adapted``: jax 0.12's optimised GMEM store refuses the
TCGEN05 register layout's 16-bit rows ("GMEM transfer does not access a whole number
of complete 32 byte sectors"), so those kernels store with ``plgpu.store(...,
optimized=False)`` (the values and the order of everything else are the test's); and
jax 0.12.1 removed ``plgpu.transpose_ref``, so the transposing ones call
``ref.transpose((1, 0))``, as its deprecation message says.

Every entry needs jax >= 0.12 (``since``): jax 0.10 and 0.11 spell the Blackwell Pallas
API differently.  The test's ``self.pallas_call`` (a ``plgpu.kernel`` around
``emit_pipeline``) is ``pl.pallas_call`` built inside the traced function here, as in
upstream_tma_kernels.py; with no grid and whole-array specs both copy the inputs into
SMEM by TMA before the body and the GMEM output is written in place.

Three entries rebuild tests of tests/mosaic/gpu_test.py's ``TCGen05Test`` (Mosaic GPU,
``mgpu.as_gpu_kernel``, built in an MLIR context with the device queries answered for a
B200, since Mosaic builds the module when the kernel is made).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402

__all__ = ["UpstreamTc", "KERNELS", "BY_NAME", "FORMS", "fenced"]

PALLAS = "tests/pallas/mosaic_gpu_test.py"
MOSAIC = "tests/mosaic/gpu_test.py"


@dataclasses.dataclass(frozen=True)
class UpstreamTc:
  """One calibration kernel.

  Attributes:
    name: the upstream test and the parameters chosen, e.g. "simple_matmul[...]".
    test: the upstream test's id ("tests/pallas/mosaic_gpu_test.py::Class::test_x").
    make: () -> (fn, args, expected); see the module docstring.
    exercises: PTX fragments (regular expressions) the test is about; each must occur
      in its PTX.
    checks: what the test checks, in words (docs/checker.md's table).
    rtol, atol: the test's comparison (0, 0: exact).
    since: the first jax version whose API the kernel is written for.
    finding: the rules ``check`` reports on it (empty: it passes with the test's values).
    refused: a fragment of the AsyncStoreError ``check`` raises on it (an instruction or
      form the checker does not run yet); the entry is an expected failure.
    why: the reason for ``finding`` or ``refused``, in words.
    fenced: whether ``check`` of ``fenced(ptx)`` (the fences the ISA asks for, which
      jax 0.12.1 leaves out, added to its PTX) is checked too: it must pass with the
      test's values and without the warnings the fences answer.
    adapted: how the kernel differs from the test's code ("": not at all).
  """

  name: str
  test: str
  make: Callable[[], tuple]
  exercises: tuple[str, ...]
  checks: str
  rtol: float = 0.0
  atol: float = 0.0
  since: tuple[int, int] = (0, 12)
  finding: tuple[str, ...] = ()
  refused: str = ""
  why: str = ""
  fenced: bool = False
  adapted: str = ""


# What an entry exercises: regular expressions over its PTX.
ALLOC = r"tcgen05\.alloc\.cta_group::1"
ALLOC_PAIR = r"tcgen05\.alloc\.cta_group::2"
DEALLOC = r"tcgen05\.dealloc\.cta_group::1"
LD = r"tcgen05\.ld\.sync\.aligned\.(32x32b|16x64b|16x128b|16x256b)"
ST = r"tcgen05\.st\.sync\.aligned\.(32x32b|16x64b|16x128b|16x256b)"
PACK = r"tcgen05\.ld\.sync\.aligned\.\w+\.x\d+\.pack::16b"
UNPACK = r"tcgen05\.st\.sync\.aligned\.\w+\.x\d+\.unpack::16b"
WAIT_ST = r"tcgen05\.wait::st"
WAIT_LD = r"tcgen05\.wait::ld"
MMA_F16 = r"tcgen05\.mma\.cta_group::1\.kind::f16"
MMA_F8 = r"tcgen05\.mma\.cta_group::1\.kind::f8f6f4"
MMA_I8 = r"tcgen05\.mma\.cta_group::1\.kind::i8"
COMMIT = r"tcgen05\.commit\.cta_group::1\.mbarrier::arrive::one"
CP = r"tcgen05\.cp\.cta_group::1"
AFTER_SYNC = r"tcgen05\.fence::after_thread_sync"
TMA_LOAD = r"cp\.async\.bulk\.tensor\.\dd\.shared::cta\.global"
FORMS = {name: globals()[name] for name in (
    "ALLOC", "ALLOC_PAIR", "DEALLOC", "LD", "ST", "PACK", "UNPACK", "WAIT_ST", "WAIT_LD",
    "MMA_F16", "MMA_F8", "MMA_I8", "COMMIT", "CP", "AFTER_SYNC", "TMA_LOAD")}


# -- building kernels as the tests do ------------------------------------------------


def _kernel(body, **kwargs):
  """The test's ``self.kernel`` (Lane semantics): ``plgpu.kernel``, jitted."""
  return jax.jit(plgpu.kernel(body, **kwargs))


def _pallas_call(body, **kwargs):
  """The test's ``self.pallas_call`` with no grid: ``pl.pallas_call`` built while
  traced (jax 0.11 and newer lower it only there)."""
  return jax.jit(lambda *xs: pl.pallas_call(body, compiler_params=plgpu.CompilerParams(),
                                            **kwargs)(*xs))


def _transforms(dtype, swizzle=128):
  """The test's ``default_transforms``: (8, swizzle bytes) tiles, swizzled."""
  elems = 8 * swizzle // (jnp.dtype(dtype).itemsize * 8)
  return (plgpu.TilingTransform((8, elems)), plgpu.SwizzleTransform(swizzle))


def _smem_spec(dtype, swizzle=128):
  return plgpu.BlockSpec(transforms=_transforms(dtype, swizzle), memory_space=plgpu.SMEM)


def _uniform(key, shape, dtype=jnp.float32):
  """``jax.random.uniform(jax.random.key(key), shape, dtype)`` as NumPy (ml_dtypes)."""
  return np.asarray(jax.random.uniform(jax.random.key(key), shape=shape, dtype=dtype))


def _sds(shape, dtype):
  return jax.ShapeDtypeStruct(shape, dtype)


def _matmul(x, y, dtype=None):
  """``x @ y`` as the test's reference: in f32, cast to ``dtype`` (None: f32)."""
  z = np.asarray(x, np.float32) @ np.asarray(y, np.float32)
  return z if dtype is None else z.astype(dtype)


# -- TMEM: stores, loads, allocation ---------------------------------------------------


def tmem(collective=False):
  """test_tmem[collective]: SMEM -> TMEM -> TMEM -> SMEM, + 1 on the way; collective:
  a cluster of 2 allocating its TMEM with cta_group::2."""
  def body(x_ref, y_ref, tmem_ref, tmem_ref2, smem_ref, barrier_ref):
    plgpu.copy_gmem_to_smem(x_ref, smem_ref, barrier_ref)
    plgpu.barrier_wait(barrier_ref)
    x_val = plgpu.load(smem_ref, layout=plgpu.Layout.TCGEN05)
    plgpu.async_store_tmem(tmem_ref, x_val + 1)
    plgpu.commit_tmem()
    tmem_read = plgpu.async_load_tmem(tmem_ref)
    plgpu.async_store_tmem(tmem_ref2, tmem_read)
    plgpu.commit_tmem()
    smem_ref[...] = plgpu.async_load_tmem(tmem_ref2)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem_ref, y_ref)
    plgpu.wait_smem_to_gmem(0)
  f32 = jnp.float32
  pair = dict(collective=True) if collective else {}
  fn = _kernel(body, out_type=_sds((128, 128), f32), scratch_types=[
      plgpu.TMEM((128, 128), f32, **pair), plgpu.TMEM((128, 128), f32, **pair),
      plgpu.SMEM((128, 128), f32, transforms=_transforms(f32)), plgpu.Barrier()],
      **(dict(cluster=(2,), cluster_names=("x",)) if collective else {}))
  x = _uniform(0, (128, 128))
  return fn, (x,), (x + 1,)


def tmem_allocation_estimation():
  """Three packed bf16 (128, 256) TMEM refs at once, + 1 through each."""
  def body(x_ref, y_ref, tmem_ref1, tmem_ref2, tmem_ref3, smem_ref, barrier_ref):
    plgpu.copy_gmem_to_smem(x_ref, smem_ref, barrier_ref)
    plgpu.barrier_wait(barrier_ref)
    x_val = plgpu.load(smem_ref, layout=plgpu.Layout.TCGEN05)
    plgpu.async_store_tmem(tmem_ref1, x_val + 1)
    plgpu.commit_tmem()
    x_val = plgpu.async_load_tmem(tmem_ref1)
    plgpu.async_store_tmem(tmem_ref2, x_val + 1)
    plgpu.commit_tmem()
    x_val = plgpu.async_load_tmem(tmem_ref2)
    plgpu.async_store_tmem(tmem_ref3, x_val + 1)
    plgpu.commit_tmem()
    smem_ref[...] = plgpu.async_load_tmem(tmem_ref3)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem_ref, y_ref)
    plgpu.wait_smem_to_gmem(0)
  bf16 = jnp.bfloat16
  fn = _kernel(body, out_type=_sds((128, 256), bf16), scratch_types=[
      plgpu.TMEM((128, 256), bf16, packed=True), plgpu.TMEM((128, 256), bf16, packed=True),
      plgpu.TMEM((128, 256), bf16, packed=True),
      plgpu.SMEM((128, 256), bf16, transforms=_transforms(bf16)), plgpu.Barrier()])
  x = _uniform(0, (128, 256), bf16)
  want = np.asarray(jnp.asarray(x) + 3)   # (bf16 arithmetic, as the test's x + 3)
  return fn, (x,), (want,)


def tmem_ref_aliasing():
  """A RefUnion of two (128, 32) TMEM refs and one (128, 64) over the same columns."""
  def body(x_ref, y_ref, aliased_ref, smem_ref, barrier_ref):
    [tmem_128x32a, tmem_128x32b], tmem_128x64 = aliased_ref
    plgpu.copy_gmem_to_smem(x_ref, smem_ref, barrier_ref)
    plgpu.barrier_wait(barrier_ref)
    x_val = plgpu.load(smem_ref.at[:, 0:32], layout=plgpu.Layout.TCGEN05)
    plgpu.async_store_tmem(tmem_128x32a, x_val + 1)
    plgpu.commit_tmem()
    smem_ref[:, 0:32] = plgpu.async_load_tmem(tmem_128x32a)
    plgpu.wait_load_tmem()
    x_val = plgpu.load(smem_ref.at[:, 32:64], layout=plgpu.Layout.TCGEN05)
    plgpu.async_store_tmem(tmem_128x32b, x_val + 1)
    plgpu.commit_tmem()
    smem_ref[:, 32:64] = plgpu.async_load_tmem(tmem_128x32b)
    plgpu.wait_load_tmem()
    x_val = plgpu.load(smem_ref.at[:, 64:128], layout=plgpu.Layout.TCGEN05)
    plgpu.async_store_tmem(tmem_128x64, x_val + 1)
    plgpu.commit_tmem()
    smem_ref[:, 64:128] = plgpu.async_load_tmem(tmem_128x64)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem_ref, y_ref)
    plgpu.wait_smem_to_gmem(0)
  f32 = jnp.float32
  fn = _kernel(body, out_type=_sds((128, 128), f32), scratch_types=[
      plgpu.RefUnion([plgpu.TMEM((128, 32), f32), plgpu.TMEM((128, 32), f32)],
                     plgpu.TMEM((128, 64), f32)),
      plgpu.SMEM((128, 128), f32, transforms=_transforms(f32)), plgpu.Barrier()])
  x = _uniform(0, (128, 128))
  return fn, (x,), (x + 1,)


def tmem_ref_union_multi_allocation():
  """An unpacked f16 TMEM ref and one inside a RefUnion, stored straight to GMEM."""
  def body(x_ref, y_ref, tmem_ref1, aliased_tmem_ref2):
    [tmem_ref2] = aliased_tmem_ref2
    x_val1 = plgpu.load(x_ref.at[:, 0:256], layout=plgpu.Layout.TCGEN05, optimized=False)
    x_val2 = plgpu.load(x_ref.at[:, 256:512], layout=plgpu.Layout.TCGEN05,
                        optimized=False)
    plgpu.async_store_tmem(tmem_ref1, x_val1 + 1)
    plgpu.async_store_tmem(tmem_ref2, x_val2 + 2)
    plgpu.commit_tmem()
    plgpu.store(y_ref.at[:, 0:256], plgpu.async_load_tmem(tmem_ref1), optimized=False)
    plgpu.store(y_ref.at[:, 256:512], plgpu.async_load_tmem(tmem_ref2), optimized=False)
  f16 = jnp.float16
  fn = _kernel(body, out_type=_sds((128, 512), f16), scratch_types=[
      plgpu.TMEM((128, 256), f16, packed=False),
      plgpu.RefUnion(plgpu.TMEM((128, 256), f16, packed=False))])
  x = _uniform(0, (128, 512), f16)
  want = np.concatenate([x[:, :256] + f16(1), x[:, 256:] + f16(2)], axis=1)
  return fn, (x,), (want,)


def _tmem_load_layout(native: bool):
  def make():
    layout = plgpu.Layout.TCGEN05_TMEM_NATIVE if native else plgpu.Layout.TCGEN05
    def body(x_ref, y_ref, tmem_ref, smem_ref, barrier_ref):
      plgpu.copy_gmem_to_smem(x_ref, smem_ref, barrier_ref)
      plgpu.barrier_wait(barrier_ref)
      x_val = plgpu.load(smem_ref, layout=layout, optimized=not native)
      plgpu.async_store_tmem(tmem_ref, x_val + 1)
      plgpu.commit_tmem()
      smem_ref[...] = plgpu.async_load_tmem(tmem_ref, layout=layout)
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(smem_ref, y_ref)
      plgpu.wait_smem_to_gmem(0)
    f32 = jnp.float32
    fn = _kernel(body, out_type=_sds((128, 128), f32), scratch_types=[
        plgpu.TMEM((128, 128), f32),
        plgpu.SMEM((128, 128), f32, transforms=_transforms(f32)), plgpu.Barrier()])
    x = _uniform(0, (128, 128))
    return fn, (x,), (x + 1,)
  return make


def tmem_column_slicing():
  """Stores through ``tmem.at[:, 8:208].at[:, 0:128]``, loads ``tmem.at[:, 8:136]``."""
  def body(x_ref, y_ref, tmem_ref):
    x_val = plgpu.load(x_ref, layout=plgpu.Layout.TCGEN05, optimized=False)
    plgpu.async_store_tmem(tmem_ref.at[:, 8:208].at[:, 0:128], x_val + 1)
    plgpu.commit_tmem()
    y_ref[...] = plgpu.async_load_tmem(tmem_ref.at[:, 8:136])
  fn = _kernel(body, out_type=_sds((128, 128), jnp.float32),
               scratch_types=[plgpu.TMEM((128, 256), jnp.float32)])
  x = _uniform(0, (128, 128))
  return fn, (x,), (x + 1,)


# -- tcgen05.mma ---------------------------------------------------------------------


def integer_matmul():
  """test_integer_matmul[m=128,n=128,swizzle=64,int8,lhs_tmem=False]: kind::i8."""
  m = n = k = 128
  dtype, o_dtype = jnp.int8, jnp.int32
  def body(a_smem, b_smem, out_ref, acc_tmem, barrier_ref):
    plgpu.tcgen05_mma(acc_tmem, a_smem, b_smem, barrier_ref, accumulate=False)
    plgpu.barrier_wait(barrier_ref)
    out_ref[...] = plgpu.async_load_tmem(acc_tmem)
  fn = _pallas_call(body, in_specs=(_smem_spec(dtype, 64), _smem_spec(dtype, 64)),
                    out_specs=plgpu.BlockSpec(memory_space=plgpu.GMEM),
                    out_shape=_sds((m, n), o_dtype),
                    scratch_shapes=[plgpu.TMEM((m, n), o_dtype, packed=False),
                                    plgpu.Barrier(orders_tensor_core=True)])
  rand = lambda key, shape: np.asarray(jax.random.randint(
      jax.random.key(key), minval=-8, maxval=8, shape=shape, dtype=dtype))
  x, y = rand(0, (m, k)), rand(1, (k, n))
  return fn, (x, y), (x.astype(np.int32) @ y.astype(np.int32),)


def _simple_matmul(m, n, swizzle, ab_type, transpose_lhs=False, transpose_rhs=False):
  """test_simple_matmul[lhs_tmem=False]: one MMA of A (m, 128) and B (128, n) from SMEM."""
  def make():
    a_type, b_type = ab_type if isinstance(ab_type, tuple) else (ab_type, ab_type)
    is_fp8 = jnp.finfo(a_type).bits == 8
    out_dtype = jnp.float32 if is_fp8 else a_type
    k = 128
    def body(a_smem, b_smem, out_ref, acc_tmem, barrier_ref):
      if transpose_lhs:
        a_smem = a_smem.transpose((1, 0))
      if transpose_rhs:
        b_smem = b_smem.transpose((1, 0))
      plgpu.tcgen05_mma(acc_tmem, a_smem, b_smem, barrier_ref, accumulate=False)
      plgpu.barrier_wait(barrier_ref)
      out = plgpu.async_load_tmem(acc_tmem).astype(out_dtype)
      if is_fp8:
        out_ref[...] = out
      else:   # (jax 0.12: the optimised GMEM store refuses 16-bit TCGEN05 rows)
        plgpu.store(out_ref, out, optimized=False)
    fn = _pallas_call(body,
                      in_specs=(_smem_spec(a_type, swizzle), _smem_spec(b_type, swizzle)),
                      out_specs=plgpu.BlockSpec(memory_space=plgpu.GMEM),
                      out_shape=_sds((m, n), out_dtype),
                      scratch_shapes=[plgpu.TMEM((m, n), jnp.float32, packed=False),
                                      plgpu.Barrier(orders_tensor_core=True)])
    x = _uniform(0, (k, m) if transpose_lhs else (m, k), a_type)
    y = _uniform(1, (n, k) if transpose_rhs else (k, n), b_type)
    xs, ys = (x.T if transpose_lhs else x), (y.T if transpose_rhs else y)
    return fn, (x, y), (_matmul(xs, ys, None if is_fp8 else out_dtype),)
  return make


def matmul_alignment():
  """A one-column TMEM ref before the accumulator: the accumulator must be aligned."""
  m = k = n = 128
  dtype = jnp.float16
  def body(a_smem, b_smem, out_ref, _, acc_tmem, barrier_ref):
    plgpu.tcgen05_mma(acc_tmem, a_smem, b_smem, barrier_ref, accumulate=False)
    plgpu.barrier_wait(barrier_ref)
    out_ref[...] = plgpu.async_load_tmem(acc_tmem).astype(dtype)
  spec = _smem_spec(dtype)
  fn = _pallas_call(body, in_specs=(spec, spec), out_specs=spec,
                    out_shape=_sds((m, n), dtype),
                    scratch_shapes=(plgpu.TMEM((128, 1), jnp.float32),
                                    plgpu.TMEM((m, n), jnp.float32),
                                    plgpu.Barrier(orders_tensor_core=True)))
  x, y = _uniform(0, (m, k), dtype), _uniform(1, (k, n), dtype)
  return fn, (x, y), (_matmul(x, y, dtype),)


def simple_warp_specialized_matmul():
  """The MMA issued by warp 0 only (``warp_map``), TMA loads by every warp."""
  m = n = k = 128
  dtype = jnp.float16
  t = _transforms(dtype)
  def body(a_ref, b_ref, out_ref, a_smem, b_smem, acc_tmem, tma_barrier, mma_barrier):
    plgpu.copy_gmem_to_smem(a_ref, a_smem, tma_barrier)
    plgpu.copy_gmem_to_smem(b_ref, b_smem, tma_barrier)
    plgpu.barrier_wait(tma_barrier)

    @plgpu.warp_map
    def _(warp_id):
      @pl.when(warp_id == 0)
      def _():
        plgpu.tcgen05_mma(acc_tmem, a_smem, b_smem, mma_barrier, accumulate=False)
    plgpu.barrier_wait(mma_barrier)
    plgpu.store(out_ref, plgpu.async_load_tmem(acc_tmem).astype(dtype), optimized=False)
  fn = _kernel(body, out_type=_sds((m, n), dtype), scratch_types=(
      plgpu.SMEM((m, k), dtype, transforms=t), plgpu.SMEM((k, n), dtype, transforms=t),
      plgpu.TMEM((m, n), jnp.float32, packed=False), plgpu.Barrier(num_arrivals=2),
      plgpu.Barrier(orders_tensor_core=True)))
  x, y = _uniform(0, (m, k), dtype), _uniform(1, (k, n), dtype)
  return fn, (x, y), (_matmul(x, y, dtype),)


def manual_tcgen05_commit_arrive():
  """``tcgen05_mma`` with no barrier, then ``tcgen05_commit_arrive`` by hand."""
  shape, dtype = (128, 128), jnp.float16
  t = _transforms(dtype)
  def body(a_gmem, b_gmem, out_gmem, a_smem, b_smem, tma_barrier, mma_barrier, acc_tmem):
    plgpu.copy_gmem_to_smem(a_gmem, a_smem, tma_barrier)
    plgpu.barrier_wait(tma_barrier)
    plgpu.copy_gmem_to_smem(b_gmem, b_smem, tma_barrier)
    plgpu.barrier_wait(tma_barrier)
    plgpu.commit_tmem()
    plgpu.tcgen05_mma(acc_tmem, a_smem, b_smem, accumulate=False)
    plgpu.tcgen05_commit_arrive(mma_barrier)
    plgpu.barrier_wait(mma_barrier)
    plgpu.store(out_gmem, plgpu.async_load_tmem(acc_tmem).astype(dtype), optimized=False)
  fn = _kernel(body, out_type=_sds(shape, dtype), scratch_types=[
      plgpu.SMEM(shape, dtype, transforms=t), plgpu.SMEM(shape, dtype, transforms=t),
      plgpu.Barrier(), plgpu.Barrier(orders_tensor_core=True),
      plgpu.TMEM((128, 128), jnp.float32)])
  x, y = _uniform(0, shape, dtype), _uniform(1, shape, dtype)
  return fn, (x, y), (_matmul(x, y, dtype),)


def matmul_with_sliced_accumulator():
  """The accumulator is ``acc.at[:, 0:128]`` of a (128, 256) f32 TMEM ref."""
  dtype, shape = jnp.bfloat16, (128, 128)
  def body(a_smem, b_smem, out_ref, acc_tmem, barrier_ref):
    acc_slice = acc_tmem.at[slice(None), pl.ds(0, 128)]
    plgpu.tcgen05_mma(acc_slice, a_smem, b_smem, barrier_ref, accumulate=False)
    plgpu.barrier_wait(barrier_ref)
    plgpu.store(out_ref, plgpu.async_load_tmem(acc_slice).astype(dtype), optimized=False)
  fn = _pallas_call(body, in_specs=(_smem_spec(dtype), _smem_spec(dtype)),
                    out_specs=plgpu.BlockSpec(memory_space=plgpu.GMEM),
                    out_shape=_sds(shape, dtype),
                    scratch_shapes=[plgpu.TMEM((128, 256), jnp.float32, packed=False),
                                    plgpu.Barrier(orders_tensor_core=True)])
  x, y = _uniform(0, shape, dtype), _uniform(1, shape, dtype)
  return fn, (x, y), (_matmul(x, y, dtype),)


def matmul_with_smem_aliasing():
  """Two MMAs (K = 128, then K = 64) through aliased SMEM refs, A transposed."""
  shape, dtype = (128, 128), jnp.float16
  t = _transforms(dtype)
  def body(a_gmem, b_gmem, out128, out64, a_aliased, b_aliased, tma_barrier,
           mma_barrier, acc_tmem):
    a_smem_128, a_smem_64 = a_aliased
    plgpu.copy_gmem_to_smem(a_gmem, a_smem_128, tma_barrier)
    plgpu.barrier_wait(tma_barrier)
    b_smem_128, b_smem_64 = b_aliased
    plgpu.copy_gmem_to_smem(b_gmem, b_smem_128, tma_barrier)
    plgpu.barrier_wait(tma_barrier)
    plgpu.tcgen05_mma(acc_tmem, a_smem_128.transpose((1, 0)), b_smem_128,
                      mma_barrier, accumulate=False)
    plgpu.barrier_wait(mma_barrier)
    plgpu.store(out128, plgpu.async_load_tmem(acc_tmem).astype(dtype), optimized=False)
    plgpu.wait_load_tmem()
    plgpu.tcgen05_mma(acc_tmem, a_smem_64.transpose((1, 0)), b_smem_64,
                      mma_barrier, accumulate=False)
    plgpu.barrier_wait(mma_barrier)
    plgpu.store(out64, plgpu.async_load_tmem(acc_tmem).astype(dtype), optimized=False)
  fn = _kernel(body, out_type=[_sds(shape, dtype), _sds(shape, dtype)], scratch_types=[
      plgpu.RefUnion(plgpu.SMEM(shape, dtype, transforms=t),
                     plgpu.SMEM((64, 128), dtype, transforms=t)),
      plgpu.RefUnion(plgpu.SMEM(shape, dtype, transforms=t),
                     plgpu.SMEM((64, 128), dtype, transforms=t)),
      plgpu.Barrier(), plgpu.Barrier(orders_tensor_core=True),
      plgpu.TMEM(shape, jnp.float32)])
  x, y = _uniform(0, shape, dtype), _uniform(1, shape, dtype)
  return fn, (np.ascontiguousarray(x.T), y), (
      _matmul(x, y, dtype), _matmul(x[:, :64], y[:64, :], dtype))


def matmul_with_tmem_aliasing():
  """A in TMEM (``async_store_tmem`` of SMEM's A), aliased with the accumulators."""
  shape, dtype = (128, 128), jnp.float16
  t = _transforms(dtype)
  def body(a_gmem, b_gmem, out128, out64, a_smem, b_smem, tma_barrier, mma_barrier,
           aliased_refs):
    plgpu.copy_gmem_to_smem(a_gmem, a_smem, tma_barrier)
    plgpu.barrier_wait(tma_barrier)
    plgpu.copy_gmem_to_smem(b_gmem, b_smem, tma_barrier)
    plgpu.barrier_wait(tma_barrier)
    [acc_128, lhs_128], [lhs_64, acc_64], _ = aliased_refs
    plgpu.async_store_tmem(lhs_128, plgpu.load(a_smem, layout=plgpu.Layout.TCGEN05))
    plgpu.commit_tmem()
    plgpu.tcgen05_mma(acc_128, lhs_128, b_smem, mma_barrier, accumulate=False)
    plgpu.barrier_wait(mma_barrier)
    plgpu.store(out128, plgpu.async_load_tmem(acc_128).astype(dtype), optimized=False)
    plgpu.wait_load_tmem()
    plgpu.async_store_tmem(lhs_64, plgpu.load(a_smem.at[:, 0:64],
                                              layout=plgpu.Layout.TCGEN05))
    plgpu.commit_tmem()
    plgpu.tcgen05_mma(acc_64, lhs_64, b_smem.at[0:64, :], mma_barrier, accumulate=False)
    plgpu.barrier_wait(mma_barrier)
    plgpu.store(out64, plgpu.async_load_tmem(acc_64).astype(dtype), optimized=False)
  fn = _kernel(body, out_type=[_sds(shape, dtype), _sds(shape, dtype)], scratch_types=[
      plgpu.SMEM(shape, dtype, transforms=t), plgpu.SMEM(shape, dtype, transforms=t),
      plgpu.Barrier(), plgpu.Barrier(orders_tensor_core=True),
      plgpu.RefUnion([plgpu.TMEM((128, 128), jnp.float32),
                      plgpu.TMEM((128, 128), dtype, packed=True)],
                     [plgpu.TMEM((128, 64), dtype, packed=True),
                      plgpu.TMEM((128, 128), jnp.float32)],
                     plgpu.TMEM((128, 128), jnp.float32))])
  x, y = _uniform(0, shape, dtype), _uniform(1, shape, dtype)
  return fn, (x, y), (_matmul(x, y, dtype), _matmul(x[:, :64], y[:64, :], dtype))


def mma_barrier_indexing():
  """test_mma_barrier_indexing[barrier_index=(1, 0), num_barriers=(2, 1)]."""
  shape, dtype = (128, 128), jnp.float16
  index = (1, 0)
  def body(a_smem, b_smem, out_ref, acc_tmem, barrier_ref):
    plgpu.tcgen05_mma(acc_tmem, a_smem, b_smem, barrier_ref.at[index], accumulate=False)
    plgpu.barrier_wait(barrier_ref.at[index])
    plgpu.store(out_ref, plgpu.async_load_tmem(acc_tmem).astype(dtype), optimized=False)
  fn = _pallas_call(body, in_specs=(_smem_spec(dtype), _smem_spec(dtype)),
                    out_specs=plgpu.BlockSpec(memory_space=plgpu.GMEM),
                    out_shape=_sds(shape, dtype),
                    scratch_shapes=[plgpu.TMEM(shape, jnp.float32, packed=False),
                                    plgpu.Barrier(num_barriers=(2, 1),
                                                  orders_tensor_core=True)])
  x, y = _uniform(0, shape, dtype), _uniform(1, shape, dtype)
  return fn, (x, y), (_matmul(x, y, dtype),)


# -- tcgen05.cp, barriers ------------------------------------------------------------


def async_copy_smem_to_tmem():
  """test_async_copy_smem_to_tmem[swizzle=128]: SMEM -> TMEM by tcgen05.cp."""
  m = n = 128
  dtype = jnp.float16
  def body(x_gmem, y_gmem, smem, tma_barrier, mma_barrier, tmem):
    plgpu.copy_gmem_to_smem(x_gmem, smem, tma_barrier)
    plgpu.barrier_wait(tma_barrier)
    plgpu.async_copy_smem_to_tmem(smem, tmem)
    plgpu.tcgen05_commit_arrive(mma_barrier)
    plgpu.barrier_wait(mma_barrier)
    plgpu.store(y_gmem, plgpu.async_load_tmem(tmem), optimized=False)
  fn = _kernel(body, out_type=_sds((m, n), dtype), scratch_types=[
      plgpu.SMEM((m, n), dtype, transforms=_transforms(dtype)), plgpu.Barrier(),
      plgpu.Barrier(orders_tensor_core=True), plgpu.TMEM((m, n), dtype, packed=True)])
  x = _uniform(0, (m, n), dtype)
  return fn, (x,), (x,)


def async_copy_smem_to_tmem_warp_semantics():
  """tcgen05.cp issued by warp 0 and committed to a barrier the warpgroup waits on."""
  shape, dtype = (128, 64), jnp.int32
  def body(src_gmem, dst_gmem, smem, tmem, tma_barrier, tc_barrier):
    plgpu.copy_gmem_to_smem(src_gmem, smem, tma_barrier)
    plgpu.barrier_wait(tma_barrier)

    @plgpu.warp_map
    def _(warp_id):
      @pl.when(warp_id == 0)
      def _():
        plgpu.async_copy_smem_to_tmem(smem, tmem)
        plgpu.tcgen05_commit_arrive(tc_barrier)
    plgpu.barrier_wait(tc_barrier)
    dst_gmem[...] = plgpu.async_load_tmem(tmem)
  fn = _kernel(body, out_type=_sds(shape, dtype), scratch_types=[
      plgpu.SMEM(shape, dtype, transforms=_transforms(dtype)), plgpu.TMEM(shape, dtype),
      plgpu.Barrier(), plgpu.Barrier(orders_tensor_core=True)])
  x = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
  return fn, (x,), (x,)


def arrive_wait_on_tc_barrier():
  """A plain arrive and wait on a barrier that orders the tensor core."""
  def body(out_ref, barrier):
    plgpu.barrier_arrive(barrier)
    plgpu.barrier_wait(barrier)
    out_ref[...] = jnp.ones_like(out_ref)
  fn = _kernel(body, out_type=_sds((128,), jnp.float32), scratch_types=(
      plgpu.Barrier(num_arrivals=1, orders_tensor_core=True),))
  return fn, (), (np.ones((128,), np.float32),)


def barrier_arrive_warp_mesh():
  """test_barrier_arrive_warp_mesh[orders_tensor_core=True]: warps 0 and 1 arrive."""
  def body(out_ref, bar):
    @plgpu.warp_map
    def _per_warp(warp_idx):
      @pl.when(warp_idx < 2)
      def _():
        plgpu.barrier_arrive(bar)
        plgpu.barrier_wait(bar)
        out_ref[warp_idx] = jnp.ones_like(out_ref.at[warp_idx])
  fn = _kernel(body, out_type=_sds((2,), jnp.int32), scratch_types=[
      plgpu.Barrier(num_arrivals=2, orders_tensor_core=True)])
  return fn, (), (np.ones((2,), np.int32),)


# -- tests/mosaic/gpu_test.py::TCGen05Test: mgpu.as_gpu_kernel ------------------------


def _as_gpu_kernel(body, in_shapes, out_shape, scratch):
  """``mgpu.as_gpu_kernel(body, (1, 1, 1), (128, 1, 1), ...)`` as the test builds it
  (in an MLIR context), for a B200: Mosaic builds its module at once, for the device
  it is told of."""
  from jax.interpreters import mlir
  from jaxlib.mlir import ir
  from jax.experimental.mosaic import gpu as mgpu
  from mosaic_async_store import compat
  from mosaic_async_store.tools.device_target import device_target
  with compat.answer_device_queries(device_target("sm_100a")), \
      mlir.make_ir_context(), ir.Location.unknown():
    return mgpu.as_gpu_kernel(body, (1, 1, 1), (128, 1, 1), in_shapes, out_shape, scratch)


def load_store_tmem_native():
  """test_load_store_tmem_native[f32, packing=1]: registers -> TMEM -> registers in the
  TMEM-native layout, GMEM both ways unoptimised."""
  from jax.experimental.mosaic import gpu as mgpu
  from jax.experimental.mosaic.gpu import fragmented_array as fa
  from jax.experimental.mosaic.gpu import tcgen05
  dtype, packing = jnp.float32, 1

  def body(ctx, inp, out, tmem):
    del ctx
    reg_layout = tcgen05.tmem_default_layout(max(packing, 2)).as_tiled_layout()
    tmem.store(fa.FragmentedArray.load_untiled(inp, layout=reg_layout, optimized=False))
    tcgen05.commit_tmem()
    tmem.load(reg_layout).store_untiled(out, optimized=False)
  x = np.random.default_rng(1234).uniform(-1, 1, (128, 128)).astype(dtype)
  fn = _as_gpu_kernel(body, x, x, mgpu.TMEM(x.shape, dtype, packing=packing))
  return fn, (x,), (x,)


def _mma_basic(m, n, swizzle, in_dtype, lhs_transpose=False, rhs_transpose=False):
  """test_mma_basic_float (``_basic_mma_test``, k_steps=2, f32 out): A and B by TMA
  into tiled, swizzled SMEM, one thread's ``tcgen05.mma`` and ``commit_arrive``, the
  warpgroup waits (``orders_tensor_core=True``) and loads the accumulator."""
  def make():
    from jax.experimental.mosaic import gpu as mgpu
    from jax.experimental.mosaic.gpu import tcgen05, utils
    out_dtype = jnp.float32
    elems = swizzle // jnp.dtype(in_dtype).itemsize
    k = elems * 2
    tiling = (8, elems)

    def body(ctx, lhs, rhs, out, scratch):
      lhs_smem, rhs_smem, barriers, mma_barrier, acc = scratch
      ctx.async_copy(src_ref=lhs, dst_ref=lhs_smem, swizzle=swizzle,
                     gmem_transform=(mgpu.TileTransform(tiling),), barrier=barriers[0])
      ctx.async_copy(src_ref=rhs, dst_ref=rhs_smem, swizzle=swizzle,
                     gmem_transform=(mgpu.TileTransform(tiling),), barrier=barriers[1])
      barriers[0].wait()
      barriers[1].wait()
      with mgpu.single_thread():
        if lhs_transpose:
          lhs_smem = utils.memref_transpose(lhs_smem, (1, 0, 3, 2))
        if rhs_transpose:
          rhs_smem = utils.memref_transpose(rhs_smem, (1, 0, 3, 2))
        tcgen05.mma(acc, lhs_smem, rhs_smem, a_swizzle=swizzle, b_swizzle=swizzle,
                    accumulate=False)
        tcgen05.commit_arrive(mma_barrier)
      mma_barrier.wait(orders_tensor_core=True)
      acc.load(is_signed=None).store_untiled(out, optimized=False)
    prng = np.random.default_rng(1234)
    x_shape = (k, m) if lhs_transpose else (m, k)
    y_shape = (n, k) if rhs_transpose else (k, n)
    x = prng.uniform(-1, 1, x_shape).astype(in_dtype)
    y = prng.uniform(-1, 1, y_shape).astype(in_dtype)
    scratch = [jax.ShapeDtypeStruct(utils.tile_shape(x_shape, tiling), in_dtype),
               jax.ShapeDtypeStruct(utils.tile_shape(y_shape, tiling), in_dtype),
               mgpu.Barrier(arrival_count=1, num_barriers=2), mgpu.Barrier(arrival_count=1),
               mgpu.TMEM((m, n), out_dtype)]
    fn = _as_gpu_kernel(body, (x, y), jax.ShapeDtypeStruct((m, n), out_dtype), scratch)
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    ref = (x32.T if lhs_transpose else x32) @ (y32.T if rhs_transpose else y32)
    return fn, (x, y), (ref,)
  return make


# -- the fences the checker asks for -------------------------------------------------

_BAR_ALL = re.compile(r"^(\s*)bar\.sync\s+0;[ \t]*$", re.M)
_BAR_AFTER_WAIT = re.compile(r"^(\s*)tcgen05\.wait::ld\.sync\.aligned;[ \t]*\n"
                             r"((?:(?!\s*tcgen05\.)[^\n]*\n){0,4}?)"
                             r"(\s*bar\.sync[^\n]*)$", re.M)


def fenced(ptx: str) -> str:
  """``ptx`` with the tcgen05 ordering PTX ISA 9.7.16.6.4.4 asks for where jax 0.12.1's
  lowering leaves it out, so that ``check`` can compare what it computes with the test's
  values (``UpstreamTc.fenced``):

  * the epilogue: every warp reads its ``tcgen05.ld`` registers, then the CTA
    synchronises (``bar.sync 0``) and warp 0 deallocates, with no ``tcgen05.wait::ld``
    and no fences.  Around the last ``bar.sync 0`` before the first ``tcgen05.dealloc``
    (all warps converged there): ``tcgen05.wait::ld`` and
    ``tcgen05.fence::before_thread_sync`` before, ``tcgen05.fence::after_thread_sync``
    after;
  * ``wait_load_tmem`` (``tcgen05.wait::ld``) and the warpgroup barrier after it, before
    the next ``tcgen05.mma`` overwrites what the other warps loaded:
    ``tcgen05.fence::before_thread_sync`` before that barrier,
    ``tcgen05.fence::after_thread_sync`` after it.
  """
  def around_wait(m):
    pad = m.group(1)
    return (f"{m.group(0)[:m.start(3) - m.start(0)]}{pad}tcgen05.fence::before_thread_sync;\n"
            f"{m.group(3)}\n{pad}tcgen05.fence::after_thread_sync;")
  ptx = _BAR_AFTER_WAIT.sub(around_wait, ptx)
  end = ptx.index("tcgen05.dealloc")
  bars = list(_BAR_ALL.finditer(ptx, 0, end))
  if not bars:
    raise ValueError("no bar.sync 0 before the tcgen05.dealloc")
  m = bars[-1]
  pad = m.group(1)
  epilogue = (f"{pad}tcgen05.wait::ld.sync.aligned;\n{pad}tcgen05.fence::before_thread_sync;"
              f"\n{m.group(0).strip(chr(10))}\n{pad}tcgen05.fence::after_thread_sync;")
  return ptx[:m.start()] + epilogue + ptx[m.end():]


_T = "PallasCallTCGen05Test"
_TRANSPOSE = ("transposes with ref.transpose((1, 0)): jax 0.12.1 removed "
              "plgpu.transpose_ref")
_STORE = ("stores the result with plgpu.store(..., optimized=False): jax 0.12's "
          "optimised GMEM store refuses 16-bit TCGEN05 rows")


# Why ``check`` reports what it does on an entry (docs/checker.md's table).
_DEALLOC = dict(
    finding=(), fenced=True,
    why="jax 0.12.1's epilogue deallocates tensor memory after a bar.sync with no "
        "tcgen05.wait::ld and no tcgen05.fence::before/after_thread_sync: the warning "
        "tcgen05-dealloc-load (the ISA's letter asks for the wait; every warp has used "
        "the loaded registers by then), and it passes with the test's values")

_CP = dict(
    finding=(), fenced=True,
    why="tcgen05.cp from SMEM the TMA barrier orders (the warning tcgen05-fence-operand: "
        "no tcgen05.fence::after_thread_sync between the wait and the copy), committed and "
        "read back; the epilogue as the others (tcgen05-dealloc-load)")


def _entry(name, test, make, forms, checks, cls=_T, path=PALLAS, **options):
  return UpstreamTc(name, f"{path}::{cls}::test_{test}", make,
                    tuple(FORMS[f] for f in forms.split()), checks, **options)


KERNELS: tuple[UpstreamTc, ...] = (
    _entry("tmem[collective=False]", "tmem", tmem,
           "ALLOC DEALLOC LD ST WAIT_ST TMA_LOAD",
           "registers -> TMEM -> registers -> TMEM -> SMEM, x + 1 (f32)",
           fenced=True),
    _entry("tmem_allocation_estimation", "tmem_allocation_estimation",
           tmem_allocation_estimation, "ALLOC DEALLOC LD ST WAIT_ST TMA_LOAD",
           "three packed bf16 TMEM refs allocated at once, x + 3",
           **_DEALLOC),
    _entry("tmem_ref_aliasing", "tmem_ref_aliasing", tmem_ref_aliasing,
           "ALLOC DEALLOC LD ST WAIT_ST WAIT_LD TMA_LOAD",
           "a RefUnion of TMEM refs over the same columns, wait_load_tmem between reuses",
           fenced=True),
    _entry("tmem_ref_union_multi_allocation", "tmem_ref_union_multi_allocation",
           tmem_ref_union_multi_allocation, "ALLOC DEALLOC LD ST PACK UNPACK WAIT_ST",
           "an unpacked f16 TMEM ref and a RefUnion one, x + 1 and x + 2",
           adapted=_STORE, fenced=True,
           why="the unpacked f16 TMEM refs are stored with tcgen05.st .unpack::16b and read "
               "with tcgen05.ld .pack::16b"),
    _entry("tmem_load_layout[TCGEN05]", "tmem_load_layout", _tmem_load_layout(False),
           "ALLOC DEALLOC LD ST WAIT_ST TMA_LOAD",
           "TMEM store and load in the TCGEN05 register layout",
           fenced=True),
    _entry("tmem_load_layout[TCGEN05_TMEM_NATIVE]", "tmem_load_layout",
           _tmem_load_layout(True), "ALLOC DEALLOC LD ST WAIT_ST TMA_LOAD",
           "TMEM store and load in the TCGEN05_TMEM_NATIVE layout (32x32b)",
           fenced=True),
    _entry("tmem_column_slicing", "tmem_column_slicing", tmem_column_slicing,
           "ALLOC DEALLOC LD ST WAIT_ST",
           "stores and loads through column slices of a TMEM ref (column offset 8)",
           fenced=True),
    _entry("integer_matmul[m=128,n=128,swizzle=64,int8,lhs_tmem=False]", "integer_matmul",
           integer_matmul, "ALLOC DEALLOC LD MMA_I8 COMMIT AFTER_SYNC TMA_LOAD",
           "int8 x int8 -> int32 MMA, exact",
           **_DEALLOC),
    _entry("simple_matmul[m=128,n=128,swizzle=128,f16]", "simple_matmul",
           _simple_matmul(128, 128, 128, jnp.float16),
           "ALLOC DEALLOC LD MMA_F16 COMMIT AFTER_SYNC TMA_LOAD",
           "f16 MMA into f32 TMEM, read back as f16", rtol=1e-3, adapted=_STORE,
           **_DEALLOC),
    _entry("simple_matmul[m=64,n=128,swizzle=128,bf16]", "simple_matmul",
           _simple_matmul(64, 128, 128, jnp.bfloat16),
           "ALLOC DEALLOC LD MMA_F16 COMMIT AFTER_SYNC TMA_LOAD",
           "bf16 MMA with M = 64 (TMEM layout of M = 64)", rtol=1e-3, adapted=_STORE,
           **_DEALLOC),
    _entry("simple_matmul[m=128,n=128,swizzle=64,f16,transpose_lhs,transpose_rhs]",
           "simple_matmul",
           _simple_matmul(128, 128, 64, jnp.float16, transpose_lhs=True,
                          transpose_rhs=True),
           "ALLOC DEALLOC LD MMA_F16 COMMIT AFTER_SYNC TMA_LOAD",
           "both operands transposed (MN-major descriptors), 64-byte swizzle", rtol=1e-3,
           adapted=f"{_STORE}; {_TRANSPOSE}",
           **_DEALLOC),
    _entry("simple_matmul[m=128,n=256,swizzle=128,e5m2xe4m3fn]", "simple_matmul",
           _simple_matmul(128, 256, 128, (jnp.float8_e5m2, jnp.float8_e4m3fn)),
           "ALLOC DEALLOC LD MMA_F8 COMMIT AFTER_SYNC TMA_LOAD",
           "fp8 e5m2 x e4m3fn MMA (kind::f8f6f4), N = 256", rtol=1e-2, atol=1e-2,
           **_DEALLOC),
    _entry("matmul_alignment", "matmul_alignment", matmul_alignment,
           "ALLOC DEALLOC LD MMA_F16 COMMIT AFTER_SYNC TMA_LOAD",
           "an accumulator allocated after a one-column TMEM ref (aligned)", rtol=1e-3,
           **_DEALLOC),
    _entry("simple_warp_specialized_matmul", "simple_warp_specialized_matmul",
           simple_warp_specialized_matmul,
           "ALLOC DEALLOC LD MMA_F16 COMMIT AFTER_SYNC TMA_LOAD",
           "the MMA issued from warp 0 inside warp_map", rtol=1e-3, adapted=_STORE,
           **_DEALLOC),
    _entry("manual_tcgen05_commit_arrive[128,f16]", "manual_tcgen05_commit_arrive",
           manual_tcgen05_commit_arrive,
           "ALLOC DEALLOC LD MMA_F16 COMMIT AFTER_SYNC TMA_LOAD",
           "an MMA with no barrier, then tcgen05_commit_arrive by hand", rtol=1e-3,
           adapted=_STORE,
           **_DEALLOC),
    _entry("matmul_with_sliced_accumulator", "matmul_with_sliced_accumulator",
           matmul_with_sliced_accumulator,
           "ALLOC DEALLOC LD MMA_F16 COMMIT AFTER_SYNC TMA_LOAD",
           "the accumulator a column slice of a larger TMEM ref (bf16)", rtol=1e-3,
           adapted=_STORE,
           **_DEALLOC),
    _entry("matmul_with_smem_aliasing[128,f16]", "matmul_with_smem_aliasing",
           matmul_with_smem_aliasing,
           "ALLOC DEALLOC LD WAIT_LD MMA_F16 COMMIT AFTER_SYNC TMA_LOAD",
           "two MMAs (K = 128, K = 64) over aliased SMEM refs, A transposed, the "
           "accumulator reused after wait_load_tmem", rtol=1e-3,
           adapted=f"{_STORE}; {_TRANSPOSE}",
           fenced=True,
           why="as the others, the epilogue; and before the second MMA overwrites the "
               "accumulator, wait_load_tmem (tcgen05.wait::ld) and the warpgroup bar.sync "
               "come with no tcgen05.fence::before_thread_sync / after_thread_sync: the "
               "warning tcgen05-fence-sync"),
    _entry("matmul_with_tmem_aliasing[128,f16]", "matmul_with_tmem_aliasing",
           matmul_with_tmem_aliasing,
           "ALLOC DEALLOC LD ST MMA_F16 COMMIT AFTER_SYNC TMA_LOAD",
           "A stored into TMEM and multiplied from there, aliased with the accumulators",
           rtol=1e-3, adapted=_STORE,
           refused="[a-tmem]",
           why="tcgen05.mma with A in tensor memory is not run by the checker"),
    _entry("mma_barrier_indexing[(1, 0),(2, 1)]", "mma_barrier_indexing",
           mma_barrier_indexing, "ALLOC DEALLOC LD MMA_F16 COMMIT AFTER_SYNC TMA_LOAD",
           "the MMA's completion committed to an indexed barrier of a 2 x 1 array",
           rtol=1e-3, adapted=_STORE,
           **_DEALLOC),
    _entry("async_copy_smem_to_tmem[128]", "async_copy_smem_to_tmem",
           async_copy_smem_to_tmem, "ALLOC DEALLOC LD CP COMMIT TMA_LOAD",
           "SMEM -> TMEM by tcgen05.cp (f16, packed), read back", adapted=_STORE,
           **_CP),
    _entry("async_copy_smem_to_tmem_warp_semantics",
           "async_copy_smem_to_tmem_warp_semantics",
           async_copy_smem_to_tmem_warp_semantics, "ALLOC DEALLOC LD CP COMMIT TMA_LOAD",
           "tcgen05.cp and its commit from warp 0 inside warp_map (int32)",
           **_CP),
    _entry("arrive_wait_on_tc_barrier", "arrive_wait_on_tc_barrier",
           arrive_wait_on_tc_barrier, "",
           "a plain arrive and wait on an orders_tensor_core barrier"),
    _entry("barrier_arrive_warp_mesh[orders_tensor_core=True]", "barrier_arrive_warp_mesh",
           barrier_arrive_warp_mesh, "",
           "two warps arrive on and wait for an orders_tensor_core barrier",
           finding=("race",),
           why="out_ref[warp_idx] = 1 inside warp_map is stored by all 32 lanes of the "
               "warp: the same 4 bytes written by 32 threads with no order between "
               "them (a data race under the PTX memory model, however equal the values)"),
    _entry("tmem[collective=True]", "tmem", lambda: tmem(collective=True),
           "ALLOC_PAIR LD ST WAIT_ST TMA_LOAD",
           "the TMEM round trip in a cluster of 2 with collective (cta_group::2) TMEM",
           finding=("race",),
           why="both CTAs of the cluster store the whole smem_ref to the whole y_ref (TMA "
               "stores of the same 64 KiB of global memory, unordered: a data race by the "
               "letter, however equal the values)"),
    _entry("load_store_tmem_native[f32,1]", "load_store_tmem_native",
           load_store_tmem_native, "ALLOC DEALLOC LD ST WAIT_ST",
           "Mosaic GPU: TMEM store and load in the TMEM-native layout (32x32b)",
           cls="TCGen05Test", path=MOSAIC, **_DEALLOC),
    _entry("mma_basic_float[m=128,n=128,swizzle=128,f16,f32]", "mma_basic_float",
           _mma_basic(128, 128, 128, jnp.float16),
           "ALLOC DEALLOC LD MMA_F16 COMMIT AFTER_SYNC TMA_LOAD",
           "Mosaic GPU: one thread's MMA over K = 128 (two K steps), f32 accumulator",
           cls="TCGen05Test", path=MOSAIC, rtol=1e-7, atol=2e-5, **_DEALLOC),
    _entry("mma_basic_float[m=64,n=256,swizzle=64,bf16,f32,lhs_transpose,rhs_transpose]",
           "mma_basic_float",
           _mma_basic(64, 256, 64, jnp.bfloat16, lhs_transpose=True, rhs_transpose=True),
           "ALLOC DEALLOC LD MMA_F16 COMMIT AFTER_SYNC TMA_LOAD",
           "Mosaic GPU: M = 64, both operands transposed, 64-byte swizzle, bf16",
           cls="TCGen05Test", path=MOSAIC, rtol=1e-7, atol=2e-5, **_DEALLOC),
)

BY_NAME = {k.name: k for k in KERNELS}
assert len(BY_NAME) == len(KERNELS), "duplicate entry names"
