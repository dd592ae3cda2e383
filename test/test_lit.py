"""Runs the lit + FileCheck suites (test/lit) from pytest, so pytest is the one entry point.

A failing lit test fails this test, with lit's report in the message.
"""

import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent
SUITES = sorted(p.name for p in HERE.iterdir()
                if p.is_dir() and p.name == "lit" and any(p.glob("*.py")))


def _lit() -> str:
  return str(pathlib.Path(sys.executable).with_name("lit"))


@pytest.mark.parametrize("suite", SUITES)
def test_lit_suite(suite):
  env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.run([_lit(), "-v", str(HERE / suite)], capture_output=True,
                        text=True, env=env, timeout=1200)
  assert proc.returncode == 0, proc.stdout[-20000:] + proc.stderr[-5000:]
  assert "Passed" in proc.stdout, proc.stdout
