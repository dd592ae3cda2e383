"""Runs the lit + FileCheck suites (test/lit) from pytest, so pytest is the one entry point.

One pytest case per lit file (so that pytest-xdist spreads them over the cores); a
failing lit test fails its case, with lit's report in the message.
"""

import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent
LIT_FILES = sorted(p.name for p in (HERE / "lit").glob("*.py") if p.name != "lit.cfg.py")


def _lit() -> str:
  return str(pathlib.Path(sys.executable).with_name("lit"))


def test_the_lit_suite_has_files():
  assert len(LIT_FILES) >= 8, LIT_FILES


@pytest.mark.parametrize("name", LIT_FILES)
def test_lit_file(name):
  env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.run([_lit(), "-v", str(HERE / "lit" / name)], capture_output=True,
                        text=True, env=env, timeout=1200)
  assert proc.returncode == 0, proc.stdout[-20000:] + proc.stderr[-5000:]
  assert "Passed" in proc.stdout, proc.stdout
