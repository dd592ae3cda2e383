"""One check's runs in worker processes (check/parallel.py) give the report of the runs one
after another: the same findings in the same order, the same unfinished schedules, the
same outputs, the same exception; and a cluster's arguments are still the memory the
cluster before it left (its first completed schedule's)."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

from mosaic_async_store.check import Budget, check_ptx, parallel
from mosaic_async_store.errors import AsyncStoreError
from ptx_harness import kernel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="worker processes are forked on Linux only")

# Each CTA's row (thread 0 writes it): its linear %ctaid and its %cluster_ctarank.
_PLACES = kernel("""
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ctaid.y;
  mov.u32 %r6, %nctaid.x;
  mad.lo.u32 %r8, %r4, %r6, %r3;
  mul.lo.u32 %r9, %r8, 8;
  cvt.u64.u32 %rd2, %r9;
  add.s64 %rd1, %rd1, %rd2;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 st.global.u32 [%rd1], %r8;
  @%p1 st.global.u32 [%rd1+4], %r2;""")

# One thread per CTA adds 1 to word 0: the total is the number of clusters only where
# each cluster starts from the memory the one before it left.
_COUNTER = kernel("""
  ld.param.u64 %rd1, [k_param_0];
  ld.global.u32 %r3, [%rd1];
  add.u32 %r3, %r3, 1;
  st.global.u32 [%rd1], %r3;""")

# Every thread writes word 0, unordered: a race in every schedule of every cluster.
_RACE = kernel("""
  ld.param.u64 %rd1, [k_param_0];
  st.global.u32 [%rd1], %r1;""")

_CASES = {   # name: (ptx, buffers, keywords)
    "grid of 2x1 clusters": (_PLACES, lambda: [np.zeros(16, np.uint32)],
                             dict(smem_bytes=0, block=4, cluster=(2, 1, 1), grid=(4, 2, 1))),
    "carried counter": (_COUNTER, lambda: [np.zeros(4, np.uint32)],
                        dict(smem_bytes=0, block=1, cluster=1, grid=(6, 1, 1))),
    "race in each cluster": (_RACE, lambda: [np.zeros(4, np.uint32)],
                             dict(smem_bytes=0, block=8, cluster=2, grid=(4, 1, 1))),
    "budget stops each run": (_PLACES, lambda: [np.zeros(16, np.uint32)],
                              dict(smem_bytes=0, block=4, cluster=(2, 1, 1), grid=(4, 1, 1),
                                   budget=Budget(max_steps=5))),
}


def _same(a, b) -> None:
  assert a.findings == b.findings
  assert a.unfinished == b.unfinished
  assert a.schedules == b.schedules and a.ok == b.ok and str(a) == str(b)
  assert (a.outputs is None) == (b.outputs is None)
  if a.outputs is not None:
    assert len(a.outputs) == len(b.outputs)
    for x, y in zip(a.outputs, b.outputs):
      assert x.dtype == y.dtype and x.shape == y.shape
      np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", sorted(_CASES))
@pytest.mark.parametrize("jobs", [2, 3])
def test_workers_report_what_one_process_reports(name, jobs):
  ptx, buffers, keywords = _CASES[name]
  one = check_ptx(ptx, buffers(), schedules=3, jobs=1, **keywords)
  many = check_ptx(ptx, buffers(), schedules=3, jobs=jobs, **keywords)
  _same(one, many)


def test_the_cases_show_what_they_are_named_for():
  """(so that the comparison above compares findings, unfinished runs and outputs)"""
  places = check_ptx(_PLACES, [np.zeros(16, np.uint32)], jobs=2, schedules=3,
                     **_CASES["grid of 2x1 clusters"][2])
  assert places.ok
  np.testing.assert_array_equal(places.outputs[0].reshape(8, 2)[:, 0], np.arange(8))
  np.testing.assert_array_equal(places.outputs[0].reshape(8, 2)[:, 1], [0, 1] * 4)
  counter = check_ptx(_COUNTER, [np.zeros(4, np.uint32)], jobs=3, schedules=3,
                      **_CASES["carried counter"][2])
  assert counter.ok and counter.outputs[0][0] == 6
  race = check_ptx(_RACE, [np.zeros(4, np.uint32)], jobs=2, schedules=3,
                   **_CASES["race in each cluster"][2])
  assert race.outputs is None and {f.rule for f in race.findings} == {"race"}
  assert [f.schedule for f in race.findings[:3]] == [0, 1, 2] and len(race.findings) == 6
  stopped = check_ptx(_PLACES, [np.zeros(16, np.uint32)], jobs=2, schedules=3,
                      **_CASES["budget stops each run"][2])
  assert [(u.cta_base, u.schedule) for u in stopped.unfinished] == [
      (c, s) for c in (0, 2) for s in range(3)]


def _carried(current, outcomes):
  """(``report._checked``'s rule, on plain outcomes: (seed, completed, value))"""
  for outcome in outcomes:
    if outcome is None:
      return None
    if outcome[1]:
      return current + [outcome[2]]
  return current


def _launch(current, first, seed):
  """A run whose outcome depends on its arguments; schedule 0 ends last, and schedule 0
  of cluster 1 does not complete (the cluster's carried memory is schedule 1's)."""
  time.sleep(0.05 if seed == 0 else 0)
  return seed, not (first == 1 and seed == 0), (first, seed, len(current))


@pytest.mark.parametrize("jobs", [1, 2, 4])
def test_a_cluster_starts_from_its_predecessor_s_first_completed_run(jobs):
  grid, last = parallel.grid_runs(_launch, [0, 1, 2], 3, [100], _carried, jobs)
  want, current = [], [100]
  for first in (0, 1, 2):
    want.append([_launch(current, first, seed) for seed in range(3)])
    current = _carried(current, want[-1])
  assert grid == want and last == current == [100, (0, 0, 1), (1, 1, 2), (2, 0, 3)]


def _raising(current, first, seed):
  if (first, seed) == (2, 0):
    raise ValueError("cluster 2, schedule 0")
  if (first, seed) == (1, 2):
    time.sleep(0.1)   # (ends after the later run's exception arrived)
    raise ValueError("cluster 1, schedule 2")
  return seed, True, first


@pytest.mark.parametrize("jobs", [1, 3])
def test_the_earliest_run_s_exception_is_raised(jobs):
  with pytest.raises(ValueError, match=r"^cluster 1, schedule 2\b"):
    parallel.grid_runs(_raising, [0, 1, 2], 3, [], _carried, jobs)


def test_a_worker_that_dies_is_named():
  def dying(current, first, seed):
    if seed == 1:
      os._exit(3)
    return seed, True, first
  with pytest.raises(parallel.WorkerError, match=r"schedule 1 .* exit status 3.*jobs=1"):
    parallel.grid_runs(dying, [0], 3, [], _carried, 2)


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True, "2"])
def test_jobs_is_an_int_of_at_least_one(jobs):
  with pytest.raises((AsyncStoreError, TypeError), match=r"^jobs="):
    check_ptx(_COUNTER, [np.zeros(4, np.uint32)], smem_bytes=0, block=1, jobs=jobs)


def test_the_default_jobs_follow_the_environment(monkeypatch):
  monkeypatch.setenv(parallel.JOBS_VARIABLE, "3")
  assert parallel.resolve_jobs(None) == 3
  monkeypatch.setenv(parallel.JOBS_VARIABLE, "none")
  with pytest.raises(AsyncStoreError, match=parallel.JOBS_VARIABLE):
    parallel.resolve_jobs(None)
  monkeypatch.delenv(parallel.JOBS_VARIABLE)
  monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(parallel.cores()))
  assert parallel.resolve_jobs(None) == 1
  monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
  assert parallel.resolve_jobs(None) == parallel.cores()
