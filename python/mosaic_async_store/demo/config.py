"""A store configuration as plain data: the unit the CLI compiles (and the tests
and benchmarks build on).

``StoreConfig`` names everything that distinguishes one store kernel from
another; ``resolve_layout`` turns a layout name into upstream's layout object;
``view_geometry`` is the destination ref exactly as the kernel passes it to the
store, and ``config_plan`` the plan ``async_store`` makes for it there.
"""

from __future__ import annotations

import dataclasses
import math

from mosaic_async_store import compat
from mosaic_async_store.plan.dtypes import as_dtype
from mosaic_async_store.plan.geometry import RefGeometry
from mosaic_async_store.errors import refuse, refuse_type
from mosaic_async_store.plan.validate import (ARRIVALS, check_atomic_name, check_flag,
                                             check_shape,
                                             check_smem_bytes, check_swizzle,
                                             default_ref_shape, is_int)

__all__ = ["StoreConfig", "LAYOUT_NAMES", "TARGETS", "resolve_layout",
           "transpose_permutation", "view_geometry", "view_offset_bytes", "config_plan"]

# "cta0": CTA c of the cluster reduces into CTA 0, CTA 0 into itself.
TARGETS = ("peer", "local", "cta0")
_COMMUTATIVE = ("add", "min", "max", "and", "or", "xor")

# CLI name -> upstream attribute (or a factory for parametrised layouts).
_LAYOUTS = {
    "WGMMA": "WGMMA_LAYOUT", "WGMMA_8BIT": "WGMMA_LAYOUT_8BIT",
    "WGMMA_ACC_32BIT": "WGMMA_LAYOUT_ACC_32BIT",
    "WGMMA_UPCAST_2X": "WGMMA_LAYOUT_UPCAST_2X",
    "WGMMA_UPCAST_4X": "WGMMA_LAYOUT_UPCAST_4X",
    "WGMMA_TRANSPOSED": "WGMMA_TRANSPOSED_LAYOUT", "WGMMA_ROW": "WGMMA_ROW_LAYOUT",
    "WGMMA_COL": "WGMMA_COL_LAYOUT", "TCGEN05": "TCGEN05_LAYOUT",
    "TCGEN05_TRANSPOSED": "TCGEN05_TRANSPOSED_LAYOUT", "TCGEN05_ROW": "TCGEN05_ROW_LAYOUT",
    "TCGEN05_COL": "TCGEN05_COL_LAYOUT", "TMEM_NATIVE": "TMEM_NATIVE_LAYOUT",
    "TMEM_NATIVE_V1": 1, "TMEM_NATIVE_V2": 2, "TMEM_NATIVE_V4": 4, "TMEM_NATIVE_V8": 8,
    "STRIDED": "strided", "SPLAT": "splat",
}
LAYOUT_NAMES = tuple(_LAYOUTS)


