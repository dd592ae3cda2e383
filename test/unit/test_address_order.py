"""Addresses derive from the most recent base, and each base's stores issue together
(addressing.base_order), so few bases are live at once: ptxas keeps every base in a
register until its last use."""

import pytest

from mosaic_async_store.demo.config import StoreConfig, config_plan
from mosaic_async_store.plan.addressing import AddressStep, base_order

S = StoreConfig


def _max_live_bases(steps) -> int:
  """The most bases whose [creation, last use] spans overlap."""
  spans, n = [], 0
  for i, step in enumerate(steps):
    if step.kind == "offset":
      spans[step.base][1] = i
    else:
      if step.kind == "xor":
        spans[step.base][1] = i
      spans.append([i, i])
      n += 1
  return max(sum(a <= i <= b for a, b in spans) for i in range(len(steps)))


@pytest.mark.parametrize("cfg", [
    S(), S(dtype="float32"), S(dtype="float32", swizzle=32, optimized=False),
    S(dtype="int32", atomic="add", shape=(128, 128), layout="TMEM_NATIVE_V4"),
    S(dtype="int8", layout="WGMMA_8BIT", swizzle=64), S(transposed=True),
], ids=lambda c: c.describe())
def test_at_most_two_bases_are_live(cfg):
  plan = config_plan(cfg)
  plan.verify()   # replays the reordered steps against the geometry, every byte
  assert _max_live_bases(plan.address_steps) <= 2


def test_bf16_wgmma_stores_each_base_then_the_next():
  """Eight swizzle chunks (xor bases), each stored at 4 row tiles (+1024 bytes)."""
  steps = config_plan(S()).address_steps
  kinds = [s.kind for s in steps]
  assert kinds == (["compute"] + ["offset"] * 3 + (["xor"] + ["offset"] * 3) * 7)
  assert all(s.base == k // 4 for k, s in enumerate(steps) if s.kind == "offset")


def test_base_order_groups_by_base_and_keeps_order_inside():
  steps = [AddressStep("compute"), AddressStep("xor", base=0, constant=16),
           AddressStep("offset", base=0, constant=1024),
           AddressStep("offset", base=1, constant=1024),
           AddressStep("offset", base=0, constant=2048)]
  assert base_order(steps) == [0, 2, 4, 1, 3]
