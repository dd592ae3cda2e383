"""The Mosaic GPU modules that Pallas and ``mgpu.as_gpu_kernel`` build, captured on a
CPU machine.

``jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",))`` runs the real
lowering without a GPU.  Each kernel's module reaches upstream's Mosaic GPU lowering
rule, which serializes it into a custom call: Pallas MGPU calls the rule directly,
``as_gpu_kernel`` binds the primitive the rule is registered for.  Observing that rule
on both routes for the duration of one lowering (``compat.mosaic_gpu_lowering_observed``)
keeps a copy of each module for ``toolchain.compile_module``.
"""

from __future__ import annotations

import io
import re
from typing import Any, Callable

from mosaic_async_store import compat
from mosaic_async_store.tools import kernel_binding, mlir_locations
from mosaic_async_store.tools.executables import CompileError

__all__ = ["lower_pallas_to_mosaic_modules", "lower_warpgroup_dialect"]

_MOSAIC_OPS = re.compile(r'"mosaic_gpu\.[\w.]+"\(')


def _clone(module: Any) -> Any:
  """A copy of ``module`` in its own context, independent of later passes."""
  from jaxlib.mlir import ir
  buffer = io.BytesIO()
  module.operation.write_bytecode(buffer)
  return ir.Module.parse(buffer.getvalue(), context=module.context)


def lower_pallas_to_mosaic_modules(fn: Callable[..., Any], *args: Any) -> list:
  """Lowers ``fn`` for CUDA and returns the Mosaic GPU module of each kernel.

  Args:
    fn: a function that calls Pallas MGPU kernels (``plgpu.kernel``,
      ``pl.pallas_call`` with the Mosaic GPU backend) or Mosaic GPU kernels
      (``mgpu.as_gpu_kernel``), or is one.
    *args: arguments, or ``jax.ShapeDtypeStruct``s, to trace ``fn`` with.

  Returns:
    One ``jaxlib.mlir.ir.Module`` per kernel, in lowering order, as Pallas or
    ``as_gpu_kernel`` built them (an op of no user line has its enclosing equation's:
    ``mlir_locations.enclosing_when_unknown``): Mosaic GPU dialect ops already
    lowered (both run layout inference and ``lower_mgpu_dialect`` themselves);
    Warpgroup-semantics modules still need ``lower_warpgroup_dialect`` before
    ``compile_module``.  A lone kernel's module carries which of ``args`` each of
    its operands is (``kernel_binding.annotate``).

  Raises:
    CompileError: when ``fn`` lowers no Mosaic GPU kernel.
  """
  import jax
  captured: list = []
  lowered: list = []

  def lower() -> None:
    # (keep_unused: @main then takes every argument, so that its numbering is fn's)
    lowered[:] = [jax.jit(fn, keep_unused=True).trace(*args).lower(
        lowering_platforms=("cuda",))]

  # (an equation jax finds no user frame for, such as emit_pipeline's copies, takes
  # the line of the kernel's equation enclosing it: mlir_locations)
  with (compat.mosaic_gpu_lowering_observed(lambda module: captured.append(_clone(module))),
        compat.equation_locations(mlir_locations.enclosing_when_unknown)):
    lower()
    if not captured:
      # jit caches lowerings: a function lowered before never reaches the
      # rule again, so forget the caches and lower once more.
      jax.clear_caches()
      lower()
  if not captured:
    raise CompileError(
        "no Mosaic GPU kernel was lowered: fn must call a Pallas MGPU kernel"
        " (plgpu.kernel or pallas_call with plgpu.CompilerParams) or be a Mosaic GPU"
        " kernel (mgpu.as_gpu_kernel)")
  if len(captured) == 1:   # which of fn's arrays each operand is (kernel_binding)
    kernel_binding.annotate(captured[0], lowered[0].compiler_ir("stablehlo"),
                            len(jax.tree_util.tree_leaves(args)))
  return captured


def _run_passes(module: Any, passes: str) -> None:
  from jaxlib.mlir import passmanager
  passmanager.PassManager.parse(
      f"builtin.module({passes})", module.context).run(module.operation)


def lower_warpgroup_dialect(module: Any, *, arch: tuple[int, int] = (9, 0)):
  """Does what upstream does to a Warpgroup module before its C++ pipeline.

  Upstream (Pallas and ``_kernel_to_module``) runs canonicalize, layout
  inference and ``lower_mgpu_dialect`` while it builds the kernel; what is
  left are ``builtin.unrealized_conversion_cast`` ops carrying
  ``#mosaic_gpu`` layout attributes, which the first ``canonicalize`` of
  Mosaic's C++ pipeline folds away.  mlir-opt cannot parse those attributes,
  so that fold happens here, in jaxlib's context where the dialect exists.
  Dialect ops still present are lowered without a LaunchContext (upstream's
  test-only path): enough for loads, stores and arithmetic, not for ops that
  need the launch (TMA, barriers, predicates).

  Args:
    module: a Mosaic GPU ``ir.Module``; it is not modified.
    arch: (major, minor) for layout inference.

  Returns:
    A new module that ``toolchain.compile_module`` accepts.

  Raises:
    CompileError: when a dialect op cannot be lowered outside its launch.
  """
  from jaxlib.mlir import ir
  mgpu = compat.mosaic_gpu()
  clone = _clone(module)
  with clone.context, ir.Location.unknown():
    text = clone.operation.get_asm(print_generic_op_form=True)
    if (op := _MOSAIC_OPS.search(text)) is not None:
      try:
        _run_passes(clone, "canonicalize,cse")
        mgpu.infer_layout(clone, arch=arch)
        mgpu.lower_mgpu_dialect(clone, None)
      except Exception as e:  # upstream raises many kinds here
        raise CompileError(
            f"could not lower the Mosaic GPU dialect outside its kernel launch"
            f" (first op {op.group(0)[:-1]}): {type(e).__name__}: {e}. Build"
            " the module through Pallas or _kernel_to_module, which lower the"
            " dialect with the LaunchContext.") from e
    _run_passes(clone, "canonicalize,cse")
    _bypass_barrier_casts(clone)
    _run_passes(clone, "canonicalize,cse")
    clone.operation.verify()
  return clone


def _bypass_barrier_casts(module: Any) -> None:
  """Folds ``x -> memref<!mosaic_gpu.barrier> -> y`` cast chains into ``x -> y``.

  Pallas passes barriers as ``memref<Nxi64>`` re-typed to the dialect's
  barrier memref; Mosaic's C++ pipeline removes the middle type, mlir-opt
  cannot parse it, and canonicalize only folds ``A -> B -> A`` round trips.
  """
  from jaxlib.mlir import ir
  from jaxlib.mlir.dialects import builtin
  chains = []

  def visit(op):
    op = op.operation
    if op.name == "builtin.unrealized_conversion_cast" and len(op.operands) == 1:
      src = op.operands[0].owner
      src_op = getattr(src, "operation", None)
      if (src_op is not None and src_op.name == "builtin.unrealized_conversion_cast"
          and len(src_op.operands) == 1 and "!mosaic_gpu.barrier" in str(src_op.results[0].type)):
        chains.append((src_op, op))
    return ir.WalkResult.ADVANCE

  module.operation.walk(visit)
  for first, second in chains:
    with ir.InsertionPoint(second), second.location:
      direct = builtin.unrealized_conversion_cast([second.results[0].type], [first.operands[0]])
    second.results[0].replace_all_uses_with(direct)
    second.erase()
