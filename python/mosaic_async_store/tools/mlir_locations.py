"""Source locations of a Mosaic GPU module, for the checker's line info.

``toolchain.mlir_to_ptx(module, line_info=True)`` prints the module with its ops'
locations; the NVPTX backend then names, before each source line's instructions, the
file and line of their ops (``.file`` / ``.loc``).  It takes every line's file from
the kernel function's own location, which the outlined kernel inherits from its
``gpu.launch``; Pallas gives that op the location ``"mpmd_map"`` (no file), and
every ``.loc`` would then name "<unknown>".  ``launch_locations`` lends the launch a
file location while the module is printed, as upstream's
``mosaic-gpu-resolve-trivial-locations`` pass (jaxlib/mosaic/gpu/passes.cc) does
before its pipeline.  Nothing else changes: the PTX's instructions stay the same.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator

__all__ = ["launch_locations"]

_FILE_LOC = re.compile(r'"(?:[^"\\]|\\.)*":\d+:\d+')   # a location with a file in it


def _walk(operation) -> Iterator[Any]:
  """Every op nested in ``operation``, in program order."""
  for region in operation.regions:
    for block in region.blocks:
      for op in block.operations:
        yield op.operation
        yield from _walk(op.operation)


@contextlib.contextmanager
def launch_locations(module: Any):
  """While active, each ``gpu.launch`` of ``module`` without a file location has the
  location of the first op in its body that has one (restored on exit)."""
  changed = []
  for op in _walk(module.operation):
    if op.name == "gpu.launch" and not _FILE_LOC.search(str(op.location)):
      first = next((o for o in _walk(op) if _FILE_LOC.search(str(o.location))), None)
      if first is not None:
        changed.append((op, op.location))
        op.location = first.location
  try:
    yield
  finally:
    for op, location in changed:
      op.location = location
