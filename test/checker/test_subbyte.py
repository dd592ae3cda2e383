"""Sub-byte arrays in the checker (python/mosaic_async_store/check/subbyte.py): 2- and
4-bit elements packed as a kernel reads them, the first in the lowest bits, and
unpacked again; ``check_ptx`` lays them out so, a ``TensorMap`` over them and 1- or
6-bit types are refused by name.  (``check`` on Mosaic kernels of every dtype:
test/unit/test_subbyte_check.py.)"""

from __future__ import annotations

import hypothesis
import hypothesis.strategies as st
import ml_dtypes
import numpy as np
import pytest

from mosaic_async_store.check import Memref, TensorMap, check_ptx, subbyte
from mosaic_async_store.errors import AsyncStoreError
from ptx_harness import kernel

PACKED = {"int2": 2, "uint2": 2, "int4": 4, "uint4": 4, "float4_e2m1fn": 4}
REFUSED = [n for n in ("int1", "uint1", "float6_e2m3fn", "float6_e3m2fn")
           if hasattr(ml_dtypes, n)]
BYTE_SIZED = ["float32", "float16", "int8", "uint8", "bool", "bfloat16", "float8_e4m3fn",
              "float8_e5m2", "float8_e8m0fnu", "int64"]


def _dtype(name):
  return np.dtype(getattr(ml_dtypes, name, None) or name)


def _reference_bytes(x, bits):
  """The packing written another way: each element's low ``bits`` bits, in order, as one
  little-endian bit string (NumPy's ``packbits(bitorder="little")``)."""
  codes = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
  stream = np.unpackbits(codes[:, None], axis=1, bitorder="little")[:, :bits]
  return np.packbits(stream.reshape(-1), bitorder="little")


@st.composite
def _arrays(draw):
  name = draw(st.sampled_from(sorted(PACKED)))
  shape = tuple(draw(st.lists(st.integers(0, 7), min_size=0, max_size=3)))
  count = int(np.prod(shape, dtype=np.int64))
  codes = draw(st.lists(st.integers(0, (1 << PACKED[name]) - 1), min_size=count,
                        max_size=count))
  return np.array(codes, np.uint8).view(_dtype(name)).reshape(shape)


