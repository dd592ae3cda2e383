"""The user's source lines of a kernel's instructions, from the PTX's line info.

``check`` compiles with ``toolchain.mlir_to_ptx(line_info=True)``: the NVPTX backend
then writes a ``.file`` table at module scope (``.file 1 "/path/kernel.py"``) and,
before the instructions of each source line, ``.loc 1 42 8`` (file id, line, column,
then optionally ``, function_name ..., inlined_at ...``, not used here), each a whole
PTX line without ``;``.  An instruction's source is the last ``.loc`` before it, so
that a finding can name the user's Python line next to the PTX line.
"""

from __future__ import annotations

import re

__all__ = ["DIRECTIVE", "file_table", "source"]

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
