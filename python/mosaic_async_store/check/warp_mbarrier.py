"""Warp forms (``program.Program.vcode``) of mbarrier operations: ``mbarrier.arrive``
(with or without ``.expect_tx``) and the waits (``wait``: its doc), one call for all the
lanes of a piece (``lockstep.run_piece``).

The warp form does what ``sync._arrive``'s function of the thread does lane by lane
in lane order, where the lanes arrive on one barrier and none of them meets a
finding or completes the phase before the last: then every lane's expect-tx and
arrive-on operation is applied at once (the same arrival records, users, released
clocks, tx-count and pending count, the same phase written to each lane's state
register), and the phase, if the last lane completes it, completes once after them
(``mbarrier_state.advance_phase``), as it would after the last lane.  Otherwise it returns
``outcomes.FALLBACK`` having changed nothing, and the lanes go one by one, reporting
in their own words: a barrier that is not the plain case (another CTA's the lanes
have not reached yet, an uninitialised one, an initialisation not visible to a
lane), an arrival overflow, a tx-count out of range, a ``.noComplete`` arrival that
completes the phase, lanes on different barriers, a wait whose state or parity may name
a phase long past (``mbarrier_forms.overrun_suspect``: the finding ``phase-overrun``).
A relaxed arrival publishes the clock of the lane's last fence, if any
(``sync._release``): it has the warp form where no lane has one (it publishes nothing);
``mbarrier.arrive_drop`` (which changes the expected count) has none.  Each lane's
state register gets the state lane by lane would give it (``mbarrier_forms.encode_state``:
with .noComplete, the pending count before its own arrive-on).
"""

from __future__ import annotations

from itertools import accumulate, repeat
from operator import sub

import numpy as np

from mosaic_async_store.check import arrival_orders, mbarrier_forms, mbarrier_state
from mosaic_async_store.check.addresses import plain_shared_lanes
from mosaic_async_store.check.memory import TX_LIMIT, morally_strong
from mosaic_async_store.check.outcomes import FALLBACK, YIELD
from mosaic_async_store.check.program import lanes_getter

__all__ = ["arrive", "wait"]

RELEASING = ("release", "acq_rel", "sc")   # (sync._release: semantics that publish)
ACQUIRING = ("acquire", "acq_rel", "sc")   # (mbarrier_state._observe: semantics that acquire)


def _one_barrier(k, lanes, addrs_of, space):
  """(the Mbarrier, the lanes' clocks: ``Machine.lane_clocks``) where every one of
  ``lanes`` (two or more) names one mbarrier at ``addrs_of(lanes)`` in ``space`` (one
  address, the plain case, initialised, its initialisation visible to every lane), or
  None."""
  if space is None or len(lanes) < 2:
    return None
  addrs = addrs_of(lanes)
  place = addrs.count(addrs[0]) == len(addrs) and \
      plain_shared_lanes(k, lanes, addrs, 8, space == "shared::cluster")
  bar = place and k.mbar.get((place[0], place[1][0]))
  if not bar:
    return None
  vcs = k.lane_clocks(lanes)
  return None if (vcs[:, bar.init[0]] < bar.init[1]).any() else (bar, vcs)


