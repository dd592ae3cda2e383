"""Warp forms (``program.Program.vcode``) of the accesses kernels run most: weak
``ld`` into one register and weak ``st`` of shared memory (the own CTA's) and of
global memory, and the issue of ``st.async`` / ``red.async``, one call for all the
lanes of a piece (``lockstep.run_piece``).

A warp form does, lane by lane in lane order, what the instruction's per-thread
function does (``memops._ld``, ``access._store_fn``, ``access._async_fn``): the same
checks, the same records in the shadow, the same bytes written or loaded; it saves
the calls between them.  It first computes every lane's address and returns
``outcomes.FALLBACK``, having done nothing, when one is not the plain case (a
cluster or generic address, misaligned, out of bounds, bytes of an initialised
mbarrier, a traced store): the per-thread function then runs lane by lane and
reports it in its own words.  A conflict found at lane j is raised by the
per-thread path's own function for lane j (``access._check``,
``access._global_race``), after lanes 0..j-1 completed, exactly as lane by lane;
the error's ``access`` names lane j, which ``lockstep.run_piece`` reports.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import access, asyncops, strong
from mosaic_async_store.check.addresses import GLOBAL_SHIFT, SHARED_BASE, plain_shared
from mosaic_async_store.check.global_memory import PAGE
from mosaic_async_store.check.outcomes import FALLBACK, YIELD

__all__ = ["SHARED", "shared_load", "shared_store", "global_load", "global_store",
           "async_store"]

SHARED = ("shared", "shared::cta")   # the state spaces of the own CTA's shared memory
_GLOBAL_MASK = (1 << GLOBAL_SHIFT) - 1
_PAGE_MASK = PAGE - 1
_DTYPES = {1: np.dtype("<u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}


def _places(k, lanes, addr, n, cluster):
  """Each lane's (CTA, offset) of its shared-memory access, or None unless every one
  is the plain case (``addresses.plain_shared``)."""
  places = []
  for th in lanes:
    place = plain_shared(k, th, addr(th), n, cluster)
    if place is None:
      return None
    places.append(place)
  return places


def _no_barrier_bytes(sh, offs, n):
  """Whether no initialised mbarrier lies between the lowest and highest access."""
  lo, hi = min(offs), max(offs) + n
  return sh.mbar_bytes.count(0, lo, hi) == hi - lo


def _global_places(k, lanes, addr, n):
  """Each lane's (buffer, offset) in global memory, or None unless every address is
  aligned and inside an argument's buffer (``addresses.mem_fn``'s fast case)."""
  gbufs, places = k.gbufs, []
  for th in lanes:
    a = addr(th)
    idx = (a >> GLOBAL_SHIFT) - 1
    if a % n or not 0 <= idx < len(gbufs):
      return None
    buf, off = gbufs[idx], a & _GLOBAL_MASK
    if off + n > len(buf):
      return None
    places.append((buf, off))
  return places


def _block(addrs, n):
  """(lowest address, order) when the lanes' ``n``-byte accesses at ``addrs`` tile one
  block of bytes exactly, each lane its own ``n`` bytes (``order``: the lanes in
  address order, None when that is lane order); else None."""
  lo = min(addrs)
  if addrs == list(range(lo, lo + n * len(addrs), n)):
    return lo, None
  order = sorted(range(len(addrs)), key=addrs.__getitem__)
  if [addrs[i] for i in order] == list(range(lo, lo + n * len(addrs), n)):
    return lo, order
  return None


def _writers_seen(k, ordered, writers, clocks, n):
  """Whether each lane (``ordered``: in address order, ``n`` bytes each) is ordered
  after the last writes of its bytes (``writers`` / ``clocks``: their slots and
  clocks), read off the clock matrix (``Machine.clocks``) at once."""
  if clocks.count(0) == len(clocks):   # the initial contents: ordered before all
    return True
  rows = np.repeat(np.fromiter((th.slot - 1 for th in ordered), np.intp, len(ordered)), n)
  return bool((k.clocks[rows, writers] >= clocks).all())


def _shared_block(k, sh, ordered, lo, n, write, insn):
  """The weak accesses of ``ordered`` lanes (address order) to the block of ``n`` bytes
  each from ``lo`` of their CTA's shadow ``sh``, checked and recorded at once when
  no byte has a history that needs a lane-by-lane look (in flight, an mbarrier, a
  strong write, a read before a write) and every lane is ordered after the bytes'
  last writes: then exactly what ``memory.Shadow.conflict`` / ``record`` find and
  keep lane by lane.  Returns whether it did (else nothing changed)."""
  size = n * len(ordered)
  hi = lo + size
  if sh.inflight[lo:hi].count(0) != size or sh.inflight_red[lo:hi].count(0) != size or \
     sh.atomics[lo:hi].count(None) != size or sh.mbar_bytes.count(0, lo, hi) != size:
    return False
  unread = sh.readers[lo:hi].count(None) == size
  if write and not unread:
    return False
  if not _writers_seen(k, ordered, sh.w_slot[lo:hi], sh.w_clk[lo:hi], n):
    return False
  each = range(n)
  slots = [th.slot for th in ordered]
  clocks = [th.vc.item(th.slot) for th in ordered]
  if write:
    sh.w_slot[lo:hi] = [s for s in slots for _ in each]
    sh.w_clk[lo:hi] = [c for c in clocks for _ in each]
    sh.w_insn[lo:hi] = [insn] * size
  elif unread:   # (a set of its own per byte: they grow apart later)
    sh.readers[lo:hi] = [{s: (c, insn, None)} for s, c in zip(slots, clocks) for _ in each]
  else:
    readers = sh.readers
    for i, (s, c) in enumerate(zip(slots, clocks)):
      for b in range(lo + i * n, lo + (i + 1) * n):
        if readers[b] is None:
          readers[b] = {s: (c, insn, None)}
        else:
          readers[b][s] = (c, insn, None)
  return True


def _shared_access(k, addr, n, write, insn, act, block_act):
  """The warp form of a weak ``n``-byte access to the own CTA's shared memory: each
  lane checked and recorded in the shadow in lane order, then ``act(th, buf, off)``
  (the load or the store itself); when the lanes tile one block of bytes and
  ``_shared_block`` takes it, all at once, then ``block_act(ordered, buf, off)``."""
  def lanes_form(lanes):
    cta = lanes[0].cta   # (one warp: one CTA)
    buf, sh = k.smem[cta], k.shadow[cta]
    if len(lanes) > 1 and not (write and k.flags):
      addrs = [addr(th) for th in lanes]
      block = _block(addrs, n)
      if block is not None:
        lo, order = block
        off = lo - SHARED_BASE
        if lo >> 24 == 0 and not lo % n and off >= 0 and off + n * len(lanes) <= len(buf):
          ordered = lanes if order is None else [lanes[i] for i in order]
          if _shared_block(k, sh, ordered, off, n, write, insn):
            block_act(ordered, buf, off)
            return None
    places = _places(k, lanes, addr, n, False)   # (not cluster: the lane's own CTA)
    offs = places and [off for _, off in places]
    if not offs or not _no_barrier_bytes(sh, offs, n):
      return FALLBACK
    conflict, record = sh.conflict, sh.record
    for th, off in zip(lanes, offs):
      vc, slot = th.vc, th.slot
      stamp = (slot, vc.item(slot), insn)
      if conflict(vc, off, n, write=write, atomic=False) is not None:
        access._check(k, vc, th, cta, off, n, write=write, atomic=False, who=th, stamp=stamp)
      record(off, n, write=write, atomic=False, stamp=stamp)
      act(th, buf, off)
    return None
  return lanes_form


def _load_block(reg, n, mask):
  """Loads of ``n`` bytes each, a block from ``off`` in address order, into ``reg``."""
  dtype = _DTYPES.get(n)
  def load(ordered, buf, off):
    if dtype is None:
      for i, th in enumerate(ordered):
        th.regs[reg] = int.from_bytes(buf[off + i * n:off + (i + 1) * n], "little") & mask
      return
    for th, v in zip(ordered, np.frombuffer(buf, dtype, len(ordered), off).tolist()):
      th.regs[reg] = v & mask
  return load


def _store_block(k, vals, size):
  """Weak stores of ``vals`` (getters, ``size`` bytes each) by lanes in address order,
  a block from ``off``: what ``access._write`` does lane by lane (``k.flags`` is
  empty: the warp forms go lane by lane otherwise)."""
  mask, dtype = (1 << (8 * size)) - 1, _DTYPES.get(size)
  def store(ordered, buf, off):
    k.epoch += len(ordered)
    if dtype is None:
      data = b"".join(sum((g(th) & mask) << (8 * size * i) for i, g in enumerate(vals))
                      .to_bytes(size * len(vals), "little") for th in ordered)
    else:
      data = np.array([[g(th) & mask for g in vals] for th in ordered], dtype).tobytes()
    buf[off:off + len(data)] = data
  return store


def shared_load(k, addr, n, reg, mask, insn):
  """``ld{.weak}.shared{::cta}`` of ``n`` bytes at ``addr`` into register ``reg``."""
  def load(th, buf, off):
    th.regs[reg] = int.from_bytes(buf[off:off + n], "little") & mask
  return _shared_access(k, addr, n, False, insn, load, _load_block(reg, n, mask))


def shared_store(k, addr, vals, size, insn, traced):
  """A weak ``st.shared{::cta}`` of ``vals`` (getters, ``size`` bytes each) at
  ``addr``; ``traced``: whether ``launch(trace_stores=True)`` records it (then the
  lanes go one by one, through ``access._trace``)."""
  mask = (1 << (8 * size)) - 1
  def store(th, buf, off):
    access._write(k, buf, off, size, [g(th) & mask for g in vals], None, weak=True)
  form = _shared_access(k, addr, size * len(vals), True, insn, store,
                        _store_block(k, vals, size))
  if not traced:
    return form
  def traced_form(lanes):
    return FALLBACK if k.store_trace is not None else form(lanes)
  return traced_form


def _global_first(k, lanes, places, n, write, insn):
  """The first accesses of ``lanes`` to their ``n`` bytes each (``places``: (buffer,
  offset), aligned) of one page of one global buffer, recorded at once as
  ``global_memory.GlobalShadow.access`` records untouched bytes; returns whether
  they were (distinct aligned offsets: disjoint bytes, so lane order does not matter)
  and did, else changes nothing."""
  buf = places[0][0]
  offs = [off for _, off in places]
  if len(set(offs)) != len(offs) or any(b is not buf for b, _ in places):
    return False
  cells = k.gshadow.page(buf, min(offs), max(offs) + n)
  if cells is None:
    return False
  os = [off & _PAGE_MASK for off in offs]
  for o in os:
    if cells[o:o + n].count(None) != n:
      return False
  for th, o in zip(lanes, os):
    clock = th.vc.item(th.slot)
    rec = ([th.slot, clock, insn, None, None, o, n] if write else
           [0, 0, -1, None, (th.slot, clock, insn, None), o, n])
    cells[o:o + n] = [rec] * n
  return True


def _global_access(k, addr, n, write, insn, act, block_act):
  """The warp form of a weak ``n``-byte access to global memory: each lane checked and
  recorded in the global shadow in lane order, then ``act(th, buf, off)``; lanes'
  first accesses to bytes of one page all at once (``_global_first``), then, when
  they tile one block, ``block_act(ordered, buf, off)``."""
  def lanes_form(lanes):
    places = _global_places(k, lanes, addr, n)
    if places is None:
      return FALLBACK
    if len(lanes) > 1 and not (write and k.flags) and \
       _global_first(k, lanes, places, n, write, insn):
      block = _block([off for _, off in places], n)
      if block is not None:
        lo, order = block
        block_act(lanes if order is None else [lanes[i] for i in order], places[0][0], lo)
      else:
        for th, (buf, off) in zip(lanes, places):
          act(th, buf, off)
      return None
    check = k.gshadow.access
    for th, (buf, off) in zip(lanes, places):
      bad = check(th, buf, off, n, write, False, insn, None)
      if bad is not None:
        access._global_race(k, th, buf, off, n, write, bad, None, insn)
      act(th, buf, off)
    return None
  return lanes_form


def global_load(k, addr, n, reg, mask, insn):
  """``ld{.weak}.global`` of ``n`` bytes at ``addr`` into register ``reg``."""
  def load(th, buf, off):
    th.regs[reg] = int.from_bytes(buf[off:off + n], "little") & mask
  return _global_access(k, addr, n, False, insn, load, _load_block(reg, n, mask))


def global_store(k, addr, value, n, insn):
  """A weak scalar ``st.global`` of ``value`` (a getter) at ``addr``."""
  mask = (1 << (8 * n)) - 1
  def store(th, buf, off):
    data = value(th) & mask
    k.epoch += 1
    if k.flags:
      strong._forget_flags(k, buf, off, n)
    buf[off:off + n] = data.to_bytes(n, "little")
  return _global_access(k, addr, n, True, insn, store, _store_block(k, (value,), n))


def async_store(k, addr, vals, size, red, mbar, insn, text):
  """The issue of ``st.async`` (``red`` None) or ``red.async`` (``red``: (operation,
  type)) of ``vals`` at ``addr``, completing on the mbarrier at ``mbar``: returns
  {lane: YIELD} for the lanes the schedule pauses after their issue, as lane by lane."""
  n, mask = size * len(vals), (1 << (8 * size)) - 1
  def lanes_form(lanes):
    if k.store_trace is not None or len(k.smem) == 1:
      return FALLBACK
    places = _places(k, lanes, addr, n, True)
    keys = places and _places(k, lanes, mbar, 8, True)
    if not keys:
      return FALLBACK
    for th, (cta, _), key in zip(lanes, places, keys):   # what issue would refuse
      bar = k.mbar.get(key)
      if key[0] != cta or (red and cta == th.cta) or bar is None or \
         th.vc.item(bar.init[0]) < bar.init[1]:
        return FALLBACK
    moved = None
    for th, (cta, off), key in zip(lanes, places, keys):
      write = asyncops.Write(cta, off, size, [g(th) & mask for g in vals], red)
      asyncops.issue(k, th, asyncops.AsyncOp(th, insn, text, [write],
                                             asyncops.MbarrierTx(key, n)))
      if k.sched.yields():
        if moved is None:
          moved = {}
        moved[th] = YIELD
    return moved
  return lanes_form
