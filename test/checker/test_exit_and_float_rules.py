"""The exit rule for everything a CTA issues into a peer (check/exit_rule.py ``thread_exits``,
sync.py ``_note_remote``), shared-memory float reductions that keep subnormals
(check/floats.py ``reduce_add``), and float contraction run under each legal result
(check/contraction.py).

Exit: CUDA Programming Guide, distributed shared memory: every operation into a CTA's
shared memory or mbarriers must happen before that CTA exits.  Only happens-before
through a morally strong release/acquire (or an observed phase, for the mbarrier
operation or asynchronous store it counts) says so; a relaxed flag or a relaxed arrive
orders nothing.  Each wrong kernel is reported as "exit" in every schedule, next to a
correct neighbour that passes in every schedule; each kernel assembles with ptxas for
sm_90a.
"""

import numpy as np
import pytest

from mosaic_async_store.check import Finding, PtxKernel
from ptx_harness import SCHEDULES, assemble, kernel, launch, outputs

# Thread 0 of each CTA initialises the mbarrier at SMEM 0 (count 1), writes 7 at SMEM
# 16 and zeroes the flag at SMEM 8; a cluster barrier; then thread 0 of CTA 1 (%r6: CTA
# 0's SMEM) runs PEER and thread 0 of CTA 0 runs HOME; every thread then runs BEFORE_EXIT.
_TWO_CTAS = """
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
  @%p1 st.shared.u32 [%r3+16], 7;
  @%p1 st.shared.u32 [%r3+8], 0;
  fence.mbarrier_init.release.cluster;
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  @!%p1 bra DONE;
  setp.eq.u32 %p2, %r2, 1;
  @!%p2 bra HOME;
  mapa.shared::cluster.u32 %r6, %r3, 0;
  {PEER}
  bra DONE;
HOME:
  {HOME}
DONE:
  {BEFORE_EXIT}
"""
_CLUSTER_BARRIER = "barrier.cluster.arrive.aligned;\n  barrier.cluster.wait.aligned;"
_REMOTE_READ = "ld.shared::cluster.u32 %r7, [%r6+16];"
_WAIT_HOME = """WAIT:
  mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p3, [%r3], 0;
  @!%p3 bra WAIT;"""
_GLOBAL_POLL = """ld.param.u64 %rd1, [k_param_0];
POLL:
  {LOAD} %r8, [%rd1];
  setp.eq.u32 %p3, %r8, 0;
  @%p3 bra POLL;
  {AFTER}"""
_GLOBAL_FLAG = "ld.param.u64 %rd1, [k_param_0];\n  {STORE} [%rd1], 1;"
_SMEM_FLAG = "st.relaxed.cluster.shared::cluster.u32 [%r6+8], 1;"
_SMEM_POLL = """POLL:
  ld.relaxed.cluster.shared.u32 %r8, [%r3+8];
  setp.eq.u32 %p3, %r8, 0;
  @%p3 bra POLL;"""


def _exit_kernel(peer, home="", before_exit=""):
  return kernel(_TWO_CTAS.replace("{PEER}", peer).replace("{HOME}", home)
                .replace("{BEFORE_EXIT}", before_exit))


def _run(ptx, schedule):
  """The two-CTA kernel's findings (empty where none)."""
  return launch(ptx, [np.zeros(4, np.int32)], cluster=2, smem_bytes=64, block=32,
                schedule=schedule).findings


