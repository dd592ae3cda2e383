"""Warps as the checker's unit of execution (check/lockstep.py, ``run_piece``): the lanes
of a warp at one instruction run it together, divergent lanes split and merge again
where their program counters meet, and the warp forms of loads and stores
(check/warp_memory.py) do what the lanes would do one by one: the same bytes, and a
finding that names the lane that made it (not the warp's first lane).

Each wrong kernel is reported under every CI schedule, next to a correct neighbour
that passes under every one.
"""

import numpy as np
import pytest

from mosaic_async_store.check import PtxKernel, lockstep
from ptx_harness import SCHEDULES, finding, kernel, outputs

# Lanes below 16 add 100 to their tid, the others 200 (an if / else), then every lane
# stores its value to global word tid: the store after the join.
_IF_ELSE = """
  ld.param.u64 %rd1, [k_param_0];
  setp.lt.u32 %p1, %r1, 16;
  @%p1 bra LOW;
  add.u32 %r3, %r1, 200;
  bra JOIN;
LOW:
  add.u32 %r3, %r1, 100;
JOIN:
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r3;
"""


def _counted_join_store(ptx):
  """The kernel, with the warp form of its store after the join recording the lanes
  (tids) of each call into the list returned with it."""
  kern = PtxKernel(ptx)
  return kern, _counted(kern, "st.global")[1]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_divergent_lanes_merge_at_the_join(schedule):
  """The if / else splits warp 0; the store after it runs once for all 32 lanes."""
  kern, calls = _counted_join_store(kernel(_IF_ELSE))
  [out] = outputs(kern, [np.zeros(64, np.uint32)], cluster=1, smem_bytes=64, block=64,
                  schedule=schedule)
  tid = np.arange(64)
  assert (out.view(np.uint32) == np.where(tid < 16, tid + 100, tid + 200)).all()
  assert sorted(map(tuple, calls)) == [tuple(range(32)), tuple(range(32, 64))]


# Every lane writes SMEM word tid; after ORDER lanes 5..30 read the next lane's word,
# the others their own, and copy it to global word tid.
_NEIGHBOUR = """
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r2, __dynamic_shmem__0;
  shl.b32 %r3, %r1, 2;
  add.u32 %r4, %r2, %r3;
  st.shared.u32 [%r4], %r1;
  {ORDER}
  setp.ge.u32 %p1, %r1, 5;
  setp.lt.u32 %p2, %r1, 31;
  and.pred %p1, %p1, %p2;
  selp.u32 %r5, 4, 0, %p1;
  add.u32 %r6, %r4, %r5;
  ld.shared.u32 %r7, [%r6];
  cvt.u64.u32 %rd2, %r3;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r7;
"""


def _run(body, schedule, block=32, of=outputs):
  """``of`` the run: its outputs (the harness's ``outputs``: fails on any finding), or
  its first finding (``finding``)."""
  return of(kernel(body), [np.zeros(block, np.uint32)], cluster=1, smem_bytes=4 * block,
            block=block, schedule=schedule)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_racing_lane_is_named_by_the_warp_form(schedule):
  """Lanes 5.. read the next lane's SMEM word with nothing between: the first race
  is lane 5's (lanes 0..4 read their own word), and the finding says so."""
  err = _run(_NEIGHBOUR.replace("{ORDER}", ""), schedule, of=finding)
  assert err.rule == "race"
  assert err.thread == 5 and err.access.thread == 5
  assert "CTA 0 thread 5 reads CTA 0 SMEM bytes 24..27" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_lanes_ordered_by_bar_warp_sync_read_their_neighbours(schedule):
  [out] = _run(_NEIGHBOUR.replace("{ORDER}", "bar.warp.sync -1;"), schedule)
  tid = np.arange(32)
  assert (out.view(np.uint32) == np.where((tid >= 5) & (tid < 31), tid + 1, tid)).all()


