"""``check.checking()`` and the pytest plugin: a test suite written for a GPU
(gpu_suite/gpu_suite_kernels.py) runs unchanged on the CPU under ``--mgpu-check``, its
own assertions on the checker's outputs (a user's TMA kernel eagerly and under jit, a
``pl.pallas_call`` eagerly and under jit, a WGMMA ``pl.pallas_call``, upstream's
``hopper_matmul_mgpu.matmul`` and ``attention_mgpu``); the broken kernel's test fails
with the finding."""

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

_SUITE = pathlib.Path(__file__).parent / "gpu_suite" / "gpu_suite_kernels.py"


def _plugin_args() -> list[str]:
  """The plugin by its entry point where the installed package has it (an install made
  before it existed lacks it: then by its module)."""
  import importlib.metadata
  if any(e.name == "mgpu_check" for e in importlib.metadata.entry_points(group="pytest11")):
    return []
  return ["-p", "mosaic_async_store.tools.pytest_plugin"]


def _check_cache_args(env) -> list[str]:
  """The check cache of .ci/run's stages (test/harness/check_cache.py) for the subprocess,
  where this test's own launches use it: a later stage then runs the checker only over
  the kernels its jax lowered to new PTX (test/harness/check_cache_plugin.py)."""
  import check_cache
  if not check_cache.active():
    return []
  harness = str(pathlib.Path(__file__).parents[1] / "harness")
  env["PYTHONPATH"] = os.pathsep.join(p for p in (harness, env.get("PYTHONPATH")) if p)
  return ["-p", "check_cache_plugin"]


def _pytest(tmp_path, *args):
  shutil.copy(_SUITE, tmp_path / "test_gpu_suite.py")
  (tmp_path / "pytest.ini").write_text("[pytest]\n")
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         *_plugin_args(), *_check_cache_args(env), *args, "test_gpu_suite.py"],
                        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)


def _line(marker: str) -> int:
  return next(i for i, line in enumerate(_SUITE.read_text().splitlines(), 1)
              if marker in line)


@pytest.mark.long
def test_gpu_suite_runs_unchanged_under_mgpu_check(tmp_path):
  pytest.importorskip("jax")
  result = _pytest(tmp_path, "--mgpu-check")
  out = result.stdout + result.stderr
  assert re.search(r"\b1 failed, 8 passed\b", out), out[-6000:]
  failed = re.findall(r"FAILED test_gpu_suite\.py::(\w+)", out)
  assert failed == ["test_broken_kernel"], out[-6000:]
  # the failure names the kernel, the rule and the user's line
  assert "broke proxy-fence" in out and "kernel body" in out, out[-6000:]
  assert f"test_gpu_suite.py:{_line('BROKEN-LINE')}" in out, out[-6000:]
  summary = out[out.index("mgpu-check: kernels checked"):]
  assert summary.count("kernel body") >= 4 and "schedules [0, 1, 2]" in summary, summary
  assert "9 kernel call(s) checked, 1 with findings" in summary, summary
  assert "[proxy-fence]" in summary, summary


@pytest.mark.long
def test_without_the_mode_the_kernels_do_not_run_on_a_cpu(tmp_path):
  """The suite needs the mode: on a CPU jax refuses the kernels (so the passes above are
  the checker's outputs, not jax's)."""
  pytest.importorskip("jax")
  result = _pytest(tmp_path, "-k", "tma_kernel_eager")
  assert re.search(r"\b1 failed\b", result.stdout), result.stdout[-4000:]
  assert "Only interpret mode is supported on CPU" in result.stdout, result.stdout[-4000:]


def _suite():
  spec = importlib.util.spec_from_file_location("gpu_suite_kernels", _SUITE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_findings_collected_for_inspection():
  """With ``raise_findings=False`` the findings are collected; a kernel whose finding
  ended every schedule (proxy-fence stops the run) has no outputs and raises still."""
  pytest.importorskip("jax")
  import jax
  import numpy as np
  from mosaic_async_store.check import checking
  suite = _suite()
  x = suite._x()
  with checking(schedules=2, raise_findings=False) as mode:
    good = suite.round_trip()(x)
    with pytest.raises(Exception, match="broke proxy-fence") as raised:
      jax.jit(suite.round_trip(commit=False))(x).block_until_ready()
  assert "kernel body" in str(raised.value)
  assert [k.name for k in mode.kernels] == ["body", "body"]
  assert [k.ok for k in mode.kernels] == [True, False]
  assert [(f.rule, f.schedule) for f in mode.findings] == [("proxy-fence", 0),
                                                           ("proxy-fence", 1)]
  assert all(f.source.endswith(f"gpu_suite_kernels.py:{_line('BROKEN-LINE')}")
             for f in mode.findings), mode.findings
  np.testing.assert_array_equal(np.asarray(good), x + np.float16(1))


def test_refusal_names_what_the_checker_cannot_run():
  pytest.importorskip("jax")
  import jax
  import jax.numpy as jnp
  from jax.experimental import pallas as pl
  from jax.experimental.pallas import mosaic_gpu as plgpu
  from mosaic_async_store.check import checking
  from mosaic_async_store.errors import AsyncStoreError

  def body(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1

  def aliased(x):
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          input_output_aliases={0: 0},
                          compiler_params=plgpu.CompilerParams())(x)

  with checking(), pytest.raises(AsyncStoreError, match="input_output_aliases"):
    jax.jit(aliased)(jnp.zeros((64, 128), jnp.float16))


def test_check_and_plugin_import_no_jax():
  code = ("import sys, mosaic_async_store.check, mosaic_async_store.tools.pytest_plugin;"
          "assert 'jax' not in sys.modules, 'jax imported'")
  subprocess.run([sys.executable, "-c", code], check=True)