_EXIT_CASES = {
    # CTA 1 adds to the tx-count of CTA 0's mbarrier; CTA 0 exits unordered with it
    "remote expect_tx": (
        "mbarrier.expect_tx.relaxed.cluster.shared::cluster.b64 [%r6], 16;", ""),
    "remote complete_tx": (
        "mbarrier.complete_tx.relaxed.cluster.shared::cluster.b64 [%r6], 0;", ""),
    # a relaxed arrive that CTA 0 never waits for
    "relaxed arrive, no wait": (
        "mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%r6];", ""),
    # CTA 0 observes the phase of a relaxed arrive: the arrive completed, but the read
    # CTA 1 made before it is not ordered before the exit (the arrive releases nothing)
    "read, then a relaxed arrive": (
        _REMOTE_READ + "\n  mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%r6];",
        _WAIT_HOME),
    # the read is followed by a relaxed flag in global memory that CTA 0 polls
    "read, then a relaxed flag": (
        _REMOTE_READ + "\n  " + _GLOBAL_FLAG.replace("{STORE}", "st.relaxed.cluster.global.u32"),
        _GLOBAL_POLL.replace("{LOAD}", "ld.relaxed.cluster.global.u32").replace("{AFTER}", "")),
    # the same with the relaxed flag in CTA 0's SMEM: CTA 0 saw the flag's write, which
    # completed, but not the read before it
    "read, then a relaxed flag in its SMEM": (_REMOTE_READ + "\n  " + _SMEM_FLAG, _SMEM_POLL),
    # a relaxed reduction into CTA 0's SMEM that CTA 0 never reads
    "a relaxed red into its SMEM": ("red.relaxed.cluster.shared::cluster.add.u32 [%r6+8], 1;",
                                    ""),
    # a remote read with no ordering at all
    "read": (_REMOTE_READ, ""),
}
# The same operations, ordered before CTA 0's exit: a default (release/acquire) cluster
# barrier, a release arrive / acquire wait at cluster scope, a release/acquire flag.
_ORDERED_CASES = {
    "remote expect_tx + cluster barrier": (_EXIT_CASES["remote expect_tx"][0], "",
                                           _CLUSTER_BARRIER),
    "remote complete_tx + cluster barrier": (_EXIT_CASES["remote complete_tx"][0], "",
                                             _CLUSTER_BARRIER),
    "relaxed arrive + cluster barrier": (_EXIT_CASES["relaxed arrive, no wait"][0], "",
                                         _CLUSTER_BARRIER),
    "relaxed arrive, phase observed": (_EXIT_CASES["relaxed arrive, no wait"][0], _WAIT_HOME,
                                       ""),
    "read, then a release arrive": (
        _REMOTE_READ + "\n  mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r6];",
        _WAIT_HOME, ""),
    # a release fence before the relaxed arrive: a release pattern
    "read, then a release fence and a relaxed arrive": (
        _REMOTE_READ + "\n  fence.acq_rel.cluster;\n  "
        "mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%r6];", _WAIT_HOME, ""),
    "a relaxed red into its SMEM + cluster barrier": (
        "red.relaxed.cluster.shared::cluster.add.u32 [%r6+8], 1;", "", _CLUSTER_BARRIER),
    "read, then a release flag": (
        _REMOTE_READ + "\n  " + _GLOBAL_FLAG.replace("{STORE}", "st.release.cluster.global.u32"),
        _GLOBAL_POLL.replace("{LOAD}", "ld.acquire.cluster.global.u32").replace("{AFTER}", ""),
        ""),
    "read, then a relaxed flag and fences": (
        _REMOTE_READ + "\n  fence.acq_rel.cluster;\n  "
        + _GLOBAL_FLAG.replace("{STORE}", "st.relaxed.cluster.global.u32"),
        _GLOBAL_POLL.replace("{LOAD}", "ld.relaxed.cluster.global.u32")
        .replace("{AFTER}", "fence.acq_rel.cluster;"), ""),
    "read + cluster barrier": (_REMOTE_READ, "", _CLUSTER_BARRIER),
    # a relaxed write into CTA 0's SMEM that CTA 0 read: that write itself completed
    "a relaxed flag in its SMEM, read": (_SMEM_FLAG, _SMEM_POLL, ""),
}

# A release at .cta scope, across CTAs: by the letter not morally strong with CTA 0's
# acquire; taken as ordering the read before the exit, with the warning peer-arrive-cta
# (docs/checker.md, "Warnings"): no exit error.
_WARNED_CASES = {
    "read, then a .cta release arrive": (
        _REMOTE_READ + "\n  mbarrier.arrive.release.cta.shared::cluster.b64 _, [%r6];",
        _WAIT_HOME, ""),
}


def test_the_exit_kernels_assemble():
  for peer, home in _EXIT_CASES.values():
    assemble(_exit_kernel(peer, home))
  for peer, home, before in (*_ORDERED_CASES.values(), *_WARNED_CASES.values()):
    assemble(_exit_kernel(peer, home, before))


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("case", sorted(_EXIT_CASES))
def test_an_operation_into_a_peer_unordered_with_its_exit_is_reported(case, schedule):
  peer, home = _EXIT_CASES[case]
  found = _run(_exit_kernel(peer, home), schedule)
  assert found, f"{case}: no finding in schedule {schedule}"
  err = found[0]
  assert err.rule == "exit", err
  assert "CTA 0" in err.message, err.message


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("case", sorted(_ORDERED_CASES))
def test_an_operation_into_a_peer_ordered_before_its_exit_passes(case, schedule):
  peer, home, before = _ORDERED_CASES[case]
  found = _run(_exit_kernel(peer, home, before), schedule)
  assert not found, [str(f) for f in found]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("case", sorted(_WARNED_CASES))
