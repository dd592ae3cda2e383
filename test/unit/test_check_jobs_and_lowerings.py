"""``check``'s runs in worker processes report what one process reports (a grid of four
clusters, with and without findings), and the same kernel checked again in one process
is not lowered again (tools/kernel_cache.py: the key)."""

from __future__ import annotations

import functools
import sys

import numpy as np
import pytest

import tma_kernels
from mosaic_async_store import check as mas_check
from mosaic_async_store.tools import check_kernel
from mosaic_async_store.tools.kernel_cache import lowering_key


def _same(a, b) -> None:
  assert a.findings == b.findings and a.unfinished == b.unfinished
  assert a.ok == b.ok and str(a) == str(b)
  assert (a.outputs is None) == (b.outputs is None)
  for x, y in zip(a.outputs or (), b.outputs or ()):
    assert x.dtype == y.dtype and x.shape == y.shape
    np.testing.assert_array_equal(x, y)


@pytest.mark.long
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked on Linux only")
@pytest.mark.parametrize("delay_release", [1, 0], ids=["right", "slot refilled early"])
def test_check_in_workers_reports_what_one_process_reports(delay_release):
  """upstream's realistic pipelined matmul on a 2x2 grid of one-CTA clusters; without
  its delay_release, a finding in each cluster."""
  fn, args = tma_kernels.realistic_matmul(delay_release)
  one = mas_check.check(fn, *args, schedules=2, jobs=1)   # (8 runs: 4 clusters, 2 seeds)
  many = mas_check.check(fn, *args, schedules=2, jobs=2)
  _same(one, many)
  assert one.ok == bool(delay_release) and (one.outputs is not None) == one.ok
  assert bool(one.findings) != bool(delay_release)


def test_the_same_kernel_is_lowered_once(monkeypatch):
  fn, args = tma_kernels.pipelined_add()
  afresh, lowered = check_kernel._lowered_afresh, []

  def counted(*a):
    lowered.append(a[2:])
    return afresh(*a)
  monkeypatch.setattr(check_kernel, "_lowered_afresh", counted)
  first = mas_check.check(fn, *args, schedules=1, jobs=1)
  again = mas_check.check(fn, *[np.array(a) for a in args], schedules=1, jobs=1)
  assert len(lowered) == 1
  _same(first, again)
  assert first.ok and np.array_equal(first.outputs[0], args[0] + args[1])
  mas_check.check(fn, *args, schedules=1, jobs=1, arch="sm_90a")   # (another key)
  assert len(lowered) == 2
  check_kernel.forget_lowerings()
  mas_check.check(fn, *args, schedules=1, jobs=1)
  assert len(lowered) == 3


def _closure(value):
  def kernel(x):
    return x, value
  return kernel


def _with(x, *, block):
  return x, block


def test_the_key_holds_closure_partial_shapes_and_target():
  x = np.zeros((4, 8), np.float32)
  key = lambda fn, *arrays, arch=None: lowering_key(fn, arrays or (x,), arch, None, None)
  fn = _closure((64, 128))
  assert key(fn) == key(fn) and key(fn) is not None
  assert key(fn) != key(_closure((64, 128)))                       # another function object
  assert key(functools.partial(_with, block=2)) == key(functools.partial(_with, block=2))
  assert key(functools.partial(_with, block=2)) != key(functools.partial(_with, block=2.0))
  assert key(fn) != key(fn, np.zeros((4, 8), np.float16))          # dtype
  assert key(fn) != key(fn, np.zeros((8, 4), np.float32))          # shape
  assert key(fn) != key(fn, arch="sm_100a")
  assert key(_closure([64, 128])) is None                          # a list: no key
  assert key(functools.partial(_with, block=np.zeros(2))) is None  # an array: no key
  assert lowering_key(fn, [[1, 2]], None, None, None) is None      # not an array
