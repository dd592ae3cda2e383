"""Running a cluster: threads, the run queue, and the scheduler of the PTX checker.

Functions of the machine ``k`` (``machine.Machine``): ``launch`` resets its state
and runs the loop; each step picks a runnable thread (the schedule's choice) and runs
it with the runnable lanes of its warp at the same instruction, in lockstep, until
each blocks, exits or yields (``lockstep``: the unit of execution is a warp's piece
of converged lanes; divergence splits it, and the pieces merge again where their
program counters meet), lands the asynchronous operations the schedule says
(``asyncops``) and releases the threads whose synchronisation can complete
(``_resolve``, with ``sync`` for mbarrier waits, ``barriers`` for the cluster barrier
and ``warp`` for warp collectives).  Lockstep is an interleaving a warp may run in
(every lane's instruction i before any lane's i + 1); what the checker reports does
not rest on it: races are judged by happens-before, per lane.

Polling.  A thread that spins on a strong load (``strong``) or ``nanosleep`` yields
after each poll, and a warp's piece after ``LOOP_YIELD`` backward jumps in a row (a
spin on a weak load).  When it yields again in the same state (program counter and
registers) and nothing another thread could see has changed since (``k.epoch``,
bumped by every write, mbarrier change, barrier arrival and exit), it would only
repeat itself: it is parked (``("poll", pc)``) until the epoch moves.  So a spin
loop costs a few iterations per change, and one that nothing will ever end is
reported as a hang instead of running forever.  A loop that counts its tries never
repeats a state: when every runnable thread has polled twice since the last change
(it spins), asynchronous operations in flight land (``_land_for_spinners``), as they
do on hardware in finite time, so a correct poll ends with its phase, not its count.

Budget.  ``launch`` stops a run past its ``budget.Budget`` (thread-instructions, the
memory it grew by; a MemoryError too) with ``BudgetExceeded``: unfinished, neither a
finding nor a crash.
"""

from __future__ import annotations

import gc

import numpy as np

from mosaic_async_store.check import asyncops, barriers, lockstep, pairings, sync, warp
from mosaic_async_store.check import budget as budget_mod
from mosaic_async_store.check.machine import ParamMismatch
from mosaic_async_store.check.memory import CheckerError, ProtocolError

__all__ = ["launch"]

LOOP_YIELD = 64   # a thread yields after this many backward jumps in a row
POLL_STATES = 64  # the states a poller remembers per epoch (a repeat parks it)


# ``launch`` and the scheduling loop.


def launch(k, buffers, *, cluster, smem_bytes, block=128, max_timeouts=64, schedule=0,
           barrier_slots=64, trace_stores=False, smem_init=None, first_cta=0,
           grid_ctas=None, budget=budget_mod.DEFAULT):
  """Runs one cluster of ``cluster`` CTAs of ``block`` threads under the seeded
  ``schedule`` (see schedule.Schedule).  ``buffers`` (NumPy arrays or
  ``Memref``s, in parameter order: see Machine.pack_params) are copied in; returns
  their contents afterwards, in argument order, as uint8 arrays.  Raises
  ProtocolError on a violated rule.  With ``trace_stores``, ``k.store_trace``
  maps (cta, tid) to that thread's store instructions into SMEM, in program
  order, each as (destination CTA, byte offset, bytes) (``access._trace``
  says which stores count).  ``smem_init``, if given, holds each CTA's first SMEM
  bytes at launch (as if written before the kernel; the rest is uninitialised).
  ``first_cta`` / ``grid_ctas``: this cluster's first CTA in a grid of that many
  (``%ctaid.x``, ``%nctaid.x``, ``%clusterid.x``; default: the grid is this cluster).
  ``budget`` (``budget.Budget``): past it the run stops with ``BudgetExceeded`` (also
  where memory runs out), neither a finding nor a crash.  An unexpected exception of
  the checker itself is raised as ``CheckerError``."""
  # A run allocates many small containers (a set per shadow byte, vector clocks,
  # queued operations) and leaves no garbage in cycles that matters for its length:
  # the cyclic collector's passes would only cost time (about a sixth of it).
  enabled = gc.isenabled()
  gc.disable()
  try:
    # (runs again where warps may pair otherwise on a named barrier: pairings.py)
    return pairings.explore(k, lambda: _launch(
        k, buffers, cluster, smem_bytes, block, max_timeouts, schedule, barrier_slots,
        trace_stores, smem_init, first_cta, grid_ctas, budget))
  except MemoryError:
    k.drop_state()   # (the run's state is what filled memory: let it go first)
    raise budget_mod.BudgetExceeded("memory", "the process ran out of memory",
                                    k.executed) from None
  except (ProtocolError, NotImplementedError, budget_mod.BudgetExceeded, CheckerError,
          ParamMismatch):
    raise
  except Exception as e:   # the scheduler's own failure: never a finding
    raise CheckerError(f"internal error of the checker's scheduler: {type(e).__name__}: "
                       f"{e} (please report it, with the kernel)") from e
  finally:
    if enabled:
      gc.enable()


