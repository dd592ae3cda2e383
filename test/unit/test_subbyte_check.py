"""``check`` on arrays of every dtype a Mosaic kernel moves, 2- and 4-bit ones included:
what the kernel leaves equals what NumPy computes, byte for byte.

A Pallas copy kernel (GMEM -> registers -> GMEM, no TMA: Mosaic encodes no TMA
descriptor the checker models for 4-bit data) per dtype, lowered once
(``_lowered_once``) and checked on data hypothesis draws; and conversions between
4-/2-bit and 8-bit integers, which only come out right when the checker packs the
elements as Mosaic's own code reads and writes them (a copy would move wrongly packed
bytes unchanged).  The packing itself, jax-free: test/checker/test_subbyte.py."""

from __future__ import annotations

import functools
import re

import hypothesis
import hypothesis.strategies as st
import ml_dtypes
import numpy as np
import pytest

from mosaic_async_store.check import check, subbyte
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.tools import check_kernel

DTYPES = [n for n in (
    "float32", "int32", "uint32", "bfloat16", "float16", "int16", "uint16", "int8", "uint8",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3", "float8_e3m4", "float8_e8m0fnu",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz",
    "int4", "uint4", "float4_e2m1fn", "int2", "uint2") if hasattr(ml_dtypes, n) or
    hasattr(np, n)]
# (source, destination): Mosaic's 4- / 2-bit <-> 8-bit conversions that the checker runs
# (int4 -> int8 sign-extends with lop3, an opcode it does not run)
CASTS = [("uint4", "uint8"), ("int2", "int8"), ("uint2", "uint8"), ("int8", "int4"),
         ("uint8", "uint4")]
SHAPE = (64, 32)


def _dtype(name):
  return np.dtype(getattr(ml_dtypes, name, None) or name)


@functools.cache
def _kernel(src: str, dst: str):
  """A one-warpgroup kernel: out = x.astype(dst), through registers in the WGMMA
  layout (WGMMA_8BIT for 2-bit data, whose WGMMA registers hold half a byte)."""
  import jax
  from jax.experimental.pallas import mosaic_gpu as plgpu
  from mosaic_async_store import compat
  layout = "WGMMA_8BIT" if 2 in (subbyte.element_bits(_dtype(src)),
                                 subbyte.element_bits(_dtype(dst))) else "WGMMA"

  def body(x_ref, o_ref):
    x = compat.pallas_load(x_ref, optimized=False, layout=getattr(plgpu.Layout, layout))
    compat.pallas_store(o_ref, x if src == dst else x.astype(_dtype(dst)))
  return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(SHAPE, _dtype(dst)), grid=(1,),
                      grid_names=("g",))


@pytest.fixture(scope="module", autouse=True)
def _lowered_once():
  """``check`` lowers and compiles each kernel once: the examples reuse its PTX."""
  lower, made = check_kernel._lower, {}

  def cached(fn, specs, *arch):
    key = (fn, tuple((s.shape, str(s.dtype)) for s in specs), *arch)
    if key not in made:
      made[key] = lower(fn, specs, *arch)
    return made[key]
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(check_kernel, "_lower", cached)
    yield


def _codes(name, seed, kind):
  """An array of ``SHAPE`` whose elements take every bit pattern of the type: random,
  all ones or all zeros (NaN encodings too: a copy moves bits)."""
  dt, bits = _dtype(name), subbyte.element_bits(_dtype(name))
  count = int(np.prod(SHAPE))
  if kind == "random":
    codes = np.random.default_rng(seed).integers(0, 1 << bits, size=count, dtype=np.uint64)
  else:
    codes = np.full(count, (1 << bits) - 1 if kind == "ones" else 0, np.uint64)
  if bits < 8:
    return codes.astype(np.uint8).view(dt).reshape(SHAPE)
  return codes.astype(f"u{bits // 8}").view(dt).reshape(SHAPE)


@pytest.mark.parametrize("name", DTYPES)
@hypothesis.given(seed=st.integers(0, 2**32 - 1),
                  kind=st.sampled_from(["random", "ones", "zeros"]))
@hypothesis.settings(max_examples=2, deadline=None, database=None)
def test_every_dtype_through_check_comes_back_as_numpy_holds_it(name, seed, kind):
  x = _codes(name, seed, kind)
  report = check(_kernel(name, name), x, schedules=1)
  assert report.ok, str(report)
  [out] = report.outputs
  assert out.dtype == x.dtype and out.shape == x.shape
  np.testing.assert_array_equal(out.view(np.uint8), x.view(np.uint8))   # every bit
  np.testing.assert_array_equal(subbyte.pack(out), subbyte.pack(x))


@pytest.mark.parametrize("src, dst", CASTS)
@hypothesis.given(seed=st.integers(0, 2**32 - 1))
@hypothesis.settings(max_examples=2, deadline=None, database=None)
def test_mosaics_sub_byte_conversions_agree_with_numpy(src, dst, seed):
  """Element i of the input becomes element i of the output: the checker's packing is
  the one Mosaic's conversion code (prmt / shifts over packed registers) assumes."""
  rng = np.random.default_rng(seed)
  info = ml_dtypes.iinfo(_dtype(src if subbyte.is_packed(_dtype(src)) else dst))
  x = rng.integers(int(info.min), int(info.max) + 1, size=SHAPE).astype(_dtype(src))
  report = check(_kernel(src, dst), x, schedules=1)
  assert report.ok, str(report)
  np.testing.assert_array_equal(report.outputs[0], x.astype(_dtype(dst)))


def test_bytes_an_int4_kernel_never_writes_show_as_0xa5():
  """The output starts as 0xA5 bytes in the kernel's (packed) memory: elements 5, -6."""
  import jax
  from jax.experimental.pallas import mosaic_gpu as plgpu

  def body(x_ref, o_ref):
    del x_ref, o_ref
  kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((4, 8), ml_dtypes.int4),
                        grid=(1,), grid_names=("g",))
  [out] = check(kernel, np.zeros((4, 8), ml_dtypes.int4), schedules=1).outputs
  assert (subbyte.pack(out) == 0xA5).all() and out[0, :2].tolist() == [5, -6]


@pytest.mark.parametrize("where", ["args[0]", "fn"])
def test_a_width_no_kernel_layout_fixes_is_refused_before_lowering(where):
  import jax
  from jax.experimental.pallas import mosaic_gpu as plgpu
  six = _dtype("float6_e2m3fn")
  x = np.zeros((4, 8), six if where == "args[0]" else np.uint8)

  def body(x_ref, o_ref):
    del x_ref, o_ref
  kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((4, 8), six if where == "fn"
                                                           else np.uint8),
                        grid=(1,), grid_names=("g",))
  value = "an array" if where == "args[0]" else "a kernel whose output 0 is an array"
  with pytest.raises(AsyncStoreError, match=rf"^{re.escape(where)}={value} of dtype "
                     r"float6_e2m3fn is not supported: allowed arrays of byte-sized "):
    check(kernel, x)
