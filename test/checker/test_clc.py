"""Cluster launch control (``clusterlaunchcontrol.try_cancel`` / ``query_cancel``,
check/families/clc/) and the ``.b128`` loads and stores its response is read with, in
hand-written PTX: a request answered "failed" (the one exact answer for a cluster run
alone), read after its mbarrier phase and decoded, runs in every CI schedule; each rule
it can break is reported in every CI schedule."""

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx
from mosaic_async_store.check.families.clc.cancel import NOT_CANCELED
from mosaic_async_store.check.interp import PtxKernel

from ptx_harness import CI_SCHEDULES, finding, kernel, output, outputs, rules_in_every_schedule

SCHEDULES = len(CI_SCHEDULES)
_REGS = ".reg .b128 %q<4>;"


def _check(ptx, buffers, **kwargs):
  kwargs.setdefault("smem_bytes", 64)
  kwargs.setdefault("block", (32, 1, 1))
  return check_ptx(ptx, buffers, schedules=SCHEDULES, **kwargs)


# -- ld / st .b128 ----------------------------------------------------------------------

# Each of 4 threads loads 16 bytes of the input with ld.global.b128, stores them to SMEM
# with st.shared.b128; after bar.sync each loads its neighbour's with ld.shared.b128 and
# stores them to the output with st.global.b128.
_ROTATE = """
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd2, [k_param_1];
  mov.u32 %r3, __dynamic_shmem__0;
  mul.wide.u32 %rd3, %r1, 16;
  add.s64 %rd4, %rd1, %rd3;
  ld.global.b128 %q1, [%rd4];
  shl.b32 %r4, %r1, 4;
  add.s32 %r5, %r3, %r4;
  st.shared.b128 [%r5], %q1;
  bar.sync 0;
  add.s32 %r6, %r1, 1;
  and.b32 %r6, %r6, 3;
  shl.b32 %r6, %r6, 4;
  add.s32 %r7, %r3, %r6;
  ld.shared.b128 %q2, [%r7];
  add.s64 %rd5, %rd2, %rd3;
  st.global.b128 [%rd5], %q2;
"""


def test_b128_loads_and_stores_move_16_bytes_as_one_value():
  x = np.arange(16, dtype=np.uint32) * 0x01010101 + 0x10203040
  got = outputs(kernel(_ROTATE, nparams=2, regs=_REGS), [x, np.zeros(16, np.uint32)],
                cluster=1, smem_bytes=64, block=4)[1].view(np.uint32)
  assert got.tolist() == np.roll(x.reshape(4, 4), -1, axis=0).ravel().tolist()


def test_a_b128_store_without_the_barrier_races():
  ptx = kernel(_ROTATE.replace("bar.sync 0;", ""), nparams=2, regs=_REGS)
  report = _check(ptx, [np.zeros(16, np.uint32), np.zeros(16, np.uint32)], block=(4, 1, 1))
  assert "race" in rules_in_every_schedule(report), str(report)


def test_a_misaligned_b128_load_faults():
  ptx = kernel("""  mov.u32 %r3, __dynamic_shmem__0;
  ld.shared.b128 %q1, [%r3+8];""", regs=_REGS)
  finding(ptx, [np.zeros(4, np.uint32)], rule="fault", match="misaligned 16-byte",
          cluster=1, smem_bytes=64, block=1)


@pytest.mark.parametrize("stmt", ["ld.relaxed.cta.shared.b128 %q1, [%r3]",
                                  "ld.shared.v2.b128 {%q1, %q2}, [%r3]",
                                  "st.release.cta.shared.b128 [%r3], %q1"])
def test_strong_and_vector_b128_accesses_are_refused_by_name(stmt):
  with pytest.raises(NotImplementedError, match=r"\.b128"):
    PtxKernel(kernel(f"  {stmt};", regs=_REGS))


# -- try_cancel / query_cancel -----------------------------------------------------------

# One CTA: thread 0 initialises the mbarrier at SMEM 0, arrives on it expecting 16 bytes
# and requests a cancellation whose response goes to SMEM 16; every thread waits for the
# phase ({early}: a read of the response before that), reads the response, decodes it,
# and writes is_canceled (and, if canceled, the first ctaid's x) to the output.
_CANCEL = """
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r3, __dynamic_shmem__0;
  add.s32 %r4, %r3, 16;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
  bar.sync 0;
  @%p1 mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%r3], 16;
  @%p1 clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes{cast}.b128 [%r4], [%r3];
  {early}
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r3], 0;
  @!%p2 bra WAIT;
  {{
  .reg .b128 handle;
  ld.shared.b128 handle, [%r4];
  clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p3, handle;
  @%p3 clusterlaunchcontrol.query_cancel.get_first_ctaid.v4.b32.b128 {{%r5, %r6, %r7, _}}, handle;
  }}
  selp.u32 %r8, 1, 0, %p3;
  @%p3 bra CANCELED;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r8;
  bra DONE;
CANCELED:
  st.global.u32 [%rd1], %r5;
DONE:
"""


