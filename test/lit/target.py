# RUN: %PYTHON %s ir+ptx %t.ptx | FileCheck %s
# RUN: FileCheck %s --check-prefix=PTX --input-file %t.ptx
# REQUIRES: filecheck, mlir-opt, ptxas, cuobjdump
# The target: mapa of both the buffer and the barrier to the peer's rank (a
# constant-folded cluster index when the cluster shape is static, no
# cluster-dimension queries), or nothing for the executing CTA; one arrive.expect_tx
# per thread with exactly that thread's bytes.  A target that is the executing CTA
# takes the local form: red.async into the executing CTA is undefined (PTX ISA 9.1,
# red.async), plain red.shared::cta is not.  Every CTA reducing into CTA 0
# (cluster_idx=0) branches at run time on the target's rank against
# %cluster_ctarank; each arm arrives once per thread on the (own or mapped) barrier
# with exactly its own tx bytes: 0 after the local arm's plain reductions (with
# .release.cluster), 256 after red.async.

from kernel_text import emit

# 64x128 bf16: 16 KiB over 128 threads = 128 bytes each (%c128_i32).
# CHECK-LABEL: TEST: peer_bf16
# CHECK-NOT: gpu.cluster_dim_blocks
# CHECK: %[[PEER:[0-9]+]] = arith.remui %{{[0-9]+}}, %{{.+}} : index
# CHECK: %[[RANK:[0-9]+]] = arith.index_cast %[[PEER]] : index to i32
# CHECK: %[[BUF:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK]] :
# CHECK: %[[BAR:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK]] :
# CHECK: %[[ADDR:[0-9]+]] = arith.addi %[[BUF]], %{{[0-9]+}} : i32
# CHECK: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0], $1, [$2];", "r,r,r" %[[ADDR]], %{{[0-9]+}}, %[[BAR]] :
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %[[BAR]], %c128_i32{{[_0-9]*}} :
# CHECK-NOT: mbarrier.arrive
# PTX-LABEL: TEST: peer_bf16
# PTX: mov.b32 [[TX:%r[0-9]+]], 128;
# PTX: mbarrier.init.shared{{(::cta)?}}.b64 {{\[}}[[OWN:%r[0-9]+]]{{\]}}, %r{{[0-9]+}};
# PTX: mapa.shared::cluster.u32 %r{{[0-9]+}}, %r{{[0-9]+}}, [[RANK:%r[0-9]+]];
# PTX: mapa.shared::cluster.u32 [[BAR:%r[0-9]+]], [[OWN]], [[RANK]];
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r{{[0-9]+}}], %r{{[0-9]+}}, {{\[}}[[BAR]]{{\]}};
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, {{\[}}[[BAR]]{{\]}}, [[TX]];
# PTX-NOT: mbarrier.arrive
emit("peer_bf16")

# CHECK-LABEL: TEST: local_bf16
# CHECK-NOT: mapa
# CHECK: st.async.shared::cluster
# CHECK: "mbarrier.arrive.expect_tx.shared::cluster.b64 _, [$0], $1;", "r,r"
# PTX-LABEL: TEST: local_bf16
# PTX: mbarrier.init.shared{{(::cta)?}}.b64 {{\[}}[[OWN:%r[0-9]+]]{{\]}}, %r{{[0-9]+}};
# PTX-NOT: mapa
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r{{[0-9]+}}], %r{{[0-9]+}}, {{\[}}[[OWN]]{{\]}};
# PTX-NOT: mapa
# PTX: mbarrier.arrive.expect_tx.shared::cluster.b64 _, {{\[}}[[OWN]]{{\]}}, %r{{[0-9]+}};
emit("local_bf16", target="local")


