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
instead of upstream's "Failed to infer a possible set of layouts".  A store for
which no layout is storable at all (one int4 element; a splat of 2 bytes) is
refused the same way while its constraints are derived (``unstorable``): with
the planner's error for the value's most natural layout, since no choice of
inference could succeed.  A splat (a splat constant, a broadcast scalar) can only
be the splat layout: upstream's rules for those ops assign it, so a splat the
planner cannot store (128 int4 elements: half a byte per thread) is refused with
the planner's error, even where another layout could hold the same shape.

Ops that are not this project's (upstream's, before ``install()``) keep
upstream's rule; ``register(is_ours)`` puts a dispatcher in its place.
"""

from __future__ import annotations

import dataclasses
import functools

from jaxlib.mlir import ir

from mosaic_async_store import compat
from mosaic_async_store.errors import AsyncStoreError, refuse
from mosaic_async_store.lowering.store import dtype_name
from mosaic_async_store.plan.planner import plan_store

__all__ = ["Storable", "op_signed_and_atomic", "register", "storable", "unstorable"]

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
  return _storable(layout, tuple(shape), tuple(strides), tuple(tiling), swizzle, dtype,
                   atomic, optimized)


# Inference asks again and again about the same few layouts (each candidate, each
# reduction of the system), and a plan is pure data: one per question suffices.
@functools.lru_cache(maxsize=512)
def _storable(layout, shape, strides, tiling, swizzle, dtype, atomic, optimized) -> bool:
  for conflict_free in compat.transfer_optimized_tries(optimized):
    try:
      _plan(layout, shape, strides, tiling, swizzle, dtype, atomic, conflict_free)
      return True
    except (AsyncStoreError, TypeError):
      continue
  return False


def _plan(layout, shape, strides, tiling, swizzle, dtype, atomic, conflict_free):
  """The verified plan of that store; raises the planner's refusal."""
  ref_shape, ref_strides = shape, strides
  if tiling:
    if any(s % t for s, t in zip(shape[-len(tiling):], tiling)):
      raise refuse("ref", f"tiled by {tiling}", f"a tiling that divides the value's shape "
                   f"{shape}", "allocate the ref with a tile that divides the array "
                   "(plgpu.TilingTransform)")
    ref_shape = (*shape[:-len(tiling)], *(s // t for s, t in zip(shape[-len(tiling):], tiling)),
                 *tiling)
    ref_strides = compat.tile_strides(strides, tiling)
  return plan_store(layout, shape, dtype, swizzle=swizzle if tiling else None,
                    tiling_rank=len(tiling) or None, optimized=conflict_free, atomic=atomic,
                    ref_shape=ref_shape, ref_strides=ref_strides).verify()


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
  for c in constraints:
    if isinstance(c, Storable) and (error := unstorable(op, c)) is not None:
      raise error
  return dataclasses.replace(system, constraints=constraints), sites


# Every register layout Mosaic GPU ships (upstream attribute names), in the order
# inference itself proposes them for a store into a tiled ref, then the others.
_TILED_LAYOUTS = (
    "WGMMA_LAYOUT", "WGMMA_TRANSPOSED_LAYOUT", "TCGEN05_LAYOUT", "TCGEN05_TRANSPOSED_LAYOUT",
    "WGMMA_LAYOUT_8BIT", "WGMMA_LAYOUT_UPCAST_2X", "WGMMA_LAYOUT_UPCAST_4X",
    "WGMMA_LAYOUT_ACC_32BIT", "WGMMA_ROW_LAYOUT", "WGMMA_COL_LAYOUT", "TCGEN05_ROW_LAYOUT",
    "TCGEN05_COL_LAYOUT", "TMEM_NATIVE_LAYOUT")


def unstorable(op, constraint: Storable) -> AsyncStoreError | TypeError | None:
  """The planner's refusal of ``op``'s value in its most natural layout when no layout
  Mosaic GPU ships is storable into any SMEM tiling the destination may get; None when
  one is (inference then looks for it, or fails for a reason of its own).

  Without it such a store reaches the user as upstream's "Failed to infer a possible
  set of layouts": every layout inference tries is refused, and the refusals are not
  shown.  Most natural: the splat for a splat (the only layout inference gives it),
  else the layouts inference proposes (strided for an untiled ref, WGMMA for a tiled
  one)."""
  smem = _smem_candidates(op.destination, constraint)
  if smem is None:  # transforms this check does not model: leave it to inference
    return None
  value = op.valueToStore
  layouts = _layout_candidates(value, tiled=bool(smem[0][0]))
  args = (tuple(constraint.shape), tuple(constraint.strides))
  if any(storable(layout, *args, tiling, swizzle, constraint.dtype, constraint.atomic,
                  constraint.optimized)
         for layout in layouts for tiling, swizzle in smem):
    return None
  (tiling, swizzle), layout = smem[0], layouts[0]
  try:
    _plan(layout, *args, tiling, swizzle, constraint.dtype, constraint.atomic,
          compat.transfer_optimized_tries(constraint.optimized)[-1])
  except (AsyncStoreError, TypeError) as e:
    e.add_note(f"Warpgroup layout inference: no register layout is storable for this "
               f"value; the refusal shown is the planner's for {layout}.")
    return e
  return None  # unreachable: storable() said the planner refuses it


def _layout_candidates(value: ir.Value, tiled: bool) -> list:
  """Every layout inference may give ``value``, the most natural first: for a splat
  (a splat ``arith.constant``, a scalar ``vector.broadcast``) only the splat, which
  upstream's rules for those ops assign outright; else every layout Mosaic GPU ships."""
  fa = compat.fragmented_array()
  ty = ir.VectorType(value.type)
  splat = fa.WGSplatFragLayout(shape=tuple(ty.shape))
  if _is_splat(value):
    return [splat]
  strided = [s for s in [fa.WGStridedFragLayout.from_shaped_type(ty)] if s is not None]
  named = [getattr(fa, n) for n in _TILED_LAYOUTS if hasattr(fa, n)]
  named += [fa.tmem_native_layout(v) for v in (1, 2, 4, 8)]
  ordered = [*(named + strided if tiled else strided + named), splat]
  return list(dict.fromkeys(ordered))  # some names are one layout (WGMMA_COL, TCGEN05_COL)


def _is_splat(value: ir.Value) -> bool:
  """Whether ``value`` is a constant with one value (jnp.full, a scalar broadcast)."""
  owner = getattr(value.owner, "operation", value.owner)
  name = getattr(owner, "name", "")
  if name == "arith.constant":
    try:
      return ir.DenseElementsAttr(owner.attributes["value"]).is_splat
    except ValueError:  # not dense elements
      return False
  if name in ("vector.broadcast", "vector.splat"):
    try:
      ir.VectorType(owner.operands[0].type)
    except ValueError:  # a scalar, broadcast to every element
      return True
  return False


def _smem_candidates(ref: ir.Value, constraint: Storable):
  """(tiling, swizzle) pairs the destination may get: its ``with_transforms`` (what the
  kernel allocated), or, for a ref without, none and the tilings inference conjures
  (whole swizzle rows of 128, 64 or 32 bytes); None for transforms beyond a tiling
  and a swizzle."""
  owner = getattr(ref.owner, "operation", ref.owner)
  if getattr(owner, "name", "") == "mosaic_gpu.with_transforms":
    dl = compat.pallas_internals().dialect_lowering
    transforms = owner.attributes["transforms"]
    memref_transforms = dl.memref_transforms_from_transforms_attr(transforms)
    if len(memref_transforms) > 1 or any(not hasattr(t, "tiling") for t in memref_transforms):
      return None  # e.g. a transpose: the strides this check reads would not say it
    sw = dl.swizzle_from_transforms_attr(transforms)
    swizzle = None if sw == dl.mgpu.SwizzlingMode.kNoSwizzle else int(sw.value)
    return [(tuple(memref_transforms[0].tiling) if memref_transforms else (), swizzle)]
  out = [((), None)]
  shape, bits = tuple(constraint.shape), constraint.bitwidth
  if len(shape) >= 2:
    for sw in (128, 64, 32):
      elems = sw * 8 // bits
      for tile in ((8, elems), (elems, 8)):
        if not any(d % t for d, t in zip(shape[-2:], tile)):
          out.append((tile, sw))
  return out


_upstream_rule = _RULES[_OP]


def register(is_ours) -> None:
  """Puts a dispatcher in upstream's place: ``is_ours(op)`` ops get this project's
  constraints, the others upstream's."""
  def rule(ctx, op):
    return (_constraint_system if is_ours(op) else _upstream_rule)(ctx, op)
  _RULES[_OP] = rule
