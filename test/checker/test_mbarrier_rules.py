"""mbarrier rules, each on a small kernel that breaks it (reported in every schedule)
next to a correct neighbour (passes in every schedule); every kernel assembles with
ptxas for sm_90a.

* ``barrier-peer``: only the .shared::cluster forms of arrive (arrive_drop, expect_tx,
  complete_tx) and a generic arrive / arrive_drop whose state is the sink ``_`` (the
  ISA's Example 4 of test_wait / try_wait) may name another CTA's mbarrier; init,
  inval, test_wait / try_wait, a generic arrive that returns a state and the
  .shared::cta forms take the executing CTA's object ("threads can perform only arrive
  operations but not *_wait on an mbarrier located in shared::cluster space").  A
  generic address mapped with ``mapa`` to the executing CTA's own rank is its own
  object, not a peer's.
* ``phase-overrun``: a wait's state or parity names the current or the immediately
  preceding phase; a barrier two phases past the one a waiter means is reported.
* ``mbarrier.arrive_drop`` (the expected count drops for later phases too) and
  ``mbarrier.pending_count`` (the pending count before a .noComplete arrive-on).
"""

import functools

import pytest

from ptx_harness import SCHEDULES, finding
from test_isa_rules import _launch as _isa_launch


def _launch(body, schedule, *, block=32, **kw):
  """test_isa_rules' ``_launch`` (assembled by ptxas first; the u32 output, 64 words,
  failing on any finding, or with ``of=finding`` the first finding), one warp unless
  ``block``."""
  return _isa_launch(body, schedule, block=block, **kw)


_rule = functools.partial(_launch, of=finding)   # the run's first finding (fails if none)


# -- barrier-peer --------------------------------------------------------------------

# Thread 0 of each CTA of a 2-CTA cluster inits its barrier at offset 0 (count 1); %rd5
# is the generic address of CTA {rank}'s barrier (cvta, then mapa), %r4 its
# .shared::cluster address; the cluster barrier before exit keeps every CTA's memory.
_PEER = """
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p3, %r2, 0;
  @%p1 mbarrier.init.shared.b64 [%r3], 1;
  fence.mbarrier_init.release.cluster;
  barrier.cluster.arrive;
  barrier.cluster.wait;
  cvt.u64.u32 %rd3, %r3;
  cvta.shared.u64 %rd4, %rd3;
  mapa.u64 %rd5, %rd4, {rank};
  mapa.shared::cluster.u32 %r4, %r3, {rank};
  @!%p1 bra END;
  {body}
END:
  barrier.cluster.arrive;
  barrier.cluster.wait;
"""
# CTA 0 waits on its own barrier; CTA 1 arrives on it remotely (release, cluster scope)
_LOCAL_WAIT = """
  @!%p3 bra ARRIVE;
WAIT:
  mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p2, [%r3], 0;
  @!%p2 bra WAIT;
  bra END;
ARRIVE:
"""
_WRONG = {
    "try_wait through mapa": "mbarrier.try_wait.parity.b64 %p2, [%rd5], 0;",
    "test_wait through mapa": "mbarrier.test_wait.parity.b64 %p2, [%rd5], 0;",
    "init through mapa": "mbarrier.init.b64 [%rd5+8], 1;",
    "inval through mapa": "mbarrier.inval.b64 [%rd5];",
    "generic arrive through mapa": "mbarrier.arrive.b64 %state1, [%rd5];",
    "generic arrive_drop through mapa": "mbarrier.arrive_drop.b64 %state1, [%rd5];",
    "generic arrive.noComplete through mapa":
        "mbarrier.arrive.noComplete.b64 %state1, [%rd5], 1;",
    "try_wait.shared::cta through mapa":
        "mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r4], 0;",
    "arrive.shared::cta through mapa": "mbarrier.arrive.shared::cta.b64 %state1, [%r4];",
    "expect_tx.shared::cta through mapa":
        "mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r4], 8;",
}


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("op", _WRONG, ids=list(_WRONG))
def test_an_mbarrier_operation_on_a_peer_ctas_object_is_reported(op, schedule):
  """CTA 1 uses CTA 0's barrier through a generic address (mapa to rank 0)."""
  err = _rule(_PEER.format(rank=0, body="@%p3 bra END;\n  " + _WRONG[op]), schedule,
              cluster=2)
  assert err.rule == "barrier-peer" and err.cta == 1
  assert "CTA 0's mbarrier" in err.explained