def _launch(k, buffers, cluster, smem_bytes, block, max_timeouts, schedule,
            barrier_slots, trace_stores, smem_init, first_cta, grid_ctas, budget):
  """``launch`` (its arguments in order), with the collector off."""
  k.reset(buffers, cluster=cluster, smem_bytes=smem_bytes, block=block, schedule=schedule,
          barrier_slots=barrier_slots, trace_stores=trace_stores, smem_init=smem_init,
          first_cta=first_cta, grid_ctas=grid_ctas)
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
    if k.inflight and k.runnable and _all_spinning(k):
      _land_for_spinners(k)
      continue
    if k.runnable:
      lanes = lockstep.piece(k, k.runnable[k.sched.pick_index(len(k.runnable))])
      if len(lanes) == len(k.runnable):
        k.runnable = []
      else:
        running = set(lanes)
        k.runnable = [t for t in k.runnable if t not in running]
      for th in lockstep.run_piece(k, lanes):   # the lanes that yielded: to the back of the
        if th.polled:                   # queue, so that a spin lets others run
          _polled(k, th)
        if th.state == "run":
          k.runnable.append(th)
      asyncops.land_many(k, k.sched.landing_now(k.inflight))
      if k.dirty:
        _resolve(k)
      continue
    if k.dirty and _resolve(k):
      continue
    if k.held and pairings.release(k):   # no thread can run: held warps arrive
      continue
    if k.inflight:   # nothing else can happen: something lands
      asyncops.land(k, k.sched.landing_when_stuck(k.inflight))
      continue
    if not k.alive_total:
      return [np.frombuffer(bytes(b), np.uint8) for b in k.gbufs]
    blocked = [k.blocked[s] for s in sorted(k.blocked)]
    pollers = [th for th in blocked if th.wait[0] == "mbar"]
    if not pollers or k.timeouts >= max_timeouts:
      raise ProtocolError("hang", f"deadlock after {k.timeouts} timed-out polls; "
                          f"waiting: {_describe_waits(k, blocked)}"
                          + _grid_note(k, blocked))
    k.timeouts += 1   # nothing can change any more: these polls time out
    for th in pollers:
      th.poll_what = (th.pc, th.wait)   # what it polls, if it then parks (a hang report)
      th.regs[th.wait[3]] = 0
      _resume(k, th)


