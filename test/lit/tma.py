# RUN: %PYTHON -m mosaic_async_store.tools.cli compile %S/../harness/tma_kernels.py:tma_round_trip_lane --emit ptx | FileCheck %s --check-prefix=COPY
# RUN: %PYTHON -m mosaic_async_store.tools.cli compile %S/../harness/tma_kernels.py:tma_round_trip_lane --emit sass | FileCheck %s --check-prefix=COPY-SASS
# RUN: %PYTHON -m mosaic_async_store.tools.cli compile %S/../harness/tma_kernels.py:tma_round_trip_warpgroup --arch sm_100a --emit ptx | FileCheck %s --check-prefix=COPY
# RUN: %PYTHON -m mosaic_async_store.tools.cli compile %S/../harness/tma_kernels.py:multicast_copy --emit ptx | FileCheck %s --check-prefix=MULTICAST
# RUN: %PYTHON -m mosaic_async_store.tools.cli compile %S/../harness/tma_kernels.py:wgmma_matmul --emit sass | FileCheck %s --check-prefix=WGMMA-SASS
# RUN: %PYTHON -m mosaic_async_store.tools.cli compile %S/../harness/tma_kernels.py:warp_specialized_copy --emit ptx | FileCheck %s --check-prefix=WS
# RUN: %PYTHON -m mosaic_async_store.tools.cli compile %S/../harness/tma_kernels.py:warp_specialized_copy --emit sass | FileCheck %s --check-prefix=WS-SASS
# REQUIRES: filecheck, mlir-opt, ptxas, cuobjdump
# TMA kernels through the CLI's `compile FILE.py:FUNCTION` (test/harness/tma_kernels.py):
# the descriptor argument passed by value (mlir_skew's tma-descriptor-byval: a 64-byte
# aligned .param array whose address cvta.param takes), the TMA and bulk instructions,
# WGMMA, and setmaxnreg honoured (setmaxnreg-minctasm: .minnctapersm 1, USETMAXREG).
# This file is only the RUN lines' input; it prints nothing itself.

# COPY: .entry [[K:[a-z_]+]](
# COPY-NEXT: .param .align 64 .b8 [[K]]_param_0[128],
# COPY: mov.b64 [[D:%rd[0-9]+]], [[K]]_param_0;
# COPY-NEXT: cvta.param.u64 [[P:%rd[0-9]+]], [[D]];
# COPY: cp.async.bulk.tensor.2d.shared::{{cluster|cta}}.global.mbarrier::complete_tx::bytes [{{%r[0-9]+}}], [[[P]], {{.*}}], [{{%r[0-9]+}}];
# COPY: fence.proxy.async.shared::cta;
# COPY: cp.async.bulk.global.shared::cta.bulk_group
# COPY: cp.async.bulk.commit_group;

# COPY-SASS: UTMALDG.2D
# COPY-SASS: SYNCS.PHASECHK.TRANS64.TRYWAIT
# COPY-SASS: UBLKCP.G.S

# MULTICAST: .param .align 64 .b8 {{[a-z_]+}}_param_0[128],
# MULTICAST-DAG: cvta.param.u64
# MULTICAST-DAG: barrier.cluster.wait.aligned;
# MULTICAST: cp.async.bulk.tensor.1d.shared::{{cluster|cta}}.global.mbarrier::complete_tx::bytes.multicast::cluster

# WGMMA-SASS: UTMALDG.{{[2-5]}}D
# WGMMA-SASS: HGMMA.64x128x16.F32
# WGMMA-SASS: UTMASTG.{{[2-5]}}D

# WS: .maxntid 256, 1, 1
# WS-NEXT: .minnctapersm 1
# WS: setmaxnreg.dec.sync.aligned.u32 40;
# WS: setmaxnreg.inc.sync.aligned.u32

# (either order: ptxas lays out the branches as the lowering orders them, and jax 0.12.1
# puts the consumers' branch, with TRY_ALLOC, first)
# WS-SASS-DAG: USETMAXREG.DEALLOC.CTAPOOL 0x28
# WS-SASS-DAG: USETMAXREG.TRY_ALLOC.CTAPOOL
