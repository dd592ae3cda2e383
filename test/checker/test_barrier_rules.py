"""Rules of CTA and cluster barriers (check/barriers.py) on small hand-written kernels,
each assembled by ptxas for sm_90a first: a wrong kernel is reported with its rule in
every schedule, next to a correct neighbour that passes in every schedule.

* barrier.cluster: "Each thread must arrive at the barrier only once before the
  barrier completes" (``cluster-rearrive``), for every form of the arrive;
* bar.red / barrier.red (PTX ISA, bar / barrier): "The c predicate (or its
  complement) from all threads in the CTA are combined using the specified
  reduction operator. Once the barrier count is reached, the final value is written
  to the destination register in all threads waiting at the barrier"; the result of
  .popc "is the number of threads with a True predicate", .and / .or "indicate if all
  the threads had a True predicate or if any of the threads had a True predicate";
  "barrier{.cta}.red should not be intermixed with barrier{.cta}.sync or
  barrier{.cta}.arrive using the same active barrier" (``bar-red-mixed``).
"""

import functools

import numpy as np
import pytest

from ptx_harness import SCHEDULES, assemble, finding, kernel, output


def _run(body, schedule, *, block, cluster=1, words=256,
         of=functools.partial(output, dtype=np.int32)):
  """Assembles ``body`` with ptxas, runs it; returns the output words (int32; ``of`` the
  harness's ``output``: fails on any finding) or its first finding (``finding``)."""
  return of(assemble(kernel(body)), [np.zeros(words, np.int32)], cluster=cluster,
            smem_bytes=512, block=block, schedule=schedule)


def _finding(body, schedule, rule, **kw):
  """The run's first finding, which must be of ``rule``."""
  err = _run(body, schedule, of=finding, **kw)
  assert err.rule == rule, err
  return err


# Stores %r5 to output word tid + 64 * %cluster_ctarank.
_STORE_R5 = """
  ld.param.u64 %rd1, [k_param_0];
  mad.lo.u32 %r20, %r2, 64, %r1;
  mul.wide.u32 %rd2, %r20, 4;
  add.u64 %rd1, %rd1, %rd2;
  st.global.u32 [%rd1], %r5;
"""

# -- barrier.cluster.arrive twice before the barrier completes ---------------------

# Warp 0 of each CTA arrives twice ({A} both times), and only then lets warp 1 (on
# named barrier 1) make its first arrive: the barrier its first arrive joined cannot
# have completed.  {PRE}: rounds before, which all threads complete.
_REARRIVE = """
  {PRE}
  shr.u32 %r9, %r1, 5;
  setp.eq.u32 %p1, %r9, 0;
  @!%p1 bra OTHER;
  {A};
  {A};
  bar.arrive 1, 64;
  barrier.cluster.wait;
  bra END;
OTHER:
  bar.sync 1, 64;
  {A};
  barrier.cluster.wait;
END:
"""
_ARRIVES = ["barrier.cluster.arrive", "barrier.cluster.arrive.aligned",
            "barrier.cluster.arrive.release", "barrier.cluster.arrive.relaxed",
            "barrier.cluster.arrive.relaxed.aligned", "barrier.cluster.arrive.release.aligned"]
_ROUND = "barrier.cluster.arrive;\n  barrier.cluster.wait;"


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("pre", [0, 2])
@pytest.mark.parametrize("arrive", _ARRIVES)
def test_a_second_cluster_arrive_before_the_barrier_completes_is_reported(arrive, pre,
                                                                         schedule):
  body = _REARRIVE.replace("{A}", arrive).replace("{PRE}", "\n  ".join([_ROUND] * pre))
  err = _finding(body, schedule, "cluster-rearrive", block=64, cluster=2)
  assert f"arrive number {pre + 2}" in err.explained and err.thread is not None


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("arrive", _ARRIVES)
def test_one_arrive_per_completion_passes(arrive, schedule):
  """The same kernel with warp 0's second arrive after its wait: one arrive per
  completion, whichever warp comes first."""
  body = _REARRIVE.replace("{PRE}", "").replace(
      "{A};\n  {A};\n  bar.arrive 1, 64;\n  barrier.cluster.wait;",
      "{A};\n  barrier.cluster.wait;\n  bar.arrive 1, 64;\n  {A};\n  barrier.cluster.wait;"
  ).replace("OTHER:\n  bar.sync 1, 64;\n  {A};",
            "OTHER:\n  {A};\n  barrier.cluster.wait;\n  bar.sync 1, 64;\n  {A};"
  ).replace("{A}", arrive)
  _run(body, schedule, block=64, cluster=2)


