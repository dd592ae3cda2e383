"""The warnings of issue 60 item 8, each broken by a small kernel in every CI schedule
(a warning: the check passes with the right outputs; with ``strict`` an error) next to
a correct neighbour that passes with no finding at all (docs/checker.md, "Warnings").

* ``peer-arrive-cta``: an arrive that releases at ``.cta`` scope (the default ``.sem``
  and ``.scope``) on another CTA's mbarrier.  PTX ISA, mbarrier.arrive: "The optional
  .scope qualifier indicates the set of threads that directly observe the memory
  synchronizing effect of this operation ... If the .scope qualifier is not specified
  then it defaults to .cta"; a .cta scope does not include another CTA's threads.
  ``.release.cluster``, waited at ``.cluster`` scope, is clean.
* ``proxy-fence-read``: threads read shared memory through the generic proxy, then a
  bulk copy writes those bytes through the asynchronous proxy with no
  ``fence.proxy.async`` between (PTX ISA, Proxies: "A proxy fence is required to
  synchronize memory operations across different proxies").
"""

import dataclasses

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx
from ptx_harness import SCHEDULES, assemble, kernel, outputs, rules_in_every_schedule

# -- peer-arrive-cta ---------------------------------------------------------------

# A 2-CTA cluster of 32 threads each; each CTA's thread 0 inits its barrier (count
# {count}) at offset 0.  The first {count} threads of CTA 1 each store their word
# (tid + 100) into CTA 0's shared memory at 16 + 4 tid through .shared::cluster (%r4:
# CTA 0's barrier there, %rd5 its generic address) and arrive on CTA 0's barrier; the
# same threads of CTA 0 wait on their own barrier and copy their word to the output.
_PEER = """
  .reg .b64 %state<2>;
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r3], {count};
  fence.mbarrier_init.release.cluster;
  barrier.cluster.arrive;
  barrier.cluster.wait;
  setp.ge.u32 %p4, %r1, {count};
  @%p4 bra END;
  mapa.shared::cluster.u32 %r4, %r3, 0;
  cvt.u64.u32 %rd3, %r3;
  cvta.shared.u64 %rd4, %rd3;
  mapa.u64 %rd5, %rd4, 0;
  shl.b32 %r5, %r1, 2;
  setp.eq.u32 %p3, %r2, 0;
  @%p3 bra WAIT;
  add.u32 %r6, %r4, %r5;
  add.u32 %r7, %r1, 100;
  st.shared::cluster.u32 [%r6+16], %r7;
  {arrive}
  bra END;
WAIT:
  {wait}
  @!%p2 bra WAIT;
  add.u32 %r8, %r3, %r5;
  ld.shared.u32 %r9, [%r8+16];
  mul.wide.u32 %rd6, %r1, 4;
  add.s64 %rd7, %rd1, %rd6;
  st.global.u32 [%rd7], %r9;
END:
"""
_WAIT_CTA = "mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;"
_WAIT_CLUSTER = "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p2, [%r3], 0;"
_CTA_ARRIVES = {   # each a .release at .cta scope on CTA 0's barrier
    "default .sem and .scope": "mbarrier.arrive.shared::cluster.b64 _, [%r4];",
    ".release.cta": "mbarrier.arrive.release.cta.shared::cluster.b64 _, [%r4];",
    "generic address (mapa.u64)": "mbarrier.arrive.b64 _, [%rd5];",
    "expect_tx": "mbarrier.arrive.expect_tx.shared::cluster.b64 _, [%r4], 0;",
}


def _peer(arrive, wait, count):
  return assemble(kernel(_PEER.format(arrive=arrive, wait=wait, count=count)))


def _check(ptx, strict=False):
  return check_ptx(ptx, [np.zeros(32, np.uint32)], smem_bytes=256, block=(32, 1, 1),
                   cluster=(2, 1, 1), schedules=len(SCHEDULES), strict=strict)


def _words(count):
  return [t + 100 if t < count else 0 for t in range(32)]


@pytest.mark.parametrize("count", [1, 32], ids=["one thread", "a warp"])
@pytest.mark.parametrize("wait", [_WAIT_CTA, _WAIT_CLUSTER], ids=["wait .cta", "wait .cluster"])
@pytest.mark.parametrize("arrive", _CTA_ARRIVES, ids=list(_CTA_ARRIVES))
def test_a_cta_scoped_arrive_on_a_peers_mbarrier_is_a_warning(arrive, wait, count):
  """The arrive's release is taken as ordering the peer's waiters (what CUTLASS,
  Triton and Pallas rely on): the warning in every schedule, no race, the right words;
  with strict, an error."""
  ptx = _peer(_CTA_ARRIVES[arrive], wait, count)
  report = _check(ptx)
  assert rules_in_every_schedule(report) == {"peer-arrive-cta"}, str(report)
  assert report.ok and not report.errors, str(report)
  assert all(f.severity == "warning" and f.cta == 1 for f in report.findings)
  assert report.outputs[0].view(np.uint32).tolist() == _words(count)
  assert not dataclasses.replace(report, strict=True).ok
  assert not _check(ptx, strict=True).ok