def test_an_operation_into_a_peer_ordered_by_a_cta_scoped_arrive_is_a_warning(case, schedule):
  peer, home, before = _WARNED_CASES[case]
  found = _run(_exit_kernel(peer, home, before), schedule)
  assert [(f.rule, f.severity, f.cta) for f in found] == \
      [("peer-arrive-cta", "warning", 1)], [str(f) for f in found]


# -- red / atom .add.f32: subnormals kept on shared memory, flushed on global ----------

# Thread i adds x[2i + 1] to x[2i] four ways: red and atom on its 8 bytes of SMEM (the
# second through a generic address), red and atom on global memory; out[4i..4i+3] gets
# the four sums.
_FLOAT_RED = """
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd2, [k_param_1];
  mov.u32 %r3, __dynamic_shmem__0;
  mul.wide.u32 %rd3, %r1, 8;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.f32 %f1, [%rd4];
  ld.global.f32 %f2, [%rd4+4];
  shl.b32 %r4, %r1, 3;
  add.u32 %r5, %r3, %r4;
  st.shared.f32 [%r5], %f1;
  st.shared.f32 [%r5+4], %f1;
  red.shared.add.f32 [%r5], %f2;
  cvt.u64.u32 %rd7, %r5;
  cvta.shared.u64 %rd8, %rd7;
  atom.add.f32 %f3, [%rd8+4], %f2;
  ld.shared.f32 %f4, [%r5];
  ld.shared.f32 %f5, [%r5+4];
  mul.wide.u32 %rd5, %r1, 16;
  add.s64 %rd6, %rd2, %rd5;
  st.global.f32 [%rd6], %f4;
  st.global.f32 [%rd6+4], %f5;
  st.global.f32 [%rd6+8], %f1;
  st.global.f32 [%rd6+12], %f1;
  red.global.add.f32 [%rd6+8], %f2;
  atom.global.add.f32 %f6, [%rd6+12], %f2;
"""
# (a, b) bit patterns whose sums differ with and without flushing subnormals
_SUBNORMAL_PAIRS = [(0x00000001, 0x00000001), (0x00800000, 0x80000001),
                    (0x00400000, 0x00400000), (0x80000003, 0x00000001),
                    (0x3F800000, 0x00000005), (0x007FFFFF, 0x00000001),
                    (0x80400000, 0x80400001), (0x00000010, 0x80000010)]


def _f32(bits):
  return np.array(bits, np.uint32).view(np.float32)


def _flushed(x):
  """f32 values with each subnormal replaced by a zero of its sign."""
  bits = x.view(np.uint32)
  return np.where(bits & 0x7F800000 == 0, bits & 0x80000000, bits).astype(np.uint32) \
      .view(np.float32)


def _float_red_kernel():
  return kernel(_FLOAT_RED, nparams=2, regs=".reg .f32 %f<8>;")


def test_the_float_reduction_kernel_assembles():
  assemble(_float_red_kernel())


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_red_and_atom_add_f32_keep_subnormals_on_shared_memory_only(schedule):
  """PTX ISA, red / atom: red.add.f32 (atom.add.f32) "on global memory flushes
  subnormal inputs and results to sign-preserving zero; whereas red.add.f32 on shared
  memory supports subnormal inputs and results and doesn't flush them to zero"."""
  n = len(_SUBNORMAL_PAIRS)
  x = np.array(_SUBNORMAL_PAIRS, np.uint32).reshape(-1)
  [_, out] = outputs(_float_red_kernel(), [x.copy(), np.zeros(4 * n, np.uint32)],
                     cluster=1, smem_bytes=8 * n, block=n, schedule=schedule)
  out = out.view(np.uint32).reshape(n, 4)
  a, b = _f32(x[0::2]), _f32(x[1::2])
  shared = (a + b).view(np.uint32)                            # IEEE, one rounding
  glob = _flushed(_flushed(a) + _flushed(b)).view(np.uint32)
  assert (shared != glob).sum() >= 6   # the pairs tell the two apart
  np.testing.assert_array_equal(out[:, 0], shared)   # red.shared
  np.testing.assert_array_equal(out[:, 1], shared)   # atom, generic address to SMEM
  np.testing.assert_array_equal(out[:, 2], glob)     # red.global
  np.testing.assert_array_equal(out[:, 3], glob)     # atom.global


