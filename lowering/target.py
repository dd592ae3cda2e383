"""Where the bytes go at run time: the target CTA's rank and the mapped addresses.

When the kernel's cluster shape is static (the enclosing ``gpu.launch`` has
constant cluster sizes, as every Mosaic GPU kernel does), the target's linear
rank is built from constants: for a cluster that spans only ``cluster_dim``
it is just ``cluster_idx``, with no run-time cluster queries at all.
``emit_addresses`` forms each store's address from the (mapped) base as the
plan's address steps say.

``target_kind`` decides, before any IR is built, whether the target is the
executing CTA ("local"), another CTA ("peer"), or either, depending on which
CTA runs the code ("either"): ``cluster_idx`` is evaluated for every
coordinate the executing CTA can have along ``cluster_dim``.
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, gpu, llvm

from mosaic_async_store.plan import validate
from mosaic_async_store.errors import refuse
from mosaic_async_store.lowering import ptx
from mosaic_async_store.plan.address_steps import AddressState, formula_arithmetic

__all__ = ["static_cluster_shape", "target_rank", "smem_address", "emit_addresses",
           "target_kind", "is_own_rank", "check_cluster_args"]

_CLUSTER_SEGMENTS = (7, 8, 9)  # gpu.launch operand segments: deps, grid xyz, block xyz, cluster xyz


def static_cluster_shape() -> tuple[int, int, int] | None:
  """The cluster shape of the enclosing gpu.launch, if it is made of constants."""
  try:
    op = ir.InsertionPoint.current.block.owner
  except ValueError:
    return None
  while op is not None:
    operation = op.operation if hasattr(op, "operation") else op
    if operation.name == "gpu.launch":
      segs = list(ir.DenseI32ArrayAttr(operation.attributes["operandSegmentSizes"]))
      starts = [sum(segs[:i]) for i in range(len(segs))]
      if any(segs[s] != 1 for s in _CLUSTER_SEGMENTS):
        return (1, 1, 1)
      # No CTA coordinate (dimension -1): constants and integer arithmetic on them.
      dims = [_evaluate(operation.operands[starts[s]], -1, 0) for s in _CLUSTER_SEGMENTS]
      return None if None in dims else tuple(dims)
    op = operation.parent
  return None


def _as_i32(value) -> ir.Value:
  i32 = ir.IntegerType.get_signless(32)
  if isinstance(value, int):
    return arith.constant(i32, value)
  if isinstance(value.type, ir.IndexType):
    return arith.index_cast(i32, value)
  if isinstance(value.type, ir.IntegerType) and ir.IntegerType(value.type).width != 32:
    return arith.trunci(i32, value) if ir.IntegerType(value.type).width > 32 else arith.extui(i32, value)
  return value


def _times(a, b):
  """a * b where either may be a Python int (folded) or an i32 value."""
  if isinstance(a, int) and isinstance(b, int):
    return a * b
  if isinstance(b, int) and b == 1:
    return a
  if isinstance(a, int) and a == 1:
    return b
  return arith.muli(_as_i32(a), _as_i32(b))


def target_rank(cluster_dim, cluster_idx, cluster_shape) -> ir.Value:
  """Linear rank in the cluster of the CTA at ``cluster_idx`` along ``cluster_dim``.

  Other dimensions keep the executing CTA's coordinates (upstream semantics);
  with a static cluster shape, dimensions of size 1 contribute nothing.
  """
  dim = int(cluster_dim)
  rank, stride = None, 1
  for d in range(3):
    size = cluster_shape[d] if cluster_shape else None
    if d == dim:
      idx = _as_i32(cluster_idx)
    elif size == 1:
      idx = None  # the coordinate is always 0
    else:
      idx = _as_i32(gpu.cluster_block_id(gpu.Dimension(d)))
    if idx is not None:
      term = _as_i32(_times(idx, stride))
      rank = term if rank is None else arith.addi(rank, term)
    if size is None:
      size = _as_i32(gpu.cluster_dim_blocks(gpu.Dimension(d)))
    stride = _times(stride, size)
  return rank if rank is not None else _as_i32(0)


def smem_address(ptr: ir.Value) -> ir.Value:
  """The 32-bit shared-window address of an ``!llvm.ptr<3>``."""
  return llvm.ptrtoint(ir.IntegerType.get_signless(32), ptr)


@formula_arithmetic
class I32:
  """An i32 IR value with the operators of the plan's address formulas (those of
  ``address_steps.U32``): each operator builds one arith op, an int operand becomes an
  ``arith.constant`` just before it, and a shift by 0 builds nothing.  So
  ``Affine.evaluate``, ``geometry.swizzle_bytes`` and ``AddressStep.run`` emit the
  very arithmetic the verifier ran on NumPy."""

  __slots__ = ("value",)
  OPS = {"__add__": arith.addi, "__mul__": arith.muli, "__xor__": arith.xori,
         "__and__": arith.andi, "__lshift__": arith.shli, "__rshift__": arith.shrui}

  def __init__(self, value: ir.Value):
    self.value = value

  def constant(self, x: int) -> "I32":
    return I32(arith.constant(ir.IntegerType.get_signless(32), int(x)))

  def _with(self, other, op) -> "I32":
    other = other.value if isinstance(other, I32) else self.constant(other).value
    return I32(op(self.value, other))


class AddressBuilder:
  """Runs a plan's address steps (``AddressStep.emit``) on IR: an ``AddressState``
  of ``I32`` values (the thread index, each base's swizzled offset and its address,
  the mapped base plus the offset, and the shared parts of split steps)."""

  def __init__(self, plan, base_addr: ir.Value, tid: ir.Value):
    self.state = AddressState(I32(tid), I32(base_addr), plan.geometry.swizzle)

  def emit_address(self, step) -> tuple[ir.Value, int]:
    base, imm = step.run(self.state)
    return self.state.addresses[base].value, imm


def emit_addresses(plan, base_addr, tid):
  """Yields (address value, immediate) for every instruction, as
  ``plan.address_steps`` say (each step's ``emit``), each emitted just before its
  store: an address computed where it is used is live only from there, so ptxas
  needs fewer registers than for every base computed up front."""
  builder = AddressBuilder(plan, base_addr, tid)
  for step in plan.address_steps:
    yield step.emit(builder)


def is_own_rank(rank: ir.Value) -> ir.Value:
  """i1: ``rank`` is the executing CTA's own ``%cluster_ctarank``."""
  return arith.cmpi(arith.CmpIPredicate.eq, _as_i32(rank), ptx.emit_cluster_ctarank())


# The largest cluster extent along one dimension (16 CTAs with a non-portable
# cluster size): the executing CTA's coordinate is always below it.
_MAX_EXTENT = 16
_OWN_COORDINATE = {"gpu.cluster_block_id": None,   # dimension from the attribute
                   "nvvm.read.ptx.sreg.cluster.ctaid.x": 0,
                   "nvvm.read.ptx.sreg.cluster.ctaid.y": 1,
                   "nvvm.read.ptx.sreg.cluster.ctaid.z": 2}
_CASTS = ("arith.index_cast", "arith.index_castui", "arith.extui", "arith.extsi",
          "arith.trunci")
_BINARY = {
    "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b, "arith.andi": lambda a, b: a & b,
    "arith.ori": lambda a, b: a | b, "arith.xori": lambda a, b: a ^ b,
    "arith.shli": lambda a, b: a << b if 0 <= b < 64 else None,
    "arith.shrui": lambda a, b: a >> b if a >= 0 and 0 <= b < 64 else None,
    "arith.remui": lambda a, b: a % b if a >= 0 and b > 0 else None,
    "arith.remsi": lambda a, b: a % b if a >= 0 and b > 0 else None,
    "arith.divui": lambda a, b: a // b if a >= 0 and b > 0 else None,
    "arith.divsi": lambda a, b: a // b if a >= 0 and b > 0 else None,
    "arith.minui": min, "arith.minsi": min, "arith.maxui": max, "arith.maxsi": max,
}
_CMP = {0: lambda a, b: a == b, 1: lambda a, b: a != b, 2: lambda a, b: a < b,
        3: lambda a, b: a <= b, 4: lambda a, b: a > b, 5: lambda a, b: a >= b,
        6: lambda a, b: a < b, 7: lambda a, b: a <= b, 8: lambda a, b: a > b,
        9: lambda a, b: a >= b}  # arith.CmpIPredicate: eq ne slt sle sgt sge ult ule ugt uge


def _dimension_attr(op) -> int | None:
  text = str(op.attributes["dimension"])  # "#gpu<dim x>"
  return {"x": 0, "y": 1, "z": 2}.get(text.rstrip(">")[-1])


def _evaluate(value, dim: int, coordinate: int, depth: int = 0):
  """``value`` in the CTA whose coordinate along ``dim`` is ``coordinate``, or None
  when it is not made of constants, that coordinate and integer arithmetic."""
  if isinstance(value, int):
    return value
  owner = value.owner
  if depth > 64 or owner is None or isinstance(owner, ir.Block):
    return None
  op = owner.operation if hasattr(owner, "operation") else owner
  name = op.name
  if name == "arith.constant":
    try:
      return ir.IntegerAttr(op.attributes["value"]).value
    except (ValueError, TypeError):
      return None
  if name in _OWN_COORDINATE:
    own = _OWN_COORDINATE[name]
    own = _dimension_attr(op) if own is None else own
    return coordinate if own == dim else None
  args = [_evaluate(v, dim, coordinate, depth + 1) for v in op.operands]
  if None in args:
    return None
  if name in _CASTS:
    return args[0]
  if name in _BINARY:
    return _BINARY[name](*args)
  if name == "arith.select":
    return args[1] if args[0] else args[2]
  if name == "arith.cmpi":
    pred = ir.IntegerAttr(op.attributes["predicate"]).value
    return int(_CMP[pred](*args)) if pred in _CMP else None
  return None


def target_kind(cluster_dim, cluster_idx, cluster_shape) -> str:
  """"local" (always the executing CTA), "peer" (never) or "either".

  ``cluster_idx`` is evaluated for every coordinate the executing CTA can have
  along ``cluster_dim`` (all of them when the cluster shape is static, else up
  to the largest cluster extent): an int ``k`` is the executing CTA in CTA
  ``k`` ("either"), ``gpu.cluster_block_id(dim)`` always ("local"),
  ``(cluster_block_id(dim) + 1) % n`` never ("peer").  A value that is not
  built from constants and the executing CTA's coordinate is "either".
  """
  if cluster_dim is None:
    return "local"
  dim = int(cluster_dim)
  size = cluster_shape[dim] if cluster_shape else _MAX_EXTENT
  if size == 1:
    return "local"  # the only CTA along that dimension is the executing one
  values = [_evaluate(cluster_idx, dim, x) for x in range(size)]
  if None in values:
    return "either"
  if all(v == x for x, v in enumerate(values)):
    return "local"
  if all(v != x for x, v in enumerate(values)):
    return "peer"
  return "either"


def check_cluster_args(cluster_dim, cluster_idx, cluster_shape):
  """Refuses a half-given target, ill-typed ones, and an int index outside the cluster.

  Everything but an ir.Value's type is the core's to check
  (``validate.check_cluster_args``); that type is checked here.
  """
  dynamic = isinstance(cluster_idx, ir.Value)
  validate.check_cluster_args(cluster_dim, cluster_idx, cluster_shape, dynamic=dynamic)
  if dynamic and not isinstance(cluster_idx.type, (ir.IntegerType, ir.IndexType)):
    raise TypeError(str(refuse(
        "cluster_idx", f"<ir.Value> of type {cluster_idx.type}", validate.CLUSTER_IDX_ALLOWED,
        "pass an index or integer value (arith.fptosi or arith.index_cast it first)")))
