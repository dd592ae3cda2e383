# RUN: %PYTHON %s ir | FileCheck %s
# RUN: %PYTHON %s ptx | FileCheck %s --check-prefix=PTX
# 4-bit data whose two halves of a destination byte sit in lanes t and t^4
# (the transposed WGMMA layout: a thread holds rows r and r+1 of a column, its
# partner the next column).  Each lane sends the halves of the bytes its
# partner assembles, eight per 32-bit shfl.sync.bfly, choosing them by its
# lane bit, and unpacks the halves it receives.

from mosaic_async_store.testing import emit

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
# PTX-LABEL: TEST: wgmma_u4_column_major
# PTX: shfl.sync.bfly.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, 4, 31, -1;
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
emit("wgmma_u4_column_major", dtype="uint4", shape=(64, 64), transposed=True, swizzle=32,
     optimized=False)
