"""Bulk reductions (``cp.reduce.async.bulk``) in hand-written PTX, each kernel assembled
by ptxas: the f32 ``.add`` runs exactly as the ISA gives it, and reductions are atomic
per element (two copies' reductions of the same words do not race; a plain store
racing one does), each in every CI schedule (check/tma.py, bulk_op.py).  The other
bulk forms: test_bulk_copies.py."""

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx

from ptx_harness import CI_SCHEDULES, assemble, kernel, rules_in_every_schedule
from test_bulk_copies import _REDUCE, _U32

SCHEDULES = len(CI_SCHEDULES)   # seeds 0, 1, 2: what CI runs
_SMALLEST_NORMAL = np.float32(2.0 ** -126)


def _ftz(x):
  """``x`` (float32), a subnormal flushed to zero of its sign."""
  return np.copysign(np.float32(0), x) if abs(x) < _SMALLEST_NORMAL else x


def _add_ftz(a_bits, b_bits):
  """The bits of a + b in float32, rounded to nearest even by NumPy, inputs and result
  flushed (``_ftz``)."""
  a, b = (_ftz(np.uint32(v).view(np.float32)) for v in (a_bits, b_bits))
  return int(_ftz(np.float32(a + b)).view(np.uint32))


_F32 = """shl.b32 %r4, %r1, 2;
  add.s32 %r5, %r3, %r4;
  mov.b32 %r6, {bits};
  st.shared.b32 [%r5], %r6;"""


@pytest.mark.parametrize("bits, start, want", [
    ("0x3FC00000", 0x40000000, 0x40600000),   # 1.5 + 2.0 = 3.5
    ("0x33C00000", 0x3F800000, 0x3F800001),   # 1.0 + 1.5 * 2**-24: rounds up, once
    ("0x33800000", 0x3F800001, 0x3F800002),   # a tie (half an ulp): to the even one
    ("0x00000001", 0x00000001, 0x00000000),   # subnormal inputs flush to zero
    ("0x80800000", 0x00C00000, 0x00000000),   # 1.5 * 2**-126 - 2**-126: the subnormal
    ("0x80C00000", 0x00800000, 0x80000000),   # result flushes, keeping its sign
    ("0x80800000", 0x00800000, 0x00000000)])  # x + -x = +0
def test_a_bulk_f32_add_rounds_once_and_flushes_subnormals(bits, start, want):
  """"The floating point operation .add rounds to the nearest even. The current
  implementation of cp.reduce.async.bulk.add.f32 flushes subnormal inputs and results
  to sign-preserving zero" (PTX ISA, cp.reduce.async.bulk)."""
  assert _add_ftz(int(bits, 16), start) == want   # (the table, checked by NumPy)
  ptx = assemble(kernel(_REDUCE.format(store=_F32.format(bits=bits), op="add.f32", size=128,
                                       fence="fence.proxy.async.shared::cta;")))
  out = np.full(64, start, np.uint32)   # 32 elements reduced, 32 untouched
  report = check_ptx(ptx, [out], smem_bytes=256, block=(32, 1, 1), schedules=SCHEDULES)
  assert report.ok, str(report)
  got = report.outputs[0].view(np.uint32)
  assert got[:32].tolist() == [want] * 32 and got[32:].tolist() == [start] * 32


def test_a_bulk_f64_add_is_refused_by_name():
  ptx = kernel(_REDUCE.format(store=_U32, op="add.f64", size=128, fence=""))
  from mosaic_async_store.errors import AsyncStoreError
  with pytest.raises(AsyncStoreError, match=r"add\.f64"):
    check_ptx(ptx, [np.zeros(16, np.float64)], smem_bytes=256, block=(32, 1, 1))


# Two warps: thread t stores word t of the input (t + 1, as {type}) into a tile of its
# warp's own, fences, meets at bar.sync; lane 0 of warp 0 reduces its tile into the 32
# global words, and warp 1 does {other}; each waits for its bulk group.
_TWO_WARPS = """
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd5, [k_param_1];
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  shl.b32 %r4, %r1, 2;
  add.s32 %r5, %r3, %r4;
  mul.wide.u32 %rd6, %r1, 4;
  add.s64 %rd7, %rd5, %rd6;
  ld.global.b32 %r6, [%rd7];
  st.shared.b32 [%r5], %r6;
  fence.proxy.async.shared::cta;
  bar.sync 0;
  and.b32 %r7, %r1, 31;
  setp.eq.u32 %p1, %r7, 0;
  setp.lt.u32 %p2, %r1, 32;
  add.s32 %r8, %r3, 128;
  @!%p2 bra WARP1;
  @%p1 cp.reduce.async.bulk.global.shared::cta.bulk_group.add.{type} [%rd1], [%r3], 128;
  bra DONE;
WARP1:
  {other}
DONE:
  cp.async.bulk.commit_group;
  cp.async.bulk.wait_group 0;
"""
_BULK_REDUCE_1 = ("@%p1 cp.reduce.async.bulk.global.shared::cta.bulk_group.add.{type} "
                  "[%rd1], [%r8], 128;")
_PLAIN_STORE_1 = """mul.wide.u32 %rd3, %r7, 4;
  add.s64 %rd4, %rd1, %rd3;
  st.global.b32 [%rd4], %r6;"""


def _two_warps(t, other):
  ptx = assemble(kernel(_TWO_WARPS.format(type=t, other=other.format(type=t)), nparams=2))
  dtype = np.uint32 if t == "u32" else np.float32
  start, values = np.full(32, 100, dtype), np.arange(1, 65).astype(dtype)
  return check_ptx(ptx, [start, values], smem_bytes=256, block=(64, 1, 1),
                   schedules=SCHEDULES)


@pytest.mark.parametrize("t", ["u32", "f32"])
def test_two_warps_bulk_reductions_into_the_same_words_do_not_race(t):
  """"Each reduction operation performed by the cp.reduce.async.bulk has individually
  .relaxed.gpu memory ordering semantics" (PTX ISA): two copies' reductions of one
  element are morally strong, so atomic with each other, in either order."""
  report = _two_warps(t, _BULK_REDUCE_1)
  assert report.ok, str(report)
  want = 100 + np.arange(1, 33) + np.arange(33, 65)   # (each sum exact in f32)
  got = report.outputs[0].view(np.uint32 if t == "u32" else np.float32)
  assert got.tolist() == want.astype(got.dtype).tolist()


@pytest.mark.parametrize("t", ["u32", "f32"])
def test_a_plain_store_racing_a_bulk_reduction_is_reported(t):
  """Warp 1 stores the words with st.global, unordered with warp 0's reduction."""
  report = _two_warps(t, _PLAIN_STORE_1)
  assert "race" in rules_in_every_schedule(report), str(report)
