"""tcgen05.mma and tcgen05.commit in hand-written sm_100a PTX (check/families/tcgen05/mma.py,
commit.py, descriptors.py): one CTA of 128 threads allocates tensor memory, writes A and B
into shared memory in the 128-byte swizzled canonical layouts (ptx_harness.place_rows' placement:
the core-matrix rows with the 16-byte chunk XOR, not the checker's address arithmetic),
and thread 0 issues the MMAs with descriptors built as jax builds them (Hopper's swizzle
code, version bits 0), then commits to an mbarrier; every thread waits on it, reads D
with tcgen05.ld and stores it.  D equals NumPy's A @ B exactly (small integers: every
sum is exact in f32).  Each broken neighbour is reported in every CI schedule."""

import ml_dtypes
import numpy as np
import pytest

from mosaic_async_store.check import check_ptx
from mosaic_async_store.check.interp import PtxKernel

from ptx_harness import (CI_SCHEDULES, copy_loop, kernel, place_rows, rules_in_every_schedule,
                         swizzled)

SCHEDULES = len(CI_SCHEDULES)
M = 128                   # A: M x (128 bytes of K); four MMAs of 32 bytes of K each
A_OFF, B_OFF, TMEM_SLOT, MBAR = 0, 16384, 32768, 32776
SMEM = 32784
SW128 = 1 << 62           # jax's 128-byte swizzle code (Hopper's 1 at bit 62: sm_100's 2 at 61)






