"""Checks of the planner's inputs, before anything is planned or emitted.

Each check raises an AsyncStoreError (or TypeError) that names the parameter,
the value, what is allowed and a fix (see errors.refuse).
"""

from __future__ import annotations

import math

import numpy as np

from mosaic_async_store.plan import ptx_forms
from mosaic_async_store.plan.dtypes import DType, as_dtype
from mosaic_async_store.errors import refuse, refuse_type
from mosaic_async_store.plan.geometry import RefGeometry
from mosaic_async_store.plan.validate_cluster import (  # noqa: F401  (validate's API)
    CLUSTER_IDX_ALLOWED, check_cluster_args, check_cluster_idx, check_cluster_size,
    check_target, is_int, check_flag)

__all__ = ["plan_inputs", "check_shape", "check_swizzle", "check_atomic",
           "check_atomic_name", "check_flag", "check_strategy", "check_arrival", "ARRIVALS",
           "check_cluster_args",
           "check_cluster_idx", "check_cluster_size", "check_smem_bytes",
           "check_tiling_rank", "check_strides", "check_ref_offset", "offset_granule",
           "is_int", "default_ref_shape", "SWIZZLES", "MAX_SMEM_BYTES", "DYNAMIC",
           "CLUSTER_IDX_ALLOWED", "check_target"]

SWIZZLES = (16, 32, 64, 128)

# MLIR's ShapedType sentinel for a dynamic stride or offset (INT64_MIN).
DYNAMIC = -(1 << 63)

# The most shared memory one CTA can have (227 KiB on sm_90 and sm_100): a
# destination larger than this cannot exist, in this CTA or in a peer.
MAX_SMEM_BYTES = 227 * 1024


def check_shape(shape, param: str = "shape") -> tuple[int, ...]:
  if isinstance(shape, (int, str, bytes)) or not hasattr(shape, "__iter__"):
    raise refuse_type(param, shape, "a tuple of positive ints", "pass e.g. (64, 128)")
  out = tuple(shape)
  if out and not all(is_int(d) for d in out):
    raise refuse_type(param, out, "a tuple of positive ints (not floats, bools or str)",
                      "pass e.g. (64, 128)")
  if not out or not all(d > 0 for d in out):
    raise refuse(param, out, "a non-empty tuple of positive ints",
                 "pass e.g. (64, 128)")
  return tuple(int(d) for d in out)


def check_swizzle(swizzle) -> int | None:
  if swizzle is None:
    return None
  if not is_int(swizzle):
    raise refuse_type("swizzle", swizzle, "None or the int 16, 32, 64 or 128 (bytes)",
                      "pass the swizzle as an int, e.g. swizzle=128")
  if swizzle not in SWIZZLES:
    raise refuse("swizzle", swizzle, "None, 16, 32, 64 or 128 (bytes)",
                 "pass the swizzle the ref was allocated with (plgpu.SwizzleTransform)")
  return int(swizzle)


def check_tiling_rank(tiling_rank) -> int | None:
  if tiling_rank is None:
    return None
  if not is_int(tiling_rank):
    raise refuse_type("tiling_rank", tiling_rank, "None or an int >= 0",
                      "omit tiling_rank (it is inferred from the ref's rank)")
  if tiling_rank < 0:
    raise refuse("tiling_rank", tiling_rank,
                 "None or an int >= 0 (the number of trailing ref dims that form the tile)",
                 "omit tiling_rank (it is inferred from the ref's rank)")
  return int(tiling_rank)


def check_smem_bytes(shape: tuple[int, ...], dt: DType) -> None:
  """Refuses arrays larger than any CTA's shared memory (before anything is allocated)."""
  nbytes = math.prod(shape) * dt.bits // 8
  if nbytes > MAX_SMEM_BYTES:
    raise refuse(
        "shape", shape,
        f"at most {MAX_SMEM_BYTES} bytes (227 KiB, the most shared memory a CTA "
        f"can have); {math.prod(shape)} elements of {dt} are {nbytes} bytes",
        "store the array in pieces (slice the value and the ref) that fit in "
        "shared memory")


def check_atomic_name(atomic) -> str | None:
  """The reduction's name, whatever the dtype (see check_atomic for the dtype)."""
  if atomic is None:
    return None
  ops = ", ".join(ptx_forms.ATOMIC_OPS)
  if not isinstance(atomic, str):
    raise refuse_type("atomic", atomic, f"None or one of the str {ops}",
                      'pass the reduction\'s name, e.g. atomic="add"')
  if atomic not in ptx_forms.ATOMIC_OPS:
    fix = (f'spell it in lower case: atomic="{atomic.lower()}"'
           if atomic.lower() in ptx_forms.ATOMIC_OPS else "pick a reduction PTX supports")
    raise refuse("atomic", repr(atomic), f"None or one of {ops}", fix)
  return atomic


