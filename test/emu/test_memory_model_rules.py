"""The PTX memory model's finer rules, each broken on a shipped kernel (and kept next to
a correct variant that passes), asserted in every CI schedule.

Every mutation keeps the PTX valid for ptxas (sm_90a); docs/checker.md quotes the ISA
sentence behind each verdict.  The kernels are test_ptx_execution's full store kernels:
barrier init, ``fence.mbarrier_init`` and a relaxed cluster barrier; the SMEM fill and a
second cluster barrier (reductions only); the store into the peer; the wait; the
copy-out.
"""

import re

import numpy as np
import pytest

from mosaic_async_store.check.memory import SCHEDULES
from mosaic_async_store.check.shadow import Shadow
from ptx_harness import kernel, output
from test_ptx_execution import S, _ptx, ptx_finding, run_ptx
from test_protocol_rules import _once

_FILL_SYNC = "barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;"
_CLUSTER_WAIT = "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64"
_RELAXED_WAIT = "mbarrier.try_wait.parity.relaxed.cluster.shared::cta.b64"
_RELEASE_ARRIVE = "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64"
_RELAXED_ARRIVE = "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64"


def _passes(cfg, ptx, schedule):
  out, flags, want, _ = run_ptx(cfg, ptx, schedule)
  assert np.array_equal(out, want) and (flags == 1).all()


def _fill_released_by(fence):
  """The reduction kernel with its fill released by ``fence`` and a relaxed arrive."""
  cfg = S(dtype="int32", atomic="add")
  return cfg, _once(re.escape(_FILL_SYNC), f"{fence}\n\tbarrier.cluster.arrive.relaxed."
                    "aligned;\n\tbarrier.cluster.wait.aligned;", _ptx(cfg))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_fence_mbarrier_init_releases_only_the_inits(schedule):
  """The fill is not released by fence.mbarrier_init: the peer's red.async races it."""
  cfg, ptx = _fill_released_by("fence.mbarrier_init.release.cluster;")
  assert ptx_finding(cfg, ptx, schedule).rule == "race"
  _passes(*_fill_released_by("fence.release.cluster;"), schedule)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_acquire_fence_releases_nothing(schedule):
  cfg, ptx = _fill_released_by("fence.acquire.cluster;")
  assert ptx_finding(cfg, ptx, schedule).rule == "race"
  _passes(*_fill_released_by("fence.sc.cluster;"), schedule)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_release_fence_acquires_nothing(schedule):
  """A relaxed wait then fence.release: the plain reductions of the peer stay unordered."""
  cfg = S(dtype="float32", atomic="add")
  relaxed = _once(re.escape(_CLUSTER_WAIT), _RELAXED_WAIT, _ptx(cfg))
  assert ptx_finding(cfg, _once(r"DONE0:", "DONE0:\n\tfence.release.cluster;", relaxed),
                     schedule).rule == "race"
  _passes(cfg, _once(r"DONE0:", "DONE0:\n\tfence.acquire.cluster;", relaxed), schedule)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_sync_restrict_shared_cta_does_not_release_remote_reductions(schedule):
  """fence.release.sync_restrict::shared::cta orders only operations on the own CTA's
  shared memory; the plain red.shared::cluster into the peer are not among them."""
  cfg = S(dtype="float32", atomic="add")
  restricted = _once(re.escape(_RELEASE_ARRIVE), "fence.release.sync_restrict::shared::cta."
                     f"cluster;\n\t{_RELAXED_ARRIVE}", _ptx(cfg))
  assert ptx_finding(cfg, restricted, schedule).rule == "race"
  _passes(cfg, _once(re.escape(_RELEASE_ARRIVE), f"fence.release.cluster;\n\t{_RELAXED_ARRIVE}",
                     _ptx(cfg)), schedule)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_relaxed_wait_does_not_make_async_data_visible(schedule):
  """st.async data read after a relaxed wait: no visibility until an acquire fence."""
  cfg = S()
  relaxed = _once(re.escape(_CLUSTER_WAIT), _RELAXED_WAIT, _ptx(cfg))
  assert ptx_finding(cfg, relaxed, schedule).rule == "early-read"
  _passes(cfg, _once(r"DONE0:", "DONE0:\n\tfence.acquire.cta;", relaxed), schedule)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_mbarrier_over_data_bytes_is_reported(schedule):
  """The barrier moved onto the last 8 bytes of the 16 KiB data tile: the stores into
  them write an initialised mbarrier (undefined)."""
  cfg = S()
  ptx = _once(r"add\.s32 \t(%r\d+), (%r\d+), 16384;", r"add.s32 \t\1, \2, 16376;", _ptx(cfg))
  assert ptx_finding(cfg, ptx, schedule).rule == "barrier-memory"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_exit_before_the_peers_stores_land_is_reported(schedule):
  """Each CTA exits right after its own arrive: the peer's st.async into its SMEM and
  its arrive on its barrier may still be in flight (CUDA_EXCEPTION_17 on hardware)."""
  cfg = S()
  arrive = re.search(r"\tmbarrier\.arrive\.expect_tx[^\n]*\n", _ptx(cfg)).group(0)
  ptx = _once(re.escape(arrive), arrive + "\tret;\n", _ptx(cfg))
  assert ptx_finding(cfg, ptx, schedule).rule == "exit"


def test_the_shadow_remembers_every_reader():
  """Two unordered readers, then a write ordered after the second only: a race with the
  first (a one-reader epoch would have forgotten it)."""
  sh = Shadow(8)
  sh.record(0, 4, write=False, atomic=False, stamp=(1, 5, 10))   # (slot, clock, insn)
  sh.record(0, 4, write=False, atomic=False, stamp=(2, 7, 11))
  vc = np.zeros(4, np.int64)
  vc[2] = 7                                   # ordered after reader 2 only
  assert sh.conflict(vc, 0, 4, write=True, atomic=False) == ("read by", 1, 5, 10, None)
  vc[1] = 5
  assert sh.conflict(vc, 0, 4, write=True, atomic=False) is None


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_barrier_cluster_waits_for_the_non_exited_threads(schedule):
  """CTA 1 exits at once; CTA 0's cluster barrier completes over the threads left
  (PTX ISA, barrier.cluster: it waits for all non-exited threads of the cluster)."""
  ptx = kernel("""
  setp.ne.u32 %p1, %r2, 0;
  @%p1 bra DONE;
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
DONE:
""")
  x = np.zeros(4, np.int32)
  out = output(ptx, [x], np.int32, cluster=2, smem_bytes=16, block=32, schedule=schedule)
  assert np.array_equal(out, x)
