"""``TensorMap`` (python/mosaic_async_store/check/tensor_map.py): the fields a user
gives, normalised, and every cuTensorMapEncodeTiled limit refused naming its field,
the value and what is allowed."""

from __future__ import annotations

import dataclasses

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest

from mosaic_async_store.check import TensorMap
from mosaic_async_store.check.tensor_map import MAGIC, TENSOR_MAP_BYTES
from mosaic_async_store.errors import AsyncStoreError

X = np.zeros((64, 128), np.float16)


def test_of_takes_the_arrays_own_dims_strides_and_type():
  tmap = TensorMap.of(X, box=(64, 128))
  assert (tmap.dims, tmap.strides, tmap.box, tmap.elem_bytes, tmap.dtype) == \
      ((64, 128), (256, 2), (64, 128), 2, "float16")
  assert (tmap.offset, tmap.element_strides, tmap.swizzle, tmap.interleave,
          tmap.oob_fill) == (0, (1, 1), 0, 0, "zero")
  assert tmap.array is X   # the same object: the same global buffer


def test_fields_are_normalised_to_ints_and_tuples():
  tmap = TensorMap(X, np.int64(128), 2, [np.int32(32), 128], [256, 2], [32, 64],
                   swizzle=128)
  assert tmap.dims == (32, 128) and type(tmap.dims[0]) is int
  assert tmap.box == (32, 64) and tmap.dtype is None and tmap.element_strides == (1, 1)


def test_a_dtype_for_elem_bytes_sets_the_size_and_the_type():
  tmap = TensorMap(X, 0, np.dtype("float16"), (64, 128), (256, 2), (8, 8))
  assert (tmap.elem_bytes, tmap.dtype) == (2, "float16")
  assert TensorMap(X, 0, "bfloat16", (64, 128), (256, 2), (8, 8)).dtype == "bfloat16"


def test_replace_keeps_the_type_and_checks_again():
  tmap = TensorMap.of(X, box=(64, 64), oob_fill="nan")
  other = dataclasses.replace(tmap, array=X.copy())
  assert other.dtype == "float16" and other.oob_fill == "nan" and other.array is not X
  with pytest.raises(AsyncStoreError, match=r"box\[0\]=300"):
    dataclasses.replace(tmap, box=(300, 64))


# (keyword changes to TensorMap.of(X, box=(64, 64)), the field the refusal names, a word
# of what is allowed)
BAD = [
    (dict(dims=(64, 128, 1, 1, 1, 1), strides=(256, 2, 2, 2, 2, 2), box=(1,) * 6),
     "dims", "1..5 dimensions"),
    (dict(dims=(0, 128)), "dims[0]", "1..2**32"),
    (dict(strides=(250, 2)), "strides[0]", "multiple of 16"),
    (dict(strides=(1 << 40, 2)), "strides[0]", "below 2**40"),
    (dict(strides=(256, 4)), "strides", "innermost stride of elem_bytes=2"),
    (dict(box=(257, 64)), "box[0]", "1..256"),
    (dict(box=(0, 64)), "box[0]", "1..256"),
    (dict(box=(64, 4)), "box", "multiple of 16 bytes"),
    (dict(box=(64, 128), swizzle=64), "box", "at most the swizzle span, 64 bytes"),
    (dict(swizzle=16), "swizzle", "(0, 32, 64, 128)"),
    (dict(interleave=8), "interleave", "(0, 16, 32)"),
    (dict(interleave=16), "dims", "3..5 dimensions"),
    (dict(element_strides=(1, 9)), "element_strides[1]", "1..8"),
    (dict(element_strides=(1,)), "element_strides", "2 entries"),
    (dict(offset=8), "offset", "multiple of 16"),
    (dict(offset=-16), "offset", "int >= 0"),
    (dict(oob_fill="inf"), "oob_fill", "('zero', 'nan')"),
    (dict(elem_bytes=3), "elem_bytes", "1, 2, 4 or 8"),
    (dict(offset=16), "dims", "inside the array"),
    (dict(dims=(65, 128)), "dims", "inside the array"),
]


@pytest.mark.parametrize("change,field,allowed", BAD)
def test_each_limit_is_refused_naming_the_field(change, field, allowed):
  fields = dict(array=X, offset=0, elem_bytes=np.float16, dims=(64, 128), strides=(256, 2),
                box=(64, 64))
  fields.update(change)
  with pytest.raises(AsyncStoreError) as info:
    TensorMap(**fields)
  message = str(info.value)
  assert message.startswith(f"{field}="), message
  assert allowed in message and "Fix: " in message, message
  assert info.value.param == field


