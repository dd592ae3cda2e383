"""Warp forms (``program.Program.vcode``) of the accesses kernels run most: weak
``ld`` into one register and weak ``st`` of shared memory (the own CTA's) and of
global memory, and the issue of ``st.async`` / ``red.async``, one call for all the
lanes of a piece (``lockstep.run_piece``).

A warp form does what the instruction's per-thread function does lane by lane in
lane order (``memops._ld``, ``access.store_fn``, ``access.async_store_fn``): the same
checks, the same records in the shadow, the same bytes written or loaded.  Lanes at
distinct aligned offsets are checked and recorded at once where nothing needs a
closer look (``shadow_runs.record_disjoint``; in global memory, first accesses),
which gives the same verdict since their bytes are disjoint; else lane by lane,
saving only the calls between them.  It first computes every lane's address and
returns ``outcomes.FALLBACK``, having done nothing, when one is not the plain case (a
cluster or generic address, misaligned, out of bounds, bytes of an initialised
mbarrier, a traced store): the per-thread function then runs lane by lane and
reports it in its own words.  A conflict found at lane j is raised by the
per-thread path's own function for lane j (``access_core.check_shared``,
``access_core.global_race``), after lanes 0..j-1 completed, exactly as lane by lane;
the error's ``access`` names lane j, which ``lockstep.run_piece`` reports.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np

from mosaic_async_store.check import access_core, asyncops
from mosaic_async_store.check.addresses import plain_global_lanes, plain_shared_lanes
from mosaic_async_store.check.global_memory import PAGE
from mosaic_async_store.check.outcomes import FALLBACK, YIELD
from mosaic_async_store.check.program import lanes_getter
from mosaic_async_store.check.registers import write
from mosaic_async_store.check.shadow_runs import record_disjoint

__all__ = ["SHARED", "shared_load", "shared_store", "global_load", "global_store",
           "async_store"]

SHARED = ("shared", "shared::cta")   # the state spaces of the own CTA's shared memory
_PAGE_MASK = PAGE - 1
_DTYPES = {1: np.dtype("<u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}
# The fewest accesses checked and recorded at once (``shadow_runs``): below it, the
# per-call cost of the batched path (NumPy, sorting) is more than the lane-by-lane loop
# it saves (a piece is small where the kernel's branches, guards or waits split its
# warp).  Both paths give the same verdicts.
BATCH = 8


def _no_barrier_bytes(sh, offs, n):
  """Whether no initialised mbarrier lies between the lowest and highest access."""
  lo, hi = min(offs), max(offs) + n
  return sh.mbar_bytes.count(0, lo, hi) == hi - lo


def _index(ints):
  """A list of ints as an index array (``fromiter``: the cheapest conversion)."""
  return np.fromiter(ints, np.intp, len(ints))


def _words(buf, size):
  """``buf`` as an array of its ``size``-byte little-endian words (a view)."""
  return np.frombuffer(buf, _DTYPES[size], len(buf) // size)


def _load_lanes(k, put, n, mask):
  """Loads of ``n`` bytes each by lanes at disjoint offsets (multiples of ``n``) into
  the register of setter ``put`` (``program.setter``, masking to ``mask``) at once, as
  ``load`` does lane by lane (None where NumPy has no integer of ``n`` bytes: then
  lane by lane)."""
  if n not in _DTYPES:
    return None
  masked, regs, col = mask < (1 << (8 * n)) - 1, k.registers, put.column
  def load(lanes, buf, offs):
    words = _words(buf, n)[_index(offs) // n]
    if masked:
      words &= mask
    if col is not None:   # (None: the sink, ``_``)
      write(regs, col, lanes, words.tolist())
  return load


def _store_lanes(k, vals, size):
  """Weak stores of ``vals`` (getters, ``size`` bytes each) by lanes at disjoint
  offsets (multiples of ``size``) at once: what ``access_core.write_values`` does lane by lane
  (``k.flags`` is empty: the warp forms go lane by lane otherwise); None where NumPy
  has no integer of ``size`` bytes."""
  if size not in _DTYPES:
    return None
  mask, forms = (1 << (8 * size)) - 1, [lanes_getter(g) for g in vals]
  def store(lanes, buf, offs):
    k.epoch += len(lanes)
    words, at = _words(buf, size), _index(offs) // size
    for j, form in enumerate(forms):
      words[at + j] = [v & mask for v in form(lanes)]
  return store


def _each(act):
  """``act(th, buf, off)`` for each lane (the warp form's acts where NumPy cannot)."""
  def each(lanes, buf, offs):
    for th, off in zip(lanes, offs):
      act(th, buf, off)
  return each


def _shared_access(k, addr, n, write, insn, act, lanes_act):
  """The warp form of a weak ``n``-byte access to the own CTA's shared memory: each
  lane checked and recorded in the shadow in lane order, then ``act(th, buf, off)``
  (the load or the store itself).  Lanes at distinct aligned offsets (disjoint
  bytes) are checked and recorded at once when ``shadow_runs.record_disjoint`` takes
  them; then ``lanes_act(lanes, buf, offs)`` does them all."""
  addrs_of, lanes_act = lanes_getter(addr), lanes_act or _each(act)
  def lanes_form(lanes):
    cta = lanes[0].cta   # (one warp: one CTA)
    buf, sh = k.smem[cta], k.shadow[cta]
    places = plain_shared_lanes(k, lanes, addrs_of(lanes), n, False)   # (not cluster: own CTA)
    if places is None:
      return FALLBACK
    offs = places[1]
    if len(lanes) >= BATCH and not (write and k.flags) and len(set(offs)) == len(offs):
      slots, clocks, rows = *k.lane_stamps(lanes), k.lane_rows(lanes)
      order = sorted(range(len(offs)), key=offs.__getitem__)
      at = offs
      if order != list(range(len(offs))):   # (in address order, as record_disjoint takes them)
        at, rows = [offs[i] for i in order], rows[order]
        slots, clocks = [slots[i] for i in order], [clocks[i] for i in order]
      if record_disjoint(sh, at, n, write=write, matrix=k.clocks, rows=rows, slots=slots,
                         clocks=clocks, insn=insn):
        lanes_act(lanes, buf, offs)
        return None
    if not _no_barrier_bytes(sh, offs, n):
      return FALLBACK
    conflict, record = sh.conflict, sh.record
    for th, off in zip(lanes, offs):
      vc, slot = th.vc, th.slot
      stamp = (slot, vc.item(slot), insn)
      if conflict(vc, off, n, write=write, atomic=False) is not None:
        access_core.check_shared(k, vc, th, cta, off, n, write=write, atomic=False, who=th, stamp=stamp)
      record(off, n, write=write, atomic=False, stamp=stamp)
      act(th, buf, off)
    return None
  return lanes_form


def shared_load(k, addr, n, put, mask, insn):
  """``ld{.weak}.shared{::cta}`` of ``n`` bytes at ``addr`` into the register of setter
  ``put`` (masking to ``mask``)."""
  def load(th, buf, off):
    put(th, int.from_bytes(buf[off:off + n], "little"))
  return _shared_access(k, addr, n, False, insn, load, _load_lanes(k, put, n, mask))


def shared_load_vector(k, addr, size, puts, insn):
  """``ld{.weak}.shared{::cta}.v2`` / ``.v4`` of ``size``-byte parts at ``addr`` into
  the registers of setters ``puts`` (``program.setter``; part i from byte i * size)."""
  def load(th, buf, off):
    for i, put in enumerate(puts):
      put(th, int.from_bytes(buf[off + i * size:off + (i + 1) * size], "little"))
  return _shared_access(k, addr, size * len(puts), False, insn, load,
                        _load_vector_lanes(k, puts, size))


def _load_vector_lanes(k, puts, size):
  """``shared_load_vector``'s loads by lanes at disjoint aligned offsets at once: each
  part's words for every lane into its register's column (None where NumPy has no
  integer of ``size`` bytes: then lane by lane)."""
  if size not in _DTYPES:
    return None
  regs = k.registers
  def load(lanes, buf, offs):
    words, at = _words(buf, size), _index(offs) // size
    for i, put in enumerate(puts):
      if put.column is not None:   # (None: the sink, ``_``)
        write(regs, put.column, lanes, words[at + i].tolist())
  return load


def shared_store(k, addr, vals, size, insn, traced):
  """A weak ``st.shared{::cta}`` of ``vals`` (getters, ``size`` bytes each) at
  ``addr``; ``traced``: whether ``launch(trace_stores=True)`` records it (then the
  lanes go one by one, through ``access_core.trace``)."""
  mask = (1 << (8 * size)) - 1
  def store(th, buf, off):
    access_core.write_values(k, buf, off, size, [g(th) & mask for g in vals], None, weak=True)
  form = _shared_access(k, addr, size * len(vals), True, insn, store,
                        _store_lanes(k, vals, size))
  if not traced:
    return form
  def traced_form(lanes):
    return FALLBACK if k.store_trace is not None else form(lanes)
  return traced_form


def _global_first(k, lanes, buf, offs, n, write, insn):
  """The first accesses of ``lanes`` to their ``n`` bytes each at ``offs`` (aligned)
  of one page of global buffer ``buf``, recorded at once as
  ``global_memory.GlobalShadow.access`` records untouched bytes; returns whether
  they were (distinct aligned offsets: disjoint bytes, so lane order does not matter)
  and did, else changes nothing."""
  if len(set(offs)) != len(offs):
    return False
  lo, hi = min(offs), max(offs) + n
  cells = k.gshadow.page(buf, lo, hi)
  if cells is None:
    return False
  base = lo & ~_PAGE_MASK
  os = [off - base for off in offs]
  count, step = len(os), (os[1] - os[0] if len(os) > 1 else n)
  if step >= n and os[-1] == os[0] + step * (count - 1) and \
     os == list(range(os[0], os[0] + step * count, step)):   # lanes step through memory
    lanes_bytes = [slice(os[0] + j, os[-1] + j + 1, step) for j in range(n)]   # (byte j of
  else:                                                                     # each access)
    lanes_bytes = None
    lo, hi = lo - base, hi - base
    # every access's bytes untouched: the span at once where it is dense, else each
    if hi - lo > 2 * n * count or cells[lo:hi].count(None) != hi - lo:
      for o in os:
        if cells[o:o + n].count(None) != n:
          return False
  if lanes_bytes is not None and any(cells[at].count(None) != count for at in lanes_bytes):
    return False
  slots, clocks = k.lane_stamps(lanes)
  if write:
    recs = [[slot, clock, insn, None, None, o, n] for slot, clock, o in zip(slots, clocks, os)]
  else:
    recs = [[0, 0, -1, None, (slot, clock, insn, None), o, n]
            for slot, clock, o in zip(slots, clocks, os)]
  if lanes_bytes is not None:
    for at in lanes_bytes:
      cells[at] = recs
  else:
    for rec, o in zip(recs, os):
      cells[o:o + n] = [rec] * n
  return True


def _global_access(k, addr, n, write, insn, act, lanes_act):
  """The warp form of a weak ``n``-byte access to global memory: each lane checked and
  recorded in the global shadow in lane order, then ``act(th, buf, off)``; lanes'
  first accesses to bytes of one page all at once (``_global_first``), then
  ``lanes_act(lanes, buf, offs)`` does them all."""
  addrs_of, lanes_act = lanes_getter(addr), lanes_act or _each(act)
  def lanes_form(lanes):
    places = plain_global_lanes(k, addrs_of(lanes), n)
    if places is None:
      return FALLBACK
    buf, offs = places
    if len(lanes) >= BATCH and not (write and k.flags) and \
       _global_first(k, lanes, buf, offs, n, write, insn):
      lanes_act(lanes, buf, offs)
      return None
    check = k.gshadow.access
    for th, off in zip(lanes, offs):
      bad = check(th, buf, off, n, write, False, insn, None)
      if bad is not None:
        access_core.global_race(k, th, buf, off, n, write, bad, None, insn)
      act(th, buf, off)
    return None
  return lanes_form


def global_load(k, addr, n, put, mask, insn):
  """``ld{.weak}.global`` of ``n`` bytes at ``addr`` into the register of setter ``put``
  (masking to ``mask``)."""
  def load(th, buf, off):
    put(th, int.from_bytes(buf[off:off + n], "little"))
  return _global_access(k, addr, n, False, insn, load, _load_lanes(k, put, n, mask))


def global_store(k, addr, value, n, insn):
  """A weak scalar ``st.global`` of ``value`` (a getter) at ``addr``."""
  mask = (1 << (8 * n)) - 1
  def store(th, buf, off):
    data = value(th) & mask
    k.epoch += 1
    if k.flags:
      access_core.forget_flags(k, buf, off, n)
    buf[off:off + n] = data.to_bytes(n, "little")
  return _global_access(k, addr, n, True, insn, store, _store_lanes(k, (value,), n))


def async_store(k, addr, vals, size, red, mbar, insn, text):
  """The issue of ``st.async`` (``red`` None) or ``red.async`` (``red``: (operation,
  type)) of ``vals`` at ``addr``, completing on the mbarrier at ``mbar``: returns
  ``YIELD`` (every lane yields) when the schedule pauses the piece after it."""
  n, mask = size * len(vals), (1 << (8 * size)) - 1
  addrs_of, bars_of = lanes_getter(addr), lanes_getter(mbar)
  values_of = [lanes_getter(g) for g in vals]
  def lanes_form(lanes):
    if k.store_trace is not None or len(k.smem) == 1 or len(lanes) < BATCH:
      return FALLBACK
    places = plain_shared_lanes(k, lanes, addrs_of(lanes), n, True)
    bar_places = places and plain_shared_lanes(k, lanes, bars_of(lanes), 8, True)
    if not bar_places or bar_places[0] != places[0]:   # (what issue would refuse:
      return FALLBACK                                   # the barrier elsewhere, ...)
    cta, offs = places
    if red and cta == lanes[0].cta:   # (a reduction into the own CTA)
      return FALLBACK
    barriers, bar_offs, rows = k.mbar, bar_places[1], k.lane_rows(lanes)
    clocks = k.lane_clocks(lanes).copy()   # (the lanes' clocks at issue)
    for off in set(bar_offs):
      bar = barriers.get((cta, off))
      if bar is None or (clocks[:, bar.init[0]] < bar.init[1]).any():
        return FALLBACK
    completions = {off: asyncops.MbarrierTx((cta, off), n) for off in set(bar_offs)}
    if len(values_of) == 1:
      per_lane = [[v & mask] for v in values_of[0](lanes)]
    else:
      per_lane = [[v & mask for v in vs] for vs in zip(*[form(lanes) for form in values_of])]
    # asyncops.issue / issue_store, lane by lane, with the lanes' clocks copied at once
    inflight = k.inflight
    if red is None:   # a StoreGroup per run of lanes on one mbarrier, as issue_store
      _store_groups(k, lanes, offs, bar_offs, per_lane, clocks, completions, insn,
                    text, cta, size)
    else:
      for i, (th, off, bar_off) in enumerate(zip(lanes, offs, bar_offs)):
        write = asyncops.Write(cta, off, size, per_lane[i], red)
        op = asyncops.AsyncOp(th, insn, text, [write], completions[bar_off], vc=clocks[i])
        op.idx = len(inflight)
        inflight.append(op)
    slots, own = k.lane_stamps(lanes)   # (sync.mbarrier_of's users: each lane's own clock)
    if len(completions) == 1:
      barriers[cta, bar_offs[0]].users.update(zip(slots, zip(own, repeat(insn))))
    else:
      for slot, clock, bar_off in zip(slots, own, bar_offs):
        barriers[cta, bar_off].users[slot] = (clock, insn)
    k.shadow[cta].mark_inflight_all(offs, n, atomic=red is not None)
    k.tick(rows)
    return YIELD if k.sched.pauses(k.step) else None
  return lanes_form


def _store_groups(k, lanes, offs, bar_offs, per_lane, clocks, completions, insn, text,
                  cta, size):
  """Queues the ``asyncops.StoreGroup`` s of a warp's plain ``st.async``: one per run of
  lanes (in lane order) whose stores complete on one mbarrier, as ``issue_store``
  makes them lane by lane."""
  start, count, inflight = 0, len(lanes), k.inflight
  ends = [count] if bar_offs.count(bar_offs[0]) == count else range(1, count + 1)
  for end in ends:
    if end < count and bar_offs[end] == bar_offs[start]:
      continue
    group = asyncops.StoreGroup(insn, text, cta, size, completions[bar_offs[start]], k.step)
    group.lanes, group.offs = lanes[start:end], offs[start:end]
    group.values, group.vcs = per_lane[start:end], clocks[start:end]
    group.idx = len(inflight)
    inflight.append(group)
    start = end
