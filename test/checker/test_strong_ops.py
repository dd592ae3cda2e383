"""Strong operations and the reads-from relation (check/strong.py), spin loops
(check/run.py's parking), and named CTA barriers (check/barriers.py), on small
hand-written kernels that ptxas accepts for sm_90a.

Each protocol comes as a correct kernel that passes and one or more broken
variants, each reported under every CI schedule (docs/checker.md quotes the ISA
sentence behind each verdict).
"""

import re

import numpy as np
import pytest

from ptx_harness import SCHEDULES, finding, kernel, output

# Thread 0 of each CTA zeroes the word at SMEM offset 0 (a flag or a counter); after a
# cluster barrier every other thread goes to END.
_ZEROED = """
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 st.shared.u32 [%r3], 0;
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  @!%p1 bra END;
"""

# A flag at SMEM offset 0 of CTA 0, data at offset 16.  Thread 0 of each CTA
# zeroes its flag; after a cluster barrier, CTA 1's thread 0 writes the data into
# CTA 0 and raises the flag (PUBLISH); CTA 0's thread 0 polls it (POLL) and copies
# the data out.
_FLAG = _ZEROED + """
  setp.eq.u32 %p2, %r2, 1;
  @%p2 bra PRODUCER;
CONSUMER:
  {POLL}
  setp.eq.u32 %p3, %r4, 0;
  @%p3 bra CONSUMER;
  {AFTER}
  ld.shared.u32 %r5, [%r3+16];
  ld.param.u64 %rd1, [k_param_0];
  st.global.u32 [%rd1], %r5;
  bra END;
PRODUCER:
  mapa.shared::cluster.u32 %r6, %r3, 0;
  st.shared::cluster.u32 [%r6+16], 42;
  {PUBLISH}
END:
"""
_RELEASE = "red.release.cluster.shared::cluster.add.u32 [%r6], 1;"
_ACQUIRE = "ld.acquire.cluster.shared.u32 %r4, [%r3];"


def _flag_kernel(publish=_RELEASE, poll=_ACQUIRE, after=""):
  return kernel(_FLAG.replace("{POLL}", poll).replace("{PUBLISH}", publish)
                .replace("{AFTER}", after))


def _run(ptx, schedule, cluster=2, block=32, words=4):
  """The kernel's one output (int32 words); fails the test on any finding."""
  return output(ptx, [np.zeros(words, np.int32)], dtype=np.int32, cluster=cluster,
                smem_bytes=128, block=block, schedule=schedule).tolist()


def _passes(ptx, schedule, want=42, **kw):
  out = _run(ptx, schedule, **kw)   # (no finding)
  assert out[0] == want


def _finding(ptx, schedule, cluster=2, block=32, words=4):
  """The kernel's first finding; fails the test where there is none."""
  return finding(ptx, [np.zeros(words, np.int32)], cluster=cluster, smem_bytes=128,
                 block=block, schedule=schedule)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("publish,poll,after", [
    (_RELEASE, _ACQUIRE, ""),
    ("st.release.cluster.shared::cluster.u32 [%r6], 1;", _ACQUIRE, ""),
    ("fence.release.cluster;\n  red.relaxed.cluster.shared::cluster.add.u32 [%r6], 1;",
     _ACQUIRE, ""),
    (_RELEASE, "ld.relaxed.cluster.shared.u32 %r4, [%r3];", "fence.acquire.cluster;"),
    ("atom.release.cluster.shared::cluster.exch.b32 %r7, [%r6], 1;",
     "atom.acquire.cluster.shared.or.b32 %r4, [%r3], 0;", ""),
    (_RELEASE, "ld.acquire.cluster.shared.u32 %r4, [%r3];\n  nanosleep.u32 20;", ""),
], ids=["red.release+ld.acquire", "st.release", "fence.release+red.relaxed",
        "ld.relaxed+fence.acquire", "atom.exch+atom.or", "poll with nanosleep"])
