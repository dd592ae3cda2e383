# RUN: %PYTHON %s ir+ptx %t.ptx | FileCheck %s
# RUN: FileCheck %s --check-prefix=PTX --input-file %t.ptx
# REQUIRES: filecheck, mlir-opt, ptxas, cuobjdump
# Lane exchanges that pack sub-word registers into b32 words: 8/4/16-bit halves
# exchanged with shfl.sync.bfly (subword), 4-bit halves of a byte from lanes t and
# t^4 (nibble exchange), and bytes assembled in the thread or gathered from lane
# t^1 (nibble gather).

from kernel_text import emit

# --- Subword exchanges: registers narrower than a word (8-bit and 4-bit data in
# the WGMMA layout, 16-bit data stored column-major) are packed into b32 words by
# exchanging halves between lanes with shfl.sync.bfly; several exchanges share a
# shuffle.

# CHECK-LABEL: TEST: wgmma_i8
# CHECK-COUNT-8: "shfl.sync.bfly.b32 $0, $1, 1, 31, -1;", "=r,r"
# CHECK-COUNT-16: "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0{{(\+[0-9]+)?}}], $1, [$2];"
# CHECK-NOT: st.shared::cluster
# PTX-LABEL: TEST: wgmma_i8
# PTX: shfl.sync.bfly.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, 1, 31, -1;
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
emit("wgmma_i8", dtype="int8")

# CHECK-LABEL: TEST: wgmma_i4
# CHECK: "shfl.sync.bfly.b32 $0, $1, 1, 31, -1;"
# CHECK: "shfl.sync.bfly.b32 $0, $1, 2, 31, -1;"
# CHECK-COUNT-16: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# CHECK-NOT: st.shared::cluster
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r"
emit("wgmma_i4", dtype="int4", shape=(64, 256))

# CHECK-LABEL: TEST: bf16_column_major
# CHECK: "shfl.sync.bfly.b32 $0, $1, 4, 31, -1;"
# CHECK-COUNT-32: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r"
emit("bf16_column_major", transposed=True)


# --- Nibble exchange: 4-bit data whose two halves of a destination byte sit in
# lanes t and t^4 (the transposed WGMMA layout: a thread holds rows r and r+1 of a
# column, its partner the next column).  Each lane sends the halves of the bytes
# its partner assembles, eight per 32-bit shfl.sync.bfly, choosing them by its
# lane bit, and unpacks the halves it receives.

# CHECK-LABEL: TEST: wgmma_transposed_i4
# CHECK: %[[BIT:[0-9]+]] = arith.cmpi ne, %{{[0-9]+}}, %{{.+}} : i32
# CHECK: %[[SEND:[0-9]+]] = arith.select %[[BIT]], %{{[0-9]+}}, %{{[0-9]+}} : i32
# CHECK: arith.shli %{{[0-9]+}}, %{{.+}} : i32
# CHECK: %[[GOT:[0-9]+]] = llvm.inline_asm has_side_effects "shfl.sync.bfly.b32 $0, $1, 4, 31, -1;", "=r,r" %{{[0-9]+}}
# CHECK: arith.andi %[[GOT]], %{{.+}} : i32
# 32 halves per thread, 16 sent: two nibble shuffles, then the bytes of a row
# (four lanes) are paired into words by the byte exchanges (masks 1 and 2).
# CHECK: "shfl.sync.bfly.b32 $0, $1, 4, 31, -1;"
# CHECK-NOT: "shfl.sync.bfly.b32 $0, $1, 4, 31, -1;"
# CHECK: "shfl.sync.bfly.b32 $0, $1, 1, 31, -1;"
# CHECK: "shfl.sync.bfly.b32 $0, $1, 2, 31, -1;"
# CHECK-COUNT-4: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# CHECK-NOT: st.shared::cluster
# CHECK: mbarrier.arrive.expect_tx
# PTX-LABEL: TEST: wgmma_transposed_i4
# PTX: shfl.sync.bfly.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, 4, 31, -1;
# PTX-COUNT-4: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# PTX-NOT: st.shared::cluster
emit("wgmma_transposed_i4", dtype="int4", layout="WGMMA_TRANSPOSED", shape=(64, 64), swizzle=32)

