"""Store buffering and fences (check/strong.py's stale reads, check/fences.py's
Fence-SC order), and release/acquire through a relaxed poll followed by an acquire.

Each wrong kernel is reported under every schedule of memory.SCHEDULES beside a
correct neighbour that passes under every one; every kernel assembles with ptxas for
sm_90a first (docs/checker.md quotes the ISA sentences behind each verdict).
"""

import numpy as np
import pytest

from ptx_harness import SCHEDULES, assemble, finding, kernel, output


def _run(body, schedule, *, cluster=1, block=64):
  """The kernel's output words (u32), assembled by ptxas first; fails the test on any
  finding."""
  return output(assemble(kernel(body)), [np.zeros(16, np.uint32)], cluster=cluster,
                smem_bytes=64, block=block, schedule=schedule).tolist()


def _finding(body, schedule, *, cluster=1, block=64):
  """The first finding of the kernel (assembled by ptxas first); fails the test where
  there is none."""
  return finding(assemble(kernel(body)), [np.zeros(16, np.uint32)], cluster=cluster,
                 smem_bytes=64, block=block, schedule=schedule)


# -- store buffering: Dekker's mutual exclusion ---------------------------------------

# Two threads (A: %p1, B: %p2) each set their own flag, fence, read the other's flag,
# (zeroed first by each CTA's thread 0)
# and enter the critical section (a weak write of SMEM byte 32 of CTA 0) if it is 0.
# {FLAGS} sets %rX (own flag address) and %rY (the other's); {SET}/{GET} use them.
_DEKKER = """
  .reg .b32 %rx<4>;
  mov.u32 %r3, __dynamic_shmem__0;
  ld.param.u64 %rd1, [k_param_0];
  {WHO}
  {FLAGS}
  setp.eq.u32 %p4, %r1, 0;
  @%p4 st.shared.v2.u32 [%r3], {0, 0};
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  @!%p1 bra END;
  {SET}
  {FENCE}
  {GET}
  setp.ne.u32 %p3, %rx2, 0;
  @%p3 bra END;
  mapa.shared::cluster.u32 %rx3, %r3, 0;
  st.shared::cluster.u32 [%rx3+32], %r1;
END:
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
"""
# one CTA: threads 0 and 32 (two warps); flags at SMEM bytes 0 and 4
_ONE_CTA = ("setp.eq.u32 %p1, %r1, 0; setp.eq.u32 %p2, %r1, 32; or.pred %p1, %p1, %p2;",
            "selp.u32 %rx0, 4, 0, %p2; add.u32 %rx0, %r3, %rx0; "
            "selp.u32 %rx1, 0, 4, %p2; add.u32 %rx1, %r3, %rx1;")
# two CTAs of a cluster: thread 0 of each; flags in CTA 0's SMEM, bytes 0 and 4
_TWO_CTAS = ("setp.eq.u32 %p1, %r1, 0; setp.eq.u32 %p2, %r2, 1;",
             "selp.u32 %rx0, 4, 0, %p2; add.u32 %rx0, %r3, %rx0; "
             "mapa.shared::cluster.u32 %rx0, %rx0, 0; "
             "selp.u32 %rx1, 0, 4, %p2; add.u32 %rx1, %r3, %rx1; "
             "mapa.shared::cluster.u32 %rx1, %rx1, 0;")
_SHARED = {"set": "st.{sem}.{scope}.shared::cluster.u32 [%rx0], 1;",
           "atom": "atom.{sem}.{scope}.shared::cluster.exch.b32 %rx2, [%rx0], 1;",
           "get": "ld.relaxed.{scope}.shared::cluster.u32 %rx2, [%rx1];"}
# global flags: words 0 and 1 of the output buffer (generic addresses from the param)
_GLOBAL = {"set": "st.{sem}.{scope}.global.u32 [%rd2], 1;",
           "atom": "atom.{sem}.{scope}.global.exch.b32 %rx2, [%rd2], 1;",
           "get": "ld.relaxed.{scope}.global.u32 %rx2, [%rd3];"}
_GLOBAL_ADDR = ("cvt.u64.u32 %rd4, %rx0; sub.u64 %rd4, %rd4, {base}; add.u64 %rd2, %rd1, %rd4; "
                "cvt.u64.u32 %rd4, %rx1; sub.u64 %rd4, %rd4, {base}; add.u64 %rd3, %rd1, %rd4;")


