"""A user's Pallas MGPU or Mosaic GPU kernel: loaded, traced, lowered and compiled on a CPU.

    fn, args = load_target("my_kernel.py:make")     # FUNCTION() -> (fn, arrays)
    compiled = compile_kernel(fn, *args, arch="sm_90a")
    compiled.ptx, compiled.sass, compiled.stats.asynchronous

``check`` (tools/check_kernel.py) and the CLI's ``compile FILE.py:FUNCTION`` and
``check FILE.py:FUNCTION`` share this path.  Whatever goes wrong on it is an
``AsyncStoreError`` (or ``TypeError`` for a value of the wrong kind) that says what
and where in one message: a refusal raised by a call in the kernel is reported once,
with the user's line that made the call; an exception raised by the kernel's own code, or
by jax's on its behalf, names its type, message and the user's line (tools/kernel_errors.py);
a tool's refusal names the tool's first error line.
"""

from __future__ import annotations

import contextlib
import importlib.util
import pathlib
import re
import sys

import numpy as np

from mosaic_async_store.errors import refuse, refuse_type
from mosaic_async_store.tools.kernel_errors import at as _at, from_lowering, from_tracing
from mosaic_async_store.tools.kernel_errors import one_line as _one_line
from mosaic_async_store.tools.kernel_errors import package_folders

__all__ = ["load_target", "lower_kernel", "compile_kernel", "kernel_specs", "first_error",
           "compile_fix"]

# Ops, types and attributes of the Mosaic GPU dialect (not its discardable module attributes
# such as mosaic_gpu.arch_major): a Warpgroup-semantics module still holds them.
_DIALECT = re.compile(r'"mosaic_gpu\.[\w.]+"\(|[!#]mosaic_gpu\.\w+')


@contextlib.contextmanager
def _tracebacks_unfiltered():
  """jax removes its own frames from tracebacks; the user's frame is found only in the
  whole traceback."""
  import jax
  old = jax.config.jax_traceback_filtering
  jax.config.update("jax_traceback_filtering", "off")
  try:
    yield
  finally:
    jax.config.update("jax_traceback_filtering", old)


def load_target(spec: str):
  """``FILE.py:FUNCTION`` -> ``(fn, args)``: FUNCTION() of that file, which must return a
  kernel and a tuple (or list) of NumPy arrays.  FILE's folder is importable while it
  loads (so FILE may import modules beside it).  Raises ValueError with a one-line
  reason in the CLI's terms."""
  from mosaic_async_store import compat
  path, sep, name = spec.rpartition(":")
  if not sep or not path.endswith(".py") or not name.isidentifier():
    raise ValueError(f"expected FILE.py:FUNCTION, got {spec!r} (e.g. my_kernel.py:make)")
  file = pathlib.Path(path)
  if not file.is_file():
    raise ValueError(f"no such file: {path}")
  folder = str(file.resolve().parent)
  sys.path.insert(0, folder)
  try:
    with compat.mosaic_gpu_pallas_call(), _tracebacks_unfiltered():
      module_spec = importlib.util.spec_from_file_location(file.stem, file)
      module = importlib.util.module_from_spec(module_spec)
      try:
        module_spec.loader.exec_module(module)
      except Exception as e:   # the user's file: any exception is its own
        raise ValueError(f"{path} raised {_one_line(e)} while loading"
                         f"{_at(e)}") from None
      make = getattr(module, name, None)
      if not callable(make):
        raise ValueError(f"{path} has no function {name!r}")
      try:
        made = make()
      except Exception as e:
        raise ValueError(f"{name}() raised {_one_line(e)}{_at(e)}") from None
  finally:
    sys.path.remove(folder)
  if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], (tuple, list))):
    raise ValueError(f"{name}() must return (kernel, (array, ...)); it returned "
                     f"{type(made).__name__}")
  return made[0], tuple(made[1])


def kernel_specs(fn, args) -> tuple[list, list]:
  """Checks ``fn`` and ``args`` and traces ``fn`` abstractly: (input specs, output
  specs), each a list of ``jax.ShapeDtypeStruct``."""
  import jax
  if not callable(fn):
    raise refuse_type("fn", fn, "a Pallas MGPU or Mosaic GPU kernel (a callable)",
                      "pass the kernel, e.g. plgpu.kernel(body, ...)")
  for i, a in enumerate(args):
    if not isinstance(a, np.ndarray):
      raise refuse_type(f"args[{i}]", a, "a NumPy array", "pass np.asarray(...)")
  specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
  from mosaic_async_store import compat
  with compat.mosaic_gpu_pallas_call(), _tracebacks_unfiltered():
    try:
      out_specs = jax.eval_shape(fn, *specs)
    except Exception as e:   # the user's kernel, traced by jax: anything can happen
      raise from_tracing(e, fn, args) from None
  return specs, jax.tree_util.tree_leaves(out_specs)


