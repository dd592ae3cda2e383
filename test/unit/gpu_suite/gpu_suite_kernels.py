"""A test suite written for a GPU, as a user writes it: nothing in it knows of the
checker.  test/unit/test_checking_mode.py runs it on the CPU under ``--mgpu-check``
(the file is named so that the project's own test run does not collect it)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

TILE = (64, 128)


def _swizzled():
  return (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))


def round_trip(commit=True):
  """TMA load, +1, TMA store; without ``commit`` the proxy fence is missing."""
  def body(x_ref, o_ref, smem, bar):
    plgpu.copy_gmem_to_smem(x_ref, smem, bar)
    plgpu.barrier_wait(bar)
    smem[...] = smem[...] + jnp.float16(1)
    if commit:
      plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem, o_ref)   # BROKEN-LINE
    plgpu.wait_smem_to_gmem(0)

  return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(TILE, jnp.float16),
                      scratch_types=[plgpu.SMEM(TILE, jnp.float16, transforms=_swizzled()),
                                     plgpu.Barrier()])


def twice(x):
  def body(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2

  return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                        compiler_params=plgpu.CompilerParams())(x)


def wgmma_matmul(a, b):
  """A 128x128x64 f16 matmul: A and B blocks by TMA, WGMMA into an f32 accumulator."""
  def body(a_smem, b_smem, o_smem, acc):
    plgpu.wgmma(acc, a_smem, b_smem)
    plgpu.wgmma_wait(0)
    o_smem[...] = acc[...].astype(jnp.float16)

  spec = lambda shape: plgpu.BlockSpec(shape, lambda: (0, 0), transforms=_swizzled())
  return pl.pallas_call(body, in_specs=[spec((128, 64)), spec((64, 128))],
                        out_specs=spec((128, 128)),
                        out_shape=jax.ShapeDtypeStruct((128, 128), jnp.float16),
                        scratch_shapes=[plgpu.ACC((128, 128), jnp.float32)],
                        compiler_params=plgpu.CompilerParams())(a, b)


def _x():
  return np.random.default_rng(0).uniform(-1, 1, TILE).astype(np.float16)


def test_tma_kernel_eager():
  x = _x()
  np.testing.assert_array_equal(np.asarray(round_trip()(x)), x + np.float16(1))


def test_tma_kernel_under_jit():
  x = _x()
  f = jax.jit(lambda a: round_trip()(a) * 2)
  np.testing.assert_array_equal(np.asarray(f(x)), (x + np.float16(1)) * np.float16(2))


def test_pallas_call_eager():
  x = _x()
  np.testing.assert_array_equal(np.asarray(twice(x)), x * np.float16(2))


def test_pallas_call_under_jit():
  x = _x()
  np.testing.assert_array_equal(np.asarray(jax.jit(twice)(x)), x * np.float16(2))


def test_wgmma_kernel_under_jit():
  rng = np.random.default_rng(1)
  a = rng.uniform(-1, 1, (128, 64)).astype(np.float16)
  b = rng.uniform(-1, 1, (64, 128)).astype(np.float16)
  np.testing.assert_allclose(np.asarray(jax.jit(wgmma_matmul)(a, b), np.float32),
                             a.astype(np.float32) @ b.astype(np.float32), atol=1e-2, rtol=1e-2)


def test_broken_kernel():
  x = _x()
  np.testing.assert_array_equal(np.asarray(jax.jit(round_trip(commit=False))(x)),
                                x + np.float16(1))


def test_fixture_collects(mgpu_check):
  x = _x()
  round_trip()(x).block_until_ready()
  assert [k.name for k in mgpu_check.kernels] == ["body"]
  assert not mgpu_check.findings


def test_upstream_hopper_matmul():
  from jax.experimental.pallas.ops.gpu import hopper_matmul_mgpu as hm
  rng = np.random.default_rng(0)
  a = rng.uniform(-1, 1, (256, 128)).astype(np.float16)
  b = rng.uniform(-1, 1, (128, 256)).astype(np.float16)
  config = hm.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2)
  out = jax.jit(lambda a, b: hm.matmul(a, b, None, config))(a, b)
  np.testing.assert_allclose(np.asarray(out, np.float32),
                             a.astype(np.float32) @ b.astype(np.float32), atol=2e-2, rtol=2e-2)


def test_upstream_flash_attention():
  from jax.experimental.pallas.ops.gpu import attention_mgpu as am
  rng = np.random.default_rng(0)
  q, k, v = (rng.uniform(-1, 1, (1, 256, 2, 64)).astype(np.float16) for _ in range(3))
  config = am.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2)
  out = jax.jit(lambda q, k, v: am.attention(q, k, v, config))(q, k, v)
  np.testing.assert_allclose(np.asarray(out, np.float32),
                             np.asarray(am.attention_reference(q, k, v), np.float32),
                             atol=3e-2, rtol=3e-2)
