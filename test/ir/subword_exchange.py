# RUN: %PYTHON %s ir | FileCheck %s
# RUN: %PYTHON %s ptx | FileCheck %s --check-prefix=PTX
# Registers narrower than a word (8-bit and 4-bit data in the WGMMA layout,
# 16-bit data stored column-major) are packed into b32 words by exchanging
# halves between lanes with shfl.sync.bfly; several exchanges share a shuffle.

from mosaic_async_store.testing import emit

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
emit("wgmma_i4", dtype="int4", shape=(64, 256))

# CHECK-LABEL: TEST: bf16_column_major
# CHECK: "shfl.sync.bfly.b32 $0, $1, 4, 31, -1;"
# CHECK-COUNT-32: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
emit("bf16_column_major", transposed=True)
