"""Property tests of the store planner (pure NumPy, no MLIR, no GPU).

Hypothesis draws a layout, dtype, shape, swizzle, destination orientation,
atomic op and target; for every plan the planner produces, the static
guarantees that ``plan.verify`` promises are re-checked here by an independent simulation:
every destination byte written exactly once, alignment, no instruction
crossing a 16-byte swizzle chunk, legal async widths, exact tx accounting,
no bank conflicts when optimized, silent replicas.  Refusals must be
AsyncStoreErrors that are not internal planner defects.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mosaic_async_store.plan import geometry
from mosaic_async_store.demo.config import resolve_layout
from mosaic_async_store.plan.dtypes import as_dtype
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.plan.planner import plan_store
from mosaic_async_store.plan.validate import default_ref_shape

_TILED = {  # layout -> base tile (rows, cols)
    "WGMMA": (64, 8), "WGMMA_8BIT": (64, 16), "WGMMA_UPCAST_2X": (64, 16),
    "WGMMA_UPCAST_4X": (64, 32), "WGMMA_TRANSPOSED": (64, 8),
    "WGMMA_ACC_32BIT": (64, 8), "TCGEN05": (128, 8), "TCGEN05_TRANSPOSED": (128, 8),
    "TMEM_NATIVE_V1": (128, 1), "TMEM_NATIVE_V2": (128, 2),
    "TMEM_NATIVE_V4": (128, 4), "TMEM_NATIVE_V8": (128, 8),
    "STRIDED": (64, 8), "SPLAT": (64, 8),
}
_ONE_D = {"WGMMA_ROW": 64, "WGMMA_COL": 8, "TCGEN05_ROW": 128, "TCGEN05_COL": 8}
_REPLICATED = tuple(_ONE_D)
_DTYPES = ("f64", "i64", "f32", "i32", "u32", "bf16", "f16", "i16", "f8e4m3fn",
           "f8e5m2", "i8", "u8", "i4", "u4", "f4e2m1fn")
_ATOMICS = (None, None, None, "add", "min", "max", "and", "or", "xor", "inc", "dec")
# Small plans keep the 200 examples fast; larger ones (past numpy#31980's 8192)
# are covered by test_vector_length_one_beyond_8192_elements and the matrix.
_MAX_ELEMENTS = 4096


def _swizzle(offset, swizzle):
  """The swizzle written out again: 16-byte chunk index ^= (offset / 128) mod n."""
  offset = np.asarray(offset, dtype=np.int64)
  if not swizzle or swizzle == 16:
    return offset
  chunks = swizzle // 16
  chunk = (offset // 16) % chunks
  row = (offset // 128) % chunks
  return offset - 16 * chunk + 16 * (chunk ^ row)


@st.composite
def store_cases(draw):
  """(layout name, shape, dtype, swizzle, transposed, atomic, peer, optimized)."""
  dtype = draw(st.sampled_from(_DTYPES))
  bits = as_dtype(dtype).bits
  layout = draw(st.sampled_from(sorted(_TILED) + sorted(_ONE_D)))
  atomic, peer = draw(st.sampled_from(_ATOMICS)), draw(st.booleans())
  optimized = draw(st.booleans())
  if layout in _ONE_D:
    shape = (_ONE_D[layout] * draw(st.sampled_from((1, 2, 4, 8))),)
    return layout, shape, dtype, None, False, atomic, peer, optimized
  swizzle = draw(st.sampled_from((None, 16, 32, 64, 128)))
  transposed = swizzle is not None and draw(st.booleans())
  sw_cols = swizzle * 8 // bits if swizzle else 1
  rows, cols = _TILED[layout]
  rows = math.lcm(rows, 8 if swizzle else 1, sw_cols if transposed else 1)
  cols = math.lcm(cols, sw_cols, 8 if transposed else 1)
  if layout in ("STRIDED", "SPLAT"):
    cols = math.lcm(cols, 16)
  shape = (rows * draw(st.sampled_from((1, 2))), cols * draw(st.sampled_from((1, 2, 4))))
  assume(math.prod(shape) <= _MAX_ELEMENTS)
  return layout, shape, dtype, swizzle, transposed, atomic, peer, optimized


def _transposed_ref(shape, dtype, swizzle):
  """The (shape, strides) of a transposed view of a row-major tiled allocation,
  as demo/kernel.py builds it with memref_transpose."""
  alloc, _ = default_ref_shape(tuple(shape[::-1]), as_dtype(dtype), swizzle)
  strides = [math.prod(alloc[i + 1:]) for i in range(len(alloc))]
  perm = [1, 0, 3, 2]
  return tuple(alloc[p] for p in perm), tuple(strides[p] for p in perm)


def _plan(case):
  layout, shape, dtype, swizzle, transposed, atomic, peer, optimized = case
  kwargs = {}
  if transposed:
    kwargs["ref_shape"], kwargs["ref_strides"] = _transposed_ref(shape, dtype, swizzle)
  return plan_store(resolve_layout(layout, shape, dtype), shape, dtype, swizzle=swizzle,
                    optimized=optimized, atomic=atomic, peer=peer, **kwargs)


def _expected_bytes(case) -> np.ndarray:
  """Swizzled byte addresses of every element, from shape/strides alone."""
  _, shape, dtype, swizzle, transposed, *_ = case
  bits = as_dtype(dtype).bits
  flat = np.arange(math.prod(shape))
  if len(shape) == 1:
    elem = flat
  else:
    i, j = flat // shape[1], flat % shape[1]
    if transposed:
      i, j = j, i                      # the allocation is (cols, rows)
    minor = shape[0] if transposed else shape[1]
    tc = swizzle * 8 // bits if swizzle else minor
    tr = 8 if swizzle else 1
    elem = ((i // tr) * (minor // tc) + j // tc) * (tr * tc) + (i % tr) * tc + j % tc
  first = elem * bits // 8
  return _swizzle(np.unique(first[:, None] + np.arange(max(1, bits // 8))), swizzle)


def _written(plan) -> np.ndarray:
  writers = np.flatnonzero(plan.registers.writer)
  out = [_swizzle(ins.dst[writers], plan.geometry.swizzle)[:, None] + np.arange(ins.width)
         for ins in plan.instructions]
  return np.concatenate([o.ravel() for o in out]) if out else np.zeros(0, np.int64)


def _planned(case):
  try:
    return _plan(case)
  except AsyncStoreError as e:
    assert "internal planner defect" not in str(e), (case, str(e))
    assume(False)


def _check_bytes_written_once(case, plan, report):
  """Every destination byte exactly once, at the address shape/strides give."""
  total = math.prod(case[1]) * as_dtype(case[2]).bits // 8
  written = _written(plan)
  assert written.size == total == plan.total_bytes == report.total_bytes
  assert np.unique(written).size == written.size, "a byte is written twice"
  np.testing.assert_array_equal(np.sort(written), np.sort(_expected_bytes(case)))


def _check_alignment(plan):
  """Aligned to the width, inside one 16-byte chunk, legal async widths."""
  writers = np.flatnonzero(plan.registers.writer)
  for ins in plan.instructions:
    dst = ins.dst[writers]
    addr = plan.geometry.byte_address(dst)
    np.testing.assert_array_equal(addr, _swizzle(dst, plan.geometry.swizzle))
    assert not np.any(addr % ins.width), ins.opcode
    assert np.all(dst // 16 == (dst + ins.width - 1) // 16), ins.opcode
    assert np.all(addr // 16 == (addr + ins.width - 1) // 16), ins.opcode
    if ins.is_async:
      assert ins.width in (4, 8, 16), ins.opcode
    assert ins.kind in ("st.async", "red.async", "st", "red")


def _check_tx(case, plan, report):
  """Each writer announces exactly its async bytes; replicas announce nothing."""
  writer = plan.registers.writer
  per_thread = np.array([plan.bytes_for_thread(t) for t in range(geometry.WARPGROUP_SIZE)])
  from_instructions = sum(i.width for i in plan.instructions if i.is_async)
  assert per_thread.sum() == from_instructions * int(writer.sum())
  assert per_thread.sum() == plan.async_bytes == report.async_bytes
  assert set(per_thread[writer]) <= {from_instructions}
  assert not per_thread[~writer].any()
  atomic = case[5]
  if atomic is None:
    assert {i.kind for i in plan.instructions} <= {"st.async", "st"}
  else:
    assert all(i.op == atomic and i.kind in ("red.async", "red")
               for i in plan.instructions)
  assert plan.needs_release_arrive == any(not i.is_async for i in plan.instructions)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(store_cases())
def test_plan_properties(case):
  """All static guarantees on one drawn plan (one plan: verify() is the cost)."""
  plan = _planned(case)
  report = plan.verify()
  _check_bytes_written_once(case, plan, report)
  _check_alignment(plan)
  _check_tx(case, plan, report)
  if case[-1]:  # optimized=True
    assert report.bank_conflicts == 0


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_REPLICATED), st.sampled_from(_DTYPES), st.sampled_from((1, 2, 4)),
       st.booleans())
def test_replicas_announce_nothing(layout, dtype, mult, peer):
  shape = (_ONE_D[layout] * mult,)
  plan = _planned((layout, shape, dtype, None, False, None, peer, False))
  writer = plan.registers.writer
  assert 0 < writer.sum() < geometry.WARPGROUP_SIZE  # replicas exist and stay silent
  for t in np.flatnonzero(~writer):
    assert plan.bytes_for_thread(int(t)) == 0
  assert plan.total_bytes == math.prod(shape) * as_dtype(dtype).bits // 8
  plan.verify()


# --- geometry.swizzle_bytes -------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.sampled_from((32, 64, 128)), st.integers(0, 1 << 16))
def test_swizzle_is_an_involution_within_its_block(swizzle, block):
  span = swizzle * 8                      # 1024 bytes for the 128-byte swizzle
  offsets = block * span + np.arange(span)
  once = geometry.swizzle_bytes(offsets, swizzle)
  np.testing.assert_array_equal(geometry.swizzle_bytes(once, swizzle), offsets)
  assert np.all(once // span == block)    # stays inside its block
  np.testing.assert_array_equal(np.sort(once), offsets)
  np.testing.assert_array_equal(once, _swizzle(offsets, swizzle))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from((None, 16, 32, 64, 128)), st.integers(0, (1 << 20) - 1))
def test_swizzle_permutes_whole_16_byte_chunks(swizzle, offset):
  chunk = (offset // 16) * 16 + np.arange(16)
  moved = geometry.swizzle_bytes(chunk, swizzle)
  assert moved[0] % 16 == 0
  np.testing.assert_array_equal(moved, moved[0] + np.arange(16))
  if swizzle in (None, 16):
    np.testing.assert_array_equal(moved, chunk)
  else:  # rows of 128 bytes: the chunk moves within its row, by the row's index
    assert moved[0] // 128 == chunk[0] // 128
    assert (moved[0] // 16) % 8 == ((chunk[0] // 16) % 8) ^ ((chunk[0] // 128) % (swizzle // 16))


def test_swizzle_128_known_values():
  # Row 1 of a 1024-byte block swaps chunk 0 with chunk 1; row 7 reverses them.
  assert geometry.swizzle_bytes(128, 128) == 144
  assert geometry.swizzle_bytes(7 * 128 + 3, 128) == 7 * 128 + 7 * 16 + 3
  assert geometry.swizzle_bytes(1024 + 128, 128) == 1024 + 144
  assert geometry.swizzle_bytes(5 * 128, 32) == 5 * 128 + 16


# --- refusals ---------------------------------------------------------------


def _refusal(layout, shape, dtype, **kwargs) -> str:
  with pytest.raises(AsyncStoreError) as info:
    plan_store(resolve_layout(layout, shape, dtype), shape, dtype, **kwargs)
  return str(info.value)


def test_odd_count_of_4bit_elements_names_dtype_shape_bits_and_fixes():
  layout = resolve_layout("WGMMA", (64, 8), "i4")
  with pytest.raises(AsyncStoreError) as info:
    plan_store(layout, (3, 5), "i4")
  message = str(info.value)
  assert info.value.param == "shape"
  assert "integer bytes" in message
  assert "int4" in message and "(3, 5)" in message and "60 bits" in message
  assert "pack pairs of 4-bit values" in message and "int8" in message


def test_atomic_min_on_float32_is_refused_with_the_allowed_ops():
  message = _refusal("WGMMA", (64, 32), "f32", atomic="min", swizzle=128)
  assert "atomic=min" in message and "float32" in message
  assert "only add" in message and "Fix:" in message


def test_atomic_on_int8_is_refused():
  message = _refusal("WGMMA_8BIT", (64, 128), "i8", atomic="add", swizzle=128)
  assert "atomic=add" in message and "int8" in message
  assert "only a plain store for int8" in message


def test_swizzle_128_on_a_64_byte_wide_tile_is_refused():
  # bf16 tiles of (8, 32) are 64 bytes wide: only a 64-byte swizzle matches.
  message = _refusal("WGMMA", (64, 128), "bf16", swizzle=128, ref_shape=(8, 4, 8, 32))
  assert "swizzle=128" in message and "64 contiguous" in message
  assert "swizzle=64" in message
  plan = plan_store(resolve_layout("WGMMA", (64, 128), "bf16"), (64, 128), "bf16",
                    swizzle=64, ref_shape=(8, 4, 8, 32))
  assert plan.verify().total_bytes == 64 * 128 * 2


def test_vector_length_one_beyond_8192_elements():
  """Regression: numpy 2.4's unravel_index is wrong for (N, 1)-shaped indices
  past 8192 (numpy#31980); these plans were refused as planner defects."""
  for layout in ("TMEM_NATIVE_V1", "WGMMA_ACC_32BIT"):
    shape = (128, 128)
    plan = plan_store(resolve_layout(layout, shape, "f32"), shape, "f32", optimized=False)
    assert plan.verify().total_bytes == 128 * 128 * 4
  # TMEM_NATIVE_V1: each thread holds one 512-byte row, so 32 x 16-byte stores.
  assert [(i.kind, i.width) for i in plan_store(
      resolve_layout("TMEM_NATIVE_V1", shape, "f32"), shape, "f32",
      optimized=False).instructions] == [("st.async", 16)] * 32