def test_nan_fill_needs_a_float_type():
  with pytest.raises(AsyncStoreError, match=r"oob_fill=nan .*floating-point"):
    TensorMap(X, 0, 2, (64, 128), (256, 2), (64, 64), oob_fill="nan")   # size only
  ints = np.zeros((64, 128), np.int16)
  with pytest.raises(AsyncStoreError, match=r"dtype is int16"):
    TensorMap.of(ints, box=(64, 64), oob_fill="nan")
  assert TensorMap.of(X, box=(64, 64), oob_fill="nan").oob_fill == "nan"


def test_interleave_32_needs_32_byte_alignment_and_swizzle_32():
  x = np.zeros((4, 8, 64), np.float16)
  with pytest.raises(AsyncStoreError, match=r"swizzle=0.*32 with interleave=32"):
    TensorMap.of(x, box=(1, 8, 16), interleave=32)
  assert TensorMap.of(x, box=(1, 8, 16), interleave=32, swizzle=32).interleave == 32
  with pytest.raises(AsyncStoreError, match=r"offset=16.*multiple of 32"):
    TensorMap(x, 16, 2, (3, 8, 64), (1024, 128, 2), (1, 8, 16), interleave=32, swizzle=32)


def test_wrong_kinds_are_type_errors():
  with pytest.raises(TypeError, match=r"^array="):
    TensorMap([1, 2], 0, 4, (2,), (4,), (4,))
  with pytest.raises(TypeError, match=r"^dims="):
    TensorMap(X, 0, 2, 64, (256, 2), (64, 64))
  with pytest.raises(TypeError, match=r"^box="):
    TensorMap(X, 0, 2, (64, 128), (256, 2), (64.0, 64))


def test_the_encoding_is_128_recognisable_bytes():
  tmap = TensorMap(X, 256, np.float16, (32, 128), (256, 2), (16, 64), swizzle=128)
  raw = tmap.encode(1 << 40)
  assert len(raw) == TENSOR_MAP_BYTES and raw[:8] == MAGIC
  assert int.from_bytes(raw[8:16], "little") == 1 << 40
  assert list(raw[16:21]) == [2, 2, 8, 0, 0]   # rank, bytes, swizzle / 16, interleave, fill
  dims = [int.from_bytes(raw[24 + 8 * i:32 + 8 * i], "little") for i in range(5)]
  assert dims == [128, 32, 0, 0, 0]             # innermost first, as CUDA orders them


@st.composite
def _maps(draw):
  """A valid map over a fresh array: rank, element size, swizzle, dims, box."""
  rank = draw(st.integers(1, 5))
  elem = draw(st.sampled_from([1, 2, 4, 8]))
  swizzle = draw(st.sampled_from([0, 32, 64, 128]))
  span = swizzle or 256
  inner = draw(st.integers(1, max(1, min(span, 256 * elem) // 16))) * 16 // elem
  inner = min(inner, 256)
  dims = [draw(st.integers(1, 6)) for _ in range(rank - 1)] + [inner * draw(st.integers(1, 2))]
  box = [draw(st.integers(1, d)) for d in dims[:-1]] + [inner]
  return elem, swizzle, tuple(dims), tuple(box)


@hypothesis.given(_maps())
@hypothesis.settings(max_examples=60, deadline=None)
def test_valid_maps_are_taken_and_one_broken_limit_is_refused(made):
  elem, swizzle, dims, box = made
  array = np.zeros(dims, {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[elem])
  tmap = TensorMap.of(array, box=box, swizzle=swizzle)
  assert tmap.strides == array.strides and tmap.box == box
  assert tmap.encode(1 << 40)[:8] == MAGIC
  if len(dims) > 1:   # an outer stride off the 16-byte grid
    with pytest.raises(AsyncStoreError, match=r"strides\[0\]="):
      dataclasses.replace(tmap, strides=(tmap.strides[0] + 8,) + tmap.strides[1:],
                          dims=(1,) + dims[1:])
  with pytest.raises(AsyncStoreError, match=r"box\[.\]=257"):
    dataclasses.replace(tmap, box=box[:-1] + (257,))
