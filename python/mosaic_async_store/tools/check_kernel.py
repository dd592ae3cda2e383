"""``check(fn, *args)``: a Pallas MGPU or Mosaic GPU kernel, lowered and compiled on the
CPU, bound to NumPy arrays as the kernel declares its parameters, run over its whole
grid by the checker.

    report = check(kernel, x, y)        # kernel: plgpu.kernel / pallas_call / as_gpu_kernel
    report.ok, report.findings, report.outputs   # outputs: the kernel's results

How the arrays reach the PTX: Mosaic outlines the body of the module's ``gpu.launch``
into the kernel, whose parameters are the values that body uses from outside it, in
the order of their first use there: memrefs, each a memref descriptor (``Memref``; in
the module a cast tagged ``mosaic_gpu.from_kernel_arg_idx = i``, i: the kernel's
inputs, then its outputs), and the block of TMA descriptors the host code encodes
(``TensorMap``s, rebuilt from that code by ``host_tma``).  The kernel's inputs are
``fn``'s arrays in the order the kernel takes them, which need not be ``fn``'s
(``kernel_binding``: upstream's ragged_dot launches ``kernel(group_sizes, lhs, rhs)``);
where ``fn`` computes operands or outputs around its kernel, ``fn`` runs on the CPU
around the kernel's run.  Outputs start as 0xA5 bytes, so that bytes the kernel never writes show.
"""

from __future__ import annotations

import collections
import dataclasses
import re

import numpy as np

from mosaic_async_store.check import subbyte
from mosaic_async_store.check.interp import Memref
from mosaic_async_store.check.report import Report, check_parsed
from mosaic_async_store.check.tensor_map import TensorMap
from mosaic_async_store.errors import refuse, refuse_limit

__all__ = ["check", "launch_shape", "kernel_parameters", "load_target", "report_json",
           "forget_lowerings"]

_CAST = re.compile(r"(%[\w#]+) = builtin\.unrealized_conversion_cast %[\w#]+ : [^\n]* to "
                   r"memref<[^\n]*mosaic_gpu\.from_kernel_arg_idx = (\d+)")
# tcgen05 instructions (inline PTX, NVVM ops) and the TMEM allocation, as Mosaic emits them.
_TCGEN05 = re.compile(r"tcgen05\.\w+")
_LAUNCH = re.compile(
    r"gpu\.launch [^\n]*?(?:clusters\([^)]*\) in \((?P<cluster>[^)]*)\) )?"
    r"blocks\([^)]*\) in \((?P<blocks>[^)]*)\) threads\([^)]*\) in \((?P<threads>[^)]*)\)"
    r"(?: dynamic_shared_memory_size (?P<smem>%[\w#]+))?")


def _constant(mlir: str, name: str) -> int:
  m = re.search(re.escape(name) + r" = arith\.constant (\d+)", mlir)
  if m is None:
    raise refuse("fn", f"a launch dimension {name} that is not a constant",
                 "kernels whose grid, block, cluster and SMEM size are static",
                 "make them static (Pallas and Mosaic do by default)")
  return int(m.group(1))


def launch_shape(mlir: str) -> dict[str, tuple[int, ...] | int]:
  """The ``gpu.launch`` of a Lane-level Mosaic module: grid (blocks), block (threads),
  cluster and dynamic SMEM bytes, from its constant operands."""
  m = _LAUNCH.search(mlir)
  if m is None:
    raise refuse("fn", "a kernel with no gpu.launch", "a Mosaic GPU kernel",
                 "pass a plgpu.kernel, pallas_call or mgpu.as_gpu_kernel")
  dims = lambda group: tuple(_constant(mlir, v.split("=")[1].strip())
                             for v in group.split(","))
  return {"grid": dims(m["blocks"]), "block": dims(m["threads"]),
          "cluster": dims(m["cluster"]) if m["cluster"] else (1, 1, 1),
          "smem_bytes": _constant(mlir, m["smem"]) if m["smem"] else 0}


def kernel_parameters(mlir: str, buffers=None) -> list:
  """The kernel's arguments in the PTX's parameter order (the order of first use in
  the launch body, ``host_tma.launch_parameters``): for a memref parameter its
  argument index (inputs, then outputs), an int; for a block of TMA descriptors its
  ``TensorMap``s over ``buffers`` (the kernel's arrays, inputs then outputs: each map
  is the same object as the buffer it reads), consecutive.  Without ``buffers``, a
  kernel with TMA descriptors is refused (its maps need the arrays)."""
  from mosaic_async_store.tools import host_tma
  if buffers is None:
    if "mosaic_gpu_init_tma" in mlir:
      raise refuse("buffers", None, "the kernel's arrays (inputs, then outputs) for a "
                   "kernel with TMA descriptors", "pass kernel_parameters(mlir, buffers)")
    buffers = [None] * (1 + max((int(i) for _, i in _CAST.findall(mlir)), default=-1))
  return host_tma.launch_parameters(mlir, buffers)


