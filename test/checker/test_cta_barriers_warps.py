"""CTA barriers count warps, and ``.aligned`` binds a warp to one instruction
(check/barriers.py), on small hand-written kernels that ptxas accepts for sm_90a.

PTX ISA, bar / barrier: "The barrier{.cta} instruction causes executing thread to
wait for all non-exited threads from its warp and marks warps' arrival at
barrier"; the thread count "must be a multiple of the warp size"; ".aligned
modifier indicates that all threads in CTA will execute the same barrier
instruction" (``bar`` is ``barrier.aligned``); barrier.cluster: with ``.aligned``
"all threads in the warp must execute the same barrier.cluster instruction".

Each wrong kernel is reported under every schedule, next to a correct neighbour
that passes under every schedule.
"""

import numpy as np
import pytest

from mosaic_async_store.tools import toolchain
from ptx_harness import SCHEDULES, finding, kernel, output


def _run(ptx, schedule, *, block, cluster=1, words=64):
  """The kernel's output words (int32); fails the test on any finding."""
  return output(ptx, [np.zeros(words, np.int32)], dtype=np.int32, cluster=cluster,
                smem_bytes=512, block=block, schedule=schedule).tolist()


def _finding(ptx, schedule, rule, *, block, cluster=1, words=64):
  """The run's first finding, which must be of ``rule``."""
  err = finding(ptx, [np.zeros(words, np.int32)], cluster=cluster, smem_bytes=512,
                block=block, schedule=schedule)
  assert err.rule == rule, err
  return err


# -- bar.sync at two instructions of one warp ------------------------------------------

# Each thread writes 100 + tid into SMEM word tid; the threads for which %p1 holds
# reach the barrier at A, the others at the instruction before; after it each thread
# copies word tid ^ 16 (a lane of the other half of its warp) out.
_TWO_PLACES = """
  mov.u32 %r3, __dynamic_shmem__0;
  shl.b32 %r4, %r1, 2;
  add.u32 %r5, %r3, %r4;
  add.u32 %r6, %r1, 100;
  st.shared.u32 [%r5], %r6;
  {COND}
  @%p1 bra A;
  {BAR}
  bra B;
A:
  {BAR}
B:
  xor.b32 %r7, %r1, 16;
  shl.b32 %r7, %r7, 2;
  add.u32 %r7, %r3, %r7;
  ld.shared.u32 %r8, [%r7];
  ld.param.u64 %rd1, [k_param_0];
  cvt.u64.u32 %rd2, %r4;
  add.u64 %rd1, %rd1, %rd2;
  st.global.u32 [%rd1], %r8;
"""
_LANE_LOW = "and.b32 %r9, %r1, 31;\n  setp.lt.u32 %p1, %r9, 16;"   # lanes 0..15
_WARP_0 = "shr.u32 %r9, %r1, 5;\n  setp.eq.u32 %p1, %r9, 0;"      # warp 0


def _two_places(bar, cond):
  return kernel(_TWO_PLACES.replace("{BAR}", bar).replace("{COND}", cond))


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("bar", ["bar.sync 0;", "barrier.sync.aligned 0;",
                                 "bar.cta.sync 0, 64;"])
def test_an_aligned_barrier_at_two_instructions_of_a_warp_is_reported(bar, schedule):
  """``bar.sync`` is aligned: lanes 0..15 and 16..31 of a warp at two of them."""
  err = _finding(_two_places(bar, _LANE_LOW), schedule, "aligned-divergence", block=64)
  assert "warp" in err.message and err.message.count("PTX line") >= 2, err
  assert "`" + bar[:-1] + "`" in err.message, err


_WANT = [100 + (t ^ 16) for t in range(64)]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("bar,cond", [
    ("barrier.sync 0;", _LANE_LOW),           # not aligned: lanes may split
    ("barrier.cta.sync 0, 64;", _LANE_LOW),
    ("bar.sync 0;", _WARP_0),                 # aligned, but each warp at one
    ("barrier.sync.aligned 0, 64;", _WARP_0),
], ids=["barrier.sync", "barrier.cta.sync-count", "bar.sync-warp-uniform",
        "barrier.sync.aligned-warp-uniform"])
def test_a_barrier_reached_at_two_instructions_passes_where_allowed(bar, cond, schedule):
  assert _run(_two_places(bar, cond), schedule, block=64) == _WANT


