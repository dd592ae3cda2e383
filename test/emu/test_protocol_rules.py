"""Every rule of the protocol checker can fail: one mutation of a real kernel per rule.

Each test edits the PTX of a store kernel that passes (test_ptx_execution.py)
so that it breaks exactly one rule of the PTX ISA, and asserts that the
checker names that rule (``Finding.rule``) under every CI schedule, or
under the schedules where the violation shows, said per test.
"""

import re

import numpy as np
import pytest

from mosaic_async_store.check.memory import SCHEDULES, morally_strong, SCOPES
from test_ptx_execution import S, _ptx, ptx_finding, run_ptx


def _once(pattern, repl, text, count=1):
  """``re.subn`` that insists the pattern matched ``count`` times."""
  out, n = re.subn(pattern, repl, text)
  assert n == count, f"{pattern!r} matched {n} times, not {count}"
  return out


def _barrier_count(ptx, n):
  """The kernel's barrier initialised for ``n`` arrivals instead of 128."""
  return _once(r"mov\.b32 \t(%r\d+), 128;(\s*// begin inline asm\s*@%p\d+ mbarrier\.init)",
               rf"mov.b32 \t\1, {n};\2", ptx)


def _announced_bytes(ptx, n):
  """Every thread announcing ``n`` bytes instead of its 128."""
  arrive = re.search(r"mbarrier\.arrive\.expect_tx\S*\s+_, \[%\w+\], (%r\d+);", ptx)
  return _once(rf"mov\.b32 \t{re.escape(arrive.group(1))}, 128;",
               f"mov.b32 \t{arrive.group(1)}, {n};", ptx)


_CLUSTER_WAIT = "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64"
_CTA_WAIT = "mbarrier.try_wait.parity.shared::cta.b64"   # the ISA default: .acquire.cta


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_cta_scoped_wait_after_remote_plain_reductions_is_a_race(schedule):
  """f32 add goes as plain red.shared::cluster + a .release.cluster arrive: a
  .acquire.cta wait in the receiving CTA is not morally strong with it."""
  cfg = S(dtype="float32", atomic="add")
  ptx = _once(re.escape(_CLUSTER_WAIT), _CTA_WAIT, _ptx(cfg))
  ptx_finding(cfg, ptx, schedule, rule="race", match="not morally strong")


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_cta_scoped_wait_after_async_stores_is_enough(schedule):
  """Calibration (upstream's hardware-tested kernels wait so): data completed
  through complete_tx is visible to any thread that observes the phase."""
  cfg = S()
  out, flags, want, _ = run_ptx(cfg, _once(re.escape(_CLUSTER_WAIT), _CTA_WAIT, _ptx(cfg)),
                                schedule)
  assert np.array_equal(out, want) and (flags == 1).all()


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_one_arrival_too_few_expected_completes_early_and_is_caught(schedule):
  """The barrier expects 127 arrivals, 128 come: the phase completes before the
  last thread's bytes are accounted for (or the 128th arrival overflows it)."""
  cfg = S()
  ptx = _barrier_count(_ptx(cfg), 127)
  assert ptx_finding(cfg, ptx, schedule).rule in ("early-read", "arrival-overflow")


def test_arrival_overflow_when_tx_is_still_pending():
  """Schedule 1 lands nothing while threads run: the 127th arrival leaves tx
  pending, so the 128th finds no arrival left in the phase."""
  cfg = S()
  ptx = _barrier_count(_ptx(cfg), 127)
  assert ptx_finding(cfg, ptx, 1).rule == "arrival-overflow"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_red_async_into_the_executing_cta_is_undefined(schedule):
  """Both mapa dropped: red.async with this CTA's own buffer and barrier."""
  cfg = S(dtype="int32", atomic="add")
  ptx = _once(r"mapa\.shared::cluster\.u32 (%r\d+), (%r\d+), %r\d+;", r"mov.b32 \1, \2;",
              _ptx(cfg), count=2)
  assert ptx_finding(cfg, ptx, schedule).rule == "red.async-self"


def test_st_async_in_a_cluster_of_one_cta_is_undefined():
  cfg = S(target="local")   # st.async into the own CTA: fine in a cluster of 2...
  # ...not of 1
  assert ptx_finding(cfg, _ptx(cfg), 0, cluster=1).rule == "st.async-cluster-of-one"


def test_tx_count_out_of_range():
  cfg = S()
  ptx = _ptx(cfg)
  ptx = _announced_bytes(ptx, 1 << 20)
  assert ptx_finding(cfg, ptx, 0).rule == "tx-range"


