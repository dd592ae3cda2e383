"""The orders of thread arrivals on an mbarrier that a launch explores (``explore``,
called by ``run.launch``; ``holds`` and ``note``, by the arrive instructions of ``sync``
and ``warp_mbarrier``; ``release``, by ``run`` when no thread can run).

PTX ISA, mbarrier: the current phase completes when the pending arrival count reaches
zero (and the tx-count too), and the arrive-on operations that come after it count in the
next phase.  So where more threads arrive on a barrier than one phase expects, which
arrivals make a phase depends on their order, which the program may not fix: a thread
may always be slower.  One schedule makes one order; the verdict must not rest on it.

The method (as ``pairings`` does for named CTA barriers).  A run records every
*completing* arrival: a thread ``X`` whose arrive-on completes phase ``p`` of barrier
``B``.  It is *ambiguous* where a later arrival on ``B`` in phase ``p + 1``, by another
thread ``Y``, could have come first: ``Y`` is not ordered after ``X``'s arrival (its clock
at ``X``'s slot is below ``X``'s clock there) nor after the completion of phase ``p``
(it neither observed it nor acquired from a thread that did: its clock and ``seen`` at
the barrier's slot are at most ``p``).  For each ambiguous one (the first ``RUNS``), the
launch runs the kernel again under the same schedule, identical up to that arrival,
where ``X`` is held back before its arrive (a slower thread) until no thread can run (or
every runnable one spins: ``run``), then arrives; so ``Y``'s arrival, or another's,
completes phase ``p`` instead.  Every such run is an execution the hardware may make,
and the first that finds an error is the launch's.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check.waits import Wait, resume

__all__ = ["RUNS", "explore", "reset", "holds", "note", "release"]

RUNS = 4   # the runs a launch adds, at most: one per ambiguous completing arrival


class HeldArrival(Wait):
  """A thread held back before its ``mbarrier.arrive`` (module doc): it runs the
  instruction again when ``release`` lets it go (no advance)."""

  __slots__ = ("key",)
  advance = 0

  def __init__(self, key):
    self.key = key

  def describe(self, k, th) -> tuple[int, str]:
    return th.pc, f"its turn to arrive on {k.mbar[self.key].describe()} (held back)"


def reset(k) -> None:
  """A run's fresh records: ``k.arrive_seen`` (per completing arrival: [barrier key,
  phase, thread slot, its clock, ambiguous]), ``k.arrive_last`` (barrier key -> the
  index of its last one), ``k.arrive_held`` (threads held back)."""
  k.arrive_seen, k.arrive_last, k.arrive_held = [], {}, []


def explore(k, run):
  """Runs the kernel (``run()``: a fresh run of the machine ``k``, its outputs or None,
  its findings in ``k.findings``); where a completing arrival was ambiguous and the run
  found no error, runs it again with that thread held back (module doc), once per such
  arrival; the first that finds an error is the launch's.  Else returns the first run's
  output, after running it again where others ran (the machine's state after the launch
  is the natural run's)."""
  k.arrive_plan = None
  out = run()
  plans = [i for i, rec in enumerate(k.arrive_seen) if rec[4]][:RUNS]
  if not plans or _errors(k):
    return out
  try:
    for i in plans:
      k.arrive_plan = i
      run()
      if _errors(k):
        return None
  finally:
    k.arrive_plan = None
  return run()


def _errors(k) -> bool:
  return any(f.severity == "error" for f in k.findings)


def holds(k, th, bar, count, tx) -> bool:
  """Whether ``th``, whose arrive-on (``count`` arrivals, ``tx`` bytes expected) on
  ``bar`` is about to run, is held back (then it waits, blocked: the caller returns
  ``outcomes.BLOCK``).  Notes the arrival (``note``) and records it where it completes
  the phase."""
  note(k, bar, np.array([th.slot]), th.vc[None, :], th.seen[bar.slot])
  if bar.pending != count or bar.tx + tx != 0:
    return False
  i = len(k.arrive_seen)
  k.arrive_seen.append([bar.key, bar.phase, th.slot, int(th.vc[th.slot]), False])
  k.arrive_last[bar.key] = i
  if k.arrive_plan != i:
    return False
  th.wait = HeldArrival(bar.key)
  k.arrive_held.append(th)
  return True


def note(k, bar, slots, vcs, seen) -> None:
  """Arrivals on ``bar`` in its current phase by the threads ``slots`` (a sequence), with
  clocks ``vcs`` (one row each) and ``seen`` (their ``Thread.seen`` at the barrier's slot,
  an array or a number): marks the last completing arrival ambiguous where one of them
  could have come before it (module doc)."""
  i = k.arrive_last.get(bar.key)
  if i is None:
    return
  rec = k.arrive_seen[i]
  if rec[4] or rec[1] != bar.phase - 1:
    return
  x_slot, x_clock, slots = rec[2], rec[3], np.asarray(slots)
  unordered = (vcs[:, x_slot] < x_clock) & (np.maximum(vcs[:, bar.slot], seen) < bar.phase) \
      & (slots != x_slot)
  if unordered.any():
    rec[4] = True


def release(k) -> bool:
  """Lets the held threads go (no other thread can run): each runs its arrive again.
  Whether there was one."""
  held, k.arrive_held = k.arrive_held, []
  for th in held:
    resume(k, th)
  return bool(held)
