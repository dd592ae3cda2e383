"""The layers of the package and their import direction (docs/architecture.md).

Every ``import`` in the shipped modules, at the top or inside a function (the lazy
ones count: they run too), must name a module of the importer's own layer or of a
layer below it:

    base      _version, errors, compat
    plan      mosaic_async_store.plan.*     (no IR: no jax/jaxlib import except via compat)
    lowering  mosaic_async_store.lowering.* (what a user's kernel runs)
    demo      mosaic_async_store.demo.*     (the CLI's store kernel)
    check     mosaic_async_store.check.*    (the PTX checker's core: no jax)
    tools     mosaic_async_store.tools.*    (check_kernel: check() lowers kernels with tools)
    faces     mosaic_async_store (__init__), .pallas, .toolchain, .check (__init__)

Outside the package, the direction between the test trees and bench/ is one way:
bench/ imports test/harness (through bench/harness_path.py, the only file that
changes ``sys.path``); tests and the harness import nothing from bench/.

Run it alone with ``pytest test/unit/test_layers.py``.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = {"mosaic_async_store": ROOT / "python" / "mosaic_async_store",
           "mosaic_async_store.lowering": ROOT / "lowering"}
LAYERS = ("base", "plan", "check", "lowering", "demo", "tools", "faces")
BASE = {"mosaic_async_store._version", "mosaic_async_store.errors", "mosaic_async_store.compat"}
FACES = {"mosaic_async_store", "mosaic_async_store.pallas", "mosaic_async_store.toolchain",
         "mosaic_async_store.check"}


def layer_of(module: str) -> str:
  if module in BASE:
    return "base"
  if module in FACES:
    return "faces"
  parts = module.split(".")
  if len(parts) >= 2 and parts[1] in LAYERS:
    return parts[1]
  raise AssertionError(f"{module} belongs to no layer: add it to test_layers.py and "
                       "docs/architecture.md")


def shipped_modules() -> dict[str, pathlib.Path]:
  """Dotted name -> file, for every module of the package and of lowering/."""
  out = {}
  for package, folder in SOURCES.items():
    for path in folder.rglob("*.py"):
      rel = path.relative_to(folder).with_suffix("")
      parts = [p for p in rel.parts if p != "__init__"]
      name = ".".join([package, *parts])
      if package == "mosaic_async_store" and parts[:1] == ["lowering"]:
        continue  # gpu_check.sh's fallback symlink, if present
      out[name] = path
  return out


MODULES = shipped_modules()


def imports_of(path: pathlib.Path) -> list[tuple[int, str]]:
  """(line, module) for every import in the file; ``from pkg import name`` counts as
  ``pkg.name`` where that is a module, else as ``pkg``."""
  found = []
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      found += [(node.lineno, a.name) for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      for a in node.names:
        sub = f"{node.module}.{a.name}"
        found.append((node.lineno, sub if sub in MODULES else node.module))
  return found


def test_every_shipped_module_is_in_a_layer():
  assert {layer_of(m) for m in MODULES} == set(LAYERS)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module):
  mine = LAYERS.index(layer_of(module))
  wrong = [f"line {line}: {target} ({layer_of(target)})"
           for line, target in imports_of(MODULES[module])
           if target.split(".")[0] == "mosaic_async_store"
           and LAYERS.index(layer_of(target)) > mine]
  assert not wrong, f"{module} ({LAYERS[mine]}) imports from a layer above it: {wrong}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer_of(m) == "plan"))
def test_plan_builds_no_ir(module):
  """The plan layer reaches jax only through compat (lazily), never jaxlib.mlir."""
  direct = [f"line {line}: {target}" for line, target in imports_of(MODULES[module])
            if target.split(".")[0] in ("jax", "jaxlib")]
  assert not direct, f"{module} imports {direct}"


def test_the_check_sees_a_wrong_import(tmp_path):
  """A plan module importing the lowering, even lazily, is caught."""
  bad = tmp_path / "bad.py"
  bad.write_text("def f():\n  from mosaic_async_store.lowering import store\n")
  [(line, target)] = imports_of(bad)
  assert (line, target) == (2, "mosaic_async_store.lowering.store")
  assert LAYERS.index(layer_of(target)) > LAYERS.index("plan")


def _module_tables() -> list[str]:
  """The file names the module tables of docs/architecture.md list (``| `x.py` |``)."""
  text = (ROOT / "docs" / "architecture.md").read_text()
  section = text[text.index("## Modules"):]
  section = section[:section.index("\n## ", 1)]
  return re.findall(r"^\| `([\w/]+\.py)` \|", section, re.M)


def test_the_module_tables_match_the_tree():
  """Every shipped module has a row in docs/architecture.md, and every row's file exists."""
  rows = _module_tables()
  names = {pathlib.PurePosixPath(r).name for r in rows}
  # A sub-package's __init__.py only holds its docstring; the package's own is a face.
  tabled = [p for m, p in MODULES.items() if p.name != "__init__.py" or m == "mosaic_async_store"]
  unlisted = sorted(str(p.relative_to(ROOT)) for p in tabled if p.name not in names)
  assert not unlisted, f"modules missing from docs/architecture.md's tables: {unlisted}"
  everything = {p.name for p in ROOT.glob("**/*.py") if ".venv" not in p.parts}
  gone = sorted(r for r in rows if pathlib.PurePosixPath(r).name not in everything)
  assert not gone, f"docs/architecture.md lists files that do not exist: {gone}"


