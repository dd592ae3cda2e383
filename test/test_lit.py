"""Runs the lit + FileCheck suites (test/lit) from pytest, so pytest is the one entry point.

One pytest case per lit file (so that pytest-xdist spreads them over the cores); a
failing lit test fails its case, with lit's report in the message.  The RUN lines'
Python (test/harness/lit_python.py) shares the session's cache of tool results
(``MAS_TEST_TOOL_CACHE``, test/conftest.py), so a kernel lowered as before is not
compiled again (a jax version that lowers it anew compiles it anew).  A lit file whose
tools are missing (its ``REQUIRES:`` features, which test/lit/lit.cfg.py sets from
``toolchain.find_tool``) is UNSUPPORTED in lit and skipped here, with lit's note
naming the tools.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent
LIT_FILES = sorted(p.name for p in (HERE / "lit").glob("*.py") if p.name != "lit.cfg.py")
# Every lit file's PTX lines compile with toolchain.compile_module (mlir-opt, ptxas,
# cuobjdump) and every RUN line pipes into FileCheck.
TOOLS = {"filecheck", "mlir-opt", "ptxas", "cuobjdump"}


def _lit() -> str:
  return str(pathlib.Path(sys.executable).with_name("lit"))


def _run_lit(name: str, **env) -> subprocess.CompletedProcess:
  env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3", **env)
  return subprocess.run([_lit(), "-v", str(HERE / "lit" / name)], capture_output=True,
                        text=True, env=env, timeout=1200)


def _requires(name: str) -> set[str]:
  """The features a lit file's ``REQUIRES:`` lines name."""
  text = (HERE / "lit" / name).read_text()
  return {f.strip() for line in re.findall(r"^# REQUIRES:(.*)$", text, re.M)
          for f in line.split(",")}


def test_the_lit_suite_has_files():
  assert len(LIT_FILES) >= 8, LIT_FILES


@pytest.mark.parametrize("name", LIT_FILES)
def test_lit_file_requires_its_tools(name):
  assert _requires(name) == TOOLS, name


@pytest.mark.long
@pytest.mark.parametrize("name", LIT_FILES)
def test_lit_file(name):
  proc = _run_lit(name)
  if proc.returncode == 0 and "UNSUPPORTED:" in proc.stdout:
    pytest.skip(f"lit: {name} is UNSUPPORTED here: {proc.stderr.strip()[-500:]}")
  assert proc.returncode == 0, proc.stdout[-20000:] + proc.stderr[-5000:]
  assert "Passed" in proc.stdout, proc.stdout


def test_a_missing_tool_makes_a_file_unsupported_not_failed(tmp_path):
  """With ptxas pointed at nothing (``MAS_PTXAS``, which find_tool checks first), the
  file is UNSUPPORTED, lit exits 0, and its note names the missing tool; nothing
  of the file runs."""
  proc = _run_lit("red.py", MAS_PTXAS=str(tmp_path / "no-ptxas"))
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert re.search(r"^UNSUPPORTED: mosaic-async-store :: red\.py", proc.stdout, re.M), proc.stdout
  assert "FAIL" not in proc.stdout
  assert "['ptxas']" in proc.stderr, proc.stderr


def test_lit_python_runs_a_script_or_a_module_as_python_does(tmp_path):
  """``python -m lit_python SCRIPT ARGS`` (lit.cfg.py's ``%PYTHON``) sees the argv and
  the import path that ``python SCRIPT ARGS`` would; ``-m MODULE ARGS`` likewise, and
  with a cache named the tools' runners are the cached ones."""
  script = tmp_path / "show.py"
  script.write_text("import sys\nfrom mosaic_async_store.tools import toolchain\n"
                    "print(sys.argv, sys.path[0], hasattr(toolchain.ptx_to_cubin, '__wrapped__'))\n")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [str(HERE / "harness"), os.environ.get("PYTHONPATH", "")]))
  for cache, cached in ((str(tmp_path / "cache"), True), ("0", False)):
    env["MAS_TEST_TOOL_CACHE"] = cache
    out = subprocess.run([sys.executable, "-m", "lit_python", str(script), "ir", "x"],
                         capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == [f"[{str(script)!r},", "'ir',", "'x']", str(tmp_path), str(cached)]
  out = subprocess.run([sys.executable, "-m", "lit_python", "-m", "json.tool", "--help"],
                       capture_output=True, text=True, env=env)
  assert out.returncode == 0 and "json.tool" in out.stdout, out.stdout + out.stderr
