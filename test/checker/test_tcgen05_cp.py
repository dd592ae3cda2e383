"""tcgen05.cp in hand-written sm_100a PTX (check/families/tcgen05/cp.py): one CTA of 128
threads copies an image into shared memory (ptx_harness.copy_loop, then
fence.proxy.async), warp 0 allocates 32 columns of tensor memory, thread 0 issues the
copies with descriptors built as jax's async_copy_smem_to_tmem builds them and commits
to an mbarrier; every thread waits on it, loads its lane's 32 cells (tcgen05.ld
.32x32b.x32) and stores them.  The source is placed by this file's own arithmetic (the
K-major canonical layout: 8-row by 16-byte core matrices) or by ptx_harness.place_rows
(128-byte swizzle); the cells equal NumPy's rows.  Each broken neighbour is reported in
every CI schedule."""

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx
from mosaic_async_store.check.interp import PtxKernel

import test_tcgen05_mma
from ptx_harness import CI_SCHEDULES, copy_loop, kernel, place_rows, rules_in_every_schedule

SCHEDULES = len(CI_SCHEDULES)
IMAGE = 16384             # the source image's bytes, at shared offset 0
TMEM_SLOT, MBAR = IMAGE, IMAGE + 8
SMEM = IMAGE + 16
VERSION = 1 << 14         # bits 46-48 of the descriptor: the ISA's 0b001 (high word)
SW128 = 2 << 29           # sm_100's 128-byte swizzle code 2 at bits 61-63 (high word)

_COPY = """
  {{
    .reg .b32 desc_low;
    .reg .b64 desc;
    add.u32 desc_low, %r14, {low};
    mov.b64 desc, {{desc_low, {high}}};
    tcgen05.cp.cta_group::1.{shape} [%r13+{col}], desc;
  }}"""

_BODY = """
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd2, [k_param_1];
  mov.b64 %rd4, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd4;
  shr.u32 %r20, %r1, 5;
  setp.ne.u32 %p1, %r20, 0;
  setp.ne.u32 %p2, %r1, 0;
  add.u32 %r5, %r3, {mbar};
  @%p1 bra ALLOCATED;
  add.u32 %r4, %r3, {slot};
  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r4], 32;
  tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
ALLOCATED:
  @%p2 bra INITED;
  mbarrier.init.shared::cta.b64 [%r5], 1;
INITED:
""" + copy_loop("%p3") + """
  bar.sync 0;
  ld.shared.b32 %r13, [%r3+{slot}];
  @%p2 bra ISSUED;
  {cp_fence}
  and.b32 %r14, %r3, 262143;
  shr.u32 %r14, %r14, 4;
{copies}
  {commit}
ISSUED:
  {after_issue}
{wait}
  tcgen05.fence::after_thread_sync;
  tcgen05.ld.sync.aligned.32x32b.x32.b32 {{{regs}}}, [%r13];
  tcgen05.wait::ld.sync.aligned;
  mul.wide.u32 %rd7, %r1, 128;
  add.s64 %rd8, %rd2, %rd7;
{stores}
  tcgen05.fence::before_thread_sync;
  bar.sync 0;
  @%p1 bra DONE;
  tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r13, 32;
DONE:
"""

_WAIT = """WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p6, [%r5], 0;
  @!%p6 bra WAIT;"""
_COMMIT = "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r5];"


def copy(shape, *, start=0, lbo=0, sbo=0, swizzle=0, col=0):
  """One tcgen05.cp's text: the source at shared offset ``start``, LBO / SBO in bytes,
  ``swizzle`` the high word's swizzle bits, into column ``col``."""
  low = (start >> 4) | (lbo >> 4) << 16
  return _COPY.format(low=low, high=VERSION | swizzle | sbo >> 4, shape=shape, col=col)