@pytest.mark.parametrize("folder, allowed", [("test/emu", []),
                                             ("test/checker", ["ptx_harness.py"]),
                                             ("test/planner", [])])
def test_the_checker_and_planner_test_folders_hold_only_tests(folder, allowed):
  """test/emu and test/checker hold the checker's tests, test/planner the planner's;
  test/checker's one helper module is ptx_harness.py (what its jax-free tests share),
  the rest live in test/harness."""
  others = sorted(p.name for p in (ROOT / folder).glob("*.py")
                  if not p.name.startswith("test_") and p.name != "conftest.py")
  assert others == allowed, f"helpers in {folder} (move them to test/harness): {others}"


# -- test code and benchmarks: bench/ -> test/harness, never back ---------------------------

TEST_DIRS = ("test", "test/unit", "test/emu", "test/checker", "test/planner", "test/gpu",
             "test/lit", "test/harness")


def _stems(folder: str) -> set[str]:
  return {p.stem for p in (ROOT / folder).glob("*.py")}


def _top_imports(path: pathlib.Path) -> list[tuple[int, str]]:
  """(line, first name) of every import in the file, relative ones left out."""
  return [(line, target.split(".")[0]) for line, target in imports_of(path)]


BENCH = _stems("bench")
HARNESS = _stems("test/harness")
TESTS_ONLY = (_stems("test/unit") | _stems("test/emu") | _stems("test/checker")
              | _stems("test/planner") | _stems("test/gpu")) - HARNESS


@pytest.mark.parametrize("path", sorted(
    str(p.relative_to(ROOT)) for d in TEST_DIRS for p in (ROOT / d).glob("*.py")))
def test_tests_and_the_harness_import_nothing_from_bench(path):
  """bench/ uses test/harness (bench/harness_path.py); tests and the harness never
  import a bench/ script, so there is no cycle between the two trees."""
  wrong = [f"line {line}: {name}" for line, name in _top_imports(ROOT / path) if name in BENCH]
  assert not wrong, f"{path} imports bench/ scripts {wrong}: move what both need to test/harness"


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "bench").glob("*.py")))
def test_bench_reaches_test_code_only_through_the_harness(path):
  """A benchmark imports test/harness modules (found through bench/harness_path.py, the
  one place that changes sys.path), never a test module."""
  text = (ROOT / path).read_text()
  wrong = [f"line {line}: {name}" for line, name in _top_imports(ROOT / path)
           if name in TESTS_ONLY]
  assert not wrong, f"{path} imports test modules {wrong}"
  if pathlib.PurePath(path).name != "harness_path.py":
    changes = re.findall(r"^.*sys\.path\s*(?:\.\w+\(|\[|\+?=).*$", text, re.M)
    assert not changes, f"{path} changes sys.path ({changes}): import harness_path instead"
  if any(name in HARNESS for _, name in _top_imports(ROOT / path)):
    assert "import harness_path" in text, f"{path} imports test/harness without harness_path"


def test_the_direction_check_sees_a_bench_import(tmp_path):
  """A test importing a bench/ script, even lazily, is caught."""
  bad = tmp_path / "test_bad.py"
  bad.write_text("def test_x():\n  import static_cost\n")
  assert [name for _, name in _top_imports(bad) if name in BENCH] == ["static_cost"]


def test_every_ptx_emitter_serves_the_package():
  """lowering/ptx.py holds the instructions the package emits; one that only tests or
  benchmarks emit lives in test/harness/extra_ptx.py, so the wheel ships no test code."""
  ptx = MODULES["mosaic_async_store.lowering.ptx"]
  emitters = [n.name for n in ast.parse(ptx.read_text()).body
              if isinstance(n, ast.FunctionDef) and n.name.startswith("emit_")]
  others = "\n".join(p.read_text() for m, p in MODULES.items() if p != ptx)
  unused = [e for e in emitters if not re.search(rf"\b{e}\b", others)]
  assert emitters and not unused, f"emitters no shipped module uses: {unused}"
