# RUN: %PYTHON %s ir+ptx %t.ptx | FileCheck %s
# RUN: FileCheck %s --check-prefix=PTX --input-file %t.ptx
# REQUIRES: filecheck, mlir-opt, ptxas, cuobjdump
# st.async: the width follows what each thread holds contiguously: 4 bytes (bf16
# pairs in WGMMA), 8 bytes (f32 pairs), 16 bytes (TMEM-native f32 x4).  Addresses
# are 32-bit ("r"), and stores that share a base use an immediate.  Replicated
# layouts: only one replica of each element writes, the others arrive with 0 bytes.

from kernel_text import emit

# CHECK-LABEL: TEST: wgmma_bf16_b32
# CHECK: "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r"
# CHECK: "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r"
# CHECK-COUNT-32: "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0{{(\+[0-9]+)?}}], $1, [$2];", "r,r,r"
# CHECK-NOT: st.async
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r"
# PTX-LABEL: TEST: wgmma_bf16_b32
# PTX: mapa.shared::cluster.u32 %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}};
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r{{[0-9]+}}], %r{{[0-9]+}}, [%r{{[0-9]+}}];
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r{{[0-9]+}}+{{[0-9]+}}], %r{{[0-9]+}}, [%r{{[0-9]+}}];
emit("wgmma_bf16_b32")

# CHECK-LABEL: TEST: wgmma_f32_v2
# CHECK-COUNT-32: "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [$0{{(\+[0-9]+)?}}], {$1, $2}, [$3];", "r,r,r,r"
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r"
# PTX-LABEL: TEST: wgmma_f32_v2
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], {%r{{[0-9]+}}, %r{{[0-9]+}}}, [%r{{[0-9]+}}];
emit("wgmma_f32_v2", dtype="float32", optimized=False)

# CHECK-LABEL: TEST: tmem_native_f32_v4
# CHECK-COUNT-32: "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [$0{{(\+[0-9]+)?}}], {$1, $2, $3, $4}, [$5];", "r,r,r,r,r,r"
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r"
# PTX-LABEL: TEST: tmem_native_f32_v4
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, [%r{{[0-9]+}}];
emit("tmem_native_f32_v4", dtype="float32", layout="TMEM_NATIVE_V4", shape=(128, 128))


# A replicated layout: only one replica of each element writes, the others
# arrive with 0 bytes, so the barrier still sees one arrival per thread and
# the total is 128 bytes of bf16 from 32 writer threads (4 bytes each).
# CHECK-LABEL: TEST: replicated_row_bf16
# CHECK: scf.if %[[W:[0-9]+]] {
# CHECK: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# CHECK: %[[TX:[0-9]+]] = arith.select %[[W]], %c4_i32{{[_0-9]*}}, %c0_i32{{[_0-9]*}} : i32
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %{{[0-9]+}}, %[[TX]]
# PTX-LABEL: TEST: replicated_row_bf16
# PTX: mapa.shared::cluster.u32
# PTX: mapa.shared::cluster.u32 [[BAR:%r[0-9]+]],
# PTX: mov.b32 [[TX:%r[0-9]+]], 0;
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r{{[0-9]+}}], %r{{[0-9]+}}, {{\[}}[[BAR]]{{\]}};
# PTX: mov.b32 [[TX]], 4;
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, {{\[}}[[BAR]]{{\]}}, [[TX]];
emit("replicated_row_bf16", layout="WGMMA_ROW", shape=(64,), swizzle=None)

# 8-bit replicated rows: a writer holds too few bytes for a word and its
# exchange partner would be a replica, so writers first gather the registers of
# lane t^8 (a distinct row segment), then exchange bytes with lane t^4; 16
# writers store one word each and the rest announce 0 bytes (64 bytes in all,
# not a multiple of 128).  No plain store, so no release arrive.
# CHECK-LABEL: TEST: replicated_row_i8
# CHECK-COUNT-2: "shfl.sync.bfly.b32 $0, $1, 8, 31, -1;"
# CHECK: "shfl.sync.bfly.b32 $0, $1, 4, 31, -1;"
# CHECK: scf.if %[[W:[0-9]+]] {
# CHECK: "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0], $1, [$2];"
# CHECK-NOT: st.shared::cluster
# CHECK: arith.select %[[W]], %c4_i32{{[_0-9]*}}, %c0_i32{{[_0-9]*}} : i32
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;"
# PTX-LABEL: TEST: replicated_row_i8
# PTX-COUNT-2: shfl.sync.bfly.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, 8, 31, -1;
# PTX: shfl.sync.bfly.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, 4, 31, -1;
# PTX: mapa.shared::cluster.u32
# PTX: mapa.shared::cluster.u32 [[BAR:%r[0-9]+]],
# PTX: mov.b32 [[TX:%r[0-9]+]], 0;
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r{{[0-9]+}}], %r{{[0-9]+}}, {{\[}}[[BAR]]{{\]}};
# PTX-NOT: st.shared::cluster
# PTX: mov.b32 [[TX]], 4;
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, {{\[}}[[BAR]]{{\]}}, [[TX]];
emit("replicated_row_i8", dtype="int8", layout="WGMMA_ROW", shape=(64,), swizzle=None)
