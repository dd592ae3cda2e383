"""The GPU benchmark's kernels build and pass ptxas on the CPU (every strategy),
so a session with a GPU spends its minutes measuring, not debugging."""

import pytest
from jaxlib.mlir import ir

from mosaic_async_store import compat, toolchain
from mosaic_async_store.config import StoreConfig
from mosaic_async_store.lowering.bench_kernels import STRATEGIES, bench_kernel_parts

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
    module, *_ = compat.kernel_to_module(k.body, k.grid, k.block, k.in_shape, k.out_shape,
                                         k.scratch, cluster=k.cluster)
    stats = toolchain.compile_module(module).stats
  assert stats.stores.get(EXPECTED[strategy], 0) > 0, stats.stores
  assert k.bytes_per_launch == 8 * 3 * 64 * 128 * 2
