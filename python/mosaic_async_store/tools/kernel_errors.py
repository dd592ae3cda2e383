"""An exception out of a user's kernel, as ``check`` and ``compile`` report it: once, in one
line, at the user's line.

Where the exception came from decides what is said:

* this project's refusal (an ``AsyncStoreError``, or a ``TypeError`` in
  ``errors.refuse_type``'s format) raised by a call in the kernel, e.g. a bad
  ``cluster_dim`` or ``atomic`` given to ``async_store_smem``: its own message, unwrapped,
  with the user's line that made the call;
* an exception the user's own code raised: its type and message, at its line;
* one raised by jax while it builds the refs the kernel declares (its scratch, its
  ``BlockSpec``s and their transforms: e.g. a ``SwizzleTransform`` that does not fit
  its ``TilingTransform``): a refusal of ``fn``, whatever its type, since the kernel's
  declaration is wrong whatever the arrays are, with jax's words and the user's line
  that called jax, else the definition of the kernel's body;
* one raised by jax inside a statement of the kernel's body (a user's frame other than
  the kernel function's own is on its traceback: ``bar.at[0]`` on a single barrier):
  that statement's error, with jax's words and the line, whatever its type;
* one raised by jax while tracing, outside the body, of a kind a wrong argument gives
  (``TypeError``, ``ValueError``): a refusal of ``args`` with jax's words and the user's
  line (else the definition of the kernel's body: e.g. an array too many, which jax
  passes on to the body as a ref the body does not take);
* any other one from jax's code (an ``AssertionError`` of upstream's, say, about the
  kernel's tiling): its type, its message or the failing statement, and the user's line.

The user's line is the innermost frame outside jax, jaxlib, this package (its lowering
included) and the standard library: in the exception's traceback, else in the trace jax
recorded for the equation being lowered (``JaxStackTraceBeforeTransformation``, its
``__cause__``), else in the location of the dialect op whose lowering refused (jax 0.12
lowers Pallas' stores as dialect ops after the trace: ``lowering/pallas.py`` attaches
it), else the definition of the kernel's body (an error about the kernel's arguments or
scratch, raised before any line of the body ran).  The ops' locations name the user's
line only while jax counts this package's frames as its own (``lower_kernel`` lowers
under ``compat.frames_not_user(*package_folders())``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import linecache
import os
import pathlib
import re
import traceback

from mosaic_async_store.errors import AsyncStoreError, refuse

__all__ = ["from_tracing", "from_lowering", "user_frame", "raised_by_user", "one_line", "at",
           "kernel_error", "building_declared_refs", "package_folders"]

_FILE_LINE = re.compile(r'"((?:[^"\\]|\\.)+)":(\d+):\d+')   # a file location in MLIR's text


def package_folders() -> tuple[str, ...]:
  """This package's folder and its lowering's (shipped from lowering/), each ending in a
  separator."""
  lowering = importlib.util.find_spec("mosaic_async_store.lowering")
  found = (lowering.submodule_search_locations or []) if lowering else []
  return tuple(os.path.join(str(p), "") for p in (pathlib.Path(__file__).parents[1], *found))


def _machinery() -> tuple[str, ...]:
  """jax's, jaxlib's, this package's (and its lowering's) and the standard library's
  folders: their frames are not the user's kernel."""
  folders = [__import__("jax").__path__[0], __import__("jaxlib").__path__[0],
             os.path.dirname(contextlib.__file__), *package_folders()]
  return tuple(os.path.join(str(pathlib.Path(p).resolve()), "") for p in folders)


_MACHINERY = _machinery()


def _is_user(filename: str) -> bool:
  return not str(pathlib.Path(filename).resolve()).startswith(_MACHINERY)


def _recorded_trace(error: BaseException):
  """The trace jax recorded for the equation whose lowering raised ``error`` (None if
  none): jax's ``user_context`` chains it as a ``JaxStackTraceBeforeTransformation``."""
  seen = set()
  cause = error.__cause__
  while cause is not None and id(cause) not in seen:
    seen.add(id(cause))
    if type(cause).__name__ == "JaxStackTraceBeforeTransformation":
      return cause.__traceback__
    cause = cause.__cause__
  return None


