# RUN: %PYTHON %s ir+ptx %t.ptx | FileCheck %s
# RUN: FileCheck %s --check-prefix=PTX --input-file %t.ptx
# REQUIRES: filecheck, mlir-opt, ptxas, cuobjdump
# Pallas MGPU kernels, both lowering semantics: the Lane/Warpgroup primitive, the
# Mosaic GPU dialect op it emits under Warpgroup semantics, and the waits that
# install() reroutes.  IR is the Mosaic module (Warpgroup: after the dialect
# lowering); PTX is compiled on the CPU.

import sys

from mosaic_async_store import compat
from mosaic_async_store import pallas as mas_pallas
from mosaic_async_store.tools import toolchain
from mosaic_async_store.tools.pallas_capture import lower_pallas_to_mosaic_modules
from kernel_text import pallas_module, pallas_store_kernel, write_ptx

# "ir", "ptx", or "ir+ptx FILE": both from one Python, the PTX into FILE (kernel_text.emit).
WHAT = sys.argv[1] if len(sys.argv) > 1 else "ir"
ENTRY_POINTS = compat.dialect_lowering_entry_points()  # jax 0.10 and 0.11 differ
ORIGINALS = [getattr(owner, name) for owner, name in ENTRY_POINTS]


def show(name, **kwargs):
  """Prints the kernel's IR or PTX, by sys.argv[1] ("ir+ptx": both, of one build)."""
  print(f"TEST: {name}")
  module = pallas_module(**kwargs)
  if WHAT != "ptx":
    print(module.operation.get_asm(enable_debug_info=False))
  if WHAT == "ptx":
    print(toolchain.compile_module(module).ptx)
  elif WHAT == "ir+ptx":
    write_ptx(sys.argv[2], name, toolchain.compile_module(module).ptx)


def show_then(original):
  def show_then_lower(module, *args, **kwargs):
    for line in str(module).splitlines():
      if "async_store_smem" in line:
        print(line.strip())
    return original(module, *args, **kwargs)
  return show_then_lower


def show_dialect(name, **kwargs):
  """In "ir" mode the dialect op of a Warpgroup kernel, printed just before Pallas
  runs the dialect lowering (after layout inference), by wrapping upstream's
  lower_mgpu_dialect wherever this jax calls it (compat.dialect_lowering_entry_points);
  in "ptx" mode the same kernel, compiled ("ir+ptx": both)."""
  if WHAT == "ptx":
    show(name, semantics="warpgroup", **kwargs)
    return
  if WHAT == "ir+ptx":
    module = pallas_module(semantics="warpgroup", **kwargs)
    write_ptx(sys.argv[2], name, toolchain.compile_module(module).ptx)
  print(f"TEST: {name}")
  kernel, spec = pallas_store_kernel(semantics="warpgroup", **kwargs)
  for (owner, attr), original in zip(ENTRY_POINTS, ORIGINALS):
    setattr(owner, attr, show_then(original))
  try:
    lower_pallas_to_mosaic_modules(kernel, spec)
  finally:
    for (owner, attr), original in zip(ENTRY_POINTS, ORIGINALS):
      setattr(owner, attr, original)


# Layout inference admits every layout the planner stores (lowering/pallas_layouts.py),
# where upstream's constraint ("Failed to infer a possible set of layouts") admits only
# what upstream's store transfers: 64-bit data without a cast is inferred WGMMA; the
# TMEM-native layout of 16-bit data and WGMMA_UPCAST_4X of 32-bit data, fixed by a
# layout_cast, are kept; each goes out as 16-byte st.async.

