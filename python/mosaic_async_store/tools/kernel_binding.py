"""Which of ``fn``'s arrays each of its Mosaic GPU kernel's operands is, and which kernel
result each of ``fn``'s outputs is.

A kernel's operands are not ``fn``'s arguments in ``fn``'s order: upstream's
``ragged_dot(lhs, rhs, group_sizes=...)`` launches ``kernel(group_sizes, lhs, rhs)``,
and ``transposed_ragged_dot`` computes four of its seven operands (group starts, ends,
...) from ``group_sizes`` before the launch.  The kernel module numbers its operands in
the launch's order (its casts tagged ``mosaic_gpu.from_kernel_arg_idx = i``, the host's
table of buffer pointers, which the TMA descriptors of ``host_tma`` address), so
``check`` must hand it its operands in that order.

``annotate`` reads the order from the StableHLO module that ``jax.jit(fn)`` lowers to
for CUDA: the kernel is one ``stablehlo.custom_call @mosaic_gpu...``; each operand is
followed back to an argument of ``@main`` (through ``func.call``s into private
functions), each of ``@main``'s results back to a result of that call.  It writes what
it found into the kernel module's attributes, so that the module's text (what ``check``
reads, ``binding``) carries it:

  ``mosaic_async_store.kernel_inputs = array<i64: 2, 0, 1>``: per kernel operand, the
  index of ``fn``'s (flattened) argument it is, or -1 where ``fn`` computes it;
  ``mosaic_async_store.kernel_outputs = array<i64: 0>``: per output of ``fn``, the
  index of the kernel result it is, or -1 where ``fn`` computes it;
  ``mosaic_async_store.kernel_results = N``: the kernel's number of results.

Where ``fn`` computes around its kernel, ``around_on_cpu`` runs ``fn`` on the CPU with
the kernel replaced by a host callback (``compat.kernel_lowering_on_cpu``, as
``checking()`` does): its concrete operands are the kernel's inputs, and ``fn``'s
outputs are computed from the kernel outputs the checker left.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["annotate", "binding", "Binding", "around_on_cpu"]

_INPUTS = "mosaic_async_store.kernel_inputs"
_OUTPUTS = "mosaic_async_store.kernel_outputs"
_RESULTS = "mosaic_async_store.kernel_results"


def _ops(outer):
  """(the Mosaic GPU custom calls, func.func by name, func.call ops by callee) of the
  StableHLO module ``outer``."""
  from jaxlib.mlir import ir
  kernels, funcs, calls = [], {}, {}

  def visit(op):
    op = op.operation
    if op.name == "stablehlo.custom_call" and ir.StringAttr(
        op.attributes["call_target_name"]).value.startswith("mosaic_gpu"):
      kernels.append(op)
    elif op.name == "func.func":
      funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
    elif op.name == "func.call":
      calls.setdefault(ir.FlatSymbolRefAttr(op.attributes["callee"]).value, []).append(op)
    return ir.WalkResult.ADVANCE

  outer.operation.walk(visit)
  return kernels, funcs, calls


def _argument_of(value, calls) -> int:
  """The index of @main's argument that ``value`` is, or -1 (an op's result: computed)."""
  from jaxlib.mlir import ir
  while isinstance(arg := value.maybe_downcast(), ir.BlockArgument):
    owner = arg.owner.owner.operation   # (the block's op)
    if owner.name != "func.func":
      return -1
    name = ir.StringAttr(owner.attributes["sym_name"]).value
    if name == "main":
      return arg.arg_number
    sites = calls.get(name, [])
    if len(sites) != 1:
      return -1
    value = sites[0].operands[arg.arg_number]
  return -1


def _result_of(value, kernel, funcs) -> int:
  """The index of ``kernel``'s result that ``value`` is, or -1 (computed, or one of
  ``fn``'s arguments returned as it is)."""
  from jaxlib.mlir import ir
  while isinstance(result := value.maybe_downcast(), ir.OpResult):
    op = result.owner.operation
    if op == kernel:
      return result.result_number
    if op.name != "func.call":
      return -1
    callee = funcs[ir.FlatSymbolRefAttr(op.attributes["callee"]).value]
    value = list(callee.regions[0].blocks[0].operations)[-1].operands[result.result_number]
  return -1


