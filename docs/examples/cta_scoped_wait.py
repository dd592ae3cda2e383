"""Mistake 2 of docs/check-your-kernel.md: plain remote reductions (f32 add goes as
red.shared::cluster into the peer, ordered by a .release.cluster arrive) and a consumer that
waits at .cta scope.  Run: python docs/examples/cta_scoped_wait.py"""

import re
import numpy as np
from jaxlib.mlir import ir
from mosaic_async_store import compat
from mosaic_async_store.check import check_ptx
from mosaic_async_store.demo.config import StoreConfig
from mosaic_async_store.demo.kernel import build_store_module, kernel_io
from mosaic_async_store.tools import toolchain

cfg = StoreConfig(dtype="float32", atomic="add")     # plain red.shared::cluster into the peer
with compat.make_ir_context(), ir.Location.unknown():
  module, _ = build_store_module(cfg)
  ptx = toolchain.compile_module(module).ptx
# Mistake 2: the consumer waits at .cta scope (Pallas' barrier_wait before install())
ptx = ptx.replace("mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64",
                  "mbarrier.try_wait.parity.shared::cta.b64")
io = kernel_io(cfg)
init = np.zeros(2 * io.smem_bytes, np.uint8)
src = np.ones(2 * io.src_bytes, np.uint8)
flags = np.zeros(2 * 128, np.int32)
out = np.zeros(2 * io.smem_bytes, np.uint8)
report = check_ptx(ptx, [init, src, flags, out], smem_bytes=io.smem_bytes + 8,
                   cluster=(2, 1, 1))
print(report)