# A column-major destination of the (non-transposed) WGMMA layout: rows r and
# r+1, now neighbours in a byte, are again four lanes apart.
# CHECK-LABEL: TEST: wgmma_u4_column_major
# CHECK: "shfl.sync.bfly.b32 $0, $1, 4, 31, -1;"
# CHECK: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r"
# PTX-LABEL: TEST: wgmma_u4_column_major
# PTX: shfl.sync.bfly.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, 4, 31, -1;
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
emit("wgmma_u4_column_major", dtype="uint4", shape=(64, 64), transposed=True, swizzle=32,
     optimized=False)


# --- Nibble gather: 4-bit data whose two halves of a destination byte sit in
# different registers of the same thread (TMEM-native layout, vector length 1):
# each byte is assembled in the thread (low element | high element << 4), no lane
# exchange, then stored with the widest st.async.

# CHECK-LABEL: TEST: tmem_v1_i4
# CHECK-NOT: shfl.sync.bfly
# CHECK: %[[LO:[0-9]+]] = arith.extui %{{[0-9]+}} : i4 to i8
# CHECK-NEXT: vector.extract
# CHECK-NEXT: %[[HI:[0-9]+]] = arith.extui %{{[0-9]+}} : i4 to i8
# CHECK-NEXT: %[[FOUR:.+]] = arith.constant 4 : i8
# CHECK-NEXT: %[[SH:[0-9]+]] = arith.shli %[[HI]], %[[FOUR]] : i8
# CHECK-NEXT: arith.ori %[[LO]], %[[SH]] : i8
# CHECK-COUNT-2: "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [$0{{(\+[0-9]+)?}}], {$1, $2, $3, $4}, [$5];"
# CHECK-NOT: st.shared::cluster
# CHECK: mbarrier.arrive.expect_tx
# PTX-LABEL: TEST: tmem_v1_i4
# PTX-NOT: shfl.sync.bfly
# PTX-COUNT-2: st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32
# PTX-NOT: st.shared::cluster
emit("tmem_v1_i4", dtype="int4", layout="TMEM_NATIVE_V1", shape=(128, 64), swizzle=32)

# CHECK-LABEL: TEST: tmem_v1_f4_swizzle128
# CHECK-COUNT-8: st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32
# CHECK-NOT: st.shared::cluster
# PTX-LABEL: TEST: tmem_v1_f4_swizzle128
# PTX-COUNT-8: st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32
emit("tmem_v1_f4_swizzle128", dtype="float4_e2m1fn", layout="TMEM_NATIVE_V1",
     shape=(128, 256), swizzle=128)

# A one-column 4-bit array: each byte's halves sit in lanes t and t ^ 1, which
# share only that byte.  The even lane receives its partner's element first
# (shfl.sync.bfly 1, before the byte is built), assembles the byte alone, and
# two more gathers make a word: 16 writers of one b32 st.async, no plain store.
# CHECK-LABEL: TEST: one_column_i4
# CHECK: arith.extui %{{[0-9]+}} : i4 to i8
# CHECK: "shfl.sync.bfly.b32 $0, $1, 1, 31, -1;"
# CHECK: %[[HI:[0-9]+]] = arith.trunci %{{[0-9]+}} : i32 to i8
# CHECK: %[[SH:[0-9]+]] = arith.shli %[[HI]], %{{.+}} : i8
# CHECK: arith.ori %{{[0-9]+}}, %[[SH]] : i8
# CHECK: "shfl.sync.bfly.b32 $0, $1, 2, 31, -1;"
# CHECK: "shfl.sync.bfly.b32 $0, $1, 4, 31, -1;"
# CHECK: scf.if
# CHECK-NOT: shfl.sync
# CHECK: "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0], $1, [$2];"
# CHECK-NOT: st.shared::cluster
# CHECK: mbarrier.arrive.expect_tx
# PTX-LABEL: TEST: one_column_i4
# PTX: shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
# PTX-COUNT-1: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# PTX-NOT: st.async
# PTX-NOT: st.shared::cluster
# PTX: mbarrier.arrive.expect_tx
emit("one_column_i4", dtype="int4", layout="TMEM_NATIVE_V1", shape=(128, 1), swizzle=None)
