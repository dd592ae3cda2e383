# RUN: %PYTHON %s | FileCheck %s
# Pallas MGPU kernels, both lowering semantics, compiled on the CPU to PTX.

from mosaic_async_store import toolchain
from mosaic_async_store.testing import pallas_module


def show(name, **kwargs):
  print(f"TEST: {name}")
  print(toolchain.compile_module(pallas_module(**kwargs)).ptx)


# The peer's buffer and barrier are the own SMEM and the own initialised barrier,
# both mapped to the same rank; the stores are based on the mapped buffer and complete
# on the mapped barrier, which the arrive announces on.
# CHECK-LABEL: TEST: lane_i8
# CHECK: cvt.u32.u64 %r[[SMEM:[0-9]+]], %rd{{[0-9]+}};
# CHECK: add.s32 %r[[OWN:[0-9]+]], %r[[SMEM]], {{[0-9]+}};
# CHECK: mbarrier.init.shared{{(::cta)?}}.b64 [%r[[OWN]]], %r{{[0-9]+}};
# CHECK: shfl.sync.bfly.b32
# CHECK: mapa.shared::cluster.u32 %r[[BUF:[0-9]+]], %r[[SMEM]], %r[[RANK:[0-9]+]];
# CHECK: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r[[OWN]], %r[[RANK]];
# CHECK: add.s32 %r[[ADDR:[0-9]+]], %r[[BUF]], %r{{[0-9]+}};
# CHECK: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r[[ADDR]]], %r{{[0-9]+}}, [%r[[BAR]]];
# CHECK: mbarrier.arrive.expect_tx.shared::cluster.b64 _, [%r[[BAR]]], %r{{[0-9]+}};
show("lane_i8", dtype="int8", semantics="lane")

# Warpgroup semantics: every thread arrives once with its own 128 bytes (Pallas
# initialises the barrier with 128 arrivals per num_arrivals under both semantics).
# CHECK-LABEL: TEST: warpgroup_bf16
# CHECK: cvt.u32.u64 %r[[SMEM:[0-9]+]], %rd{{[0-9]+}};
# CHECK: add.s32 %r[[OWN:[0-9]+]], %r[[SMEM]], {{[0-9]+}};
# CHECK: mov.b32 %r[[TX:[0-9]+]], 128;
# CHECK: mbarrier.init.shared{{(::cta)?}}.b64 [%r[[OWN]]], %r{{[0-9]+}};
# CHECK: mapa.shared::cluster.u32 %r[[BUF:[0-9]+]], %r[[SMEM]], %r[[RANK:[0-9]+]];
# CHECK: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r[[OWN]], %r[[RANK]];
# CHECK: add.s32 %r[[ADDR:[0-9]+]], %r[[BUF]], %r{{[0-9]+}};
# CHECK: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r[[ADDR]]], {{%r[0-9]+}}, [%r[[BAR]]];
# CHECK-NOT: elect.sync
# CHECK: mbarrier.arrive.expect_tx.shared::cluster.b64 _, [%r[[BAR]]], %r[[TX]];
# CHECK-NOT: 16384
show("warpgroup_bf16", dtype="bfloat16", semantics="warpgroup")

# Signed int32 min under Warpgroup semantics uses min.s32 (upstream: min.u32).
# CHECK-LABEL: TEST: warpgroup_i32_min
# CHECK: mapa.shared::cluster.u32 %r[[BUF:[0-9]+]], %r{{[0-9]+}}, %r[[RANK:[0-9]+]];
# CHECK: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r{{[0-9]+}}, %r[[RANK]];
# CHECK: add.s32 %r[[ADDR:[0-9]+]], %r[[BUF]], %r{{[0-9]+}};
# CHECK: red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.min.s32 [%r[[ADDR]]], %r{{[0-9]+}}, [%r[[BAR]]];
# CHECK-NOT: min.u32
# CHECK: mbarrier.arrive.expect_tx.shared::cluster.b64 _, [%r[[BAR]]], %r{{[0-9]+}};
# CHECK-NOT: min.u32
show("warpgroup_i32_min", dtype="int32", atomic="min", semantics="warpgroup")
