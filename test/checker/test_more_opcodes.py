"""Opcodes the checker runs beyond the shipped kernels' own, on small hand-written
kernels, each next to a broken variant it reports, in every CI schedule.

A producer (thread 0) writes a word of SMEM and arrives on an mbarrier of count 1;
the other threads wait for the phase (``test_wait`` / ``try_wait`` forms) and copy the
word to GMEM.  The barrier sits at SMEM offset 16, the word at 0.
"""

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx
from mosaic_async_store.check.interp import PtxKernel
from mosaic_async_store.errors import CheckerLimit
from ptx_harness import SCHEDULES, finding, kernel, output, outputs

_SETUP = """
  ld.param.u64 %rd1, [k_param_0];
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  add.s32 %r4, %r3, 16;
  setp.eq.u32 %p1, %r1, 0;
  mov.b32 %r5, 1;
  @%p1 mbarrier.init.shared.b64 [%r4], %r5;
  bar.sync 0;
  @!%p1 bra CONSUMER;
  mov.b32 %r6, 4242;
  st.shared.u32 [%r3], %r6;
  {arrive}
  bra END;
CONSUMER:
  {wait}
  ld.shared.u32 %r7, [%r3];
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  st.global.u32 [%rd4], %r7;
END:
  bar.sync 0;
"""
_POLL = """
POLL:
  mbarrier.{test}.shared::cta.b64 %p2, [%r4], {operand};
  @!%p2 nanosleep.u32 20;
  @!%p2 bra POLL;
  {after}"""


def _ptx(arrive, wait):
  return kernel(_SETUP.format(arrive=arrive, wait=wait), regs=".reg .b64 %state;")


def _run(arrive, wait, schedule):
  """The kernel runs with no finding and every consumer copies the word."""
  out = output(_ptx(arrive, wait), [np.zeros(32, np.int32)], dtype=np.int32, cluster=1,
               smem_bytes=32, block=32, schedule=schedule)
  assert out[1:].tolist() == [4242] * 31


def _finding(arrive, wait, schedule):
  """The first finding of the kernel's run (fails where there is none)."""
  return finding(_ptx(arrive, wait), [np.zeros(32, np.int32)], cluster=1, smem_bytes=32,
                 block=32, schedule=schedule)


_ARRIVE = "mbarrier.arrive.shared::cta.b64 %state, [%r4];"
_WAITS = {
    "test_wait.parity": _POLL.format(test="test_wait.parity", operand="0", after=""),
    "try_wait.parity": _POLL.format(test="try_wait.parity", operand="0", after=""),
    # the state form: the phase the arrive returned (here: read before anyone arrives)
    "try_wait state": "mov.b64 %state, 0;" + _POLL.format(test="try_wait", operand="%state",
                                                          after=""),
    "test_wait.relaxed + fence.acquire": _POLL.format(
        test="test_wait.parity.relaxed.cta", operand="0", after="fence.acquire.cta;"),
}


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("wait", _WAITS, ids=list(_WAITS))
def test_waits_on_an_mbarrier_phase(wait, schedule):
  _run(_ARRIVE, _WAITS[wait], schedule)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_relaxed_test_wait_alone_is_a_race(schedule):
  relaxed = _POLL.format(test="test_wait.parity.relaxed.cta", operand="0", after="")
  assert _finding(_ARRIVE, relaxed, schedule).rule == "race"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_complete_tx_completes_the_phase_tx_count(schedule):
  """expect_tx 8 with the arrive, complete_tx 8 after it: the phase completes."""
  arrive = ("mbarrier.arrive.expect_tx.shared::cta.b64 %state, [%r4], 8;\n"
            "  mbarrier.complete_tx.shared::cta.b64 [%r4], 8;")
  _run(arrive, _WAITS["try_wait.parity"], schedule)
  short = arrive.replace("complete_tx.shared::cta.b64 [%r4], 8", "complete_tx.shared::cta.b64 "
                         "[%r4], 4")
  assert _finding(short, _WAITS["try_wait.parity"], schedule).rule == "hang"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_bar_warp_sync_orders_the_warp(schedule):
  """Lane 0 writes, bar.warp.sync, the other lanes read: ordered; without it, a race."""
  body = """
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  mov.b32 %r6, 7;
  @%p1 st.shared.u32 [%r3], %r6;
  {sync}
  ld.shared.u32 %r7, [%r3];
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  st.global.u32 [%rd4], %r7;
"""
  ptx = kernel(body.format(sync="bar.warp.sync -1;"))
  out = output(ptx, [np.zeros(32, np.int32)], dtype=np.int32, cluster=1, smem_bytes=16,
               block=32, schedule=schedule)
  assert (out == 7).all()
  err = finding(kernel(body.format(sync="")), [np.zeros(32, np.int32)], cluster=1,
                smem_bytes=16, block=32, schedule=schedule)
  assert err.rule == "race"


