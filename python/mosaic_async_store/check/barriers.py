"""CTA and cluster barriers of the PTX checker: ``bar`` / ``barrier`` (named CTA
barriers, with ``.sync`` and ``.arrive`` and an optional thread count) and
``barrier.cluster.arrive`` / ``.wait``, each with its memory-ordering effect.

Mixed into ``interp.PtxKernel``, which provides ``self.named`` (the named
barriers, (CTA, id) -> ``NamedBarrier``), ``self.alive`` (each CTA's non-exited
threads), ``self.cluster_*`` (the cluster barrier's generations), ``_resume``,
``_release`` and ``self.epoch`` (bumped on every change another thread may see).

What the ISA says, and how it is run (PTX ISA, bar / barrier):
  * "bar{.cta}.sync, bar{.cta}.red and bar{.cta}.arrive": a barrier ``a``
    (0..15) of the CTA completes once ``b`` threads arrived, or all threads of the
    CTA when ``b`` is not given (here: its non-exited threads); ``.arrive`` "does
    not cause any waiting by the executing threads".  ``b`` must be a multiple of
    the warp size and the same for every arrival of one barrier instance (a
    different count is refused: how hardware combines them is not specified).
  * Memory ordering (Memory Consistency Model, "Synchronizes-with"): a
    ``bar.sync`` / ``bar.red`` / ``bar.arrive`` synchronises with every
    ``bar.sync`` / ``bar.red`` of the same barrier instance, at CTA scope: the
    waiting threads acquire every arriving thread's earlier accesses; an arriving
    (``.arrive``) thread acquires nothing.
  * Threads are counted one by one.  Hardware counts a warp's arrival as its 32
    threads; ``bar``/``barrier.*.aligned`` require the whole warp to execute the
    instruction together, which a kernel that is correct does, so both counts agree.
  * ``barrier.cluster.arrive`` is ``.release`` and ``barrier.cluster.wait``
    ``.acquire`` by default, both at cluster scope; the wait waits for the
    cluster's non-exited threads.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check.memory import SCOPES, Releases
from mosaic_async_store.check.sync import BLOCK, sem_scope

__all__ = ["NamedBarrier", "BarrierSemantics"]

_NAMED_BARRIERS = 16   # barrier ids 0..15 (PTX ISA, bar)


class NamedBarrier:
  """One instance of a named CTA barrier: the thread count its arrivals give (None:
  the whole CTA), the clock each arrival released, the threads that wait."""

  __slots__ = ("count", "vcs", "waiters")

  def __init__(self, count):
    self.count, self.vcs, self.waiters = count, [], []


class BarrierSemantics:
  """bar.sync / bar.arrive / barrier.sync / barrier.arrive (named CTA barriers) and
  barrier.cluster.arrive / .wait."""

  def _bar_op(self, ins):
    """bar.sync / barrier.sync / bar.arrive / barrier.arrive (``.cta`` and
    ``.aligned`` spellings), bar.warp.sync, barrier.cluster.*; bar.red is refused."""
    mods, ops, src = ins.mods, ins.ops, ins.src
    if ins.base == "bar" and mods == ["warp", "sync"] and len(ops) == 1:
      return self._warp_sync(src[0])
    if ins.base == "barrier" and mods[:1] == ["cluster"] and not ops:
      if mods[1:2] == ["arrive"] and set(mods[2:]) <= {"release", "relaxed", "aligned"}:
        return self._cluster_arrive(mods[2:])
      if mods[1:2] == ["wait"] and set(mods[2:]) <= {"acquire", "aligned"}:
        return self._cluster_wait(mods[2:])
    plain = [m for m in mods if m not in ("cta", "aligned")]
    if plain in (["sync"], ["arrive"]) and mods.count("cta") <= 1 and \
       mods.count("aligned") <= 1 and len(ops) in (1, 2) and all(src):
      if plain == ["arrive"] and len(ops) != 2:
        raise NotImplementedError(f"opcode {ins.opcode} (bar.arrive needs a thread count)")
      return self._named(plain[0], src[0], src[1] if len(ops) == 2 else None)
    raise NotImplementedError(f"opcode {ins.opcode}")

  # -- named CTA barriers --------------------------------------------------------

  def _named(self, kind, bar_id, count):
    """The arrival on barrier ``bar_id(th)`` of the thread's CTA; ``kind`` "sync"
    waits for the barrier to complete, "arrive" does not."""
    def arrive(th):
      a, b = bar_id(th), None if count is None else count(th)
      if not 0 <= a < _NAMED_BARRIERS:
        raise RuntimeError(f"barrier id {a}: the ISA allows 0..{_NAMED_BARRIERS - 1}")
      if b is not None and (b <= 0 or b % 32):
        raise RuntimeError(f"barrier thread count {b}: the ISA wants a positive multiple "
                           "of the warp size (32)")
      key = (th.cta, a)
      bar = self.named.get(key)
      if bar is None:
        bar = self.named[key] = NamedBarrier(b)
      elif bar.count != b:
        raise NotImplementedError(
            f"barrier {a} of CTA {th.cta} arrived on with thread count "
            f"{'the CTA' if b is None else b} while its other arrivals gave "
            f"{'the CTA' if bar.count is None else bar.count}")
      bar.vcs.append(th.vc.copy())   # what it releases to the threads that wait
      th.vc[th.slot] += 1
      self.epoch += 1
      if kind == "sync":
        bar.waiters.append(th)
      if self._named_complete(key, th):
        return None
      if kind == "sync":
        th.wait = ("bar", key)
        return BLOCK
      return None
    return arrive

  def _named_need(self, key, bar):
    return self.alive[key[0]] if bar.count is None else bar.count

  def _named_complete(self, key, current=None) -> bool:
    """Completes barrier ``key`` if enough threads arrived: every waiting thread
    acquires every arrival; the waiters other than ``current`` (the thread whose
    instruction completes it) resume.  Returns whether it completed."""
    bar = self.named.get(key)
    if bar is None or len(bar.vcs) < self._named_need(key, bar):
      return False
    del self.named[key]
    joined = np.maximum.reduce(bar.vcs)
    for th in bar.waiters:
      np.maximum(th.vc, joined, out=th.vc)
      th.vc[th.slot] += 1
      if th is not current:
        self._resume(th)
    return True

  def _named_after_exit(self, cta):
    """A thread of ``cta`` exited: its barriers that wait for the whole CTA may now
    be complete (they count its non-exited threads)."""
    for key in [k for k, b in self.named.items() if k[0] == cta and b.count is None]:
      self._named_complete(key)

  def _named_state(self, key) -> str:
    """A waiting thread's barrier, for a hang report."""
    bar = self.named[key]
    need = (f"the CTA's {self.alive[key[0]]} non-exited threads" if bar.count is None else
            f"{bar.count} threads")
    return f"barrier {key[1]} of CTA {key[0]} ({len(bar.vcs)} arrived of {need})"

  # -- the cluster barrier -------------------------------------------------------

  def _cluster_arrive(self, mods):
    sem, _ = sem_scope(mods, "release")
    def arrive(th):
      k = th.cluster_arrived
      while len(self.cluster_gens) <= k:
        self.cluster_gens.append(Releases())
      self._release(th, sem, SCOPES["cluster"], self.cluster_gens[k])
      th.cluster_arrived = k = k + 1
      if k == len(self.cluster_reached):
        self.cluster_reached.append(0)
      self.cluster_reached[k] += 1
      self.epoch += 1
      if self.cluster_waiting and self._cluster_may_complete(k):
        self.dirty = True
    return arrive

  def _cluster_wait(self, mods):
    sem, _ = sem_scope(mods, "acquire")
    def wait(th):
      th.wait = ("cluster", th.cluster_arrived, sem)
      return BLOCK
    return wait

  def _cluster_woken(self, th):
    _, k, sem = th.wait
    if sem != "relaxed":
      for gen in self.cluster_gens[:k]:
        gen.acquire_into(th, SCOPES["cluster"])