def check_atomic(atomic, dtype: DType, peer: bool):
  if check_atomic_name(atomic) is None:
    return None
  if ptx_forms.atomic_forms(atomic, dtype, peer) is None:
    ok = [op for op in ptx_forms.ATOMIC_OPS if ptx_forms.atomic_forms(op, dtype, peer)]
    allowed = (f"for {dtype} only {', '.join(ok)} (PTX red/red.async have no {atomic} "
               "for this type)" if ok else
               f"only a plain store for {dtype} (PTX red/red.async have no reduction of "
               "this type)")
    raise refuse("atomic", atomic, allowed,
                 "convert to int32/uint32 (any op), int64 (add, min, max, and, "
                 "or, xor), float32/float64/float16/bfloat16 (add), or store "
                 "without atomic=")
  return atomic


def check_strategy(strategy) -> str:
  """async_store's ``strategy``: "st.async" (the fast path) or "plain"."""
  if strategy not in ("st.async", "plain"):
    raise refuse("strategy", strategy, '"st.async" or "plain"',
                 'omit strategy (the default "st.async" is the fast path)')
  return strategy


# async_store's arrival conventions (lowering/store.py): who arrives on the target
# barrier, and with which tx bytes.
ARRIVALS = ("thread", "warpgroup", "tensor_core")


def check_arrival(arrival, expect_tx: bool) -> str:
  """async_store's ``arrival``: one of ``ARRIVALS``; the elected forms announce the
  warpgroup's bytes, so they need ``expect_tx=True``."""
  if not isinstance(arrival, str) or arrival not in ARRIVALS:
    raise refuse("arrival", arrival, ", ".join(f'"{a}"' for a in ARRIVALS),
                 'pass "thread" for a barrier counting every thread\'s arrival (Pallas\' '
                 'plgpu.Barrier), "warpgroup" for one arrival per store, "tensor_core" for '
                 'a barrier allocated with orders_tensor_core=True')
  if arrival != "thread" and not expect_tx:
    raise refuse("arrival", arrival, '"thread" with expect_tx=False (no thread arrives)',
                 "pass expect_tx=True, or omit arrival")
  return arrival


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
  sw, tile, bits = geom.swizzle, geom.tile, geom.bits
  canonical = f"({8}, {sw * 8 // bits})" if sw * 8 % bits == 0 else "(8, ...)"
  if not tile:
    raise refuse(
        "swizzle", sw,
        f"None for a plain (untiled) ref of shape {geom.ref_shape}: a {sw}-byte "
        f"swizzle needs a tiled ref whose tile rows are {sw} bytes",
        f"pass swizzle=None, or allocate the ref tiled with a {canonical} tile "
        f"(plgpu.TilingTransform + plgpu.SwizzleTransform({sw}))")
  tile_strides = geom.strides[len(geom.strides) - geom.tiling_rank:]
  minor = [d for d, s in zip(tile, tile_strides) if s == 1]
  row_bytes = minor[0] * bits // 8 if minor else None
  tile_bytes = math.prod(tile) * bits // 8
  if row_bytes != sw or tile_bytes % (8 * sw):
    rows = (f"{row_bytes} contiguous bytes" if row_bytes is not None
            else "no contiguous dim")
    fits = row_bytes in SWIZZLES and tile_bytes % (8 * row_bytes) == 0
    fix = (f"pass swizzle={row_bytes} if the ref was written that way, or "
           if fits else "") + f"allocate the ref with a {canonical} tile"
    raise refuse(
        "swizzle", sw,
        f"a swizzle equal to the bytes of the tile's contiguous dim (this ref's "
        f"tile {tile} of {bits}-bit elements has {rows} and {tile_bytes} bytes "
        f"in all; a {sw}-byte swizzle needs {sw} contiguous bytes and a "
        f"multiple of {8 * sw} bytes)", fix)


def check_strides(strides, ref_shape) -> tuple[int, ...]:
  """A destination's element strides: one int per dim, positive, no two elements aliased."""
  if isinstance(strides, (int, str, bytes)) or not hasattr(strides, "__iter__"):
    raise refuse_type("ref_strides", strides, "a tuple of ints, one per ref dim",
                      "pass the memref's strides in elements, e.g. (128, 1)")
  strides = tuple(strides)
  if not all(is_int(s) for s in strides):
    raise refuse_type("ref_strides", strides, "a tuple of ints, one per ref dim",
                      "pass the memref's strides in elements, e.g. (128, 1)")
  strides = tuple(int(s) for s in strides)
  if DYNAMIC in strides:
    raise refuse("ref_strides", "(" + ", ".join("?" if s == DYNAMIC else str(s)
                                                for s in strides) + ")",
                 "static strides: the store's addresses, swizzle and bank order are "
                 "planned before run time",
                 "slice the ref with static sizes and strides (a dynamic offset is fine)")
  if len(strides) != len(ref_shape):
    raise refuse("ref_strides", strides, f"{len(ref_shape)} strides (ref shape {ref_shape})",
                 "pass one per dim")
  if any(s <= 0 for s, d in zip(strides, ref_shape) if d > 1):
    raise refuse("ref_strides", strides,
                 "positive strides (a zero or negative stride writes two elements "
                 "to one address or below the ref's base)",
                 "pass the memref's strides in elements, e.g. (128, 1)")
  if _aliases(strides, ref_shape):
    raise refuse("ref_strides", strides,
                 f"strides under which no two elements of a ref of shape {ref_shape} "
                 "share an address", "pass the strides of a real (non-overlapping) memref")
  return strides