@pytest.mark.parametrize("form", ["expect_tx", "complete_tx"])
def test_a_generic_expect_or_complete_tx_on_a_peer_is_refused(form):
  """Which window their generic form takes is not decided: refused by name."""
  with pytest.raises(NotImplementedError, match=f"mbarrier.{form} through a generic"):
    _launch(_PEER.format(rank=0, body=f"@%p3 bra END;\n  mbarrier.{form}.relaxed.cta.b64 "
                         "[%rd5], 8;"), 0, cluster=2)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_remote_arrive_and_a_local_wait_pass(schedule):
  _launch(_PEER.format(rank=0, body=_LOCAL_WAIT +
                       "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r4];"),
          schedule, cluster=2)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_generic_address_mapped_to_the_own_rank_is_the_own_object(schedule):
  """mapa to %cluster_ctarank names the executing CTA's barrier: wait and arrive on it
  through the generic address, and arrive through .shared::cluster, all pass."""
  _launch(_PEER.format(rank="%r2", body="""
  mbarrier.arrive.shared::cluster.b64 _, [%r4];
  mbarrier.try_wait.parity.b64 %p2, [%rd5], 0;
  @!%p2 bra END;
  mbarrier.arrive.b64 %state1, [%rd5];
WAIT:
  mbarrier.test_wait.parity.b64 %p2, [%rd5], 1;
  @!%p2 bra WAIT;
  mbarrier.inval.b64 [%rd5];"""), schedule, cluster=2)


# -- phase-overrun -------------------------------------------------------------------

# Thread 32 (the producer) arrives twice on a 1-count barrier (two phases complete),
# then sets a flag with a relaxed store; thread 0 polls the flag (relaxed: it orders
# nothing) and then waits for parity 0 and parity 1, meaning phases 0 and 1.
_OVERRUN = """
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 32;
  @%p1 mbarrier.init.shared.b64 [%r3], 1;
  @%p1 st.shared.u32 [%r3+16], 0;
  bar.sync 0;
  @%p2 bra PRODUCE;
  @!%p1 bra END;
FLAG:
  ld.relaxed.cta.shared.u32 %r5, [%r3+16];
  setp.eq.u32 %p3, %r5, 0;
  @%p3 bra FLAG;
  {waits}
  bra END;
PRODUCE:
  mbarrier.arrive.shared.b64 %state1, [%r3];
  mbarrier.arrive.shared.b64 %state2, [%r3];
  st.relaxed.cta.shared.u32 [%r3+16], 1;
END:
"""


def _wait(par, test="try_wait"):
  return f"""W{par}:
  mbarrier.{test}.parity.shared::cta.b64 %p4, [%r3], {par};
  @!%p4 bra W{par};"""


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("test", ["try_wait", "test_wait"])
def test_a_producer_two_phases_ahead_of_the_waiter_is_reported(test, schedule):
  err = _rule(_OVERRUN.format(waits=_wait(0, test) + _wait(1, test)), schedule, block=64)
  assert err.rule == "phase-overrun" and err.thread == 0
  assert "meaning phase 0" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_warp_two_phases_behind_is_reported_as_lane_by_lane(schedule):
  """Every lane of warp 0 waits (the warp form of the wait): the same finding."""
  body = _OVERRUN.format(waits=_wait(0) + _wait(1)).replace(
      "@!%p1 bra END;", "setp.ge.u32 %p6, %r1, 32;\n  @%p6 bra END;")
  err = _rule(body, schedule, block=64)
  assert err.rule == "phase-overrun" and err.thread == 0
  assert "meaning phase 0" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_warp_s_no_complete_states_decode_each_lane_s_pending_count(schedule):
  """32 lanes arrive.noComplete (count 1) on a 64-count barrier at once (the warp form
  of the arrive): their pending counts before are 64 down to 33, one each."""
  out = _launch("""
  mov.u32 %r3, __dynamic_shmem__0;
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared.b64 [%r3], 64;
  bar.sync 0;
  mbarrier.arrive.noComplete.shared.b64 %state1, [%r3], 1;
  mbarrier.pending_count.b64 %r5, %state1;
  mul.wide.u32 %rd2, %r1, 4;
  add.u64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r5;""", schedule)
  assert sorted(out[:32].tolist()) == list(range(33, 65))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_state_two_phases_old_is_reported(schedule):
  """A state from the arrive in phase 0, waited on once phase 1 completed too."""
  err = _rule("""
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared.b64 [%r3], 1;
  bar.sync 0;
  @!%p1 bra END;
  mbarrier.arrive.shared.b64 %state1, [%r3];
  mbarrier.arrive.shared.b64 %state2, [%r3];
  mbarrier.test_wait.shared.b64 %p4, [%r3], %state1;
END:""", schedule)
  assert err.rule == "phase-overrun" and "state of an arrive in phase 0" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_fresh_state_and_the_last_phase_waited_by_its_arriver_pass(schedule):
  """The state of the arrive that completed phase 1 (the preceding phase), and a
  parity wait by the thread whose arrivals completed phases 0 and 1."""
  _launch("""
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared.b64 [%r3], 1;
  bar.sync 0;
  @!%p1 bra END;
  mbarrier.arrive.shared.b64 %state1, [%r3];
  mbarrier.arrive.shared.b64 %state2, [%r3];
  mbarrier.test_wait.shared.b64 %p4, [%r3], %state2;
  @!%p4 bra END;
  mbarrier.test_wait.parity.shared.b64 %p4, [%r3], 1;
END:""", schedule)