def _dekker(fence, *, ctas=1, space="shared", write="set", sem="relaxed"):
  scope = "cta" if ctas == 1 else "cluster"
  if space == "global":
    scope = "gpu"
  who, flags = _ONE_CTA if ctas == 1 else _TWO_CTAS
  forms = _SHARED if space == "shared" else _GLOBAL
  if space == "global":   # word offsets 0 / 4 as a byte offset from the buffer
    flags = ("selp.u32 %rx0, 4, 0, %p2; selp.u32 %rx1, 0, 4, %p2; " +
             _GLOBAL_ADDR.format(base=0))
  sem = "relaxed" if write == "atom" and sem == "relaxed" else sem
  return (_DEKKER.replace("{WHO}", who).replace("{FLAGS}", flags)
          .replace("{SET}", forms[write].format(sem=sem, scope=scope))
          .replace("{GET}", forms["get"].format(scope=scope))
          .replace("{FENCE}", fence.format(scope=scope)))


_VARIANTS = [dict(), dict(ctas=2), dict(space="global"), dict(ctas=2, space="global"),
             dict(sem="release"), dict(write="atom"), dict(ctas=2, write="atom", sem="release")]
_ORDERING_ONLY = ["fence.acq_rel.{scope};", "fence.release.{scope}; fence.acquire.{scope};"]
_SC = ["fence.sc.{scope};", "membar.{bar};"]


def _ids(v):
  return "-".join(f"{k}={x}" for k, x in v.items()) or "shared-cta"


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("fence", _ORDERING_ONLY)
@pytest.mark.parametrize("variant", _VARIANTS, ids=_ids)
def test_dekker_with_acq_rel_fences_is_a_race(variant, fence, schedule):
  """Store buffering: under fence.acq_rel both threads may read the other's flag as
  0, and both write the critical section's data."""
  err = _finding(_dekker(fence, **variant), schedule, cluster=variant.get("ctas", 1))
  assert err.rule == "race", err
  assert "SMEM bytes 32..35" in err.message, err.message


def _sc_fence(fence, variant):
  if not fence.startswith("membar"):
    return fence
  space, ctas = variant.get("space", "shared"), variant.get("ctas", 1)
  return fence.replace("{bar}", "gl" if space == "global" or ctas == 2 else "cta")


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("fence", _SC)
@pytest.mark.parametrize("variant", _VARIANTS, ids=_ids)
def test_dekker_with_sc_fences_passes(variant, fence, schedule):
  """fence.sc (membar: its synonym) orders the two fences: the later one's thread
  sees the earlier one's flag, so at most one thread enters."""
  _run(_dekker(_sc_fence(fence, variant), **variant), schedule,
       cluster=variant.get("ctas", 1))   # (no finding)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_sc_fences_of_narrow_scope_do_not_order_two_ctas(schedule):
  """fence.sc.cta in two CTAs: not morally strong, so no Fence-SC order between them."""
  err = _finding(_dekker("fence.sc.cta;", ctas=2), schedule, cluster=2)
  assert err.rule == "race", err


# -- a relaxed poll, then an acquire ------------------------------------------------

# Thread 0 writes data (SMEM byte 16) and publishes flag (byte 0 of CTA 0, zeroed
# first by each CTA's thread 0; {PUB});
# thread 32 (or CTA 1's thread 0) polls the flag ({POLL} into %r4), then {AFTER}, then
# reads the data into the output.
_MP = """
  mov.u32 %r3, __dynamic_shmem__0;
  ld.param.u64 %rd1, [k_param_0];
  {WHO}
  setp.eq.u32 %p4, %r1, 0;
  @%p4 st.shared.u32 [%r3], 0;
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  @%p2 bra CONSUMER;
  @!%p1 bra END;
  mapa.shared::cluster.u32 %r6, %r3, 0;
  st.shared::cluster.u32 [%r6+16], 42;
  {PUB}
  bra END;
CONSUMER:
  mapa.shared::cluster.u32 %r6, %r3, 0;
POLL:
  {POLL}
  setp.eq.u32 %p3, %r4, 0;
  @%p3 bra POLL;
  {AFTER}
  ld.shared::cluster.u32 %r5, [%r6+16];
  st.global.u32 [%rd1], %r5;
END:
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
"""
_MP_WHO = {1: "setp.eq.u32 %p1, %r1, 0; setp.eq.u32 %p2, %r1, 32;",
           2: "setp.eq.u32 %p4, %r1, 0; setp.eq.u32 %p1, %r2, 0; and.pred %p1, %p1, %p4;"
              " setp.eq.u32 %p2, %r2, 1; and.pred %p2, %p2, %p4;"}


def _mp(pub, poll, after, ctas=1):
  scope = "cta" if ctas == 1 else "cluster"
  return (_MP.replace("{WHO}", _MP_WHO[ctas]).replace("{PUB}", pub.format(scope=scope))
          .replace("{POLL}", poll.format(scope=scope))
          .replace("{AFTER}", after.format(scope=scope)))


