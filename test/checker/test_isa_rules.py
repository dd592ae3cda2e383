"""ISA rules on mbarriers, strong writes and warp collectives, each on a small kernel
that breaks it (reported in every schedule) next to a correct neighbour (passes in
every schedule).  Every kernel also assembles with ptxas for sm_90a.

* ``.noComplete``: "the behavior is undefined if the arrive-on operation with
  .noComplete causes the mbarrier to complete its current phase";
* ``mbarrier.init`` on a valid mbarrier is undefined (``mbarrier.inval`` first);
* ``test_wait`` / ``try_wait`` may return false: a program that reads the data
  without looking at the result races (the failed wait is explored);
* a release pattern is "a release operation on M followed by a strong write on M in
  program order": the reader of the later relaxed write synchronises with it;
* ``vote.sync`` waits for the non-exited threads of membermask, at any call site.
"""

import numpy as np
import pytest

from ptx_harness import SCHEDULES, assemble, finding, kernel, output

_REGS = ".reg .b64 %state<4>;"


def _launch(body, schedule, *, cluster=1, block=64, words=64, of=output):
  """Runs ``body`` (with ``_REGS``, assembled by ptxas first) on one cluster (one CTA
  unless ``cluster``); returns the u32 output (``of`` the harness's ``output``: fails
  on any finding) or its first finding (``finding``).  test_mbarrier_rules runs its
  kernels with it too."""
  return of(assemble(kernel(body, regs=_REGS)), [np.zeros(words, np.uint32)],
            cluster=cluster, smem_bytes=64, block=block, schedule=schedule)


def _rule(body, schedule, **kw):
  """The run's first finding; fails the test where there is none."""
  return _launch(body, schedule, of=finding, **kw)


# -- mbarrier.arrive.noComplete ----------------------------------------------------

_NO_COMPLETE = """
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  setp.lt.u32 %p2, %r1, 2;
  @%p1 mbarrier.init.shared.b64 [%r3], 2;
  bar.sync 0;
  @%p2 {first}
  bar.sync 0;
"""
_ARRIVE_NC = "mbarrier.arrive.noComplete.shared.b64 %state1, [%r3], 1;"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_no_complete_arrive_that_completes_the_phase_is_reported(schedule):
  """Both arrivals of the phase use .noComplete: the second completes it."""
  err = _rule(_NO_COMPLETE.format(first=_ARRIVE_NC), schedule)
  assert err.rule == "arrive-nocomplete" and "completes the phase" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_no_complete_arrives_before_a_plain_last_arrive_pass(schedule):
  _launch("""
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 1;
  @%p1 mbarrier.init.shared.b64 [%r3], 2;
  bar.sync 0;
  @%p1 mbarrier.arrive.noComplete.shared.b64 %state1, [%r3], 1;
  bar.sync 0;
  @%p2 mbarrier.arrive.shared.b64 %state1, [%r3];
  bar.sync 0;
""", schedule)


# -- mbarrier.init on a live mbarrier ----------------------------------------------

_INIT = """
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 32;
  @%p1 mbarrier.init.shared.b64 [%r3], 1;
  bar.sync 0;
  {between}
  @%p2 mbarrier.init.shared.b64 [%r3], 1;
  bar.sync 0;
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_second_init_of_a_live_mbarrier_is_reported(schedule):
  err = _rule(_INIT.format(between=""), schedule)
  assert err.rule == "barrier-reinit" and "not invalidated" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_init_after_inval_passes(schedule):
  _launch(_INIT.format(between="@%p1 mbarrier.inval.shared.b64 [%r3];\n  bar.sync 0;"),
          schedule)


# -- a wait whose false result is ignored ------------------------------------------

# Warp 1 writes the data word and arrives; warp 0 waits (once, or in a loop), then
# reads the word and stores it to global memory.
_WAIT = """
  mov.u32 %r3, __dynamic_shmem__0;
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 32;
  @%p1 mbarrier.init.shared.b64 [%r3], 1;
  bar.sync 0;
  @%p2 st.shared.u32 [%r3+16], 77;
  @%p2 mbarrier.arrive.shared.b64 %state1, [%r3];
  @!%p1 bra DONE;
WAIT:
  {wait}
  {retry}
  ld.shared.u32 %r4, [%r3+16];
  st.global.u32 [%rd1], %r4;