def place_k_major(image, rows, lbo, sbo):
  """``rows`` (r x 16 or 32 bytes) at offset 0 of ``image`` without swizzle: row r's
  16-byte chunk j at (r / 8) SBO + (r % 8) 16 + j LBO (the canonical K-major layout)."""
  r = np.arange(rows.shape[0])[:, None]
  b = np.arange(rows.shape[1])[None, :]
  image[(r // 8) * sbo + (r % 8) * 16 + (b // 16) * lbo + b % 16] = rows


def run(copies, image, *, edits=None, schedules=SCHEDULES):
  """(report, the 128 lanes x 32 cells the threads loaded) of the kernel (module doc)."""
  fill = dict(mbar=MBAR, slot=TMEM_SLOT, chunks=IMAGE // 16, copies=copies,
              cp_fence="tcgen05.fence::after_thread_sync;", commit=_COMMIT, after_issue="",
              wait=_WAIT, regs=", ".join(f"%v{i}" for i in range(32)),
              stores="\n".join(f"  st.global.u32 [%rd8+{4 * i}], %v{i};" for i in range(32)))
  fill.update(edits or {})
  ptx = kernel(_BODY.format(**fill), nparams=2, regs=".reg .b32 %v<32>;",
               target="sm_100a")
  out = np.zeros((128, 32), np.uint32)
  report = check_ptx(ptx, [image, out], smem_bytes=SMEM, block=(128, 1, 1),
                     schedules=schedules)
  got = None if report.outputs is None else report.outputs[1].view(np.uint32).reshape(128, 32)
  return report, got


def _rows(n, nbytes, seed=0):
  return np.random.default_rng(seed).integers(0, 256, (n, nbytes), dtype=np.uint8)


def _cells(rows):
  """Row r's bytes as the cells of lane r: byte b in column b / 4 (little-endian)."""
  return np.ascontiguousarray(rows).view("<u4")


def test_128x256b_without_swizzle_puts_row_r_in_lane_r():
  rows, image = _rows(128, 32), np.zeros(IMAGE, np.uint8)
  place_k_major(image, rows, lbo=128, sbo=256)
  report, got = run(copy("128x256b", lbo=128, sbo=256, col=8), image)
  assert report.ok, str(report)
  np.testing.assert_array_equal(got[:, 8:16], _cells(rows))


def test_128x128b_without_swizzle():
  rows, image = _rows(128, 16, seed=1), np.zeros(IMAGE, np.uint8)
  place_k_major(image, rows, lbo=16, sbo=128)
  report, got = run(copy("128x128b", sbo=128, col=4), image, schedules=1)
  assert report.ok, str(report)
  np.testing.assert_array_equal(got[:, 4:8], _cells(rows))


def test_four_128x256b_copies_of_a_128_byte_swizzled_tile_fill_32_columns():
  """jax's async_copy_smem_to_tmem with swizzle 128: a 128-row tile of 128-byte rows,
  copied 32 bytes at a time (the start advanced 32 bytes in the swizzle row, SBO 1024)
  into columns 8 j .. 8 j + 7."""
  rows, image = _rows(128, 128, seed=2), np.zeros(IMAGE, np.uint8)
  place_rows(image, 0, rows)
  copies = "".join(copy("128x256b", start=32 * j, lbo=16, sbo=1024, swizzle=SW128, col=8 * j)
                   for j in range(4))
  report, got = run(copies, image)
  assert report.ok, str(report)
  np.testing.assert_array_equal(got, _cells(rows))


def test_32x128b_warpx4_multicasts_the_rows_into_every_warps_lanes():
  rows, image = _rows(32, 16, seed=3), np.zeros(IMAGE, np.uint8)
  place_k_major(image, rows, lbo=16, sbo=128)
  report, got = run(copy("32x128b.warpx4", sbo=128), image, schedules=1)
  assert report.ok, str(report)
  for w in range(4):
    np.testing.assert_array_equal(got[32 * w:32 * w + 32, :4], _cells(rows))


def _swizzled_run(**edits):
  rows, image = _rows(128, 128, seed=4), np.zeros(IMAGE, np.uint8)
  place_rows(image, 0, rows)
  copies = "".join(copy("128x256b", start=32 * j, lbo=16, sbo=1024, swizzle=SW128, col=8 * j)
                   for j in range(4))
  return run(edits.pop("copies", copies), image, edits=edits)


@pytest.mark.parametrize("edits, rule", [
    (dict(wait=""), "race"),                                  # ld before the phase
    (dict(after_issue="setp.eq.u32 %p7, %r1, 64;\n  @%p7 st.shared.u32 [%r3+256], %r1;"),
     "race"),                                                 # source overwritten under it
    (dict(copies=copy("128x256b", lbo=16, sbo=1024, swizzle=SW128) * 2), "race"),  # cp -> cp
    (dict(cp_fence=""), "tcgen05-fence-operand"),             # the source: a warning
    (dict(commit=""), "hang"),                                # nothing arrives
    (dict(copies=copy("128x256b", lbo=16, sbo=1024, swizzle=SW128, col=28)),
     "tcgen05-lanes"),                                        # columns 28..35 of 32
], ids=["no-wait", "source-overwritten", "cp-over-cp", "no-cp-fence", "no-commit",
        "past-the-allocation"])
def test_each_broken_neighbour_is_reported_in_every_schedule(edits, rule):
  """Next to the clean swizzled kernel: a load before the commit's phase; a generic
  store into the source before the copy is known complete; two copies into the same
  cells with no commit between (cp -> cp is not a pipelined pair, 9.7.16.6.2); no
  tcgen05.fence::after_thread_sync between the bar.sync and the copy; no commit; a copy
  past the allocated columns."""
  report, _ = _swizzled_run()
  assert report.ok, str(report)
  report, _ = _swizzled_run(**edits)
  assert rule in rules_in_every_schedule(report), str(report)


def _accumulate_onto_a_copy(*, cp_after_mma=False):
  """test_tcgen05_mma's kernel with N = 32 (K-major B): thread 0 first copies A's own
  128 x 128 bytes into D's 32 columns (four .128x256b copies through A's descriptor),
  then issues the four MMAs with enable-input-d on: D = C + A B, C being A's bytes read
  as f32 cells, ordered by the cp -> MMA pipeline alone (9.7.16.6.2).  ``cp_after_mma``:
  the copies after the first MMA instead (MMA -> cp is no pipeline: a race)."""
  high = test_tcgen05_mma.SW128 >> 32 | 1 << 14
  copies = [copy("128x256b", start=32 * j, lbo=16, sbo=1024, swizzle=SW128, col=8 * j) for j
            in range(4)]
  mmas = [test_tcgen05_mma._MMA.format(kind="f16", a_low=2 * j, b_low=2 * j,
                                       a_high=high | 1024 >> 4, b_high=high | 1024 >> 4,
                                       d_off="", enable=1) for j in range(4)]
  body = mmas[:1] + copies + mmas[1:] if cp_after_mma else copies + mmas
  return test_tcgen05_mma._run(n=32, n_major=False, version=1,
                               edits={"mmas": "".join(body)})


def test_an_mma_accumulates_onto_its_threads_earlier_copy():
  report, got, ab = _accumulate_onto_a_copy()
  assert report.ok, str(report)
  rng = np.random.default_rng(0)   # (_run's A and B, rebuilt: its first two draws)
  a = rng.integers(-3, 4, (128, 64)).astype(np.float16)
  b = rng.integers(-3, 4, (64, 32)).astype(np.float16)
  np.testing.assert_array_equal(a.astype(np.float64) @ b.astype(np.float64), ab)
  d = np.ascontiguousarray(a).view("<f4")   # C: A's row bytes as 32 f32 cells
  for j in range(4):   # (each MMA's D rounded to f32: K = 16 at a time)
    part = a[:, 16 * j:16 * j + 16].astype(np.float64) @ b[16 * j:16 * j + 16]
    d = (d.astype(np.float64) + part).astype(np.float32)
  np.testing.assert_array_equal(got, d)


def test_a_copy_after_the_mma_into_its_d_is_a_race():
  report, _, _ = _accumulate_onto_a_copy(cp_after_mma=True)
  assert "race" in rules_in_every_schedule(report), str(report)


_REFUSED = [
    ("tcgen05.cp.cta_group::2.128x256b [%r1], %rd1", "cta_group::2"),
    ("tcgen05.cp.cta_group::1.4x256b [%r1], %rd1", "4x256b"),
    ("tcgen05.cp.cta_group::1.64x128b.warpx2::02_13 [%r1], %rd1", "64x128b"),
    ("tcgen05.cp.cta_group::1.64x128b.warpx2::01_23 [%r1], %rd1", "64x128b"),
    ("tcgen05.cp.cta_group::1.128x128b.b8x16.b6x16_p32 [%r1], %rd1", "decompressing"),
    ("tcgen05.cp.cta_group::1.128x256b.b8x16.b4x16_p64 [%r1], %rd1", "decompressing"),
]


@pytest.mark.parametrize("statement, named", _REFUSED, ids=[s for s, _ in _REFUSED])
def test_forms_not_run_are_refused_by_name(statement, named):
  ptx = kernel(f"  {statement};", target="sm_100a")
  with pytest.raises(NotImplementedError, match=named):
    PtxKernel(ptx)