def _package_folders() -> tuple[str, ...]:
  """This package's folders (with the lowering), each ending in a separator."""
  import os
  import mosaic_async_store.lowering as lowering
  package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  return tuple(os.path.join(p, "") for p in (package, *lowering.__path__))


class _NeedsBlackwell(Exception):
  """The kernel lowered for sm_90a holds tcgen05 (``_lower``): ``tc`` its first."""

  def __init__(self, tc: str):
    super().__init__(tc)
    self.tc = tc


def _lower(fn, specs, arch: str = "sm_90a"):
  """The kernel's MLIR (for its launch shape and parameters) and its PTX for ``arch``
  with line info: each finding then names the user's Python line (``Finding.source``),
  the line that called this package's helpers rather than the helper's own.  Runs
  under the arch's device answers (``_lowered``); raises ``_NeedsBlackwell`` where a
  kernel lowered for sm_90a holds tcgen05, which only Blackwell has."""
  from mosaic_async_store import compat
  from mosaic_async_store.tools.toolchain import CompileError, mlir_to_ptx
  from mosaic_async_store.tools.user_kernel import compile_fix, first_error, lower_kernel
  with compat.frames_not_user(*_package_folders()):
    module = lower_kernel(fn, specs)
  mlir = str(module)
  if arch == "sm_90a" and (tc := _TCGEN05.search(mlir)) is not None:   # (before mlir-opt)
    raise _NeedsBlackwell(tc.group(0))
  try:   # only the PTX is run: no ptxas or SASS needed
    return mlir, mlir_to_ptx(module, arch, line_info=True)
  except CompileError as e:   # the fix says whose the cause is, as compile's does
    said = first_error(str(e))
    raise refuse("fn", f"<kernel {getattr(fn, '__name__', type(fn).__name__)}>",
                 f"a kernel the deviceless toolchain compiles for {arch} ({said})",
                 compile_fix(said, arch)) from None


# The lowerings ``check`` made last (``_lowered``): the same kernel checked again in this
# process (a test suite calling ``check`` once per test) is not lowered and compiled again.
_LOWERINGS: collections.OrderedDict = collections.OrderedDict()
_LOWERINGS_KEPT = 32


def forget_lowerings() -> None:
  """Empties ``check``'s cache of lowerings: the next ``check`` of every kernel lowers and
  compiles it again (after patching what a kernel calls, which its key does not see)."""
  _LOWERINGS.clear()


def _lowered(fn, args, arch, sm_count, cuda_version):
  """(specs, outs, mlir, ptx, arch): the kernel's parameter specs and outputs, its MLIR
  and PTX (``_lower``) for ``arch``; None: the kernel's own, sm_90a, or sm_100a where the
  kernel lowered for an H100 holds tcgen05 (it is then lowered again, with a B200's
  device answers: Mosaic chooses instructions by the device it is told of).  Kept for
  the next call with the same key (``kernel_cache.lowering_key``: the function, its
  closure's and partial's values, the arrays' shapes and dtypes, arch, sm_count and
  cuda_version; the last ``_LOWERINGS_KEPT``); a refusal is not kept."""
  from mosaic_async_store.tools.kernel_cache import lowering_key
  key = lowering_key(fn, args, arch, sm_count, cuda_version)
  if key is not None and key in _LOWERINGS:
    _LOWERINGS.move_to_end(key)
    return _LOWERINGS[key]
  lowered = _lowered_afresh(fn, args, arch, sm_count, cuda_version)
  if key is not None:
    _LOWERINGS[key] = lowered
    while len(_LOWERINGS) > _LOWERINGS_KEPT:
      _LOWERINGS.popitem(last=False)
  return lowered


