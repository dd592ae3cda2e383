"""The checker stays bounded, and its own failures are not findings.

* A correct poll loop (the demo store kernel with its ``try_wait`` loop replaced by a
  counted ``test_wait.parity`` poll) passes in every schedule within a budget of 500 MiB
  and a bounded number of thread-instructions: pollers that spin in vain let the
  asynchronous stores land (as they do on hardware, in finite time) instead of counting
  to the loop's end while remembering every state.
* A run past its budget (``check.Budget``: thread-instructions, memory; a MemoryError
  too) ends as ``Report.unfinished``, never as a finding, a crash or a kill.
* An exception raised inside a handler, a warp form or the scheduler is a
  ``CheckerError`` naming where it happened, never a finding about the kernel.
"""

import numpy as np
import pytest

from mosaic_async_store.check import Budget, CheckerError, check_ptx
from mosaic_async_store.check import budget as budget_mod
from mosaic_async_store.check import run
from mosaic_async_store.check.interp import PtxKernel
from mosaic_async_store.check.memory import SCHEDULES

import demo_kernels
from ptx_harness import assemble, kernel
from test_ptx_execution import S, _ptx


def _poll_ptx(cfg):
  """``cfg``'s full kernel with its wait loop polling ``test_wait`` (non-blocking)."""
  ptx = _ptx(cfg)
  assert ptx.count("mbarrier.try_wait.parity") == 1
  return ptx.replace("mbarrier.try_wait.parity", "mbarrier.test_wait.parity")


def _check(cfg, ptx, **kw):
  """check_ptx on ``cfg``'s kernel with the demo's inputs; (report, expected SMEM)."""
  args, want = demo_kernels.full_kernel_args(cfg)
  report = check_ptx(ptx, args, smem_bytes=demo_kernels._smem_bytes(cfg),
                     cluster=(cfg.cluster, 1, 1), **kw)
  return report, want


@pytest.mark.parametrize("cluster", [2, 4])
def test_a_test_wait_poll_loop_passes_in_every_schedule_within_its_budget(cluster):
  cfg = S(cluster=cluster)
  ptx = _poll_ptx(cfg)
  start = budget_mod.resident_mb()
  report, want = _check(cfg, ptx, schedules=len(SCHEDULES),
                        budget=Budget(max_steps=3_000_000, max_memory_mb=500))
  assert report.ok, str(report)
  _, _, flags, out = report.outputs
  assert np.array_equal(out, want) and (flags == 1).all()   # no wait timed out
  assert budget_mod.resident_mb() - start < 500


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_spinning_pollers_cost_about_one_loop_per_phase(schedule):
  """The poll loop of 2^20 tries ends with the phase, not with its count: the run
  executes about as many thread-instructions as the blocking wait's."""
  cfg = S()
  blocking = demo_kernels.run_ptx(cfg, _ptx(cfg), schedule)[3].executed
  out, flags, want, polled = demo_kernels.run_ptx(cfg, _poll_ptx(cfg), schedule)
  assert np.array_equal(out, want) and (flags == 1).all()
  assert polled.executed < 3 * blocking


_ENDLESS = """
  mov.u32 %r2, 0;
LOOP:
  add.u32 %r2, %r2, 1;
  bra LOOP;
"""
_ENDS = """
  mov.u32 %r2, 0;
LOOP:
  add.u32 %r2, %r2, 1;
  setp.lt.u32 %p1, %r2, 100;
  @%p1 bra LOOP;
"""


def _one_cta(body, **kw):
  ptx = assemble(kernel(body))
  return check_ptx(ptx, [np.zeros(64, np.uint32)], smem_bytes=64, block=(64, 1, 1), **kw)


def test_a_loop_that_never_ends_is_unfinished_in_every_schedule_not_a_finding():
  report = _one_cta(_ENDLESS, schedules=len(SCHEDULES), budget=Budget(max_steps=200_000))
  assert not report.ok and not report.findings and report.outputs is None
  assert [(u.schedule, u.reason) for u in report.unfinished] == \
      [(s, "steps") for s in SCHEDULES]
  assert all(200_000 < u.executed < 300_000 for u in report.unfinished)
  assert "[unfinished: budget] schedule 0: stopped after" in str(report)
  assert "over max_steps=200000" in str(report)
  # the neighbour, a loop that counts to its end, finishes within the same budget
  ok = _one_cta(_ENDS, schedules=len(SCHEDULES), budget=Budget(max_steps=200_000))
  assert ok.ok and not ok.unfinished, str(ok)


