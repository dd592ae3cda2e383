# RUN: %PYTHON %s | FileCheck %s
# Under Warpgroup semantics the primitive emits the Mosaic GPU dialect op,
# marked for this project and carrying what the dialect cannot express:
# signedness (for min/max) and inc/dec.  Printed just before Pallas runs the
# dialect lowering (after layout inference), by wrapping upstream's
# lower_mgpu_dialect wherever this jax calls it (compat.dialect_lowering_entry_points).

from mosaic_async_store import compat
from mosaic_async_store.pallas_capture import lower_pallas_to_mosaic_modules
from mosaic_async_store.testing import pallas_store_kernel

ENTRY_POINTS = compat.dialect_lowering_entry_points()  # jax 0.10 and 0.11 differ
ORIGINALS = [getattr(owner, name) for owner, name in ENTRY_POINTS]


def show_then(original):
  def show_then_lower(module, *args, **kwargs):
    for line in str(module).splitlines():
      if "async_store_smem" in line:
        print(line.strip())
    return original(module, *args, **kwargs)
  return show_then_lower


def show(name, **kwargs):
  print(f"TEST: {name}")
  kernel, spec = pallas_store_kernel(semantics="warpgroup", **kwargs)
  for (owner, attr), original in zip(ENTRY_POINTS, ORIGINALS):
    setattr(owner, attr, show_then(original))
  try:
    lower_pallas_to_mosaic_modules(kernel, spec)
  finally:
    for (owner, attr), original in zip(ENTRY_POINTS, ORIGINALS):
      setattr(owner, attr, original)


# CHECK-LABEL: TEST: i32_min
# CHECK: mosaic_gpu.async_store_smem
# CHECK-SAME: mas.async_store
# CHECK-SAME: mas.atomic = "min"
# CHECK-SAME: mas.signed = true
show("i32_min", dtype="int32", atomic="min")

# CHECK-LABEL: TEST: u32_inc
# CHECK: mosaic_gpu.async_store_smem
# CHECK-SAME: mas.atomic = "inc"
# CHECK-SAME: mas.signed = false
show("u32_inc", dtype="uint32", atomic="inc")

# Layout inference picks the WGMMA layout for 8-bit data (upstream's store then
# fails with "Unsupported register bitwidth"; this project packs words).
# CHECK-LABEL: TEST: i8_plain
# CHECK: mosaic_gpu.async_store_smem
# CHECK-SAME: in_layouts = [#mosaic_gpu.TiledLayout<{{\[}}[64, 8], [16, 8], [8, 8], [2]]
# CHECK-SAME: mas.async_store
# CHECK-NOT: mas.atomic
show("i8_plain", dtype="int8")
