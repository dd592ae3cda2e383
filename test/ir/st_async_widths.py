# RUN: %PYTHON %s | FileCheck %s
# The st.async width follows what each thread holds contiguously: 4 bytes
# (bf16 pairs in WGMMA), 8 bytes (f32 pairs), 16 bytes (TMEM-native f32 x4).

from mosaic_async_store.testing import print_ir

# CHECK-LABEL: TEST: wgmma_bf16_b32
# CHECK: "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r"
# CHECK: "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r"
# CHECK-COUNT-32: "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0{{(\+[0-9]+)?}}], $1, [$2];", "r,r,r"
# CHECK-NOT: st.async
# CHECK: "mbarrier.arrive.expect_tx.shared::cluster.b64 _, [$0], $1;", "r,r"
print_ir("wgmma_bf16_b32")

# CHECK-LABEL: TEST: wgmma_f32_v2
# CHECK-COUNT-32: "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [$0{{(\+[0-9]+)?}}], {$1, $2}, [$3];", "r,r,r,r"
print_ir("wgmma_f32_v2", dtype="float32", optimized=False)

# CHECK-LABEL: TEST: tmem_native_f32_v4
# CHECK-COUNT-32: "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [$0{{(\+[0-9]+)?}}], {$1, $2, $3, $4}, [$5];", "r,r,r,r,r,r"
print_ir("tmem_native_f32_v4", dtype="float32", layout="TMEM_NATIVE_V4", shape=(128, 128))
