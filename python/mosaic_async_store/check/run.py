"""Running a cluster: threads, the run queue, and the scheduler of the PTX checker.

Functions of the machine ``k`` (``machine.Machine``): ``launch`` resets its state
and runs the loop; each step picks a runnable thread (the schedule's choice) and runs
it with the runnable lanes of its warp at the same instruction, in lockstep, until
each blocks, exits or yields (``lockstep``: the unit of execution is a warp's piece
of converged lanes; divergence splits it, and the pieces merge again where their
program counters meet), lands the asynchronous operations the schedule says
(``asyncops``) and releases the threads whose synchronisation can complete
(``_resolve``: each blocked thread's ``waits.Wait`` says whether it is ready; the
kinds live with their families: mbarrier waits, named and cluster barriers, warp
collectives, bulk groups).  Lockstep is an interleaving a warp may run in
(every lane's instruction i before any lane's i + 1); what the checker reports does
not rest on it: races are judged by happens-before, per lane.

Polling. A thread that spins on a strong load (``strong``) or ``nanosleep`` yields after
each poll, and a warp's piece after ``lockstep.LOOP_YIELD`` backward jumps in a row (a
spin on a weak load). When it yields again in the same state (program counter, registers
and local memory; of the registers, those that the path back to that program counter can
write: ``poll_state``) and nothing another thread could see has changed since
(``k.epoch``, bumped by every write, mbarrier change, barrier arrival and exit), it
would only repeat itself: it is parked (``waits.PollWait``) until the epoch moves. So a
spin loop costs a few iterations per change, and one that nothing will ever end is
reported as a hang instead of running forever. A loop that counts its tries never
repeats a state: when every runnable thread has polled twice since the last change (it
spins), asynchronous operations in flight land (``_land_for_spinners``), as they do on
hardware in finite time, so a correct poll ends with its phase, not its count.

Late observers.  A thread that polled (yielded after a poll, or parked) is *late* until it
runs a step that is not a poll: ``k.late`` maps its slot to its class, 2 where its poll was
an mbarrier wait for a phase it did not arrive in (an observer, ``_late_class``), else 1;
a thread that is not late has class 0. The schedule picks among the runnable threads of
the lowest class (``Schedule.pick_thread``), and a blocked wait that ``observes_late``
(``sync.MbarrierWait``: its ``key`` and ``phase``) whose phase completed stays blocked
while a runnable thread has a lower class than its own (``k.late_ready``: the lowest class
held; ``_resolve`` completes it once none has). A thread may always be slower than the
others (the ISA promises no thread a speed), so each such run is an execution the hardware
may make, and in it an observer sees a completed phase as late as it can while the threads
whose arrivals make the next phases run first: where the next phase can complete before
the observer polls, it does, in every schedule, and the observer's parity names a phase
two behind (``phase-overrun``) or its missing data is a race.

Arrival orders.  Where another order of thread arrivals would complete an mbarrier phase
with other arrivals, the launch runs the kernel again with the completing thread held back
(``arrival_orders``, bounded).

Landing orders.  Where another landing order of the operations in flight would complete an
mbarrier phase with other data, the launch runs the kernel again with that order
(``landing_orders``: bounded, as ``pairings`` does for named barriers).

Budget.  ``launch`` stops a run past its ``budget.Budget`` (thread-instructions, the
memory it grew by; a MemoryError too) with ``BudgetExceeded``: unfinished, neither a
finding nor a crash.
"""

from __future__ import annotations

import gc

import numpy as np

from mosaic_async_store.check import (arrival_orders, barriers, findings, landing_orders,
                                      lockstep, pairings, poll_state)
from mosaic_async_store.check import waits
from mosaic_async_store.check import budget as budget_mod
from mosaic_async_store.check.machine import ParamMismatch
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.memory import CheckerError

__all__ = ["launch"]

POLL_STATES = 64  # the states a poller remembers per epoch (a repeat parks it)


# ``launch`` and the scheduling loop.


