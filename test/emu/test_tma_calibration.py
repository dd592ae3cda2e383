"""The TMA calibration set (test/harness/upstream_tma_kernels.py): upstream's
hardware-tested TMA, bulk-group, multicast, pipeline and warp-specialised kernels.

On every supported jax each entry must lower and compile to PTX on the CPU (for sm_90a,
with the device queries answered for an H100), launch the grid, cluster and block
upstream's test launches, emit every TMA / bulk form its ``exercises`` names, and
declare outputs of the shapes and dtypes of the values upstream's test asserts; and
``check`` must pass each one leaving exactly those values, or, where upstream's test
kernel breaks a rule of the ISA (``UpstreamTma.finding``), report that rule in every
schedule.
"""

import functools
import re

import numpy as np
import pytest

import upstream_tma_kernels as upstream
from mosaic_async_store import compat
from mosaic_async_store.check import check
from mosaic_async_store.check.memory import SCHEDULES   # CI's 3, or the slow mode's 24
from mosaic_async_store.tools import check_kernel
from mosaic_async_store.tools.device_target import device_target
from mosaic_async_store.tools.user_kernel import kernel_specs

JAX = compat.jax_version()


def _param(entry):
  marks = ()
  if JAX[:2] < entry.since:
    marks = pytest.mark.skip(reason=f"{entry.test} needs jax >= "
                             f"{'.'.join(map(str, entry.since))} (its API)")
  return pytest.param(entry, id=entry.name, marks=marks)


entries = pytest.mark.parametrize("entry", [_param(e) for e in upstream.KERNELS])


@functools.cache
def made(name):
  """(fn, args, expected) of an entry, made once per session."""
  return upstream.BY_NAME[name].make()


@functools.cache
def lowered(name):
  """(MLIR, PTX, output specs) of an entry, lowered once per session."""
  fn, args, _ = made(name)
  with compat.answer_device_queries(device_target("sm_90a")):
    specs, outs = kernel_specs(fn, args)
    mlir, ptx = check_kernel._lower(fn, specs)
  return mlir, ptx, outs


def test_registry_covers_thirty_upstream_tests():
  names = [e.name for e in upstream.KERNELS]
  assert len(names) >= 30 and len(set(names)) == len(names)
  assert len({e.test for e in upstream.KERNELS}) >= 30
  for e in upstream.KERNELS:
    assert re.fullmatch(r"tests/pallas/mosaic_gpu_test\.py::\w+Test::test_\w+", e.test), e
    assert e.exercises and all(f in upstream.FORMS.values() for f in e.exercises), e.name
  forms = {f for e in upstream.KERNELS for f in e.exercises}
  assert forms == set(upstream.FORMS.values()), "a form no entry exercises"


@entries
def test_ptx_has_the_forms_it_exercises(entry):
  _, ptx, _ = lowered(entry.name)
  missing = [f for f in entry.exercises if not re.search(f, ptx)]
  assert not missing, f"{entry.name}: no {missing} in its PTX"


@entries
def test_launch_is_upstreams(entry):
  mlir, _, _ = lowered(entry.name)
  shape = check_kernel.launch_shape(mlir)
  assert (shape["grid"], shape["cluster"], shape["block"]) == (
      entry.grid, entry.cluster, (entry.threads, 1, 1))


@entries
def test_expected_values_fit_the_outputs(entry):
  _, args, expected = made(entry.name)
  _, _, outs = lowered(entry.name)
  assert all(isinstance(a, np.ndarray) for a in args)
  assert [(tuple(o.shape), np.dtype(o.dtype)) for o in outs] == [
      (w.shape, w.dtype) for w in expected]
  for want in expected:   # a test asserts something of every output
    assert np.ma.count(want) > 0


def _compare(got, want, rtol):
  """``got`` against the values upstream asserts (the unmasked ones), as it compares."""
  mask = np.ma.getmaskarray(want)
  got, want = np.asarray(got)[~mask], np.ma.getdata(want)[~mask]
  if rtol:
    np.testing.assert_allclose(got, want, rtol=rtol)
  else:
    np.testing.assert_array_equal(got, want)


@entries
def test_checked_with_expected_values(entry):
  """Each entry through ``check`` in every CI schedule: upstream's expected values, or,
  for a test kernel that breaks a rule (``entry.finding``), that rule reported in every
  schedule and no other (grids and clusters of two and three dimensions among them);
  either way its warnings exactly ``entry.warnings``."""
  fn, args, expected = made(entry.name)
  report = check(fn, *args, schedules=len(SCHEDULES))
  assert {f.rule for f in report.warnings} == set(entry.warnings), str(report)
  if entry.finding and JAX[:2] >= entry.finding_since:
    assert {f.schedule for f in report.errors} == set(range(len(SCHEDULES))), str(report)
    assert {f.rule for f in report.errors} <= set(entry.finding), str(report)
    return
  assert report.ok, str(report)
  assert report.outputs is not None and len(report.outputs) == len(expected)
  for got, want in zip(report.outputs, expected):
    _compare(got, want, entry.rtol)
