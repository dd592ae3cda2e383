"""Importing the package loads no test code and changes no environment.

Each check runs in a fresh interpreter, so that nothing this test session imported
(conftest, other tests) hides what the package itself loads.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Test kernels, benchmark kernels, the runtime harness and the lit helpers live in these
# folders (not in the package): a user planning or emitting a store never loads them.
TEST_TREES = [str(ROOT / "test"), str(ROOT / "bench")]

# The user's program: jax is already loaded (its import sets variables of its own, e.g.
# MOSAIC_GPU_CUDA_ROOT), then the package is imported and a real layout is planned.
PROGRAM = r"""
import json, os, sys
from jax.experimental.mosaic.gpu import fragmented_array as fa
before = dict(os.environ)
import mosaic_async_store as mas
plan = mas.plan_store(fa.WGMMA_LAYOUT, (64, 128), "bfloat16", swizzle=128)
plan.summary()
plan.verify()
after = dict(os.environ)
print(json.dumps({
    "modules": sorted(m for m in sys.modules if m.startswith("mosaic_async_store")),
    "files": sorted(str(getattr(m, "__file__", None) or "") for m in list(sys.modules.values())),
    "changed": {k: [before.get(k), after.get(k)] for k in set(before) | set(after)
                if before.get(k) != after.get(k)},
    "instructions": len(plan.instructions),
}))
"""


def _run(code: str, *, env_drop=("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL", "PYTHONPATH"),
         pythonpath: str | None = None) -> dict:
  # Without the test suite's defaults (test/conftest.py, pytest's pythonpath), as a
  # user's process starts.
  env = {k: v for k, v in os.environ.items() if k not in env_drop}
  if pythonpath:
    env["PYTHONPATH"] = pythonpath
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        env=env, timeout=300)
  assert proc.returncode == 0, proc.stderr[-5000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _from_test_trees(files: list[str]) -> list[str]:
  return [f for f in files if any(f.startswith(tree) for tree in TEST_TREES)]


def test_plan_store_imports_no_test_helper_and_changes_no_environment():
  got = _run(PROGRAM)
  assert got["instructions"] > 0
  loaded = _from_test_trees(got["files"])
  assert not loaded, f"planning a store imported test/bench modules: {loaded}"
  assert got["changed"] == {}, f"importing mosaic_async_store changed os.environ: {got['changed']}"


def test_bare_import_loads_neither_jax_nor_test_helpers():
  got = _run(r"""
import json, os, sys
before = dict(os.environ)
import mosaic_async_store
print(json.dumps({"modules": sorted(sys.modules), "same_env": dict(os.environ) == before,
                  "files": sorted(str(getattr(m, "__file__", None) or "") for m in list(sys.modules.values()))}))
""")
  assert got["same_env"]
  heavy = [m for m in got["modules"] if m.split(".")[0] in ("jax", "jaxlib")]
  assert not heavy, f"import mosaic_async_store loaded {heavy[:5]}"
  loaded = _from_test_trees(got["files"])
  assert not loaded, f"import mosaic_async_store imported test/bench modules: {loaded}"


def test_simulate_store_stays_public_and_lazy():
  got = _run(r"""
import json, sys
import mosaic_async_store as mas
lazy = "mosaic_async_store.plan.executor" not in sys.modules
from mosaic_async_store import simulate_store
from mosaic_async_store.plan.executor import simulate_store as direct
print(json.dumps({"lazy": lazy, "same": simulate_store is direct is mas.simulate_store,
                  "listed": "simulate_store" in mas.__all__ and "simulate_store" in dir(mas)}))
""")
  assert got == {"lazy": True, "same": True, "listed": True}


def test_testing_helpers_change_no_environment():
  """The lit helpers leave the environment to lit (test/lit/lit.cfg.py) and pytest."""
  got = _run(r"""
import json, os
before = dict(os.environ)
import jax  # its own variables are not this project's
before = dict(os.environ)
import kernel_text
print(json.dumps({"changed": sorted(k for k in set(before) | set(os.environ)
                                    if before.get(k) != os.environ.get(k))}))
""", pythonpath=str(ROOT / "test" / "harness"))
  assert got["changed"] == []
