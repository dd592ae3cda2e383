"""The pairings of warps into instances of a named CTA barrier that a launch explores
(``explore``, called by ``run.launch``; ``holds``, by ``barriers``, whose
``release_held`` lets the held warps arrive).

PTX ISA, bar / barrier: "Operand b specifies the number of threads participating in
the barrier"; the instruction "marks warps' arrival at barrier"; "When a barrier
completes, the waiting threads are restarted without delay, and the barrier is
reinitialized so that it can be immediately reused".  So when more warps use one
barrier with a count ``b`` than ``b`` covers, an instance is formed by the first
``b / 32`` warps to arrive, and which warps meet in one instance depends on their
order of arrival, which the program does not fix: a warp may always be slower.  One
schedule makes one order; the verdict must not rest on it.

The method.  A run counts every *candidate* completion: a warp whose arrival would
complete an instance of barrier (CTA, id) with a count while some other warp of the
CTA with a non-exited thread is neither in the instance nor held back.  After the run,
the candidates where one of those outside warps arrives on that barrier at some time
in the run (it shares the barrier) are *ambiguous*.  For each (the first ``RUNS``),
the launch runs the kernel again under the same schedule, identical up to that
completion, where the completing warp is held back: it has not arrived yet (a slower
warp), so the instance is completed by the next warp that arrives on it instead; the
held warp then arrives, on the next instance (or, when no thread can run any more,
as soon as nothing else can: ``run`` releases it).  Every such run is an execution
the hardware may make, so what it reports is a real finding; together they pair the
warps of each ambiguous instance with another partner than the schedule's order
gave (for two pairs of warps sharing one barrier: every wrong pairing has one warp
of the natural pair with another partner, so a race of a wrong pairing is found in
every schedule).  The runs are bounded (``RUNS``): not every pairing of many warps.
"""

from __future__ import annotations

from mosaic_async_store.check.barrier_warps import WARP, NamedWait, warp_live

__all__ = ["RUNS", "explore", "holds"]

RUNS = 8   # the runs a launch adds, at most: one per ambiguous completion


def explore(k, run_once):
  """Runs the kernel (``run_once()``, a fresh run of the machine ``k``: its outputs or
  None, its findings in ``k.findings``); where a named barrier's completion was
  ambiguous and the run found no error (warnings aside), runs it again with the completing warp held
  back (module doc), each a run of its own; the first that finds an error stops the
  exploration, and its findings and state are the launch's.  Else returns
  the first run's output, after running it again where others ran (the machine's
  state after the launch is the natural run's)."""
  k.pair_plan = None
  out = run_once()
  users = k.pair_users
  plans = [i for i, (key, outside) in enumerate(k.pair_seen)
           if outside & users.get(key, frozenset())][:RUNS]
  if not plans or _errors(k):
    return out
  try:
    for i in plans:
      k.pair_plan = i
      run_once()
      if _errors(k):
        return None
  finally:
    k.pair_plan = None
  return run_once()


def holds(k, key, bar, rec, w) -> bool:
  """Whether warp ``w`` (its arrival ``rec``), whose arrival would complete ``bar``
  (the instance of barrier ``key``), is held back: counts the candidate completion
  (module doc) and holds the one the run's plan names."""
  if bar.count is None or bar.count != rec.count or bar.warps + 1 < bar.count // WARP:
    return False
  held = {x for x, _ in k.held.get(key, ())}
  outside = frozenset(
      x for x in range(-(-k.block // WARP))
      if x != w and x not in bar.members and x not in held
      and warp_live(k, key[0], x))
  if not outside:
    return False
  n = len(k.pair_seen)
  k.pair_seen.append((key, outside))
  if k.pair_plan != n:
    return False
  k.held.setdefault(key, []).append((w, rec))
  for th, _, _ in rec.lanes.values():
    th.wait = NamedWait((*key, w, "held"))
  return True


def _errors(k) -> bool:
  """Whether the run found a broken rule that is an error (not a warning)."""
  return any(f.severity == "error" for f in k.findings)
