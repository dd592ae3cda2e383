"""The plan executor agrees with the geometry-only expectation (hostdata).

This ties together, without a GPU: the register order the test kernels read,
the planner's exchanges and instructions, the swizzle, and the reduction
semantics the GPU tests will compare against.
"""

import numpy as np
import pytest

import hostdata
from mosaic_async_store.demo.config import StoreConfig, resolve_layout, view_geometry
from mosaic_async_store.plan.planner import plan_store
from gpu_run import make_inputs
from mosaic_async_store.demo.check import execute_config
from mosaic_async_store.plan.executor import execute_plan

CONFIGS = [
    StoreConfig(),
    StoreConfig(dtype="float32", optimized=True),
    StoreConfig(dtype="int8"),
    StoreConfig(dtype="int4", shape=(64, 256)),
    StoreConfig(dtype="float4_e2m1fn", shape=(64, 128), swizzle=64),
    StoreConfig(dtype="float8_e4m3fn", layout="WGMMA_8BIT"),
    StoreConfig(transposed=True),
    StoreConfig(dtype="float16", transposed=True, swizzle=64, optimized=False),
    StoreConfig(dtype="float32", layout="TMEM_NATIVE_V4", shape=(128, 64)),
    StoreConfig(layout="WGMMA_ROW", shape=(128,), swizzle=None),
    StoreConfig(layout="STRIDED", shape=(64, 64), swizzle=None),
    StoreConfig(layout="SPLAT", swizzle=None, shape=(32, 64)),
    StoreConfig(dtype="int32", atomic="add"),
    StoreConfig(dtype="int32", atomic="min"),
    StoreConfig(dtype="uint32", atomic="max"),
    StoreConfig(dtype="int32", atomic="xor", target="local"),
    StoreConfig(dtype="uint32", atomic="inc"),
    StoreConfig(dtype="bfloat16", atomic="add"),
    StoreConfig(dtype="float32", atomic="add", swizzle=64),
    StoreConfig(dtype="int64", atomic="max", swizzle=None),
]


def _run(cfg, seed=0):
  codes, src, init = make_inputs(cfg, seed)
  return execute_config(cfg, src, init), hostdata.expected_smem(cfg, codes, init), init


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.describe())
def test_executor_matches_geometry(cfg):
  got, want, init = _run(cfg)
  assert np.array_equal(got, want), np.flatnonzero(got != want)[:20]
  assert not np.array_equal(got, init)  # the store did something


def test_a_wrong_plan_is_caught():
  """Swapping two instructions' destinations must show up as a mismatch."""
  import dataclasses
  cfg = StoreConfig()
  got, want, _ = _run(cfg)
  assert np.array_equal(got, want)
  layout = resolve_layout(cfg.layout, cfg.shape, cfg.dtype)
  plan = plan_store(layout, cfg.shape, cfg.dtype, swizzle=128)
  a, b = plan.instructions[:2]
  broken = dataclasses.replace(plan, instructions=(dataclasses.replace(a, dst=b.dst),
                                                   dataclasses.replace(b, dst=a.dst),
                                                   *plan.instructions[2:]))
  regs = np.random.default_rng(1).integers(0, 256, (128, plan.registers.num_registers, 4),
                                           dtype=np.uint8)
  smem = np.zeros(16384, np.uint8)
  assert not np.array_equal(execute_plan(broken, regs, smem), execute_plan(plan, regs, smem))


def test_simulate_store_plain_bf16_roundtrip():
  import ml_dtypes
  from mosaic_async_store import compat, simulate_store
  fa = compat.fragmented_array()
  x = (np.arange(64 * 128) % 251).astype(np.float32).reshape(64, 128).astype(ml_dtypes.bfloat16)
  y = simulate_store(x, fa.WGMMA_LAYOUT, swizzle=128)
  assert y.dtype == x.dtype and np.array_equal(x.view(np.uint16), y.view(np.uint16))


def test_simulate_store_int4_and_reductions():
  import ml_dtypes
  from mosaic_async_store import compat, simulate_store
  fa = compat.fragmented_array()
  q = (np.arange(64 * 256) % 16 - 8).astype(ml_dtypes.int4).reshape(64, 256)
  assert np.array_equal(simulate_store(q, fa.WGMMA_LAYOUT, swizzle=128).astype(np.int8),
                        q.astype(np.int8))
  i = (np.arange(64 * 128) - 4000).astype(np.int32).reshape(64, 128)
  init = np.full((64, 128), 5, np.int32)
  got = simulate_store(i, fa.WGMMA_LAYOUT, swizzle=128, atomic="min", initial=init)
  assert np.array_equal(got, np.minimum(i, init))  # signed: negatives win
  f = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
  got = simulate_store(f, fa.WGMMA_LAYOUT, swizzle=64, atomic="add", initial=f)
  assert np.array_equal(got, f + f)


def test_splat_goes_in_address_order_even_transposed():
  """A splat may put any element anywhere: 16-byte, conflict-free stores into a
  transposed plain ref (the logical order would be 4-byte, conflicting)."""
  cfg = StoreConfig(dtype="float32", shape=(64, 32), layout="SPLAT", swizzle=None,
                    transposed=True)
  geom = view_geometry(cfg)
  plan = plan_store(resolve_layout("SPLAT", cfg.shape, cfg.dtype), cfg.shape, cfg.dtype,
                    ref_shape=geom.ref_shape, ref_strides=geom.strides, optimized=True)
  assert plan.verify().bank_conflicts == 0
  assert {(i.kind, i.width) for i in plan.instructions} == {("st.async", 16)}
  got, want, _ = _run(cfg)
  assert np.array_equal(got, want)
