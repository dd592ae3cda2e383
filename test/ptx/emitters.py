# RUN: %PYTHON %s | FileCheck %s
# The exact text of the emitters no other check spells out, compiled on the CPU to
# PTX: plain st.shared::cluster.u8/.u16 into a peer, st.shared::cta into the
# executing CTA (a cluster of one CTA, where st.async is undefined), the debug
# kernel's mbarrier.expect_tx, and the bulk benchmark's cp.async.bulk.  Registers
# are captured and linked: the mapped buffer is the stores' base, the mapped
# barrier the one the arrive (and the copy) complete on.

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, gpu

import mosaic_async_store as mas
from mosaic_async_store import compat, toolchain
from mosaic_async_store.config import StoreConfig
from mosaic_async_store.lowering import kernels
from mosaic_async_store.lowering.bench_kernels import bench_kernel_parts


def show(name, parts):
  """Prints the PTX of a kernel given as ``KernelParts`` (built by ``parts()``)."""
  with compat.make_ir_context(), ir.Location.unknown(), compat.enable_x64():
    k = parts()
    module, *_ = compat.kernel_to_module(k.body, k.grid, k.block, k.in_shape, k.out_shape,
                                         k.scratch, cluster=k.cluster)
    print(f"TEST: {name}")
    print(toolchain.compile_module(module).ptx)


def plain_into_peer(swizzle):
  """The store of a 2-CTA kernel with strategy="plain": every piece a plain st."""
  def store(value, view, barrier):
    index = ir.IndexType.get()
    peer = arith.remui(arith.addi(gpu.cluster_block_id(gpu.Dimension.x),
                                  arith.constant(index, 1)), arith.constant(index, 2))
    mas.async_store(value, view, barrier, cluster_dim=gpu.Dimension.x, cluster_idx=peer,
                    swizzle=swizzle, strategy="plain")
  return store


# 8-bit rows: each writer holds two separate bytes, stored with st.shared::cluster.u8
# at the mapped buffer (+8 for the second), then a .release.cluster arrive on the
# mapped barrier announcing 0 bytes (no asynchronous piece).
# CHECK-LABEL: TEST: plain_u8
# CHECK: mapa.shared::cluster.u32 %r[[BUF:[0-9]+]], %r{{[0-9]+}}, %r[[RANK:[0-9]+]];
# CHECK: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r{{[0-9]+}}, %r[[RANK]];
# CHECK: add.s32 %r[[ADDR:[0-9]+]], %r[[BUF]], %r{{[0-9]+}};
# CHECK: st.shared::cluster.u8 [%r[[ADDR]]], %r{{[0-9]+}};
# CHECK: st.shared::cluster.u8 [%r[[ADDR]]+8], %r{{[0-9]+}};
# CHECK-NOT: st.shared
# CHECK-NOT: st.async
# CHECK: mov.b32 %r[[TX:[0-9]+]], 0;
# CHECK: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r[[BAR]]], %r[[TX]];
# CHECK-NOT: st.async
show("plain_u8", lambda: kernels.kernel_parts(
    StoreConfig(dtype="int8", shape=(64,), layout="WGMMA_ROW", swizzle=None), bare=True,
    store=plain_into_peer(None)))

# A 64x128 int8 tile: 32 two-byte pieces per thread (pairs of adjacent elements).
# CHECK-LABEL: TEST: plain_u16
# CHECK: mapa.shared::cluster.u32 %r[[BUF:[0-9]+]], %r{{[0-9]+}}, %r[[RANK:[0-9]+]];
# CHECK: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r{{[0-9]+}}, %r[[RANK]];
# CHECK: add.s32 %r[[ADDR:[0-9]+]], %r[[BUF]], %r{{[0-9]+}};
# CHECK: st.shared::cluster.u16 [%r[[ADDR]]], %r{{[0-9]+}};
# CHECK-COUNT-31: st.shared::cluster.u16 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], %r{{[0-9]+}};
# CHECK-NOT: st.shared
# CHECK-NOT: st.async
# CHECK: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r[[BAR]]], %r{{[0-9]+}};
# CHECK-NOT: st.async
show("plain_u16", lambda: kernels.kernel_parts(StoreConfig(dtype="int8"), bare=True,
                                               store=plain_into_peer(128)))