@pytest.mark.parametrize("op", ["vote.all.pred %p2, %p1;", "activemask.b32 %r9;",
                                "atom.sc.gpu.shared.add.u32 %r9, [%r3], 1;",
                                "ld.acquire.shared.u32 %r9, [%r3];",
                                "ld.relaxed.cta.shared.v2.u32 {%r9, %r10}, [%r3];",
                                "st.release.cta.shared.v2.u32 [%r3], {%r1, %r1};",
                                "red.acquire.cluster.shared.add.u32 [%r3], 1;",
                                "redux.sync.min.f32 %r9, %r1, -1;"])   # (sm_100 only)
def test_what_is_not_modelled_is_refused_by_name(op):
  with pytest.raises(NotImplementedError, match=op.split(".")[0].split(" ")[0]):
    PtxKernel(kernel("  mov.b64 %rd2, __dynamic_shmem__0;\n  cvt.u32.u64 %r3, %rd2;\n  "
                     + op))


def test_check_ptx_refuses_what_is_not_modelled_as_a_limit_of_the_checker():
  """``check_ptx`` refuses such PTX with ``errors.CheckerLimit`` (the CLI's exit 5), an
  AsyncStoreError naming the instruction, before anything runs."""
  ptx = kernel("  mov.b64 %rd2, __dynamic_shmem__0;\n  cvt.u32.u64 %r3, %rd2;\n"
               "  activemask.b32 %r9;")
  with pytest.raises(CheckerLimit, match=r"^ptx=.*activemask.*lists as run exactly"):
    check_ptx(ptx, [np.zeros(32, np.int32)], smem_bytes=16, block=(32, 1, 1))


_INVAL = """
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  setp.eq.u32 %p1, %r1, 0;
  mov.b32 %r5, 1;
  @%p1 mbarrier.init.shared.b64 [%r3], %r5;
  bar.sync 0;
  @%p1 mbarrier.arrive.shared::cta.b64 %state, [%r3];
  bar.sync 0;
  @%p1 mbarrier.inval.shared.b64 [%r3];
  bar.sync 0;
  {after}
"""


def test_mbarrier_inval_turns_the_bytes_back_into_memory():
  ok = kernel(_INVAL.format(after="@%p1 st.shared.u32 [%r3], %r1;"), regs=".reg .b64 %state;")
  outputs(ok, [np.zeros(1, np.int32)], cluster=1, smem_bytes=16, block=32)
  early = kernel(_INVAL.replace("@%p1 mbarrier.inval.shared.b64 [%r3];", "").format(
      after="@%p1 st.shared.u32 [%r3], %r1;"), regs=".reg .b64 %state;")
  err = finding(early, [np.zeros(1, np.int32)], cluster=1, smem_bytes=16, block=32)
  assert err.rule == "barrier-memory"
  used = kernel(_INVAL.format(after="@%p1 mbarrier.arrive.shared::cta.b64 %state, [%r3];"),
                regs=".reg .b64 %state;")
  err = finding(used, [np.zeros(1, np.int32)], cluster=1, smem_bytes=16, block=32)
  assert err.rule == "barrier-uninit"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_hang_names_every_waiting_thread_and_the_barrier_state(schedule):
  """Nobody arrives: the consumers poll forever, the producer waits at bar.sync.  The
  report names both groups with their PTX lines and the barrier's CTA, offset, phase,
  pending arrivals and tx-count."""
  err = _finding("", _WAITS["try_wait.parity"], schedule)
  msg = err.explained
  assert err.rule == "hang"
  assert "CTA 0 threads 1..31 at PTX line" in msg and "mbarrier.try_wait.parity" in msg
  assert "[phase 0, pending 1, tx 0, count 1]" in msg and "offset 0x10" in msg
  assert "CTA 0 thread 0 at PTX line" in msg and "`bar.sync 0`" in msg


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("below, want", [(5, [0x1F, 0, 1, 0]), (32, [0xFFFFFFFF, 1, 1, 1]),
                                         (0, [0, 0, 0, 1])])