def _cancel(early="", cast=""):
  return kernel(_CANCEL.format(early=early, cast=cast), target="sm_100a")


def test_a_request_waited_for_then_decoded_fails_and_the_kernel_runs_to_completion():
  report = _check(_cancel(), [np.full(32, 7, np.uint32)])
  assert report.ok, str(report)
  assert report.outputs[0].view(np.uint32).tolist() == [0] * 32   # not canceled


def test_the_response_is_16_bytes_written_into_shared_memory():
  kern = PtxKernel(_cancel())
  _, found = kern.launch([np.zeros(32, np.uint32)], cluster=1, smem_bytes=64, block=32)
  assert not found
  assert bytes(kern.machine.smem[0][16:32]) == NOT_CANCELED.to_bytes(16, "little")


def test_reading_the_response_before_the_mbarrier_phase_is_reported():
  early = "@%p1 ld.shared.b128 %q1, [%r4];"
  report = _check(kernel(_CANCEL.format(early=early, cast=""), regs=_REGS,
                         target="sm_100a"), [np.zeros(32, np.uint32)])
  assert {"early-read", "race"} <= rules_in_every_schedule(report), str(report)


def test_decoding_the_response_before_the_mbarrier_phase_is_reported():
  early = """@%p1 ld.shared.b128 %q1, [%r4];
  @%p1 clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p4, %q1;"""
  report = _check(kernel(_CANCEL.format(early=early, cast=""), regs=_REGS,
                         target="sm_100a"), [np.zeros(32, np.uint32)])
  found = rules_in_every_schedule(report)
  assert found & {"early-read", "race"} and "clc-response" in found, str(report)


def test_the_first_ctaid_of_a_failed_request_is_undefined():
  body = _CANCEL.replace("@%p3 clusterlaunchcontrol.query_cancel.get_first_ctaid",
                         "clusterlaunchcontrol.query_cancel.get_first_ctaid") \
                .replace("st.global.u32 [%rd3], %r8;", "st.global.u32 [%rd3], %r5;")
  ptx = kernel(body.format(early="", cast=""), target="sm_100a")
  finding(ptx, [np.zeros(32, np.uint32)], rule="undefined-value", match="get_first_ctaid",
          cluster=1, smem_bytes=64, block=32)


def test_decoding_a_value_no_request_wrote_is_reported():
  ptx = kernel("""  mov.u32 %r3, __dynamic_shmem__0;
  ld.shared.b128 %q1, [%r3];
  clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p1, %q1;""", regs=_REGS,
               target="sm_100a")
  finding(ptx, [np.zeros(4, np.uint32)], rule="clc-response", cluster=1, smem_bytes=64,
          block=1)


def test_a_request_after_the_cta_decoded_a_failure_is_reported():
  again = _CANCEL.replace("DONE:\n", """DONE:
  @%p1 clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [%r4], [%r3];
""")
  ptx = kernel(again.format(early="", cast=""), target="sm_100a")
  report = _check(ptx, [np.zeros(32, np.uint32)])
  assert "clc-after-failure" in rules_in_every_schedule(report), str(report)


# Two CTAs: each thread 0 initialises its mbarrier and arrives on it expecting 16 bytes;
# CTA 0's thread 0 requests with .multicast::cluster::all, which writes the response into
# both CTAs' SMEM and completes on both CTAs' mbarriers; each thread writes its own word
# of the output (rank * 32 + tid).
_MULTICAST = _CANCEL.replace("""  bar.sync 0;
  @%p1 mbarrier.arrive.expect_tx""", """  fence.mbarrier_init.release.cluster;
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  @%p1 mbarrier.arrive.expect_tx""").replace(
      "  @%p1 clusterlaunchcontrol", """  setp.eq.u32 %p5, %r2, 0;
  and.pred %p1, %p1, %p5;
  @%p1 clusterlaunchcontrol""").replace("DONE:\n", """DONE:
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
""").replace("mul.wide.u32 %rd2, %r1, 4;", "mad.lo.u32 %r9, %r2, 32, %r1;\n  mul.wide.u32 %rd2, %r9, 4;")


