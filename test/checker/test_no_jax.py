"""Nothing in the jax-free test folders (test/harness/jax_free.py: test/checker,
test/planner) imports jax: .ci/run runs these tests once, on its first jax version, and
leaves them out of the others (``--jax-versioned``, test/conftest.py), which is right only
while they cannot differ between jax versions.

Every module any file of those folders imports (at the top or inside a function, read with
``ast``), and every file itself, is imported in a fresh interpreter in which importing
jax or jaxlib fails: one that reaches jax, directly or through what it imports, fails
the test with its name.  What this cannot see: a function of the package that imports
jax lazily when a test calls it; so every module of the packages those tests exercise
(``jax_free.PACKAGES``: the checker, the planner) is imported the same way too, and none
may reach jax.
"""

import ast
import pathlib
import subprocess
import sys

import pytest

import jax_free

HERE = pathlib.Path(__file__).parent
ROOT = HERE.parents[1]
PACKAGE = ROOT / "python" / "mosaic_async_store"

_BLOCK_JAX = """
import importlib.abc, sys
class _NoJax(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path, target=None):
    if name == "jax" or name.startswith(("jax.", "jaxlib")):
      raise ImportError(f"a jax-free test folder must not import jax ({{name}})")
sys.meta_path.insert(0, _NoJax())
sys.path[:0] = {paths!r}
import importlib
for name in {names!r}:
  importlib.import_module(name)
"""


def imported_modules(path: pathlib.Path) -> set[str]:
  """Every module ``path`` imports, anywhere in it (absolute names)."""
  names = set()
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      names.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names.add(node.module)
  return names


def _reaches_jax(names, paths) -> subprocess.CompletedProcess:
  code = _BLOCK_JAX.format(paths=[str(p) for p in paths], names=sorted(names))
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def _modules_of(package: str) -> set[str]:
  """Every module of ``mosaic_async_store.<package>`` by its dotted name."""
  root = PACKAGE / package
  return {f"mosaic_async_store.{package}." + ".".join(
      p.relative_to(root).with_suffix("").parts[:-1 if p.stem == "__init__" else None])
      for p in root.rglob("*.py") if p.parent != root or p.stem != "__init__"}


@pytest.mark.parametrize("folder", jax_free.FOLDERS)
def test_no_module_of_the_folder_reaches_jax(folder):
  here = ROOT / folder
  files = sorted(here.glob("*.py"))
  assert files, f"{folder} holds no test"
  names = set().union(*(imported_modules(f) for f in files)) | {f.stem for f in files}
  result = _reaches_jax(names, [here, ROOT / "test" / "harness"])
  assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("package", jax_free.PACKAGES)
def test_no_module_of_the_package_reaches_jax(package):
  result = _reaches_jax(_modules_of(package), [])
  assert result.returncode == 0, result.stderr[-3000:]


def test_the_guard_catches_a_module_that_imports_jax(tmp_path):
  """The same guard fails on a module that imports jax through a function."""
  (tmp_path / "uses_jax.py").write_text("def f():\n  import jax.numpy\n")
  names = imported_modules(tmp_path / "uses_jax.py") | {"uses_jax"}
  assert "jax.numpy" in names
  result = _reaches_jax(names, [tmp_path])
  assert result.returncode != 0 and "must not import jax" in result.stderr