def annotate(module, outer, nargs: int) -> None:
  """Writes into the kernel ``module`` (its context's ``ir.Module``) how the one Mosaic
  GPU custom call of ``outer`` (``jax.jit(fn, keep_unused=True)``'s StableHLO for CUDA,
  ``nargs`` flattened arguments) binds to ``fn``'s arguments and outputs (module doc).
  Writes nothing where ``outer`` holds no such call or more than one, or where the call
  aliases outputs to operands (``input_output_aliases``, refused elsewhere)."""
  from jaxlib.mlir import ir
  kernels, funcs, calls = _ops(outer)
  if len(kernels) != 1:
    return
  kernel, main = kernels[0], funcs.get("main")
  if "output_operand_aliases" in kernel.attributes and len(
      ir.ArrayAttr(kernel.attributes["output_operand_aliases"])):
    return
  ours = main is not None and len(main.regions[0].blocks[0].arguments) == nargs
  inputs = [_argument_of(v, calls) if ours else -1 for v in kernel.operands]
  outputs = [_result_of(v, kernel, funcs) if ours else -1
             for v in (list(main.regions[0].blocks[0].operations)[-1].operands
                       if main is not None else [])]
  with module.context:
    attributes = module.operation.attributes
    attributes[_INPUTS] = ir.DenseI64ArrayAttr.get(inputs)
    attributes[_OUTPUTS] = ir.DenseI64ArrayAttr.get(outputs)
    attributes[_RESULTS] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64),
                                              len(kernel.results))


def _ints(mlir: str, name: str):
  m = re.search(re.escape(name) + r" = array<i64(?::([-\d,\s]*))?>", mlir)
  return None if m is None else [int(v) for v in (m[1] or "").split(",") if v.strip()]


@dataclasses.dataclass(frozen=True)
class Binding:
  """``annotate``'s record (module doc): ``inputs`` (per kernel operand, ``fn``'s
  argument or -1), ``outputs`` (per output of ``fn``, the kernel result or -1),
  ``results`` (the kernel's number of results)."""

  inputs: tuple
  outputs: tuple
  results: int

  @property
  def direct(self) -> bool:
    """Whether ``fn`` passes its arrays to the kernel and returns every kernel result,
    computing nothing around it."""
    return -1 not in self.inputs and set(self.outputs) == set(range(self.results))


def binding(mlir: str) -> Binding | None:
  """The ``Binding`` that ``annotate`` wrote into the kernel module's text ``mlir``, or
  None where it wrote none (a module made some other way)."""
  inputs, outputs = _ints(mlir, _INPUTS), _ints(mlir, _OUTPUTS)
  results = re.search(re.escape(_RESULTS) + r" = (\d+)", mlir)
  if inputs is None or outputs is None or results is None:
    return None
  return Binding(tuple(inputs), tuple(outputs), int(results[1]))


def around_on_cpu(fn, arrays, target, kernel_outputs=None):
  """Runs ``fn(*arrays)`` on the CPU with its one Pallas MGPU kernel replaced by a host
  callback that keeps the kernel's concrete operands and returns ``kernel_outputs``
  (NumPy arrays, in the kernel's result order; None: zeros), under ``target``'s device
  answers.  Returns (the kernel's operands, its result specs, ``fn``'s outputs).
  Refuses a ``fn`` that runs no such kernel there (``mgpu.as_gpu_kernel``'s has no CPU
  lowering to replace) or more than one."""
  import jax
  import numpy as np
  from mosaic_async_store import compat
  from mosaic_async_store.errors import refuse
  seen = []

  def make_rule(prim, own_rule):
    def rule(ctx, *operands, **params):
      if not compat.is_mosaic_gpu_kernel(params):
        return own_rule(ctx, *operands, **params)
      specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ctx.avals_out]

      def host(*xs):
        seen.append(([np.array(x) for x in xs], specs))
        outs = kernel_outputs or [np.zeros(s.shape, s.dtype) for s in specs]
        return [np.asarray(o, s.dtype).reshape(s.shape) for o, s in zip(outs, specs)]

      return compat.lower_as(ctx, lambda *xs: jax.pure_callback(host, specs, *xs),
                             operands)
    return rule

  with (compat.answer_device_queries(target), compat.mosaic_gpu_pallas_call(),
        compat.kernel_lowering_on_cpu(make_rule)):
    jax.clear_caches()   # (so that fn lowers afresh, with the callback, and no other way)
    try:
      outs = jax.tree_util.tree_leaves(jax.jit(fn)(*arrays))
    except Exception as e:   # (jax's, where the CPU cannot lower or run what fn does)
      said = (str(e).strip().splitlines() or [""])[0][:200]
      raise refuse("fn", f"a function that computes around its kernel, which fails on "
                   f"the CPU ({type(e).__name__}: {said})", "a computation around the "
                   "kernel that the CPU runs (check runs it there, the kernel in the "
                   "checker; an mgpu.as_gpu_kernel has no CPU lowering to replace)",
                   "pass the kernel's own operands to a fn that only launches it") from None
    finally:
      jax.clear_caches()
  if len(seen) != 1:
    raise refuse("fn", f"a function that computes around its kernel and runs {len(seen)} "
                 "Pallas MGPU kernels on the CPU", "one plgpu.kernel or pl.pallas_call "
                 "(check runs the computation around it on the CPU)", "pass the kernel's "
                 "own operands to a fn that only launches it")
  return seen[0][0], seen[0][1], [np.asarray(o) for o in outs]