def test_a_release_acquire_flag_protocol_passes(publish, poll, after, schedule):
  """A release (or a release fence and a relaxed write) read by an acquire (or a
  relaxed read and an acquire fence) at cluster scope orders the data."""
  _passes(_flag_kernel(publish, poll, after), schedule)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("publish,poll,after,why", [
    ("red.relaxed.cluster.shared::cluster.add.u32 [%r6], 1;", _ACQUIRE, "", "relaxed write"),
    (_RELEASE, "ld.relaxed.cluster.shared.u32 %r4, [%r3];", "", "relaxed read, no fence"),
    (_RELEASE, "ld.relaxed.cluster.shared.u32 %r4, [%r3];", "fence.release.cluster;",
     "a release fence acquires nothing"),
    ("red.release.cta.shared::cluster.add.u32 [%r6], 1;",
     "ld.acquire.cta.shared.u32 %r4, [%r3];", "", "cta scope across CTAs"),
    ("fence.acquire.cluster;\n  red.relaxed.cluster.shared::cluster.add.u32 [%r6], 1;",
     _ACQUIRE, "", "an acquire fence releases nothing"),
])
def test_a_broken_flag_protocol_is_a_race(publish, poll, after, why, schedule):
  """The consumer reads the data only after it saw the flag, so both accesses happen
  in every schedule; without a release/acquire pair that is morally strong they are
  unordered."""
  finding = _finding(_flag_kernel(publish, poll, after), schedule)
  assert finding.rule == "race", finding
  # the data read, or (scopes that do not include each other) the flag itself
  assert "`ld.shared.u32 %r5, [%r3+16]`" in finding.explained or \
      "not morally strong" in finding.explained, finding


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_weak_poll_races_the_flag(schedule):
  """A spin on a plain ld: the loop yields (it may be a poll), and the weak read of
  the flag races the producer's strong write to it."""
  finding = _finding(_flag_kernel(poll="ld.shared.u32 %r4, [%r3];"), schedule)
  assert finding.rule == "race"


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("poll,where", [(_ACQUIRE, _ACQUIRE[:-1]),
                                        ("ld.shared.u32 %r4, [%r3];", "@%p3 bra CONSUMER")])
def test_a_poll_nothing_will_end_is_a_hang(poll, where, schedule):
  """Nobody raises the flag: the poller is parked, then reported at the instruction it
  yielded at (the strong load; for a weak spin, the loop's backward branch)."""
  finding = _finding(_flag_kernel(publish="", poll=poll), schedule)
  assert finding.rule == "hang"
  assert re.search(rf"CTA 0 thread 0 at PTX line \d+ \(`{re.escape(where)}`\) waiting for "
                   "a value that no other thread", finding.explained), finding


# Thread 0 of cluster 1 raises a global flag; thread 0 of cluster 0 polls it.
_CROSS_CLUSTER_POLL = kernel("""
  mov.u32 %r9, %clusterid.x;
  ld.param.u64 %rd1, [k_param_0];
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra END;
  setp.eq.u32 %p5, %r9, 1;
  @%p5 bra RAISE;
POLL:
  ld.acquire.gpu.global.u32 %r4, [%rd1];
  setp.eq.u32 %p3, %r4, 0;
  @%p3 bra POLL;
  bra END;
RAISE:
  st.release.gpu.global.u32 [%rd1], 1;
END:
""")


def test_a_poll_on_another_cluster_is_a_hang_that_says_why():
  """The checker runs a grid's clusters one after another, so cluster 0's poll of a
  flag only cluster 1 raises hangs, in every schedule; the report says that a grid's
  clusters need not run together on hardware either (CUDA guarantees that only for a
  cooperative launch).  A poll nothing ends in a one-cluster grid says nothing of it."""
  from mosaic_async_store.check import check_ptx
  report = check_ptx(_CROSS_CLUSTER_POLL, [np.zeros(4, np.int32)], smem_bytes=16, block=32,
                     cluster=1, grid=2, schedules=len(SCHEDULES))
  assert {f.rule for f in report.findings} == {"hang"}
  assert {f.schedule for f in report.findings} == set(range(len(SCHEDULES)))
  for f in report.findings:
    assert "CTA 0 thread 0" in str(f) and "The grid has 2 clusters" in str(f), f
    assert "launched cooperatively" in str(f)
  alone = _finding(_flag_kernel(publish=""), 0)
  assert "The grid has" not in alone.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_counted_poll_loop_is_not_a_hang(schedule):
  """A poll that gives up after 200 tries changes its registers each time: it runs
  to its end (no hang), and reads the flag's 0."""
  ptx = kernel("""
  mov.u32 %r3, __dynamic_shmem__0;
  st.shared.u32 [%r3], 0;
  mov.u32 %r8, 0;
POLL:
  ld.acquire.cta.shared.u32 %r4, [%r3];
  add.u32 %r8, %r8, 1;
  setp.lt.u32 %p3, %r8, 200;
  @%p3 bra POLL;
  ld.param.u64 %rd1, [k_param_0];
  st.global.u32 [%rd1], %r8;
""")
  _passes(ptx, schedule, want=200, cluster=1, block=1)