# Lanes 4 and 5 store to the same global word (lane 5 to lane 4's); the others to
# their own.
_SAME_WORD = """
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, {LANE};
  selp.u32 %r3, 4, 0, %p1;
  shl.b32 %r4, %r1, 2;
  sub.u32 %r5, %r4, %r3;
  cvt.u64.u32 %rd2, %r5;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r1;
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_two_lanes_of_one_store_race_in_global_memory(schedule):
  err = _run(_SAME_WORD.replace("{LANE}", "5"), schedule, of=finding)
  assert err.rule == "race" and err.thread == 5
  assert "global buffer 0" in err.explained and "thread 4" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_one_store_to_distinct_words_passes(schedule):
  [out] = _run(_SAME_WORD.replace("{LANE}", "99"), schedule)
  assert (out.view(np.uint32) == np.arange(32)).all()


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_misaligned_lane_is_reported_lane_by_lane(schedule):
  """Lane 7's address is misaligned: the warp form leaves it to the lane-by-lane path,
  whose error names lane 7."""
  body = _SAME_WORD.replace("{LANE}", "7").replace("selp.u32 %r3, 4, 0", "selp.u32 %r3, 2, 0")
  err = _run(body, schedule, of=finding)
  assert "misaligned 4-byte global access" in err.explained, err
  assert (err.rule, err.thread) == ("fault", 7)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_warp_resumed_by_its_own_lane_runs_on_as_one_piece(schedule):
  """The lane whose arrival completes ``bar.sync`` goes on while its warp-mates wait to
  be resumed: they rejoin it, so the store after the barrier runs once per warp."""
  body = _IF_ELSE.replace("JOIN:\n", "JOIN:\n  bar.sync 0;\n")
  kern, calls = _counted_join_store(kernel(body))
  outputs(kern, [np.zeros(64, np.uint32)], cluster=1, smem_bytes=64, block=64,
          schedule=schedule)
  assert sorted(map(tuple, calls)) == [tuple(range(32)), tuple(range(32, 64))]


# Lane 0 spins on a flag that lane 1 raises after lane 0's loop in program order: on
# sm_70 and newer the lanes of a warp make progress independently, so this ends.
_SPIN_ON_A_WARP_MATE = """
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r2, __dynamic_shmem__0;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra SETTER;
WAIT:
  {POLL}
  setp.eq.u32 %p2, %r3, 0;
  @%p2 bra WAIT;
  ld.shared.u32 %r4, [%r2+4];
  st.global.u32 [%rd1], %r4;
  bra END;
SETTER:
  setp.ne.u32 %p3, %r1, 1;
  @%p3 bra END;
  st.shared.u32 [%r2+4], 42;
  {RAISE}
END:
"""


def _spin(poll, raise_flag, schedule, of=outputs):
  """``of`` the run (``outputs``: fails on any finding; ``finding``: the first one)."""
  body = _SPIN_ON_A_WARP_MATE.replace("{POLL}", poll).replace("{RAISE}", raise_flag)
  return of(kernel(body), [np.zeros(1, np.uint32)], cluster=1, smem_bytes=16, block=32,
            schedule=schedule, smem_init=[bytes(16)])


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_lane_spinning_on_a_warp_mate_lets_it_run(schedule):
  """The spinning lane is at the lower program counter, so its piece runs first; each
  poll yields, and the warp-mate's piece then raises the flag."""
  [out] = _spin("ld.acquire.cta.shared.u32 %r3, [%r2];",
                "st.release.cta.shared.u32 [%r2], 1;", schedule)
  assert out.view(np.uint32)[0] == 42


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_weak_flag_between_warp_mates_races(schedule):
  """The same with a weak load and store of the flag: after ``LOOP_YIELD`` backward
  jumps the spinning piece yields, the warp-mate writes the flag, and that write is
  not ordered after the spinning lane's reads."""
  err = _spin("ld.shared.u32 %r3, [%r2];", "st.shared.u32 [%r2], 1;", schedule, of=finding)
  assert err.rule == "race" and err.thread == 1
  assert "write-after-read" in err.explained


# Three warps meet at bar.sync, then compute the address of their word (each lane's
# own computation: Program.wide) and store their tid there (not wide: one warp at a
# time).
_AFTER_BARRIER = """
  ld.param.u64 %rd1, [k_param_0];
  bar.sync 0;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r1;
"""


def _counted(kern, prefix):
  """The index of the kernel's first instruction starting with ``prefix``, and the list
  its warp form records each call's lanes (tids) into."""
  at = next(i for i, t in enumerate(kern.texts) if t.startswith(prefix))
  form, calls = kern.program.vcode[at], []
  def counted(lanes):
    calls.append([th.tid for th in lanes])
    return form(lanes)
  kern.program.vcode[at] = counted
  return at, calls


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_warps_a_barrier_released_run_their_own_computations_together(schedule):
  """Pieces wider than a warp (lockstep.py): the warps bar.sync releases run the
  address arithmetic as one piece, and split into warps at the store, each warp's
  lanes once; every word is right."""
  kern = PtxKernel(kernel(_AFTER_BARRIER))
  (mul_at, muls), (store_at, stores) = _counted(kern, "mul.wide"), _counted(kern, "st.global")
  [out] = outputs(kern, [np.zeros(96, np.uint32)], cluster=1, smem_bytes=64, block=96,
                  schedule=schedule)
  assert (out.view(np.uint32) == np.arange(96)).all()
  assert kern.program.wide[mul_at] and not kern.program.wide[store_at]
  assert sorted(muls) == [list(range(96))]   # (the warp that completes the barrier
                                             # takes the warps it released along)
  assert sorted(map(tuple, stores)) == [tuple(range(32 * w, 32 * w + 32)) for w in range(3)]


