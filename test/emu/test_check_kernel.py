"""``mosaic_async_store.check.check(fn, *args)`` on Pallas kernels given only the kernel
and NumPy arrays: the two-CTA "each CTA reduces its tile into CTA 0" kernel of
test/harness/pallas_run.py, correct and with its cluster barrier left out."""

import numpy as np
import pytest

import pallas_run
from mosaic_async_store import check as mas_check
from mosaic_async_store.errors import AsyncStoreError

CTA0 = pallas_run.PallasCase("int32", "lane", atomic="add", shape=(64, 64), cta0=True)


def _kernel_and_inputs(case):
  kernel, _ = pallas_run.roundtrip_kernel(case)
  return kernel, pallas_run.make_inputs(case)


@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
def test_a_users_reduction_into_cta0_checks_clean(semantics):
  import dataclasses
  case = dataclasses.replace(CTA0, semantics=semantics)
  kernel, (x, init) = _kernel_and_inputs(case)
  report = mas_check.check(kernel, x, init)
  assert report.ok, str(report)
  [out] = report.outputs
  assert np.array_equal(out, pallas_run.expected(case, x, init))


def test_the_missing_cluster_barrier_is_found_in_every_schedule(monkeypatch):
  monkeypatch.setattr(pallas_run, "_cluster_sync", lambda: None)
  kernel, (x, init) = _kernel_and_inputs(CTA0)
  report = mas_check.check(kernel, x, init)
  assert {f.schedule for f in report.findings} == {0, 1, 2}   # (one or more each)
  assert all(f.rule in ("race", "early-read") and f.ptx_line for f in report.findings)


def test_an_input_too_small_for_the_kernel_is_a_fault():
  """The kernel reads x[1]; with x of one tile it reads past the buffer (on hardware:
  an illegal address), in every schedule."""
  kernel, (x, init) = _kernel_and_inputs(CTA0)
  report = mas_check.check(kernel, x[:1], init)
  assert [f.rule for f in report.findings] == ["fault"] * 3
  assert "out of bounds" in report.findings[0].message


def test_arguments_the_kernel_does_not_take_are_refused():
  kernel, (x, init) = _kernel_and_inputs(CTA0)
  with pytest.raises(AsyncStoreError, match="args="):
    mas_check.check(kernel, x)                 # one input missing
  with pytest.raises(TypeError, match=r"args\[1\]="):
    mas_check.check(kernel, x, [1, 2])
  with pytest.raises(AsyncStoreError, match="fn="):
    mas_check.check(lambda a, b: a + b, x, init)


def _example(name):
  import importlib.util
  import pathlib
  path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "examples" / name
  spec = importlib.util.spec_from_file_location(path.stem, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize("name, rules", [
    ("make", None), ("no_cluster_barrier", {"race", "early-read"}),
    ("wrong_arrival_count", {"early-read", "arrival-overflow", "race",
                             "phase-overrun", "exit"})])
def test_the_documented_examples_say_what_the_page_shows(name, rules):
  """docs/check-your-kernel.md's kernel and mistakes 1 and 3, as the page shows them."""
  kernel, inputs = getattr(_example("reduce_into_cta0.py"), name)()
  report = mas_check.check(kernel, *inputs)
  if rules is None:
    assert report.ok, str(report)
    assert np.array_equal(report.outputs[0], inputs[0].sum(axis=0))
  else:
    # (several findings a schedule: the run goes on after a race; findings.py)
    assert {f.schedule for f in report.findings} == {0, 1, 2}
    assert {f.rule for f in report.findings} <= rules


@pytest.mark.long
def test_the_documented_cta_wait_example_is_a_race(capsys):
  _example("cta_scoped_wait.py")   # runs on import, as `python docs/examples/...` does
  out = capsys.readouterr().out
  count = int(out.split(" finding(s)")[0])
  assert count >= 3 and out.count("[race]") >= 3 and "schedules [0, 1, 2]" in out
  assert "not morally strong" in out


def test_an_opcode_the_checker_does_not_run_is_refused_in_fn_terms(monkeypatch):
  """The kernel's PTX is parsed once (check_kernel keeps the PtxKernel it parses for
  the runs); an opcode the checker does not run is refused before anything runs, naming
  ``fn`` and the opcode."""
  from mosaic_async_store.tools import check_kernel
  lower = check_kernel._lower

  def with_unmodelled(fn, specs, *arch):
    mlir, ptx = lower(fn, specs, *arch)
    return mlir, ptx.replace("ret;", "brkpt;\n\tret;", 1)
  monkeypatch.setattr(check_kernel, "_lower", with_unmodelled)
  kernel, (x, init) = _kernel_and_inputs(CTA0)
  with pytest.raises(AsyncStoreError, match=r"fn=.*a kernel whose PTX has.*brkpt"):
    mas_check.check(kernel, x, init)


@pytest.mark.parametrize("case", pallas_run.TENSOR_CORE_CASES[:2], ids=lambda c: c.describe())
def test_tensor_core_stores_check_on_blackwell_by_default(case):
  """A store whose barrier orders the tensor core (tcgen05 fences, Blackwell only):
  ``check`` takes the kernel's own arch (sm_100a) and runs it with the right bytes;
  sm_90a given explicitly is refused naming ``arch``."""
  kernel, (x, init) = _kernel_and_inputs(case)
  report = mas_check.check(kernel, x, init)
  assert report.ok, str(report)
  [out] = report.outputs
  assert np.array_equal(out, pallas_run.expected(case, x, init))
  with pytest.raises(AsyncStoreError, match=r"arch=sm_90a is not supported.*sm_100a or sm_103a.*tcgen05"):
    mas_check.check(kernel, x, init, arch="sm_90a")