def _place_n_major(image, base, b):
  """``b`` (64 K x N f16, N contiguous) N-major: 64-wide N atoms 1024 bytes apart (LBO),
  8-row K groups (N / 64) 1024 bytes apart (SBO)."""
  kk = np.arange(b.shape[0])[:, None]
  n = np.arange(b.shape[1])[None, :]
  sbo = (b.shape[1] // 64) * 1024
  off = swizzled((kk // 8) * sbo + (n // 64) * 1024 + (kk % 8) * 128 + 2 * (n % 64))
  image.view(np.uint16)[(base + off) // 2] = b.view(np.uint16)
  return 1024, sbo


_MMA = """
  {{
    .reg .b32 a_desc_low, b_desc_low;
    .reg .b64 a_desc;
    .reg .b64 b_desc;
    mad.lo.u32 a_desc_low, %r14, 1, {a_low};
    mad.lo.u32 b_desc_low, %r15, 1, {b_low};
    mov.b64 b_desc, {{b_desc_low, {b_high}}};
    mov.b64 a_desc, {{a_desc_low, {a_high}}};
    tcgen05.mma.cta_group::1.kind::{kind} [%r13{d_off}], a_desc, b_desc, %r16, {enable};
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
  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r4], 128;
  tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
ALLOCATED:
  @%p2 bra INITED;
  mbarrier.init.shared::cta.b64 [%r5], 1;
INITED:
""" + copy_loop("%p3") + """
  bar.sync 0;
  ld.shared.b32 %r13, [%r3+{slot}];
  @%p2 bra ISSUED;
  {mma_fence}
  and.b32 %r14, %r3, 262143;
  shr.u32 %r14, %r14, 4;
  add.u32 %r15, %r3, {b_off};
  and.b32 %r15, %r15, 262143;
  shr.u32 %r15, %r15, 4;
  mov.b32 %r16, {idesc};
  setp.ne.u32 %p4, %r1, 0;
  setp.eq.u32 %p5, %r1, 0;
{mmas}
  {commit}
ISSUED:
  {after_issue}
{wait}
  {ld_fence}
{loads}
  tcgen05.wait::ld.sync.aligned;
  mul.wide.u32 %rd7, %r1, {row_bytes};
  add.s64 %rd8, %rd2, %rd7;
{stores}
  tcgen05.fence::before_thread_sync;
  bar.sync 0;
  @%p1 bra DONE;
  tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r13, 128;
DONE:
"""

_WAIT = """WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p6, [%r5], 0;
  @!%p6 bra WAIT;"""


def idesc(m=128, n=128, trans_b=1, dtype=1, ab=0):
  """The instruction descriptor jax builds (A and B of type code ``ab``; ``dtype`` 1: an
  f32 D, 2: s32)."""
  return dtype << 4 | ab << 7 | ab << 10 | trans_b << 16 | (n >> 3) << 17 | (m >> 4) << 24


# kind -> (element type, A / B type code, D type code, D's NumPy type)
KINDS = {"f16": (np.float16, 0, 1, np.float32), "tf32": (np.float32, 2, 1, np.float32),
         "f8f6f4": (ml_dtypes.float8_e4m3fn, 0, 1, np.float32), "i8": (np.int8, 1, 2, np.int32)}


def _run(*, kind="f16", n=128, n_major=True, version=0, m=128, d_lane=0, d16=False, seed=0,
         edits=None, schedules=SCHEDULES):
  """One kernel (module doc): (report, D from the checker, A @ B); ``d16``: an F16 D (in
  the low 16 bits of each cell)."""
  etype, code, dcode, dtype = KINDS[kind]
  if d16:
    dcode, dtype = 0, np.uint32
  k = 128 // np.dtype(etype).itemsize
  rng = np.random.default_rng(seed)
  a = rng.integers(-3, 4, (M, k)).astype(etype)
  b = rng.integers(-3, 4, (k, n)).astype(etype)
  image = np.zeros(32768, np.uint8)
  place_rows(image, A_OFF, a)
  high = SW128 >> 32 | version << 14
  if n_major:
    lbo, sbo = _place_n_major(image, B_OFF, b)
    b_low = [(lbo >> 4) << 16 | j * (2 * sbo >> 4) for j in range(4)]
  else:
    place_rows(image, B_OFF, np.ascontiguousarray(b.T))
    sbo, b_low = 1024, [2 * j for j in range(4)]   # (32 bytes of K per MMA)
  mmas = "".join(_MMA.format(kind=kind, a_low=2 * j, b_low=b_low[j], a_high=high | 1024 >> 4,
                             b_high=high | sbo >> 4, d_off=f"+{d_lane << 16}",
                             enable="%p4" if j == 0 else "%p5") for j in range(4))
  regs = n // 32
  vectors = ["{" + ", ".join(f"%v{32 * c + i}" for i in range(32)) + "}" for c in range(regs)]
  loads = "\n".join(f"  tcgen05.ld.sync.aligned.32x32b.x32.b32 {v}, [%r13+{32 * c}];"
                    for c, v in enumerate(vectors))
  stores = "\n".join(f"  st.global.u32 [%rd8+{4 * i}], %v{i};" for i in range(n))
  fill = dict(mbar=MBAR, slot=TMEM_SLOT, chunks=len(image) // 16, b_off=B_OFF,
              idesc=idesc(m=m, n=n, trans_b=int(n_major), dtype=dcode, ab=code), mmas=mmas,
              mma_fence="tcgen05.fence::after_thread_sync;",
              commit="tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 "
                     "[%r5];",
              after_issue="", wait=_WAIT, ld_fence="tcgen05.fence::after_thread_sync;",
              loads=loads, row_bytes=4 * n, stores=stores)
  fill.update(edits or {})
  ptx = kernel(_BODY.format(**fill), nparams=2, regs=".reg .b32 %v<256>;").replace(
      "sm_90a", "sm_100a")
  out = np.zeros((M, n), dtype)
  report = check_ptx(ptx, [image, out], smem_bytes=SMEM, block=(128, 1, 1),
                     schedules=schedules)
  got = None if report.outputs is None else report.outputs[1].view(dtype).reshape(M, n)
  if d16 and got is not None:
    got = (got & 0xFFFF).astype(np.uint16).view(np.float16)
  wide = np.int64 if kind == "i8" else np.float64
  return report, got, a[:m].astype(wide) @ b.astype(wide)


@pytest.mark.parametrize("n_major, version", [(True, 0), (False, 1)])
def test_d_equals_numpy_for_n_major_and_k_major_b(n_major, version):
  """Four K = 16 MMAs (enable-input-d off, then on) into one f32 D of 128 x 128: jax's
  N-major B (LBO between the 64-wide N atoms), or a K-major B; version bits 0 (jax) or
  the ISA's 0b001."""
  report, got, want = _run(n_major=n_major, version=version)
  assert report.ok, str(report)
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["tf32", "f8f6f4", "i8"])
def test_the_other_kinds_with_k_major_b(kind):
  """The same 32 bytes of K per MMA: K = 8 (tf32), 32 (e4m3; s8 into an s32 D)."""
  report, got, want = _run(kind=kind, n=64, n_major=False, schedules=1)
  assert report.ok, str(report)
  np.testing.assert_array_equal(got, want)


def test_an_f16_d_is_in_the_low_half_of_each_cell():
  report, got, want = _run(d16=True, n=64, schedules=1)
  assert report.ok, str(report)
  np.testing.assert_array_equal(got, want)


def test_an_m64_d_at_lane_16_is_layout_f():
  """M = 64 at lane 16: row m in lane 16 + 32 (m / 16) + m % 16 (each warp's lanes 16..31
  of the 32x32b load hold rows 16 w .. 16 w + 15)."""
  report, got, want = _run(m=64, d_lane=16, n=64, schedules=1)
  assert report.ok, str(report)
  rows = [32 * w + 16 + i for w in range(4) for i in range(16)]
  np.testing.assert_array_equal(got[rows], want)


def test_a_multicast_commit_to_the_own_cta_completes_the_phase():
  commit = ("mov.b16 %rs1, 1;\n  tcgen05.commit.cta_group::1.mbarrier::arrive::one."
            "shared::cluster.multicast::cluster.b64 [%r5], %rs1;")
  report, got, want = _run(edits={"commit": "{ .reg .b16 %rs1;\n  " + commit + "\n  }"},
                           schedules=1)
  assert report.ok, str(report)
  np.testing.assert_array_equal(got, want)


def test_a_multicast_commit_to_a_cta_beyond_the_cluster_faults():
  commit = ("{ .reg .b16 %rs1;\n  mov.b16 %rs1, 2;\n  tcgen05.commit.cta_group::1.mbarrier::"
            "arrive::one.shared::cluster.multicast::cluster.b64 [%r5], %rs1;\n  }")
  report, _, _ = _run(edits={"commit": commit}, schedules=1)
  assert "fault" in rules_in_every_schedule(report, 1), str(report)


@pytest.mark.parametrize("edits, rule", [
    ({"wait": ""}, "race"),                                   # ld before the phase
    ({"ld_fence": ""}, "tcgen05-fence"),                      # no after-fence on the ld side
    ({"after_issue": "setp.eq.u32 %p7, %r1, 64;\n  @%p7 st.shared.u32 [%r3+256], %r1;"},
     "race"),                                                 # A overwritten under the MMA
    ({"mma_fence": ""}, "tcgen05-fence-operand"),             # the MMA's operand: a warning
    ({"commit": ""}, "hang"),                                 # nothing arrives
], ids=["no-wait", "no-after-fence", "operand-overwritten", "no-mma-fence", "no-commit"])
def test_each_broken_neighbour_is_reported_in_every_schedule(edits, rule):
  report, _, _ = _run(edits=edits)
  assert rule in rules_in_every_schedule(report), str(report)


@pytest.mark.parametrize("edits", [
    {"idesc": idesc(m=256)},                          # M 256 is .cta_group::2's
    {"idesc": idesc(n=128) | 1 << 23},                # a reserved bit
    {"idesc": idesc(n=128, dtype=2)},                 # S32 D in .kind::f16
], ids=["m256", "reserved-bit", "s32-d"])
def test_an_invalid_instruction_descriptor_is_tcgen05_mma(edits):
  report, _, _ = _run(edits=edits, schedules=1)
  assert "tcgen05-mma" in rules_in_every_schedule(report, 1), str(report)


def _one_mma(**fields):
  """One f16 MMA's text: jax's A and N-major B descriptors, D at %r13, enable-input-d off;
  ``fields`` replace any of them."""
  fill = dict(kind="f16", a_low=0, b_low=0x400000, a_high=0x40000040, b_high=0x40000080,
              d_off="", enable="%p4")
  return _MMA.format(**{**fill, **fields})


def test_an_invalid_swizzle_mode_is_tcgen05_mma():
  """Swizzle bits 61-63 = 3: "Values 3, 5 and 7 are invalid"."""
  report, _, _ = _run(edits={"mmas": _one_mma(a_high=0x60000040)}, schedules=1)
  assert "tcgen05-mma" in rules_in_every_schedule(report, 1), str(report)


def test_d_past_the_allocated_columns_is_tcgen05_lanes():
  report, _, _ = _run(edits={"mmas": _one_mma(d_off="+64")}, schedules=1)
  assert "tcgen05-lanes" in rules_in_every_schedule(report, 1), str(report)


_REFUSED = [
    ("tcgen05.mma.cta_group::1.kind::f16 [%r1], [%r3], %rd2, %r2, %p1", "a-tmem"),
    ("tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r2, {%r4, %r5, %r6, %r7}, %p1",
     "disable-output-lane"),
    ("tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r2, %p1, 3", "scale-input-d"),
    ("tcgen05.mma.ws.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r2, %p1", "ws"),
    ("tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale [%r1], %rd1, %rd2, %r2, [%r3], "
     "[%r4], %p1", "block-scaled"),
]   # (.cta_group::2 runs: its refusals are test_tcgen05_pair.py's)


@pytest.mark.parametrize("statement, named", _REFUSED, ids=[n for _, n in _REFUSED])
def test_forms_not_run_are_refused_by_name(statement, named):
  ptx = kernel(f"  {statement};").replace("sm_90a", "sm_100a")
  with pytest.raises(NotImplementedError, match=named.replace("::", "::")):
    PtxKernel(ptx)


def test_the_isa_pattern_of_a_relaxed_wait_then_the_after_fence_is_clean():
  """PTX ISA 9.7.16.6.4.2, example 2: ``tcgen05.commit``; ``mbarrier.try_wait.relaxed
  .cluster`` in a loop; ``tcgen05.fence::after_thread_sync``; ``tcgen05.ld``.  The
  fence orders the load after the relaxed wait's observation (``ldst._view``), and the
  exit rule counts the observed phase's MMAs (``state.known_at_exit``)."""
  relaxed = _WAIT.replace("mbarrier.try_wait.parity.shared::cta.b64",
                          "mbarrier.try_wait.parity.relaxed.cluster.shared::cta.b64")
  report, got, want = _run(edits={"wait": relaxed})
  assert report.ok, str(report)
  np.testing.assert_array_equal(got, want)
  # without the after-fence, the relaxed wait orders nothing: still reported
  report, _, _ = _run(edits={"wait": relaxed, "ld_fence": ""})
  assert rules_in_every_schedule(report) & {"race", "tcgen05-fence"}, str(report)


def test_an_operand_ordered_only_by_a_sync_is_a_warning_and_an_error_when_strict():
  """The MMA issued after the bar.sync with no tcgen05.fence::after_thread_sync (what
  jax's and CUTLASS's kernels do for operands a TMA barrier orders): reported as the
  warning tcgen05-fence-operand, so the check passes with the right D; strict fails."""
  import dataclasses
  report, got, want = _run(edits={"mma_fence": ""})
  assert report.ok and {f.rule for f in report.warnings} == {"tcgen05-fence-operand"}, \
      str(report)
  assert all(f.severity == "warning" for f in report.findings)
  np.testing.assert_array_equal(got, want)
  assert not dataclasses.replace(report, strict=True).ok
