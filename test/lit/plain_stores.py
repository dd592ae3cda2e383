# RUN: %PYTHON %s ir+ptx %t.ptx | FileCheck %s
# RUN: FileCheck %s --check-prefix=PTX --input-file %t.ptx
# REQUIRES: filecheck, mlir-opt, ptxas, cuobjdump
# Plain stores, the emitters no other check spells out: st.shared::cluster.u8/.u16
# into a peer (strategy="plain"), st.shared::cta.b32/.u16/.u8 into the executing CTA
# (a cluster of one CTA, where st.async is undefined).  Registers are captured and
# linked: the mapped buffer is the stores' base, the mapped barrier the one the
# arrive completes on.

import sys

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, gpu

import mosaic_async_store as mas
from mosaic_async_store import compat
from mosaic_async_store.tools import toolchain
from mosaic_async_store.demo.config import StoreConfig
import store_kernels as demo_kernel
from kernel_text import write_ptx


def show(name, parts):
  """Prints the IR or PTX (by sys.argv[1]) of a kernel given as ``KernelParts``;
  "ir+ptx FILE" prints the IR and writes the PTX to FILE (kernel_text.emit)."""
  what = sys.argv[1] if len(sys.argv) > 1 else "ir"
  with compat.make_ir_context(), ir.Location.unknown(), compat.enable_x64():
    k = parts()
    module, *_ = compat.kernel_to_module(k.body, k.grid, k.block, k.in_shape, k.out_shape,
                                         k.scratch, cluster=k.cluster)
    print(f"TEST: {name}")
    if what != "ptx":
      print(module.operation.get_asm(enable_debug_info=False))
    if what == "ptx":
      print(toolchain.compile_module(module).ptx)
    elif what == "ir+ptx":
      write_ptx(sys.argv[2], name, toolchain.compile_module(module).ptx)


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
# CHECK: %[[BUF:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK:[0-9]+]] :
# CHECK: %[[BAR:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK]] :
# CHECK: %[[ADDR:[0-9]+]] = arith.addi %[[BUF]], %{{[0-9]+}} : i32
# CHECK: "st.shared::cluster.u8 [$0], $1;", "r,r" %[[ADDR]], %{{[0-9]+}} :
# CHECK: "st.shared::cluster.u8 [$0+8], $1;", "r,r" %[[ADDR]], %{{[0-9]+}} :
# CHECK-NOT: st.shared
# CHECK-NOT: st.async
# CHECK: "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %[[BAR]], %{{[0-9]+}} :
# CHECK-NOT: st.async
# PTX-LABEL: TEST: plain_u8
# PTX: mapa.shared::cluster.u32 %r[[BUF:[0-9]+]], %r{{[0-9]+}}, %r[[RANK:[0-9]+]];
# PTX: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r{{[0-9]+}}, %r[[RANK]];
# PTX: add.s32 %r[[ADDR:[0-9]+]], %r[[BUF]], %r{{[0-9]+}};
# PTX: st.shared::cluster.u8 [%r[[ADDR]]], %r{{[0-9]+}};
# PTX: st.shared::cluster.u8 [%r[[ADDR]]+8], %r{{[0-9]+}};
# PTX-NOT: st.shared
# PTX-NOT: st.async
# PTX: mov.b32 %r[[TX:[0-9]+]], 0;
# PTX: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r[[BAR]]], %r[[TX]];
# PTX-NOT: st.async
show("plain_u8", lambda: demo_kernel.kernel_parts(
    StoreConfig(dtype="int8", shape=(64,), layout="WGMMA_ROW", swizzle=None), bare=True,
    store=plain_into_peer(None)))

# A 64x128 int8 tile: 32 two-byte pieces per thread (pairs of adjacent elements).
# CHECK-LABEL: TEST: plain_u16
# CHECK: %[[BUF:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK:[0-9]+]] :
# CHECK: %[[BAR:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK]] :
# CHECK: %[[ADDR:[0-9]+]] = arith.addi %[[BUF]], %{{[0-9]+}} : i32
# CHECK: "st.shared::cluster.u16 [$0], $1;", "r,r" %[[ADDR]], %{{[0-9]+}} :
# CHECK-COUNT-31: "st.shared::cluster.u16 [$0{{(\+[0-9]+)?}}], $1;", "r,r"
# CHECK-NOT: st.shared
# CHECK-NOT: st.async
# CHECK: "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %[[BAR]], %c0_i32{{[_0-9]*}} :
# CHECK-NOT: st.async
# PTX-LABEL: TEST: plain_u16
# PTX: mapa.shared::cluster.u32 %r[[BUF:[0-9]+]], %r{{[0-9]+}}, %r[[RANK:[0-9]+]];
# PTX: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r{{[0-9]+}}, %r[[RANK]];
# PTX: add.s32 %r[[ADDR:[0-9]+]], %r[[BUF]], %r{{[0-9]+}};
# PTX: st.shared::cluster.u16 [%r[[ADDR]]], %r{{[0-9]+}};
# PTX-COUNT-31: st.shared::cluster.u16 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], %r{{[0-9]+}};
# PTX-NOT: st.shared
# PTX-NOT: st.async
# PTX: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r[[BAR]]], %r{{[0-9]+}};
# PTX-NOT: st.async
show("plain_u16", lambda: demo_kernel.kernel_parts(StoreConfig(dtype="int8"), bare=True,
                                               store=plain_into_peer(128)))

