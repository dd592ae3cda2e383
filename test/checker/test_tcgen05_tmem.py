"""Tensor memory in the checker (families/tcgen05: alloc, dealloc, relinquish, ld, st,
wait, the fences): a round trip through tensor memory runs with the right values, and
each rule's broken kernel is reported in every CI schedule next to the correct one."""

import dataclasses

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx
from mosaic_async_store.check.families.tcgen05 import ldst
from ptx_harness import CI_SCHEDULES, kernel, launch, output, rules_in_every_schedule

ALLOC = """
  shr.u32 %r9, %r1, 5;                      // warp
  setp.ne.u32 %p1, %r9, 0;
  mov.u32 %r10, __dynamic_shmem__0;
  @%p1 bra SKIP_ALLOC;
  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r10], {ncols};
  tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
SKIP_ALLOC:
  bar.sync 0;
  ld.shared.b32 %r3, [%r10];                // the allocation's address
"""
DEALLOC = """
  tcgen05.fence::before_thread_sync;
  bar.sync 0;
  {after}
  @%p1 bra SKIP_DEALLOC;
  tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r3, {ncols};
SKIP_DEALLOC:
"""


def _round_trip(*, wait_st=True, ncols=32, column=0, lane_field=0, dealloc=True):
  """128 threads: warp 0 allocates; each warp stores two values per lane (tcgen05.st
  .32x32b.x2) into its quarter, waits, loads them back and writes them out."""
  body = ALLOC.format(ncols=ncols) + f"""
  tcgen05.fence::after_thread_sync;
  add.u32 %r3, %r3, {column + (lane_field << 16)};
  mul.lo.u32 %r4, %r1, 4;
  add.u32 %r5, %r4, 1;
  tcgen05.st.sync.aligned.32x32b.x2.b32 [%r3], {{%r4, %r5}};
  {"tcgen05.wait::st.sync.aligned;" if wait_st else ""}
  tcgen05.ld.sync.aligned.32x32b.x2.b32 {{%r6, %r7}}, [%r3];
  tcgen05.wait::ld.sync.aligned;
  sub.u32 %r3, %r3, {column + (lane_field << 16)};
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 8;
  add.u64 %rd1, %rd1, %rd2;
  st.global.v2.u32 [%rd1], {{%r6, %r7}};
""" + (DEALLOC.format(ncols=ncols, after="") if dealloc else "")
  return kernel(body, target="sm_100a")


def _check(ptx, block=128, n=None):
  out = np.zeros((n or block) * 2, np.uint32)
  return check_ptx(ptx, [out], smem_bytes=64, block=(block, 1, 1),
                   schedules=len(CI_SCHEDULES))


def test_a_round_trip_through_tensor_memory_returns_what_each_lane_stored():
  out = output(_round_trip(), [np.zeros(256, np.uint32)], smem_bytes=64, block=128, cluster=1)
  want = np.arange(256, dtype=np.uint32).reshape(128, 2)
  want[:, 0], want[:, 1] = 4 * np.arange(128), 4 * np.arange(128) + 1
  np.testing.assert_array_equal(out.reshape(128, 2), want)


@pytest.mark.parametrize("broken, rule", [
    (dict(wait_st=False), "race"),           # ld of its own st before tcgen05.wait::st
    (dict(ncols=48), "tcgen05-alloc"),       # not a power of 2
    (dict(column=32), "tcgen05-lanes"),      # past the 32 allocated columns
    (dict(lane_field=64), "tcgen05-lanes"),  # warp 0 addressing warp 2's lanes
    (dict(dealloc=False), "tcgen05-dealloc"),
])
def test_each_broken_use_of_tensor_memory_is_reported_in_every_schedule(broken, rule):
  assert _check(_round_trip()).ok
  assert rule in rules_in_every_schedule(_check(_round_trip(**broken)))


