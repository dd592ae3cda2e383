"""Protocols that are wrong in some interleaving only, each reported in every schedule
(the schedules' systematic choices: docs/checker.md, "Schedules: how many, where"),
next to a correct neighbour that passes in every schedule; every kernel assembles with
ptxas for sm_90a.

* Phase overrun: a waiter that the next phases can pass before it polls.  A thread may
  always be slower than the others, so in every schedule an observer (a waiter on a
  phase it did not arrive in) sees a completed phase as late as it can, and the threads
  whose arrivals make the next phases run first: a producer that does not wait for the
  consumer's "empty" signal completes two phases before the consumer's next wait, whose
  parity then names the phase two behind (PTX ISA, mbarrier.test_wait / try_wait:
  "Operand phaseParity specifies the integer parity of either the current phase or the
  immediately preceding phase of the mbarrier object").  A blocked ``try_wait`` still
  observes the phase it waited for ("Suspended thread resumes execution when the
  specified phase completes").
* Arrival order: which of two pending completions lands first.  Two asynchronous stores
  meant for two phases of one barrier, each of which completes the first (the tx-count
  expects one of them): whichever lands first is the phase's data, and the launch runs
  the other order too; so a consumer reading the other store's bytes races in every
  schedule.
  Two threads arriving on a phase that expects one arrival: whichever arrives first
  completes it, and the launch runs the other order too.
"""

import pytest

from ptx_harness import SCHEDULES, finding
from test_isa_rules import _launch


def _finding(body, schedule, **kw):
  """The run's first finding (``_launch`` with the harness's ``finding``: fails where
  there is none)."""
  return _launch(body, schedule, of=finding, **kw)

# A producer (thread 32) writes word r (10 + r) at byte 16 + 4 r of shared memory and
# arrives on "full" (offset 0, count 1), for rounds r = 0, 1, 2; thread 0 waits on
# "full" with parity r & 1 ({wait}), adds word r to its sum and stores the sum.  With
# {empty} the consumer arrives on "empty" (offset 8) after each read and the producer
# waits on it (parity (r & 1) ^ 1: the phase before phase 0 first) before each write:
# a ring of depth 1.  Without it the producer runs ahead: each word has its own slot, so
# only the phases are wrong.
_RING = """
  mov.u32 %r3, __dynamic_shmem__0;
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 32;
  @%p1 mbarrier.init.shared.b64 [%r3], 1;
  @%p1 mbarrier.init.shared.b64 [%r3+8], 1;
  bar.sync 0;
  mov.u32 %r6, 0;
  mov.u32 %r7, 0;
  @%p2 bra PRODUCE;
  @!%p1 bra END;
CONSUME:
  and.b32 %r8, %r6, 1;
CW:
  mbarrier.{wait}.parity.shared::cta.b64 %p4, [%r3], %r8;
  @!%p4 bra CW;
  shl.b32 %r10, %r6, 2;
  add.u32 %r11, %r3, %r10;
  ld.shared.u32 %r9, [%r11+16];
  add.u32 %r7, %r7, %r9;
  {release}
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p5, %r6, 3;
  @%p5 bra CONSUME;
  st.global.u32 [%rd1], %r7;
  bra END;
PRODUCE:
  {acquire}
  add.u32 %r9, %r6, 10;
  shl.b32 %r10, %r6, 2;
  add.u32 %r11, %r3, %r10;
  st.shared.u32 [%r11+16], %r9;
  mbarrier.arrive.shared.b64 %state1, [%r3];
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p5, %r6, 3;
  @%p5 bra PRODUCE;
END:
"""
_EMPTY_RELEASE = "mbarrier.arrive.shared.b64 %state2, [%r3+8];"
_EMPTY_ACQUIRE = """and.b32 %r8, %r6, 1;
  xor.b32 %r8, %r8, 1;
PW:
  mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r3+8], %r8;
  @!%p4 bra PW;"""

_WAITS = ["try_wait", "test_wait"]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("wait", _WAITS)
def test_a_ring_without_an_empty_barrier_overruns_the_consumer(wait, schedule):
  err = _finding(_RING.format(wait=wait, release="", acquire=""), schedule)
  assert err.rule == "phase-overrun" and err.thread == 0, err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("wait", _WAITS)
def test_a_ring_with_an_empty_barrier_passes(wait, schedule):
  out = _launch(_RING.format(wait=wait, release=_EMPTY_RELEASE, acquire=_EMPTY_ACQUIRE),
                schedule)
  assert out[0] == 10 + 11 + 12