# Three rounds: each thread writes its word of CTA 0's SMEM, the cluster barrier, reads
# the word of thread tid ^ 32 of the other CTA, the cluster barrier again (before the
# next round overwrites it).
_ROUNDS = """
  mov.u32 %r3, __dynamic_shmem__0;
  shl.b32 %r4, %r1, 2;
  add.u32 %r6, %r3, %r4;
  xor.b32 %r7, %r1, 32;
  shl.b32 %r7, %r7, 2;
  add.u32 %r7, %r3, %r7;
  xor.b32 %r8, %r2, 1;
  mapa.shared::cluster.u32 %r7, %r7, %r8;
  mov.u32 %r5, 0;
  mov.u32 %r10, 0;
LOOP:
  mad.lo.u32 %r11, %r10, 1000, %r1;
  mad.lo.u32 %r11, %r2, 100, %r11;
  st.shared.u32 [%r6], %r11;
  {ARRIVE}
  barrier.cluster.wait.aligned;
  ld.shared::cluster.u32 %r12, [%r7];
  add.u32 %r5, %r5, %r12;
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  add.u32 %r10, %r10, 1;
  setp.lt.u32 %p1, %r10, 3;
  @%p1 bra LOOP;
""" + _STORE_R5


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_several_rounds_of_arrive_and_wait_pass(schedule):
  out = _run(_ROUNDS.replace("{ARRIVE}", "barrier.cluster.arrive.aligned;"), schedule,
             block=64, cluster=2)
  tid = np.arange(64)
  peer = (tid ^ 32)[None, :] + 100 * (1 - np.arange(2))[:, None]
  assert out[:128].tolist() == (3 * peer + 3000).reshape(-1).tolist()


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_relaxed_arrive_after_a_fence_passes(schedule):
  """``arrive.relaxed`` + wait: the ISA's example orders it with a fence before."""
  out = _run(_ROUNDS.replace("{ARRIVE}", "fence.acq_rel.cluster;\n"
                             "  barrier.cluster.arrive.relaxed.aligned;"), schedule,
             block=64, cluster=2)
  assert out[32] == 3 * (0 + 100) + 3000


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_relaxed_arrive_without_a_fence_races(schedule):
  """The neighbour without the fence: ``.relaxed`` orders nothing, a race."""
  _finding(_ROUNDS.replace("{ARRIVE}", "barrier.cluster.arrive.relaxed.aligned;"),
           schedule, "race", block=64, cluster=2)


# -- bar.red / barrier.red ---------------------------------------------------------

