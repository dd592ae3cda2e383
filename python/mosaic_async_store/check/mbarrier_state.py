"""An mbarrier's state and the changes every one of its drivers makes to it.

``Mbarrier`` is one barrier (``k.mbar`` maps its key (CTA, offset) to it): its phase,
pending arrivals, tx-count and expected count, the clocks released into the current
phase and, per completed phase, what a thread that observes it may acquire.  The
changes here are shared by everything that drives a barrier: the instructions
(``sync``: init, arrive, expect_tx, complete_tx, the waits), the warp forms
(``warp_mbarrier``) and the asynchronous operations that complete on one
(``asyncops``: a copy's ``complete_tx`` when it lands).  ``add_tx`` moves the tx-count
(``tx-range`` past its limit), ``advance_phase`` completes a phase when nothing is
pending, ``_observe`` is a thread seeing a completed phase (acquiring it, or holding it
for a later fence if relaxed), ``_note_remote`` records an operation on another CTA's
barrier for the exit rule.

Apart from ``sync`` (which compiles the mbarrier instructions into functions of a
thread) because these are the barrier's own bookkeeping, the same whoever drives it.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import findings, lineinfo
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.memory import CLOCK, SCOPES, TX_LIMIT, Releases, shown_source

__all__ = ["Mbarrier", "add_tx", "advance_phase", "release_origin"]

RELEASING = ("release", "acq_rel", "sc")   # (the .sem of an arrive that releases)


class Mbarrier:
  """One mbarrier: phase, pending arrivals, tx-count, expected arrivals; the
  clocks released into the current phase and, per completed phase, everything
  a thread that observes it may acquire."""

  __slots__ = ("key", "slot", "phase", "pending", "tx", "count", "init", "releases",
               "records", "arrivals", "arrival_records", "users", "program")

  def __init__(self, key, slot, count, init_epoch, program=None):
    self.key, self.slot, self.init = key, slot, init_epoch
    self.program = program   # the kernel: with ``users``, where its code uses it
    self.phase, self.pending, self.tx, self.count = 0, count, 0, count
    self.releases, self.records = Releases(), []
    # each arrival's (thread slot -> clock) in the current phase, and per completed
    # phase, as (slots, clocks) arrays: a thread that observes the phase knows those
    # arrivals happened
    self.arrivals, self.arrival_records = {}, []
    # each thread's last operation on it: thread slot -> (its clock, instruction index);
    # mbarrier.inval must be ordered after every one of them
    self.users = {}

  def describe(self) -> str:
    """The barrier for a message: its CTA and offset, as the user's code names it
    where the PTX has line info (``lineinfo.used_at``, from the source lines of each
    thread's last operation on it, ``users``), and its state."""
    named = ""
    if self.program is not None:
      sources = self.program.sources
      named = lineinfo.used_at([sources[pc] for _, pc in self.users.values()
                                if pc is not None], shown_source)
    return (f"mbarrier of CTA {self.key[0]} at offset {self.key[1]:#x}{named} [phase "
            f"{self.phase}, pending {self.pending}, tx {self.tx}, count {self.count}]")


def _note_remote(k, th, bar, pc):
  """An mbarrier operation (arrive, expect_tx, complete_tx) by ``th`` on another CTA's
  barrier: it must complete before that CTA exits (exit_rule.thread_exits).  Kept per
  (thread slot, barrier slot): the latest one's clock, the phase it counts in, its
  instruction (a later one has a later clock and phase)."""
  if bar.key[0] != th.cta:
    k.remote_arrivals[bar.key[0]][(th.slot, bar.slot)] = (int(th.vc[th.slot]), bar.phase, pc)


def release_origin(k, cta, tid, bar, sem, scope) -> int:
  """The CTA an arrive by thread ``tid`` of ``cta`` on ``bar`` publishes its release as
  (``Releases.add``): its own, except for an arrive that releases at ``.cta`` scope (the
  default ``.sem`` and ``.scope``) on another CTA's mbarrier.  By the letter that release
  orders nothing for the barrier's CTA, whose threads its scope does not include (PTX
  ISA, mbarrier.arrive: the ``.scope`` is "the set of threads that directly observe the
  memory synchronizing effect"); CUTLASS, Triton and Pallas rely on it, so it is the
  warning ``peer-arrive-cta`` and the release is taken as the barrier's CTA's own (the
  waits there, at any scope, acquire it).  A relaxed arrive releases nothing itself."""
  if bar.key[0] == cta or scope != SCOPES["cta"] or sem not in RELEASING:
    return cta
  findings.report(k, Finding(
      "peer-arrive-cta", f"CTA {cta} thread {tid} arrives with .release at .cta scope "
      f"(the default .sem and .scope) on {bar.describe()}, another CTA's: the release "
      "orders nothing for that CTA's threads by the letter, and is taken as ordering "
      "them (as CUTLASS, Triton and Pallas assume); fix: "
      "mbarrier.arrive.release.cluster, and a wait at .cluster scope there",
      cta=cta, thread=tid))
  return bar.key[0]


def add_tx(k, bar, delta):
  k.epoch += 1
  bar.tx += delta
  if abs(bar.tx) > TX_LIMIT:
    raise Stop(Finding("tx-range", f"tx-count {bar.tx} on {bar.describe()}"))


def advance_phase(k, bar):
  """A phase completes when no arrival is pending and the tx-count is zero."""
  if bar.pending == 0 and bar.tx == 0:
    prev = bar.records[-1] if bar.records else Releases()
    bar.records.append(prev.merged(bar.releases))
    bar.arrival_records.append((np.fromiter(bar.arrivals, np.intp, len(bar.arrivals)),
                                np.fromiter(bar.arrivals.values(), CLOCK,
                                            len(bar.arrivals))))
    bar.releases, bar.arrivals = Releases(), {}
    bar.phase, bar.pending = bar.phase + 1, bar.count
    k.dirty = True   # waiters may wake


def _observe(k, th, bar, sem, scope, q=None):
  """``th`` saw phase ``q`` complete (default: the one before the current one)."""
  q = bar.phase - 1 if q is None else q
  if q < 0:
    return
  th.seen[bar.slot] = max(th.seen[bar.slot], q + 1)   # it has landed (the exit rule)
  if sem in ("acquire", "acq_rel", "sc"):
    th.vc[bar.slot] = max(th.vc[bar.slot], q + 1)  # its asynchronous data is visible
    bar.records[q].acquire_into(th, scope)
  else:  # a relaxed wait: neither data nor visibility, until a later acquire fence
    th.pending_obs.append((bar.records[q], scope, bar.slot, q + 1))