def _two_warpgroups(*, wait_st=True, before=True, after=True):
  """256 threads: warp 0 stores into its lanes; warp 4 (the same quarter of tensor
  memory, in the second warpgroup) loads them after a bar.sync."""
  body = ALLOC.format(ncols=32) + f"""
  tcgen05.fence::after_thread_sync;
  setp.ne.u32 %p2, %r9, 0;
  @%p2 bra NOT_WRITER;
  add.u32 %r4, %r1, 7;
  tcgen05.st.sync.aligned.32x32b.x1.b32 [%r3], {{%r4}};
  {"tcgen05.wait::st.sync.aligned;" if wait_st else ""}
NOT_WRITER:
  {"tcgen05.fence::before_thread_sync;" if before else ""}
  bar.sync 0;
  {"tcgen05.fence::after_thread_sync;" if after else ""}
  setp.ne.u32 %p3, %r9, 4;
  @%p3 bra NOT_READER;
  tcgen05.ld.sync.aligned.32x32b.x1.b32 {{%r6}}, [%r3];
  tcgen05.wait::ld.sync.aligned;
  ld.param.u64 %rd1, [k_param_0];
  sub.u32 %r8, %r1, 128;
  mul.wide.u32 %rd2, %r8, 4;
  add.u64 %rd1, %rd1, %rd2;
  st.global.u32 [%rd1], %r6;
NOT_READER:
""" + DEALLOC.format(ncols=32, after="tcgen05.fence::after_thread_sync;")
  return kernel(body, target="sm_100a")


def test_another_warpgroup_reads_the_lanes_after_wait_fence_sync_fence():
  out = output(_two_warpgroups(), [np.zeros(32, np.uint32)], smem_bytes=64, block=256, cluster=1)
  np.testing.assert_array_equal(out, np.arange(32) + 7)


@pytest.mark.parametrize("broken", [dict(after=False), dict(before=False),
                                    dict(before=False, after=False)])
def test_a_wait_and_a_sync_without_the_fences_is_a_warning(broken):
  """Each fence left out (or both, as jax's commit_tmem / wait_load_tmem do): the
  warning tcgen05-fence-sync in every schedule, the values still right; strict fails."""
  assert _check(_two_warpgroups(), block=256, n=16).ok
  report = _check(_two_warpgroups(**broken), block=256, n=16)
  assert report.ok, str(report)
  assert "tcgen05-fence-sync" in rules_in_every_schedule(report), str(report)
  assert not dataclasses.replace(report, strict=True).ok


def test_the_writers_wait_left_out_is_a_race():
  """No tcgen05.wait::st: nothing orders the store before the other warp's load."""
  assert "race" in rules_in_every_schedule(
      _check(_two_warpgroups(wait_st=False), block=256, n=16))


def test_an_allocation_after_relinquishing_is_reported():
  body = ALLOC.format(ncols=32).replace(
      "SKIP_ALLOC:", "  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r10], 32;\n"
      "SKIP_ALLOC:")
  found = launch(kernel(body, target="sm_100a"), [np.zeros(4, np.uint32)], smem_bytes=64,
                 block=128, cluster=1).findings
  assert any(f.rule == "tcgen05-alloc" and "relinquish" in f.message for f in found), found


@pytest.mark.parametrize("shape", sorted(ldst.FRAGMENTS))
def test_each_fragment_covers_its_lanes_and_columns_once(shape):
  """The 32 lanes of a warp together cover every cell of the shape exactly once (x2)."""
  span, per, _ = ldst.FRAGMENTS[shape]
  cells = [c for t in range(32) for c in ldst.cells(shape, 2, t)]
  assert len(cells) == len(set(cells)) == 32 * per * 2
  assert {lane for lane, _ in cells} == set(range(span))


def _pair(*, peer_allocates=True, cluster=2):
  """Warp 0 of each CTA of a pair allocates 64 columns with .cta_group::2 (CTA 1's only
  where ``peer_allocates``), stores its CTA rank there, loads it back, and frees it."""
  alloc = ALLOC.format(ncols=64).replace("cta_group::1", "cta_group::2")
  if not peer_allocates:
    alloc = alloc.replace("  setp.ne.u32 %p1, %r9, 0;\n",
                          "  setp.ne.u32 %p1, %r9, 0;\n  setp.ne.or.u32 %p1, %r2, 0, %p1;\n")
  body = alloc + """
  @%p1 bra SKIP;
  tcgen05.fence::after_thread_sync;
  tcgen05.st.sync.aligned.32x32b.x1.b32 [%r3], {%r2};
  tcgen05.wait::st.sync.aligned;
  tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r6}, [%r3];
  tcgen05.wait::ld.sync.aligned;
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r2, 4;
  add.u64 %rd1, %rd1, %rd2;
  setp.eq.u32 %p4, %r1, 0;
  @%p4 st.global.u32 [%rd1], %r6;
  tcgen05.dealloc.cta_group::2.sync.aligned.b32 %r3, 64;
SKIP:
"""
  return kernel(body, target="sm_100a")