def arrive(k, space, addr, tx, count, sem, scope, no_complete, put, pc):
  """The warp form of ``mbarrier.arrive`` (``sync._arrive`` compiles its operands:
  getters ``addr``, ``tx``, ``count``; the state register's setter ``put``; ``pc``,
  the instruction's index); a relaxed arrive's only where no lane has a fence to
  publish (``th.fence_rel``), else lane by lane."""
  releases = sem in RELEASING
  if not releases and sem != "relaxed":
    return None
  addrs_of, tx_of, count_of = lanes_getter(addr), lanes_getter(tx), lanes_getter(count)
  def lanes_form(lanes):
    if not releases and any(th.fence_rel is not None for th in lanes):
      return FALLBACK
    found = _one_barrier(k, lanes, addrs_of, space)
    if found is None:
      return FALLBACK
    bar, vcs = found
    txs, counts = tx_of(lanes), count_of(lanes)
    pending = bar.pending - sum(counts)
    tx_after = list(accumulate(txs, initial=bar.tx))
    if min(counts) < 1 or pending < 0 or max(map(abs, tx_after)) > TX_LIMIT or \
       pending == tx_after[-1] == 0:   # (the completing lane: arrival_orders.holds)
      return FALLBACK   # (pending reaches 0, if at all, with the last lane: counts >= 1)
    rows, (slots, clocks) = k.lane_rows(lanes), k.lane_stamps(lanes)
    arrival_orders.note(k, bar, slots, vcs, k.seen[rows, bar.slot])
    # sync.mbarrier_of's users, the arrivals (and the exit rule's remote ones), the release
    bar.users.update(zip(slots, zip(clocks, repeat(pc))))
    if bar.key[0] != lanes[0].cta:
      k.remote_arrivals[bar.key[0]].update(   # (mbarrier_state._note_remote, lane by lane)
          ((int(s), bar.slot), (int(c), bar.phase, pc)) for s, c in zip(slots, clocks))
    bar.arrivals.update(zip(slots, clocks))
    # every lane's clock joined: as one release after another (a .cta-scoped one on
    # another CTA's barrier: the warning peer-arrive-cta, mbarrier_state.release_origin)
    if releases:
      origin = mbarrier_state.release_origin(k, lanes[0].cta, lanes[0].tid, bar, sem, scope)
      bar.releases.add(origin, scope, vcs.max(axis=0))
    k.tick(rows)
    k.epoch += len(lanes)   # (mbarrier_state.add_tx, once per lane)
    befores = accumulate(counts, sub, initial=bar.pending)   # each lane's pending before
    bar.tx, bar.pending = tx_after[-1], pending
    for th, before in zip(lanes, befores):   # (the state it returns)
      put(th, mbarrier_forms.encode_state(bar.phase, before if no_complete else None))
    mbarrier_state.advance_phase(k, bar)
    return YIELD if k.sched.pauses(k.step) else None
  return lanes_form


def wait(k, space, addr, parity, pred, sem, scope, blocking, pc, by_state):
  """The warp form of ``mbarrier.test_wait`` / ``try_wait`` (``blocking``: try_wait;
  ``sync._wait`` compiles the operands: getters ``addr`` and ``parity`` (the parity, or
  a state whose parity it is), the predicate register ``pred``; ``pc``, the
  instruction's index; ``by_state``: the operand is a state): each lane observes the
  phase, or fails its first try (and polls, where it yields), as ``sync._wait`` does it
  lane by lane; where a lane would block, or may name a phase long past
  (``sync.overrun_suspect``), every lane goes lane by lane.  None for a
  relaxed wait (lane by lane: its observation waits for a fence)."""
  if sem not in ACQUIRING:
    return None
  addrs_of, parity_of = lanes_getter(addr), lanes_getter(parity)
  def lanes_form(lanes):
    found = _one_barrier(k, lanes, addrs_of, space)
    if found is None:
      return FALLBACK
    bar = found[0]
    phase, observers, tries = bar.phase, [], []
    for th, raw in zip(lanes, parity_of(lanes)):
      if mbarrier_forms.overrun_suspect(th, bar, raw, by_state):
        return FALLBACK
      par = raw & 1
      done, instance = phase & 1 != par, (pc, bar.key, par, phase)
      if done and (th.tried_wait == instance or th.seen[bar.slot] >= phase):
        observers.append(th)
      elif th.tried_wait != instance or not blocking:
        tries.append((th, instance, done or not blocking))
      else:   # (it blocks: waits.block, lane by lane)
        return FALLBACK
    slots, clocks = k.lane_stamps(lanes)   # (sync.mbarrier_of's users)
    bar.users.update(zip(slots, zip(clocks, repeat(pc))))
    yielded = {}
    if tries:   # a failed try (a poll where it yields)
      k.registers.put_lanes(pred, [t[0] for t in tries], [0] * len(tries))
    for th, instance, polls in tries:
      th.tried_wait = instance
      if polls:
        th.polled, yielded[th] = True, YIELD
    if observers:
      _observe(k, observers, bar, scope)
      k.registers.put_lanes(pred, observers, [1] * len(observers))
    return yielded or None
  return lanes_form


def _observe(k, lanes, bar, scope):
  """``mbarrier_state._observe`` with acquire semantics, for ``lanes`` (of one warp) at once:
  every lane saw the phase before the current one complete."""
  q = bar.phase - 1
  if q >= 0:
    rows, slot = k.lane_rows(lanes), bar.slot
    k.seen[rows, slot] = np.maximum(k.seen[rows, slot], q + 1)
    k.clocks[rows, slot] = np.maximum(k.clocks[rows, slot], q + 1)
    for (cta, rscope), vc in bar.records[q].by_origin.items():   # (Releases.acquire_into)
      if morally_strong(cta, rscope, lanes[0].cta, scope):
        k.acquire_rows(rows, vc)
      else:
        for th in lanes:
          np.maximum(th.unscoped, vc, out=th.unscoped)
          th.unscoped_pair = (rscope, scope)
