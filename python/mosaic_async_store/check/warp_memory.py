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

from mosaic_async_store.check import access, asyncops, strong
from mosaic_async_store.check.addresses import GLOBAL_SHIFT, plain_shared
from mosaic_async_store.check.outcomes import FALLBACK, YIELD

__all__ = ["SHARED", "shared_load", "shared_store", "global_load", "global_store",
           "async_store"]

SHARED = ("shared", "shared::cta")   # the state spaces of the own CTA's shared memory
_GLOBAL_MASK = (1 << GLOBAL_SHIFT) - 1


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


def _shared_access(k, addr, n, write, insn, act):
  """The warp form of a weak ``n``-byte access to the own CTA's shared memory: each
  lane checked and recorded in the shadow in lane order, then ``act(th, buf, off)``
  (the load or the store itself)."""
  def lanes_form(lanes):
    cta = lanes[0].cta   # (one warp: one CTA)
    buf, sh = k.smem[cta], k.shadow[cta]
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


def shared_load(k, addr, n, reg, mask, insn):
  """``ld{.weak}.shared{::cta}`` of ``n`` bytes at ``addr`` into register ``reg``."""
  def load(th, buf, off):
    th.regs[reg] = int.from_bytes(buf[off:off + n], "little") & mask
  return _shared_access(k, addr, n, False, insn, load)


def shared_store(k, addr, vals, size, insn, traced):
  """A weak ``st.shared{::cta}`` of ``vals`` (getters, ``size`` bytes each) at
  ``addr``; ``traced``: whether ``launch(trace_stores=True)`` records it (then the
  lanes go one by one, through ``access._trace``)."""
  mask = (1 << (8 * size)) - 1
  def store(th, buf, off):
    access._write(k, buf, off, size, [g(th) & mask for g in vals], None, weak=True)
  form = _shared_access(k, addr, size * len(vals), True, insn, store)
  if not traced:
    return form
  def traced_form(lanes):
    return FALLBACK if k.store_trace is not None else form(lanes)
  return traced_form


def _global_access(k, addr, n, write, insn, act):
  """The warp form of a weak ``n``-byte access to global memory: each lane checked and
  recorded in the global shadow in lane order, then ``act(th, buf, off)``."""
  def lanes_form(lanes):
    places = _global_places(k, lanes, addr, n)
    if places is None:
      return FALLBACK
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
  return _global_access(k, addr, n, False, insn, load)


def global_store(k, addr, value, n, insn):
  """A weak scalar ``st.global`` of ``value`` (a getter) at ``addr``."""
  mask = (1 << (8 * n)) - 1
  def store(th, buf, off):
    data = value(th) & mask
    k.epoch += 1
    if k.flags:
      strong._forget_flags(k, buf, off, n)
    buf[off:off + n] = data.to_bytes(n, "little")
  return _global_access(k, addr, n, True, insn, store)


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
