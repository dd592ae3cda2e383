"""The register preparation of a plan: one ordered tuple of steps.

Before any store, the warpgroup may reshape what its registers hold: every
thread runs the same steps (SIMT), in order, each on the registers the previous
one left (the first on the FragmentedArray's own):

- ``Gather(mask)``: the registers double; registers ``[n, 2n)`` are lane
  ``t ^ mask``'s registers ``[0, n)`` (one ``shfl.sync.bfly`` per 32 bits).
  Lanes holding under a word take their partner's data and write for both.
- ``ByteRegroup``: 4-bit elements whose byte halves sit in different registers
  or in two lanes are assembled into one-byte virtual registers (in-thread, or
  with a nibble exchange between lanes ``t`` and ``t ^ mask``).

Each step has one ``apply``, its meaning in NumPy on per-thread bit labels
``[thread, register, bit]`` (what ``landing`` runs, and with it the verifier and
the CPU executor), and one ``emit``, which hands the step to the IR builder
(``lowering/values_ir.ValueBuilder``'s ``emit_gather`` / ``emit_regroup``), so
this module stays free of MLIR.  The planner (``packing``, ``subbyte``) decides
which steps a plan needs; nothing here plans.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mosaic_async_store.plan.geometry import WARP_SIZE, WARPGROUP_SIZE

__all__ = ["Gather", "ByteRegroup", "StepDefect", "lane_bit", "is_lane_mask"]

_THREADS = np.arange(WARPGROUP_SIZE)
_LANES = _THREADS % WARP_SIZE


class StepDefect(ValueError):
  """A step that cannot run on the registers it is given (the verifier's "steps")."""


def lane_bit(mask: int) -> np.ndarray:
  """Per thread: 1 where the lane has ``mask``'s bit set (0 everywhere for mask 0)."""
  return ((_LANES & mask) != 0).astype(np.int64) if mask else \
      np.zeros(WARPGROUP_SIZE, np.int64)


def is_lane_mask(mask) -> bool:
  return isinstance(mask, (int, np.integer)) and 0 < int(mask) < WARP_SIZE


@dataclasses.dataclass(frozen=True)
class Gather:
  """Every lane receives lane ``t ^ mask``'s registers, appended after its own."""

  mask: int

  def apply(self, labels: np.ndarray, bits: int, lanes: int) -> np.ndarray:
    """[t, n, b] -> [t, 2n, b]: the second half is the partner's first."""
    del bits, lanes
    if not is_lane_mask(self.mask):
      raise StepDefect(f"gather lane mask {self.mask!r} is not within a warp")
    return np.concatenate([labels, labels[_THREADS ^ int(self.mask)]], axis=1)

  def emit(self, builder) -> None:
    builder.emit_gather(self)

  def describe(self) -> str:
    return f"gathered from lanes t^{self.mask}"


@dataclasses.dataclass(frozen=True, eq=False)
class ByteRegroup:
  """How lanes build one-byte virtual registers from their sub-byte elements.

  Arrays are indexed first by ``b``, the lane's ``mask`` bit (both rows are
  equal when ``mask == 0``).  Piece ``k`` (bits ``k*bits`` and up) of virtual
  register ``R`` is the lane's own element ``own[b, R, k] = (register, lane)``,
  or, where that register is -1, the element received in shuffle slot
  ``slot[b, R, k]``.  ``send[b, i] = (register, lane)`` is what a lane sends
  in slot ``i`` (its partner ``t ^ mask`` assembles that byte).
  """

  mask: int
  own: np.ndarray    # [2, R, per_byte, 2]
  slot: np.ndarray   # [2, R, per_byte]
  send: np.ndarray   # [2, slots, 2]

  @property
  def num_registers(self) -> int:
    return self.own.shape[1]

  def defect(self, labels: np.ndarray, bits: int, lanes: int) -> str | None:
    """Why this regrouping cannot run on ``labels`` (registers of ``lanes`` elements
    of ``bits`` bits), or None."""
    own, slot, send = (np.asarray(a) for a in (self.own, self.slot, self.send))
    if bits >= 8 or 8 % bits:
      return f"byte regrouping of {bits}-bit elements"
    if self.mask and not is_lane_mask(self.mask):
      return f"byte regrouping lane mask {self.mask!r} is not within a warp"
    if (own.ndim != 4 or own.shape[0] != 2 or own.shape[2:] != (8 // bits, 2)
        or slot.shape != own.shape[:3] or send.ndim != 3 or send.shape[::2] != (2, 2)):
      return "byte regrouping tables of the wrong shape"
    mine = own[..., 0] >= 0
    if np.any(own[..., 0] >= labels.shape[1]) or np.any(own[..., 0] < -1) or \
        np.any(mine & ((own[..., 1] < 0) | (own[..., 1] >= lanes))):
      return "byte regrouping reads an element outside the registers"
    if np.any(~mine & ((slot < 0) | (slot >= send.shape[1]))) or (np.any(~mine)
                                                                 and not self.mask):
      return "byte regrouping receives a slot no partner sends"
    if send.size and (np.any(send < 0) or np.any(send[..., 0] >= labels.shape[1])
                      or np.any(send[..., 1] >= lanes)):
      return "byte regrouping sends an element outside the registers"
    return None

  def apply(self, labels: np.ndarray, bits: int, lanes: int) -> np.ndarray:
    """[t, n, b] -> [t, R, 8]: piece ``k`` of one-byte register ``R`` of a lane with
    mask bit ``b`` is its own element ``own[b, R, k]``, or, where that register is
    -1, what partner ``t ^ mask`` (bit ``1 - b``) sends in slot ``slot[b, R, k]``:
    its element ``send[1 - b, slot]``."""
    why = self.defect(labels, bits, lanes)
    if why:
      raise StepDefect(why)
    own, slot, send = (np.asarray(a, dtype=np.int64) for a in (self.own, self.slot, self.send))
    b = lane_bit(self.mask)
    partner = (_THREADS ^ self.mask)[:, None, None]
    piece = np.arange(bits)
    out = np.full((WARPGROUP_SIZE, own.shape[1], 8), -1, dtype=np.int64)
    for k in range(own.shape[2]):
      reg, lane = own[b, :, k, 0], own[b, :, k, 1]                       # [t, R]
      mine = labels[_THREADS[:, None, None], np.maximum(reg, 0)[..., None],
                    np.maximum(lane, 0)[..., None] * bits + piece]       # [t, R, bits]
      theirs = np.full_like(mine, -1)
      if send.shape[1]:
        s = np.clip(slot[b, :, k], 0, send.shape[1] - 1)
        sent = send[1 - b][_THREADS[:, None], s]                          # [t, R, 2]
        theirs = labels[partner, sent[..., 0][..., None], sent[..., 1][..., None] * bits + piece]
      out[:, :, k * bits:(k + 1) * bits] = np.where((reg >= 0)[..., None], mine, theirs)
    return out

  def emit(self, builder) -> None:
    builder.emit_regroup(self)

  def describe(self) -> str:
    return (f"4-bit halves exchanged with lane t^{self.mask}" if self.mask
            else "bytes assembled in-thread")
