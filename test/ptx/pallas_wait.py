# RUN: %PYTHON %s | FileCheck %s
# Pallas' barrier_wait, compiled on the CPU to PTX.  Upstream's rule polls
# mbarrier.try_wait.parity without qualifiers, i.e. .acquire.cta (PTX ISA,
# mbarrier.try_wait); after install() every barrier_wait polls with
# .acquire.cluster, which synchronizes with the .release.cluster arrive that
# orders a store's plain pieces in the peer (Memory Consistency Model: morally
# strong operations).  Without install(), such a store is refused.

from mosaic_async_store import pallas as mas_pallas
from mosaic_async_store import toolchain
from mosaic_async_store.testing import pallas_module


def show(name, **kwargs):
  print(f"TEST: {name}")
  print(toolchain.compile_module(pallas_module(**kwargs)).ptx)


# CHECK-LABEL: TEST: upstream_wait
# CHECK: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# CHECK: mbarrier.try_wait.parity.shared.b64
# CHECK-NOT: acquire.cluster
show("upstream_wait", dtype="bfloat16", semantics="lane")

mas_pallas.install()

# CHECK-LABEL: TEST: installed_lane_f32_add
# CHECK: red.relaxed.cluster.shared::cluster.add.f32
# CHECK: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r{{[0-9]+}}], %r{{[0-9]+}};
# CHECK: WAIT[[L:[0-9]+]]:
# CHECK-NEXT: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done, [%r{{[0-9]+}}], %r{{[0-9]+}}, %r{{[0-9]+}};
# CHECK-NEXT: @!%done bra.uni WAIT[[L]];
# CHECK-NOT: mbarrier.try_wait.parity.shared.b64
show("installed_lane_f32_add", dtype="float32", atomic="add", semantics="lane")

# CHECK-LABEL: TEST: installed_warpgroup_f32_add
# CHECK: red.relaxed.cluster.shared::cluster.add.f32
# CHECK: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64
# CHECK: WAIT[[L:[0-9]+]]:
# CHECK-NEXT: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done,
# CHECK-NEXT: @!%done bra.uni WAIT[[L]];
# CHECK-NOT: mbarrier.try_wait.parity.shared.b64
show("installed_warpgroup_f32_add", dtype="float32", atomic="add", semantics="warpgroup")

# Upstream's primitive and upstream's barrier_wait in an existing kernel: both rerouted.
# CHECK-LABEL: TEST: installed_upstream_api
# CHECK: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# CHECK: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64
# CHECK-NOT: mbarrier.try_wait.parity.shared.b64
show("installed_upstream_api", dtype="bfloat16", semantics="warpgroup", api="upstream")

mas_pallas.uninstall()

# CHECK-LABEL: TEST: uninstalled_again
# CHECK: mbarrier.try_wait.parity.shared.b64
# CHECK-NOT: acquire.cluster
show("uninstalled_again", dtype="bfloat16", semantics="warpgroup")