# Thread 0 writes word r (10 + r) at byte 16 + 4 r, arrives on a barrier of count
# {count} and waits for its phase r (parity r & 1), for r = 0, 1, 2; thread 32 (an
# observer) waits for each phase ({wait}) and adds word r to its sum; with {arrive} it
# arrives itself before each wait (count 2: the barrier is the pair's rendezvous).
# Without it nothing keeps thread 0 from completing the next phases before thread 32
# looks: it may miss phase 1.
_OBSERVER = """
  mov.u32 %r3, __dynamic_shmem__0;
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 32;
  @%p1 mbarrier.init.shared.b64 [%r3], {count};
  bar.sync 0;
  mov.u32 %r6, 0;
  mov.u32 %r7, 0;
  @%p2 bra OBSERVE;
  @!%p1 bra END;
ARRIVE:
  add.u32 %r9, %r6, 10;
  shl.b32 %r10, %r6, 2;
  add.u32 %r11, %r3, %r10;
  st.shared.u32 [%r11+16], %r9;
  mbarrier.arrive.shared.b64 %state1, [%r3];
  and.b32 %r8, %r6, 1;
AW:
  mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r3], %r8;
  @!%p4 bra AW;
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p5, %r6, 3;
  @%p5 bra ARRIVE;
  bra END;
OBSERVE:
  {arrive}
  and.b32 %r8, %r6, 1;
OW:
  mbarrier.{wait}.parity.shared::cta.b64 %p4, [%r3], %r8;
  @!%p4 bra OW;
  shl.b32 %r10, %r6, 2;
  add.u32 %r11, %r3, %r10;
  ld.shared.u32 %r9, [%r11+16];
  add.u32 %r7, %r7, %r9;
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p5, %r6, 3;
  @%p5 bra OBSERVE;
  st.global.u32 [%rd1], %r7;
END:
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("wait", _WAITS)
def test_an_observer_the_arriver_does_not_wait_for_misses_a_phase(wait, schedule):
  err = _finding(_OBSERVER.format(count=1, wait=wait, arrive=""), schedule)
  assert err.rule == "phase-overrun" and err.thread == 32, err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("wait", _WAITS)
def test_an_observer_that_arrives_too_passes(wait, schedule):
  out = _launch(_OBSERVER.format(
      count=2, wait=wait, arrive="mbarrier.arrive.shared.b64 %state2, [%r3];"), schedule)
  assert out[0] == 10 + 11 + 12


# CTA 1's thread 0 stores word {first} and then word {second} of CTA 0 with st.async,
# both completing on CTA 0's barrier (offset 8), on which CTA 0's thread 0 arrived
# expecting {tx} bytes; CTA 0's thread 0 waits for phase 0 and reads word 16, then
# ({then}) expects 4 more bytes and waits for phase 1.  Expecting 4 bytes a phase, the
# two stores are meant for phases 0 and 1, but nothing orders their landing: phase 0
# completes with whichever lands first, so the read of word 16 races where the other
# does, whatever the issue order.  Expecting 8 bytes in phase 0 is right.
_TWO_STORES = """
  mov.u32 %r3, __dynamic_shmem__0;
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r2, 0;
  add.u32 %r4, %r3, 8;
  @%p1 mbarrier.init.shared::cta.b64 [%r4], 1;
  fence.mbarrier_init.release.cluster;
  and.pred %p6, %p1, %p2;
  @%p6 mbarrier.arrive.expect_tx.shared::cta.b64 %state1, [%r4], {tx};
  barrier.cluster.arrive.release;
  barrier.cluster.wait.acquire;
  @!%p1 bra DONE;
  @%p2 bra READ;
  mapa.shared::cluster.u32 %r5, %r3, 0;
  mapa.shared::cluster.u32 %r6, %r4, 0;
  st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r5+{first}], 7, [%r6];
  st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r5+{second}], 9, [%r6];
  bra DONE;
READ:
  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r4], 0;
  @!%p3 bra READ;
  ld.shared.u32 %r7, [%r3+16];
  st.global.u32 [%rd1], %r7;
  {then}
DONE:
  barrier.cluster.arrive.release;
  barrier.cluster.wait.acquire;
"""
_PHASE_1 = """mbarrier.arrive.expect_tx.shared::cta.b64 %state2, [%r4], 4;
READ1:
  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r4], 1;
  @!%p3 bra READ1;"""


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("first,second", [(16, 20), (20, 16)])
def test_two_stores_for_two_phases_race_on_the_first(first, second, schedule):
  err = _finding(_TWO_STORES.format(tx=4, first=first, second=second, then=_PHASE_1),
                 schedule, cluster=2)
  assert err.rule in ("race", "early-read"), err.explained
  assert "CTA 0 SMEM bytes 16" in err.explained, err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("first,second", [(16, 20), (20, 16)])
def test_two_stores_for_one_phase_pass(first, second, schedule):
  out = _launch(_TWO_STORES.format(tx=8, first=first, second=second, then=""), schedule,
                cluster=2)
  assert out[0] == (7 if first == 16 else 9)


# Threads 32 and 64 each write their word (at 16 and 20) and arrive on a barrier of
# count {count}; thread 0 waits for phase 0 and reads thread 32's word.  Expecting one
# arrival, the phase completes with whichever arrives first: where thread 64's does, the
# read races with thread 32's write.
_TWO_ARRIVALS = """
  mov.u32 %r3, __dynamic_shmem__0;
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared.b64 [%r3], {count};
  bar.sync 0;
  setp.eq.u32 %p2, %r1, 32;
  setp.eq.u32 %p3, %r1, 64;
  @%p2 st.shared.u32 [%r3+16], 7;
  @%p3 st.shared.u32 [%r3+20], 9;
  @%p2 mbarrier.arrive.shared.b64 %state1, [%r3];
  @%p3 mbarrier.arrive.shared.b64 %state1, [%r3];
  @!%p1 bra END;
W:
  mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r3], 0;
  @!%p4 bra W;
  ld.shared.u32 %r7, [%r3+16];
  st.global.u32 [%rd1], %r7;
END:
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_two_arrivals_for_one_expected_race(schedule):
  """(Where thread 0 polls only after both arrived, its parity names phase 2, two
  phases on: ``phase-overrun``, as right.)"""
  err = _finding(_TWO_ARRIVALS.format(count=1), schedule, block=96)
  assert err.rule == "phase-overrun" or \
      (err.rule == "race" and "CTA 0 SMEM bytes 16" in err.explained), err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_two_arrivals_for_two_expected_pass(schedule):
  assert _launch(_TWO_ARRIVALS.format(count=2), schedule, block=96)[0] == 7
