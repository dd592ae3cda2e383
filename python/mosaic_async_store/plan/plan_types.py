"""The data a store plan is made of: values, instructions, exchanges, targets, orders.

A plan is a program that is the same for all 128 threads of a warpgroup (SIMT):
every object here describes one operation executed by every thread, with the
per-thread differences (destination offsets, which half to keep) held as NumPy
arrays indexed by thread.  Nothing here touches MLIR.  Address steps, the other
part of a plan, and their arithmetic are in ``plan/address_steps.py``.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mosaic_async_store.plan import ptx_forms
from mosaic_async_store.plan.geometry import WARP_SIZE, WARPGROUP_SIZE
from mosaic_async_store.plan.register_steps import StepDefect

__all__ = ["Value", "Exchange", "LaneExchange", "Part", "Instruction", "Target", "StoreOrder",
           "ASYNC_KINDS", "WARPS_PER_WARPGROUP"]

_THREADS = np.arange(WARPGROUP_SIZE)
_LANES = _THREADS % WARP_SIZE

# Instruction kinds that complete on the barrier's tx count.
ASYNC_KINDS = ("st.async", "red.async")


@dataclasses.dataclass(frozen=True, eq=False)
class Target:
  """Where a plan's stores land, resolved before planning (``lowering/target.py``'s
  ``target_kind`` decides ``peer``).

  ``peer``: another CTA of the cluster, reached through ``mapa``; else the executing
  CTA's own shared memory.  ``cluster_dim`` and ``cluster_idx`` are the caller's
  (a ``gpu.Dimension`` or an int 0..2, and an int or an MLIR value, opaque to the
  plan; None for a store into the own CTA or a plan made without them): the emitter
  forms the target's rank from them and ``cluster_shape`` (static (x, y, z), or None
  when unknown).  ``cluster_size`` is the number of CTAs, when known (from the shape,
  or given alone to ``plan_store``).  ``index_from_own``: for a description only,
  the target is ``(own + index_from_own) % cluster size`` (the demo kernel's), where
  ``cluster_idx`` is a run-time value or not given.  ``may_be_own``: a peer target
  that is the executing CTA in some CTAs (``target_kind`` "either": an int index, a
  run-time one); a plan that reduces then carries its local form
  (``StorePlan.local_form``), chosen at run time.  Anything else is refused with
  AsyncStoreError (display text belongs to ``describe()``).
  """

  peer: bool = True
  cluster_dim: int | object | None = None      # an int 0..2 or a gpu.Dimension
  cluster_idx: int | object | None = None      # an int or an MLIR (ir.Value) value
  cluster_shape: tuple[int, int, int] | None = None
  cluster_size: int | None = None
  index_from_own: int | None = None
  may_be_own: bool = False

  def __post_init__(self):
    from mosaic_async_store.errors import refuse
    if self.may_be_own is not False and (self.may_be_own is not True or not self.peer):
      raise refuse("may_be_own", self.may_be_own, "False, or True for a peer target",
                   "pass may_be_own=True only with peer=True (a target that is the "
                   "executing CTA in some CTAs)")
    idx, dim = self.cluster_idx, self.cluster_dim
    if not (idx is None or (isinstance(idx, (int, np.integer)) and not isinstance(idx, bool))
            or (hasattr(idx, "type") and hasattr(idx, "owner"))):
      raise refuse("cluster_idx", idx, "an int, an MLIR i32/index value, or None",
                   "pass the target CTA's index along cluster_dim (a description of it "
                   "goes in index_from_own, or in describe())")
    if not (dim is None or (isinstance(dim, (int, np.integer)) and 0 <= dim < 3)
            or hasattr(dim, "name")):
      raise refuse("cluster_dim", dim, "0, 1, 2, a gpu.Dimension, or None",
                   "pass gpu.Dimension.x (or .y, .z)")
    if self.cluster_size is None and self.cluster_shape is not None:
      object.__setattr__(self, "cluster_size", int(np.prod(self.cluster_shape)))

  def state_space(self, kind: str) -> str:
    """The state space an instruction of ``kind`` addresses this target in."""
    return ptx_forms.state_space(kind, self.peer)

  def describe(self) -> str:
    """``peer (cluster x, index 1)``, ``peer (cluster x, run-time index)``, ``local``."""
    where = "peer or own (run time)" if self.may_be_own else "peer" if self.peer else "local"
    if self.cluster_dim is None:
      return where
    dim = getattr(self.cluster_dim, "name", self.cluster_dim)
    dim = "xyz"[dim] if isinstance(dim, int) and 0 <= dim < 3 else dim
    idx = self.cluster_idx  # an int, or an ir.Value (run time)
    index = (f"index {int(idx)}" if isinstance(idx, (int, np.integer)) else
             f"index (own + {self.index_from_own}) % {self.cluster_size or 'n'}"
             if self.index_from_own is not None else "run-time index")
    return f"{where} (cluster {dim}, {index})"


@dataclasses.dataclass(frozen=True, eq=False)
class Value:
  """A byte string every thread holds: a slice of a register or an exchange result.

  ``dst[t]`` is the unswizzled byte offset (from the ref base) where thread
  ``t``'s copy of this value belongs.
  """

  id: int
  size: int
  dst: np.ndarray
  reg: int = -1           # source register (flat index), for register slices
  byte: int = 0           # first byte within that register
  exchange: "Exchange | None" = None


@dataclasses.dataclass(frozen=True, eq=False)
class Exchange:
  """Pairs value ``a`` and ``b`` across lanes ``t`` and ``t ^ lane_mask``.

  Lanes whose ``lane_mask`` bit is 0 end with both lanes' ``a``; the others end
  with both lanes' ``b``.  Each thread sends ``b`` (bit 0) or ``a`` (bit 1)
  with one ``shfl.sync.bfly``.  ``keep_low[bit]`` says whether the thread's
  own half goes to the low bytes of the merged value.
  """

  a: Value
  b: Value
  lane_mask: int
  keep_low: tuple[bool, bool]

  def apply(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[thread, x] per-thread labels of ``a`` and ``b`` -> [thread, 2x] of the merged
    value: this class's definition, in NumPy."""
    bit = (_LANES & int(self.lane_mask)) != 0
    sent = np.where(bit[:, None], a, b)          # bit-0 lanes send b, bit-1 lanes send a
    received = sent[_THREADS ^ int(self.lane_mask)]
    kept = np.where(bit[:, None], b, a)
    low = np.array(self.keep_low, dtype=bool)[bit.astype(np.int64)][:, None]
    return np.where(low, np.concatenate([kept, received], 1),
                    np.concatenate([received, kept], 1))


@dataclasses.dataclass(frozen=True, eq=False)
class LaneExchange:
  """One ``shfl.sync.bfly``: exchanges of one lane mask and value size whose sent
  halves share a 32-bit word (at most ``4 // size`` of them), in order.

  A plan's ``exchanges`` are these steps, run in order after the register steps
  (every lane takes part, so before any store); each exchange's inputs are register
  slices or values an earlier step made.  ``apply`` is their NumPy meaning (what
  ``landing``, hence the verifier and the executor, run), ``emit`` hands the step
  to the IR builder (``lowering/values_ir.ValueBuilder.emit_exchange``).
  """

  exchanges: tuple[Exchange, ...]

  @property
  def lane_mask(self) -> int:
    return self.exchanges[0].lane_mask

  def defect(self) -> str | None:
    """Why these exchanges cannot share one shuffle, or None."""
    if not self.exchanges or not all(isinstance(e, Exchange) for e in self.exchanges):
      return "a lane exchange step without exchanges"
    sizes = {e.a.size for e in self.exchanges} | {e.b.size for e in self.exchanges}
    masks = {e.lane_mask for e in self.exchanges}
    mask = int(self.lane_mask)
    if len(sizes) != 1 or len(masks) != 1 or not 0 < mask < WARP_SIZE or \
        sizes.pop() * len(self.exchanges) > 4:
      return ("a shuffle of exchanges that are not one lane mask within a warp and one "
              "value size, 4 bytes in all")
    return None

  def apply(self, values: dict[int, np.ndarray]) -> list[np.ndarray]:
    """The merged labels of each exchange, from ``values`` (value id -> [thread, bits])."""
    why = self.defect()
    if why:
      raise StepDefect(why)
    return [e.apply(values[e.a.id], values[e.b.id]) for e in self.exchanges]

  def emit(self, builder) -> None:
    builder.emit_exchange(self)


@dataclasses.dataclass(frozen=True)
class Part:
  """Bytes [byte, byte + size) of a value, as a piece of an instruction's data."""

  value: int
  byte: int
  size: int


@dataclasses.dataclass(frozen=True, eq=False)
class Instruction:
  """One store executed by every writer thread.

  Attributes:
    kind: "st.async" | "red.async" (complete on the barrier's tx count) or
      "st" | "red" (plain weak forms, ordered
      before the destination barrier by the thread's release arrive).
    width: bytes stored per thread.
    ptx_type: the PTX type suffix, e.g. "v4.b32", "b32", "u16", "s32",
      "f16x2", "noftz.bf16x2".
    op: the reduction operation for "red"/"red.async", else "".
    parts: where the data comes from, low bytes first.
    dst: int array [thread]: unswizzled byte offset in the ref.
    space: the destination's PTX state space, set by the planner from the
      plan's target (``ptx_forms.state_space``): "shared::cluster", or
      "shared::cta" for plain st/red into the executing CTA's own window.
  """

  kind: str
  width: int
  ptx_type: str
  op: str
  parts: tuple[Part, ...]
  dst: np.ndarray
  # Staggering (bank-conflict avoidance): thread t takes its data from
  # ``choices[choice[t]]`` instead of ``parts``; ``choice`` is a function of
  # the lane bits in ``choice_bits`` (bit i of choice = lane bit choice_bits[i]).
  choices: tuple[tuple[Part, ...], ...] = ()
  choice_bits: tuple[int, ...] = ()
  space: str = "shared::cluster"

  @property
  def is_async(self) -> bool:
    return self.kind in ASYNC_KINDS

  @property
  def opcode(self) -> str:
    """The full PTX opcode, state space included, that the emitter writes."""
    return ptx_forms.opcode(self.kind, self.space, self.op, self.ptx_type)


# A select costs each of the warpgroup's four warps one issue slot; a wavefront
# costs the destination's shared-memory pipe one cycle.  An order pays when it
# saves at least one wavefront per warp instruction it adds.
WARPS_PER_WARPGROUP = 4


@dataclasses.dataclass(frozen=True)
class StoreOrder:
  """What one group's bank-conflict-free order costs and what it saves.

  A group is the instructions of one kind, width, type and op, which the
  order may permute among each other (``banks``).  Attributes:
    kind, width: the group's instructions.
    stores: how many instructions the group has.
    lane_bits: the lane bits the order staggers on (``()``: register order).
    selects: selects per thread the staggered data choice adds, as emitted
      (``(2 ** len(lane_bits) - 1)`` per 32-bit word of each store; LLVM may
      fold some that consecutive stores share).
    wavefronts_saved: shared-memory wavefronts of the warpgroup it removes,
      against register order (``verify.store_wavefronts``).
  """

  kind: str
  width: int
  stores: int
  lane_bits: tuple[int, ...]
  selects: int
  wavefronts_saved: int

  @property
  def pays(self) -> bool:
    """Whether it saves at least one wavefront per warp instruction it adds."""
    return self.wavefronts_saved >= WARPS_PER_WARPGROUP * self.selects

  def describe(self) -> str:
    head = f"{self.stores} x {self.kind} {self.width}B: "
    if not self.lane_bits:
      return head + "register order"
    verdict = ("pays" if self.pays else
               "costs more than it saves, kept because optimized=True promises "
               "no bank conflicts")
    return (head + f"staggered on lane bits {self.lane_bits}: +{self.selects} selects "
            f"per thread, -{self.wavefronts_saved} wavefronts ({verdict})")
