# RUN: %PYTHON %s ir | FileCheck %s
# RUN: %PYTHON %s ptx | FileCheck %s --check-prefix=PTX
# The st.async width follows what each thread holds contiguously: 4 bytes
# (bf16 pairs in WGMMA), 8 bytes (f32 pairs), 16 bytes (TMEM-native f32 x4).
# Addresses are 32-bit ("r"), and stores that share a base use an immediate.

from mosaic_async_store.testing import emit

# CHECK-LABEL: TEST: wgmma_bf16_b32
# CHECK: "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r"
# CHECK: "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r"
# CHECK-COUNT-32: "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0{{(\+[0-9]+)?}}], $1, [$2];", "r,r,r"
# CHECK-NOT: st.async
# CHECK: "mbarrier.arrive.expect_tx.shared::cluster.b64 _, [$0], $1;", "r,r"
# PTX-LABEL: TEST: wgmma_bf16_b32
# PTX: mapa.shared::cluster.u32 %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}};
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r{{[0-9]+}}], %r{{[0-9]+}}, [%r{{[0-9]+}}];
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r{{[0-9]+}}+{{[0-9]+}}], %r{{[0-9]+}}, [%r{{[0-9]+}}];
emit("wgmma_bf16_b32")

# CHECK-LABEL: TEST: wgmma_f32_v2
# CHECK-COUNT-32: "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [$0{{(\+[0-9]+)?}}], {$1, $2}, [$3];", "r,r,r,r"
# PTX-LABEL: TEST: wgmma_f32_v2
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], {%r{{[0-9]+}}, %r{{[0-9]+}}}, [%r{{[0-9]+}}];
emit("wgmma_f32_v2", dtype="float32", optimized=False)

# CHECK-LABEL: TEST: tmem_native_f32_v4
# CHECK-COUNT-32: "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [$0{{(\+[0-9]+)?}}], {$1, $2, $3, $4}, [$5];", "r,r,r,r,r,r"
# PTX-LABEL: TEST: tmem_native_f32_v4
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, [%r{{[0-9]+}}];
emit("tmem_native_f32_v4", dtype="float32", layout="TMEM_NATIVE_V4", shape=(128, 128))