def launch(k, buffers, *, cluster, smem_bytes, block=128, max_timeouts=64, schedule=0,
           barrier_slots=64, trace_stores=False, smem_init=None, first_cta=0,
           grid_ctas=None, budget=budget_mod.DEFAULT):
  """Runs one cluster of ``cluster`` CTAs of ``block`` threads under the seeded
  ``schedule`` (see schedule.Schedule).  ``buffers`` (NumPy arrays or
  ``Memref``s, in parameter order: see Machine.pack_params) are copied in; returns
  their contents afterwards, in argument order, as uint8 arrays, or None where the
  run found a broken rule (a warning alone leaves them).  Every broken rule is in ``k.findings`` (``findings.py``:
  a race lets the run go on, a fault or a hang ends it).  With ``trace_stores``, ``k.store_trace``
  maps (cta, tid) to that thread's store instructions into SMEM, in program
  order, each as (destination CTA, byte offset, bytes) (``access_core.trace``
  says which stores count).  ``smem_init``, if given, holds each CTA's first SMEM
  bytes at launch (as if written before the kernel; the rest is uninitialised).
  ``cluster``: its CTAs, or its shape (x, y, z); ``first_cta`` / ``grid_ctas``: this
  cluster's first CTA in a grid of that many, each an int (x) or (x, y, z) (the
  ``%ctaid``, ``%nctaid``, ``%clusterid`` registers; default: the grid is this cluster).
  ``budget`` (``budget.Budget``): past it the run stops with ``BudgetExceeded`` (also
  where memory runs out), neither a finding nor a crash.  An unexpected exception of
  the checker itself is raised as ``CheckerError``."""
  # A run allocates many small containers (a set per shadow byte, vector clocks,
  # queued operations) and leaves no garbage in cycles that matters for its length:
  # the cyclic collector's passes would only cost time (about a sixth of it).
  enabled = gc.isenabled()
  gc.disable()
  try:
    # (runs again where warps may pair otherwise on a named barrier: pairings.py; where
    # another order of arrivals or landings completes an mbarrier phase: arrival_orders.py,
    # landing_orders.py)
    return landing_orders.explore(k, lambda: arrival_orders.explore(
        k, lambda: pairings.explore(k, lambda: _run_once(
            k, buffers, cluster, smem_bytes, block, max_timeouts, schedule, barrier_slots,
            trace_stores, smem_init, first_cta, grid_ctas, budget))))
  except MemoryError:
    k.drop_state()   # (the run's state is what filled memory: let it go first)
    raise budget_mod.BudgetExceeded("memory", "the process ran out of memory",
                                    k.executed) from None
  except (NotImplementedError, budget_mod.BudgetExceeded, CheckerError, ParamMismatch):
    raise
  except Exception as e:   # the scheduler's own failure: never a finding
    raise CheckerError(f"internal error of the checker's scheduler: {type(e).__name__}: "
                       f"{e} (please report it, with the kernel)") from e
  finally:
    if enabled:
      gc.enable()


def _run_once(k, *args):
  """One run (``_launch``'s arguments): its outputs, or None where an error (not a
  warning: ``Finding.severity``) or the findings' limit stopped it; its findings are in
  ``k.findings`` either way."""
  out = None
  try:
    out = _launch(k, *args)
  except Stop as e:
    findings.stop(k, e.finding)
  except findings.FindingLimit:
    pass
  findings.flush(k)
  return None if any(f.severity == "error" for f in k.findings) else out


