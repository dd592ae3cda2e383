"""Every public surface refuses bad input loudly, early and helpfully.

The invalid inputs are the table in ``error_cases.py`` (also the source of
docs/errors.md): plan_store cases run here; async_store, Pallas, toolchain and
CLI cases build IR or run tools, so they run in two subprocesses (one JSON line
per case) and a crash fails the cases it took down instead of this run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
import error_cases as ec  # beside this file

ROOT = HERE.parents[1]
BATCHES = (("async_store", "toolchain"), ("pallas", "cli"))
CRASH = ("Segmentation fault", "core dumped", "Fatal Python error", "Aborted")


def check(case: ec.Case, result: dict) -> None:
  """The exception type, the key words, and a fix."""
  got, message = result["type"], result["message"]
  assert got == case.error, f"{case.id}: expected {case.error}, got {got}: {message}"
  for word in case.words:
    assert word in message, f"{case.id}: {word!r} not in: {message}"
  if case.surface == "cli":
    assert message.endswith("\n") and message.count("\n") == 1, f"not one line: {message!r}"
    assert message.startswith("mosaic-async-store: error: "), message
    assert not result["stdout"], result["stdout"]
  elif case.error in ("AsyncStoreError", "TypeError"):
    assert ec.FIX in message, f"{case.id}: no fix given: {message}"
  assert not any(c in message for c in CRASH), message


@pytest.fixture(scope="module")
def batches():
  """Runs the IR/tool cases: {(surface, id): result}, plus each batch's exit."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
  # The Pallas case's kernel comes from the lit helpers (test/harness, not shipped).
  env["PYTHONPATH"] = os.pathsep.join(
      p for p in (str(ROOT / "test" / "harness"), os.environ.get("PYTHONPATH")) if p)
  procs = [(b, subprocess.Popen([sys.executable, str(HERE / "error_cases.py"), *b],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, cwd=ROOT)) for b in BATCHES]
  results, exits = {}, {}
  for batch, proc in procs:
    out, err = proc.communicate(timeout=600)
    exits[batch] = (proc.returncode, err[-3000:])
    for line in out.splitlines():
      row = json.loads(line)
      results[row["surface"], row["id"]] = row
  return results, exits


def test_the_table_covers_every_surface_with_distinct_inputs():
  ids = [(c.surface, c.id) for c in ec.CASES]
  assert len(set(ids)) == len(ids) >= 60
  codes = [(c.surface, c.code, c.setup) for c in ec.CASES]
  assert len(set(codes)) == len(codes)
  counts = {s: sum(c.surface == s for c in ec.CASES) for s in ec.SURFACES}
  assert counts["plan_store"] >= 25 and counts["async_store"] >= 12, counts
  assert counts["pallas"] >= 8 and counts["toolchain"] >= 5 and counts["cli"] >= 10, counts


@pytest.fixture(scope="module")
def plan_ns():
  return ec.plan_namespace()


@pytest.mark.parametrize("case", ec.PLAN, ids=[c.id for c in ec.PLAN])
def test_plan_store_refuses(case, plan_ns):
  check(case, ec.run_plan(case, plan_ns))


_SUBPROCESS = ec.ASYNC + ec.PALLAS + ec.TOOLCHAIN + ec.CLI


@pytest.mark.parametrize("case", _SUBPROCESS, ids=[f"{c.surface}-{c.id}" for c in _SUBPROCESS])
def test_ir_and_tool_surfaces_refuse(case, batches):
  results, exits = batches
  result = results.get((case.surface, case.id))
  if result is None:
    rc, err = next(v for b, v in exits.items() if case.surface in b)
    pytest.fail(f"{case.id}: no result; its batch exited {rc}:\n{err}")
  check(case, result)


@pytest.mark.parametrize("batch", BATCHES, ids=["+".join(b) for b in BATCHES])
def test_batches_exit_cleanly_without_crashing(batch, batches):
  rc, err = batches[1][batch]
  assert rc == 0 and not any(c in err for c in CRASH), f"exit {rc}:\n{err}"


def test_console_script_misuse_is_one_line_and_exit_2():
  script = pathlib.Path(sys.executable).with_name("mosaic-async-store")
  argv = [str(script)] if script.exists() else [sys.executable, "-m", "mosaic_async_store.tools.cli"]
  run = subprocess.run([*argv, "compile", "--dtype", "f32", "--atomic", "min", "--emit", "plan"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert run.returncode == 2 and run.stdout == "", (run.returncode, run.stdout)
  assert run.stderr.count("\n") == 1 and "--atomic min" in run.stderr and "Fix:" in run.stderr


def test_docs_errors_md_is_current(batches, plan_ns):
  """docs/errors.md says what the code says (rows of tool messages are not compared:
  they quote mlir-opt/ptxas, whose text depends on the tools and the kernel)."""
  spec = importlib.util.spec_from_file_location("errors_table", ROOT / "scripts" / "errors_table.py")
  errors_table = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(errors_table)
  results = dict(batches[0])
  results.update({("plan_store", c.id): ec.run_plan(c, plan_ns) for c in ec.PLAN})
  tool_rows = ("`CompileError`", "`ToolchainError`")
  keep = lambda text: [l for l in text.splitlines() if not any(t in l for t in tool_rows)]
  doc = (ROOT / "docs" / "errors.md").read_text()
  assert keep(doc) == keep(errors_table.render(results)), (
      "docs/errors.md is stale: run python scripts/errors_table.py")
