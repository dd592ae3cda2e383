"""The orders of landing of asynchronous operations that a launch explores (``explore``,
called by ``run.launch``; ``land`` / ``land_all``, by ``run``'s loop, land what the
schedule says through them).

PTX ISA, mbarrier: the phase completes when the pending arrival count and the tx-count
both reach zero; a complete-tx operation ("mbarrier.complete_tx" / an operation's
``.mbarrier::complete_tx::bytes``) decrements the tx-count by its bytes when the
transfer completes, and nothing orders the completions of two operations in flight.
Where an operation in flight would complete an mbarrier phase by landing (no arrival
pending, its bytes the tx-count left) and another one in flight on that barrier could
complete it instead, or a ``StoreGroup`` would complete it part-way (its later lanes
could land first), the phase's data depends on which lands first, which nothing orders.
An operation whose landing would complete a phase stays in flight while the thread that
issued it can still run (``land_all``, in every schedule), so that what that thread issues
after it on the barrier is in flight with it. Each landing that completes a phase while
another could is a *candidate*; after the run (when it found no error) the launch
runs the kernel again under the same schedule once per candidate (the first ``RUNS``),
identical up to it, where the other operation lands first (the group's lanes in reverse
order): every such run is an execution the hardware may make, and the first that finds
an error is the launch's (as ``pairings`` does for named barriers).
"""

from __future__ import annotations

from mosaic_async_store.check import asyncops

__all__ = ["RUNS", "explore", "land", "land_all"]

RUNS = 4   # the runs a launch adds, at most: one per candidate landing


def explore(k, run):
  """Runs the kernel (``run()``: a fresh run of the machine ``k``, its outputs or None,
  its findings in ``k.findings``); where a landing was a candidate (module doc) and the
  run found no error, runs it again once per candidate with the other operation landing
  first; the first that finds an error is the launch's.  Else returns the first run's
  output, after running it again where others ran (the machine's state after the launch
  is the natural run's)."""
  k.land_plan = None
  out = run()
  plans = min(k.land_seen, RUNS)
  if not plans or _errors(k):
    return out
  try:
    for i in range(plans):
      k.land_plan = i
      run()
      if _errors(k):
        return None
  finally:
    k.land_plan = None
  return run()


def _errors(k) -> bool:
  """Whether the run found a broken rule that is an error (not a warning)."""
  return any(f.severity == "error" for f in k.findings)


def land_all(k, ops):
  """Lands ``ops`` (what the schedule lands while threads can still run; distinct
  operations in flight) as ``asyncops.land_many`` does, each through ``land``, except one
  whose landing would complete an mbarrier phase while the thread that issued it can
  still run: it stays in flight (to land once that thread blocks or exits, or when no
  thread can run or every one spins: ``run``), so that what that thread issues after it
  on the barrier may land first (module doc).  One that another landed before it is
  skipped."""
  inflight = k.inflight
  for op in ops:
    while op.idx is not None and op.idx < len(inflight) and inflight[op.idx] is op:
      if op.th.state == "run" and _completing(k, op) is not None:
        break
      land(k, op)


def land(k, op):
  """Lands ``op`` (``asyncops.land``), or where that landing is the candidate the run's
  plan names (``k.land_plan``), its alternative first (module doc)."""
  other = _other_first(k, op)
  if other is not None:
    n, k.land_seen = k.land_seen, k.land_seen + 1
    if k.land_plan == n:
      if other is op:   # a group's later lanes first
        op.lanes, op.offs, op.values = op.lanes[::-1], op.offs[::-1], op.values[::-1]
        op.vcs = op.vcs[::-1]
      op = other
  asyncops.land(k, op)


def _other_first(k, op):
  """What could land instead of ``op`` and complete the mbarrier phase that ``op``'s
  landing completes: another operation in flight on that barrier whose landing would
  complete it too, or ``op`` itself where it is a ``StoreGroup`` that completes it
  part-way (its later lanes); None where its landing completes no phase, or nothing
  else could."""
  bar = _completing(k, op)
  if bar is None:
    return None
  completion = op.completion
  for other in k.inflight:
    if other is not op and type(other.completion) is asyncops.MbarrierTx and \
       other.completion.key == completion.key and _completes(other, bar):
      return other
  if type(op) is asyncops.StoreGroup and bar.tx // completion.nbytes < len(op.lanes):
    return op
  return None


def _completing(k, op):
  """The mbarrier whose phase ``op`` landing now would complete, or None."""
  completion = op.completion
  if type(completion) is not asyncops.MbarrierTx:
    return None
  bar = k.mbar.get(completion.key)
  if bar is None or bar.pending or bar.tx <= 0 or not _completes(op, bar):
    return None
  return bar


def _completes(op, bar) -> bool:
  """Whether ``op`` landing now would complete ``bar``'s phase (no arrival pending): its
  bytes (a ``StoreGroup``'s: some of its lanes') are the tx-count left."""
  n = op.completion.nbytes
  if type(op) is asyncops.StoreGroup:
    return bar.tx % n == 0 and bar.tx // n <= len(op.lanes)
  return n == bar.tx