# CHECK-LABEL: TEST: cta0_i32_add
# CHECK-NOT: mapa
# CHECK: %[[BUF:[0-9]+]] = llvm.ptrtoint %{{[0-9]+}} : !llvm.ptr<3> to i32
# CHECK-NEXT: llvm.getelementptr
# CHECK-NEXT: %[[BAR:[0-9]+]] = llvm.ptrtoint %{{[0-9]+}} : !llvm.ptr<3> to i32
# CHECK-NEXT: %[[RANK:[a-z0-9_]+]] = arith.constant 0 : i32
# CHECK-NEXT: %[[OWN:[0-9]+]] = llvm.inline_asm "mov.u32 $0, %cluster_ctarank;", "=r"  : () -> i32
# CHECK-NEXT: %[[SELF:[0-9]+]] = arith.cmpi eq, %[[RANK]], %[[OWN]] : i32
# CHECK-NEXT: scf.if %[[SELF]] {
# CHECK-NOT: mapa
# CHECK-NOT: red.async
# CHECK: arith.addi %[[BUF]], %{{[0-9]+}} : i32
# CHECK-NOT: mapa
# CHECK-COUNT-64: "red.relaxed.cluster.shared::cta.add.s32 [$0{{(\+[0-9]+)?}}], $1;", "r,r"
# CHECK-NOT: red.async
# CHECK: %[[ZERO:[a-z0-9_]+]] = arith.constant 0 : i32
# CHECK: "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %[[BAR]], %[[ZERO]] :
# CHECK-NEXT: } else {
# CHECK-NEXT: %[[PBUF:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %[[BUF]], %[[RANK]] :
# CHECK-NEXT: %[[PBAR:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %[[BAR]], %[[RANK]] :
# CHECK: arith.addi %[[PBUF]], %{{[0-9]+}} : i32
# CHECK-NOT: red.relaxed
# CHECK-COUNT-64: "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.s32 [$0{{(\+[0-9]+)?}}], $1, [$2];", "r,r,r" %{{[0-9]+}}, %{{[0-9]+}}, %[[PBAR]] :
# CHECK-NOT: red.relaxed
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %[[PBAR]], %c256_i32{{[_0-9]*}} :
# CHECK-NEXT: }
# CHECK-NOT: mbarrier.arrive
# PTX-LABEL: TEST: cta0_i32_add
# PTX: mov.u32 [[OWN:%r[0-9]+]], %cluster_ctarank;
# PTX: setp.ne.b32 [[P:%p[0-9]+]], [[OWN]], 0;
# PTX-NEXT: @[[P]] bra [[PEER:\$L__BB[0-9_]+]];
# PTX-NEXT: bra.uni [[LOCAL:\$L__BB[0-9_]+]];
# PTX-NEXT: [[PEER]]:
# PTX: mapa.shared::cluster.u32 %r{{[0-9]+}}, %r{{[0-9]+}}, [[RANK:%r[0-9]+]];
# PTX: mapa.shared::cluster.u32 [[PBAR:%r[0-9]+]], [[BAR:%r[0-9]+]], [[RANK]];
# PTX-NOT: red.relaxed
# PTX: red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.s32 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], %r{{[0-9]+}}, {{\[}}[[PBAR]]{{\]}};
# PTX-NOT: red.relaxed
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, {{\[}}[[PBAR]]{{\]}}, %r{{[0-9]+}};
# PTX: [[LOCAL]]:
# PTX-NOT: red.async
# PTX: red.relaxed.cluster.shared::cta.add.s32 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], %r{{[0-9]+}};
# PTX-NOT: red.async
# PTX: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, {{\[}}[[BAR]]{{\]}}, %r{{[0-9]+}};
emit("cta0_i32_add", dtype="int32", atomic="add", target="cta0", cluster=2)

# A cluster of one CTA: the target (CTA 0) is statically the executing CTA, so
# the local form without a branch (once refused as "st.async into a cluster of
# one CTA is undefined"; plain red.shared::cta is defined there).
# CHECK-LABEL: TEST: cta0_cluster_of_one
# CHECK-NOT: cluster_ctarank
# CHECK-NOT: mapa
# CHECK-NOT: red.async
# CHECK-COUNT-64: "red.relaxed.cluster.shared::cta.max.s32 [$0{{(\+[0-9]+)?}}], $1;", "r,r"
# CHECK: "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [$0], $1;"
# CHECK-NOT: cluster_ctarank
# PTX-LABEL: TEST: cta0_cluster_of_one
# PTX-NOT: %cluster_ctarank
# PTX-NOT: mapa
# PTX-NOT: red.async
# PTX: red.relaxed.cluster.shared::cta.max.s32
# PTX-NOT: red.async
# PTX: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64
emit("cta0_cluster_of_one", dtype="int32", atomic="max", target="cta0", cluster=1)

# (cluster_block_id + 1) % n is never the executing CTA: red.async, no branch.
# CHECK-LABEL: TEST: peer_i32_add
# CHECK-NOT: cluster_ctarank
# CHECK-COUNT-64: red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.s32
# CHECK-NOT: cluster_ctarank
# CHECK-NOT: red.relaxed
emit("peer_i32_add", dtype="int32", atomic="add", cluster=4)