@pytest.mark.parametrize("count", [1, 32], ids=["one thread", "a warp"])
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_cluster_scoped_arrive_waited_at_cluster_scope_is_clean(schedule, count):
  out = outputs(_peer("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r4];",
                      _WAIT_CLUSTER, count),
                [np.zeros(32, np.uint32)], cluster=2, smem_bytes=256, block=32,
                schedule=schedule)
  assert out[0].view(np.uint32).tolist() == _words(count)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_cta_scoped_arrive_on_the_own_mbarrier_is_clean(schedule):
  """Thread 0 of each CTA arrives at .cta scope on its own barrier, then waits."""
  body = """
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
  bar.sync 0;
  @!%p1 bra END;
  mbarrier.arrive.shared::cluster.b64 _, [%r3];
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
  @!%p2 bra WAIT;
END:
  barrier.cluster.arrive;
  barrier.cluster.wait;
"""
  outputs(assemble(kernel(body)), [np.zeros(4, np.uint32)], cluster=2, smem_bytes=64,
          block=32, schedule=schedule)


# -- proxy-fence-read ---------------------------------------------------------------

# One CTA of 32 threads refills one 128-byte stage: thread 0 loads tile 0 of the input
# into it by a bulk copy, every thread reads its word (to out[tid]), {fence}, the CTA
# meets at bar.sync (every read happens before the next issue), thread 0 loads tile 1
# into the same bytes, every thread reads its word again (to out[32 + tid]).
_REFILL = """
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd7, [k_param_1];
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  add.s32 %r10, %r3, 128;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r10], 1;
  bar.sync 0;
  shl.b32 %r4, %r1, 2;
  add.s32 %r5, %r3, %r4;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd7, %rd3;
  @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r10], 128;
  @%p1 cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [%r3], [%rd1], 128, [%r10];
LOAD0:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r10], 0;
  @!%p2 bra LOAD0;
  ld.shared.u32 %r6, [%r5];
  st.global.u32 [%rd4], %r6;
  {fence}
  bar.sync 0;
  add.s64 %rd8, %rd1, 128;
  @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r10], 128;
  @%p1 cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [%r3], [%rd8], 128, [%r10];
LOAD1:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r10], 1;
  @!%p2 bra LOAD1;
  ld.shared.u32 %r7, [%r5];
  st.global.u32 [%rd4+128], %r7;
"""
_X = np.arange(64, dtype=np.uint32) * 3 + 1


def _refill(fence, strict=False):
  ptx = assemble(kernel(_REFILL.format(fence=fence), nparams=2))
  return check_ptx(ptx, [_X, np.zeros(64, np.uint32)], smem_bytes=256, block=(32, 1, 1),
                   schedules=len(SCHEDULES), strict=strict)


def test_a_bulk_load_over_bytes_threads_read_unfenced_is_a_warning():
  """The refill after the reads with no proxy fence: the warning in every schedule (the
  copy is issued after every read: no race), the right words; with strict, an error."""
  report = _refill("")
  assert rules_in_every_schedule(report) == {"proxy-fence-read"}, str(report)
  assert report.ok and not report.errors, str(report)
  assert {f.rule for f in report.findings} == {"proxy-fence-read"}
  assert "read by CTA 0 thread" in report.findings[0].message
  assert report.outputs[1].view(np.uint32).tolist() == _X.tolist()
  assert not _refill("", strict=True).ok


@pytest.mark.parametrize("fence", ["fence.proxy.async.shared::cta;", "fence.proxy.async;"])
def test_a_bulk_load_over_bytes_read_then_fenced_is_clean(fence):
  report = _refill(fence)
  assert report.ok and not report.findings, str(report)
  assert report.outputs[1].view(np.uint32).tolist() == _X.tolist()


def test_a_bulk_load_over_bytes_no_thread_read_is_clean():
  """The stage refilled with no read of it in between (the reads come after): clean."""
  body = _REFILL.format(fence="").replace("  ld.shared.u32 %r6, [%r5];\n", "").replace(
      "  st.global.u32 [%rd4], %r6;\n", "")
  report = check_ptx(assemble(kernel(body, nparams=2)), [_X, np.zeros(64, np.uint32)],
                     smem_bytes=256, block=(32, 1, 1), schedules=len(SCHEDULES))
  assert report.ok and not report.findings, str(report)
  assert report.outputs[1].view(np.uint32).tolist() == [0] * 32 + _X[32:].tolist()
