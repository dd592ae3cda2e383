"""Our SMEM geometry agrees with upstream's own local ``store_tiled``.

``hostdata.expected_smem`` (from ``RefGeometry``: tiling, strides, swizzle)
is what every store test compares against.  Here upstream writes the SMEM
instead: the test kernel's store is replaced by ``FragmentedArray.store_tiled``
(plain local stores, upstream's code) and the PTX interpreter runs it.  The
bytes must equal our expectation, for each swizzle, transposed views and
dtypes from 32 down to 4 bits, wherever upstream accepts the configuration.
"""

import dataclasses

import numpy as np
import pytest
from jaxlib.mlir import ir

from mosaic_async_store import compat
from mosaic_async_store.tools import toolchain
from mosaic_async_store.demo.config import StoreConfig
from demo_kernels import run_ptx
from store_kernels import kernel_parts

S = StoreConfig
CONFIGS = [S(dtype=dt, swizzle=sw, target="local", shape=shape)
           for dt, shape in (("float32", (64, 64)), ("bfloat16", (64, 128)), ("int8", (64, 128)),
                             ("int4", (64, 256)))
           for sw in (32, 64, 128)]   # store_tiled needs a tiled ref: no swizzle=None
CONFIGS += [S(dtype="bfloat16", swizzle=sw, target="local", transposed=True, shape=(64, 64))
            for sw in (64, 128)]
CONFIGS += [S(dtype="float32", layout="TCGEN05", target="local", shape=(128, 64), swizzle=128),
            S(dtype="bfloat16", layout="WGMMA_TRANSPOSED", target="local", shape=(64, 64),
              swizzle=64)]


def _upstream_store_tiled(cfg):
  utils = compat.mosaic_utils()

  def store(value, view, barrier):
    value.store_tiled(view, swizzle=cfg.swizzle, optimized=False)
    utils.warpgroup_barrier()
    barrier.arrive()  # every thread: the phase (128 arrivals) completes
  return store


def _ptx(cfg):
  with compat.make_ir_context(), ir.Location.unknown():
    p = kernel_parts(cfg, store=_upstream_store_tiled(cfg))
    module, *_ = compat.kernel_to_module(p.body, p.grid, p.block, p.in_shape, p.out_shape,
                                         p.scratch, cluster=p.cluster)
    return toolchain.compile_module(module).ptx


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.describe())
def test_upstream_store_tiled_lands_where_our_geometry_says(cfg):
  try:
    ptx = _ptx(cfg)
  except compat.upstream_store_errors() as e:
    pytest.skip(f"upstream store_tiled refuses it: {type(e).__name__}: {e}"[:200])
  out, flags, want, _ = run_ptx(cfg, ptx)   # (fails where the run breaks a rule)
  bad = np.flatnonzero(out != want)
  assert bad.size == 0, f"{bad.size} bytes differ, first at {bad[:8].tolist()}"
  assert (flags == 1).all()


def test_enough_configurations_are_checked():
  """Upstream must accept most of them, or this file proves little."""
  accepted = 0
  for cfg in CONFIGS:
    try:
      _ptx(dataclasses.replace(cfg))
      accepted += 1
    except compat.upstream_store_errors():
      pass
  assert accepted >= len(CONFIGS) * 2 // 3, accepted
