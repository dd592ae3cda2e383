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

An op has a line only where jax found a user frame (outside jax, the standard library
and, while ``check`` lowers, this package) in its equation's traceback, which need
not reach out to the user's code: the TMA copies of ``plgpu.emit_pipeline``, recorded
by jax's code inside its loop's body, have none in theirs (jax 0.10 and 0.12 alike,
a handful of jax's frames): their ops carry only the primitive's name
(``loc("copy_gmem_to_smem")``), and in the PTX they keep the ``.loc`` before them, the
line of another statement, or get ``.loc 1 0``.  While a kernel is lowered,
``enclosing_when_unknown`` gives such an equation the location of the equation whose
lowering rule lowers it (a loop's, a ``run_scoped``'s): the innermost line of the
user's files that encloses it, such as the ``emit_pipeline`` call.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Callable, Iterator

__all__ = ["launch_locations", "has_file", "enclosing_when_unknown"]

_FILE_LOC = re.compile(r'"(?:[^"\\]|\\.)*":\d+:\d+')   # a location with a file in it
_FILE_LINE = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):\d+')   # its file and line


def has_file(location: Any) -> bool:
  """Whether an ``ir.Location`` names a file and line anywhere in it (a name, call site
  or fused location around one)."""
  return _FILE_LOC.search(str(location)) is not None


def _lines(location: Any) -> set:
  """The (file, line) pairs an ``ir.Location`` names."""
  return {(f, int(n)) for f, n in _FILE_LINE.findall(str(location))}


def enclosing_when_unknown(located: Callable[..., Any]) -> Callable[..., Any]:
  """jax's ``source_info_to_location(ctx, primitive, name_stack, traceback)`` (given as
  ``located``), where a location without a file becomes the primitive's name around the
  location current while it is made, if that is an equation's location made here for
  the same kind of ``ctx`` (the same lowering): Pallas' lowerings make each equation's
  location inside the location of the equation whose rule lowers the body it is in
  (``compat.equation_locations``).  A location that names a line of the stack this is
  made on (the caller of ``check``, which jax takes for the user's frame of equations
  that jax's own code records, such as the kernel's scratch ``run_scoped``) is not
  passed on: it is no line of the kernel."""
  import sys
  from jaxlib.mlir import ir
  caller, outside = sys._getframe(1), set()
  while caller is not None:
    outside.add((caller.f_code.co_filename, caller.f_lineno))
    caller = caller.f_back
  made: set = set()   # (kind of ctx, location) of the locations that may be passed on

  def with_enclosing(ctx, primitive, name_stack, traceback):
    location = located(ctx, primitive, name_stack, traceback)
    if not has_file(location):
      try:
        enclosing = ir.Location.current
      except ValueError:   # (no location is current: none encloses it)
        enclosing = None
      if enclosing is not None and (type(ctx), str(enclosing)) in made:
        name = primitive.name if primitive is not None else str(name_stack) or "enclosed"
        location = ir.Location.name(name, childLoc=enclosing)
    if has_file(location) and not _lines(location) & outside:
      made.add((type(ctx), str(location)))
    return location
  return with_enclosing


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
    if op.name == "gpu.launch" and not has_file(op.location):
      first = next((o for o in _walk(op) if has_file(o.location)), None)
      if first is not None:
        changed.append((op, op.location))
        op.location = first.location
  try:
    yield
  finally:
    for op, location in changed:
      op.location = location
