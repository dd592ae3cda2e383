# RUN: %PYTHON %s | FileCheck %s
# Under Warpgroup semantics the primitive emits the Mosaic GPU dialect op,
# marked for this project and carrying what the dialect cannot express:
# signedness (for min/max) and inc/dec.  Printed just before Pallas runs the
# dialect lowering (after layout inference), by wrapping mgpu.lower_mgpu_dialect.

from mosaic_async_store import compat
from mosaic_async_store.pallas_capture import lower_pallas_to_mosaic_modules
from mosaic_async_store.testing import pallas_store_kernel

mgpu = compat.mosaic_gpu()
original = mgpu.lower_mgpu_dialect


def show_then_lower(module, *args, **kwargs):
  for line in str(module).splitlines():
    if "async_store_smem" in line:
      print(line.strip())
  return original(module, *args, **kwargs)


def show(name, **kwargs):
  print(f"TEST: {name}")
  kernel, spec = pallas_store_kernel(semantics="warpgroup", **kwargs)
  mgpu.lower_mgpu_dialect = show_then_lower
  try:
    lower_pallas_to_mosaic_modules(kernel, spec)
  finally:
    mgpu.lower_mgpu_dialect = original


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
