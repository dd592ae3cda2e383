"""Layouts Mosaic does not ship: TiledLayouts with the warp and lane dims permuted.

The planner computes the register map of any TiledLayout from its tiling and
its warp, lane and vector dims (upstream's Tiling does the index arithmetic),
so a layout built by hand is planned and verified (every byte once, at the
right place) or refused with an AsyncStoreError, never anything else.
"""

import itertools
import math

import pytest

from mosaic_async_store import compat, plan_store
from mosaic_async_store.errors import AsyncStoreError

TILINGS = [((64, 8), (16, 8), (8, 8), (2,)), ((64, 16), (16, 16), (8, 16), (8,)),
           ((128, 8), (32, 8), (8, 8), (2,)), ((128, 4), (32, 4), (4,))]


def _permuted_layouts():
  """Every TiledLayout over TILINGS whose warp dims hold 4 warps and lane dims 32 lanes."""
  fa = compat.fragmented_array()
  out = []
  for tiles in TILINGS:
    tiling = fa.Tiling(tiles)
    shape = tiling.tile_shape(tiles[0])
    dims = [d for d in range(-len(shape) + 2, -1) if shape[d] > 1]  # -1: the vector dim
    for nw, nl in itertools.product((1, 2), (1, 2, 3)):
      for warp in itertools.permutations(dims, nw):
        lanes_left = [d for d in dims if d not in warp]
        for lane in itertools.permutations(lanes_left, nl):
          if math.prod(shape[d] for d in warp) != 4 or math.prod(shape[d] for d in lane) != 32:
            continue
          try:
            out.append((tiles[0], fa.TiledLayout(tiling, warp_dims=warp, lane_dims=lane,
                                                 vector_dim=-1)))
          except ValueError:
            pass  # upstream's own consistency checks
  return out


LAYOUTS = _permuted_layouts()


def test_the_permutations_are_many_and_include_upstreams():
  fa = compat.fragmented_array()
  assert len(LAYOUTS) >= 20
  assert any(layout == fa.WGMMA_LAYOUT for _, layout in LAYOUTS)


@pytest.mark.parametrize("dtype,swizzle", [("bf16", 128), ("f32", None), ("i8", 64),
                                           ("i4", 128)])
def test_hand_built_layouts_plan_and_verify_or_refuse(dtype, swizzle):
  planned = 0
  for base, layout in LAYOUTS:
    shape = (base[0], max(base[1], 256 if dtype == "i4" else 128))
    try:
      plan = plan_store(layout, shape, dtype, swizzle=swizzle, optimized=False)
    except AsyncStoreError:
      continue
    report = plan.verify()
    assert report.total_bytes == math.prod(shape) * plan.dtype.bits // 8
    planned += 1
  assert planned >= len(LAYOUTS) // 2, planned


@pytest.mark.parametrize("where", ["warp_dims", "lane_dims"])
def test_unreduced_layouts_are_refused_naming_the_layout(where):
  """jax 0.12's Unreduced dims: threads hold partial values of one element.  Storing
  one would write a partial value; the planner refuses it (it used to fail with a
  TypeError inside the register map)."""
  fa = compat.fragmented_array()
  if not hasattr(fa, "Unreduced"):
    pytest.skip(f"jax {compat.jax_version()} has no Unreduced layout dimensions")
  import dataclasses
  base = fa.WGMMA_LAYOUT
  dims = getattr(base, where)
  # The first warp (lane) dim becomes an Unreduced one of the same size.
  times = base.tiling.tile_shape((64, 128))[dims[0]]
  layout = dataclasses.replace(base, **{where: (fa.Unreduced(times), *dims[1:])},
                               unreduced_operation="max")
  with pytest.raises(AsyncStoreError) as err:
    plan_store(layout, (64, 128), "bfloat16", swizzle=128)
  assert err.value.param == "layout"
  assert "Unreduced" in str(err.value) and "value.reduce('max', axis=())" in str(err.value)
