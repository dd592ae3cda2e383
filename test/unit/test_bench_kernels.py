"""The GPU benchmark's kernels (test/harness/bench_kernels.py, run by
bench/dsmem_bandwidth.py) build and pass ptxas on the CPU (every strategy), so a
session with a GPU spends its minutes measuring, not debugging."""

import pytest
from jaxlib.mlir import ir

from mosaic_async_store import compat
from mosaic_async_store.tools import toolchain
from mosaic_async_store.demo.config import StoreConfig
from bench_kernels import STRATEGIES, bench_kernel_parts, device_seconds

EXPECTED = {
    "mas": "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32",
    "plain": "st.shared::cluster.b32",
    "upstream": "st.async.cluster.shared::cluster.mbarrier::complete_tx::bytes.b32",
    "bulk": "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes",
    "local": "st.shared::cta.b32",
}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_bench_kernel_compiles(strategy):
  cfg = StoreConfig()
  with compat.enable_x64(), compat.make_ir_context(), ir.Location.unknown():
    k = bench_kernel_parts(cfg, strategy, ctas=8, iters=3)
    compiled = toolchain.compile_module(k.module())
  stats = compiled.stats
  assert stats.stores.get(EXPECTED[strategy], 0) > 0, stats.stores
  # the device clock is read before and after the timed loop
  assert compiled.ptx.count("%globaltimer") == 2
  assert k.bytes_per_launch == 8 * 3 * 64 * 128 * 2


def test_device_seconds_spans_earliest_start_to_latest_end():
  import numpy as np
  stamps = np.array([[1_000, 5_000], [2_000, 9_000], [1_500, 4_000]], np.uint64)
  assert device_seconds(stamps.view(np.int32).reshape(-1)) == pytest.approx(8e-6)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_bench_kernel_lowers_for_cuda(strategy):
  """The runtime path (upstream's as_gpu_kernel, two outputs) up to the custom call."""
  import jax.numpy as jnp
  cfg = StoreConfig()
  with compat.enable_x64(), compat.make_ir_context(), ir.Location.unknown():
    k = bench_kernel_parts(cfg, strategy, ctas=8, iters=3)
    fn = k.gpu_kernel()
  text = fn.trace(jnp.zeros(k.in_shape[0].shape, jnp.uint8)).lower(
      lowering_platforms=("cuda",)).as_text()
  assert "stablehlo.custom_call @mosaic_gpu_v2" in text
  assert "tensor<1024xi32>" in text and "tensor<32xi32>" in text  # flags, clock stamps