# CHECK-LABEL: TEST: f64_inferred
# CHECK: mosaic_gpu.async_store_smem
# CHECK-SAME: in_layouts = [#mosaic_gpu.TiledLayout<{{\[\[}}64, 8], [16, 8], [8, 8], [2]], warp_dims = [-7], lane_dims = [-3, -2], vector_dim = -1>]
# CHECK-SAME: in_transforms = {{\[\[}}#mosaic_gpu.tile<[8, 16]>, #mosaic_gpu.swizzle<128 : i32>]]
# CHECK-SAME: mas.async_store
# CHECK-SAME: vector<128x128xf64>
# PTX-LABEL: TEST: f64_inferred
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%r{{[0-9]+}}{{(\+[0-9]+)?}}], {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, [%r{{[0-9]+}}];
# PTX-NOT: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64
with compat.enable_x64():
  show_dialect("f64_inferred", dtype="float64", shape=(128, 128))

# CHECK-LABEL: TEST: bf16_tmem_native_cast
# CHECK: mosaic_gpu.async_store_smem
# CHECK-SAME: in_layouts = [#mosaic_gpu.TiledLayout<{{\[\[}}128, 2], [32, 2]], warp_dims = [-4], lane_dims = [-2], vector_dim = -1>]
# CHECK-SAME: #mosaic_gpu.tile<[8, 64]>, #mosaic_gpu.swizzle<128 : i32>
# PTX-LABEL: TEST: bf16_tmem_native_cast
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64
show_dialect("bf16_tmem_native_cast", dtype="bfloat16", shape=(128, 128),
             layout="TCGEN05_TMEM_NATIVE")

# CHECK-LABEL: TEST: f32_upcast_4x_cast
# CHECK: mosaic_gpu.async_store_smem
# CHECK-SAME: in_layouts = [#mosaic_gpu.TiledLayout<{{\[\[}}64, 32], [16, 32], [8, 32], [8]], warp_dims = [-7], lane_dims = [-3, -2], vector_dim = -1>]
# CHECK-SAME: #mosaic_gpu.tile<[8, 32]>, #mosaic_gpu.swizzle<128 : i32>
# PTX-LABEL: TEST: f32_upcast_4x_cast
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32
show_dialect("f32_upcast_4x_cast", dtype="float32", shape=(128, 128), layout="WGMMA_UPCAST_4X")

# Under Warpgroup semantics the primitive emits the Mosaic GPU dialect op, marked
# for this project and carrying what the dialect cannot express: signedness (for
# min/max) and inc/dec.

# CHECK-LABEL: TEST: i32_min
# CHECK: mosaic_gpu.async_store_smem
# CHECK-SAME: mas.async_store
# CHECK-SAME: mas.atomic = "min"
# CHECK-SAME: mas.signed = true
# PTX-LABEL: TEST: i32_min
# PTX: red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.min.s32 [%r{{[0-9]+}}], %r{{[0-9]+}}, [%r{{[0-9]+}}];
# PTX-NOT: min.u32
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64
show_dialect("i32_min", dtype="int32", atomic="min")

# CHECK-LABEL: TEST: u32_inc
# CHECK: mosaic_gpu.async_store_smem
# CHECK-SAME: mas.atomic = "inc"
# CHECK-SAME: mas.signed = false
# PTX-LABEL: TEST: u32_inc
# PTX: red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.inc.u32 [%r{{[0-9]+}}], %r{{[0-9]+}}, [%r{{[0-9]+}}];
show_dialect("u32_inc", dtype="uint32", atomic="inc")

# Layout inference picks the WGMMA layout for 8-bit data (upstream's store then
# fails with "Unsupported register bitwidth"; this project packs words).
# CHECK-LABEL: TEST: i8_plain
# CHECK: mosaic_gpu.async_store_smem
# CHECK-SAME: in_layouts = [#mosaic_gpu.TiledLayout<{{\[}}[64, 8], [16, 8], [8, 8], [2]]
# CHECK-SAME: mas.async_store
# CHECK-NOT: mas.atomic
# PTX-LABEL: TEST: i8_plain
# PTX: shfl.sync.bfly.b32 %r{{[0-9]+}}, %r{{[0-9]+}}, 1, 31, -1;
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# PTX-NOT: red.async
show_dialect("i8_plain", dtype="int8")


# The peer's buffer and barrier are the own SMEM and the own initialised barrier,
# both mapped to the same rank; the stores are based on the mapped buffer and complete
# on the mapped barrier, which the arrive announces on.
# CHECK-LABEL: TEST: lane_i8
# CHECK: {{nvvm.mbarrier.init|mbarrier.init.shared}}
# CHECK: "shfl.sync.bfly.b32 $0, $1, 1, 31, -1;", "=r,r"
# CHECK: %[[BUF:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK:[0-9]+]] :
# CHECK-NEXT: %[[BAR:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK]] :
# CHECK: %[[ADDR:[0-9]+]] = arith.addi %[[BUF]], %{{[0-9]+}} : i32
# CHECK: "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0], $1, [$2];", "r,r,r" %[[ADDR]], %{{[0-9]+}}, %[[BAR]] :
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %[[BAR]], %{{[a-z0-9_]+}} :
# PTX-LABEL: TEST: lane_i8
# PTX: cvt.u32.u64 %r[[SMEM:[0-9]+]], %rd{{[0-9]+}};
# PTX: add.s32 %r[[OWN:[0-9]+]], %r[[SMEM]], {{[0-9]+}};
# PTX: mbarrier.init.shared{{(::cta)?}}.b64 [%r[[OWN]]], %r{{[0-9]+}};
# PTX: shfl.sync.bfly.b32
# PTX: mapa.shared::cluster.u32 %r[[BUF:[0-9]+]], %r[[SMEM]], %r[[RANK:[0-9]+]];
# PTX: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r[[OWN]], %r[[RANK]];
# PTX: add.s32 %r[[ADDR:[0-9]+]], %r[[BUF]], %r{{[0-9]+}};
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r[[ADDR]]], %r{{[0-9]+}}, [%r[[BAR]]];
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%r[[BAR]]], %r{{[0-9]+}};
show("lane_i8", dtype="int8", semantics="lane")