# A cluster of one CTA (st.async needs %cluster_nctarank > 1): plain stores through the
# executing CTA's window, no mapa, and the arrive on the own, initialised barrier.
# CHECK-LABEL: TEST: cluster_of_one_bf16
# CHECK: {{nvvm.mbarrier.init|mbarrier.init.shared}}
# CHECK-NOT: mapa
# CHECK: %[[BUF:[0-9]+]] = llvm.ptrtoint %{{[0-9]+}} : !llvm.ptr<3> to i32
# CHECK-NEXT: llvm.getelementptr
# CHECK-NEXT: %[[BAR:[0-9]+]] = llvm.ptrtoint %{{[0-9]+}} : !llvm.ptr<3> to i32
# CHECK-NOT: mapa
# CHECK: %[[ADDR:[0-9]+]] = arith.addi %[[BUF]], %{{[0-9]+}} : i32
# CHECK-NOT: mapa
# CHECK: "st.shared::cta.b32 [$0], $1;", "r,r" %[[ADDR]], %{{[0-9]+}} :
# CHECK-COUNT-31: "st.shared::cta.b32 [$0{{(\+[0-9]+)?}}], $1;", "r,r"
# CHECK-NOT: st.shared
# CHECK: "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %[[BAR]], %c0_i32{{[_0-9]*}} :
# CHECK-NOT: mapa
# CHECK-NOT: st.async
# PTX-LABEL: TEST: cluster_of_one_bf16
# PTX: cvt.u32.u64 %r[[SMEM:[0-9]+]], %rd{{[0-9]+}};
# PTX: add.s32 %r[[BAR:[0-9]+]], %r[[SMEM]], 16384;
# PTX: mbarrier.init.shared{{(::cta)?}}.b64 [%r[[BAR]]], %r{{[0-9]+}};
# PTX-NOT: mapa
# PTX: add.s32 %r[[ADDR:[0-9]+]], %r{{[0-9]+}}, %r[[SMEM]];
# PTX: st.shared::cta.b32 [%r[[ADDR]]], %r{{[0-9]+}};
# PTX-COUNT-31: st.shared::cta.b32 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], %r{{[0-9]+}};
# PTX-NOT: st.shared
# PTX: mov.b32 %r[[TX:[0-9]+]], 0;
# PTX: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r[[BAR]]], %r[[TX]];
# PTX-NOT: mapa
# PTX-NOT: st.async
show("cluster_of_one_bf16", lambda: demo_kernel.kernel_parts(
    StoreConfig(target="local", cluster=1), bare=True))

# CHECK-LABEL: TEST: cluster_of_one_i8
# CHECK-NOT: mapa
# CHECK-COUNT-32: "st.shared::cta.u16 [$0{{(\+[0-9]+)?}}], $1;", "r,r"
# CHECK-NOT: st.shared
# CHECK: "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [$0], $1;"
# CHECK-NOT: st.async
# PTX-LABEL: TEST: cluster_of_one_i8
# PTX-NOT: mapa
# PTX-COUNT-32: st.shared::cta.u16 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], %r{{[0-9]+}};
# PTX-NOT: st.shared
# PTX: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64
# PTX-NOT: st.async
show("cluster_of_one_i8", lambda: demo_kernel.kernel_parts(
    StoreConfig(target="local", cluster=1, dtype="int8"), bare=True))

# CHECK-LABEL: TEST: cluster_of_one_row_i8
# CHECK-NOT: mapa
# CHECK: "st.shared::cta.u8 [$0], $1;", "r,r" %[[ADDR:[0-9]+]], %{{[0-9]+}} :
# CHECK: "st.shared::cta.u8 [$0+8], $1;", "r,r" %[[ADDR]], %{{[0-9]+}} :
# CHECK-NOT: st.shared
# CHECK: "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [$0], $1;"
# PTX-LABEL: TEST: cluster_of_one_row_i8
# PTX-NOT: mapa
# PTX: st.shared::cta.u8 [%r[[ADDR:[0-9]+]]], %r{{[0-9]+}};
# PTX: st.shared::cta.u8 [%r[[ADDR]]+8], %r{{[0-9]+}};
# PTX-NOT: st.shared
# PTX: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64
show("cluster_of_one_row_i8", lambda: demo_kernel.kernel_parts(
    StoreConfig(target="local", cluster=1, dtype="int8", shape=(64,), layout="WGMMA_ROW",
                swizzle=None), bare=True))

