"""The user's source lines of a kernel's instructions, from the PTX's line info.

``check`` compiles with ``toolchain.mlir_to_ptx(line_info=True)``: the NVPTX backend
then writes a ``.file`` table at module scope (``.file 1 "/path/kernel.py"``) and,
before the instructions of each source line, ``.loc 1 42 8`` (file id, line, column,
then optionally ``, function_name ..., inlined_at ...``, not used here), each a whole
PTX line without ``;``.  An instruction's source is the last ``.loc`` before it, so
that a finding can name the user's Python line next to the PTX line.
"""

from __future__ import annotations

import ast
import linecache
import re

__all__ = ["DIRECTIVE", "file_table", "source", "barrier_name", "used_at"]

_FILE = re.compile(r'^[ \t]*\.file[ \t]+(\d+)[ \t]+"((?:[^"\\]|\\.)*)"', re.M)
# A .loc (groups: file id, line) or a .file line, matched where a statement starts.
DIRECTIVE = re.compile(r"\.(?:loc[ \t]+(\d+)[ \t]+(\d+)|file[ \t])[^\n]*")


def file_table(text: str) -> dict[int, str]:
  """The ``.file`` table of the PTX ``text`` (read before comments are removed: a
  path may hold "//"); "<unknown>" (a kernel without a source file) is no file."""
  return {int(k): name for k, name in _FILE.findall(text) if name != "<unknown>"}


def source(files: dict[int, str], file_id: str, line: str) -> str | None:
  """``.loc file_id line``'s "file:line": None for line 0 (code of no source line)
  or an id that the ``.file`` table does not name."""
  name = files.get(int(file_id))
  return f"{name}:{line}" if name is not None and int(line) else None


# Calls that name an mbarrier, by the function's name: the position of the barrier
# among the positional arguments (Pallas' barrier_wait / barrier_arrive, the store and
# copy primitives), or a keyword ``barrier=`` anywhere.
_BARRIER_ARG = {"barrier_wait": 0, "barrier_arrive": 0, "async_store_smem": 2,
                "copy_gmem_to_smem": 2}


def barrier_name(text: str) -> str | None:
  """The expression a source line passes as an mbarrier (``bar.at[0]`` in
  ``plgpu.barrier_wait(bar.at[0])``), or None when the line names none that way.  A
  call cut at the line's end is closed first (the line is one statement's first)."""
  code = re.sub(r"#[^'\"]*$", "", text).strip()   # (a comment after the code)
  for attempt in (code, code + ")" * (code.count("(") - code.count(")"))):
    try:
      tree = ast.parse(attempt)
    except SyntaxError:
      continue
    for node in ast.walk(tree):
      if not isinstance(node, ast.Call):
        continue
      for kw in node.keywords:
        if kw.arg == "barrier":
          return ast.unparse(kw.value)
      func = node.func
      name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
      at = _BARRIER_ARG.get(name)
      if at is not None and len(node.args) > at:
        return ast.unparse(node.args[at])
    return None
  return None


def used_at(sources, shown=str) -> str:
  """How a message names an mbarrier by the user's code: `` (the kernel's `bar.at[0]`,
  used at kernel.py:43, 46)`` from the "file:line" ``sources`` of the instructions that
  operated on it (None where unknown; ``shown``: how a message shows a file), or ""
  when none is known."""
  places = sorted({s for s in sources if s is not None},
                  key=lambda s: (s.rpartition(":")[0], int(s.rpartition(":")[2])))
  if not places:
    return ""
  names, lines = [], {}   # (lines: file -> its line numbers, in order)
  for place in places:
    path, _, line = place.rpartition(":")
    lines.setdefault(path, []).append(line)
    name = barrier_name(linecache.getline(path, int(line)))
    if name is not None and name not in names:
      names.append(name)
  what = f"the kernel's {', '.join(f'`{n}`' for n in names)}, " if names else ""
  where = "; ".join(f"{shown(f'{path}:{numbers[0]}')}{''.join(f', {n}' for n in numbers[1:])}"
                    for path, numbers in lines.items())
  return f" ({what}used at {where})"
