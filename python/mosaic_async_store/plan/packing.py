"""Turning register slices into uniform, contiguous values, and values into chains.

Registers narrower than a 32-bit word (8-bit data in the WGMMA layout, 4-bit
data) cannot feed st.async, whose narrowest form is b32.  Neighbouring bytes of
one destination word then live in different lanes, so lanes swap halves with
``shfl.sync.bfly`` until each holds whole, aligned words (see
:class:`plan_types.Exchange`).  Everything is decided on NumPy arrays over all
128 threads, so a rule is applied only when it holds for every writer thread.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.errors import refuse
from mosaic_async_store.plan.geometry import RegisterMap, WARP_SIZE, WARPGROUP_SIZE
from mosaic_async_store.plan.plan_types import Exchange, LaneExchange, Value

__all__ = ["register_values", "register_runs", "exchange_small_values", "chain_values",
           "lane_exchange_steps", "gather_partner", "with_partner"]

_LANES = np.arange(WARPGROUP_SIZE) % WARP_SIZE


def register_runs(regs: RegisterMap, bit_addr: np.ndarray, bits: int):
  """(register, first lane, end lane) of every run of vector lanes contiguous in
  SMEM, or None if some run is not made of whole, byte-aligned bytes.

  Run boundaries are the union over writer threads, so the cut is the same for
  every thread (SIMT).
  """
  w = regs.writer
  runs = []
  for r in range(regs.num_registers):
    addr = bit_addr[w, r, :]
    breaks = [0] + [j for j in range(1, regs.vector_length)
                    if np.any(addr[:, j] != addr[:, j - 1] + bits)] + [regs.vector_length]
    for j0, j1 in zip(breaks[:-1], breaks[1:]):
      if (j0 * bits) % 8 or ((j1 - j0) * bits) % 8 or np.any(addr[:, j0] % 8):
        return None
      runs.append((r, j0, j1))
  return runs


def register_values(regs: RegisterMap, bit_addr: np.ndarray, bits: int,
                    *, context: str) -> list[Value]:
  """Cuts each register into runs of vector lanes that are contiguous in SMEM.

  ``bit_addr[t, r, j]`` is the destination bit address of vector lane ``j``
  of register ``r`` of thread ``t``.
  """
  runs = register_runs(regs, bit_addr, bits)
  if runs is None and regs.splat:   # every thread holds the value; too few of it per thread
    per_thread = 8 // bits
    raise refuse(
        "value", context,
        f"a splat with whole bytes per thread: at least {per_thread} elements of "
        f"{bits} bits per thread, i.e. a multiple of {128 * per_thread} elements",
        f"store a splat of {128 * per_thread} elements (or a multiple), or broadcast it "
        "to a tiled layout (e.g. WGMMA) first")
  if runs is None:
    raise refuse(
        "value", context,
        "pieces that are whole bytes: each thread must hold every element "
        "that shares a destination byte with its own, or trade or gather the "
        "halves with one lane of its warp",
        "use a layout in which each thread holds both 4-bit halves of its bytes "
        "(e.g. WGMMA_LAYOUT or a TMEM-native layout), pack pairs of 4-bit values "
        "into int8, or transfer as int8 and unpack")
  return [Value(id=i, size=(j1 - j0) * bits // 8, dst=bit_addr[:, r, j0] // 8, reg=r,
                byte=j0 * bits // 8) for i, (r, j0, j1) in enumerate(runs)]


def chain_values(values: list[Value], writer: np.ndarray) -> list[list[Value]]:
  """Groups values that follow each other in SMEM in every writer thread."""
  by_start = {tuple(v.dst[writer]): v for v in values}
  followers = {}
  for v in values:
    nxt = by_start.get(tuple(v.dst[writer] + v.size))
    if nxt is not None and nxt is not v:
      followers[v.id] = nxt
  has_pred = {n.id for n in followers.values()}
  chains = []
  for v in sorted(values, key=lambda v: (int(v.dst[writer][0]) if writer.any() else 0, v.id)):
    if v.id in has_pred:
      continue
    chain = [v]
    while chain[-1].id in followers and len(chain) <= len(values):
      chain.append(followers[chain[-1].id])
    chains.append(chain)
  return chains


def _word_aligned(chain: list[Value], writer: np.ndarray) -> bool:
  total = sum(v.size for v in chain)
  return total % 4 == 0 and not np.any(chain[0].dst[writer] % 4)


def _pairs_for_mask(cands: list[Value], writer: np.ndarray, mask: int):
  """Values whose copies in lanes t and t^mask are adjacent, with their order."""
  t0 = np.flatnonzero((_LANES & mask) == 0)
  t1 = t0 ^ mask
  if np.any(writer[t0] != writer[t1]):
    return []
  t0, t1 = t0[writer[t0]], t1[writer[t0]]
  ok = []
  for v in cands:
    d0, d1 = v.dst[t0], v.dst[t1]
    if np.all(np.abs(d0 - d1) == v.size) and not np.any(np.minimum(d0, d1) % (2 * v.size)):
      low0 = d0 < d1
      if low0.all() or (~low0).all():
        ok.append((v, bool(low0[0])))
  return ok


def exchange_small_values(values: list[Value], writer: np.ndarray,
                          next_id: int) -> tuple[list[Value], list[Exchange]]:
  """Merges 1- and 2-byte values across lanes until words can be formed."""
  exchanges: list[Exchange] = []
  while True:
    chains = chain_values(values, writer)
    cands = [c[0] for c in chains
             if len(c) == 1 and c[0].size in (1, 2) and not _word_aligned(c, writer)]
    best = []
    for size in (1, 2):
      same = [v for v in cands if v.size == size]
      for mask in (1, 2, 4, 8, 16):
        ok = _pairs_for_mask(same, writer, mask)
        if len(ok) >= 2 and len(ok) > len(best):
          best = [(mask, v, low) for v, low in ok]
    if not best:
      return values, exchanges
    used = set()
    for (mask, a, low_a), (_, b, low_b) in zip(best[0::2], best[1::2]):
      bit = (_LANES & mask) != 0
      partner = np.arange(WARPGROUP_SIZE) ^ mask
      dst = np.where(bit, np.minimum(b.dst, b.dst[partner]),
                     np.minimum(a.dst, a.dst[partner]))
      ex = Exchange(a=a, b=b, lane_mask=mask, keep_low=(low_a, not low_b))
      # keep_low[1]: lanes with the bit set keep b; b's low copy is in the
      # bit-0 partner exactly when low_b (measured from bit-0 lanes) is True.
      exchanges.append(ex)
      values.append(Value(id=next_id, size=2 * a.size, dst=dst, exchange=ex))
      next_id += 1
      used.update((a.id, b.id))
    values = [v for v in values if v.id not in used]


def lane_exchange_steps(exchanges: list[Exchange], values) -> tuple[LaneExchange, ...]:
  """The exchanges as shuffles (``LaneExchange``), in order: each takes the first
  pending exchange and the pending ones of its lane mask and size whose inputs exist
  (register slices, or values an earlier shuffle made), up to one 32-bit word."""
  made = {id(v.exchange): v.id for v in values if v.exchange is not None}
  ready: set[int] = set()
  pending, steps = list(exchanges), []
  while pending:
    first = pending[0]
    batch = [e for e in pending if e.lane_mask == first.lane_mask and e.a.size == first.a.size
             and all(x.exchange is None or x.id in ready for x in (e.a, e.b))]
    if not batch:
      raise AssertionError("an exchange whose inputs no earlier exchange makes")
    batch = batch[:4 // first.a.size]
    steps.append(LaneExchange(tuple(batch)))
    ready.update(made[id(e)] for e in batch)
    pending = [e for e in pending if all(e is not b for b in batch)]
  return tuple(steps)


def gather_partner(regs: RegisterMap, mask: int) -> RegisterMap | None:
  """Lanes whose ``mask`` bit is 0 also hold lane ``t ^ mask``'s registers.

  The register count doubles (the second half is the partner's), and only the
  gathering lanes still write.  None when a lane's partner is a replica (its
  data is written elsewhere).
  """
  partner = np.arange(WARPGROUP_SIZE) ^ mask
  if np.any(regs.writer != regs.writer[partner]):
    return None
  writer = regs.writer & ((_LANES & mask) == 0)
  if not writer.any():
    return None
  return RegisterMap(with_partner(regs.elements, mask), writer, splat=regs.splat)


def with_partner(table: np.ndarray, mask: int) -> np.ndarray:
  """A per-(thread, register, ...) table after a gather with ``mask``: each
  thread's registers followed by lane ``t ^ mask``'s.  The one definition of
  a gather's register order, for element maps and register bytes alike."""
  partner = np.arange(table.shape[0]) ^ mask
  return np.concatenate([table, table[partner]], axis=1)
