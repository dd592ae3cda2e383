"""The tcgen05 calibration set (test/harness/upstream_tcgen05_kernels.py): upstream's
hardware-tested Blackwell kernels (TMEM allocation, stores and loads, tcgen05.mma of
kinds f16 / i8 / f8f6f4, commits, barriers that order the tensor core).

On jax >= 0.12 each entry must lower for sm_100a (``check`` picks it: the kernels use
tcgen05) and emit the forms its ``exercises`` names; ``check`` (one schedule) must then
pass it leaving the values upstream's test asserts, or report exactly the rules
``finding`` names (a kernel jax 0.12.1 lowers without an ordering the ISA asks for), or
refuse the instruction ``refused`` names (an expected failure: what the checker does not
run yet).  For a ``fenced`` entry, the same check of its PTX with the missing fences
added (``upstream.fenced``) must pass with the test's values: the values the checker
computes are calibrated even where jax's PTX breaks the ISA's letter.

jax 0.10 and 0.11 spell the Blackwell Pallas API differently: every entry is skipped
there.  Cost: 42 checks of one schedule, about a second each (some 50-60 s in all).
"""

import contextlib
import functools
import re
from unittest import mock

import numpy as np
import pytest

import upstream_tcgen05_kernels as upstream
from mosaic_async_store import compat
from mosaic_async_store.check import check
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.tools import check_kernel

JAX = compat.jax_version()


def _skip(entry):
  if JAX[:2] < entry.since:
    return pytest.mark.skip(reason=f"{entry.test} needs jax >= "
                            f"{'.'.join(map(str, entry.since))} (its Blackwell API)")
  return None


def _params(entries, refusals_fail=False):
  params = []
  for e in entries:
    marks = [m for m in (_skip(e),) if m is not None]
    if refusals_fail and e.refused and not marks:
      marks.append(pytest.mark.xfail(strict=True, raises=AsyncStoreError,
                                     reason=f"checker gap: {e.why}"))
    params.append(pytest.param(e, id=e.name, marks=marks))
  return params


_LOWERED = {}   # (entry name, arch) -> check_kernel._lower's (MLIR, PTX), this session


@contextlib.contextmanager
def _lowering(name, seen: list, patch=None):
  """``check``'s lowering of entry ``name``, made once per arch and session, with each
  PTX it gives ``check`` appended to ``seen`` (after ``patch``, where given)."""
  lower = check_kernel._lower

  def recorded(fn, specs, arch="sm_90a"):
    if (name, arch) not in _LOWERED:
      _LOWERED[name, arch] = lower(fn, specs, arch)
    mlir, ptx = _LOWERED[name, arch]
    if patch is not None and "tcgen05.dealloc" in ptx:
      ptx = patch(ptx)
    seen.append(ptx)
    return mlir, ptx
  with mock.patch.object(check_kernel, "_lower", recorded):
    yield


@functools.cache
def made(name):
  """(fn, args, expected) of an entry, made once per session."""
  return upstream.BY_NAME[name].make()


@functools.cache
def checked(name, fenced=False):
  """(report or the AsyncStoreError ``check`` raised, the PTX it checked) of an entry,
  with one schedule; ``fenced``: of its PTX with the fences added (for sm_100a, which
  the unfenced check chose)."""
  fn, args, _ = made(name)
  seen = []
  with _lowering(name, seen, upstream.fenced if fenced else None):
    try:
      result = check(fn, *args, schedules=1, arch="sm_100a" if fenced else None)
    except AsyncStoreError as e:
      result = e
  return result, (seen[-1] if seen else None)


def _report(name, fenced=False):
  result, _ = checked(name, fenced)
  if isinstance(result, Exception):
    raise result
  return result


def _compare(entry, report):
  _, _, expected = made(entry.name)
  assert report.outputs is not None and len(report.outputs) == len(expected)
  for got, want in zip(report.outputs, expected):
    assert np.shape(got) == want.shape
    if entry.rtol or entry.atol:
      np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                                 rtol=entry.rtol, atol=entry.atol)
    else:
      np.testing.assert_array_equal(np.asarray(got), want)


def test_registry_covers_fifteen_upstream_tests():
  names = [e.name for e in upstream.KERNELS]
  assert len(names) >= 15 and len(set(names)) == len(names)
  assert len({e.test for e in upstream.KERNELS}) >= 15
  for e in upstream.KERNELS:
    assert re.fullmatch(r"tests/(pallas/mosaic_gpu|mosaic/gpu)_test\.py::\w+Test::test_\w+",
                        e.test), e
    assert all(f in upstream.FORMS.values() for f in e.exercises), e.name
    assert not (e.finding and e.refused), e.name
    assert e.why or not (e.finding or e.refused), e.name
  assert {f for e in upstream.KERNELS for f in e.exercises} == set(upstream.FORMS.values())


@pytest.mark.parametrize("entry", _params(upstream.KERNELS))
def test_ptx_has_the_forms_it_exercises(entry):
  _, ptx = checked(entry.name)
  assert ptx is not None and ".target sm_100a" in ptx
  missing = [f for f in entry.exercises if not re.search(f, ptx)]
  assert not missing, f"{entry.name}: no {missing} in its PTX"


@pytest.mark.parametrize("entry", _params(upstream.KERNELS, refusals_fail=True))
def test_checked_as_built(entry):
  """Upstream's kernel as jax lowers it: the test's values, or ``entry.finding``'s
  rules (errors; warnings are not counted), or the refusal ``entry.refused`` names (an
  expected failure until the checker runs it)."""
  try:
    report = _report(entry.name)
  except AsyncStoreError as e:
    assert entry.refused and entry.refused in str(e), str(e)
    raise
  if entry.finding:
    errors = {f.rule for f in report.findings if f.severity == "error"}
    assert errors == set(entry.finding), str(report)
    return
  assert report.ok, str(report)
  _compare(entry, report)


@pytest.mark.parametrize("entry", _params([e for e in upstream.KERNELS if e.fenced]))
def test_checked_with_the_fences_it_lacks(entry):
  """The same kernel's PTX with the fences the ISA asks for added: the test's values,
  and no tcgen05-fence-sync warning left (the fences are what it asks for)."""
  report = _report(entry.name, fenced=True)
  assert report.ok, str(report)
  assert "tcgen05-fence-sync" not in {f.rule for f in report.warnings}, str(report)
  _compare(entry, report)