# A two-barrier ring of depth 1: thread 32 waits on "empty" (parity 1 first: the phase
# before phase 0), writes the word and arrives on "full"; thread 0 waits on "full",
# adds the word to its sum and arrives on "empty"; four rounds.
_RING = """
  mov.u32 %r3, __dynamic_shmem__0;
  add.u32 %r4, %r3, 8;
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 32;
  @%p1 mbarrier.init.shared.b64 [%r3], 1;
  @%p1 mbarrier.init.shared.b64 [%r4], 1;
  bar.sync 0;
  mov.u32 %r6, 0;
  mov.u32 %r7, 0;
  @%p2 bra PRODUCE;
  @!%p1 bra END;
CONSUME:
  and.b32 %r8, %r6, 1;
CW:
  mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r3], %r8;
  @!%p4 bra CW;
  ld.shared.u32 %r9, [%r3+16];
  add.u32 %r7, %r7, %r9;
  mbarrier.arrive.shared.b64 %state1, [%r4];
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p5, %r6, 4;
  @%p5 bra CONSUME;
  st.global.u32 [%rd1], %r7;
  bra END;
PRODUCE:
  and.b32 %r8, %r6, 1;
  xor.b32 %r8, %r8, 1;
PW:
  mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r4], %r8;
  @!%p4 bra PW;
  add.u32 %r9, %r6, 10;
  st.shared.u32 [%r3+16], %r9;
  mbarrier.arrive.shared.b64 %state1, [%r3];
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p5, %r6, 4;
  @%p5 bra PRODUCE;
END:
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_two_barrier_ring_passes(schedule):
  assert _launch(_RING, schedule, block=64)[0] == 10 + 11 + 12 + 13


# -- arrive_drop and pending_count ---------------------------------------------------

# A 2-count barrier: thread 32 drops out with arrive_drop in phase 0 ({drop}); thread 0
# arrives (completing phase 0), then makes phase 1's arrivals ({second}) and waits for
# it; pending_count reads the pending count before its .noComplete arrive-on.
_DROP = """
  mov.u32 %r3, __dynamic_shmem__0;
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 32;
  @%p1 mbarrier.init.shared.b64 [%r3], 2;
  bar.sync 0;
  @%p2 {drop}
  bar.sync 0;
  @!%p1 bra END;
  mbarrier.arrive.shared.b64 %state1, [%r3];
  {second}
W:
  mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r3], 1;
  @!%p4 bra W;
