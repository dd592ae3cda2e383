# RUN: %PYTHON %s sm_90a | FileCheck %s --check-prefixes=PTX,SM90
# RUN: %PYTHON %s sm_100a | FileCheck %s --check-prefixes=PTX,SM100,TC
# RUN: %PYTHON %s sm_103a | FileCheck %s --check-prefixes=PTX,SM103
# REQUIRES: filecheck, mlir-opt, ptxas, cuobjdump
# One store per target: the same instructions, under the PTX ISA version each
# target needs (sm_103a: 8.8).  On Blackwell, a Pallas store onto a barrier
# allocated with orders_tensor_core=True (Lane and Warpgroup) fences tcgen05,
# synchronises the warpgroup and arrives once, from one thread, with the whole tx.
# Not for sm_103a: mlir-opt 22's nvvm.tcgen05.fence (upstream's wait on such a
# barrier) "is not supported on sm_103a" (docs/jax-versions.md).

import sys

from mosaic_async_store.demo.config import StoreConfig
from mosaic_async_store.tools import toolchain
from kernel_text import kernel_text, pallas_module

ARCH = sys.argv[1]

# PTX-LABEL: TEST: demo_store
# SM90: .version 8.6
# SM90-NEXT: .target sm_90a
# SM100: .version 8.6
# SM100-NEXT: .target sm_100a
# SM103: .version 8.8
# SM103-NEXT: .target sm_103a
# PTX-COUNT-2: mapa.shared::cluster.u32
# PTX-COUNT-32: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64
print("TEST: demo_store")
print(kernel_text(StoreConfig(), "ptx", arch=ARCH))

# TC-LABEL: TEST: tensor_core_lane
# TC-COUNT-16: st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32
# TC: tcgen05.fence::before_thread_sync;
# TC: bar.sync %r{{[0-9]+}}, 128;
# TC: @%p{{[0-9]+}} bra
# TC: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%r{{[0-9]+}}], %r{{[0-9]+}};
# TC-NOT: mbarrier.arrive
# TC: tcgen05.fence::after_thread_sync;
# TC-LABEL: TEST: tensor_core_warpgroup_upstream_int8
# TC: tcgen05.fence::before_thread_sync;
# TC: bar.sync %r{{[0-9]+}}, 128;
# TC: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64
# TC-NOT: mbarrier.arrive
if ARCH == "sm_100a":  # tcgen05 is Blackwell's
  from mosaic_async_store import pallas as mas_pallas
  for name, kwargs in [("tensor_core_lane", dict(dtype="float32", shape=(64, 64))),
                       ("tensor_core_warpgroup_upstream_int8",
                        dict(dtype="int8", semantics="warpgroup", api="upstream"))]:
    print(f"TEST: {name}")
    if kwargs.get("api") == "upstream":
      mas_pallas.install()
    try:
      print(toolchain.compile_module(pallas_module(tensor_core=True, **kwargs), ARCH).ptx)
    finally:
      mas_pallas.uninstall()
