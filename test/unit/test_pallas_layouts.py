"""Layout inference for this project's Warpgroup store (lowering/pallas_layouts.py): the
constraint admits exactly the layouts the planner stores; upstream's ops keep upstream's.

The end-to-end proof is the layout sweep of test/emu/test_pallas_execution.py (every
layout upstream's inference rejects, run in the PTX checker in both semantics) and the
inferred layouts in test/lit/pallas.py."""

import dataclasses

import pytest

from mosaic_async_store import compat
from mosaic_async_store import pallas as mas_pallas
from mosaic_async_store.demo.config import resolve_layout

pl = pytest.importorskip("mosaic_async_store.lowering.pallas_layouts")
CS, RULES = compat.layout_constraints()
OPTIMIZED = compat.transfer_optimized_values()


def _storable(layout, shape, dtype, tiling, swizzle, strides=None, optimized="required",
              atomic=None):
  strides = strides or tuple(int(s) for s in _row_major(shape))
  return pl.storable(resolve_layout(layout, shape, dtype), shape, strides, tiling, swizzle,
                     dtype, atomic, OPTIMIZED[optimized])


def _row_major(shape):
  out, acc = [], 1
  for s in reversed(shape):
    out.append(acc)
    acc *= s
  return tuple(reversed(out))


@pytest.mark.parametrize("layout, dtype", [("WGMMA", "float64"), ("WGMMA_UPCAST_4X", "int32"),
                                           ("TMEM_NATIVE", "bfloat16")])
def test_layouts_upstream_cannot_transfer_are_storable(layout, dtype):
  bits = {"float64": 64, "int32": 32, "bfloat16": 16}[dtype]
  assert _storable(layout, (128, 128), dtype, (8, 128 * 8 // bits), 128)


def test_what_the_planner_refuses_is_not_storable():
  # 4-bit halves 64 threads apart (a column-major STRIDED destination): no lane pair can
  # assemble the bytes, so the planner refuses and the constraint does not hold.
  assert not _storable("STRIDED", (4, 2048), "int4", (), None, strides=(1, 4),
                       optimized="unoptimized")
  assert not _storable("WGMMA", (64, 128), "bfloat16", (8, 48), 128)  # tile does not divide


def test_downgradable_accepts_a_plan_with_bank_conflicts():
  # float64 (64, 16) with a 16-byte swizzle has no conflict-free order.
  assert not _storable("WGMMA", (64, 16), "float64", (8, 2), 16, optimized="required")
  assert _storable("WGMMA", (64, 16), "float64", (8, 2), 16, optimized="unoptimized")
  if "downgradable" not in OPTIMIZED:
    pytest.skip(f"jax {compat.jax_version()}: optimized is a bool (no DOWNGRADABLE)")
  assert _storable("WGMMA", (64, 16), "float64", (8, 2), 16, optimized="downgradable")


def test_optimized_has_each_versions_meaning():
  # jax 0.12 made `optimized` a plain bool, unset meaning "required" (no downgrade).
  downgrades = compat.jax_version() < (0, 12)
  assert compat.unset_optimized_downgrades() is downgrades
  assert ("downgradable" in OPTIMIZED) is downgrades
  assert compat.transfer_optimized_tries(OPTIMIZED["required"]) == (True,)
  assert compat.transfer_optimized_tries(OPTIMIZED["unoptimized"]) == (False,)


def test_atomics_are_judged_with_their_forms():
  assert _storable("WGMMA", (64, 64), "int32", (8, 32), 128, atomic="min")
  assert not _storable("WGMMA", (64, 64), "float32", (8, 32), 128, atomic="and")


def test_storable_is_a_transfer_constraint_with_the_planner_as_judge():
  assert issubclass(pl.Storable, CS.IsTransferableSmemRegisters)
  fields = {f.name for f in dataclasses.fields(pl.Storable)}
  assert {"dtype", "atomic", "shape", "strides", "bitwidth", "optimized"} <= fields


def test_the_rule_dispatches_on_the_op():
  """Importing the Pallas face's rules puts the dispatcher in upstream's place; it
  sends this project's ops (marked, or every op after install()) to our constraints."""
  mas_pallas.is_installed()  # loads lowering/pallas.py
  rule = RULES["mosaic_gpu.async_store_smem"]
  assert rule.__module__ == pl.__name__
  assert pl._upstream_rule is not rule


def test_a_cast_layout_the_planner_refuses_gets_the_planners_error():
  """float64 WGMMA into an unswizzled (8, 2)-tiled ref has no conflict-free order: fixed
  by a layout_cast, Warpgroup semantics refuses it with the planner's AsyncStoreError,
  as Lane semantics does (not with upstream's "Failed to infer ...")."""
  from kernel_text import pallas_module
  from mosaic_async_store.errors import AsyncStoreError
  for semantics in ("lane", "warpgroup"):
    with compat.enable_x64(), pytest.raises(AsyncStoreError) as e:
      pallas_module(semantics=semantics, dtype="float64", shape=(64, 16), swizzle=None,
                    tiling=(8, 2), layout="WGMMA")
    assert e.value.param == "optimized" and "pass optimized=False" in str(e.value)


def test_the_dialect_rule_downgrades_an_unset_optimized_only_before_jax_012():
  from mosaic_async_store.errors import AsyncStoreError
  from mosaic_async_store.lowering.pallas import retries_unoptimized
  conflicts = AsyncStoreError("no conflict-free plan", param="optimized", value=True)
  other = AsyncStoreError("bad swizzle", param="swizzle", value=48)
  assert retries_unoptimized(None, conflicts) is (compat.jax_version() < (0, 12))
  assert not retries_unoptimized(True, conflicts)    # asked for: never downgraded
  assert not retries_unoptimized(None, other)
