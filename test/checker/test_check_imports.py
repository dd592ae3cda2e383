"""No import cycle among the PTX checker's modules (python/mosaic_async_store/check/).

Each module's imports are read with ``ast`` (nothing is imported: not jax, not the
package) into a graph of the modules of check/, whose strongly connected components
are its cycles; a failure names each cycle, module by module, with the import line
of each step.

Modules are read in subfolders too (an opcode family's folder, ``families/tma/``): the
module ``families/tma/copies.py`` is ``families.tma.copies``, a package by its own
name (``families.tma``).  What is an edge ``a -> b`` (``b`` a module of check/,
``__init__`` for the package):

  * ``import mosaic_async_store.check.b`` (with ``as`` too), ``from
    mosaic_async_store.check import b`` (``b`` a module), ``from
    mosaic_async_store.check.b import name`` and the relative forms ``from . import b``
    and ``from .b import name``;
  * ``from mosaic_async_store.check import name`` where ``name`` is no module (a name
    the package's ``__init__`` defines), ``import mosaic_async_store.check`` and ``from
    mosaic_async_store import check``: an edge to ``__init__``;
  * wherever the statement is: at the top of the module, under ``if`` or ``try``, in a
    class, in a function.  Function-level (lazy) imports count: they run too, and a
    cycle that one of them closes is still two modules that need each other (the
    import only moves to call time).  When this test was written no checker
    module imported another inside a function: the function-level imports in check/
    are of other layers (``__init__.check`` loads ``tools.check_kernel``, ``budget``
    loads ``errors`` and ``resource``), so counting them excuses no cycle.

Not an edge:

  * the package ``__init__`` that Python runs before any of its modules (every
    ``import mosaic_async_store.check.b`` would otherwise lead to ``__init__``);
  * a module loaded by name.  There is one, and it exists precisely to keep a cycle
    out: ``families.loaded`` (the registry) loads the opcode families on first use with
    ``importlib.import_module`` over ``families.REGISTERED``, because the families import
    the core that reads them (``machine``, ``opcodes``, ``poll_state``, ``exit_rule``),
    so the core cannot import them when it is loaded.
    ``test_the_only_import_by_name_is_the_family_registry`` holds the list:
    another ``importlib.import_module`` or ``__import__`` in check/ fails it, to be
    judged there.

The finder itself is shown to fail: on a small graph with cycles, and on a folder of
modules whose only cycle is closed by an import inside a function.

Run it alone with ``pytest test/checker/test_check_imports.py``.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECK = ROOT / "python" / "mosaic_async_store" / "check"
PACKAGE = "mosaic_async_store.check"
INIT = "__init__"

# (module, function) of every module of check/ loaded by name: see the module doc.
LOADED_BY_NAME = {("families", "loaded")}


def _resolve(dotted: str, modules: set[str]) -> str | None:
  """The module of the folder that ``mosaic_async_store.check.<dotted>`` loads: the
  longest prefix of ``dotted`` that is a module or a package of it (None: nothing
  of the folder)."""
  parts = dotted.split(".")
  for n in range(len(parts), 0, -1):
    if ".".join(parts[:n]) in modules:
      return ".".join(parts[:n])
  return None


def _targets(node: ast.Import | ast.ImportFrom, modules: set[str], package: str = "") -> list[str]:
  """The modules of the folder (``modules``: their dotted names below check/, a
  package by its own name, ``__init__`` for check/ itself) that one import statement
  of a module of the package ``package`` (dotted, "" for check/) names, as the module
  doc counts them."""
  found = []
  if isinstance(node, ast.Import):
    for alias in node.names:
      if alias.name == PACKAGE:
        found.append(INIT)
      elif alias.name.startswith(PACKAGE + "."):
        target = _resolve(alias.name[len(PACKAGE) + 1:], modules)
        found += [target] if target else []
    return found
  if node.level:
    here = package.split(".") if package else []
    if node.level - 1 > len(here):   # (from .. import: above the folder)
      return found
    rel = here[:len(here) - (node.level - 1)] + (node.module.split(".") if node.module else [])
    base = ".".join([PACKAGE] + rel)
  else:
    base = node.module or ""
  if base == PACKAGE.rsplit(".", 1)[0]:   # (from mosaic_async_store import check)
    found += [INIT for alias in node.names if alias.name == PACKAGE.rsplit(".", 1)[1]]
  elif base == PACKAGE or base.startswith(PACKAGE + "."):
    inner = base[len(PACKAGE) + 1:]
    for alias in node.names:   # a submodule by that name, else the module named by base
      sub = f"{inner}.{alias.name}" if inner else alias.name
      target = sub if sub in modules else (_resolve(inner, modules) if inner else INIT)
      if target and target not in found:
        found.append(target)
  return found


def import_graph(folder: pathlib.Path = CHECK) -> dict[str, dict[str, tuple]]:
  """Module -> {module it imports: (the line of the first such import at the top level,
  else of the first inside a function; whether it is inside a function)}, over the
  modules (``*.py``, in subfolders too) of ``folder``, read as
  ``mosaic_async_store.check``: ``a/b.py`` is the module ``a.b``, ``a/__init__.py`` the
  package ``a``."""
  paths = {}
  for path in sorted(folder.rglob("*.py")):
    parts = list(path.relative_to(folder).with_suffix("").parts)
    if parts[-1] == INIT and len(parts) > 1:
      parts = parts[:-1]
    paths[".".join(parts)] = path
  graph = {name: {} for name in paths}
  for name, path in paths.items():
    package = name if path.stem == INIT else name.rpartition(".")[0]
    _add_imports(ast.parse(path.read_text(), str(path)), False, set(paths), graph[name],
                 "" if name == INIT else package)
  return graph


def _add_imports(node, in_function, modules, edges, package=""):
  """Adds to ``edges`` (``import_graph``'s) the imports under ``node`` (a module of the
  package ``package``), in order."""
  for child in ast.iter_child_nodes(node):
    if isinstance(child, (ast.Import, ast.ImportFrom)):
      for target in _targets(child, modules, package):
        if target not in edges or edges[target][1] and not in_function:
          edges[target] = (child.lineno, in_function)   # (a top-level one first)
    _add_imports(child, in_function or isinstance(
        child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)), modules, edges, package)


def cycles(graph: dict) -> list[list[str]]:
  """The cycles of ``graph`` (node -> its successors), each as [a, b, ..., a]: for each
  strongly connected component that has one (two nodes or more, or a node that leads to
  itself; Tarjan's algorithm), a shortest cycle through each of its nodes, written
  from its first node in sorted order, each cycle once.  So every module of a
  component is named, in a cycle that shows how it closes."""
  index, low, stack, on_stack, components = {}, {}, [], set(), []

  def connect(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        connect(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = set()
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.add(w)
        if w == v:
          break
      if len(component) > 1 or v in graph.get(v, ()):
        components.append(component)

  def shortest(start, component):   # (breadth first, inside the component, back to start)
    paths, queue = {start: [start]}, [start]
    while queue:
      v = queue.pop(0)
      nxt = [w for w in sorted(graph.get(v, ())) if w in component]
      if start in nxt:
        return paths[v] + [start]
      for w in nxt:
        if w not in paths:
          paths[w] = paths[v] + [w]
          queue.append(w)
    raise AssertionError(f"{start} is on no cycle of its component {sorted(component)}")

  for v in sorted(graph):
    if v not in index:
      connect(v)
  found = []
  for component in sorted(components, key=min):
    for v in sorted(component):
      ring = shortest(v, component)[:-1]
      first = ring.index(min(ring))
      ring = ring[first:] + ring[:first]
      if ring + ring[:1] not in found:
        found.append(ring + ring[:1])
  return found


def describe(graph: dict, cycle: list[str]) -> str:
  """A cycle, with the import that makes each step: ``a -> b (a.py line n) -> ...``."""
  steps = [cycle[0]]
  for a, b in zip(cycle, cycle[1:]):
    line, lazy = graph[a][b]
    steps.append(f"{b} ({a}.py line {line}{', inside a function' if lazy else ''})")
  return " -> ".join(steps)


def _loads_by_name(node, function):
  """The function (None: the module's top level) of each call under ``node`` to
  ``importlib.import_module`` or ``__import__``."""
  for child in ast.iter_child_nodes(node):
    if isinstance(child, ast.Call) and \
       ast.unparse(child.func).split(".")[-1] in ("import_module", "__import__"):
      yield function
    yield from _loads_by_name(child, child.name if isinstance(
        child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function)


def test_the_checker_has_no_import_cycle():
  graph = import_graph()
  assert "opcodes" in graph["barriers"]   # (the reader sees the folder's imports)
  found = [describe(graph, c) for c in cycles(graph)]
  assert not found, ("import cycles among the modules of python/mosaic_async_store/check/ "
                     "(move what both sides need into a module below them):\n  "
                     + "\n  ".join(found))


def test_the_cycle_finder_reports_a_cycle():
  """The finder fails where it should: it names a cycle of three, a module importing
  itself, and nothing of a graph without a cycle."""
  graph = {"a": {"b": (1, False)}, "b": {"c": (2, False)}, "c": {"a": (3, True), "d": (4, False)},
           "d": {}, "e": {"e": (5, False)}, "f": {"a": (6, False)}}
  assert cycles(graph) == [["a", "b", "c", "a"], ["e", "e"]]
  assert describe(graph, ["a", "b", "c", "a"]) == (
      "a -> b (a.py line 1) -> c (b.py line 2) -> a (c.py line 3, inside a function)")
  assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {}, "d": {"a": 1, "c": 1}}) == []
  # Two cycles through one module are one component: both are named (one through b,
  # one through c and d), each once.
  assert cycles({"a": {"b": 1, "c": 1}, "b": {"a": 1}, "c": {"d": 1}, "d": {"a": 1}}) == [
      ["a", "b", "a"], ["a", "c", "d", "a"]]


def test_the_reader_resolves_every_form_and_counts_lazy_imports(tmp_path):
  """Every form of import the module doc counts is read; a cycle closed only by an
  import inside a function is found and named."""
  files = {
      "__init__.py": "from mosaic_async_store.check.v import V\n",
      "x.py": "import numpy as np\nfrom mosaic_async_store.check import y, Thing\n"
              "X = 1\n",
      "y.py": "from mosaic_async_store.check.z import helper as h\n",
      "z.py": "import mosaic_async_store.check.w as w\n"
              "def helper():\n  from . import x\n  return x\n",
      "w.py": "from .v import V\nfrom .. import errors\nimport mosaic_async_store.check\n",
      "u.py": "def f():\n  from mosaic_async_store import check\n  from . import v\n"
              "from .v import V\n",
      "v.py": "V = 0\n",
  }
  for name, text in files.items():
    (tmp_path / name).write_text(text)
  graph = import_graph(tmp_path)
  assert {m: set(e) for m, e in graph.items()} == {
      "__init__": {"v"}, "x": {"y", "__init__"}, "y": {"z"}, "z": {"w", "x"},
      "w": {"v", "__init__"}, "v": set(), "u": {"__init__", "v"}}
  assert graph["u"] == {"__init__": (2, True), "v": (4, False)}   # (the top-level one)
  assert graph["z"]["x"] == (3, True)
  [cycle] = cycles(graph)
  assert cycle == ["x", "y", "z", "x"]
  assert describe(graph, cycle).endswith("-> x (z.py line 3, inside a function)")


def test_the_only_import_by_name_is_the_family_registry():
  """Modules of check/ loaded by name (``importlib.import_module``, ``__import__``)
  are no edges of the graph: each must be one the module doc lists."""
  found = {(path.stem if path.stem != INIT else path.parent.name, function)
           for path in sorted(CHECK.rglob("*.py"))
           for function in _loads_by_name(ast.parse(path.read_text(), str(path)), None)}
  assert found == LOADED_BY_NAME, (
      f"modules of check/ loaded by name: {sorted(found)}; the import-cycle check does not "
      "see them: count them as imports or list them in test_check_imports.py's doc")