def _lowered_afresh(fn, args, arch, sm_count, cuda_version):
  """``_lowered``, without its cache."""
  from mosaic_async_store import compat
  from mosaic_async_store.tools.device_target import device_target
  from mosaic_async_store.tools.user_kernel import kernel_specs
  for target_arch in (arch,) if arch is not None else ("sm_90a", "sm_100a"):
    target = device_target(target_arch, sm_count=sm_count, cuda_version=cuda_version)
    with compat.answer_device_queries(target):
      specs, outs = kernel_specs(fn, args)
      _refuse_unpackable(args, outs)
      try:
        # (sm_90a: the two-argument call, the seam tests and tools wrap)
        arch_arg = () if target_arch == "sm_90a" else (target_arch,)
        return (specs, outs, *_lower(fn, specs, *arch_arg), target_arch)
      except _NeedsBlackwell as e:
        if arch is not None:
          raise refuse("arch", arch, f"sm_100a or sm_103a for a kernel with {e.tc} "
                       "(tcgen05 and tensor memory exist on Blackwell only)",
                       "pass arch='sm_100a', or leave arch out: the kernel's own is "
                       "taken") from None
  raise AssertionError("sm_100a lowering raised _NeedsBlackwell")   # (not reached)


def check(fn, *args, schedules: int = 3, budget=None, sm_count: int | None = None,
          cuda_version: int | None = None, arch: str | None = None,
          strict: bool = False, jobs: int | None = None) -> Report:
  """Checks the kernel ``fn`` on the NumPy arrays ``args`` (its inputs, in order).
  The kernel ``fn`` launches gets them in its own operand order; what ``fn`` computes
  around it (operands from ``args``, outputs from its results) runs on the CPU
  (``kernel_binding``).

  ``fn`` is a Pallas MGPU kernel (``plgpu.kernel``, ``pl.pallas_call`` with the Mosaic GPU
  backend) or a Mosaic GPU kernel (``mgpu.as_gpu_kernel``).  It is lowered and compiled
  on the CPU for ``arch`` ("sm_90a", "sm_100a" or "sm_103a"; None: the kernel's own,
  sm_90a unless the kernel uses tcgen05, then sm_100a); every cluster of its grid runs, one after another, each under
  ``schedules`` schedules (races between clusters are not looked for).  ``outputs`` are
  ``fn``'s outputs (NumPy arrays) from the kernel's after the grid ran
  (``check.check_ptx``), or None.
  Arrays of 2- and 4-bit elements (ml_dtypes ``int4``, ``uint4``, ``float4_e2m1fn``,
  ``int2``, ``uint2``) reach the kernel packed as it reads them and come back unpacked
  (``check.subbyte``); 1- and 6-bit types are refused.
  ``strict``: warnings (the ISA's letter broken where widely used code relies on it:
  docs/checker.md, "Warnings") fail the check too; without it they are reported and
  ``Report.ok`` ignores them.
  ``budget`` (``mosaic_async_store.check.Budget``; None: its defaults) bounds what each
  schedule's run may spend; a schedule past it is in ``Report.unfinished``.  The kernel's
  device queries are answered for the arch's GPU (``device_target``: an H100 for sm_90a,
  a B200 for sm_100a), with ``sm_count`` and ``cuda_version`` (1000 * major + 10 *
  minor) replacing its values where given.
  ``jobs``: the runs (a cluster under a schedule) at a time, each in a worker process
  (``check.parallel``; None: ``MAS_CHECK_JOBS`` where set, else the machine's cores);
  the report is the same for every ``jobs``.  The same kernel checked again in this
  process (same function, closure values, shapes, dtypes and target) reuses its
  lowering (``forget_lowerings``).

  On jax 0.11 and newer, ``pl.pallas_call`` has no Mosaic GPU lowering of its own; a
  ``pl.pallas_call`` that ``fn`` builds while it is traced goes through upstream's
  current path (``compat.mosaic_gpu_pallas_call``), one built before is refused.

  Raises (before anything runs; AsyncStoreError, or TypeError for a value of the wrong
  kind, each naming the parameter): arguments that are not NumPy arrays, a count or
  shape the kernel does not take, an exception raised by the kernel's own code (its
  type, message and line), a function that is not one Mosaic GPU kernel, a kernel the
  toolchain cannot compile (the tool's first error line), an opcode or run-time case
  the checker does not run exactly (named, with its PTX line).
  """
  if arch is not None:
    from mosaic_async_store.tools.toolchain import check_arch
    check_arch(arch)
  specs, outs, mlir, ptx, arch = _lowered(fn, args, arch, sm_count, cuda_version)
  # the parameters (TMA descriptors rebuilt from the host code), then the first opcode
  # the checker cannot run, both before the launch
  around = _Around(fn, [np.array(a) for a in args], outs, mlir, arch, sm_count, cuda_version)
  inputs, results = around.inputs, around.results
  buffers = inputs + [_poisoned(o) for o in results]   # (the kernel's, in its order)
  params = [p if isinstance(p, TensorMap) else Memref(buffers[p])
            for p in kernel_parameters(mlir, buffers)]
  kernel = _parsed(ptx)
  shape = launch_shape(mlir)
  if shape["block"][1:] != (1, 1):
    raise refuse_limit("fn", f"block {shape['block']}", "one-dimensional blocks (x only; grids and "
                 "clusters may have three)", "flatten the block into x")
  report = check_parsed(kernel, params, smem_bytes=shape["smem_bytes"],
                        block=shape["block"], cluster=shape["cluster"], grid=shape["grid"],
                        schedules=schedules, budget=budget, strict=strict, jobs=jobs)
  if report.outputs is None:
    return report
  final = {next(i for i, b in enumerate(buffers) if b is p.array): out
           for p, out in zip(params, report.outputs)}   # (each buffer by its object)
  kernel_outs = [final.get(len(inputs) + r, buffers[len(inputs) + r])
                 for r in range(len(results))]
  return dataclasses.replace(report, outputs=around.outputs(kernel_outs))


