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
