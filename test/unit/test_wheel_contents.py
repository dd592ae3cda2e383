"""What the built wheel ships: exactly the product's modules, and no test, benchmark or
runtime-harness module (those live in test/ and bench/).

The wheel is built from a copy of the checkout (so that a stale ``build/lib`` cannot
bring back moved modules) with ``pip wheel --no-deps --no-build-isolation --no-index``:
offline, with this environment's setuptools (>= 77, for the SPDX ``license`` string;
the ``test`` extra installs it). About 3 s.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Modules of the product, by layer (docs/architecture.md): the faces and base modules,
# the plan, what a user's kernel runs, the CLI's store kernel (demo), the tools, the
# PTX checker.  The
# wheel ships exactly these.
PRODUCT = {
    "mosaic_async_store": ("__init__", "_version", "errors", "compat", "pallas", "toolchain"),
    "mosaic_async_store/plan": ("__init__", "dtypes", "validate", "validate_cluster", "geometry", "subbyte",
                                "packing", "plan_types", "address_steps", "ptx_forms", "planner", "store_plan",
                                "banks",
                                "verify", "landing", "addressing", "executor",
                                "register_steps", "ref_swizzle"),
    "mosaic_async_store/lowering": ("__init__", "store", "values_ir", "ptx", "target",
                                    "ref_offset", "debug", "pallas", "pallas_layouts",
                                    "pallas_barriers"),
    "mosaic_async_store/demo": ("__init__", "config", "kernel", "kernel_io", "check"),
    "mosaic_async_store/tools": ("__init__", "toolchain", "executables", "mlir_skew",
                                 "mlir_locations", "ptx_stats",
                                 "pallas_capture", "check_kernel", "user_kernel", "cli",
                                 "cli_config", "cli_kernel", "cli_terms",
                                 "device_target", "host_tma", "host_eval", "kernel_errors", "checking",
                                 "kernel_binding", "kernel_cache", "pytest_plugin"),
    "mosaic_async_store/check": ("__init__", "interp", "opcodes", "values", "run", "sync",
                                 "barriers", "access", "strong", "memory", "global_memory",
                                 "ops", "floats", "lineinfo", "report", "warp", "collectives", "machine",
                                 "program", "poll_state", "registers", "outcomes", "addresses", "memops", "asyncops",
                                 "control", "contraction", "fences", "warp_memory",
                                 "lockstep", "shadow", "shadow_runs", "schedule", "warp_mbarrier",
                                 "budget", "cluster_barrier", "pairings", "mbarrier_forms",
                                 "mbarrier_state", "waits", "findings", "exit_rule", "slots", "params",
                                 "tensor_map", "undefined", "proxy", "access_core",
                                 "floats_f32", "floats_cvt", "float_columns", "barrier_warps", "subbyte",
                                 "family", "floats_approx", "parallel", "arrival_orders",
                                 "landing_orders"),
    # the opcode families' registry and the families that are folders
    "mosaic_async_store/check/families": ("__init__",),
    "mosaic_async_store/check/families/tma": ("__init__", "copies", "forms", "examples",
                                              "geometry", "bulk_rules", "bulk_op", "bulk_groups"),
    "mosaic_async_store/check/families/wgmma": ("__init__", "mma", "execute", "guard", "layout"),
    "mosaic_async_store/check/families/tcgen05": ("__init__", "state", "alloc", "ldst", "table",
                                                  "mma", "commit", "descriptors", "pair", "cp"),
    "mosaic_async_store/check/families/clc": ("__init__", "rules", "cancel"),
}
# The test and benchmark code (test/harness: kernels, runners, reports, lit helpers;
# bench/: the benchmark scripts) under their present names, and former ones.
HARNESS = tuple(sorted({p.stem for d in ("test/harness", "bench") for p in (ROOT / d).glob("*.py")}
                       | {"kernels", "testing"}))


def _setuptools_version() -> tuple[int, ...]:
  try:
    version = importlib.metadata.version("setuptools")
  except importlib.metadata.PackageNotFoundError:
    return ()
  return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


@dataclasses.dataclass(frozen=True)
class Wheel:
  files: list[str]           # the archive's names
  entry_points: str          # its dist-info/entry_points.txt
  build_log: str             # pip's and the backend's output


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Wheel:
  if _setuptools_version() < (77,):
    pytest.skip("building the wheel without isolation needs setuptools>=77 in this "
                f"environment (found {_setuptools_version() or 'none'}): "
                "pip install 'setuptools>=77' (the test extra has it)")
  src = tmp_path_factory.mktemp("src")
  shutil.copytree(ROOT, src, dirs_exist_ok=True, symlinks=True, ignore=shutil.ignore_patterns(
      ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "Output",
      ".hypothesis", ".pytest_cache"))
  out = tmp_path_factory.mktemp("wheel")
  proc = subprocess.run(
      [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
       "--no-index", "-v", "-w", str(out)],  # -v: the backend's warnings
      capture_output=True, text=True, timeout=300)
  wheels = sorted(out.glob("*.whl"))
  if proc.returncode != 0 or len(wheels) != 1:
    pytest.skip("pip wheel (offline, no build isolation) failed: "
                + (proc.stderr.strip().splitlines() or ["no output"])[-1])
  with zipfile.ZipFile(wheels[0]) as z:
    files = z.namelist()
    entry_points = next(f for f in files if f.endswith(".dist-info/entry_points.txt"))
    return Wheel(files, z.read(entry_points).decode(), proc.stdout + proc.stderr)


def _modules(files: list[str]) -> set[str]:
  """Dotted module names of the wheel's Python files."""
  return {f[:-3].replace("/", ".") for f in files if f.endswith(".py")}


def test_wheel_ships_the_product(wheel):
  shipped = _modules(wheel.files)
  want = {f"{package}/{name}".replace("/", ".") for package, names in PRODUCT.items()
          for name in names}
  assert sorted(want - shipped) == [], "product modules missing from the wheel"
  assert sorted(shipped - want) == [], "modules in the wheel that are not the product"
  # Nothing from the test or benchmark trees, and no test modules.
  tops = {f.split("/", 1)[0] for f in wheel.files}
  assert {t for t in tops if not t.endswith(".dist-info")} == {"mosaic_async_store"}, tops
  # pyproject.toml uses no form setuptools deprecates (the license table was one).
  assert "DeprecationWarning" not in wheel.build_log, [
      l for l in wheel.build_log.splitlines() if "Deprecat" in l]
  assert "mosaic-async-store = mosaic_async_store.tools.cli:main" in wheel.entry_points
  assert "mgpu_check = mosaic_async_store.tools.pytest_plugin" in wheel.entry_points


def test_wheel_ships_no_test_bench_or_harness_module(wheel):
  shipped = sorted(m for m in _modules(wheel.files) if m.rsplit(".", 1)[-1] in HARNESS
                   or m.rsplit(".", 1)[-1].startswith("test_"))
  assert not shipped, f"test/benchmark/harness modules in the wheel: {shipped}"