# Four CTAs: thread 0 of CTAs 1..3 writes its rank into CTA 0's data slot and adds 1
# to CTA 0's counter (ADD); CTA 0's thread 0 waits for 3, then sums the slots.
_COUNTER = _ZEROED + """
  setp.ne.u32 %p2, %r2, 0;
  @%p2 bra ADDER;
WAIT:
  ld.acquire.cluster.shared.u32 %r4, [%r3];
  setp.lt.u32 %p3, %r4, 3;
  @%p3 bra WAIT;
  ld.shared.u32 %r5, [%r3+20];
  ld.shared.u32 %r6, [%r3+24];
  ld.shared.u32 %r7, [%r3+28];
  add.u32 %r5, %r5, %r6;
  add.u32 %r5, %r5, %r7;
  ld.param.u64 %rd1, [k_param_0];
  st.global.u32 [%rd1], %r5;
  bra END;
ADDER:
  mapa.shared::cluster.u32 %r9, %r3, 0;
  shl.b32 %r10, %r2, 2;
  add.u32 %r10, %r10, %r9;
  st.shared::cluster.u32 [%r10+16], %r2;
  {ADD}
END:
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_release_sequences_continue_through_read_modify_writes(schedule):
  """Each adder's atom.add.release heads a release sequence that the later adds
  continue: the reader of the final count acquires every adder's data."""
  ptx = kernel(_COUNTER.replace(
      "{ADD}", "atom.release.cluster.shared::cluster.add.u32 %r11, [%r9], 1;"))
  _passes(ptx, schedule, want=1 + 2 + 3, cluster=4)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_relaxed_adds_release_nothing(schedule):
  ptx = kernel(_COUNTER.replace(
      "{ADD}", "atom.relaxed.cluster.shared::cluster.add.u32 %r11, [%r9], 1;"))
  assert _finding(ptx, schedule, cluster=4).rule == "race"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_atom_returns_the_old_value_and_writes_the_new(schedule):
  """cas that succeeds and one that fails, exch, min.s32 and inc, one thread."""
  ptx = kernel("""
  mov.u32 %r3, __dynamic_shmem__0;
  st.shared.u32 [%r3], 5;
  atom.shared.cas.b32 %r4, [%r3], 5, 9;
  atom.shared.cas.b32 %r5, [%r3], 5, 11;
  atom.shared.exch.b32 %r6, [%r3], -3;
  atom.shared.min.s32 %r7, [%r3], 2;
  atom.shared.inc.u32 %r8, [%r3], 100;
  ld.shared.u32 %r9, [%r3];
  ld.param.u64 %rd1, [k_param_0];
  st.global.v4.u32 [%rd1], {%r4, %r5, %r6, %r9};
""")
  # cas 5 -> 9 (returns 5); cas fails (returns 9); exch -> -3 (returns 9);
  # min(-3, 2) = -3; inc: -3 as u32 >= 100, so 0
  assert _run(ptx, schedule, cluster=1, block=1) == [5, 9, 9, 0]


# -- named CTA barriers -------------------------------------------------------------

# Warp 0 writes SMEM and arrives on barrier 1 (ARRIVE); warp 1 waits on it (WAIT) and
# copies the words out; warp 2, when the block has one, takes no part.
_NAMED = """
  mov.u32 %r3, __dynamic_shmem__0;
  shl.b32 %r4, %r1, 2;
  and.b32 %r4, %r4, 127;
  add.u32 %r5, %r3, %r4;
  shr.u32 %r6, %r1, 5;
  setp.eq.u32 %p1, %r6, 0;
  @!%p1 bra CONSUMER;
  add.u32 %r7, %r1, 100;
  st.shared.u32 [%r5], %r7;
  ARRIVE
  bra END;
CONSUMER:
  setp.ne.u32 %p2, %r6, 1;
  @%p2 bra END;
  WAIT
  ld.shared.u32 %r8, [%r5];
  ld.param.u64 %rd1, [k_param_0];
  cvt.u64.u32 %rd2, %r4;
  add.u64 %rd1, %rd1, %rd2;
  st.global.u32 [%rd1], %r8;
END:
"""