DONE:
"""
_WAITS = {"test_wait": "mbarrier.test_wait.parity.shared::cta.b64 %p3, [%r3], 0;",
          "try_wait": "mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r3], 0;",
          "try_wait with a time hint":
              "mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r3], 0, 20;"}


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("wait", _WAITS)
def test_a_wait_whose_false_result_is_ignored_races(wait, schedule):
  err = _rule(_WAIT.format(wait=_WAITS[wait], retry=""), schedule)
  assert err.rule == "race"


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("wait", _WAITS)
def test_a_wait_retried_until_true_passes(wait, schedule):
  out = _launch(_WAIT.format(wait=_WAITS[wait], retry="@!%p3 bra WAIT;"), schedule)
  assert out[0] == 77


# -- release patterns --------------------------------------------------------------

# Thread 0 writes the data word, then the flag (release, then a relaxed write: a
# release pattern); thread 32 polls the flag for the second value with an acquire
# load, then reads the data.
_FLAG = """
  mov.u32 %r3, __dynamic_shmem__0;
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 32;
  @%p1 st.shared.u32 [%r3], 0;
  bar.sync 0;
  @!%p1 bra READER;
  st.shared.u32 [%r3+16], 77;
  {first}
  st.relaxed.cta.shared.u32 [%r3], 2;
  bra DONE;
READER:
  @!%p2 bra DONE;
POLL:
  ld.acquire.cta.shared.u32 %r4, [%r3];
  setp.ne.u32 %p3, %r4, 2;
  @%p3 bra POLL;
  ld.shared.u32 %r5, [%r3+16];
  st.global.u32 [%rd1], %r5;
DONE:
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_release_then_a_relaxed_write_is_a_release_pattern(schedule):
  out = _launch(_FLAG.format(first="st.release.cta.shared.u32 [%r3], 1;"), schedule)
  assert out[0] == 77


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_relaxed_writes_alone_release_nothing(schedule):
  err = _rule(_FLAG.format(first="st.relaxed.cta.shared.u32 [%r3], 1;"), schedule)
  assert err.rule == "race"


# -- vote.sync: exited lanes, call sites, member masks -----------------------------

_VOTE_OUT = """
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r6;
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_vote_with_the_full_mask_after_a_lane_exited_passes(schedule):
  out = _launch("""
  setp.eq.u32 %p1, %r1, 31;
  @%p1 bra DONE;
  setp.lt.u32 %p2, %r1, 3;
  vote.sync.ballot.b32 %r6, %p2, -1;""" + _VOTE_OUT + "DONE:", schedule, block=32,
                words=32)
  assert out[:31].tolist() == [0b111] * 31


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_vote_at_two_call_sites_with_one_mask_meets(schedule):
  out = _launch("""
  setp.lt.u32 %p1, %r1, 16;
  setp.lt.u32 %p2, %r1, 3;
  @%p1 bra LOW;
  vote.sync.ballot.b32 %r6, %p2, -1;
  bra JOIN;
LOW:
  vote.sync.ballot.b32 %r6, %p2, -1;
JOIN:""" + _VOTE_OUT, schedule, block=32, words=32)
  assert out.tolist() == [0b111] * 32


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_vote_with_two_partial_masks_votes_per_half(schedule):
  out = _launch("""
  setp.lt.u32 %p1, %r1, 16;
  setp.eq.u32 %p2, %r1, 20;
  @%p1 bra LOW;
  vote.sync.ballot.b32 %r6, %p2, 0xffff0000;
  bra JOIN;
LOW:
  vote.sync.ballot.b32 %r6, %p2, 0xffff;
JOIN:""" + _VOTE_OUT, schedule, block=32, words=32)
  assert out.tolist() == [0] * 16 + [1 << 20] * 16


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_lane_missing_from_a_vote_hangs(schedule):
  """Lane 30 votes with other qualifiers: the two meetings wait for each other."""
  err = _rule("""
  setp.eq.u32 %p1, %r1, 30;
  setp.lt.u32 %p2, %r1, 3;
  @%p1 bra OTHER;
  vote.sync.ballot.b32 %r6, %p2, -1;
  bra DONE;
OTHER:
  vote.sync.any.pred %p3, %p2, -1;
DONE:""", schedule, block=32, words=32)
  assert err.rule == "hang"


def test_elect_leader_is_the_schedules_choice():
  """Schedule 0 elects the lowest lane, schedule 1 the highest (both are legal)."""
  body = """
  setp.ge.u32 %p1, %r1, 4;
  @%p1 bra DONE;
  elect.sync %r6|%p2, 0xf;""" + _VOTE_OUT + "DONE:"
  assert _launch(body, 0, block=32, words=32)[:4].tolist() == [0] * 4
  assert _launch(body, 1, block=32, words=32)[:4].tolist() == [3] * 4
