"""Nothing in test/checker imports jax: .ci/run runs these tests once, on its first jax
version, and leaves them out of the others (``--jax-versioned``, test/conftest.py), which
is right only while they cannot differ between jax versions.

Every module any file of the folder imports (at the top or inside a function, read with
``ast``), and every file itself, is imported in a fresh interpreter in which importing
jax or jaxlib fails: one that reaches jax, directly or through what it imports, fails
the test with its name.  What this cannot see: a function of the package that imports
jax lazily when a test calls it; so every module of the checker's package is imported
the same way too, and none may reach jax.
"""

import ast
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).parent
CHECK = HERE.parents[1] / "python" / "mosaic_async_store" / "check"

_BLOCK_JAX = """
import importlib.abc, sys
class _NoJax(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path, target=None):
    if name == "jax" or name.startswith(("jax.", "jaxlib")):
      raise ImportError(f"test/checker must not import jax ({{name}})")
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


def test_no_module_of_the_folder_reaches_jax():
  files = sorted(HERE.glob("*.py"))
  names = set().union(*(imported_modules(f) for f in files)) | {f.stem for f in files}
  names |= {"mosaic_async_store.check." + ".".join(
      p.relative_to(CHECK).with_suffix("").parts[:-1 if p.stem == "__init__" else None])
      for p in CHECK.rglob("*.py") if p.parent != CHECK or p.stem != "__init__"}
  result = _reaches_jax(names, [HERE, HERE.parent / "harness"])
  assert result.returncode == 0, result.stderr[-3000:]


def test_the_guard_catches_a_module_that_imports_jax(tmp_path):
  """The same guard fails on a module that imports jax through a function."""
  (tmp_path / "uses_jax.py").write_text("def f():\n  import jax.numpy\n")
  names = imported_modules(tmp_path / "uses_jax.py") | {"uses_jax"}
  assert "jax.numpy" in names
  result = _reaches_jax(names, [tmp_path])
  assert result.returncode != 0 and "must not import jax" in result.stderr