def _thread_exits(k, th):
  """When the last thread of a CTA exits, the CTA exits: every operation that other
  CTAs issued into its shared memory or mbarriers must have completed before, which
  the checker takes as: each is ordered before the exit by happens-before (a morally
  strong release/acquire reaching one of its threads: a relaxed flag, a relaxed arrive
  or a pair whose scopes do not include each other orders nothing), or is an mbarrier
  operation (arrive, expect_tx, complete_tx) or asynchronous store counted in a phase
  one of its threads observed complete; and none is in flight.  Any later access to it
  is refused (``_mem``)."""
  c = th.cta
  k.alive[c] -= 1
  k.alive_total -= 1
  k.epoch += 1
  if k.cluster_waiting or k.group_waiting.get((c, th.tid // 32)):
    k.dirty = True   # barriers and warp collectives wait for non-exited threads only
  barriers._barriers_after_exit(k, th)   # warps wait for their non-exited lanes
  if k.alive[c]:
    return
  k.exited[c] = True
  def _exit_error(c, th, who):
    raise ProtocolError("exit", f"CTA {c} exits (its last thread: {th.tid}) with no thread "
                        f"of it knowing that {who} completed (no morally strong "
                        "release/acquire orders it before the exit, nor an observed phase "
                        "that counts it)")
  mine = [t for t in k.threads if t.cta == c]
  known = np.maximum.reduce([t.vc for t in mine])   # happens-before, nothing else
  # th.seen: the phases its waits observed complete (any .sem), per barrier slot; its
  # thread slots (writes a relaxed read saw) order nothing else, so only those count.
  phases = np.maximum.reduce([t.seen for t in mine])
  b0 = k.barrier_slot0
  known[b0:] = np.maximum(known[b0:], phases[b0:])   # landed stores of observed phases
  for op in k.inflight:
    if c in op.ctas:
      raise ProtocolError("exit", f"CTA {c} exits while {op.text} is in flight")
  # Thread slots of other CTAs; and the data slots of this CTA's mbarriers, whose
  # landed asynchronous stores count as known once a thread observed their phase.
  def owner(slot):
    if 1 <= slot < b0:
      return k.threads[slot - 1].cta
    return -1 if slot >= b0 else None
  late = k.shadow[c].remote_accesses(owner, c)
  for slot, clk in sorted(late.items()):
    if known[slot] >= clk or (slot < b0 and not _unknown_access(k, c, slot, known[slot])):
      continue
    if slot >= b0:
      bar = next(b for b in k.mbar.values() if b.slot == slot)
      who = f"the asynchronous stores of phase {clk - 1} of {bar.describe()}"
    else:
      who = (f"the access of CTA {k.threads[slot - 1].cta} thread {k.threads[slot - 1].tid}"
             " to its shared memory")
    _exit_error(c, th, who)
  # Other CTAs' mbarrier operations on its barriers (sync._note_remote): the latest of
  # each thread on each barrier, with the phase it fell in (an earlier one has an
  # earlier clock and phase: known when the latest is).
  for (slot, bslot), (clk, phase, pc) in sorted(k.remote_arrivals[c].items()):
    if known[slot] < clk and phases[bslot] <= phase:
      other = k.threads[slot - 1]
      _exit_error(c, th, f"`{k.program.texts[pc]}` (PTX line {k.program.lines[pc]}) of CTA "
                  f"{other.cta} thread {other.tid} on its mbarrier (phase {phase})")


def _unknown_access(k, c, slot, floor) -> bool:
  """Whether thread ``slot`` made an access to CTA ``c``'s shared memory later than
  clock ``floor`` (what happens-before tells CTA c) that nothing else says completed:
  a plain write or a read needs happens-before; a strong write that a thread of CTA c
  read from completed, it alone (observation: ``Machine.flag_reads``)."""
  sh, reads = k.shadow[c], k.flag_reads[c]
  if any(s == slot and w > floor for s, w in zip(sh.w_slot, sh.w_clk)):
    return True
  readers = {id(a): a for a in sh.readers if a}
  if any(a.get(slot, (0,))[0] > floor for a in readers.values()):
    return True
  for accesses in {id(a): a for a in sh.atomics if a}.values():
    clk, _, tag = accesses.get(slot, (0, None, None))
    if clk > floor and (tag is None or reads.get((tag[2], slot), -1) < clk):
      return True
  return False


def _grid_note(k, blocked) -> str:
  """Why a polling loop in a grid of several clusters may wait in vain, or ""."""
  if k.grid_clusters < 2 or not any(th.wait[0] == "poll" for th in blocked):
    return ""
  return (f". The grid has {k.grid_clusters} clusters, which the checker runs one "
          "after another: a poll that only another cluster's write ends hangs here, as "
          "it may on hardware, where a grid's clusters need not run at the same time "
          "(unless the kernel is launched cooperatively)")


def _describe_waits(k, blocked):
  """Every waiting thread, grouped by CTA, PTX line and what it waits for (an
  mbarrier's CTA, offset, phase, pending arrivals and tx-count)."""
  what = {"warp": "its warp's other lanes",
          "cluster": "barrier.cluster (the cluster's other threads)",
          "poll": "a value that no other thread or asynchronous operation will change "
                  "(it polls in a loop)"}
  groups = {}
  for th in blocked:
    kind, pc, w = th.wait[0], th.pc, th.wait
    if kind == "poll":
      pc = w[1]
      if th.poll_what is not None and th.poll_what[1][1] in k.mbar:   # a timed-out
        (pc, w), kind = th.poll_what, "mbar"                             # wait's loop
    wait = (f"parity {w[2]} of {k.mbar[w[1]].describe()}" if kind == "mbar"
            else barriers._named_state(k, w[1]) if kind == "bar" else what[kind])
    groups.setdefault((th.cta, pc, wait), []).append(th.tid)
  parts = []
  for (cta, pc, wait), tids in sorted(groups.items()):
    who = (f"thread {tids[0]}" if len(tids) == 1 else
           f"threads {tids[0]}..{tids[-1]}" if tids[-1] - tids[0] == len(tids) - 1 else
           f"{len(tids)} threads {tids[:4]}{'...' if len(tids) > 4 else ''}")
    parts.append(f"CTA {cta} {who} at PTX line {k.program.lines[pc]} (`{k.program.texts[pc]}`) "
                 f"waiting for {wait}")
  return "; ".join(parts)


def _blocks(k, th):
  """``th`` now waits (``th.wait``); marks the run dirty if that may complete."""
  k.blocked[th.slot] = th
  kind = th.wait[0]
  if kind == "warp":   # (warp.py) dirty once every live member lane may wait
    key = (th.cta, th.tid // 32)
    n = k.group_waiting[key] = k.group_waiting.get(key, 0) + 1
    # (the member lanes, less every exited thread of the CTA: at most the live ones, so
    # the exact count is needed only from there)
    mask = th.wait[1].mask
    if n >= (mask & warp.warp_lanes(k, th.tid // 32)).bit_count() - k.block + k.alive[th.cta] \
       and n >= len(warp.live_lanes(k, th.cta, th.tid // 32, mask)):
      k.dirty = True
  elif kind == "cluster":
    k.cluster_waiting += 1
    if _cluster_may_complete(k, th.wait[1]):
      k.dirty = True
  # "mbar": it blocked on a phase that had not completed; _advance marks the run
  # dirty when one does.  "bar": the arrival that completes the named barrier
  # resumes it (barriers.py).


def _cluster_may_complete(k, nth):
  """False when some non-exited thread has not made its nth cluster arrive yet
  (``cluster_reached`` also counts exited threads: True may be wrong, False not)."""
  return nth < len(k.cluster_reached) and k.cluster_reached[nth] >= k.alive_total


def _resume(k, th):
  kind = th.wait[0]
  if kind == "warp":
    k.group_waiting[(th.cta, th.tid // 32)] -= 1
  elif kind == "cluster":
    k.cluster_waiting -= 1
  del k.blocked[th.slot]
  # a parked poller already stands after its poll (it yielded)
  th.pc, th.state, th.wait = th.pc + (kind != "poll"), "run", None
  if kind == "poll":
    th.poll_what = None
  k.runnable.append(th)


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
  state = (th.pc, tuple(th.regs.items()), bytes(th.local))
  if state not in th.poll_seen:
    if len(th.poll_seen) < POLL_STATES:   # (a loop that counts its tries never repeats a
      th.poll_seen.add(state)             # state: it runs to its end, in bounded memory)
    return
  th.state, th.wait = "block", ("poll", th.poll_pc)
  k.blocked[th.slot] = th
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
    asyncops.land(k, op)
    if bar is None or bar.phase != phase:
      return


def _unpark(k):
  """Resumes the parked pollers for which something changed."""
  still = []
  for th in k.parked:
    if th.poll_epoch != k.epoch:
      _resume(k, th)
    else:
      still.append(th)
  k.parked = still


def _resolve(k):
  """Releases every thread whose synchronisation can complete now."""
  woke, lanes, k.dirty = False, [], False
  blocked = [k.blocked[s] for s in sorted(k.blocked)]   # in thread order
  if k.cluster_waiting:
    # barrier.cluster.wait waits for the cluster's non-exited threads (PTX ISA)
    min_arrived = min(th.cluster_arrived for th in k.threads if th.state != "done")
  for th in blocked:
    kind = th.wait[0]
    if (kind == "mbar" and k.mbar[th.wait[1]].phase & 1 != th.wait[2]) or \
       (kind == "cluster" and min_arrived >= th.wait[1]):
      if kind == "mbar":
        _, key, _, pred, sem, scope = th.wait
        sync._observe(k, th, k.mbar[key], sem, scope)
        th.regs[pred] = 1
      else:
        barriers._cluster_woken(k, th)
      _resume(k, th)
      woke = True
    elif kind == "warp":
      lanes.append(th)
  return warp.meet(k, lanes) or woke if lanes else woke