def _named_run(arrive, wait, schedule, block=96, of=_run):
  """``of`` the named-barrier kernel: its output words (``_run``: no finding), or its
  first finding (``_finding``)."""
  ptx = kernel(_NAMED.replace("ARRIVE", arrive).replace("WAIT", wait))
  return of(ptx, schedule, cluster=1, block=block, words=32)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("arrive,wait", [
    ("bar.arrive 1, 64;", "bar.sync 1, 64;"),
    ("barrier.cta.arrive.aligned 1, 64;", "barrier.cta.sync.aligned 1, 64;"),
])
def test_a_producer_arrive_orders_its_writes_for_the_consumer(arrive, wait, schedule):
  """bar.arrive by warp 0 and bar.sync by warp 1 on a 64-thread barrier, warp 2
  elsewhere: warp 1 reads what warp 0 wrote."""
  assert _named_run(arrive, wait, schedule) == list(range(100, 132))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_consumer_without_the_barrier_races(schedule):
  err = _named_run("bar.arrive 1, 64;", "", schedule, of=_finding)
  assert err.rule == "race", err


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_barrier_count_no_one_reaches_is_a_hang(schedule):
  """Barrier 1 counts 96 threads; only warps 0 and 1 arrive."""
  err = _named_run("bar.arrive 1, 96;", "bar.sync 1, 96;", schedule, of=_finding)
  assert err.rule == "hang", err
  assert "barrier 1 of CTA 0 (64 arrived of 96 threads" in err.explained


def test_different_counts_on_one_barrier_are_refused():
  with pytest.raises(NotImplementedError, match="thread count 64 while its other arrivals "
                     "gave 96|thread count 96 while its other arrivals gave 64"):
    _named_run("bar.arrive 1, 96;", "bar.sync 1, 64;", 0)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_bar_sync_without_a_count_waits_for_the_whole_cta(schedule):
  """bar.sync 0 by every thread of a 64-thread block (warp 0 arrives by bar.sync
  too): the same result."""
  assert _named_run("bar.sync 0;", "bar.sync 0;", schedule, block=64) == list(range(100, 132))


# -- a spin lock -------------------------------------------------------------------

# Lane 0 of each of the 4 warps takes the lock at SMEM offset 0 with atom.cas, adds 1
# to the counter at offset 16 with plain ld/st, and releases the lock (UNLOCK).
_LOCK = """
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 st.shared.u32 [%r3], 0;
  @%p1 st.shared.u32 [%r3+16], 0;
  bar.sync 0;
  and.b32 %r9, %r1, 31;
  setp.ne.u32 %p4, %r9, 0;
  @%p4 bra END;
LOCK:
  atom.acquire.cta.shared.cas.b32 %r4, [%r3], 0, 1;
  setp.ne.u32 %p2, %r4, 0;
  @%p2 bra LOCK;
  ld.shared.u32 %r5, [%r3+16];
  add.u32 %r5, %r5, 1;
  st.shared.u32 [%r3+16], %r5;
  {UNLOCK}
END:
  bar.sync 0;
  @!%p1 bra DONE;
  ld.shared.u32 %r6, [%r3+16];
  ld.param.u64 %rd1, [k_param_0];
  st.global.u32 [%rd1], %r6;
DONE:
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_spin_lock_orders_its_critical_sections(schedule):
  ptx = kernel(_LOCK.replace("{UNLOCK}", "st.release.cta.shared.u32 [%r3], 0;"))
  _passes(ptx, schedule, want=4, cluster=1, block=128)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_relaxed_unlock_is_a_race(schedule):
  ptx = kernel(_LOCK.replace("{UNLOCK}", "st.relaxed.cta.shared.u32 [%r3], 0;"))
  assert _finding(ptx, schedule, cluster=1, block=128).rule == "race"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_lock_never_released_is_a_hang(schedule):
  """The three losers spin on a cas that fails without changing memory: parked, then
  reported (not run forever)."""
  finding = _finding(kernel(_LOCK.replace("{UNLOCK}", "")), schedule, cluster=1, block=128)
  assert finding.rule == "hang" and "polls in a loop" in finding.explained
