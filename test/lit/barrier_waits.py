# RUN: %PYTHON %s ir+ptx %t.ptx | FileCheck %s
# RUN: FileCheck %s --check-prefix=PTX --input-file %t.ptx
# REQUIRES: filecheck, mlir-opt, ptxas, cuobjdump
# Barrier arrives, expect_tx and wait loops.  The waits this project emits acquire
# at cluster scope: a store's plain st/red .shared::cluster pieces from another CTA
# are ordered by a .release.cluster arrive, and only an acquire whose scope includes
# that CTA synchronizes with it (PTX ISA, Memory Consistency Model: morally strong
# operations).  Upstream's BarrierRef.wait is the default (.acquire.cta).  Also the
# debug kernel's mbarrier.expect_tx and the bulk benchmark's cp.async.bulk.

import sys

import jax
import jax.numpy as jnp
from jaxlib.mlir import ir

from mosaic_async_store import compat
from mosaic_async_store.tools import toolchain
from mosaic_async_store.demo.config import StoreConfig
from mosaic_async_store.lowering import debug
import store_kernels as demo_kernel
from bench_kernels import bench_kernel_parts
from gpu_run import announce_extra_bytes
from kernel_text import write_ptx

WHAT = sys.argv[1] if len(sys.argv) > 1 else "ir"


def _print(name, module):
  """Prints the module's IR or PTX, by sys.argv[1]; "ir+ptx FILE" prints the IR and
  writes the PTX to FILE (kernel_text.emit)."""
  print(f"TEST: {name}")
  if WHAT != "ptx":
    print(module.operation.get_asm(enable_debug_info=False))
  if WHAT == "ptx":
    print(toolchain.compile_module(module).ptx)
  elif WHAT == "ir+ptx":
    write_ptx(sys.argv[2], name, toolchain.compile_module(module).ptx)


def show(name, parts):
  """A kernel given as ``KernelParts`` (built by ``parts()``)."""
  with compat.make_ir_context(), ir.Location.unknown(), compat.enable_x64():
    k = parts()
    module, *_ = compat.kernel_to_module(k.body, k.grid, k.block, k.in_shape, k.out_shape,
                                         k.scratch, cluster=k.cluster)
    _print(name, module)


def show_wait(name, **wait_kwargs):
  """A 2-CTA kernel that only waits on its barrier with ``debug.wait``."""
  mgpu = compat.mosaic_gpu()

  def body(ctx, x_ref, o_ref, bar):
    del ctx, x_ref, o_ref
    debug.wait(bar[0], **wait_kwargs)

  spec = jax.ShapeDtypeStruct((128,), jnp.int32)
  with compat.make_ir_context(), ir.Location.unknown():
    module, *_ = compat.kernel_to_module(
        body, (2, 1, 1), (128, 1, 1), (spec,), spec,
        (mgpu.Barrier(arrival_count=128, num_barriers=1),), cluster=(2, 1, 1))
    _print(name, module)


# mas.wait(bar) without debug: an unbounded poll, cluster-scoped.
# CHECK-LABEL: TEST: plain_wait
# CHECK: {{nvvm.mbarrier.init|mbarrier.init.shared}}
# CHECK: llvm.inline_asm has_side_effects "{\0A.reg .pred %done;\0AWAIT${:uid}:\0Ambarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done, [$0], $1, $2;\0A@!%done bra.uni WAIT${:uid};\0A}", "r,r,r" %{{[0-9]+}}, %{{[0-9]+}}, %c10000000_i32
# CHECK-NOT: mbarrier.try_wait.parity.shared::cta
# CHECK: gpu.terminator
# PTX-LABEL: TEST: plain_wait
# PTX: WAIT[[L:[0-9]+]]:
# PTX-NEXT: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done, [%r[[BAR:[0-9]+]]], %r{{[0-9]+}}, %r{{[0-9]+}};
# PTX-NEXT: @!%done bra.uni WAIT[[L]];
# PTX-NOT: mbarrier.try_wait.parity.shared::cta
# PTX: ret;
show_wait("plain_wait", debug=False)