# A cluster of one CTA (st.async needs %cluster_nctarank > 1): plain stores through the
# executing CTA's window, no mapa, and the arrive on the own, initialised barrier.
# CHECK-LABEL: TEST: cluster_of_one_bf16
# CHECK: cvt.u32.u64 %r[[SMEM:[0-9]+]], %rd{{[0-9]+}};
# CHECK: add.s32 %r[[BAR:[0-9]+]], %r[[SMEM]], 16384;
# CHECK: mbarrier.init.shared{{(::cta)?}}.b64 [%r[[BAR]]], %r{{[0-9]+}};
# CHECK-NOT: mapa
# CHECK: add.s32 %r[[ADDR:[0-9]+]], %r{{[0-9]+}}, %r[[SMEM]];
# CHECK: st.shared::cta.b32 [%r[[ADDR]]], %r{{[0-9]+}};
# CHECK-COUNT-31: st.shared::cta.b32 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], %r{{[0-9]+}};
# CHECK-NOT: st.shared
# CHECK: mov.b32 %r[[TX:[0-9]+]], 0;
# CHECK: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r[[BAR]]], %r[[TX]];
# CHECK-NOT: mapa
# CHECK-NOT: st.async
show("cluster_of_one_bf16", lambda: kernels.kernel_parts(
    StoreConfig(target="local", cluster=1), bare=True))

# CHECK-LABEL: TEST: cluster_of_one_i8
# CHECK-NOT: mapa
# CHECK-COUNT-32: st.shared::cta.u16 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], %r{{[0-9]+}};
# CHECK-NOT: st.shared
# CHECK: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64
# CHECK-NOT: st.async
show("cluster_of_one_i8", lambda: kernels.kernel_parts(
    StoreConfig(target="local", cluster=1, dtype="int8"), bare=True))

# CHECK-LABEL: TEST: cluster_of_one_row_i8
# CHECK-NOT: mapa
# CHECK: st.shared::cta.u8 [%r[[ADDR:[0-9]+]]], %r{{[0-9]+}};
# CHECK: st.shared::cta.u8 [%r[[ADDR]]+8], %r{{[0-9]+}};
# CHECK-NOT: st.shared
# CHECK: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64
show("cluster_of_one_row_i8", lambda: kernels.kernel_parts(
    StoreConfig(target="local", cluster=1, dtype="int8", shape=(64,), layout="WGMMA_ROW",
                swizzle=None), bare=True))

# The debug tests' wrong count: after each thread's arrive (128 bytes), one thread
# announces 16 more bytes on the same mapped barrier, without arriving.
# CHECK-LABEL: TEST: tx_error
# CHECK: mapa.shared::cluster.u32 %r{{[0-9]+}}, %r{{[0-9]+}}, %r[[RANK:[0-9]+]];
# CHECK: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r{{[0-9]+}}, %r[[RANK]];
# CHECK: mbarrier.arrive.expect_tx.shared::cluster.b64 _, [%r[[BAR]]], %r{{[0-9]+}};
# CHECK: elect.sync
# CHECK: mov.b32 %r[[EXTRA:[0-9]+]], 16;
# CHECK: mbarrier.expect_tx.relaxed.cluster.shared::cluster.b64 [%r[[BAR]]], %r[[EXTRA]];
# CHECK-NOT: mbarrier.expect_tx
show("tx_error", lambda: kernels.kernel_parts(StoreConfig(), tx_error=16))

# The bulk benchmark: plain local stores into a staging buffer, a proxy fence, then one
# thread announces the tile's 16384 bytes on the peer's barrier and copies the tile
# into the peer's buffer, completing on that barrier; the wait polls the own one.
# CHECK-LABEL: TEST: bulk
# CHECK: st.shared::cta.b32
# CHECK: fence.proxy.async.shared::cta;
# CHECK: mapa.shared::cluster.u32 %r[[DST:[0-9]+]], %r{{[0-9]+}}, %r[[RANK:[0-9]+]];
# CHECK: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r[[OWN:[0-9]+]], %r[[RANK]];
# CHECK: elect.sync
# CHECK: mov.b32 %r[[TX:[0-9]+]], 16384;
# CHECK: mbarrier.arrive.expect_tx.shared::cluster.b64 _, [%r[[BAR]]], %r[[TX]];
# CHECK: cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r[[DST]]], [%r{{[0-9]+}}], 16384, [%r[[BAR]]];
# CHECK: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done, [%r[[OWN]]], %r{{[0-9]+}}, %r{{[0-9]+}};
show("bulk", lambda: bench_kernel_parts(StoreConfig(), "bulk", ctas=2, iters=1))
