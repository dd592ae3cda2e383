"""Threads holding under a word: gathering lanes take their partners' registers.

Without it, such pieces (a row of one bf16 or int8 per thread, tiny 4-bit
tiles, replicated 1-D layouts) would go as plain st.shared::cluster plus a
release arrive.  Lanes with the gather mask bit clear receive lane ``t ^ mask``'s
registers with shfl.sync.bfly and write for both; the partners announce 0 bytes.
"""

import ml_dtypes
import numpy as np
import pytest

from mosaic_async_store.demo.config import resolve_layout
from mosaic_async_store.plan.planner import plan_store
from mosaic_async_store.plan.executor import simulate_store
from mosaic_async_store.plan.register_steps import Gather


@pytest.mark.parametrize("dtype,gathers,writers", [("bf16", (1,), 64), ("i8", (1, 2), 32)])
def test_one_element_per_thread_becomes_word_stores(dtype, gathers, writers):
  shape = (128, 1)
  plan = plan_store(resolve_layout("TMEM_NATIVE_V1", shape, dtype), shape, dtype, swizzle=None)
  report = plan.verify()
  assert plan.register_steps == tuple(Gather(m) for m in gathers)
  assert int(plan.registers.writer.sum()) == writers
  assert {(i.kind, i.width) for i in plan.instructions} == {("st.async", 4)}
  assert not plan.needs_release_arrive
  per_thread = [plan.bytes_for_thread(t) for t in range(128)]
  assert sorted(set(per_thread)) == [0, 4] and sum(per_thread) == report.async_bytes


def test_replicated_row_gathers_only_from_distinct_lanes():
  shape = (64,)
  plan = plan_store(resolve_layout("WGMMA_ROW", shape, "i8"), shape, "i8", swizzle=None)
  plan.verify()
  assert plan.register_steps and {i.kind for i in plan.instructions} == {"st.async"}
  assert plan.total_bytes == plan.async_bytes == 64


def test_plans_with_word_pieces_do_not_gather():
  shape = (64, 128)
  plan = plan_store(resolve_layout("WGMMA", shape, "bf16"), shape, "bf16", swizzle=128)
  assert plan.register_steps == () and int(plan.registers.writer.sum()) == 128


def test_gathered_store_lands_every_element():
  shape = (128, 1)
  array = np.random.default_rng(2).normal(size=shape).astype(ml_dtypes.bfloat16)
  got = simulate_store(array, resolve_layout("TMEM_NATIVE_V1", shape, array.dtype))
  assert np.array_equal(got.view(np.uint16), array.view(np.uint16))