_REL = "st.release.{scope}.shared::cluster.u32 [%r6], 1;"
# a release, then a relaxed read-modify-write after it (the acquire reads 2: a later
# value of the release sequence)
_REL_SEQ = _REL + " red.relaxed.{scope}.shared::cluster.add.u32 [%r6], 1;"
_RELAXED_PUB = "st.relaxed.{scope}.shared::cluster.u32 [%r6], 1;"
_POLL = "ld.relaxed.{scope}.shared::cluster.u32 %r4, [%r6];"
_ACQ = "ld.acquire.{scope}.shared::cluster.u32 %r7, [%r6];"
_RELAXED_AGAIN = "ld.relaxed.{scope}.shared::cluster.u32 %r7, [%r6];"
_FENCE_ACQ = "fence.acquire.{scope};"

_GOOD = [(_REL, _ACQ, 1), (_REL, _ACQ, 2), (_REL_SEQ, _ACQ, 1), (_REL_SEQ, _ACQ, 2),
         (_REL, _FENCE_ACQ, 1), (_REL, _FENCE_ACQ, 2)]
_BAD = [(_REL, _RELAXED_AGAIN, 1), (_REL, _RELAXED_AGAIN, 2), (_RELAXED_PUB, _ACQ, 1),
        (_RELAXED_PUB, _ACQ, 2), (_RELAXED_PUB, _FENCE_ACQ, 2)]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("pub,after,ctas", _GOOD)
def test_relaxed_poll_then_acquire_passes(pub, after, ctas, schedule):
  """The acquire reads the release's value (or a later one of its release sequence):
  it synchronises with the release, and the data read is ordered."""
  out = _run(_mp(pub, _POLL, after, ctas), schedule, cluster=ctas)   # (no finding)
  assert out[0] == 42


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("pub,after,ctas", _BAD)
def test_relaxed_poll_without_release_acquire_is_a_race(pub, after, ctas, schedule):
  """No acquire (a second relaxed load), or no release (a relaxed store): the data
  read is not ordered after its write."""
  err = _finding(_mp(pub, _POLL, after, ctas), schedule, cluster=ctas)
  assert err.rule == "race" and "SMEM bytes 16..19" in err.message, err


# -- what a strong read may not return ----------------------------------------------

_ZERO_FLAGS = """
  mov.u32 %r3, __dynamic_shmem__0;
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p4, %r1, 0;
  @%p4 st.shared.v2.u32 [%r3], {0, 0};
  bar.sync 0;
"""
# thread 0 raises the flag, a bar.sync orders it before thread 32's one read
_AFTER_BAR_SYNC = _ZERO_FLAGS + """
  @%p4 st.relaxed.cta.shared.u32 [%r3], 1;
  bar.sync 0;
  setp.eq.u32 %p2, %r1, 32;
  @!%p2 bra END;
  ld.relaxed.cta.shared.u32 %r5, [%r3];
  st.global.u32 [%rd1], %r5;
END:
"""
# thread 0 raises flag A; thread 32 polls it, then releases flag B; thread 64 acquires
# B and reads A once: thread 32's read of A happens before it (read-read coherence)
_THROUGH_A_READER = _ZERO_FLAGS + """
  setp.eq.u32 %p2, %r1, 32;
  setp.eq.u32 %p3, %r1, 64;
  @%p4 st.relaxed.cta.shared.u32 [%r3], 1;
  @%p2 bra R1;
  @%p3 bra R2;
  bra END;
R1:
  ld.relaxed.cta.shared.u32 %r4, [%r3];
  setp.eq.u32 %p5, %r4, 0;
  @%p5 bra R1;
  st.release.cta.shared.u32 [%r3+4], 1;
  bra END;
R2:
  ld.acquire.cta.shared.u32 %r4, [%r3+4];
  setp.eq.u32 %p5, %r4, 0;
  @%p5 bra R2;
  ld.relaxed.cta.shared.u32 %r5, [%r3];
  st.global.u32 [%rd1], %r5;
END:
"""
# thread 32 reads thread 0's flag twice, unordered with its write: the second read
# returns a value no older than the first (coherence), the newest (a retry)
_TWICE = _ZERO_FLAGS + """
  @%p4 st.relaxed.cta.shared.u32 [%r3], 1;
  setp.eq.u32 %p2, %r1, 32;
  @!%p2 bra END;
  nanosleep.u32 100;
  ld.relaxed.cta.shared.u32 %r5, [%r3];
  ld.relaxed.cta.shared.u32 %r6, [%r3];
  st.global.u32 [%rd1], %r5;
  st.global.u32 [%rd1+4], %r6;
END:
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("body", [_AFTER_BAR_SYNC, _THROUGH_A_READER],
                         ids=["after-bar-sync", "through-a-reader"])
def test_a_read_after_a_write_it_happens_after_is_not_stale(body, schedule):
  out = _run(body, schedule, block=96)   # (no finding)
  assert out[0] == 1


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_second_read_is_no_older_than_the_first(schedule):
  out = _run(_TWICE, schedule, block=96)   # (no finding)
  assert out[1] == 1 and out[0] in (0, 1)