END:
"""
_DROPS = {
    "plain": "mbarrier.arrive_drop.shared.b64 %state1, [%r3];",
    "release.cta, count": "mbarrier.arrive_drop.release.cta.shared::cta.b64 %state1, [%r3], 1;",
    "relaxed.cluster": "mbarrier.arrive_drop.relaxed.cluster.shared::cta.b64 %state1, [%r3];",
    "noComplete": "mbarrier.arrive_drop.noComplete.release.cta.shared.b64 %state1, [%r3], 1;",
    "shared::cluster": "mbarrier.arrive_drop.release.cluster.shared::cluster.b64 _, [%r3];",
    "expect_tx, completed": "mbarrier.arrive_drop.expect_tx.shared::cta.b64 %state1, [%r3], "
                            "8;\n  @%p2 mbarrier.complete_tx.relaxed.cta.shared::cta.b64 "
                            "[%r3], 8;",
}


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("drop", _DROPS, ids=list(_DROPS))
def test_arrive_drop_lowers_the_count_of_later_phases(drop, schedule):
  """Phase 1 completes with thread 0's one arrival: the drop lasts."""
  _launch(_DROP.format(drop=_DROPS[drop],
                       second="mbarrier.arrive.shared.b64 %state2, [%r3];"),
          schedule, block=64)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_pending_count_reads_the_count_before_a_no_complete_arrive(schedule):
  """3-count barrier: arrive.noComplete of 1 (pending 3 before), then arrive_drop.noComplete
  of 1 (pending 2 before; the expected count drops to 2), then the last arrival."""
  out = _launch("""
  mov.u32 %r3, __dynamic_shmem__0;
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  @!%p1 bra END;
  mbarrier.init.shared.b64 [%r3], 3;
  mbarrier.arrive.noComplete.shared.b64 %state1, [%r3], 1;
  mbarrier.pending_count.b64 %r5, %state1;
  mbarrier.arrive_drop.noComplete.shared.b64 %state2, [%r3], 1;
  mbarrier.pending_count.b64 %r6, %state2;
  mbarrier.arrive.shared.b64 %state3, [%r3];
  mbarrier.arrive.noComplete.shared.b64 %state1, [%r3], 1;
  mbarrier.pending_count.b64 %r7, %state1;
  st.global.v2.u32 [%rd1], {%r5, %r6};
  st.global.u32 [%rd1+8], %r7;
END:""", schedule)
  assert out[:3].tolist() == [3, 2, 2]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_pending_count_of_a_plain_arrive_state_is_refused(schedule):
  with pytest.raises(NotImplementedError, match="pending_count"):
    _launch("""
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  @!%p1 bra END;
  mbarrier.init.shared.b64 [%r3], 2;
  mbarrier.arrive.shared.b64 %state1, [%r3];
  mbarrier.pending_count.b64 %r5, %state1;
END:""", schedule)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_arriving_for_a_dropped_thread_overflows_a_later_phase(schedule):
  """After the drop phase 1 expects one arrival; thread 0 arrives with count 2."""
  err = _rule(_DROP.format(drop=_DROPS["plain"],
                           second="mbarrier.arrive.shared.b64 %state2, [%r3], 2;"),
              schedule, block=64)
  assert err.rule == "arrival-overflow" and "count 1" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_dropping_more_than_the_expected_count_is_reported(schedule):
  err = _rule(_DROP.format(drop="mbarrier.arrive_drop.shared.b64 %state1, [%r3], 3;",
                           second=""), schedule, block=64)
  assert err.rule == "arrival-overflow" and "below zero" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_no_complete_drop_that_completes_the_phase_is_reported(schedule):
  err = _rule(_DROP.format(
      drop="mbarrier.arrive_drop.noComplete.shared.b64 %state1, [%r3], 1;\n  @%p2 "
           "mbarrier.arrive_drop.noComplete.shared.b64 %state1, [%r3], 1;", second=""),
      schedule, block=64)
  assert err.rule == "arrive-nocomplete"


# CTA 1 writes a word into CTA 0's shared memory, then arrives on CTA 0's barrier through
# the generic address of mapa.u64 with the sink as its state (the ISA's Example 4 of
# mbarrier.test_wait / try_wait); CTA 0 waits on its own barrier and copies the word out.
_GENERIC_REMOTE = """
  @!%p3 bra ARRIVE;
WAIT:
  mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p2, [%r3], 0;
  @!%p2 bra WAIT;
  ld.shared.u32 %r5, [%r3+16];
  ld.param.u64 %rd1, [k_param_0];
  st.global.u32 [%rd1], %r5;
  bra END;
ARRIVE:
  mov.u32 %r6, 7;
  st.shared::cluster.u32 [%r4+16], %r6;
  """
_GENERIC_ARRIVES = {
    "arrive": "mbarrier.arrive.release.cluster.b64 _, [%rd5];",
    "arrive_drop": "mbarrier.arrive_drop.release.cluster.b64 _, [%rd5];",
    "arrive.expect_tx": "mbarrier.arrive.expect_tx.release.cluster.b64 _, [%rd5], 0;",
}


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("arrive", _GENERIC_ARRIVES, ids=list(_GENERIC_ARRIVES))
def test_a_generic_arrive_with_the_sink_on_a_peers_mbarrier_passes(arrive, schedule):
  """The arrive completes CTA 0's phase (else the wait would hang) and releases CTA 1's
  write to CTA 0's waiter."""
  out = _launch(_PEER.format(rank=0, body=_GENERIC_REMOTE + _GENERIC_ARRIVES[arrive]),
                schedule, cluster=2)
  assert out[0] == 7


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_relaxed_generic_arrive_on_a_peer_releases_nothing(schedule):
  """The same arrive, .relaxed: the phase completes, but CTA 0's read races CTA 1's
  write."""
  err = _rule(_PEER.format(rank=0, body=_GENERIC_REMOTE +
                           "mbarrier.arrive.relaxed.cluster.b64 _, [%rd5];"),
              schedule, cluster=2)
  assert err.rule == "race" and err.cta == 0