# -- barrier.cluster at two instructions of one warp -----------------------------------

# Each thread writes 100 + 1000 * rank + tid into its CTA's SMEM word tid; the
# threads for which %p1 holds arrive (or wait) at A's instruction, the others at the
# one before; then each thread reads its word of the peer CTA.
_CLUSTER = """
  mov.u32 %r3, __dynamic_shmem__0;
  shl.b32 %r4, %r1, 2;
  add.u32 %r5, %r3, %r4;
  mad.lo.u32 %r6, %r2, 1000, %r1;
  add.u32 %r6, %r6, 100;
  st.shared.u32 [%r5], %r6;
  {COND}
  {FIRST}
  @%p1 bra A;
  {SPLIT}
  bra B;
A:
  {SPLIT}
B:
  {LAST}
  xor.b32 %r7, %r2, 1;
  mapa.shared::cluster.u32 %r8, %r5, %r7;
  ld.shared::cluster.u32 %r9, [%r8];
  ld.param.u64 %rd1, [k_param_0];
  mad.lo.u32 %r10, %r2, 32, %r1;
  mul.wide.u32 %rd2, %r10, 4;
  add.u64 %rd1, %rd1, %rd2;
  st.global.u32 [%rd1], %r9;
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
"""
_ARRIVE, _WAIT = "barrier.cluster.arrive{}", "barrier.cluster.wait{}"


def _cluster_kernel(split, aligned, cond=_LANE_LOW):
  """The arrive (``split`` "arrive") or the wait at two instructions."""
  arrive, wait = _ARRIVE.format(".aligned;"), _WAIT.format(".aligned;")
  if split == "arrive":
    first, split_ins, last = "", _ARRIVE.format(aligned + ";"), wait
  else:
    first, split_ins, last = arrive, _WAIT.format(aligned + ";"), ""
  return kernel(_CLUSTER.replace("{COND}", cond).replace("{FIRST}", first)
                .replace("{SPLIT}", split_ins).replace("{LAST}", last))


_CLUSTER_WANT = [100 + 1000 * (1 - r) + t for r in range(2) for t in range(32)]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("split", ["arrive", "wait"])
def test_an_aligned_cluster_barrier_at_two_instructions_of_a_warp_is_reported(split,
                                                                              schedule):
  err = _finding(_cluster_kernel(split, ".aligned"), schedule, "aligned-divergence",
                 block=32, cluster=2)
  assert f"barrier.cluster.{split}" in err.message, err
  assert err.message.count("PTX line") >= 2, err


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("split,aligned,cond", [
    ("arrive", "", _LANE_LOW), ("wait", "", _LANE_LOW),
    ("arrive", ".aligned", "setp.eq.u32 %p1, %r2, 0;"),   # CTA-uniform: one per warp
])
def test_a_cluster_barrier_at_two_instructions_passes_where_allowed(split, aligned, cond,
                                                                    schedule):
  out = _run(_cluster_kernel(split, aligned, cond), schedule, block=32, cluster=2)
  assert out == _CLUSTER_WANT


# -- a lane that exits while its warp-mates wait at an aligned barrier ---------------------

# Lanes 16..31 exit; lanes 0..15 reach BAR.  The checker sees the divergence when a lane
# exits while a warp-mate waits at an aligned barrier (a lane that exited before is no
# participant: the ISA counts non-exited threads), which every schedule here shows.
_SKIP = """
  and.b32 %r4, %r1, 31;
  setp.ge.u32 %p2, %r4, 16;
  @%p2 bra END;
  {BAR}
END:
"""
_SKIPPED = {"bar.sync 0;": "aligned-divergence", "barrier.sync 0;": None,
            "barrier.cluster.arrive.aligned;\n  barrier.cluster.wait.aligned;":
            "aligned-divergence",
            "barrier.cluster.arrive;\n  barrier.cluster.wait;": None}


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("bar", sorted(_SKIPPED))
def test_a_lane_exiting_while_its_warp_waits_at_an_aligned_barrier(bar, schedule):
  ptx = kernel(_SKIP.replace("{BAR}", bar))
  if _SKIPPED[bar] is None:
    assert _run(ptx, schedule, block=32) == [0] * 64
  else:
    err = _finding(ptx, schedule, _SKIPPED[bar], block=32)
    assert "exits" in err.message and "PTX line" in err.message, err