# Warpgroup semantics: every thread arrives once with its own 128 bytes (Pallas
# initialises the barrier with 128 arrivals per num_arrivals under both semantics).
# CHECK-LABEL: TEST: warpgroup_bf16
# CHECK: {{(nvvm.mbarrier.init |"@\$2 mbarrier.init.shared(::cta)?.b64 \[\$0\], \$1;", "r,r,b" )}}%[[OWNP:[0-9]+]], %c128_i32
# CHECK: %[[BUF:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK:[0-9]+]] :
# CHECK-NEXT: %[[BAR:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK]] :
# CHECK: %[[ADDR:[0-9]+]] = arith.addi %[[BUF]], %{{[0-9]+}} : i32
# CHECK: "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0], $1, [$2];", "r,r,r" %[[ADDR]], %{{[0-9]+}}, %[[BAR]] :
# CHECK-NOT: nvvm.elect.sync
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %[[BAR]], %c128_i32 :
# CHECK: nvvm.mbarrier.try_wait.parity %[[OWNP]],
# PTX-LABEL: TEST: warpgroup_bf16
# PTX: cvt.u32.u64 %r[[SMEM:[0-9]+]], %rd{{[0-9]+}};
# PTX: add.s32 %r[[OWN:[0-9]+]], %r[[SMEM]], {{[0-9]+}};
# PTX: mov.b32 %r[[TX:[0-9]+]], 128;
# PTX: mbarrier.init.shared{{(::cta)?}}.b64 [%r[[OWN]]], %r{{[0-9]+}};
# PTX: mapa.shared::cluster.u32 %r[[BUF:[0-9]+]], %r[[SMEM]], %r[[RANK:[0-9]+]];
# PTX: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r[[OWN]], %r[[RANK]];
# PTX: add.s32 %r[[ADDR:[0-9]+]], %r[[BUF]], %r{{[0-9]+}};
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r[[ADDR]]], {{%r[0-9]+}}, [%r[[BAR]]];
# PTX-NOT: elect.sync
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%r[[BAR]]], %r[[TX]];
# PTX-NOT: 16384
show("warpgroup_bf16", dtype="bfloat16", semantics="warpgroup")

# Signed int32 min under Warpgroup semantics uses min.s32 (upstream: min.u32).
# CHECK-LABEL: TEST: warpgroup_i32_min
# CHECK: %[[BUF:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK:[0-9]+]] :
# CHECK-NEXT: %[[BAR:[0-9]+]] = llvm.inline_asm "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r" %{{[0-9]+}}, %[[RANK]] :
# CHECK: %[[ADDR:[0-9]+]] = arith.addi %[[BUF]], %{{[0-9]+}} : i32
# CHECK: "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.min.s32 [$0], $1, [$2];", "r,r,r" %[[ADDR]], %{{[0-9]+}}, %[[BAR]] :
# CHECK-NOT: min.u32
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %[[BAR]], %c256_i32{{[_0-9]*}} :
# CHECK-NOT: min.u32
# PTX-LABEL: TEST: warpgroup_i32_min
# PTX: mapa.shared::cluster.u32 %r[[BUF:[0-9]+]], %r{{[0-9]+}}, %r[[RANK:[0-9]+]];
# PTX: mapa.shared::cluster.u32 %r[[BAR:[0-9]+]], %r{{[0-9]+}}, %r[[RANK]];
# PTX: add.s32 %r[[ADDR:[0-9]+]], %r[[BUF]], %r{{[0-9]+}};
# PTX: red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.min.s32 [%r[[ADDR]]], %r{{[0-9]+}}, [%r[[BAR]]];
# PTX-NOT: min.u32
# PTX: mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%r[[BAR]]], %r{{[0-9]+}};
# PTX-NOT: min.u32
show("warpgroup_i32_min", dtype="int32", atomic="min", semantics="warpgroup")