def test_memory_growth_past_the_budget_is_unfinished(monkeypatch):
  """The run reads its resident memory as it goes: growth past max_memory_mb stops it."""
  readings = iter(range(0, 1 << 30, 64))   # 64 MiB more at every reading
  monkeypatch.setattr(budget_mod, "resident_mb", lambda: next(readings))
  monkeypatch.setattr(budget_mod, "MEMORY_CHECK_EVERY", 1)
  report = _one_cta(_ENDLESS, schedules=1, budget=Budget(max_memory_mb=100))
  [u] = report.unfinished
  assert (u.reason, report.findings) == ("memory", ())
  assert "over max_memory_mb=100" in u.message


def test_a_memory_error_is_unfinished_not_a_crash(monkeypatch):
  calls = []
  def exhausted(k):
    calls.append(1)
    raise MemoryError
  monkeypatch.setattr(run, "_resolve", exhausted)
  report = _one_cta(_ENDS, schedules=2)
  assert calls and [(u.schedule, u.reason) for u in report.unfinished] == \
      [(0, "memory"), (1, "memory")]
  assert not report.findings and "ran out of memory" in report.unfinished[0].message


@pytest.mark.parametrize("value", [0, -5, 1.5, True, "10"])
def test_a_budget_refuses_what_is_not_a_positive_int(value):
  with pytest.raises((ValueError, TypeError), match="max_steps"):
    Budget(max_steps=value)
  with pytest.raises(TypeError, match="budget"):
    _one_cta(_ENDS, schedules=1, budget=1000)


_STORE = """
  shl.b32 %r2, %r1, 2;
  cvt.u64.u32 %rd2, %r2;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r1;
"""


def _injected(monkeypatch, where):
  """Runs the one-store kernel with ``where``'s function of the ``st`` raising."""
  ptx = kernel(_STORE)
  pk = PtxKernel(ptx)
  pc = next(i for i, t in enumerate(pk.texts) if t.startswith("st.global"))
  table = getattr(pk.program, where)
  assert table[pc] is not None
  def broken(*args):
    raise ZeroDivisionError("injected")
  table[pc] = broken
  monkeypatch.setattr("mosaic_async_store.check.report.PtxKernel", lambda text: pk)
  return check_ptx(ptx, [np.zeros(64, np.uint32)], smem_bytes=64, block=(64, 1, 1)), pk, pc


@pytest.mark.parametrize("where", ["code", "vcode"])
def test_an_exception_in_a_handler_is_an_internal_error_not_a_finding(monkeypatch, where):
  """Lane by lane (``code``) and through the warp form (``vcode``)."""
  if where == "code":   # the lane-by-lane path runs where the warp form steps aside
    monkeypatch.setattr(PtxKernel, "launch", _without_warp_form(PtxKernel.launch))
  with pytest.raises(CheckerError) as err:
    _injected(monkeypatch, where)
  message = str(err.value)
  assert "internal error of the checker" in message and "st.global.u32" in message
  assert "PTX line" in message and "ZeroDivisionError: injected" in message
  assert isinstance(err.value.__cause__, ZeroDivisionError)


def _without_warp_form(launch):
  def lane_by_lane(self, *args, **kw):
    self.program.vcode[:] = [None] * len(self.program.vcode)
    return launch(self, *args, **kw)
  return lane_by_lane


def test_an_exception_in_the_scheduler_is_an_internal_error(monkeypatch):
  def broken(k, ops):
    raise IndexError("injected")
  monkeypatch.setattr(run.landing_orders, "land_all", broken)   # (the loop lands through it)
  with pytest.raises(CheckerError, match="internal error of the checker's scheduler: "
                     "IndexError: injected"):
    _one_cta(_ENDS, schedules=1)
