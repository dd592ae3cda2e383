"""``mgpu.as_gpu_kernel`` kernels through the public API: ``check(fn, *args)`` and the
CLI's ``compile`` / ``check FILE.py:FUNCTION``, outputs compared with NumPy.  The kernels:
a plain copy, a TMA copy, and docs/examples/mosaic_peer_copy.py (two CTAs swapping tiles
with ``mas.async_store``; docs/api.md shows it, the same code), correct and without its
wait."""

import pathlib
import re

import jax
import numpy as np
import pytest
from jax.experimental.mosaic import gpu as mgpu
from jax.interpreters import mlir
from jaxlib.mlir import ir

import mosaic_async_store as mas
from mosaic_async_store import compat
from mosaic_async_store.check import check
from mosaic_async_store.tools import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "mosaic_peer_copy.py"


def _example():
  import importlib.util
  spec = importlib.util.spec_from_file_location(EXAMPLE.stem, EXAMPLE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _plain_copy_body(ctx, x, y, smem):
  del ctx, smem
  mgpu.FragmentedArray.load_strided(x).store_untiled(y)


def _tma_copy_body(ctx, x, y, scratch):
  smem, barrier = scratch
  ctx.async_copy(src_ref=x, dst_ref=smem, barrier=barrier[0])   # GMEM -> SMEM, on the barrier
  barrier[0].wait()
  ctx.async_copy(src_ref=smem, dst_ref=y)                         # SMEM -> GMEM
  ctx.await_async_copy(0)


def _copy_kernel(kind: str, x: np.ndarray):
  spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
  body, scratch = {"plain": (_plain_copy_body, ()),
                   "tma": (_tma_copy_body, (spec, mgpu.Barrier(arrival_count=1)))}[kind]
  with mlir.make_ir_context(), ir.Location.unknown():
    return mgpu.as_gpu_kernel(body, (1, 1, 1), (128, 1, 1), spec, spec, scratch)


_INPUTS = {"plain": np.arange(128 * 8, dtype=np.float32).reshape(128, 8),
           "tma": (np.arange(64 * 128) % 251).astype(np.float16).reshape(64, 128)}


@pytest.mark.parametrize("kind", ["plain", "tma"])
def test_a_copy_kernel_checks_clean_and_copies(kind):
  x = _INPUTS[kind]
  report = check(_copy_kernel(kind, x), x)
  assert report.ok, str(report)
  [out] = report.outputs
  assert out.dtype == x.dtype and np.array_equal(out, x)


def test_arrays_the_kernel_does_not_take_are_refused_naming_args():
  from mosaic_async_store.errors import AsyncStoreError
  x = _INPUTS["plain"]
  kernel = _copy_kernel("plain", x)
  with pytest.raises(AsyncStoreError, match=r"^args=\['float32\[64, 8\]'\] .*expected "
                     r"\(128, 8\), got \(64, 8\)"):
    check(kernel, x[:64])
  with pytest.raises(AsyncStoreError, match=r"^args=\[\] .*Invalid argument structure"):
    check(kernel)


def test_the_documented_peer_copy_swaps_the_tiles():
  kernel, (x,) = _example().make()
  report = check(kernel, x)
  assert report.ok, str(report)
  np.testing.assert_array_equal(report.outputs[0], x[::-1])   # out[c] == x[1 - c]


def test_the_documented_example_runs_as_a_script(capsys):
  """``python docs/examples/mosaic_peer_copy.py``, as docs/api.md says: it checks the
  kernel (asserting the swapped tiles), compiles it and prints what the page says."""
  import runpy
  runpy.run_path(str(EXAMPLE), run_name="__main__")
  report, stats = capsys.readouterr().out.splitlines()
  assert report == "ok: no rule broken in schedules [0, 1, 2]"
  assert "'st.async': 32" in stats and "'mbarrier wait': 1" in stats, stats


def test_the_peer_copy_without_its_wait_is_found(monkeypatch):
  """Each CTA reads its SMEM before the peer's st.async has landed, and exits while the
  peer may still store into it: found in every schedule."""
  monkeypatch.setattr(mas, "wait", lambda barrier: None)
  kernel, (x,) = _example().make()
  report = check(kernel, x)
  for schedule in (0, 1, 2):
    rules = {f.rule for f in report.findings if f.schedule == schedule}
    assert {"early-read", "exit"} <= rules <= {"early-read", "race", "exit"}, rules
  # an as_gpu_kernel built under ir.Location.unknown() carries no Python lines
  assert {f.source for f in report.findings} == {None}


def test_the_lowering_rules_are_restored():
  """The capture wraps upstream's Mosaic GPU lowering rule on both routes (Pallas' call
  by name, the rule registered for as_gpu_kernel's primitive) only while it lowers, and
  restores both after a lowering that raised."""
  from mosaic_async_store.tools import pallas_capture
  rules = compat.mosaic_gpu_lowering_rules()
  assert None not in rules
  x = _INPUTS["plain"]
  spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
  seen = []
  with compat.mosaic_gpu_lowering_observed(seen.append):
    assert compat.mosaic_gpu_lowering_rules()[1] is not rules[1]
  [module] = pallas_capture.lower_pallas_to_mosaic_modules(_copy_kernel("plain", x), spec)
  assert "gpu.launch" in str(module) and seen == []
  with pytest.raises(ZeroDivisionError):
    pallas_capture.lower_pallas_to_mosaic_modules(lambda a: 1 / 0, spec)
  assert compat.mosaic_gpu_lowering_rules() == rules


# The command line: FILE.py:FUNCTION with FUNCTION() -> (kernel, arrays).
_KERNEL_FILE = """
import test_mosaic_kernels as t   # (test/emu is on the tests' path)

def plain():
  return t._copy_kernel("plain", t._INPUTS["plain"]), (t._INPUTS["plain"],)

def tma():
  return t._copy_kernel("tma", t._INPUTS["tma"]), (t._INPUTS["tma"],)
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
  path = tmp_path_factory.mktemp("kernels") / "as_gpu_kernels.py"
  path.write_text(_KERNEL_FILE)
  return path


def _cli(argv, capsys) -> tuple[int, str]:
  status = cli.main(argv)
  captured = capsys.readouterr()
  return status, captured.out + captured.err


@pytest.mark.parametrize("kind, opcode", [("plain", "st.global"),
                                          ("tma", "cp.async.bulk.tensor")])
def test_the_cli_compiles_and_checks_a_copy_kernel(kernels, kind, opcode, capsys):
  status, ptx = _cli(["compile", f"{kernels}:{kind}", "--emit", "ptx"], capsys)
  assert status == 0, ptx
  assert ".entry" in ptx and opcode in ptx
  status, out = _cli(["check", f"{kernels}:{kind}"], capsys)
  assert (status, out.strip()) == (0, f"{kernels}:{kind}: ok: no rule broken in schedules"
                                       " [0, 1, 2]")


def test_the_cli_compiles_and_checks_the_documented_example(capsys):
  target = f"{EXAMPLE}:make"
  status, out = _cli(["compile", target, "--emit", "stats"], capsys)
  assert status == 0, out
  assert re.search(r"^st\.async\s+32$", out, re.M), out   # 64x128 f32 / 128 threads, 8 B each
  assert _cli(["check", target], capsys)[0] == 0


def test_the_cli_check_reports_the_missing_wait(monkeypatch, capsys):
  monkeypatch.setattr(mas, "wait", lambda barrier: None)
  status, out = _cli(["check", f"{EXAMPLE}:make"], capsys)
  assert status == 1, out
  assert "finding(s) in schedules [0, 1, 2]" in out and "[early-read]" in out


def _fenced_python_after(marker: str, page: str) -> str:
  """The ```python block that follows ``marker`` on ``page``."""
  start = page.index(marker)
  m = re.compile(r"```python\n(.*?)```", re.S).search(page, start)
  assert m is not None, f"no python block after {marker!r}"
  return m.group(1)


def test_api_md_shows_the_example_file_as_it_is():
  """docs/api.md's Mosaic-level example is docs/examples/mosaic_peer_copy.py, verbatim:
  the tests above run the page's code."""
  page = (ROOT / "docs" / "api.md").read_text()
  shown = _fenced_python_after("<!-- example: docs/examples/mosaic_peer_copy.py -->", page)
  assert shown == EXAMPLE.read_text()