# %p1 holds for threads with tid % 4 == 0 (32 of 128); {RED} reduces it.
_RED = """
  and.b32 %r9, %r1, 3;
  setp.eq.u32 %p1, %r9, 0;
  {RED}
""" + _STORE_R5


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("red,want", [
    ("bar.red.popc.u32 %r5, 0, %p1;", 32),
    ("barrier.red.popc.u32 %r5, 3, !%p1;", 96),
    ("barrier.cta.red.popc.aligned.u32 %r5, 15, 128, %p1;", 32),
    ("bar.red.and.pred %p2, 1, %p1;\n  selp.u32 %r5, 1, 2, %p2;", 2),
    ("bar.red.or.pred %p2, 1, %p1;\n  selp.u32 %r5, 1, 2, %p2;", 1),
    ("bar.cta.red.or.pred %p2, 1, !%p1;\n  selp.u32 %r5, 1, 2, %p2;", 1),
    ("setp.lt.u32 %p1, %r1, 200;\n  bar.red.and.pred %p2, 2, %p1;\n"
     "  selp.u32 %r5, 1, 2, %p2;", 1),
    ("setp.eq.u32 %p1, %r1, 200;\n  barrier.red.or.pred %p2, 2, %p1;\n"
     "  selp.u32 %r5, 1, 2, %p2;", 2),
])
def test_bar_red_gives_every_thread_the_reduction(red, want, schedule):
  out = _run(_RED.replace("{RED}", red), schedule, block=128)
  assert out[:128].tolist() == [want] * 128


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_bar_red_with_a_thread_count_reduces_over_its_instance(schedule):
  """Warps 0 and 1 on ``barrier.red.popc 1, 64`` (not aligned: lanes may exit), warps
  2 and 3 on barrier 2: each instance counts its own threads (tid % 4 == 0: 16 of
  0..63); lanes 28..31 of warp 3 exit first and do not count (15 of 64..123)."""
  body = """
  setp.ge.u32 %p3, %r1, 124;
  @%p3 bra END;
  shr.u32 %r13, %r1, 6;
  add.u32 %r13, %r13, 1;
""" + _RED.replace("{RED}", "barrier.red.popc.u32 %r5, %r13, 64, %p1;") + "END:"
  out = _run(body, schedule, block=128)
  assert out[:64].tolist() == [16] * 64
  assert out[64:124].tolist() == [15] * 60 and out[124:128].tolist() == [0] * 4


# Each thread writes its SMEM word, {RED}, reads the word of thread tid ^ 32.
_RED_ORDERS = """
  mov.u32 %r3, __dynamic_shmem__0;
  shl.b32 %r4, %r1, 2;
  add.u32 %r6, %r3, %r4;
  st.shared.u32 [%r6], %r1;
  setp.lt.u32 %p1, %r1, 10;
  {RED}
  xor.b32 %r7, %r4, 128;
  add.u32 %r7, %r3, %r7;
  ld.shared.u32 %r8, [%r7];
  add.u32 %r5, %r5, %r8;
""" + _STORE_R5


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_bar_red_orders_memory_as_bar_sync_does(schedule):
  out = _run(_RED_ORDERS.replace("{RED}", "bar.red.popc.u32 %r5, 0, %p1;"), schedule,
             block=64)
  assert out[:64].tolist() == [10 + (t ^ 32) for t in range(64)]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_read_without_the_barrier_races(schedule):
  """The neighbour without ``bar.red``: the read of another warp's word races."""
  _finding(_RED_ORDERS.replace("{RED}", "mov.u32 %r5, 0;"), schedule, "race", block=64)


# Warps 0 and 1 run {W01}, warps 2 and 3 {W23}, on barrier 1 of the whole CTA.
_MIXED = """
  and.b32 %r9, %r1, 3;
  setp.eq.u32 %p1, %r9, 0;
  mov.u32 %r5, 7;
  setp.lt.u32 %p3, %r1, 64;
  @!%p3 bra HIGH;
  {W01}
  bra END;
HIGH:
  {W23}
END:
""" + _STORE_R5


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("other", ["bar.sync 1;", "barrier.sync 1;", "bar.arrive 1, 128;"])
def test_bar_red_beside_bar_sync_on_one_instance_is_reported(other, schedule):
  body = _MIXED.replace("{W01}", "bar.red.popc.u32 %r5, 1, %p1;").replace("{W23}", other)
  err = _finding(body, schedule, "bar-red-mixed", block=128)
  assert "barrier 1 of CTA 0" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_bar_red_of_every_warp_at_two_instructions_passes(schedule):
  """Different warps may execute the barrier at different instructions (one reduction)."""
  body = _MIXED.replace("{W01}", "bar.red.popc.u32 %r5, 1, %p1;").replace(
      "{W23}", "barrier.red.popc.u32 %r5, 1, %p1;")
  out = _run(body, schedule, block=128)
  assert out[:128].tolist() == [32] * 128


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_two_reductions_on_one_instance_are_refused(schedule):
  """.and beside .or on one instance: the ISA does not say how they combine."""
  body = _MIXED.replace("{W01}", "bar.red.and.pred %p2, 1, %p1;").replace(
      "{W23}", "bar.red.or.pred %p2, 1, %p1;")
  with pytest.raises(NotImplementedError, match="two reductions"):
    _run(body, schedule, block=128)


