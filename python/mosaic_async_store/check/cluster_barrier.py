"""The cluster barrier of the PTX checker: ``barrier.cluster.arrive`` / ``.wait``
(the family module ``barriers`` runs the opcodes and calls these).

PTX ISA, barrier.cluster: "barrier.cluster.wait instruction causes the executing
thread to wait for all non-exited threads of the cluster to perform
barrier.cluster.arrive"; "When all non-exited threads in the cluster have executed
barrier.cluster.arrive, the barrier completes and is automatically reinitialized.
After using barrier.cluster.wait to detect completion of the barrier, a thread may
immediately arrive at the barrier once again. Each thread must arrive at the barrier
only once before the barrier completes" (a second arrive before the completion its
first one joined is ``cluster-rearrive``).  ``.release`` (the default) / ``.relaxed``
arrives, ``.acquire`` waits, at cluster scope; with ``.aligned`` "all threads in the
warp must execute the same barrier.cluster instruction": a warp's k-th arrives (and
the waits after them) must be one instruction when any of them is aligned
(``aligned-divergence``).  A wait with no arrive before it: the ISA gives it no rule
(it waits for the generation of the thread's last arrive, none: it goes on at once
and acquires nothing).

State of the machine ``k``: ``cluster_relaxed`` (per generation, the clocks of its
relaxed arrives: execution order, no release) and ``executed_before`` (per CTA, what
its completed waits ordered by execution alone), ``cluster_gens`` (per generation, the releases of its
arrives), ``cluster_reached`` ([n]: threads, exited ones too, with >= n arrives),
``cluster_lanes`` (see ``_cluster_lane``), each thread's ``cluster_arrived``.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import sync
from mosaic_async_store.check.barrier_warps import WARP, warp_live, where
from mosaic_async_store.check.waits import Wait, resume
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.memory import SCOPES, Releases, sem_scope
from mosaic_async_store.check.outcomes import BLOCK

__all__ = ["arrive", "wait", "lanes_exit"]


def arrive(k, mods, pc, aligned):
  """``barrier.cluster.arrive{.sem}{.aligned}`` at instruction ``pc``: the lane's
  next arrive, releasing (unless ``.relaxed``) into that generation."""
  sem, _ = sem_scope(mods, "release")
  def arrive_lane(th):
    nth = th.cluster_arrived
    if nth and not _cluster_completed(k, nth):
      raise Stop(Finding("cluster-rearrive", (
          f"CTA {th.cta} thread {th.tid} arrives on barrier.cluster (arrive number "
          f"{nth + 1}) before the barrier its arrive number {nth} joined completed "
          f"(not every non-exited thread of the cluster has arrived {nth} times)")))
    _cluster_lane(k, th, "arrive", nth + 1, pc, aligned)
    while len(k.cluster_gens) <= nth:
      k.cluster_gens.append(Releases())
    sync._release(k, th, sem, SCOPES["cluster"], k.cluster_gens[nth])
    if sem == "relaxed":   # (execution order only: what the exit rule's warning reads)
      while len(k.cluster_relaxed) <= nth:
        k.cluster_relaxed.append(np.zeros_like(th.vc))
      np.maximum(k.cluster_relaxed[nth], th.vc, out=k.cluster_relaxed[nth])
    th.cluster_arrived = nth = nth + 1
    if nth == len(k.cluster_reached):
      k.cluster_reached.append(0)
    k.cluster_reached[nth] += 1
    k.epoch += 1
    if k.cluster_waiting and _may_complete(k, nth):
      k.dirty = True
  return arrive_lane


def _may_complete(k, nth) -> bool:
  """False when some non-exited thread has not made its nth cluster arrive yet
  (``cluster_reached`` also counts exited threads: True may be wrong, False not)."""
  return nth < len(k.cluster_reached) and k.cluster_reached[nth] >= k.alive_total


class ClusterWait(Wait):
  """``barrier.cluster.wait`` after the lane's arrive number ``nth``: it completes when
  every non-exited thread of the cluster made its nth arrive (PTX ISA: the wait is for
  the cluster's non-exited threads), acquiring (unless ``sem`` is "relaxed") what
  those generations released.  Grouped: the readiness is one count per resolve."""

  __slots__ = ("nth", "sem")
  grouped = True

  def __init__(self, nth, sem):
    self.nth, self.sem = nth, sem

  def on_block(self, k, th) -> None:
    k.cluster_waiting += 1
    if _may_complete(k, self.nth):
      k.dirty = True

  def on_resume(self, k, th) -> None:
    k.cluster_waiting -= 1

  @classmethod
  def resolve_group(cls, k, threads) -> bool:
    min_arrived = min(t.cluster_arrived for t in k.threads if t.state != "done")
    woke = False
    for th in threads:
      if min_arrived >= th.wait.nth:
        if th.wait.sem != "relaxed":
          for gen in k.cluster_gens[:th.wait.nth]:
            gen.acquire_into(th, SCOPES["cluster"])
        _executed_before(k, th)
        resume(k, th)
        woke = True
    return woke

  def describe(self, k, th) -> tuple[int, str]:
    return th.pc, "barrier.cluster (the cluster's other threads)"


def _executed_before(k, th) -> None:
  """What a completed wait tells ``th``'s CTA by execution order alone: every relaxed
  arrive of the generations it waited for (and the thread's own clock) happened
  before it (``Machine.executed_before``: the exit rule's ``exit-relaxed`` warning, for
  operations that nothing but such a barrier orders before a CTA's exit)."""
  if not k.cluster_relaxed:
    return
  seen = k.executed_before.setdefault(th.cta, np.zeros_like(th.vc))
  np.maximum(seen, th.vc, out=seen)
  for vc in k.cluster_relaxed[:th.wait.nth]:
    np.maximum(seen, vc, out=seen)


def _cluster_completed(k, nth) -> bool:
  """Whether the cluster barrier's nth completion happened: every non-exited thread
  made its nth arrive (``cluster_reached`` counts exited threads too: below the live
  threads it cannot have; at every thread, exited or not, it has)."""
  reached = k.cluster_reached[nth] if nth < len(k.cluster_reached) else 0
  if reached < k.alive_total:
    return False
  return reached == len(k.threads) or \
      min(t.cluster_arrived for t in k.threads if t.state != "done") >= nth


def wait(k, mods, pc, aligned):
  """``barrier.cluster.wait{.acquire}{.aligned}``: the lane blocks until the
  generation of its last arrive completes (``ClusterWait``)."""
  sem, _ = sem_scope(mods, "acquire")
  def wait_lane(th):
    _cluster_lane(k, th, "wait", th.cluster_arrived, pc, aligned)
    th.wait = ClusterWait(th.cluster_arrived, sem)
    return BLOCK
  return wait_lane


def _cluster_lane(k, th, kind, nth, pc, aligned):
  """The lane's nth ``barrier.cluster.arrive`` (``kind`` "arrive"), or its wait
  after its nth arrive ("wait"): its warp's lanes must execute one instruction
  there when any of them is aligned.  Each record ([pc, first tid, aligned, tids,
  live lanes]) lives until every non-exited lane of the warp made it."""
  w = th.tid // WARP
  key = (th.cta, w, kind, nth)
  rec = k.cluster_lanes.get(key)
  if rec is None:
    rec = k.cluster_lanes[key] = [pc, th.tid, aligned, set(), warp_live(k, th.cta, w)]
  elif rec[0] != pc and (aligned or rec[2]):
    raise Stop(Finding("aligned-divergence", (
        f"CTA {th.cta} warp {w}: lane {th.tid % WARP} executes its {_nth(kind, nth)} at "
        f"{where(k, pc)} while lane {rec[1] % WARP} of its warp executed it at "
        f"{where(k, rec[0])}")))
  rec[2] |= aligned
  rec[3].add(th.tid)
  if len(rec[3]) >= rec[4]:
    del k.cluster_lanes[key]


def _nth(kind, nth) -> str:
  return (f"barrier.cluster.arrive number {nth}" if kind == "arrive" else
          f"barrier.cluster.wait after arrive number {nth}")


def lanes_exit(k, th):
  """``th`` exited: skipping an aligned cluster arrive or wait its warp-mates
  executed is a divergence; the records wait for one lane fewer."""
  c, w = th.cta, th.tid // WARP
  for key in [key for key in k.cluster_lanes if key[0] == c and key[1] == w]:
    rec = k.cluster_lanes[key]
    if rec[2] and th.tid not in rec[3]:
      raise Stop(Finding("aligned-divergence", (
          f"CTA {c} warp {w}: lane {th.tid % WARP} exits without its "
          f"{_nth(*key[2:])}, which lane {rec[1] % WARP} of its warp executed at "
          f"{where(k, rec[0])}")))
    rec[3].discard(th.tid)
    rec[4] -= 1
    if len(rec[3]) >= rec[4]:
      del k.cluster_lanes[key]