# Debug mode: bounded, with a flag, the same cluster-scoped acquire.
# CHECK-LABEL: TEST: debug_wait
# CHECK: {{nvvm.mbarrier.init|mbarrier.init.shared}}
# CHECK: llvm.inline_asm has_side_effects "{\0A.reg .pred %p<2>;\0A.reg .b32 %n;\0Amov.b32 %n, 0;\0Amov.b32 $0, 1;\0AWAIT${:uid}:\0Ambarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p0, [$1], $2;\0A@%p0 bra DONE${:uid};
# CHECK-SAME: "=r,r,r" %{{[0-9]+}}, %{{[0-9]+}} : (i32, i32) -> i32
# CHECK-NOT: mbarrier.try_wait.parity.shared::cta
# CHECK: gpu.terminator
# PTX-LABEL: TEST: debug_wait
# PTX: WAIT[[L:[0-9]+]]:
# PTX-NEXT: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p0, [%r[[BAR:[0-9]+]]], %r{{[0-9]+}};
# PTX-NEXT: @%p0 bra DONE[[L]];
# PTX-NOT: mbarrier.try_wait.parity.shared::cta
# PTX: ret;
show_wait("debug_wait", debug=True)

# The debug tests' wrong count: after each thread's arrive (128 bytes), one thread
# announces 16 more bytes on the same mapped barrier, without arriving.
# CHECK-LABEL: TEST: tx_error
# CHECK: llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK:[0-9]+]] :
# CHECK-NEXT: %[[BAR:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK]] :
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %[[BAR]], %c128_i32{{[_0-9]*}} :
# CHECK: %[[XBAR:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %{{[0-9]+}} :
# CHECK-NEXT: nvvm.elect.sync
# CHECK: scf.if
# CHECK-NEXT: %[[EXTRA:[a-z0-9_]+]] = arith.constant 16 : i32
# CHECK-NEXT: "mbarrier.expect_tx.relaxed.cluster.shared::cluster.b64 [$0], $1;", "r,r" %[[XBAR]], %[[EXTRA]] :
# CHECK-NOT: mbarrier.expect_tx
# PTX-LABEL: TEST: tx_error
# PTX: mapa.shared::cluster.u32 %r{{[0-9]+}}, %r{{[0-9]+}}, %r[[RANK:[0-9]+]];
# PTX: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r{{[0-9]+}}, %r[[RANK]];
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%r[[BAR]]], %r{{[0-9]+}};
# PTX: elect.sync
# PTX: mov.b32 %r[[EXTRA:[0-9]+]], 16;
# PTX: mbarrier.expect_tx.relaxed.cluster.shared::cluster.b64 [%r[[BAR]]], %r[[EXTRA]];
# PTX-NOT: mbarrier.expect_tx
show("tx_error", lambda: demo_kernel.kernel_parts(
    StoreConfig(), after_store=announce_extra_bytes(StoreConfig(), 16)))

# The bulk benchmark: plain local stores into a staging buffer, a proxy fence, then one
# thread announces the tile's 16384 bytes on the peer's barrier and copies the tile
# into the peer's buffer, completing on that barrier; the wait polls the own one.
# CHECK-LABEL: TEST: bulk
# CHECK: "st.shared::cta.b32
# CHECK: "fence.proxy.async.shared::cta;"
# CHECK: %[[DST:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK:[0-9]+]] :
# CHECK: %[[BAR:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK]] :
# CHECK-NEXT: nvvm.elect.sync
# CHECK: scf.if
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %[[BAR]], %c16384_i32{{[_0-9]*}} :
# CHECK: "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [$0], [$1], 16384, [$2];", "r,r,r" %[[DST]], %{{[0-9]+}}, %[[BAR]] :
# CHECK: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done, [$0], $1, $2;
# PTX-LABEL: TEST: bulk
# PTX: st.shared::cta.b32
# PTX: fence.proxy.async.shared::cta;
# PTX: mapa.shared::cluster.u32 %r[[DST:[0-9]+]], %r{{[0-9]+}}, %r[[RANK:[0-9]+]];
# PTX: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r[[OWN:[0-9]+]], %r[[RANK]];
# PTX: elect.sync
# PTX: mov.b32 %r[[TX:[0-9]+]], 16384;
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%r[[BAR]]], %r[[TX]];
# PTX: cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r[[DST]]], [%r{{[0-9]+}}], 16384, [%r[[BAR]]];
# PTX: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done, [%r[[OWN]]], %r{{[0-9]+}}, %r{{[0-9]+}};
show("bulk", lambda: bench_kernel_parts(StoreConfig(), "bulk", ctas=2, iters=1))
