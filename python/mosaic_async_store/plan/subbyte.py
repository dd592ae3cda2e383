"""Sub-byte elements regrouped into one-byte virtual registers.

4-bit data is stored by whole bytes, so both halves of a destination byte must
end up in one thread.  When a layout keeps them apart, the planner regroups
the elements first:

- both halves in the same thread (other registers or vector lanes, e.g.
  TMEM-native layouts with vector length 1): the thread assembles the byte;
- the halves in two lanes ``t`` and ``t ^ mask`` of a warp (transposed WGMMA /
  TCGEN05 layouts, column-major destinations): the two lanes share such bytes
  out evenly, each sends the halves of the bytes its partner assembles with
  one ``shfl.sync.bfly`` per eight halves, and assembles its own.

The result is a ``register_steps.ByteRegroup`` step (its ``apply`` is the one
definition of what it does).  Every virtual register is then one byte,
``low | high << 4``; the rest of the
planner treats them like any other register.  Decided on NumPy arrays over
all 128 threads: a regrouping is used only if it is the same for every lane
with the same ``mask`` bit (SIMT) and puts every byte together.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.plan.geometry import RegisterMap, WARPGROUP_SIZE
from mosaic_async_store.plan.register_steps import ByteRegroup, lane_bit

__all__ = ["byte_registers"]

_THREADS = np.arange(WARPGROUP_SIZE)
_MASKS = (0, 1, 2, 4, 8, 16)  # 0: within the thread; else the lane XOR of the exchange


def _virtual(table: np.ndarray, rg: ByteRegroup) -> np.ndarray:
  """A per-(thread, register, lane) table seen through the regrouping: [t, R, k]."""
  b = lane_bit(rg.mask)
  own = rg.own[b]                                        # [t, R, k, 2]
  t = _THREADS[:, None, None]
  mine = table[t, np.maximum(own[..., 0], 0), own[..., 1]]
  slot = np.maximum(rg.slot[b], 0)                       # [t, R, k]
  sent = rg.send[1 - b]                                  # [t, slots, 2]
  if sent.shape[1] == 0:
    return mine
  src = np.take_along_axis(sent, slot.reshape(WARPGROUP_SIZE, -1, 1), axis=1)
  src = src.reshape(*slot.shape, 2)
  theirs = table[(t ^ rg.mask), src[..., 0], src[..., 1]]
  return np.where(own[..., 0] >= 0, mine, theirs)


def _bytes_of(thread: int, regs: RegisterMap, bit_addr: np.ndarray) -> dict:
  """Destination byte -> [(bit offset, register, lane)] of one thread's elements."""
  out: dict[int, list] = {}
  for r in range(regs.num_registers):
    for j in range(regs.vector_length):
      a = int(bit_addr[thread, r, j])
      out.setdefault(a // 8, []).append((a % 8, r, j))
  return out


def _build(regs, bit_addr, bits, mask, t0) -> ByteRegroup | None:
  """The regrouping read off one lane pair (t0 with bit 0, its partner with bit 1)."""
  per_byte = 8 // bits
  u0 = t0 ^ mask
  mine, theirs = _bytes_of(t0, regs, bit_addr), _bytes_of(u0, regs, bit_addr)
  own: list[list] = [[], []]
  for b, table in ((0, mine), (1, theirs)):
    for byte in sorted(table):
      pieces = sorted(table[byte])
      if len(pieces) == per_byte:
        own[b].append([(r, j) for _, r, j in pieces])
  shared = sorted((min((r, j) for _, r, j in mine[byte]), byte)
                  for byte in mine if len(mine[byte]) < per_byte)
  if mask == 0 and shared:
    return None
  if len(own[0]) != len(own[1]) or len(shared) % 2:
    return None
  slot = [[[-1] * per_byte for _ in own[0]], [[-1] * per_byte for _ in own[1]]]
  send: list[list] = [[], []]
  for i in range(len(shared) // 2):
    for b, byte in ((0, shared[2 * i][1]), (1, shared[2 * i + 1][1])):
      kept, given = (mine, theirs) if b == 0 else (theirs, mine)
      if len(kept.get(byte, ())) != 1 or len(given.get(byte, ())) != 1:
        return None  # the byte is not one piece from each lane (or a third lane)
      (ko, kr, kj), (go, gr, gj) = kept[byte][0], given[byte][0]
      send[1 - b].append((gr, gj))
      row = [None] * per_byte
      for off, entry, s in ((ko, (kr, kj), -1), (go, (-1, 0), i)):
        if off % bits or row[off // bits] is not None:
          return None
        row[off // bits] = (entry, s)
      own[b].append([e for e, _ in row])
      slot[b].append([s for _, s in row])
  if len(send[0]) != len(send[1]):
    return None
  return ByteRegroup(mask, np.array(own, np.int64).reshape(2, -1, per_byte, 2),
                     np.array(slot, np.int64).reshape(2, -1, per_byte),
                     np.array(send, np.int64).reshape(2, -1, 2))


def _holds(rg: ByteRegroup, regs: RegisterMap, bit_addr: np.ndarray, bits: int) -> bool:
  """Whether every writer assembles whole bytes and uses each element exactly once."""
  w = regs.writer
  addr = _virtual(bit_addr, rg)[w]                       # [writers, R, k]
  if np.any(addr // 8 != addr[:, :, :1] // 8):
    return False
  if np.any(addr % 8 != np.arange(addr.shape[2]) * bits):
    return False
  pieces = regs.num_registers * regs.vector_length
  for b in (0, 1):
    used = [tuple(p) for p in rg.own[b].reshape(-1, 2) if p[0] >= 0]
    used += [tuple(p) for p in rg.send[b]]
    if len(used) != pieces or len(set(used)) != pieces:
      return False
  return True


def byte_registers(regs: RegisterMap, bit_addr: np.ndarray, bits: int):
  """Regroups sub-byte elements into one-byte virtual registers (see the module doc).

  Returns ``(virtual RegisterMap, ByteRegroup)``, or None when no regrouping
  within a thread or between two lanes of a warp puts every byte together.
  """
  if regs.splat or 8 % bits or not regs.writer.any():
    return None
  for mask in _MASKS:
    if mask and (bits != 4 or np.any(regs.writer != regs.writer[_THREADS ^ mask])):
      continue
    lanes = np.flatnonzero(regs.writer & (lane_bit(mask) == 0))
    rg = _build(regs, bit_addr, bits, mask, int(lanes[0])) if lanes.size else None
    if rg is not None and _holds(rg, regs, bit_addr, bits):
      return RegisterMap(_virtual(regs.elements, rg), regs.writer), rg
  return None