def _launch(k, buffers, cluster, smem_bytes, block, max_timeouts, schedule,
            barrier_slots, trace_stores, smem_init, first_cta, grid_ctas, budget):
  """``launch`` (its arguments in order), with the collector off."""
  k.reset(buffers, cluster=cluster, smem_bytes=smem_bytes, block=block, schedule=schedule,
          barrier_slots=barrier_slots, trace_stores=trace_stores, smem_init=smem_init,
          first_cta=first_cta, grid_ctas=grid_ctas)
  k.late, k.late_ready, k.land_seen = {}, 0, 0   # (module doc)
  arrival_orders.reset(k)
  memory_at_start, until_memory_check = budget_mod.resident_mb(), 0
  while True:
    if k.executed > budget.max_steps:
      raise budget_mod.BudgetExceeded(
          "steps", f"over max_steps={budget.max_steps}", k.executed)
    until_memory_check -= 1
    if until_memory_check < 0:
      until_memory_check = budget_mod.MEMORY_CHECK_EVERY
      grown = budget_mod.resident_mb() - memory_at_start
      if grown > budget.max_memory_mb:
        k.drop_state()
        raise budget_mod.BudgetExceeded(
            "memory", f"the run grew by {grown:.0f} MiB, over max_memory_mb="
            f"{budget.max_memory_mb}", k.executed)
    if k.parked:
      _unpark(k)
    if k.late_ready and (not _runs_before(k, k.late_ready) or _all_spinning(k)):
      _resolve(k, hold=False)   # held phase waiters' turn: no one else can (or will) run
    if k.inflight and k.runnable and _all_spinning(k):
      _land_for_spinners(k)
      continue
    if k.arrive_held and k.runnable and _all_spinning(k):   # (every one spins)
      arrival_orders.release(k)
      continue
    if k.runnable:
      late = k.late
      lanes = lockstep.piece(k, k.runnable[k.sched.pick_thread(k.runnable, late)])
      if len(lanes) == len(k.runnable):
        k.runnable = []
      else:   # (the others keep their order)
        k.dequeue(lanes)
      if late:   # (late until a step that is not a poll)
        for th in lanes:
          late.pop(th.slot, None)
      for th in lockstep.run_piece(k, lanes):   # the lanes that yielded: to the back of the
        if th.polled:                   # queue, so that a spin lets others run
          late[th.slot] = _late_class(k, th)
          _polled(k, th)
        if th.state == "run":
          k.runnable.append(th)
      landing_orders.land_all(k, k.sched.landing_now(k.inflight))
      if k.dirty:
        _resolve(k)
      continue
    if k.dirty and _resolve(k):
      continue
    if k.held and barriers.release_held(k):   # no thread can run: held warps arrive
      continue
    if k.arrive_held and arrival_orders.release(k):   # ... and held arrivals
      continue
    if k.inflight:   # nothing else can happen: something lands
      landing_orders.land(k, k.sched.landing_when_stuck(k.inflight))
      continue
    if not k.alive_total:
      return [np.frombuffer(bytes(b), np.uint8) for b in k.gbufs]
    blocked = [k.blocked[s] for s in sorted(k.blocked)]
    pollers = [th for th in blocked if th.wait.can_time_out]
    if not pollers or k.timeouts >= max_timeouts:
      raise Stop(Finding("hang", f"deadlock after {k.timeouts} timed-out polls; "
                          f"waiting: {_describe_waits(k, blocked)}"
                          + _grid_note(k, blocked)))
    k.timeouts += 1   # nothing can change any more: these polls time out
    for th in pollers:
      th.wait.time_out(k, th)
      waits.resume(k, th)


def _grid_note(k, blocked) -> str:
  """Why a polling loop in a grid of several clusters may wait in vain, or ""."""
  if k.grid_clusters < 2 or not any(type(th.wait) is waits.PollWait for th in blocked):
    return ""
  return (f". The grid has {k.grid_clusters} clusters, which the checker runs one "
          "after another: a poll that only another cluster's write ends hangs here, as "
          "it may on hardware, where a grid's clusters need not run at the same time "
          "(unless the kernel is launched cooperatively)")


def _describe_waits(k, blocked):
  """Every waiting thread, grouped by CTA, PTX line and what it waits for
  (``Wait.describe``: an mbarrier's CTA, offset, phase, pending arrivals and tx-count)."""
  groups = {}
  for th in blocked:
    pc, wait = th.wait.describe(k, th)
    groups.setdefault((th.cta, pc, wait), []).append(th.tid)
  parts = []
  for (cta, pc, wait), tids in sorted(groups.items()):
    who = (f"thread {tids[0]}" if len(tids) == 1 else
           f"threads {tids[0]}..{tids[-1]}" if tids[-1] - tids[0] == len(tids) - 1 else
           f"{len(tids)} threads {tids[:4]}{'...' if len(tids) > 4 else ''}")
    parts.append(f"CTA {cta} {who} at PTX line {k.program.lines[pc]} (`{k.program.texts[pc]}`) "
                 f"waiting for {wait}")
  return "; ".join(parts)



