"""Checks of the planner's inputs, before anything is planned or emitted.

Each check raises an AsyncStoreError (or TypeError) that names the parameter,
the value, what is allowed and a fix (see errors.refuse).
"""

from __future__ import annotations

import math

from mosaic_async_store import ptx_forms
from mosaic_async_store.dtypes import DType, as_dtype
from mosaic_async_store.errors import refuse, refuse_type
from mosaic_async_store.geometry import RefGeometry

__all__ = ["plan_inputs", "check_shape", "check_swizzle", "check_atomic",
           "default_ref_shape", "SWIZZLES"]

SWIZZLES = (16, 32, 64, 128)


def check_shape(shape, param: str = "shape") -> tuple[int, ...]:
  if isinstance(shape, int) or not hasattr(shape, "__iter__"):
    raise refuse_type(param, shape, "a tuple of positive ints", "pass e.g. (64, 128)")
  out = tuple(shape)
  if not out or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0
                        for d in out):
    raise refuse(param, out, "a non-empty tuple of positive ints",
                 "pass e.g. (64, 128)")
  return out


def check_swizzle(swizzle) -> int | None:
  if swizzle is None:
    return None
  if isinstance(swizzle, bool) or swizzle not in SWIZZLES:
    raise refuse("swizzle", swizzle, "None, 16, 32, 64 or 128 (bytes)",
                 "pass the swizzle the ref was allocated with (plgpu.SwizzleTransform)")
  return int(swizzle)


def check_atomic(atomic, dtype: DType, peer: bool):
  if atomic is None:
    return None
  if atomic not in ptx_forms.ATOMIC_OPS:
    raise refuse("atomic", atomic, "None or one of " + ", ".join(ptx_forms.ATOMIC_OPS),
                 "pick a reduction PTX supports")
  if ptx_forms.atomic_forms(atomic, dtype, peer) is None:
    ok = [op for op in ptx_forms.ATOMIC_OPS if ptx_forms.atomic_forms(op, dtype, peer)]
    allowed = ", ".join(ok) if ok else "no reduction at all"
    raise refuse("atomic", atomic,
                 f"for {dtype} only {allowed} (PTX red/red.async have no "
                 f"{atomic} for this type)",
                 "convert to int32/uint32 (any op), int64 (add, min, max, and, "
                 "or, xor), float32/float64/float16/bfloat16 (add), or store "
                 "without atomic=")
  return atomic


def default_ref_shape(shape, dtype: DType, swizzle):
  """Upstream's canonical ref for a swizzle: tiles of (8, swizzle bytes)."""
  if swizzle is None:
    return tuple(shape), 0
  minor = swizzle * 8 // dtype.bits
  if len(shape) == 1:
    tile = (minor,)
  else:
    tile = (8, minor)
  if any(d % t for d, t in zip(shape[-len(tile):], tile)):
    raise refuse("shape", tuple(shape),
                 f"trailing dims divisible by the swizzle tile {tile} "
                 f"({swizzle}-byte swizzle of {dtype})",
                 "pad the array, use a smaller swizzle, or pass ref_shape")
  outer = tuple(d // t for d, t in zip(shape[-len(tile):], tile))
  return tuple(shape[:-len(tile)]) + outer + tile, len(tile)


def _contiguous(shape):
  return tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))


def _check_swizzle_tiling(geom: RefGeometry):
  if not geom.swizzle:
    return
  sw, tile = geom.swizzle, geom.tile
  tile_strides = geom.strides[len(geom.strides) - geom.tiling_rank:] if geom.tiling_rank else ()
  minor = [d for d, s in zip(tile, tile_strides) if s == 1]
  row_bytes = minor[0] * geom.bits // 8 if minor else None
  tile_bytes = math.prod(tile) * geom.bits // 8 if tile else 0
  if row_bytes != sw or tile_bytes % (8 * sw):
    raise refuse(
        "swizzle", sw,
        f"a swizzle equal to the bytes of the tile's contiguous dim (this ref's "
        f"tile {tile} of {geom.bits}-bit elements has {row_bytes} contiguous "
        f"bytes and {tile_bytes} bytes in all; a {sw}-byte swizzle needs "
        f"{sw} contiguous bytes and a multiple of {8 * sw} bytes)",
        f"pass swizzle={row_bytes} if the ref was written that way, or allocate "
        f"the ref with a ({8}, {sw * 8 // geom.bits}) tile")


def _geometry(shape, dt, swizzle, tiling_rank, ref_shape, ref_strides) -> RefGeometry:
  if ref_shape is None:
    ref_shape, rank = default_ref_shape(shape, dt, swizzle)
  else:
    ref_shape = check_shape(ref_shape, "ref_shape")
    rank = len(ref_shape) - len(shape)
  if tiling_rank is not None and tiling_rank != rank:
    raise refuse("tiling_rank", tiling_rank,
                 f"{rank} (ref rank {len(ref_shape)} minus array rank {len(shape)})",
                 "omit tiling_rank or pass a ref whose shape is the array's "
                 "shape followed by its tile")
  if rank < 0 or rank > len(shape):
    raise refuse("ref_shape", ref_shape,
                 f"the array shape {shape} tiled by at most {len(shape)} trailing dims",
                 "pass a ref of the array's shape, or of its tiled shape")
  n = len(shape)
  tile = ref_shape[len(ref_shape) - rank:] if rank else ()
  untiled = tuple(ref_shape[:n - rank]) + tuple(
      o * t for o, t in zip(ref_shape[n - rank:n], tile))
  if untiled != tuple(shape):
    raise refuse("ref", f"shape {ref_shape}",
                 f"a ref whose untiled shape equals the value's shape {shape} "
                 f"(this one untiles to {untiled})",
                 "store into a ref of the same logical shape (slice the ref or "
                 "reshape the value)")
  strides = tuple(ref_strides) if ref_strides is not None else _contiguous(ref_shape)
  if len(strides) != len(ref_shape):
    raise refuse("ref_strides", strides, f"{len(ref_shape)} strides", "pass one per dim")
  geom = RefGeometry(tuple(shape), tuple(ref_shape), strides, rank, swizzle, dt.bits)
  _check_swizzle_tiling(geom)
  return geom


def plan_inputs(layout, shape, dtype, swizzle, tiling_rank, atomic, ref_shape,
                ref_strides, peer):
  """Validates and normalises plan_store's arguments."""
  dt = as_dtype(dtype)
  shape = check_shape(shape)
  swizzle = check_swizzle(swizzle)
  total_bits = math.prod(shape) * dt.bits
  if total_bits % 8:
    raise refuse(
        "shape", shape,
        f"a whole number of bytes: {math.prod(shape)} elements of {dt} are "
        f"{total_bits} bits (Can only transfer integer bytes)",
        "pack pairs of 4-bit values, pad to an even element count, or "
        "transfer as int8 and unpack")
  atomic = check_atomic(atomic, dt, bool(peer))
  geom = _geometry(shape, dt, swizzle, tiling_rank, ref_shape, ref_strides)
  return dt, geom, atomic