class _Around:
  """The kernel's ``inputs`` (``fn``'s ``arrays`` in the kernel's operand order) and
  output specs (``results``, in its result order), and ``outputs``: ``fn``'s outputs
  from the kernel's.  Where ``fn`` passes its arrays to the kernel and returns its
  results (``kernel_binding.binding``; a module without that record: in order), they
  are picked; where it computes around the kernel, ``fn`` runs on the CPU around it
  (``kernel_binding.around_on_cpu``)."""

  def __init__(self, fn, arrays, outs, mlir, arch, sm_count, cuda_version):
    from mosaic_async_store.tools import kernel_binding
    bound = kernel_binding.binding(mlir)
    self._cpu = None
    if bound is None:
      self.inputs, self.results, self._order = arrays, outs, list(range(len(outs)))
    elif bound.direct:
      self.inputs, self._order = [arrays[i] for i in bound.inputs], list(bound.outputs)
      self.results = [outs[bound.outputs.index(r)] for r in range(bound.results)]
    else:
      from mosaic_async_store.tools.device_target import device_target
      self._cpu = (fn, arrays, device_target(arch, sm_count=sm_count,
                                             cuda_version=cuda_version))
      self.inputs, self.results, _ = kernel_binding.around_on_cpu(*self._cpu)

  def outputs(self, kernel_outputs: list) -> list:
    if self._cpu is None:
      return [kernel_outputs[r] for r in self._order]
    from mosaic_async_store.tools import kernel_binding
    return kernel_binding.around_on_cpu(*self._cpu, kernel_outputs)[2]


def _parsed(ptx: str):
  """The kernel's ``PtxKernel``, or the refusal of its first opcode the checker does
  not run, in ``fn``'s terms."""
  from mosaic_async_store.check.interp import PtxKernel
  try:
    return PtxKernel(ptx)
  except NotImplementedError as e:
    raise refuse_limit("fn", "a kernel whose PTX has " + " ".join(str(e).split()),
                 "the opcodes docs/checker.md lists as run exactly",
                 "check the rest of the protocol in a kernel without it, or report "
                 "the opcode") from None


def _poisoned(spec) -> np.ndarray:
  """An output buffer of 0xA5 bytes (2- and 4-bit elements: packed, ``subbyte``): what
  the kernel never writes shows."""
  dtype = np.dtype(spec.dtype)
  raw = np.full(subbyte.nbytes(dtype, spec.shape), 0xA5, np.uint8)
  return subbyte.unpack(raw, dtype, spec.shape)


def _refuse_unpackable(args, outs) -> None:
  """Refuses an input or output of a sub-byte width whose layout no kernel fixes (1- or
  6-bit elements: ``subbyte.refusal``); 2- and 4-bit ones are packed."""
  for i, a in enumerate(args):
    if (refused := subbyte.refusal(f"args[{i}]", a.dtype)) is not None:
      raise refused
  for j, o in enumerate(outs):
    if (refused := subbyte.refusal("fn", o.dtype, f"a kernel whose output {j} is an "
                                   "array")) is not None:
      raise refused


def load_target(spec: str):
  """See :func:`mosaic_async_store.tools.user_kernel.load_target`."""
  from mosaic_async_store.tools.user_kernel import load_target as _load
  return _load(spec)


def report_json(report: Report) -> dict:
  """A report as plain JSON-able data."""
  return {"ok": report.ok, "schedules": list(report.schedules), "strict": report.strict,
          "findings": [{**dataclasses.asdict(f), "severity": f.severity}
                       for f in report.findings],
          "unfinished": [dataclasses.asdict(u) for u in report.unfinished],
          "outputs": None if report.outputs is None else
          [{"dtype": str(o.dtype), "shape": list(o.shape)} for o in report.outputs]}
