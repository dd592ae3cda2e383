"""Layout inference for this project's Warpgroup store: the layouts its planner stores.

Under Warpgroup semantics Mosaic infers each value's register layout from
constraints that every op contributes.  Upstream's rule for
``mosaic_gpu.async_store_smem`` admits the layouts upstream's store can transfer
(``IsTransferableSmemRegisters``: no 64-bit data, no TMEM-native layouts, no
WGMMA_UPCAST_4X for 32-bit data, ...) and no strided or splat layout.  This
project's op gets the constraints its planner really has instead:
``Storable`` holds for a layout exactly when ``plan_store`` plans (and verifies)
the store of that layout, dtype and atomic into the destination's shape,
strides, tiling and swizzle.  So inference succeeds wherever the Lane path
stores, and steers free layouts to ones the planner can store.

A value whose layout the kernel fixed with ``plgpu.layout_cast`` gets no layout
constraint from the store: inference keeps the cast's layout, and the lowering
refuses one the planner cannot store with the planner's own ``AsyncStoreError``
instead of upstream's "Failed to infer a possible set of layouts".

Ops that are not this project's (upstream's, before ``install()``) keep
upstream's rule; ``register(is_ours)`` puts a dispatcher in its place.
"""

from __future__ import annotations

import dataclasses

from jaxlib.mlir import ir

from mosaic_async_store import compat
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.lowering.store import dtype_name
from mosaic_async_store.plan.planner import plan_store

__all__ = ["Storable", "op_signed_and_atomic", "register", "storable"]

_OP = "mosaic_gpu.async_store_smem"
_cs, _RULES = compat.layout_constraints()


def op_signed_and_atomic(op) -> tuple[bool, str | None]:
  """(signedness of integer data, atomic op name or None) of an async_store_smem op:
  this project's ride on ``mas.signed`` / ``mas.atomic`` attributes (the dialect's
  atomic enum lacks inc/dec, and Warpgroup vectors are signless); upstream's op,
  after install(), has its ``atomic_type``."""
  attrs = getattr(op, "operation", op).attributes
  signed = ir.BoolAttr(attrs["mas.signed"]).value if "mas.signed" in attrs else True
  if "mas.atomic" in attrs:
    return signed, ir.StringAttr(attrs["mas.atomic"]).value
  if op.atomic_type is not None:
    dl = compat.pallas_internals().dialect_lowering
    return signed, str(dl.mgpu.AtomicOpType(op.atomic_type.value))
  return signed, None


def storable(layout, shape, strides, tiling, swizzle, dtype: str, atomic, optimized) -> bool:
  """Whether the planner plans the store of ``layout`` registers into a ref of logical
  ``shape`` and ``strides``, tiled by ``tiling`` (() for none) with ``swizzle``.

  ``optimized``: the constraint's value, read by ``compat.transfer_optimized_tries``
  (jax 0.10/0.11: an ``OptimizedTransferKind``, whose DOWNGRADABLE accepts a plan with
  bank conflicts where no conflict-free one exists, as the lowering rule does; jax
  0.12: a bool)."""
  ref_shape, ref_strides = tuple(shape), tuple(strides)
  if tiling:
    if any(s % t for s, t in zip(shape[-len(tiling):], tiling)):
      return False
    ref_shape = (*shape[:-len(tiling)], *(s // t for s, t in zip(shape[-len(tiling):], tiling)),
                 *tiling)
    ref_strides = compat.tile_strides(strides, tiling)
  for conflict_free in compat.transfer_optimized_tries(optimized):
    try:
      plan_store(layout, tuple(shape), dtype, swizzle=swizzle if tiling else None,
                 tiling_rank=len(tiling) or None, optimized=conflict_free, atomic=atomic,
                 ref_shape=ref_shape, ref_strides=ref_strides).verify()
      return True
    except (AsyncStoreError, TypeError):
      continue
  return False


@dataclasses.dataclass(frozen=True)
class Storable(_cs.IsTransferableSmemRegisters):
  """``IsTransferableSmemRegisters`` with this project's planner as the judge (so every
  place inference treats a transfer constraint treats this one alike)."""

  dtype: str = "int8"
  atomic: str | None = None

  def _is_supported_smem_transfer(self, smem_layout, reg_layout) -> bool:
    try:
      tiling, swizzle = compat.smem_tiling_and_swizzle(smem_layout, self.bitwidth)
    except ValueError:  # a minor tile that is not whole bytes
      return False
    return storable(reg_layout, self.shape, self.strides, tiling, swizzle, self.dtype,
                    self.atomic, self.optimized)

  def __str__(self):
    return f"Storable({self.source} ⟶ {self.target}, {self.dtype})"


def _cast_fixed(value: ir.Value) -> bool:
  """Whether ``value`` is the result of a ``layout_cast`` (a layout the kernel chose)."""
  owner = value.owner
  name = getattr(getattr(owner, "operation", owner), "name", "")
  return name == "mosaic_gpu.layout_cast"


def _constraint_system(ctx, op):
  """This project's op: upstream's store constraints with ``Storable`` for upstream's
  transfer check, and none of its strided/splat exclusions (the planner stores them)."""
  system, sites = compat.vector_store_constraints(ctx, op)
  if _cast_fixed(op.valueToStore):
    keep = [c for c in system.constraints if not isinstance(c, _cs.IsTransferableSmemRegisters)]
    return dataclasses.replace(system, constraints=keep), sites
  signed, atomic = op_signed_and_atomic(op)
  element = ir.VectorType(op.valueToStore.type).element_type
  dtype = dtype_name(element, signed if isinstance(element, ir.IntegerType) else None)
  constraints = [
      Storable(**{f.name: getattr(c, f.name) for f in dataclasses.fields(c)},
               dtype=dtype, atomic=atomic)
      if isinstance(c, _cs.IsTransferableSmemRegisters) else c
      for c in system.constraints]
  return dataclasses.replace(system, constraints=constraints), sites


_upstream_rule = _RULES[_OP]


def register(is_ours) -> None:
  """Puts a dispatcher in upstream's place: ``is_ours(op)`` ops get this project's
  constraints, the others upstream's."""
  def rule(ctx, op):
    return (_constraint_system if is_ours(op) else _upstream_rule)(ctx, op)
  _RULES[_OP] = rule
