"""The geometry of a tensor copy (``check.tma_geometry``) against a slow per-element
reference written here another way (nested loops over the box, the swizzle as "the
16-byte chunk index within each span XOR the 128-byte row index"), for random tensor
maps, coordinates (negative and past the end), swizzles and shared-memory addresses;
the runs cover exactly the elements; the 128-byte swizzle of a 64x64 f16 box is
upstream Mosaic's formula (fragmented_array.py: in 16-byte transfers, offset XOR
((offset // 8) % (swizzle // 16))) and this project's ``plan.geometry.swizzle_bytes``."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mosaic_async_store.check.families.tma.geometry import (MapFields, box_bytes, box_layout,
                                                   oob_fill_element, runs)
from mosaic_async_store.plan.geometry import swizzle_bytes


def _reference(tmap, coords, smem_addr):
  """{box index (NumPy order): (smem offset, global offset or None when out of bounds)}."""
  n = len(tmap.dims)
  estr = tmap.element_strides or (1,) * n
  shape = [math.ceil(b / e) for b, e in zip(tmap.box, estr)]
  strides = list(tmap.strides) + ([tmap.elem_bytes] if len(tmap.strides) < n else [])
  out = {}
  for idx in itertools.product(*[range(s) for s in shape]):
    dense = 0
    for i, j in enumerate(idx):
      dense = dense * shape[i] + j
    addr = smem_addr + dense * tmap.elem_bytes
    if tmap.swizzle:
      chunks = tmap.swizzle // 16
      chunk = (addr % tmap.swizzle) // 16
      row = (addr // 128) % chunks
      addr = addr - chunk * 16 + (chunk ^ row) * 16
    where = [coords[n - 1 - i] + j * estr[i] for i, j in enumerate(idx)]
    inside = all(0 <= w < d for w, d in zip(where, tmap.dims))
    out[idx] = (addr - smem_addr, sum(w * s for w, s in zip(where, strides)) if inside else None)
  return shape, out


@st.composite
def _copies(draw):
  n = draw(st.integers(1, 4))
  eb = draw(st.sampled_from([1, 2, 4, 8]))
  swizzle = draw(st.sampled_from([0, 32, 64, 128]))
  estr = tuple(draw(st.integers(1, 3)) for _ in range(n)) if draw(st.booleans()) else None
  e = estr or (1,) * n
  box = [draw(st.integers(1, 6)) for _ in range(n)]
  if swizzle:   # an inner row of exactly the swizzle span
    box[-1] = swizzle // eb * e[-1]
  else:   # inner box bytes a multiple of 16
    box[-1] = max(1, draw(st.integers(1, 3)) * 16 // eb) * e[-1]
  dims = [draw(st.integers(1, 40)) for _ in range(n)]
  strides, acc = [], eb * dims[-1]
  for d in reversed(dims[:-1]):   # outer strides: at least dense, multiples of 16
    acc = -(-acc // 16) * 16 + 16 * draw(st.integers(0, 2))
    strides.insert(0, acc)
    acc *= d
  strides = strides + ([eb] if draw(st.booleans()) else [])
  coords = tuple(draw(st.integers(-8, d + 4)) for d in reversed(dims))
  smem = 0x400 + 128 * draw(st.integers(0, 15))
  return MapFields(tuple(dims), tuple(strides), tuple(box), eb, estr, swizzle), coords, smem


@settings(max_examples=150, deadline=None)
@given(_copies())
def test_layout_matches_the_per_element_reference(copy):
  tmap, coords, smem = copy
  shape, ref = _reference(tmap, coords, smem)
  lay = box_layout(tmap, coords, smem)
  assert list(lay.shape) == shape
  assert box_bytes(tmap) == math.prod(shape) * tmap.elem_bytes
  for k, idx in enumerate(itertools.product(*[range(s) for s in shape])):
    s, g = ref[idx]
    assert lay.smem_off[k] == s, (idx, tmap)
    assert bool(lay.oob[k]) == (g is None), (idx, tmap)
    if g is not None:
      assert lay.global_off[k] == g, (idx, tmap)
  # the shared-memory offsets of a box are distinct and fill it exactly
  assert sorted(lay.smem_off.tolist()) == list(range(0, box_bytes(tmap), tmap.elem_bytes))


@settings(max_examples=150, deadline=None)
@given(_copies())
def test_runs_cover_exactly_the_elements(copy):
  tmap, coords, smem = copy
  lay = box_layout(tmap, coords, smem)
  r = runs(lay)
  eb = tmap.elem_bytes
  assert r.nbytes.sum() == box_bytes(tmap) and (r.nbytes > 0).all()
  sm, gl, oob = [], [], []
  for s, g, nb, o in zip(r.smem_off, r.global_off, r.nbytes, r.oob):
    sm += range(s, s + nb, eb)
    gl += [-1] * (nb // eb) if o else list(range(g, g + nb, eb))
    oob += [o] * (nb // eb)
  assert sm == lay.smem_off.tolist()
  assert oob == lay.oob.tolist()
  assert gl == np.where(lay.oob, -1, lay.global_off).tolist()
  # maximal: two neighbouring runs could not be one
  for k in range(len(r.nbytes) - 1):
    joins = (r.smem_off[k] + r.nbytes[k] == r.smem_off[k + 1] and r.oob[k] == r.oob[k + 1]
             and (r.oob[k] or r.global_off[k] + r.nbytes[k] == r.global_off[k + 1]))
    assert not joins


def test_swizzle_128_of_a_64x64_f16_box_is_upstreams():
  tmap = MapFields((256, 64), (128, 2), (64, 64), 2, swizzle=128)
  lay = box_layout(tmap, (0, 0), 0x400 + 1024 * 3)   # Mosaic aligns to the 1024-byte repeat
  dense = np.arange(64 * 64) * 2
  transfers = dense // 16   # upstream: 16-byte transfers; group 128 bytes; 128 // 16 groups
  upstream = (transfers ^ ((transfers // 8) % (128 // 16))) * 16 + dense % 16
  assert (lay.smem_off == upstream).all()
  assert (lay.smem_off == swizzle_bytes(dense, 128)).all()
  assert not (lay.smem_off == dense).all()   # the swizzle does move the chunks
  r = runs(lay)
  assert 64 <= len(r.nbytes) <= 512 and r.nbytes.sum() == 8192


def test_a_misaligned_repeat_starts_the_pattern_part_way():
  tmap = MapFields((8, 64), (128, 2), (8, 64), 2, swizzle=128)
  lay = box_layout(tmap, (0, 0), 0x400 + 128)   # 128-aligned, one row into the repeat
  dense = np.arange(8 * 64) * 2
  assert (lay.smem_off == swizzle_bytes(dense + 128, 128) - 128).all()
  assert not (lay.smem_off == swizzle_bytes(dense, 128)).all()


def test_out_of_bounds_and_runs_of_a_full_width_box():
  tmap = MapFields((10, 64), (128,), (16, 64), 2)
  lay = box_layout(tmap, (0, -2), 0x400)
  assert lay.oob.reshape(16, 64)[:2].all() and lay.oob.reshape(16, 64)[12:].all()
  assert not lay.oob.reshape(16, 64)[2:12].any()
  r = runs(lay)   # rows 128 bytes apart in both memories: one run per side of the bounds
  assert r.nbytes.tolist() == [256, 1280, 512] and r.oob.tolist() == [True, False, True]
  assert r.global_off[1] == 0 and box_bytes(tmap) == 2048


def test_refusals():
  with pytest.raises(NotImplementedError, match="interleave"):
    box_layout(MapFields((8, 64), (128,), (8, 64), 2, interleave=1), (0, 0))
  with pytest.raises(NotImplementedError, match="swizzle"):
    box_layout(MapFields((8, 32), (64,), (8, 32), 2, swizzle=128), (0, 0))
  with pytest.raises(NotImplementedError, match="NaN"):
    oob_fill_element(MapFields((8, 64), (128,), (8, 64), 2, oob_fill=1))
  assert oob_fill_element(MapFields((8, 64), (128,), (8, 64), 4)) == bytes(4)
  assert oob_fill_element(MapFields((8, 64), (128,), (8, 64), 2, oob_fill="zero")) == bytes(2)
  with pytest.raises(NotImplementedError, match="NaN"):
    oob_fill_element(MapFields((8, 64), (128,), (8, 64), 2, oob_fill="nan"))
  with pytest.raises(ValueError, match="coordinates"):
    box_layout(MapFields((8, 64), (128,), (8, 64), 2), (0,))
