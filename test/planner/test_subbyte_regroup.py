"""4-bit data whose byte halves sit in different registers of one thread.

The planner regroups such elements into one-byte virtual registers
(``subbyte.byte_registers``), within a thread or between two lanes of a warp;
the emitter assembles each byte with a shift and an OR.  Bytes that no such
regrouping can put together stay refused, with the fixes.  A lane pair that
shares a single byte (a one-column array) gathers first: one lane takes both
halves (a ``Gather`` step before the ``ByteRegroup``).
"""

import ml_dtypes
import numpy as np
import pytest

from mosaic_async_store.demo.config import StoreConfig, config_plan, resolve_layout
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.plan import subbyte
from mosaic_async_store.plan.executor import simulate_store
from mosaic_async_store.plan.geometry import RegisterMap
from mosaic_async_store.plan.planner import plan_store
from mosaic_async_store.plan.register_steps import ByteRegroup, Gather, StepDefect


@pytest.mark.parametrize("dtype", ["int4", "uint4", "float4_e2m1fn"])
@pytest.mark.parametrize("swizzle", [None, 32, 64, 128])
def test_tmem_native_v1_is_planned_with_16_byte_stores(dtype, swizzle):
  shape = (128, 256)
  plan = plan_store(resolve_layout("TMEM_NATIVE_V1", shape, dtype), shape, dtype,
                    swizzle=swizzle, optimized=swizzle is not None)
  report = plan.verify()
  assert report.total_bytes == report.async_bytes == 128 * 256 // 2
  [rg] = plan.register_steps
  assert isinstance(rg, ByteRegroup) and rg.mask == 0
  assert not plan.exchanges
  assert plan.registers.num_registers == 128          # one byte per virtual register
  assert plan.source_registers.num_registers == 256   # one nibble per real register
  assert {(i.kind, i.width) for i in plan.instructions} == {("st.async", 16)}
  assert len(plan.instructions) == 8


@pytest.mark.parametrize("dtype", [np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)])
def test_regrouped_store_lands_every_element(dtype):
  rng = np.random.default_rng(3)
  shape = (128, 64)
  info = ml_dtypes.iinfo(dtype)
  array = rng.integers(info.min, info.max + 1, size=shape).astype(dtype)
  layout = resolve_layout("TMEM_NATIVE_V1", shape, dtype)
  got = simulate_store(array, layout, swizzle=32)
  assert np.array_equal(got.astype(np.int8), array.astype(np.int8))


def test_byte_regroup_apply_orders_low_then_high():
  # Two one-nibble registers per thread: virtual byte = reg1 | reg0 << 4, so its low
  # four bits are register 1's and its high four register 0's.
  own = np.array([[[1, 0], [0, 0]]] * 2).reshape(2, 1, 2, 2)
  rg = ByteRegroup(0, own, np.full((2, 1, 2), -1), np.zeros((2, 0, 2), np.int64))
  labels = np.arange(128 * 2 * 8).reshape(128, 2, 8)  # [t, register, bit]; 4 bits used
  got = rg.apply(labels, bits=4, lanes=1)
  assert got.shape == (128, 1, 8)
  assert got[3, 0].tolist() == labels[3, 1, :4].tolist() + labels[3, 0, :4].tolist()


def test_byte_regroup_apply_refuses_what_it_cannot_run():
  own = np.array([[[5, 0], [0, 0]]] * 2).reshape(2, 1, 2, 2)  # register 5 of 2
  rg = ByteRegroup(0, own, np.full((2, 1, 2), -1), np.zeros((2, 0, 2), np.int64))
  with pytest.raises(StepDefect, match="reads an element outside the registers"):
    rg.apply(np.zeros((128, 2, 8), np.int64), bits=4, lanes=1)


def test_bytes_shared_between_threads_are_not_regrouped():
  # Thread t holds element t: every byte's halves belong to two threads.
  elements = np.arange(128).reshape(128, 1, 1)
  regs = RegisterMap(elements, np.ones(128, bool))
  bit_addr = elements * 4
  assert subbyte.byte_registers(regs, bit_addr, 4) is None


@pytest.mark.parametrize("layout,shape,transposed,swizzle", [
    ("WGMMA_TRANSPOSED", (64, 256), False, 128),
    ("TCGEN05_TRANSPOSED", (128, 256), False, 128),
    ("WGMMA", (64, 64), True, 32),
    ("TCGEN05", (128, 64), True, 32),
])
def test_halves_in_two_lanes_are_exchanged(layout, shape, transposed, swizzle):
  cfg = StoreConfig(dtype="int4", layout=layout, shape=shape, transposed=transposed,
                    swizzle=swizzle, optimized=not transposed)
  plan = config_plan(cfg)
  report = plan.verify()
  [rg] = plan.register_steps
  assert isinstance(rg, ByteRegroup) and rg.mask == 4   # rows r and r+1 sit in lanes 4 apart
  # each lane sends half of its elements, so the slots carry half the data
  assert rg.send.shape[1] * 2 == plan.source_registers.num_registers * \
      plan.source_registers.vector_length
  assert report.total_bytes == report.async_bytes == shape[0] * shape[1] // 2
  assert {i.kind for i in plan.instructions} == {"st.async"}


def test_lane_exchanged_store_lands_every_element():
  rng = np.random.default_rng(5)
  shape = (64, 256)
  dtype = np.dtype(ml_dtypes.int4)
  array = rng.integers(-8, 8, size=shape).astype(dtype)
  got = simulate_store(array, resolve_layout("WGMMA_TRANSPOSED", shape, dtype), swizzle=128)
  assert np.array_equal(got.astype(np.int8), array.astype(np.int8))


def test_bytes_no_lane_pair_can_assemble_stay_refused_with_fixes():
  # STRIDED (4, 2048) into a column-major ref: each byte holds rows 2k and 2k+1
  # of one column, and those rows sit 64 threads apart, in different warps, so
  # no shuffle can bring the halves together.
  cfg = StoreConfig(dtype="int4", shape=(4, 2048), layout="STRIDED", swizzle=None,
                    transposed=True, optimized=False)
  with pytest.raises(AsyncStoreError) as e:
    config_plan(cfg)
  assert e.value.param == "value"
  assert "gather the halves with one lane of its warp" in str(e.value)
  assert "pack pairs of 4-bit values into int8" in str(e.value)


@pytest.mark.parametrize("dtype", ["int4", "uint4", "float4_e2m1fn"])
def test_one_column_gathers_the_partner_half_first(dtype):
  # One column: lane t holds row t, so a lane pair (t, t^1) shares only one
  # byte and has nothing to give in return.  The even lane gathers its
  # partner's element (a Gather step), assembles the byte alone, then the
  # usual gathers build words: no plain store, every element lands.
  shape = (128, 1)
  layout_obj = resolve_layout("TMEM_NATIVE_V1", shape, dtype)
  plan = plan_store(layout_obj, shape, dtype, swizzle=None)
  plan.verify()
  first, rg, *_ = plan.register_steps
  assert first == Gather(1) and isinstance(rg, ByteRegroup) and rg.mask == 0
  assert {i.kind for i in plan.instructions} == {"st.async"}
  assert plan.total_bytes == plan.async_bytes == 64
  assert "register steps: gathered from lanes t^1, bytes assembled in-thread" in plan.summary()
  array = np.random.default_rng(5).integers(0, 16, size=shape).astype(np.uint8)
  array = array.view(np.dtype(getattr(ml_dtypes, dtype)))
  got = simulate_store(array, layout_obj)
  assert np.array_equal(got.view(np.uint8), array.view(np.uint8))
