"""Random store configurations for the tests (hypothesis strategies and checks), jax-free:
test/planner/test_random_plans.py plans and verifies them, test/unit/test_random_configs.py
compiles a few through mlir-opt and ptxas.

``MAS_RANDOM_PLANS`` / ``MAS_RANDOM_COMPILES`` change the example counts;
``MAS_HYPOTHESIS_RANDOM=1`` draws new examples instead of CI's fixed ones.
"""

from __future__ import annotations

import functools
import math
import os

from hypothesis import event
from hypothesis import strategies as st

from mosaic_async_store.plan import ptx_forms
from mosaic_async_store.demo.config import LAYOUT_NAMES, StoreConfig, resolve_layout
from mosaic_async_store.plan.dtypes import SUPPORTED_DTYPE_NAMES, as_dtype
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.demo.config import view_geometry
from mosaic_async_store.plan.planner import plan_store

__all__ = ["PLANS", "COMPILES", "DERANDOMIZE", "configs", "planned", "refused_cleanly",
           "check_plan", "try_config"]

MAX_ELEMENTS = 8192  # past 8192, vector-length-1 layouts hit numpy#31980 (see test_matrix)
PLANS = int(os.environ.get("MAS_RANDOM_PLANS", "400"))
COMPILES = int(os.environ.get("MAS_RANDOM_COMPILES", "25"))
DERANDOMIZE = not os.environ.get("MAS_HYPOTHESIS_RANDOM")
_ATOMICS = (None,) * 12 + ptx_forms.ATOMIC_OPS


@functools.cache
def base_tile(layout: str) -> tuple[int, ...]:
  """The layout's base tile (rows, cols) or (n,); strided/splat: any 128-element block."""
  if layout in ("STRIDED", "SPLAT"):
    return (8, 16)
  return tuple(resolve_layout(layout, (128, 128), "f32").base_tile_shape)


@st.composite
def configs(draw) -> dict:
  """StoreConfig keyword arguments (StoreConfig itself may refuse them)."""
  layout = draw(st.sampled_from(LAYOUT_NAMES))
  dtype = draw(st.sampled_from(SUPPORTED_DTYPE_NAMES))
  bits = as_dtype(dtype).bits
  swizzle = draw(st.sampled_from((None, None, 16, 32, 64, 128)))
  transposed = draw(st.booleans()) and draw(st.booleans())
  base = base_tile(layout)
  if len(base) == 1:
    shape = (base[0] * draw(st.sampled_from((1, 2, 4, 8))),)
  else:
    rows, cols = base[0] * draw(st.sampled_from((1, 2))), base[1] * draw(st.sampled_from((1, 2, 4)))
    if draw(st.integers(0, 9)):  # mostly shapes that fit the swizzle tile too
      sw_cols = swizzle * 8 // bits if swizzle else 1
      aligned = (math.lcm(rows, 8 if swizzle else 1, sw_cols if transposed else 1),
                 math.lcm(cols, sw_cols, 8 if transposed and swizzle else 1))
      if math.prod(aligned) <= MAX_ELEMENTS:
        rows, cols = aligned
    shape = (rows, cols)
  if math.prod(shape) > MAX_ELEMENTS:
    shape = base
  return dict(
      dtype=dtype, shape=shape, layout=layout, swizzle=swizzle,
      target=draw(st.sampled_from(("peer", "local"))), atomic=draw(st.sampled_from(_ATOMICS)),
      transposed=transposed, optimized=draw(st.booleans()))


def planned(cfg: StoreConfig):
  """(plan, report) as the kernel's store sees its ref (the CLI's --emit plan path)."""
  view = view_geometry(cfg)
  plan = plan_store(resolve_layout(cfg.layout, cfg.shape, cfg.dtype), cfg.shape, cfg.dtype,
                    swizzle=cfg.swizzle, optimized=cfg.optimized, atomic=cfg.atomic,
                    ref_shape=view.ref_shape, ref_strides=view.strides,
                    peer=cfg.target == "peer")
  return plan, plan.verify()


def refused_cleanly(cfg: StoreConfig, error: AsyncStoreError) -> None:
  message = str(error)
  event(f"refused: {getattr(error, 'param', '') or message.split('=')[0]}")
  assert "internal planner defect" not in message, f"{cfg.describe()}: {message}"
  assert "Fix:" in message, f"{cfg.describe()}: {message}"


def check_plan(cfg: StoreConfig, plan, report) -> None:
  event("accepted")
  expected = math.prod(cfg.shape) * as_dtype(cfg.dtype).bits // 8
  assert plan.total_bytes == report.total_bytes == expected, cfg.describe()
  assert report.async_bytes == plan.async_bytes <= expected, cfg.describe()


def try_config(kwargs):
  try:
    return StoreConfig(**kwargs)
  except AsyncStoreError as e:  # StoreConfig itself refused (e.g. transposed 1-D)
    return e