def resolve_layout(name: str, shape: tuple[int, ...], dtype):
  """Upstream's layout object for a CLI layout name and an array."""
  fa = compat.fragmented_array()
  key = name.upper()
  if key not in _LAYOUTS:
    raise refuse("layout", name, "one of " + ", ".join(LAYOUT_NAMES),
                 "pick a layout Mosaic GPU ships")
  what = _LAYOUTS[key]
  if isinstance(what, int):
    return fa.tmem_native_layout(what)
  if what == "splat":
    return fa.WGSplatFragLayout(shape=tuple(shape))
  if what == "strided":
    dt = as_dtype(dtype)
    size = math.prod(shape)
    vec = max(1, min(16 * 8 // dt.bits, size // 128))
    while vec > 1 and size % (vec * 128):
      vec //= 2
    if size % (vec * 128):
      raise refuse("shape", tuple(shape), "a multiple of 128 elements for STRIDED",
                   "pad the array")
    return fa.WGStridedFragLayout(shape=tuple(shape), vec_size=vec)
  return getattr(fa, what)


def transpose_permutation(rank: int, swizzle) -> list[int]:
  """Dim permutation of the transposed (column-major) view of a 2-D ref.

  A tiled ref (outer_m, outer_n, tile_m, tile_n) swaps both pairs; a plain
  ref (m, n) swaps its two dims.
  """
  perm = list(range(rank))
  if swizzle and rank == 4:
    perm[0], perm[1] = perm[1], perm[0]
  perm[-2], perm[-1] = perm[-1], perm[-2]
  return perm


@dataclasses.dataclass(frozen=True)
class StoreConfig:
  """One store kernel: the demo's default is a 64x128 bf16 WGMMA tile into a peer."""

  dtype: str = "bfloat16"
  shape: tuple[int, ...] = (64, 128)
  layout: str = "WGMMA"
  swizzle: int | None = 128
  target: str = "peer"          # "peer" | "local" | "cta0" (every CTA reduces into CTA 0)
  cluster: int = 2              # CTAs along x
  atomic: str | None = None
  transposed: bool = False      # store through a transposed (column-major) view
  optimized: bool = True
  impl: str = "mas"             # "mas" (this project) | "upstream"
  offset_rows: int = 0          # store into a slice of a larger SMEM ref, this many rows in
  arrival: str = "thread"       # async_store's arrival: "thread" | "warpgroup" | "tensor_core"
  # The SMEM ref's (memref's) shape where it is not the canonical ref of ``shape`` for
  # ``swizzle``: the array's dims, the tiled trailing ones split into (outer, tile),
  # e.g. (4, 2, 16, 64) for a (64, 128) bf16 array in (16, 64) tiles.  The planner
  # checks it against the array (plan_store's ref_shape); None: the canonical ref.
  ref_shape: tuple[int, ...] | None = None

  def __post_init__(self):
    check_smem_bytes(check_shape(self.shape), as_dtype(self.dtype))
    check_swizzle(self.swizzle)
    if not isinstance(self.layout, str):
      raise refuse_type("layout", self.layout, "a layout name: " + ", ".join(LAYOUT_NAMES),
                        'pass the name, e.g. layout="WGMMA"')
    if self.layout.upper() not in LAYOUT_NAMES:
      raise refuse("layout", self.layout, "one of " + ", ".join(LAYOUT_NAMES),
                   "pick a layout Mosaic GPU ships")
    check_atomic_name(self.atomic)
    check_flag("transposed", self.transposed)
    check_flag("optimized", self.optimized)
    if self.target not in TARGETS:
      raise refuse("target", self.target, "peer, local or cta0",
                   "pass --target peer|local|cta0")
    if self.impl not in ("mas", "upstream"):
      raise refuse("impl", self.impl, "mas or upstream", "pass --impl mas|upstream")
    if not (is_int(self.cluster) and 1 <= self.cluster <= 16):
      raise refuse("cluster", self.cluster, "1..16 CTAs", "pass --cluster 2")
    if self.target == "peer" and self.cluster < 2:
      raise refuse("cluster", self.cluster, ">= 2 for a peer target",
                   "pass --cluster 2 or --target local")
    if self.target == "cta0" and self.atomic not in _COMMUTATIVE:
      raise refuse("atomic", self.atomic,
                   f"one of {', '.join(_COMMUTATIVE)} for --target cta0: every CTA "
                   "writes the same bytes of CTA 0, so only a reduction whose result "
                   "does not depend on the order is defined",
                   "pass --atomic add (or min, max, and, or, xor)")
    if self.target == "cta0" and self.impl != "mas":
      raise refuse("impl", self.impl, "mas for --target cta0 (upstream's store always "
                   "uses red.async, undefined into the executing CTA)", "pass --impl mas")
    if self.transposed and len(self.shape) != 2:
      raise refuse("transposed", True, "2-D arrays only", "drop --transposed")
    if self.arrival not in ARRIVALS:
      raise refuse("arrival", self.arrival, ", ".join(ARRIVALS), "pass --arrival thread")
    if self.arrival != "thread" and self.impl != "mas":
      raise refuse("impl", self.impl, "mas with --arrival " + self.arrival + " (upstream's "
                   "store_tiled_async arrives from every thread)", "pass --impl mas")
    self._check_offset_rows()
    self._check_ref_shape()

  def _check_ref_shape(self):
    if self.ref_shape is None:
      return
    check_shape(self.ref_shape, "ref_shape")
    for name, flag in (("transposed", "--transposed"), ("offset_rows", "--offset-rows")):
      if getattr(self, name):
        raise refuse("ref_shape", tuple(self.ref_shape), f"no --ref-shape with {flag} (that "
                     "view's ref is the canonical ref of --shape)", f"drop --ref-shape or {flag}")

  def _check_offset_rows(self):
    if not (is_int(self.offset_rows) and self.offset_rows >= 0):
      raise refuse("offset_rows", self.offset_rows, "an int >= 0", "pass --offset-rows 8")
    if not self.offset_rows:
      return
    if self.transposed:
      raise refuse("offset_rows", self.offset_rows, "0 with --transposed",
                   "drop --offset-rows or --transposed")
    dt = as_dtype(self.dtype)
    rows = (8 if len(self.shape) > 1 else self.swizzle * 8 // dt.bits) if self.swizzle else 1
    if self.offset_rows % rows:
      raise refuse("offset_rows", self.offset_rows,
                   f"a multiple of {rows} (the rows of one swizzle tile)",
                   f"pass --offset-rows {rows}")
    check_smem_bytes(self.ref_alloc_shape, dt)

  @property
  def ref_alloc_shape(self) -> tuple[int, ...]:
    """Logical shape of the SMEM allocation (transposed views swap the dims)."""
    if self.transposed:
      return tuple(self.shape[::-1])
    return (self.shape[0] + self.offset_rows, *self.shape[1:])

  def describe(self) -> str:
    return (f"{self.dtype}{list(self.shape)} {self.layout} swizzle={self.swizzle} "
            f"{self.target}{'' if self.target == 'local' else f' cluster={self.cluster}'}"
            f"{' atomic=' + self.atomic if self.atomic else ''}"
            f"{' transposed' if self.transposed else ''}"
            f"{'' if self.optimized else ' unoptimized'} impl={self.impl}"
            f"{f' offset_rows={self.offset_rows}' if self.offset_rows else ''}"
            f"{'' if self.arrival == 'thread' else f' arrival={self.arrival}'}"
            f"{'' if self.ref_shape is None else f' ref_shape={list(self.ref_shape)}'}")

  @property
  def arch(self) -> str:
    """The target the kernel needs at least: tcgen05 fences (``arrival="tensor_core"``)
    exist on Blackwell only."""
    return "sm_100a" if self.arrival == "tensor_core" else "sm_90a"


def view_geometry(cfg: StoreConfig) -> RefGeometry:
  """The destination ref exactly as the kernel passes it to the store
  (addresses from the view's own base, see ``view_offset_bytes``)."""
  dt = as_dtype(cfg.dtype)
  shape = cfg.ref_alloc_shape if cfg.transposed else tuple(cfg.shape)
  if cfg.ref_shape is not None:  # plan_store refuses one that does not fit the array
    alloc, rank = tuple(cfg.ref_shape), len(cfg.ref_shape) - len(cfg.shape)
  else:
    alloc, rank = default_ref_shape(shape, dt, cfg.swizzle)
  strides = [math.prod(alloc[i + 1:]) for i in range(len(alloc))]
  if cfg.transposed:
    perm = transpose_permutation(len(alloc), cfg.swizzle)
    alloc, strides = [alloc[p] for p in perm], [strides[p] for p in perm]
  return RefGeometry(tuple(cfg.shape), tuple(alloc), tuple(strides), rank, cfg.swizzle,
                     dt.bits)


def view_offset_bytes(cfg: StoreConfig) -> int:
  """Where the view starts in the SMEM allocation: ``offset_rows`` whole rows in."""
  return cfg.offset_rows * math.prod(cfg.shape[1:]) * as_dtype(cfg.dtype).bits // 8


def config_plan(cfg, peer: bool | None = None):
  """The plan ``async_store`` makes in ``cfg``'s kernel (same ref view, same
  plain-store rule), for the CLI and the CPU reference of the runtime checks.

  ``peer`` picks the form for target "cta0" (CTA 0 takes the local form); by
  default the form of every CTA but CTA 0 (the peer form).  The plan's target
  names the kernel's cluster index: ``(own + 1) % n``, or 0 for "cta0"."""
  from mosaic_async_store.plan.plan_types import Target
  from mosaic_async_store.plan.planner import plan_store
  view = view_geometry(cfg)
  if peer is None:
    peer = cfg.target != "local"
  where = Target(peer=peer, cluster_shape=(cfg.cluster, 1, 1))
  if cfg.target != "local":
    where = (dataclasses.replace(where, cluster_dim=0, cluster_idx=0) if cfg.target == "cta0"
             else dataclasses.replace(where, cluster_dim=0, index_from_own=1))
  return plan_store(resolve_layout(cfg.layout, cfg.shape, cfg.dtype), cfg.shape, cfg.dtype,
                    swizzle=cfg.swizzle, optimized=cfg.optimized, atomic=cfg.atomic,
                    ref_shape=view.ref_shape, ref_strides=view.strides, target=where)