def test_a_pair_allocation_gives_both_ctas_the_same_columns():
  out = np.zeros(2, np.uint32)
  report = check_ptx(_pair(), [out], smem_bytes=64, block=(128, 1, 1), cluster=(2, 1, 1),
                     schedules=len(CI_SCHEDULES))
  assert report.ok, str(report)
  np.testing.assert_array_equal(report.outputs[0].view(np.uint32), [0, 1])


@pytest.mark.parametrize("broken, match", [
    (dict(peer_allocates=False), "one warp of each CTA of the pair"),
    (dict(cluster=1), "has no peer CTA"),
])
def test_a_pair_allocation_without_its_peer_is_reported(broken, match):
  cluster = broken.pop("cluster", 2)
  report = check_ptx(_pair(**broken), [np.zeros(2, np.uint32)], smem_bytes=64,
                     block=(128, 1, 1), cluster=(cluster, 1, 1), schedules=len(CI_SCHEDULES))
  assert "tcgen05-alloc" in rules_in_every_schedule(report), str(report)
  assert any(match in f.message for f in report.findings), str(report)


def test_freeing_memory_a_load_never_waited_for_is_a_warning_a_store_an_error():
  """jax's epilogue: tcgen05.ld, the registers used, bar.sync, tcgen05.dealloc, with no
  tcgen05.wait::ld: the warning tcgen05-dealloc-load (the ISA's letter asks for the
  wait; upstream's kernels rely on the registers' use).  A store never waited for is
  a race: nothing shows it completed."""
  body = ALLOC.format(ncols=32) + """
  tcgen05.fence::after_thread_sync;
  tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r6}, [%r3];
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.u64 %rd1, %rd1, %rd2;
  st.global.u32 [%rd1], %r6;
  bar.sync 0;
  @%p1 bra SKIP_DEALLOC;
  tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r3, 32;
SKIP_DEALLOC:
"""
  report = _check(kernel(body, target="sm_100a"))
  assert report.ok and "tcgen05-dealloc-load" in {f.rule for f in report.warnings}, str(report)
  assert not dataclasses.replace(report, strict=True).ok
  stored = body.replace("tcgen05.ld.sync.aligned.32x32b.x1.b32 {%r6}, [%r3];",
                        "tcgen05.st.sync.aligned.32x32b.x1.b32 [%r3], {%r1};")
  assert "race" in rules_in_every_schedule(_check(kernel(stored, target="sm_100a")))


@pytest.mark.parametrize("wait_ld", [True, False])
def test_tensor_memory_overwritten_before_its_load_waited_is_a_race(wait_ld):
  """A tcgen05.st over the cells a tcgen05.ld of the same warp read, with or without
  tcgen05.wait::ld between (9.7.16.6.4.2: ld -> st is no pipeline; the wait orders
  them): without it, a race in every schedule; with it, the values of the load."""
  ptx = _round_trip().replace(
      "  tcgen05.wait::ld.sync.aligned;\n",
      ("  tcgen05.wait::ld.sync.aligned;\n" if wait_ld else "") +
      "  tcgen05.st.sync.aligned.32x32b.x2.b32 [%r3], {%r5, %r4};\n" +
      ("" if wait_ld else "  tcgen05.wait::ld.sync.aligned;\n") +
      "  tcgen05.wait::st.sync.aligned;\n", 1)
  report = _check(ptx)
  if wait_ld:
    assert report.ok and not report.findings, str(report)
  else:
    assert "race" in rules_in_every_schedule(report), str(report)


def test_a_tcgen05_kernel_for_an_older_target_is_refused_naming_it():
  """The opcode families declare the oldest target that has them (Family.arch): PTX
  for .target sm_90a with tcgen05 instructions is refused by name, before it runs."""
  from mosaic_async_store.errors import AsyncStoreError
  older = _round_trip().replace(".target sm_100a", ".target sm_90a")
  with pytest.raises(AsyncStoreError, match=r"\.target sm_90a.*sm_100a or newer.*tcgen05"):
    _check(older)
