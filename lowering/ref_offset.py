"""A ref's offset from its allocation, static or as proven from the ops that sliced it.

``utils.memref_ptr`` folds the memref's offset (static, or the descriptor's
run-time value) into the base address; the store's plan computes addresses
and the swizzle from that base.  ``ref_offset`` says what is known about the
offset before run time, for ``validate.check_ref_offset``.
"""

from __future__ import annotations

import math

from jaxlib.mlir import ir

from mosaic_async_store.plan.validate import DYNAMIC

__all__ = ["ref_offset"]

# Ops whose result has the same offset as their source operand (operand 0).
_SAME_OFFSET = ("memref.cast", "memref.transpose", "memref.collapse_shape",
                "memref.expand_shape")


def _defining_op(value):
  owner = value.owner
  if owner is None or isinstance(owner, ir.Block):
    return None
  return owner.operation if hasattr(owner, "operation") else owner


def ref_offset(ref: ir.Value, depth: int = 0) -> tuple[int, int | None]:
  """(offset, step) in elements: the offset is ``offset + step * k`` for some int k.

  ``step`` is 0 for a static offset and None when a dynamic offset cannot be
  traced.  Traced: ``memref.subview`` (``utils.memref_slice``, Pallas'
  ``ref.at[...]``) of a ref with static strides, where each dynamic index moves
  the offset by a multiple of its dim's stride; ``memref.reinterpret_cast``
  whose dynamic offset is another ref's (``memref.extract_strided_metadata``,
  as upstream's unit-dim dropping does); casts, transposes and reshapes, which
  keep the offset.
  """
  strides_and_offset = ir.MemRefType(ref.type).get_strides_and_offset()
  if strides_and_offset[1] != DYNAMIC:
    return int(strides_and_offset[1]), 0
  op = _defining_op(ref)
  if op is None or depth > 32:
    return 0, None
  if op.name in _SAME_OFFSET:
    return ref_offset(op.operands[0], depth + 1)
  if op.name == "memref.subview":
    source = op.operands[0]
    src_strides, _ = ir.MemRefType(source.type).get_strides_and_offset()
    base, step = ref_offset(source, depth + 1)
    if step is None or DYNAMIC in src_strides:
      return 0, None
    for k, off in enumerate(ir.DenseI64ArrayAttr(op.attributes["static_offsets"])):
      if off == DYNAMIC:
        step = math.gcd(step, src_strides[k])
      else:
        base += off * src_strides[k]
    return base, step
  if op.name == "memref.reinterpret_cast":
    [off] = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    if off != DYNAMIC:
      return int(off), 0
    dyn = _defining_op(op.operands[1])  # operands: source, offsets, sizes, strides
    if dyn is not None and dyn.name == "memref.extract_strided_metadata" and \
        op.operands[1] == dyn.results[1]:   # result 1 of the metadata is the offset
      return ref_offset(dyn.operands[0], depth + 1)
  return 0, None
