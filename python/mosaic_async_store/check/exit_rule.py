"""The exit rule of the PTX checker: what must have completed when a CTA exits.

CUDA Programming Guide, distributed shared memory: every operation that another CTA
makes on a CTA's shared memory or mbarriers must happen before that CTA exits.
``thread_exits`` runs when a thread exits (``lockstep``); at the CTA's last thread it
checks every such operation against what the CTA's threads know, then runs what each
opcode family requires at a CTA's exit (``family.Family.at_cta_exit``).
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import asyncops, barriers, families, findings
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.shadow import distinct
from mosaic_async_store.check.slots import INITIAL, MBARRIER_DATA, THREAD

__all__ = ["thread_exits"]


def thread_exits(k, th):
  """When the last thread of a CTA exits, the CTA exits: every operation that other
  CTAs issued into its shared memory or mbarriers must have completed before, which
  the checker takes as: each is ordered before the exit by happens-before (a morally
  strong release/acquire reaching one of its threads: a relaxed flag, a relaxed arrive
  or a pair whose scopes do not include each other orders nothing), or is an mbarrier
  operation (arrive, expect_tx, complete_tx) or asynchronous store counted in a phase
  one of its threads observed complete; and none is in flight.  Any later access to it
  is refused (``addresses.mem``: rule ``exit``)."""
  c = th.cta
  k.alive[c] -= 1
  k.warp_alive[c * k.warps_per_cta + th.tid // 32] -= 1
  k.alive_total -= 1
  k.epoch += 1
  if k.cluster_waiting or k.group_waiting.get((c, th.tid // 32)):
    k.dirty = True   # barriers and warp collectives wait for non-exited threads only
  barriers._barriers_after_exit(k, th)   # warps wait for their non-exited lanes
  if k.alive[c]:
    return
  k.exited[c] = True
  def _exit_error(c, th, who, rule="exit"):   # (reported: the CTA exits all the same)
    findings.report(k, Finding(
        rule, f"CTA {c} exits (its last thread: {th.tid}) with no thread of it knowing "
        f"that {who} completed (no morally strong release/acquire orders it before the "
        "exit, nor an observed phase that counts it)"))
  executed = k.executed_before.get(c)

  def _relaxed(rule, slot, clk):
    # An operation that only a relaxed barrier.cluster orders before the exit
    # (execution order, no release: widely relied on) is the warning exit-relaxed.
    return "exit-relaxed" if rule == "exit" and executed is not None and \
        executed[slot] >= clk else rule
  mine = [t for t in k.threads if t.cta == c]
  known = np.maximum.reduce([t.vc for t in mine])   # happens-before, nothing else
  # th.seen: the phases its waits observed complete (any .sem), per barrier slot; its
  # thread slots (writes a relaxed read saw) order nothing else, so only those count.
  phases = np.maximum.reduce([t.seen for t in mine])
  data = k.slots.indices(MBARRIER_DATA)
  known[data] = np.maximum(known[data], phases[data])   # landed stores of observed phases
  for extend in families.exit_knowledge():   # what a family's observed phases tell
    extend(k, c, known, phases)
  for op in list(k.inflight):   # (raised: the operation would write into memory that is gone)
    if c not in op.ctas:
      continue
    if getattr(op, "only_reads_own", lambda cta: False)(c):
      # the CTA's own copy still to read its source: the warning exit-async-read, and
      # the read lands now (one timing the hardware may take: just before the exit)
      findings.report(k, Finding("exit-async-read", f"CTA {c} exits while {op.text} has "
                                 "not read its source in the CTA's shared memory yet"))
      asyncops.land(k, op)
      continue
    raise Stop(Finding("exit", f"CTA {c} exits while {op.text} is in flight"))
  # Thread slots of other CTAs; and the slots of asynchronous data (an mbarrier's:
  # landed stores count as known once a thread observed their phase).
  def owner(slot):
    kind = k.slots.kind(slot)
    return k.slots.cta_of(slot) if kind == THREAD else None if kind == INITIAL else -1
  late = k.shadow[c].remote_accesses(owner, c)
  for slot, latest in sorted(late.items()):
    if known[slot] >= latest:
      continue
    thread = k.slots.kind(slot) == THREAD
    clk = _unknown_access(k, c, slot, known[slot], thread)
    if clk is None:
      continue
    if thread:
      other = k.slots.owner(slot).obj
      who = f"the access of CTA {other.cta} thread {other.tid} to its shared memory"
    elif k.slots.kind(slot) == MBARRIER_DATA:
      bar = k.slots.owner(slot).obj
      who = f"the asynchronous stores of phase {clk - 1} of {bar.describe()}"
    else:
      who = f"the asynchronous operations of {k.slots.owner(slot).kind} {clk}"
    # (an owner may say its access is only the CTA's own read: exit-async-read)
    rule = getattr(k.slots.owner(slot).obj, "exit_rule", lambda slot, cta: "exit")(slot, c)
    _exit_error(c, th, who, _relaxed(rule, slot, clk))
  # Other CTAs' mbarrier operations on its barriers (mbarrier_state._note_remote): the latest of
  # each thread on each barrier, with the phase it fell in (an earlier one has an
  # earlier clock and phase: known when the latest is).
  for (slot, bslot), (clk, phase, pc) in sorted(k.remote_arrivals[c].items()):
    if known[slot] < clk and phases[bslot] <= phase:
      other = k.threads[slot - 1]
      _exit_error(c, th, f"`{k.program.texts[pc]}` (PTX line {k.program.lines[pc]}) of CTA "
                  f"{other.cta} thread {other.tid} on its mbarrier (phase {phase})",
                  _relaxed("exit", slot, clk))
  for at_exit in families.exit_checks():   # what each family requires by now
    at_exit(k, c)


def _unknown_access(k, c, slot, floor, thread):
  """The latest clock, past ``floor`` (what happens-before tells CTA c), of an access
  of ``slot`` that the bytes of CTA ``c``'s shared memory still hold and that nothing
  else says completed; None if there is none.  A plain write or a read needs
  happens-before; a ``thread``'s strong write that a thread of CTA c read from
  completed, it alone (observation: ``Machine.flag_reads``).  (An access the bytes no
  longer hold was overwritten by one ordered after it, else that one was a race: what
  orders the later one before the exit orders it too.)"""
  sh, reads = k.shadow[c], k.flag_reads[c]
  late = sh.w_clk[(sh.w_slot == slot) & (sh.w_clk > floor)].tolist()
  for accesses in distinct(sh.readers):
    clk = accesses.get(slot, (0,))[0]
    if clk > floor:
      late.append(clk)
  for accesses in distinct(sh.atomics):
    clk, _, tag = accesses.get(slot, (0, None, None))
    if clk > floor and (not thread or tag is None or reads.get((tag[2], slot), -1) < clk):
      late.append(clk)
  return max(late, default=None)
