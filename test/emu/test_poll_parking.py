"""A poll's state compares only the registers its loop can write (``poll_state``): a
loop that counts its tries is never parked as a spin (its count is in its state), and
real kernels run exactly as with every register compared (the same steps, in every
schedule checked)."""

from __future__ import annotations

import numpy as np
import pytest

from mosaic_async_store.check import Budget, check, check_ptx, findings, poll_state
from mosaic_async_store.check.interp import PtxKernel
from mosaic_async_store.check.memory import SCHEDULES

import tma_kernels
from ptx_harness import assemble, kernel

# Thread 0 polls a global flag nobody sets, 50 tries counted in %r5 (a strong load:
# each poll yields), then stores its count; nothing else changes between its polls, so
# only %r5 tells two polls apart, and the instruction a poll resumes at (the setp after
# the load) does not name it: only the loop's other instructions do.
_COUNTED_POLL = """
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra DONE;
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r5, 0;
POLL:
  ld.relaxed.gpu.global.u32 %r8, [%rd1];
  setp.eq.u32 %p2, %r8, 0;
  add.u32 %r5, %r5, 1;
  setp.lt.u32 %p3, %r5, 50;
  and.pred %p4, %p2, %p3;
  @%p4 bra POLL;
  st.global.u32 [%rd1+4], %r5;
DONE:
"""


def _counted_poll(**kw):
  ptx = assemble(kernel(_COUNTED_POLL))
  return check_ptx(ptx, [np.zeros(2, np.uint32)], smem_bytes=64, block=(32, 1, 1),
                   budget=Budget(max_steps=100_000), **kw)


def test_a_loop_that_counts_its_tries_runs_to_its_count_in_every_schedule():
  report = _counted_poll(schedules=len(SCHEDULES))
  assert report.ok and not report.unfinished, str(report)
  assert list(report.outputs[0]) == [0, 50]


def test_without_the_count_in_its_state_the_loop_would_park_as_a_hang(monkeypatch):
  # the mutation this guards against: a state that leaves out the loop's registers
  monkeypatch.setattr(poll_state, "state", lambda registers, th, columns: ())
  report = _counted_poll(schedules=len(SCHEDULES))
  assert not report.ok and {f.rule for f in report.findings} == {"hang"}, str(report)
  assert {f.schedule for f in report.findings} == set(range(len(SCHEDULES)))


def _full_state(registers, th, columns):
  """Every register the launch has written (what a poll's state was before the cut)."""
  values = tuple(col[th.row] for col in registers.written)
  try:
    hash(values)
  except findings.Stop:   # (an undefined.Undefined's hash raises its finding)
    values = tuple(v if type(v) is int else repr(v) for v in values)
  return values


@pytest.mark.parametrize("name", ["pipelined_add", "hopper_matmul"])
def test_a_real_kernel_runs_the_same_steps_as_with_every_register_compared(name, monkeypatch):
  once, steps = PtxKernel.launch, []

  def counted(self, *a, **kw):   # (each launch: a cluster in a schedule)
    result = once(self, *a, **kw)
    steps.append((self.machine.step, self.machine.executed))
    return result
  monkeypatch.setattr(PtxKernel, "launch", counted)
  fn, args = tma_kernels.ALL[name]()
  cut = check(fn, *args, schedules=2)
  launches = len(steps)
  monkeypatch.setattr(poll_state, "state", _full_state)
  full = check(fn, *args, schedules=2)
  assert cut.ok and full.ok, (str(cut), str(full))
  assert launches > 1 and steps[:launches] == steps[launches:]
  for a, b in zip(cut.outputs, full.outputs):
    np.testing.assert_array_equal(a, b)
