"""The swizzle a tiled ref is laid out for, and ``async_store``'s ``swizzle`` left out.

A Mosaic memref carries its tiling in its shape (the trailing ``tiling_rank`` dims are
the tile) but not its swizzle: only the caller knows whether the bytes are swizzled.
Upstream's ``store_tiled`` therefore takes ``swizzle`` with no default.  ``async_store``
does the same wherever it matters: on a ref whose tile is laid out for a swizzle (its
contiguous dim spans 32, 64 or 128 bytes, in whole 8-row atoms) leaving ``swizzle`` out
is refused, naming that swizzle, instead of silently writing unswizzled bytes.  On a
plain ref, or a tile no swizzle fits (or 16-byte rows, which a swizzle leaves in place),
leaving it out means no swizzle.  ``swizzle=None`` given explicitly says the tiled ref
is not swizzled (Pallas: ``TilingTransform`` without ``SwizzleTransform``).
"""

from __future__ import annotations

import math

from mosaic_async_store.errors import refuse

__all__ = ["SWIZZLE_UNSET", "tile_swizzle", "given_swizzle"]


class _Unset:
  """The default of ``async_store``'s ``swizzle``: not given."""

  def __repr__(self) -> str:
    return "<required where the ref is tiled for a swizzle>"


SWIZZLE_UNSET = _Unset()


def tile_swizzle(shape, ref_shape, ref_strides, bits: int) -> int | None:
  """The swizzle (32, 64 or 128 bytes) that the tile of a ref of ``ref_shape`` and
  element ``ref_strides`` holding an array of ``shape`` is laid out for: the bytes of
  the tile's contiguous dim, where they are one of those and the tile holds whole
  8-row atoms of them; None for a plain ref or a tile no swizzle fits."""
  rank = len(ref_shape) - len(shape)
  if rank <= 0 or rank > len(shape) or len(ref_strides) != len(ref_shape):
    return None
  tile, strides = tuple(ref_shape[-rank:]), tuple(ref_strides[-rank:])
  minor = [d for d, s in zip(tile, strides) if s == 1]
  if not minor or minor[0] * bits % 8:
    return None
  row_bytes = minor[0] * bits // 8
  tile_bits = math.prod(tile) * bits
  if row_bytes not in (32, 64, 128) or tile_bits % (8 * 8 * row_bytes):
    return None
  return row_bytes


def given_swizzle(swizzle, shape, ref_shape, ref_strides, bits: int):
  """``swizzle`` as given; left out (``SWIZZLE_UNSET``): None where the ref's tile is
  laid out for no swizzle, else refused naming the tile's swizzle."""
  if swizzle is not SWIZZLE_UNSET:
    return swizzle
  sw = tile_swizzle(shape, ref_shape, ref_strides, bits)
  if sw is None:
    return None
  tile = tuple(ref_shape[len(shape):])
  raise refuse(
      "swizzle", "(left out)",
      f"swizzle={sw}, the swizzle this ref is tiled for (its tile {tile} of {bits}-bit "
      f"elements has {sw}-byte rows), or swizzle=None for a ref tiled but not swizzled: "
      "the ref's type does not say whether its bytes are swizzled, so a store that "
      "guessed could write them in the wrong places (upstream's store_tiled takes "
      "swizzle without a default too)",
      f"pass swizzle={sw} if the ref is written and read with the {sw}-byte swizzle "
      f"(TMA or load_tiled with swizzle={sw}), else swizzle=None")