# -- named barriers shared by more warps than their count covers --------------------

# Warps 2i (producers) and 2i + 1 (consumers) are pairs: each producer lane writes its
# tid into its pair's SMEM buffer, {BAR}, each consumer lane reads the word of its lane
# and stores it to output word tid.  %r11: the pair.
_PAIRS = """
  mov.u32 %r3, __dynamic_shmem__0;
  shr.u32 %r9, %r1, 5;
  and.b32 %r10, %r9, 1;
  shr.u32 %r11, %r9, 1;
  and.b32 %r12, %r1, 31;
  shl.b32 %r13, %r11, 7;
  shl.b32 %r14, %r12, 2;
  add.u32 %r13, %r13, %r14;
  add.u32 %r13, %r3, %r13;
  setp.eq.u32 %p1, %r10, 0;
  @%p1 st.shared.u32 [%r13], %r1;
  {BAR}
  @%p1 bra END;
  ld.shared.u32 %r5, [%r13];
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.u64 %rd1, %rd1, %rd2;
  st.global.u32 [%rd1], %r5;
END:
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("pairs,bar", [
    (2, "bar.sync 1, 64;"), (3, "bar.sync 1, 64;"), (2, "barrier.sync 1, 64;"),
    (2, "@%p1 bar.arrive 1, 64;\n  @!%p1 bar.sync 1, 64;")])
def test_pairs_sharing_one_counted_barrier_race(pairs, bar, schedule):
  """All warps on one barrier of count 64: the hardware pairs the first two warps to
  arrive, so a producer may meet the other producer and its consumer read unordered
  data.  Reported in every schedule, whatever pairing its order makes."""
  err = _finding(_PAIRS.replace("{BAR}", bar), schedule, "race", block=64 * pairs)
  assert "CTA 0 SMEM bytes" in err.explained   # a pair's buffer


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("pairs,bar", [
    (2, "add.u32 %r15, %r11, 1;\n  bar.sync %r15, 64;"),
    (3, "add.u32 %r15, %r11, 1;\n  bar.sync %r15, 64;"),
    (2, "add.u32 %r15, %r11, 1;\n  @%p1 bar.arrive %r15, 64;\n  @!%p1 bar.sync %r15, 64;"),
    (2, "bar.sync 1, 128;"), (3, "bar.sync 1;")])
def test_pairs_on_their_own_barriers_or_all_on_one_pass(pairs, bar, schedule):
  out = _run(_PAIRS.replace("{BAR}", bar), schedule, block=64 * pairs)
  for p in range(pairs):
    assert out[64 * p + 32:64 * p + 64].tolist() == list(range(64 * p, 64 * p + 32))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_warps_sharing_a_counted_barrier_once_pass(schedule):
  """Four warps on ``bar.sync 1, 64`` once, exchanging nothing: every pairing is fine
  (the explored pairings add no finding)."""
  out = _run("""
  bar.sync 1, 64;
  mov.u32 %r5, 5;
""" + _STORE_R5, schedule, block=128)
  assert out[:128].tolist() == [5] * 128


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_warps_sharing_a_counted_barrier_twice_may_hang(schedule):
  """The same twice: when one warp is slow, the three others pair among themselves
  for both of their arrivals (0+1, 1+2, 2+0) and leave it alone: a hang the hardware
  may make, found by the explored pairings whatever order the schedule takes."""
  err = _finding("""
  bar.sync 1, 64;
  bar.sync 1, 64;
  mov.u32 %r5, 5;
""" + _STORE_R5, schedule, "hang", block=128)
  assert "bar.sync 1, 64" in err.explained and "1 arrived" in err.explained
