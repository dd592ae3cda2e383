"""A warp's ``st.async`` is one asynchronous operation (``asyncops.StoreGroup``): the
stores that the lanes of one piece issue by one instruction, on one mbarrier, are
queued together and land together, except where their phase completes part-way.
The per-thread issue and the warp form make the same groups, so the schedule makes
the same choices whichever ran (test_warp_batches.py checks the verdicts)."""

import numpy as np
import pytest

from mosaic_async_store.check import PtxKernel, asyncops
from ptx_harness import SCHEDULES, finding, kernel, launch
from test_warp_batches import _ASYNC, _place


def _async_kernel(tx):
  """Two CTAs of 64 threads storing their tids into each other (lane t at word t) with
  st.async, each mbarrier expecting ``tx`` bytes (test_warp_batches' kernel)."""
  return kernel(_ASYNC.replace("{TX}", str(tx))
                .replace("{STORE}", _place("%r4", "%r1", 1, 0, 4, base="%r12"))
                .replace("{LOAD}", _place("%r5", "%r1", 1, 0, 4)))


def _looping_kernel():
  """``_async_kernel(512)`` with the store in a loop of two iterations, the first at
  word t + 64 of a 512-byte tile (its mbarrier at byte 512), the second at word t:
  one instruction issued again by the same lanes in a later step."""
  ptx = _async_kernel(512).replace("add.u32 %r3, %r2, 256;", "add.u32 %r3, %r2, 512;")
  store = "  st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r4], %r1, [%r13];\n"
  return ptx.replace(store, """  add.u32 %r4, %r4, 256;
  mov.u32 %r20, 0;
AGAIN:
""" + store + """  sub.u32 %r4, %r4, 256;
  add.u32 %r20, %r20, 1;
  setp.lt.u32 %p4, %r20, 2;
  @%p4 bra AGAIN;
""")


def _landings(ptx, schedule, *, warp_forms=True, smem_bytes=264):
  """(the verdict: "bytes", or the rule of the run's first finding; and each part of a
  group that landed: (CTA, issuing tids))."""
  parts, land_part = [], asyncops._land_group_part
  def recording(k, group):
    count = asyncops._lanes_to_completion(k, group)
    parts.append((group.cta, tuple(th.tid for th in group.lanes[:count])))
    land_part(k, group)
  kern = PtxKernel(ptx)
  if not warp_forms:
    kern.program.vcode[:] = [None] * len(kern.program.vcode)
  asyncops._land_group_part = recording
  try:
    _, found = launch(kern, [np.zeros(128, np.uint32)], cluster=2, smem_bytes=smem_bytes,
                      block=64, schedule=schedule, smem_init=[bytes(smem_bytes)] * 2)
  finally:
    asyncops._land_group_part = land_part
  return (found[0].rule if found else "bytes"), parts


def test_a_warp_instruction_lands_as_one_operation():
  """Schedule 0 runs each warp to its wait and lands what is in flight after each
  piece: each warp's 32 stores land as one group, in lane order."""
  verdict, parts = _landings(_async_kernel(256), 0)
  assert verdict == "bytes"
  assert sorted(parts) == [(cta, tuple(range(first, first + 32)))
                           for cta in (0, 1) for first in (0, 32)]


@pytest.mark.parametrize("tx", [256, 64])
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_the_per_thread_issue_makes_the_groups_of_the_warp_form(schedule, tx):
  """With every warp form off (each lane issues through its per-thread function) the
  groups, the parts they land in and the verdict are the same."""
  ptx = _async_kernel(tx)
  assert _landings(ptx, schedule) == _landings(ptx, schedule, warp_forms=False)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_instruction_issued_again_makes_a_new_group(schedule):
  """A loop issues one st.async twice: each step's lanes make their own group, with
  the warp forms and without (the same groups, the same verdict: every byte).  A
  schedule pauses a piece whole after a synchronising instruction
  (``Schedule.pauses``), so every group is a whole warp's, in every schedule."""
  ptx = _looping_kernel()
  verdict, parts = _landings(ptx, schedule, smem_bytes=520)
  assert verdict == "bytes"
  assert (verdict, parts) == _landings(ptx, schedule, warp_forms=False, smem_bytes=520)
  assert len(parts) == 8 and all(len(tids) == 32 for _, tids in parts), parts


def test_a_group_lands_up_to_the_lane_that_completes_its_phase():
  """Each mbarrier expects 64 bytes, 16 lanes' stores: the first group to land into a
  CTA lands its lanes 0..15, which complete the phase, then the rest; the kernel
  then reads bytes of the second group that land after the phase it waited for."""
  verdict, parts = _landings(_async_kernel(64), 0)
  assert verdict in ("early-read", "race")
  first = parts[0]
  assert first[1] == tuple(range(first[1][0], first[1][0] + 16))
  assert parts[1] == (first[0], tuple(range(first[1][0] + 16, first[1][0] + 32)))


def test_a_group_in_flight_is_named_by_its_first_lane_and_its_size():
  """CTA 0's warp stores into CTA 1, and both pass a cluster barrier and exit;
  schedule 1 lands nothing before it must, so CTA 1 exits with the group in flight."""
  ptx = kernel("""
  mov.u32 %r2, __dynamic_shmem__0;
  add.u32 %r3, %r2, 128;
  mov.u32 %r10, %cluster_ctarank;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
  fence.mbarrier_init.release.cluster;
  barrier.cluster.arrive.release;
  barrier.cluster.wait.acquire;
  setp.ne.u32 %p2, %r10, 0;
  @%p2 bra DONE;
  mapa.shared::cluster.u32 %r12, %r2, 1;
  mapa.shared::cluster.u32 %r13, %r3, 1;
  shl.b32 %r4, %r1, 2;
  add.u32 %r4, %r4, %r12;
  st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r4], %r1, [%r13];
DONE:
  barrier.cluster.arrive.release;
  barrier.cluster.wait.acquire;
""")
  err = finding(ptx, [np.zeros(4, np.uint32)], cluster=2, smem_bytes=136, block=32,
                schedule=1)
  assert err.rule == "exit"
  assert ("CTA 1 exits while CTA 0 thread 0 (and 31 more lanes of its warp): st.async "
          "into CTA 1 is in flight") in err.explained, err


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_two_groups_into_the_same_bytes_in_flight_are_reported(schedule):
  """The loop's two iterations store into the same words: the second group is issued
  while the first is in flight, and landing either over the other's bytes is
  reported (the in-flight marks count both)."""
  ptx = _looping_kernel().replace("  add.u32 %r4, %r4, 256;\n", "", 1) \
                         .replace("  sub.u32 %r4, %r4, 256;\n", "")
  findings = []
  for warp_forms in (True, False):   # (the same finding, whichever path issued)
    kern = PtxKernel(ptx)
    if not warp_forms:
      kern.program.vcode[:] = [None] * len(kern.program.vcode)
    err = finding(kern, [np.zeros(128, np.uint32)], cluster=2, smem_bytes=520, block=64,
                  schedule=schedule, smem_init=[bytes(520)] * 2)
    findings.append(err.explained)
  assert err.rule == "early-read", err
  assert "while an asynchronous store into them is in flight" in findings[0]
  assert findings[0] == findings[1]