def _polled(k, th):
  """``th`` yielded after a poll: parks it if it polled in this state before and
  nothing changed since (module doc)."""
  th.polled = False
  if th.state != "run":
    return
  if th.poll_epoch != k.epoch:
    th.poll_epoch, th.poll_seen = k.epoch, set()
  else:   # it polled before and nothing changed since: it spins (_all_spinning)
    th.spin_epoch = k.epoch
  state = (th.pc, poll_state.state(k.registers, th, k.program.poll_columns[th.pc]),
           bytes(th.local))
  if state not in th.poll_seen:
    if len(th.poll_seen) < POLL_STATES:   # (a loop that counts its tries never repeats a
      th.poll_seen.add(state)             # state: it runs to its end, in bounded memory)
    return
  th.state, th.wait = "block", waits.PollWait(th.poll_pc)
  waits.block(k, th)
  k.parked.append(th)


def _all_spinning(k) -> bool:
  """Whether every runnable thread has polled again since the last change another
  thread could see (``_polled``): none of them can make progress until something
  lands."""
  epoch = k.epoch
  return all(t.spin_epoch == epoch for t in k.runnable)


def _land_for_spinners(k):
  """Every runnable thread polls in vain: asynchronous operations land, as on hardware
  they do in finite time (even in the schedule that lands them as late as it can),
  one after another in the schedule's order, up to the first that completes an
  mbarrier phase (the only change of theirs a correct poller can see: their bytes
  may not be read before the phase is observed), so that pollers spin once per phase,
  not once per operation."""
  while k.inflight:
    op = k.sched.landing_when_stuck(k.inflight)
    bar = k.mbar.get(getattr(op.completion, "key", None))
    phase = None if bar is None else bar.phase
    landing_orders.land(k, op)   # (op, or another on its barrier: the same phase)
    if bar is None or bar.phase != phase:
      return


def _unpark(k):
  """Resumes the parked pollers for which something changed."""
  still = []
  for th in k.parked:
    if th.poll_epoch != k.epoch:
      waits.resume(k, th)
    else:
      still.append(th)
  k.parked = still


def _runs_before(k, cls) -> bool:
  """Whether a runnable thread's class (module doc: late observers) is below ``cls``."""
  late = k.late
  return any(late.get(th.slot, 0) < cls for th in k.runnable)


def _late_class(k, th) -> int:
  """The class of ``th``, which polled (module doc): 2 where its poll was an mbarrier
  wait (``th.tried_wait``: (pc, barrier, parity, the barrier's phase) of the wait that
  returned false to it) for a phase it did not arrive in, else 1."""
  tried = th.tried_wait
  if tried is None or tried[0] != th.poll_pc:
    return 1
  _, key, parity, phase = tried
  return _observer_class(k, th, key, phase - 1 if phase & 1 != parity else phase)


def _observer_class(k, th, key, phase) -> int:
  """2 where ``th`` waits for phase ``phase`` of the mbarrier ``key`` without having
  arrived in it (``Mbarrier.arrivals`` / ``arrival_records``), else 1."""
  bar = k.mbar.get(key)
  if bar is None or phase < 0 or phase > bar.phase:
    return 1
  if phase == bar.phase:
    return 1 if th.slot in bar.arrivals else 2
  return 1 if (bar.arrival_records[phase][0] == th.slot).any() else 2


def _resolve(k, hold=True):
  """Releases every thread whose wait can complete now (``waits.Wait``: each kind's
  ``ready`` / ``complete``, or its class's ``resolve_group``); a wait that
  ``observes_late`` only where no runnable thread has a lower class than its own (or
  not ``hold``), else it stays blocked and ``k.late_ready`` keeps the lowest such class
  (module doc)."""
  woke, groups, k.dirty, k.late_ready, lowest = False, {}, False, 0, None
  for th in [k.blocked[s] for s in sorted(k.blocked)]:   # in thread order
    wait = th.wait
    if wait.grouped:
      groups.setdefault(type(wait), []).append(th)
    elif wait.ready(k, th):
      if wait.observes_late and hold:
        if lowest is None:   # (the lowest class of a runnable thread)
          late = k.late
          lowest = min((late.get(t.slot, 0) for t in k.runnable), default=3)
        cls = _observer_class(k, th, wait.key, wait.phase)
        if lowest < cls:
          k.late_ready = min(k.late_ready or cls, cls)
          continue
      wait.complete(k, th)
      waits.resume(k, th)
      woke = True
  for kind, threads in groups.items():
    woke = kind.resolve_group(k, threads) or woke
  return woke