def test_vote_sync_gives_every_lane_the_warps_vote(below, want, schedule):
  """vote.sync (full mask) on ``lane < below``: ballot, all, any, uni, in every lane."""
  ptx = kernel(f"""
  ld.param.u64 %rd1, [k_param_0];
  setp.lt.u32 %p1, %r1, {below};
  vote.sync.ballot.b32 %r3, %p1, -1;
  vote.sync.all.pred %p2, %p1, -1;
  vote.sync.any.pred %p3, %p1, -1;
  vote.sync.uni.pred %p4, %p1, -1;
  selp.u32 %r4, 1, 0, %p2;
  selp.u32 %r5, 1, 0, %p3;
  selp.u32 %r6, 1, 0, %p4;
  mul.wide.u32 %rd2, %r1, 16;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {{%r3, %r4, %r5, %r6}};
""")
  [out] = outputs(ptx, [np.zeros(32 * 4, np.uint32)], cluster=1, smem_bytes=16, block=32,
                  schedule=schedule)
  assert out.view(np.uint32).reshape(32, 4).tolist() == [want] * 32


def test_vote_by_a_lane_outside_its_membermask_is_reported():
  """Lanes 16..31 run vote.sync with the mask of lanes 0..15 (undefined: the ISA)."""
  ptx = kernel("""
  setp.lt.u32 %p1, %r1, 5;
  vote.sync.any.pred %p2, %p1, 0xffff;
""")
  err = finding(ptx, [np.zeros(4, np.uint32)], cluster=1, smem_bytes=16, block=32)
  assert err.rule == "collective-mask"
  assert "membermask 0x0000ffff, which does not name it" in err.explained

@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix_rows_at_once_equal_the_rows_value_by_value(trans):
  """stmatrix's NumPy path (every matrix row at once) and its value-by-value path (kept
  for values shfl left undefined) give the same bytes."""
  from mosaic_async_store.check.access import _row, _rows_at_once
  rng = np.random.default_rng(int(trans))
  data = [[int(v) for v in rng.integers(0, 2**32, 4)] for _ in range(32)]
  at_once = _rows_at_once(data, trans)   # uint8 [matrix, row, byte]
  assert at_once.shape == (4, 8, 16)
  assert [[bytes(at_once[i, j]) for j in range(8)] for i in range(4)] == \
      [[_row(data, i, j, trans) for j in range(8)] for i in range(4)]


def test_an_unsigned_setp_compares_a_negative_immediates_bits():
  """setp.lt.u32 %p, %r, -2 compares with 2^32 - 2 (emit_pipeline's loop guard
  ``i - 3 <u -2``): an immediate is its bits in the instruction's type."""
  ptx = kernel("""
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r3, 0xFFFFFFFD;
  setp.lt.u32 %p1, %r3, -2;
  selp.u32 %r4, 1, 0, %p1;
  setp.lt.u32 %p2, -2, %r3;
  selp.u32 %r5, 1, 0, %p2;
  setp.lt.and.u32 %p3, %r3, -2, %p1;
  selp.u32 %r6, 1, 0, %p3;
  setp.gt.u64 %p4, -1, 5;
  selp.u32 %r7, 1, 0, %p4;
  st.global.u32 [%rd1], %r4;
  st.global.u32 [%rd1+4], %r5;
  st.global.u32 [%rd1+8], %r6;
  st.global.u32 [%rd1+12], %r7;""")
  report = check_ptx(ptx, [np.zeros(4, np.uint32)], smem_bytes=0, block=(1, 1, 1),
                     schedules=1)
  assert report.ok, str(report)
  assert report.outputs[0].tolist() == [1, 0, 1, 1]
