# RUN: %PYTHON %s | FileCheck %s
# The waits this project emits acquire at cluster scope: a store's plain
# st/red .shared::cluster pieces from another CTA are ordered by a
# .release.cluster arrive, and only an acquire whose scope includes that CTA
# synchronizes with it (PTX ISA, Memory Consistency Model: morally strong
# operations).  Upstream's BarrierRef.wait is the default (.acquire.cta).

import jax
import jax.numpy as jnp
from jaxlib.mlir import ir

from mosaic_async_store import compat, toolchain
from mosaic_async_store.lowering import debug


def show(name, **wait_kwargs):
  mgpu = compat.mosaic_gpu()

  def body(ctx, x_ref, o_ref, bar):
    del ctx, x_ref, o_ref
    debug.wait(bar[0], **wait_kwargs)

  spec = jax.ShapeDtypeStruct((128,), jnp.int32)
  with compat.make_ir_context(), ir.Location.unknown():
    module, *_ = compat.kernel_to_module(
        body, (2, 1, 1), (128, 1, 1), (spec,), spec,
        (mgpu.Barrier(arrival_count=128, num_barriers=1),), cluster=(2, 1, 1))
    print(f"TEST: {name}")
    print(toolchain.compile_module(module).ptx)


# mas.wait(bar) without debug: an unbounded poll, cluster-scoped.
# CHECK-LABEL: TEST: plain_wait
# CHECK: WAIT[[L:[0-9]+]]:
# CHECK-NEXT: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done, [%r[[BAR:[0-9]+]]], %r{{[0-9]+}}, %r{{[0-9]+}};
# CHECK-NEXT: @!%done bra.uni WAIT[[L]];
# CHECK-NOT: mbarrier.try_wait.parity.shared::cta
# CHECK: ret;
show("plain_wait", debug=False)

# Debug mode: bounded, with a flag, the same cluster-scoped acquire.
# CHECK-LABEL: TEST: debug_wait
# CHECK: WAIT[[L:[0-9]+]]:
# CHECK-NEXT: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p0, [%r[[BAR:[0-9]+]]], %r{{[0-9]+}};
# CHECK-NEXT: @%p0 bra DONE[[L]];
# CHECK-NOT: mbarrier.try_wait.parity.shared::cta
# CHECK: ret;
show("debug_wait", debug=True)
