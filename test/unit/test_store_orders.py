"""The plan states what its bank-conflict-free order costs and saves (StoreOrder)."""

import re

import pytest

from kernel_text import kernel_text
from mosaic_async_store.demo.config import StoreConfig, config_plan
from mosaic_async_store.plan.plan_types import StoreOrder
from mosaic_async_store.plan.verify import plan_wavefronts

S = StoreConfig
STAGGERED = [
    S(dtype="int32", atomic="add", shape=(128, 128), layout="TMEM_NATIVE_V4"),
    S(dtype="float32", swizzle=64),
    S(dtype="int32", atomic="and", swizzle=32),
    S(dtype="float32", layout="WGMMA_TRANSPOSED", swizzle=32),
]


@pytest.mark.parametrize("cfg", STAGGERED, ids=lambda c: c.describe())
def test_saved_wavefronts_are_those_register_order_has_more(cfg):
  plan = config_plan(cfg)
  register_order = config_plan(S(**{**vars(cfg), "optimized": False}))
  assert plan.store_orders, "expected a staggered plan"
  saved = sum(o.wavefronts_saved for o in plan.store_orders)
  assert saved == plan_wavefronts(register_order)[0] - plan_wavefronts(plan)[0] > 0


@pytest.mark.parametrize("cfg", STAGGERED, ids=lambda c: c.describe())
def test_selects_are_those_the_lowering_emits(cfg):
  """One vector select per store per choice bit level (2**bits - 1), and in PTX at
  most ``selects`` 32-bit ones (LLVM folds those consecutive stores share)."""
  orders = config_plan(cfg).store_orders
  mlir, ptx = kernel_text(cfg, "mlir"), kernel_text(cfg, "ptx")
  assert mlir.count("arith.select") == sum(o.stores * ((1 << len(o.lane_bits)) - 1)
                                           for o in orders)
  assert 0 < len(re.findall(r"\bselp\.", ptx)) <= sum(o.selects for o in orders)


def test_tmem_native_reduction_order_is_recorded_exactly():
  """int32 add from TMEM_NATIVE_V4, 128x128, swizzle 128: lanes L, L+8, L+16,
  L+24 hit the same banks for every register, so the order staggers on lane bits
  3 and 4 (3 selects per 4-byte store) and removes 3 of every 4 wavefronts."""
  (order,) = config_plan(STAGGERED[0]).store_orders
  assert order == StoreOrder("red.async", 4, 128, (3, 4), 384, 1536)
  assert order.pays   # 1536 wavefronts saved >= 4 warps x 384 selects


def test_an_order_that_does_not_pay_says_so():
  cheap = StoreOrder("st.async", 8, 32, (1, 2), 192, 256)
  assert not cheap.pays
  assert "costs more than it saves" in cheap.describe()
  assert "register order" in StoreOrder("st.async", 8, 32, (), 0, 0).describe()


def test_a_conflict_free_register_order_records_nothing():
  assert config_plan(S()).store_orders == ()            # bf16 WGMMA, swizzle 128
  assert config_plan(S(dtype="float32", optimized=False)).store_orders == ()


def test_summary_shows_the_order_and_its_price():
  text = config_plan(STAGGERED[0]).summary()
  assert ("store order: 128 x red.async 4B: staggered on lane bits (3, 4): "
          "+384 selects per thread, -1536 wavefronts (pays)") in text