# Pallas' barrier_wait.  Upstream's rule polls mbarrier.try_wait.parity without
# qualifiers, i.e. .acquire.cta (PTX ISA, mbarrier.try_wait); after install() every
# barrier_wait polls with .acquire.cluster, which synchronizes with the
# .release.cluster arrive that orders a store's plain pieces in the peer (Memory
# Consistency Model: morally strong operations).  Without install(), such a store
# is refused.

# CHECK-LABEL: TEST: upstream_wait
# CHECK: "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0], $1, [$2];"
# CHECK: nvvm.mbarrier.try_wait.parity %{{[0-9]+}}, %{{[0-9]+}}, %c10000000_i32
# CHECK-NOT: acquire.cluster
# PTX-LABEL: TEST: upstream_wait
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# PTX: mbarrier.try_wait.parity.shared.b64
# PTX-NOT: acquire.cluster
show("upstream_wait", dtype="bfloat16", semantics="lane")

mas_pallas.install()

# CHECK-LABEL: TEST: installed_lane_f32_add
# CHECK: "red.relaxed.cluster.shared::cluster.add.f32 [$0], $1;", "r,r"
# CHECK: "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %{{[0-9]+}}, %c0_i32{{[_0-9]*}} :
# CHECK: "{\0A.reg .pred %done;\0AWAIT${:uid}:\0Ambarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done, [$0], $1, $2;\0A@!%done bra.uni WAIT${:uid};\0A}", "r,r,r"
# CHECK-NOT: nvvm.mbarrier.try_wait.parity
# PTX-LABEL: TEST: installed_lane_f32_add
# PTX: red.relaxed.cluster.shared::cluster.add.f32
# PTX: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r{{[0-9]+}}], %r{{[0-9]+}};
# PTX: WAIT[[L:[0-9]+]]:
# PTX-NEXT: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done, [%r{{[0-9]+}}], %r{{[0-9]+}}, %r{{[0-9]+}};
# PTX-NEXT: @!%done bra.uni WAIT[[L]];
# PTX-NOT: mbarrier.try_wait.parity.shared.b64
show("installed_lane_f32_add", dtype="float32", atomic="add", semantics="lane")

# CHECK-LABEL: TEST: installed_warpgroup_f32_add
# CHECK: "red.relaxed.cluster.shared::cluster.add.f32 [$0], $1;", "r,r"
# CHECK: "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [$0], $1;", "r,r" %{{[0-9]+}}, %c0_i32{{[_0-9]*}} :
# CHECK: "{\0A.reg .pred %done;\0AWAIT${:uid}:\0Ambarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done, [$0], $1, $2;\0A@!%done bra.uni WAIT${:uid};\0A}", "r,r,r"
# CHECK-NOT: nvvm.mbarrier.try_wait.parity
# PTX-LABEL: TEST: installed_warpgroup_f32_add
# PTX: red.relaxed.cluster.shared::cluster.add.f32
# PTX: mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64
# PTX: WAIT[[L:[0-9]+]]:
# PTX-NEXT: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done,
# PTX-NEXT: @!%done bra.uni WAIT[[L]];
# PTX-NOT: mbarrier.try_wait.parity.shared.b64
show("installed_warpgroup_f32_add", dtype="float32", atomic="add", semantics="warpgroup")

# Upstream's primitive and upstream's barrier_wait in an existing kernel: both rerouted.
# CHECK-LABEL: TEST: installed_upstream_api
# CHECK: "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [$0], $1, [$2];"
# CHECK: "{\0A.reg .pred %done;\0AWAIT${:uid}:\0Ambarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %done, [$0], $1, $2;
# CHECK-NOT: nvvm.mbarrier.try_wait.parity
# PTX-LABEL: TEST: installed_upstream_api
# PTX: st.async.shared::cluster.mbarrier::complete_tx::bytes.b32
# PTX: mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64
# PTX-NOT: mbarrier.try_wait.parity.shared.b64
show("installed_upstream_api", dtype="bfloat16", semantics="warpgroup", api="upstream")

mas_pallas.uninstall()

# CHECK-LABEL: TEST: uninstalled_again
# CHECK: "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64 _, [$0], $1;"
# CHECK: nvvm.mbarrier.try_wait.parity %{{[0-9]+}}, %{{[0-9]+}}, %c10000000_i32
# CHECK-NOT: acquire.cluster
# PTX-LABEL: TEST: uninstalled_again
# PTX: mbarrier.try_wait.parity.shared.b64
# PTX-NOT: acquire.cluster
show("uninstalled_again", dtype="bfloat16", semantics="warpgroup")
