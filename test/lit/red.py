# RUN: %PYTHON %s ir+ptx %t.ptx | FileCheck %s
# RUN: FileCheck %s --check-prefix=PTX --input-file %t.ptx
# REQUIRES: filecheck, mlir-opt, ptxas, cuobjdump
# Reductions: red.async where PTX has it (peer CTA, 32-bit ints, 64-bit add,
# 64-bit and/or/xor as two 32-bit halves), otherwise plain red.shared::cluster
# ordered by a release arrive; into the executing CTA plain red.shared::cta (the
# 64-bit and/or/xor halves too), and where the target is the executing CTA only in
# some CTAs, both behind a %cluster_ctarank branch.

from kernel_text import emit

# CHECK-LABEL: TEST: i32_min_signed
# CHECK-COUNT-64: "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.min.s32 [$0{{(\+[0-9]+)?}}], $1, [$2];", "r,r,r"
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;"
# PTX-LABEL: TEST: i32_min_signed
# PTX: red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.min.s32 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], %r{{[0-9]+}}, [%r{{[0-9]+}}];
emit("i32_min_signed", dtype="int32", atomic="min")

# CHECK-LABEL: TEST: u32_max_unsigned
# CHECK: red.async{{.*}}.max.u32 [$0
# CHECK-NOT: max.s32
emit("u32_max_unsigned", dtype="uint32", atomic="max")

# CHECK-LABEL: TEST: u32_inc
# CHECK: red.async{{.*}}bytes.inc.u32 [$0
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r"
emit("u32_inc", dtype="uint32", atomic="inc")

# CHECK-LABEL: TEST: i32_xor_bits
# CHECK: red.async{{.*}}bytes.xor.b32 [$0
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r"
emit("i32_xor_bits", dtype="int32", atomic="xor")

# CHECK-LABEL: TEST: i64_add
# CHECK: red.async{{.*}}bytes.add.u64 [$0{{(\+[0-9]+)?}}], $1, [$2];", "r,l,r"
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r"
emit("i64_add", dtype="int64", atomic="add", layout="STRIDED", swizzle=None, shape=(32, 64))

# CHECK-LABEL: TEST: bf16_add_pairs
# CHECK-COUNT-32: "red.relaxed.cluster.shared::cluster.add.noftz.bf16x2 [$0{{(\+[0-9]+)?}}], $1;", "r,r"
# CHECK: "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [$0], $1;"
# PTX-LABEL: TEST: bf16_add_pairs
# PTX: red.relaxed.cluster.shared::cluster.add.noftz.bf16x2
# PTX: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r{{[0-9]+}}], %r{{[0-9]+}};
emit("bf16_add_pairs", dtype="bfloat16", atomic="add")

# CHECK-LABEL: TEST: f32_add
# CHECK: "red.relaxed.cluster.shared::cluster.add.f32 [$0{{(\+[0-9]+)?}}], $1;", "r,r"
# CHECK: "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [$0], $1;", "r,r"
emit("f32_add", dtype="float32", atomic="add")

# Into the executing CTA red.async is not allowed: plain red, no mapa, in the
# CTA window (.shared::cta), which ptxas turns into native ATOMS instead of a
# generic ATOM with a state-space check.
# CHECK-LABEL: TEST: local_i32_add
# CHECK-NOT: mapa
# CHECK-NOT: red.async
# CHECK-NOT: shared::cluster.add
# CHECK: "red.relaxed.cluster.shared::cta.add.s32 [$0{{(\+[0-9]+)?}}], $1;", "r,r"
# PTX-LABEL: TEST: local_i32_add
# PTX-NOT: red.relaxed.cluster.shared::cluster
# PTX: red.relaxed.cluster.shared::cta.add.s32
emit("local_i32_add", dtype="int32", atomic="add", target="local")

# CHECK-LABEL: TEST: local_f32_add
# CHECK-NOT: shared::cluster.add
# CHECK: "red.relaxed.cluster.shared::cta.add.f32 [$0{{(\+[0-9]+)?}}], $1;", "r,r"
# PTX-LABEL: TEST: local_f32_add
# PTX-NOT: red.relaxed.cluster.shared::cluster
# PTX: red.relaxed.cluster.shared::cta.add.f32
emit("local_f32_add", dtype="float32", atomic="add", target="local")

# 64-bit and/or/xor as two 32-bit halves of each element (a bitwise reduction acts on
# each bit alone): red.async .b32 into a peer, red.shared::cta .b32 into the
# executing CTA.  Every CTA reducing into CTA 0 branches on %cluster_ctarank, and
# both arms split alike (atomics are atomic with respect to each other only where
# they overlap completely).  Unoptimized, the stores go in register order, so an
# element's halves are neighbours: [addr] and [addr+4].  The IR has the local arm
# (scf.if's then block) first, the PTX the peer arm.
# CHECK-LABEL: TEST: cta0_i64_xor_halves
# CHECK-NOT: xor.b64
# CHECK: "mov.u32 $0, %cluster_ctarank;"
# CHECK: "red.relaxed.cluster.shared::cta.xor.b32 [$0], $1;", "r,r"
# CHECK: "red.relaxed.cluster.shared::cta.xor.b32 [$0+4], $1;", "r,r"
# CHECK: "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [$0], $1;"
# CHECK: "mapa.shared::cluster.u32
# CHECK: "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.xor.b32 [$0], $1, [$2];", "r,r,r"
# CHECK: "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.xor.b32 [$0+4], $1, [$2];", "r,r,r"
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;"
# CHECK-NOT: xor.b64
# PTX-LABEL: TEST: cta0_i64_xor_halves
# PTX-NOT: xor.b64
# PTX: mov.u32 %r{{[0-9]+}}, %cluster_ctarank;
# PTX-COUNT-32: red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.xor.b32
# PTX-NOT: red.async
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64
# PTX-COUNT-32: red.relaxed.cluster.shared::cta.xor.b32
# PTX-NOT: red.relaxed
# PTX: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64
# PTX-NOT: xor.b64
emit("cta0_i64_xor_halves", dtype="int64", atomic="xor", target="cta0", layout="STRIDED",
     swizzle=None, shape=(32, 64), optimized=False)

# The halves into a peer: an element's two .b32 halves at [addr] and [addr+4], both
# completing on the peer's barrier.
# CHECK-LABEL: TEST: peer_i64_and_halves
# CHECK: "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.and.b32 [$0], $1, [$2];", "r,r,r"
# CHECK: "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.and.b32 [$0+4], $1, [$2];", "r,r,r"
# CHECK-NOT: and.b64
# PTX-LABEL: TEST: peer_i64_and_halves
# PTX: red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.and.b32 {{\[}}[[ADDR:%r[0-9]+]]{{\]}}, %r{{[0-9]+}}, {{\[}}[[BAR:%r[0-9]+]]{{\]}};
# PTX: red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.and.b32 {{\[}}[[ADDR]]+4{{\]}}, %r{{[0-9]+}}, {{\[}}[[BAR]]{{\]}};
# PTX-NOT: and.b64
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, {{\[}}[[BAR]]{{\]}}
emit("peer_i64_and_halves", dtype="int64", atomic="and", layout="STRIDED", swizzle=None,
     shape=(32, 64), optimized=False)