def lower_kernel(fn, specs):
  """The Mosaic GPU module of the one kernel ``fn`` launches, traced with ``specs``,
  with its dialect ops lowered (ready for ``toolchain.compile_module``)."""
  from mosaic_async_store import compat
  from mosaic_async_store.tools.pallas_capture import (lower_pallas_to_mosaic_modules,
                                                       lower_warpgroup_dialect)
  from mosaic_async_store.tools.executables import CompileError
  # (this package's frames counted as jax's: each op's location is the user's line)
  with (compat.mosaic_gpu_pallas_call(), _tracebacks_unfiltered(),
        compat.frames_not_user(*package_folders())):
    try:
      modules = lower_pallas_to_mosaic_modules(fn, *specs)
    except CompileError as e:
      raise refuse("fn", _brief(fn), "a Pallas MGPU or Mosaic GPU kernel", str(e)) from None
    except Exception as e:   # lowering runs the user's kernel body again
      raise from_lowering(e, fn, _brief(fn)) from None
  if len(modules) != 1:
    raise refuse("fn", f"a function that launches {len(modules)} kernels",
                 "one kernel", "check or compile each kernel on its own")
  module = modules[0]
  if _DIALECT.search(module.operation.get_asm(print_generic_op_form=True)):
    try:
      module = lower_warpgroup_dialect(module)   # Warpgroup semantics: ops and types left
    except CompileError as e:
      raise refuse("fn", _brief(fn), "a kernel whose Mosaic GPU dialect lowers",
                   first_error(str(e))) from None
  return module


def _brief(fn) -> str:
  name = getattr(fn, "__name__", None) or type(fn).__name__
  return f"<kernel {name}>"


def first_error(message: str) -> str:
  """A tool's message cut to its first ``error`` line (mlir-opt and ptxas print the
  whole module or every line after it), plus the ``note: see current operation``
  line, which names the op."""
  lines = [line.strip() for line in message.splitlines()]
  errors = [i for i, line in enumerate(lines) if "error" in line.lower() and i > 0]
  if not errors:
    return " ".join(message.split())[:400]
  first = lines[errors[0]]
  note = next((line for line in lines[errors[0] + 1:] if "see current operation" in line),
              "")
  return f"{lines[0].split(':')[0]}: {first}" + (f" ({note[:200]})" if note else "")


def compile_kernel(fn, *args, arch: str = "sm_90a", sm_count: int | None = None,
                   cuda_version: int | None = None, keep_dir=None):
  """Compiles the kernel ``fn`` (a Pallas MGPU or Mosaic GPU kernel) for ``arch`` on
  the CPU, traced with the NumPy arrays ``args``: its MLIR, PTX, cubin, SASS and static
  counts (``toolchain.Compiled``; ``stats.asynchronous`` counts TMA, bulk groups, WGMMA,
  tcgen05, st.async/red.async, barriers and setmaxnreg; ``stats.dynamic_shared_memory``
  is the shared memory per CTA the kernel is launched with).

  The kernel's device queries (its SM count, the compute capability Mosaic builds for,
  the CUDA version) are answered for ``arch``'s default GPU (an H100 for sm_90a, a B200
  for sm_100a: ``device_target.DEFAULTS``), with ``sm_count`` and ``cuda_version``
  (1000 * major + 10 * minor, e.g. 12080) replacing its values where given.

  Raises:
    AsyncStoreError / TypeError: a bad ``fn``, ``args``, ``arch``, ``sm_count`` or
      ``cuda_version``; an exception in the kernel's own code (its type, message and
      line); a tool's refusal (its first error line): a construct the arch lacks (e.g.
      WGMMA for sm_100a) names the arch to use, a module mlir-opt cannot take (a skew
      of this project's toolchain) says to report it.
    ToolchainError: a tool of the deviceless toolchain is missing.
  """
  import dataclasses
  from mosaic_async_store.tools import toolchain
  from mosaic_async_store.tools.ptx_stats import with_launch
  module = _lowered_for(fn, args, arch, sm_count, cuda_version)
  try:
    compiled = toolchain.compile_module(module, arch, keep_dir=keep_dir)
  except toolchain.CompileError as e:
    said = first_error(str(e))
    raise refuse("fn", _brief(fn), f"a kernel the deviceless toolchain compiles for {arch}"
                 f" ({said})", compile_fix(said, arch)) from None
  return dataclasses.replace(compiled, stats=with_launch(compiled.stats, str(module)))


def _lowered_for(fn, args, arch, sm_count, cuda_version):
  """``fn``'s module, traced and lowered while its device queries get the target's
  answers."""
  from mosaic_async_store import compat
  from mosaic_async_store.tools import toolchain
  from mosaic_async_store.tools.device_target import device_target
  toolchain.check_arch(arch)
  target = device_target(arch, sm_count=sm_count, cuda_version=cuda_version)
  with compat.answer_device_queries(target):
    specs, _ = kernel_specs(fn, args)
    return lower_kernel(fn, specs)


# A construct some archs lack: (word in the tool's error, the archs without it, the arch
# to compile for instead, why).
_ARCH_ONLY = (("wgmma", ("sm_100a", "sm_103a"), "sm_90a",
               "WGMMA exists on sm_90a only (sm_100a and newer multiply with tcgen05)"),
              ("tcgen05", ("sm_90a",), "sm_100a",
               "tcgen05 and tensor memory exist on sm_100a and newer"))


def compile_fix(said: str, arch: str) -> str:
  """The fix of a refusal: another arch where the construct is one ``arch`` lacks;
  "report it" where mlir-opt refused upstream's module (jaxlib built and verified it, so
  the cause is a skew of this project's toolchain, ``mlir_skew``); else the construct."""
  low = said.lower()
  for word, lacking, home, why in _ARCH_ONLY:
    if word in low and arch in lacking:
      return f"compile it for arch='{home}': {why}"
  if low.startswith("mlir-opt"):
    return ("this is a gap in this project's deviceless toolchain, not in the kernel: "
            "report it (with the kernel and the line above), since jaxlib built and "
            "verified this module")
  return ("change the construct the tool names, or report it if upstream's GPU path "
          "compiles it")