def offset_granule(bits: int, swizzle, widest: int) -> tuple[int, str]:
  """(bytes, why): a ref's offset from its allocation must be a multiple of bytes.

  The plan computes addresses (and the swizzle) from the ref's own base, as if
  it sat at a swizzle atom (8 rows of ``swizzle`` bytes, where an allocation
  starts) and were aligned for its widest store (``widest`` bytes).
  """
  if swizzle:
    return 8 * swizzle, (f"the {swizzle}-byte swizzle repeats every 8 rows of {swizzle} "
                         f"bytes; a ref that starts inside that atom is swizzled in "
                         f"another phase than the store computes")
  return widest, f"this store's widest instruction writes {widest} aligned bytes"


def check_ref_offset(offset: int, step: int | None, bits: int, swizzle, widest: int) -> int:
  """Refuses a ref whose offset breaks the swizzle phase or the stores' alignment.

  The ref's run-time offset (elements) is ``offset + step * k`` for an unknown
  integer ``k``: ``step`` 0 for a static offset, the granule of its dynamic
  part as the slicing proves it, None when nothing is proven.  Returns the
  required granule in bytes.
  """
  granule, why = offset_granule(bits, swizzle, widest)
  per = granule * 8 // bits if granule * 8 % bits == 0 else None
  unit = f"{granule} bytes" + (f" ({per} elements)" if per else "")
  def nbytes(elems):
    return f"{elems * bits // 8}" if elems * bits % 8 == 0 else f"{elems * bits / 8:g}"
  if step is None:
    raise refuse("ref", "a dynamic offset that is not traced to a slice of a ref with a "
                 "static offset and strides",
                 f"a static offset, or a dynamic one whose every value is a multiple of "
                 f"{unit} ({why})",
                 "slice the ref with mgpu.utils.memref_slice / memref.subview (Pallas: "
                 f"ref.at[...]) at multiples of {unit}, or pass a statically sliced ref")
  ok = lambda elems: elems * bits % (8 * granule) == 0  # noqa: E731
  if ok(offset) and ok(step):
    return granule
  if step:
    value = (f"a dynamic offset of {offset} + {step}*k elements ({nbytes(offset)} + "
             f"{nbytes(step)}*k bytes)")
  else:
    value = f"offset {offset} elements ({nbytes(offset)} bytes)"
  fix = (f"slice the ref at whole swizzle tiles (multiples of 8 rows of {swizzle} bytes)"
         if swizzle else f"slice the ref at a multiple of {unit}")
  raise refuse("ref", value, f"an offset from the allocation that is a multiple of {unit} "
               f"({why})", fix + ", or store into a ref of its own")


def _aliases(strides, ref_shape) -> bool:
  dims = sorted((s, d) for s, d in zip(strides, ref_shape) if d > 1)
  reach = 0  # the largest offset the smaller-stride dims reach
  for s, d in dims:
    if s <= reach:
      break
    reach += (d - 1) * s
  else:
    return False
  # Interleaved but possibly still one-to-one: count distinct offsets.
  offsets = np.zeros(1, dtype=np.int64)
  for s, d in dims:
    offsets = (offsets[:, None] + np.arange(d, dtype=np.int64)[None, :] * s).ravel()
  return len(np.unique(offsets)) != offsets.size


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
  strides = (check_strides(ref_strides, ref_shape) if ref_strides is not None
             else _contiguous(ref_shape))
  geom = RefGeometry(tuple(shape), tuple(ref_shape), strides, rank, swizzle, dt.bits)
  if ref_strides is not None and geom.footprint_bytes > MAX_SMEM_BYTES:
    raise refuse("ref_strides", strides,
                 f"a ref that spans at most {MAX_SMEM_BYTES} bytes (227 KiB, the most "
                 f"shared memory a CTA can have); these strides span "
                 f"{geom.footprint_bytes} bytes",
                 "store into a smaller (or less padded) SMEM ref")
  _check_swizzle_tiling(geom)
  return geom


def plan_inputs(layout, shape, dtype, swizzle, tiling_rank, atomic, ref_shape,
                ref_strides, peer: bool):
  """Validates and normalises plan_store's arguments (``peer``: from check_target)."""
  dt = as_dtype(dtype)
  shape = check_shape(shape)
  swizzle = check_swizzle(swizzle)
  tiling_rank = check_tiling_rank(tiling_rank)
  total_bits = math.prod(shape) * dt.bits
  if total_bits % 8:
    raise refuse(
        "shape", shape,
        f"a whole number of bytes: {math.prod(shape)} elements of {dt} are "
        f"{total_bits} bits (Can only transfer integer bytes)",
        "pack pairs of 4-bit values, pad to an even element count, or "
        "transfer as int8 and unpack")
  check_smem_bytes(shape, dt)
  atomic = check_atomic(atomic, dt, peer)
  geom = _geometry(shape, dt, swizzle, tiling_rank, ref_shape, ref_strides)
  return dt, geom, atomic