def test_a_multicast_request_answers_every_cta_of_the_cluster():
  ptx = kernel(_MULTICAST.format(early="", cast=".multicast::cluster::all"),
               target="sm_100a")
  report = _check(ptx, [np.full(64, 7, np.uint32)], cluster=2)
  assert report.ok, str(report)
  assert report.outputs[0].view(np.uint32).tolist() == [0] * 64


def test_without_multicast_the_other_cta_waits_forever():
  ptx = kernel(_MULTICAST.format(early="", cast=""), target="sm_100a")
  report = _check(ptx, [np.zeros(64, np.uint32)], cluster=2)
  assert "hang" in rules_in_every_schedule(report), str(report)


# -- fence.proxy.async::generic.{release,acquire}.sync_restrict --------------------------

# 32 threads store one element each of a 128-byte SMEM tile ({release}), meet at
# bar.sync, then thread 0 ({acquire}) stores the tile to global memory with a bulk copy.
_GENERIC_TO_ASYNC = """
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r3, __dynamic_shmem__0;
  shl.b32 %r4, %r1, 2;
  add.s32 %r5, %r3, %r4;
  add.s32 %r6, %r1, 1;
  st.shared.u32 [%r5], %r6;
  {release}
  bar.sync 0;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 bra ISSUE;
  bra END;
ISSUE:
  {acquire}
  cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r3], 128;
  cp.async.bulk.commit_group;
  cp.async.bulk.wait_group 0;
END:
"""
_RELEASE = "fence.proxy.async::generic.release.sync_restrict::shared::cta.cluster;"
_ACQUIRE = "fence.proxy.async::generic.acquire.sync_restrict::shared::cluster.cluster;"


@pytest.mark.parametrize("release,acquire", [(True, True), (True, False), (False, True)])
def test_the_generic_to_async_fences_order_only_as_a_pair(release, acquire):
  ptx = kernel(_GENERIC_TO_ASYNC.format(release=_RELEASE if release else "",
                                        acquire=_ACQUIRE if acquire else ""))
  report = _check(ptx, [np.zeros(32, np.uint32)], smem_bytes=128)
  if release and acquire:
    assert report.ok, str(report)
    assert report.outputs[0].view(np.uint32).tolist() == list(range(1, 33))
  else:
    assert "proxy-fence" in rules_in_every_schedule(report), str(report)


def test_the_release_half_leaves_out_writes_to_another_ctas_shared_memory():
  # Each CTA's threads write their tile in the other CTA's SMEM (shared::cluster), then
  # fence with the release half (which covers this CTA's shared memory only): the other
  # CTA's bulk store reads bytes no fence covers.
  body = _GENERIC_TO_ASYNC.replace("  st.shared.u32 [%r5], %r6;", """  xor.b32 %r7, %r2, 1;
  mapa.shared::cluster.u32 %r8, %r5, %r7;
  st.shared::cluster.u32 [%r8], %r6;""").replace("  bar.sync 0;", """  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;""").replace("END:\n", """END:
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
""")
  ptx = kernel(body.format(release=_RELEASE, acquire=_ACQUIRE))
  report = _check(ptx, [np.zeros(32, np.uint32)], smem_bytes=128, cluster=2)
  assert "proxy-fence" in rules_in_every_schedule(report), str(report)


@pytest.mark.parametrize("stmt", [
    "fence.proxy.async::generic.release.sync_restrict::shared::cluster.cluster",
    "fence.proxy.async::generic.acquire.sync_restrict::shared::cta.cluster",
    "fence.proxy.async::generic.release.cluster"])
def test_other_generic_to_async_fences_are_refused_by_name(stmt):
  with pytest.raises(NotImplementedError, match="async::generic"):
    PtxKernel(kernel(f"  {stmt};"))


# -- .pragma -----------------------------------------------------------------------------


def test_the_nounroll_pragma_is_a_hint_and_other_pragmas_are_refused():
  body = """  mov.u32 %r3, 0;
LOOP:
  .pragma "nounroll";
  add.u32 %r3, %r3, 1;
  setp.lt.u32 %p1, %r3, 5;
  @%p1 bra LOOP;
  ld.param.u64 %rd1, [k_param_0];
  st.global.u32 [%rd1], %r3;"""
  assert output(kernel(body), [np.zeros(1, np.uint32)], cluster=1, smem_bytes=16,
                block=1).tolist() == [5]
  with pytest.raises(NotImplementedError, match='directive: .pragma "unroll 4"'):
    PtxKernel(kernel(body.replace('"nounroll"', '"unroll 4"')))