# Each lane takes lane tid ^ 1's tid, then lane (tid ^ 1) ^ 2's value, and stores it to
# global word tid: tid ^ 3.  Two warps.
_SHUFFLES = """
  ld.param.u64 %rd1, [k_param_0];
  shfl.sync.bfly.b32 %r3, %r1, 1, 31, 0xffffffff;
  shfl.sync.bfly.b32 %r4, %r3, 2, 31, 0xffffffff;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r4;
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("lane_by_lane", [False, True])
def test_a_warp_goes_on_past_its_collectives(schedule, lane_by_lane, monkeypatch):
  """Nothing another warp can see happens at a ``.sync`` collective (warp.py): the
  lane whose arrival completes the meeting resumes its warp-mates and they go on
  together, through the warp form and lane by lane alike, so each warp runs its
  kernel in one piece (the schedule chooses between the warps at the load, not at
  each shuffle); every word is right."""
  kern = PtxKernel(kernel(_SHUFFLES))
  if lane_by_lane:
    kern.program.vcode[:] = [None] * len(kern.program.vcode)
  pieces, run_piece = [], lockstep.run_piece
  def counted(k, lanes):
    pieces.append(sorted({th.tid >> 5 for th in lanes}))
    return run_piece(k, lanes)
  monkeypatch.setattr(lockstep, "run_piece", counted)
  [out] = outputs(kern, [np.zeros(64, np.uint32)], cluster=1, smem_bytes=16, block=64,
                  schedule=schedule)
  assert (out.view(np.uint32) == np.arange(64) ^ 3).all()
  # (two pieces: the first takes both warps at ``mov``, a lane's own computation, and
  # one warp goes on at the load, the schedule's choice; the other warp is the second)
  assert len(pieces) == 2 and [0, 1] in pieces


# Warp 0 writes SMEM word tid, then both warps meet at bar.sync; after it (address
# arithmetic for all lanes at once) warp 1 reads warp 0's word tid - 32 and copies it
# out.  RACY leaves the barrier out: the read races with the write whatever order the
# schedule runs the warps' own computations in.
_CROSS_WARP = """
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r5, __dynamic_shmem__0;
  and.b32 %r6, %r1, 31;
  shl.b32 %r7, %r6, 2;
  add.u32 %r8, %r5, %r7;
  setp.lt.u32 %p1, %r1, 32;
  @%p1 st.shared.u32 [%r8], %r1;
  {BARRIER}
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  @%p1 bra DONE;
  ld.shared.u32 %r9, [%r8];
  st.global.u32 [%rd3], %r9;
DONE:
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("barrier", ["bar.sync 0;", ""])
def test_a_race_across_warps_is_found_around_wide_pieces(schedule, barrier):
  """With the barrier, warp 1 reads what warp 0 wrote; without it, the race is
  reported under every schedule (wide pieces move no synchronising instruction)."""
  kern = PtxKernel(kernel(_CROSS_WARP.replace("{BARRIER}", barrier)))
  args = ([np.zeros(64, np.uint32)],)
  if not barrier:
    e = finding(kern, *args, cluster=1, smem_bytes=128, block=64, schedule=schedule)
    assert e.rule == "race"
    return
  [out] = outputs(kern, *args, cluster=1, smem_bytes=128, block=64, schedule=schedule)
  assert (out.view(np.uint32)[32:] == np.arange(32)).all()


# Lanes 0..15 of each warp shuffle with membermask 0xffff: warp 0's from lane 9 (in
# the mask), warp 1's from lane 20 (outside it: undefined, PTX ISA shfl.sync); after
# bar.sync both warps compare the value (a lane's own computation: one wide piece).
_UNDEFINED_IN_WARP_1 = """
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  mov.u32 %r3, 7;
  and.b32 %r5, %r1, 31;
  setp.lt.u32 %p1, %r5, 16;
  setp.ge.u32 %p3, %r1, 32;
  selp.u32 %r7, 20, 9, %p3;
  @!%p1 bra JOIN;
  add.u32 %r4, %r1, 100;
  shfl.sync.idx.b32 %r3, %r4, %r7, 31, 0xffff;
JOIN:
  bar.sync 0;
  add.u32 %r6, %r3, 1;
  USE
  st.global.u32 [%rd3], %r3;
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("use", ["setp.eq.u32 %p2, %r6, 3;\n  @%p2 mov.u32 %r3, 0;",
                                 "setp.eq.u32 %p2, %r6, 3;\n  @%p2 bra DONE;\nDONE:",
                                 "cvt.s64.s32 %rd4, %r6;"],
                         ids=["guard", "branch", "sign-extension"])
def test_an_undefined_value_in_a_wide_piece_names_its_lane(schedule, use):
  """The use (a guard, a branch, a sign extension) runs warps 0 and 1 together; the
  finding names thread 32, the first lane whose value is undefined, not the piece's
  first lane (thread 0)."""
  caught = finding(kernel(_UNDEFINED_IN_WARP_1.replace("USE", use)),
                   [np.zeros(64, np.uint32)], cluster=1, smem_bytes=64, block=64,
                   schedule=schedule)
  assert caught.rule == "undefined-value" and caught.thread == 32, caught