@hypothesis.given(_arrays())
@hypothesis.settings(max_examples=150, deadline=None)
def test_pack_puts_the_first_element_lowest_and_unpack_inverts_it(x):
  bits = PACKED[x.dtype.name]
  raw = subbyte.pack(x)
  assert raw.dtype == np.uint8 and raw.size == subbyte.nbytes(x.dtype, x.shape) == \
      -(-x.size * bits // 8)
  np.testing.assert_array_equal(raw, _reference_bytes(x, bits))
  back = subbyte.unpack(raw, x.dtype, x.shape)
  assert back.dtype == x.dtype and back.shape == x.shape
  np.testing.assert_array_equal(back.view(np.uint8), x.view(np.uint8))


def test_int4_nibbles_by_hand():
  """Element 2k in the low nibble of byte k; an odd count pads the last high nibble."""
  x = np.array([[1, -2, 3], [-8, 7, -1]], ml_dtypes.int4)
  assert subbyte.pack(x).tolist() == [0xE1, 0x83, 0xF7]
  assert subbyte.pack(x[0]).tolist() == [0xE1, 0x03]
  assert subbyte.pack(np.array([0.5, -6.0], ml_dtypes.float4_e2m1fn)).tolist() == [0xF1]
  assert subbyte.pack(np.array([1, -2, 0, 1, -1], ml_dtypes.int2)).tolist() == [0x49, 0x03]
  np.testing.assert_array_equal(subbyte.unpack(bytes([0xE1, 0x03]), x.dtype, (3,)),
                                np.array([1, -2, 3], ml_dtypes.int4))


def test_a_strided_view_is_packed_in_c_order():
  x = np.arange(16, dtype=np.uint8).view(ml_dtypes.uint4).reshape(4, 4)
  np.testing.assert_array_equal(subbyte.pack(x.T), subbyte.pack(np.ascontiguousarray(x.T)))
  assert subbyte.pack(x.T)[0] == 0x40   # x.T[0, 0] == 0, x.T[0, 1] == 4


@pytest.mark.parametrize("name", BYTE_SIZED)
def test_byte_sized_arrays_are_their_own_bytes(name):
  x = np.arange(6).astype(_dtype(name)).reshape(2, 3)
  assert not subbyte.is_packed(x.dtype) and subbyte.element_bits(x.dtype) == 8 * x.itemsize
  assert subbyte.pack(x).tobytes() == x.tobytes()
  back = subbyte.unpack(x.tobytes(), x.dtype, x.shape)
  assert back.dtype == x.dtype and back.tobytes() == x.tobytes()


@pytest.mark.parametrize("name", sorted(PACKED))
def test_the_packed_types_and_their_widths(name):
  assert subbyte.is_packed(_dtype(name)) and subbyte.element_bits(_dtype(name)) == PACKED[name]
  assert subbyte.refusal("args[0]", _dtype(name)) is None


@pytest.mark.parametrize("name", REFUSED)
def test_widths_no_kernel_layout_fixes_are_refused_by_name(name):
  err = subbyte.refusal("args[1]", _dtype(name))
  assert isinstance(err, AsyncStoreError)
  assert str(err).startswith(f"args[1]=an array of dtype {name} is not supported: allowed ")
  assert "int4" in str(err) and "Fix: pack the elements into a uint8 array" in str(err)
  with pytest.raises(AsyncStoreError, match=name):
    subbyte.pack(np.zeros(4, _dtype(name)))


def test_too_few_bytes_to_unpack_is_an_error():
  with pytest.raises(ValueError, match="3 bytes hold no int4 array of shape"):
    subbyte.unpack(bytes(3), ml_dtypes.int4, (7,))


# -- check_ptx on an int4 array: a hand-written byte copy ----------------------------

def _byte_copy(nbytes, src="k_param_0", dst="k_param_1", nparams=2):
  """Thread t < nbytes copies byte t of the buffer at ``src`` to the one at ``dst``."""
  return kernel(f"""
  ld.param.u64 %rd1, [{src}];
  ld.param.u64 %rd2, [{dst}];
  cvt.u64.u32 %rd3, %r1;
  add.s64 %rd4, %rd1, %rd3;
  add.s64 %rd5, %rd2, %rd3;
  setp.lt.u32 %p1, %r1, {nbytes};
  @%p1 ld.global.u8 %r3, [%rd4];
  @%p1 st.global.u8 [%rd5], %r3;
""", nparams=nparams)


@pytest.mark.parametrize("shape", [(4, 8), (3, 5), (7,)])
def test_check_ptx_copies_an_int4_array_as_its_packed_bytes(shape):
  """Odd shapes too: 15 elements are 8 bytes, the last high nibble padding."""
  rng = np.random.default_rng(0)
  x = rng.integers(-8, 8, size=shape).astype(ml_dtypes.int4)
  out = np.zeros(shape, ml_dtypes.int4)
  nbytes = subbyte.nbytes(x.dtype, shape)
  report = check_ptx(_byte_copy(nbytes), [x, out], smem_bytes=0, block=(32, 1, 1),
                     schedules=1)
  assert report.ok, str(report)
  got_x, got = report.outputs
  assert got.dtype == x.dtype and got.shape == shape
  np.testing.assert_array_equal(got.view(np.uint8), x.view(np.uint8))
  np.testing.assert_array_equal(got_x.view(np.uint8), x.view(np.uint8))


def test_check_ptx_copying_one_byte_per_element_would_show():
  """The kernel reads packed bytes: copying only the first half of x's element count in
  bytes copies all of x (the old layout, a byte per element, would have copied half)."""
  x = np.arange(16, dtype=np.uint8).view(ml_dtypes.uint4)
  out = np.zeros(16, ml_dtypes.uint4)
  report = check_ptx(_byte_copy(8), [x, out], smem_bytes=0, block=(32, 1, 1), schedules=1)
  np.testing.assert_array_equal(report.outputs[1].view(np.uint8), np.arange(16))


def test_a_stored_byte_lands_in_two_elements_low_nibble_first():
  ptx = kernel("""
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  mov.u32 %r3, 0xE1;
  @%p1 st.global.u8 [%rd1+1], %r3;
""")
  x = np.zeros(6, ml_dtypes.int4)
  report = check_ptx(ptx, [x], smem_bytes=0, block=(32, 1, 1), schedules=1)
  assert report.outputs[0].tolist() == [0, 0, 1, -2, 0, 0]


def test_memref_of_an_int4_array_is_packed_with_sizes_in_elements():
  """A rank-2 memref descriptor is 7 words: allocated, aligned, offset, 2 sizes, 2
  strides (elements); the copy reads the aligned pointers (words 1 and 8)."""
  shape = (3, 6)
  x = (np.arange(18) % 16).astype(np.uint8).view(ml_dtypes.uint4).reshape(shape)
  ptx = _byte_copy(9, "k_param_1", "k_param_8", nparams=14).replace(
      "  ret;", "  ld.param.u64 %rd6, [k_param_3];\n  ld.param.u64 %rd7, [k_param_5];\n"
      "  setp.eq.u32 %p2, %r1, 0;\n  cvt.u32.u64 %r4, %rd6;\n  cvt.u32.u64 %r5, %rd7;\n"
      "  @%p2 st.global.u8 [%rd2+9], %r4;\n  @%p2 st.global.u8 [%rd2+10], %r5;\n  ret;")
  out = np.zeros((3, 8), ml_dtypes.uint4)   # 12 bytes: 9 copied, then size 0, stride 0
  report = check_ptx(ptx, [Memref(x), Memref(out)], smem_bytes=0, block=(32, 1, 1),
                     schedules=1)
  assert report.ok, str(report)
  got = report.outputs[1]
  np.testing.assert_array_equal(got.reshape(-1)[:18].view(np.uint8),
                                x.reshape(-1).view(np.uint8))
  # byte 9 holds x's size 0 (3), byte 10 its stride 0 (6): in elements
  assert got.reshape(-1)[18:22].view(np.uint8).tolist() == [3, 0, 6, 0]


@pytest.mark.parametrize("name", REFUSED)
def test_check_ptx_refuses_a_width_it_cannot_lay_out_by_name(name):
  x = np.zeros(8, _dtype(name))
  with pytest.raises(AsyncStoreError, match=rf"^args\[1\]=an array of dtype {name} is "
                     r"not supported: allowed .*Fix: "):
    check_ptx(_byte_copy(4), [np.zeros(8, np.uint8), Memref(x)], smem_bytes=0,
              block=(32, 1, 1))


@pytest.mark.parametrize("name", sorted(PACKED) + REFUSED)
def test_a_tensor_map_over_sub_byte_elements_is_refused_naming_array(name):
  x = np.zeros((8, 64), _dtype(name))
  with pytest.raises(AsyncStoreError, match=rf"^array=an array of dtype {name} is not "
                     r"supported: allowed arrays of byte-sized elements.*Fix: map the "
                     r"packed bytes"):
    TensorMap.of(x, box=(8, 64))


def test_the_packed_bytes_of_a_sub_byte_array_map_as_uint8():
  x = np.zeros((8, 64), ml_dtypes.int4)
  packed = subbyte.pack(x).reshape(8, -1)
  tmap = TensorMap.of(packed, box=(8, 32))
  assert (tmap.dims, tmap.elem_bytes) == ((8, 32), 1)
