"""Layout inference for this project's Warpgroup store (lowering/pallas_layouts.py): the
constraint admits exactly the layouts the planner stores; upstream's ops keep upstream's.

The end-to-end proof is the layout sweep of test/emu/test_pallas_execution.py (every
layout upstream's inference rejects, run in the PTX checker in both semantics) and the
inferred layouts in test/lit/pallas.py."""

import dataclasses
import math

import pytest

from mosaic_async_store import compat
from mosaic_async_store import pallas as mas_pallas
from mosaic_async_store.demo.config import resolve_layout

pl = pytest.importorskip("mosaic_async_store.lowering.pallas_layouts")
CS, RULES = compat.layout_constraints()
OPTIMIZED = compat.transfer_optimized_values()


def _storable(layout, shape, dtype, tiling, swizzle, strides=None, optimized="required",
              atomic=None):
  strides = strides or tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
  return pl.storable(resolve_layout(layout, shape, dtype), shape, strides, tiling, swizzle,
                     dtype, atomic, OPTIMIZED[optimized])



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


def _constant_store_module(semantics, shape, dtype):
  """A 2-CTA Pallas kernel that stores ``jnp.full(shape, 3, dtype)`` (a splat: a
  constant has no other layout) into the peer's SMEM; its Mosaic module."""
  import jax
  import jax.numpy as jnp
  from jax.experimental.pallas import mosaic_gpu as plgpu

  from mosaic_async_store.tools.pallas_capture import (lower_pallas_to_mosaic_modules,
                                                       lower_warpgroup_dialect)
  dt = jnp.dtype(dtype)

  def body(o_ref, smem, bar):
    del o_ref
    mas_pallas.async_store_smem(jnp.full(shape, 3, dt), smem, bar.at[0],
                                cluster_idx=1 - jax.lax.axis_index("cluster"),
                                cluster_dim="cluster")
    plgpu.barrier_wait(bar.at[0])

  sem = {"lane": plgpu.LoweringSemantics.Lane,
         "warpgroup": plgpu.LoweringSemantics.Warpgroup}[semantics]
  kernel = plgpu.kernel(
      body, out_type=jax.ShapeDtypeStruct(shape, dt), grid=(2,), grid_names=("g",),
      cluster=(2,), cluster_names=("cluster",),
      scratch_types=[plgpu.SMEM(shape, dt), plgpu.Barrier(num_arrivals=1, num_barriers=1)],
      compiler_params=plgpu.CompilerParams(lowering_semantics=sem))
  [module] = lower_pallas_to_mosaic_modules(kernel)
  return lower_warpgroup_dialect(module) if semantics == "warpgroup" else module


@pytest.mark.parametrize("shape, dtype, param, words", [
    ((1,), "int4", "shape", ("shape=(1,)", "1 elements of int4 are 4 bits", "Fix: pack pairs")),
    ((2,), "int8", "shape", ("shape=(2,)", "a splat whose element count is a multiple of 128")),
    # A 128-element int4 splat: half a byte per thread.  WGMMA_ROW could hold (128,)
    # int4, but inference gives a splat constant only the splat layout.
    ((128,), "int4", "value", ("shape (128,)", "whole bytes per thread",
                               "a multiple of 256 elements", "Fix: store a splat of 256")),
])
def test_a_store_no_layout_can_hold_gets_the_planners_error(shape, dtype, param, words):
  """No layout Mosaic GPU ships is storable: Warpgroup semantics refuses with the
  planner's AsyncStoreError for the value's natural layout (a splat), word for word
  what Lane semantics says, where upstream's inference said "Failed to infer a
  possible set of layouts"."""
  from mosaic_async_store.errors import AsyncStoreError
  messages = {}
  for semantics in ("lane", "warpgroup"):
    with pytest.raises(AsyncStoreError) as e:
      _constant_store_module(semantics, shape, dtype)
    messages[semantics] = str(e.value)
  assert messages["warpgroup"] == messages["lane"]
  assert all(w in messages["warpgroup"] for w in words), messages["warpgroup"]
  assert e.value.param == param


def test_a_store_some_layout_can_hold_is_left_to_inference():
  """256 int4 elements: a splat the planner stores (whole bytes per thread) lowers; the
  check that refuses unstorable stores does not refuse it."""
  module = _constant_store_module("warpgroup", (256,), "int4")
  assert "mosaic_gpu.async_store_smem" not in str(module)  # lowered, by this project


def test_natural_layouts_start_with_what_inference_proposes():
  """A splat constant's only layout is the splat; another value's natural one is
  strided for an untiled ref and WGMMA for a tiled one; each layout Mosaic GPU ships
  is a candidate once."""
  from jaxlib.mlir import ir
  from jaxlib.mlir.dialects import arith, func, vector
  fa = compat.fragmented_array()
  with compat.make_ir_context(), ir.Location.unknown():
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
      bf16 = ir.BF16Type.get()
      ty = ir.VectorType.get((256,), bf16)
      f = func.FuncOp("f", ir.FunctionType.get([ty], []))
      with ir.InsertionPoint(f.add_entry_block()):
        splat = arith.constant(ty, ir.DenseElementsAttr.get_splat(ty, ir.FloatAttr.get(bf16, 1.0)))
        broadcast = vector.broadcast(ty, arith.constant(bf16, 1.0))
        argument = f.arguments[0]
        for value in (splat, broadcast):   # upstream's rules assign the splat outright
          only = pl._layout_candidates(value, tiled=True)
          assert len(only) == 1 and isinstance(only[0], fa.WGSplatFragLayout)
        untiled = pl._layout_candidates(argument, tiled=False)
        tiled = pl._layout_candidates(argument, tiled=True)
        func.ReturnOp([])
  assert isinstance(untiled[0], fa.WGStridedFragLayout) and tiled[0] == fa.WGMMA_LAYOUT
  assert isinstance(tiled[-1], fa.WGSplatFragLayout) and sorted(map(repr, tiled)) == sorted(
      map(repr, untiled))
  assert len(set(map(repr, tiled))) == len(tiled)