def _located(error: BaseException) -> traceback.FrameSummary | None:
  """The user's line in the location of the MLIR op whose lowering refused (the dialect
  rule's ``mlir_location``: jax gives each op its equation's line)."""
  for file, line in _FILE_LINE.findall(getattr(error, "mlir_location", "") or ""):
    if _is_user(file):
      return traceback.FrameSummary(file, int(line), "", lookup_line=False,
                                    line=linecache.getline(file, int(line)))
  return None


def user_frame(error: BaseException) -> traceback.FrameSummary | None:
  """The user's line that was running when ``error`` was raised: the innermost frame of
  its traceback outside the machinery, else of jax's recorded trace, else the location
  of the op that refused (module docstring)."""
  for tb in (error.__traceback__, _recorded_trace(error)):
    frames = [f for f in traceback.extract_tb(tb) if _is_user(f.filename)] if tb else []
    if frames:
      return frames[-1]
  return _located(error)


# jax's functions that turn the memory refs a kernel declares (scratch types, BlockSpecs,
# their transforms) into ref types: the scratch path (get_ref_aval; on jax 0.12 also a
# pl.pallas_call's BlockSpecs, routed through emit_pipeline's scratch), jax 0.10's
# BlockSpec path (to_block_mapping), and the transforms' own check of the shape they are
# given (transform_type), which both reach.
_DECLARED_REFS = frozenset({"get_ref_aval", "to_block_mapping", "transform_type"})


def building_declared_refs(error: BaseException) -> bool:
  """Whether jax raised ``error`` while it built the memory refs the kernel declares
  (its traceback passes through one of jax's ``_DECLARED_REFS`` functions)."""
  jax_folder = _MACHINERY[0]
  return any(f.name in _DECLARED_REFS
             and str(pathlib.Path(f.filename).resolve()).startswith(jax_folder)
             for f in traceback.extract_tb(error.__traceback__))


def raised_by_user(error: BaseException) -> bool:
  """Whether the user's own code raised ``error`` (its innermost frame is the user's)."""
  frames = traceback.extract_tb(error.__traceback__)
  return bool(frames) and _is_user(frames[-1].filename)


def where(frame: traceback.FrameSummary) -> str:
  name = f"in {frame.name}: " if frame.name else ""
  return f"{frame.filename}:{frame.lineno} ({name}{(frame.line or '').strip()})"


def one_line(e: BaseException) -> str:
  """``Type: message`` on one line; an empty message (a bare ``assert``) replaced by the
  statement that failed and whose code it is."""
  message = " ".join(str(e).split())
  if not message:
    frames = traceback.extract_tb(e.__traceback__)
    last = frames[-1] if frames else None
    if last is not None and last.line:
      message = (f"(no message) at `{last.line.strip()}` in {last.name} "
                 f"({_short(last.filename)}:{last.lineno})")
    else:
      message = "(no message)"
  return f"{type(e).__name__}: {message}"


def _short(filename: str) -> str:
  """A library file's path from its package on (``jax/_src/...``); a user's as it is."""
  parts = pathlib.Path(filename).parts
  if "site-packages" in parts:
    return "/".join(parts[len(parts) - parts[::-1].index("site-packages"):])
  return filename


def at(e: BaseException) -> str:
  frame = user_frame(e)
  return f" at {frame.filename}:{frame.lineno}" if frame else ""


