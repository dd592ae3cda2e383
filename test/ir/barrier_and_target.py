# RUN: %PYTHON %s ir | FileCheck %s
# The target: mapa of both the buffer and the barrier to the peer's rank (a
# constant-folded cluster index when the cluster shape is static, no
# cluster-dimension queries), or nothing for the executing CTA.  The barrier:
# one arrive.expect_tx per thread with exactly that thread's bytes.

from mosaic_async_store.testing import emit

# 64x128 bf16: 16 KiB over 128 threads = 128 bytes each (%c128_i32).
# CHECK-LABEL: TEST: peer_bf16
# CHECK-NOT: gpu.cluster_dim_blocks
# CHECK: %[[PEER:[0-9]+]] = arith.remui %{{[0-9]+}}, %{{.+}} : index
# CHECK: %[[RANK:[0-9]+]] = arith.index_cast %[[PEER]] : index to i32
# CHECK: %[[BUF:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK]] :
# CHECK: %[[BAR:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK]] :
# CHECK: %[[ADDR:[0-9]+]] = arith.addi %[[BUF]], %{{[0-9]+}} : i32
# CHECK: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0], $1, [$2];", "r,r,r" %[[ADDR]], %{{[0-9]+}}, %[[BAR]] :
# CHECK: "mbarrier.arrive.expect_tx.shared::cluster.b64 _, [$0], $1;", "r,r" %[[BAR]], %c128_i32{{[_0-9]*}} :
# CHECK-NOT: mbarrier.arrive
emit("peer_bf16")

# CHECK-LABEL: TEST: local_bf16
# CHECK-NOT: mapa
# CHECK: st.async.shared::cluster
emit("local_bf16", target="local")

# A replicated layout: only one replica of each element writes, the others
# arrive with 0 bytes, so the barrier still sees one arrival per thread and
# the total is 128 bytes of bf16 from 32 writer threads (4 bytes each).
# CHECK-LABEL: TEST: replicated_row_bf16
# CHECK: scf.if %[[W:[0-9]+]] {
# CHECK: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# CHECK: %[[TX:[0-9]+]] = arith.select %[[W]], %c4_i32{{[_0-9]*}}, %c0_i32{{[_0-9]*}} : i32
# CHECK: "mbarrier.arrive.expect_tx.shared::cluster.b64 _, [$0], $1;", "r,r" %{{[0-9]+}}, %[[TX]]
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
# CHECK: "mbarrier.arrive.expect_tx.shared::cluster.b64 _, [$0], $1;"
emit("replicated_row_i8", dtype="int8", layout="WGMMA_ROW", shape=(64,), swizzle=None)