# -- warps are counted ---------------------------------------------------------------------

# Lanes 16..31 of warp 1 exit; warp 0 writes 100 + tid into SMEM word tid and syncs on
# barrier 1 with thread count COUNT (a register: ptxas refuses an immediate that is not
# a multiple of 32); warp 1's other lanes sync on it, then copy word lane out.
_HALF_EXITED = """
  shr.u32 %r3, %r1, 5;
  and.b32 %r4, %r1, 31;
  setp.eq.u32 %p1, %r3, 1;
  setp.ge.u32 %p2, %r4, 16;
  @!%p1 bra WORK;
  @%p2 bra END;
WORK:
  mov.u32 %r5, __dynamic_shmem__0;
  shl.b32 %r6, %r4, 2;
  add.u32 %r7, %r5, %r6;
  mov.u32 %r9, COUNT;
  @%p1 bra CONSUMER;
  add.u32 %r8, %r1, 100;
  st.shared.u32 [%r7], %r8;
  barrier.sync 1, %r9;
  bra END;
CONSUMER:
  barrier.sync 1, %r9;
  ld.shared.u32 %r8, [%r7];
  ld.param.u64 %rd1, [k_param_0];
  cvt.u64.u32 %rd2, %r6;
  add.u64 %rd1, %rd1, %rd2;
  st.global.u32 [%rd1], %r8;
END:
"""


def _half_exited(count):
  return kernel(_HALF_EXITED.replace("COUNT", str(count)))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_warp_with_exited_lanes_counts_as_a_warp(schedule):
  """barrier.sync 1, 64 by warp 0 and the 16 remaining lanes of warp 1: two warps
  arrive, the barrier completes, and warp 1 reads warp 0's words race-free."""
  assert _run(_half_exited(64), schedule, block=64, words=32) == \
      [100 + t for t in range(16)] + [0] * 16


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_count_beyond_the_warps_is_a_hang(schedule):
  """barrier.sync 1, 96 in a 64-thread CTA: its two warps are 64 threads."""
  err = _finding(_half_exited(96), schedule, "hang", block=64, words=32)
  assert "barrier 1 of CTA 0 (64 arrived of 96 threads" in err.message, err


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_count_not_a_multiple_of_the_warp_size_is_reported(schedule):
  err = _finding(_half_exited(48), schedule, "barrier-count", block=64, words=32)
  assert "thread count 48" in err.message, err


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_short_last_warp_is_a_warp(schedule):
  """A 48-thread CTA is two warps, the second of 16 lanes: barrier.sync 1, 64 completes
  when both arrive (lanes 16..31 of warp 1 do not exist; none exits here)."""
  ptx = kernel(_HALF_EXITED.replace("setp.ge.u32 %p2, %r4, 16;", "setp.ge.u32 %p2, %r4, 32;")
               .replace("COUNT", "64"))
  assert _run(ptx, schedule, block=48, words=32) == [100 + t for t in range(16)] + [0] * 16


# -- ptxas accepts every kernel ------------------------------------------------------------

_KERNELS = {
    **{f"two-places {bar} {cond}": _two_places(bar, cond)
       for bar in ("bar.sync 0;", "barrier.sync.aligned 0;", "bar.cta.sync 0, 64;",
                   "barrier.sync 0;", "barrier.cta.sync 0, 64;",
                   "barrier.sync.aligned 0, 64;")
       for cond in (_LANE_LOW, _WARP_0)},
    **{f"cluster {split} {aligned}": _cluster_kernel(split, aligned)
       for split in ("arrive", "wait") for aligned in ("", ".aligned")},
    "cluster uniform": _cluster_kernel("arrive", ".aligned", "setp.eq.u32 %p1, %r2, 0;"),
    **{f"half-exited {n}": _half_exited(n) for n in (48, 64, 96)},
    **{f"skip {bar}": kernel(_SKIP.replace("{BAR}", bar)) for bar in _SKIPPED},
}


@pytest.mark.parametrize("name", sorted(_KERNELS))
def test_the_kernels_assemble_for_sm_90a(name):
  assert toolchain.ptx_to_cubin(_KERNELS[name], "sm_90a")[0][:4] == b"\x7fELF"