def _body_source(fn) -> str | None:
  """Where the kernel's body (the first Python function reached from ``fn`` through
  wrappers, partials and closures, defined outside the machinery) is defined."""
  todo, seen = [fn], set()
  while todo and len(seen) < 64:
    f = todo.pop(0)
    if id(f) in seen:
      continue
    seen.add(id(f))
    code = getattr(f, "__code__", None)
    if code is not None and _is_user(code.co_filename):
      return f"defined at {code.co_filename}:{code.co_firstlineno} ({f.__name__})"
    for attr in ("__wrapped__", "fun", "func", "f", "__func__"):
      inner = getattr(f, attr, None)
      if callable(inner):
        todo.append(inner)
    for cell in getattr(f, "__closure__", None) or ():
      with contextlib.suppress(ValueError):
        if callable(cell.cell_contents):
          todo.append(cell.cell_contents)
  return None


def kernel_error(param: str, error: BaseException, fn=None):
  """An exception from the kernel's code (its own, or jax's on its behalf) as an
  AsyncStoreError naming its type, message and the user's line that led there (else
  where the kernel's body is defined)."""
  frame = user_frame(error)
  place = (f"at {where(frame)}" if frame else _body_source(fn) if fn is not None else None)
  message = one_line(error).split(": ", 1)
  return refuse(param, f"code that raised {message[0]}: {message[1]}", "code that runs",
                f"fix the kernel {place}" if place else "fix the kernel")


def _is_refusal(error: BaseException) -> bool:
  """This project's refusal: an AsyncStoreError, or a TypeError in refuse_type's format."""
  return isinstance(error, AsyncStoreError) or (
      isinstance(error, TypeError) and " is not supported: allowed " in str(error)
      and "Fix:" in str(error))


def _at_user_line(error: BaseException):
  """A refusal raised by a call in the kernel: its own message, once, with the user's line
  that made the call (unchanged where no such line is known, e.g. check's own)."""
  frame = user_frame(error)
  if frame is None or getattr(error, "_mas_at_user_line", False):
    return error
  code = " ".join((frame.line or "").split())
  error.args = (f"{' '.join(str(error).split())} (at {frame.filename}:{frame.lineno}: "
                f"`{code}`)",)
  error._mas_at_user_line = True
  return error.with_traceback(None)


def _in_kernel_body(error: BaseException, fn) -> bool:
  """Whether jax raised ``error`` inside a statement of the kernel's body (a user's frame
  other than ``fn``'s own is on its traceback: e.g. ``bar.at[0]`` on a single barrier),
  where the statement, not the arrays, is what jax refused."""
  own = getattr(fn, "__code__", None)
  return any(_is_user(f.filename) and not (own is not None and f.name == own.co_name
                                           and f.filename == own.co_filename)
             for f in traceback.extract_tb(error.__traceback__))


def from_tracing(error: BaseException, fn, args):
  """What ``check`` and ``compile`` raise for ``error``, raised while jax traced ``fn``
  with specs of ``args`` (the NumPy arrays)."""
  if _is_refusal(error):
    return _at_user_line(error)
  if (raised_by_user(error) or building_declared_refs(error)
      or not isinstance(error, (TypeError, ValueError)) or _in_kernel_body(error, fn)):
    return kernel_error("fn", error, fn)
  frame = user_frame(error)
  source = None if frame else _body_source(fn)
  place = (f" (at {frame.filename}:{frame.lineno})" if frame else
           f" (of the kernel {source})" if source else "")
  return refuse("args", [f"{a.dtype}{list(a.shape)}" for a in args],
                "the shapes and dtypes the kernel takes",
                f"jax says{place}: {' '.join(str(error).split())}")


def from_lowering(error: BaseException, fn, brief: str):
  """What ``check`` and ``compile`` raise for ``error``, raised while jax lowered ``fn``
  (``brief``: how a refusal names the kernel)."""
  if _is_refusal(error):
    return _at_user_line(error)
  if raised_by_user(error):
    return kernel_error("fn", error, fn)
  frame = user_frame(error)
  source = None if frame else _body_source(fn)
  place = (f" at {frame.filename}:{frame.lineno}" if frame else
           f" (in the kernel {source})" if source else "")
  return refuse("fn", brief, "a kernel that jax lowers for a GPU",
                f"jax's lowering says: {one_line(error)}{place}")