def test_reduce_add_rounds_once_to_nearest_even():
  """floats.reduce_add against NumPy's float32 / float16 sums (exactly rounded), with
  and without flushing, on random bit patterns that include subnormals."""
  from mosaic_async_store.check.floats import reduce_add
  rng = np.random.default_rng(0)
  bits = rng.integers(0, 1 << 32, 2000, dtype=np.uint64).astype(np.uint32)
  bits[::3] &= 0x807FFFFF   # a third subnormal (or zero)
  a, b = bits[:1000], bits[1000:]
  fa, fb = a.view(np.float32), b.view(np.float32)
  with np.errstate(all="ignore"):
    shared, glob = fa + fb, _flushed(_flushed(fa) + _flushed(fb))
  for i in range(1000):
    if np.isnan(shared[i]) or np.isnan(glob[i]):
      continue
    assert reduce_add("f32", int(a[i]), int(b[i]), shared=True) == \
        int(shared.view(np.uint32)[i])
    assert reduce_add("f32", int(a[i]), int(b[i]), shared=False) == \
        int(glob.view(np.uint32)[i])
  h = (bits & 0xFFFF).astype(np.uint16)
  ha, hb = h[:1000].view(np.float16), h[1000:].view(np.float16)
  with np.errstate(all="ignore"):
    hsum = ha + hb
  for i in range(1000):
    if not np.isnan(hsum[i]):   # .noftz: the same on either memory
      for shared_ in (True, False):
        assert reduce_add("f16", int(h[i]), int(h[1000 + i]), shared=shared_) == \
            int(hsum.view(np.uint16)[i])


def test_red_async_has_no_float_form():
  """PTX ISA, red.async: .add takes .u32, .s32, .u64 only; the checker refuses the
  float form (ptxas rejects it) instead of running it."""
  body = """
  mov.u32 %r3, __dynamic_shmem__0;
  red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.f32 [%r3], %f1,
      [%r3+8];"""
  with pytest.raises(NotImplementedError, match="red.async"):
    PtxKernel(kernel(body, regs=".reg .f32 %f<8>;"))


# -- float contraction: run under each legal result --------------------------------

# a = b = 1 + 2**-12, c = -(1 + 2**-11): a * b + c is 0 rounded twice, 2**-24 fused.
# Thread 0 computes it into word 3; where it is not zero, thread 0 also writes SMEM
# word 0, which thread 32 (another warp) writes unordered: a race only when fused.
_CONTRACTED_BRANCH = """
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p2, %r1, 32;
  @%p2 st.shared.u32 [%r3], 2;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra DONE;
  ld.global.f32 %f1, [%rd1];
  ld.global.f32 %f2, [%rd1+4];
  ld.global.f32 %f3, [%rd1+8];
  mul.f32 %f4, %f1, %f2;
  add.f32 %f5, %f4, %f3;
  st.global.f32 [%rd1+12], %f5;
  mov.b32 %r9, %f5;
  setp.eq.u32 %p3, %r9, 0;
  @%p3 bra DONE;
  st.shared.u32 [%r3], 1;
DONE:
"""
_TIE_WORDS = [0x3F800800, 0x3F800800, 0xBF801000, 0]


def _contracted_kernel():
  return kernel(_CONTRACTED_BRANCH, regs=".reg .f32 %f<8>;")


def _contracted(schedule):
  """The kernel's word 3, or the first finding of its run."""
  out, found = launch(_contracted_kernel(), [np.array(_TIE_WORDS, np.uint32)], cluster=1,
                      smem_bytes=16, block=64, schedule=schedule)
  if found:
    return found[0]
  return int(out[0].view(np.uint32)[3])


def test_the_contraction_kernel_assembles():
  assemble(_contracted_kernel())


def test_a_branch_on_the_unfused_result_takes_no_race_in_schedule_0():
  assert _contracted(0) == 0   # rounded twice: 0, no second write


def test_a_branch_on_the_fused_result_into_a_race_is_reported_in_schedule_1():
  err = _contracted(1)
  assert isinstance(err, Finding) and err.rule == "race", err


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_each_schedule_takes_the_branch_its_result_says(schedule):
  """Schedules past 1 fuse the pair or not (a seeded choice): a race exactly when
  they fuse; the same seed chooses the same way every time."""
  first, again = _contracted(schedule), _contracted(schedule)
  assert type(first) is type(again)
  if isinstance(first, Finding):
    assert first.rule == "race" and schedule != 0, first
  else:
    assert first == 0 and schedule != 1


def test_check_ptx_reports_the_race_of_the_fused_schedule():
  from mosaic_async_store.check import check_ptx
  report = check_ptx(_contracted_kernel(), [np.array(_TIE_WORDS, np.uint32)],
                     smem_bytes=16, block=64, cluster=(1, 1, 1), schedules=2)
  assert not report.ok
  assert [f.schedule for f in report.findings] == [1], report.findings
  assert report.findings[0].rule == "race"
  assert int(report.outputs[0].view(np.uint32)[3]) == 0   # schedule 0's outputs
