# RUN: %PYTHON %s ir | FileCheck %s
# RUN: %PYTHON %s ptx | FileCheck %s --check-prefix=PTX
# 4-bit data whose two halves of a destination byte sit in different registers
# of the same thread (TMEM-native layout, vector length 1): each byte is
# assembled in the thread (low element | high element << 4), no lane exchange,
# then stored with the widest st.async.

from mosaic_async_store.testing import emit

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