def test_barrier_count_out_of_range():
  cfg = S()
  ptx = _barrier_count(_ptx(cfg), 0)
  assert ptx_finding(cfg, ptx, 0).rule == "count-range"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_barrier_init_not_released_to_the_cluster(schedule):
  """Without fence.mbarrier_init the relaxed cluster arrive releases nothing,
  and with the kernel's second cluster barrier made relaxed too nothing else
  orders the init before the peer's st.async and arrive."""
  cfg = S()
  ptx = _once(r"fence\.mbarrier_init\.release\.cluster;", "", _ptx(cfg))
  ptx = _once(r"barrier\.cluster\.arrive\.aligned;", "barrier.cluster.arrive.relaxed.aligned;", ptx)
  assert ptx_finding(cfg, ptx, schedule).rule == "barrier-init"


def test_uninitialised_barrier():
  cfg = S()
  ptx = _once(r"@%p\d+ mbarrier\.init\.shared\.b64 \[%r\d+\], %r\d+;", "", _ptx(cfg))
  assert ptx_finding(cfg, ptx, 0).rule == "barrier-uninit"


def test_unbounded_wait_on_a_short_count_hangs():
  """tx one byte more than arrives and a wait loop with no bound: a hang."""
  cfg = S()
  ptx = _ptx(cfg)
  ptx = _announced_bytes(ptx, 129)
  ptx = _once(r"@%p1 bra WAIT", "bra WAIT", ptx)
  ptx_finding(cfg, ptx, 0, rule="hang", match="^deadlock")


def test_plain_store_read_without_any_synchronisation_is_a_race():
  """The receiving CTA copies its SMEM out without waiting at all."""
  cfg = S(dtype="float32", atomic="add")
  ptx = _once(r"mbarrier\.try_wait\.parity\.acquire\.cluster\.shared::cta\.b64 %p0, [^;]*;",
              "setp.eq.u32 %p0, 0, 0;", _ptx(cfg))   # the wait "succeeds" at once
  f = ptx_finding(cfg, ptx, 0, rule="race")
  assert "morally strong" not in f.explained


def test_moral_strength_needs_both_scopes_to_include_both_threads():
  cta, cluster = SCOPES["cta"], SCOPES["cluster"]
  assert morally_strong(0, cta, 0, cta)             # same CTA: any scope
  assert morally_strong(0, cluster, 1, cluster)
  assert not morally_strong(0, cluster, 1, cta)     # a .cta wait in another CTA
  assert not morally_strong(0, cta, 1, cluster)     # a .cta release in another CTA


# -- fences: the relaxed + fence forms of release and acquire -------------------

_RELEASE_ARRIVE = "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64"
_RELAXED_ARRIVE = "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64"
_RELAXED_WAIT = "mbarrier.try_wait.parity.relaxed.cluster.shared::cta.b64"


@pytest.mark.long
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_relaxed_wait_needs_an_acquire_fence(schedule):
  """A relaxed wait observes the phase but acquires nothing; a cluster-scope
  fence after it acquires what it observed (the fence-based acquire pattern)."""
  cfg = S(dtype="float32", atomic="add")
  relaxed = _once(re.escape(_CLUSTER_WAIT), _RELAXED_WAIT, _ptx(cfg))
  assert ptx_finding(cfg, relaxed, schedule).rule == "race"
  fenced = _once(r"DONE0:", "DONE0:\nfence.acq_rel.cluster;", relaxed)
  out, flags, want, _ = run_ptx(cfg, fenced, schedule)
  assert np.array_equal(out, want) and (flags == 1).all()
  membar = _once(r"DONE0:", "DONE0:\nmembar.gl;", relaxed)   # gpu scope includes the cluster
  out, flags, want, _ = run_ptx(cfg, membar, schedule)
  assert np.array_equal(out, want) and (flags == 1).all()
  cta_fenced = _once(r"DONE0:", "DONE0:\nfence.acq_rel.cta;", relaxed)   # scope too small
  assert ptx_finding(cfg, cta_fenced, schedule).rule == "race"


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_relaxed_arrive_needs_a_release_fence(schedule):
  """The producer's plain reductions are released by a fence before a relaxed
  arrive (the fence-based release pattern), not by the relaxed arrive alone."""
  cfg = S(dtype="float32", atomic="add")
  relaxed = _once(re.escape(_RELEASE_ARRIVE), _RELAXED_ARRIVE, _ptx(cfg))
  assert ptx_finding(cfg, relaxed, schedule).rule == "race"
  fenced = _once(re.escape(_RELAXED_ARRIVE), "fence.acq_rel.cluster;\n" + _RELAXED_ARRIVE,
                 relaxed)
  out, flags, want, _ = run_ptx(cfg, fenced, schedule)
  assert np.array_equal(out, want) and (flags == 1).all()
