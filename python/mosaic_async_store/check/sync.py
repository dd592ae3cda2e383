"""Synchronisation semantics of the PTX checker: mbarriers, fences, warp
collectives, each with its memory-ordering effect (CTA and cluster barriers:
``barriers``).

Mixed into ``interp.PtxKernel``, which provides ``self.mbar`` (barrier key
-> ``Mbarrier``), ``self.code``, ``self.collectives``, ``self.sched``,
``_set``, ``_mem`` and ``_bar_key``.  Semantics and scopes come from the
opcode's qualifiers with the ISA's defaults: ``mbarrier.arrive`` is
``.release.cta``, ``mbarrier.try_wait`` ``.acquire.cta``.  Every change of an
mbarrier's state counts as progress (``self.epoch``: a polling thread parked by
``run.Runner`` may read something new).
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check.memory import SCOPES, TX_LIMIT, ProtocolError, Releases

BLOCK = object()  # returned by an instruction: this thread waits for the scheduler
YIELD = object()  # returned by an instruction: done, but let other threads run first

# The .sem qualifiers of fences, mbarrier operations and barriers (memory
# operations add weak, volatile and mmio: strong.MEMORY_SEMS).
SEMS = ("release", "acquire", "acq_rel", "relaxed", "sc")
_MEMBAR_SCOPE = {"cta": "cta", "gl": "gpu", "sys": "sys"}


def sem_scope(mods, default_sem):
  """(semantics, scope rank) named by an opcode's qualifiers (default scope .cta)."""
  sem = next((m for m in mods if m in SEMS), default_sem)
  scope = next((SCOPES[m] for m in mods if m in SCOPES), SCOPES["cta"])
  return sem, scope


class Mbarrier:
  """One mbarrier: phase, pending arrivals, tx-count, expected arrivals; the
  clocks released into the current phase and, per completed phase, everything
  a thread that observes it may acquire."""

  __slots__ = ("key", "slot", "phase", "pending", "tx", "count", "init", "releases",
               "records", "arrivals", "arrival_records")

  def __init__(self, key, slot, count, init_epoch):
    self.key, self.slot, self.init = key, slot, init_epoch
    self.phase, self.pending, self.tx, self.count = 0, count, 0, count
    self.releases, self.records = Releases(), []
    # each arrival's (thread slot -> clock) in the current phase, and per completed
    # phase: a thread that observes the phase knows those arrivals happened
    self.arrivals, self.arrival_records = {}, []

  def describe(self) -> str:
    return (f"mbarrier of CTA {self.key[0]} at offset {self.key[1]:#x} [phase {self.phase}, "
            f"pending {self.pending}, tx {self.tx}, count {self.count}]")


class SyncSemantics:
  """mbarrier.*, fences, shfl.sync / elect.sync / vote.sync / bar.warp.sync (the CTA
  and cluster barriers are ``barriers.BarrierSemantics``)."""

  # -- mbarriers ---------------------------------------------------------------

  def _mbarrier(self, mods, ops, src, space):
    if mods[0] == "init":
      def init(th, addr=src[0], count=src[1]):
        key, n = self._bar_key(th, space, addr(th)), count(th)
        if not 1 <= n <= TX_LIMIT:
          raise ProtocolError("count-range", f"mbarrier.init with count {n}")
        # Two clock slots per barrier: its asynchronous data, and its initialisation
        # (so that fence.mbarrier_init can release the inits alone).
        slot = self.barrier_slot0 + 2 * self.barriers_made
        if slot + 1 >= len(th.vc):
          raise NotImplementedError("more mbarriers than the checker has clock slots")
        self.barriers_made += 1
        th.vc[slot + 1] = 1
        self.epoch += 1
        self.mbar[key] = Mbarrier(key, slot, n, (slot + 1, 1))
        self.shadow[key[0]].mbar_bytes[key[1]:key[1] + 8] = b"\x01" * 8
      return init
    if mods[0] == "inval":
      def inval(th, addr=src[0]):
        key = self._bar_key(th, space, addr(th))
        self._barrier(th, th.vc, key)
        del self.mbar[key]
        self.epoch += 1
        self.shadow[key[0]].mbar_bytes[key[1]:key[1] + 8] = bytes(8)
      return inval
    if mods[0] == "arrive" and len(ops) in (2, 3):
      # [state,] [addr], tx-count with .expect_tx; else [state,] [addr], arrive-count
      expect, zero, one = "expect_tx" in mods, (lambda th: 0), (lambda th: 1)
      addr, put = src[1], self._set(ops[0], 64)
      tx = src[2] if expect and len(ops) == 3 else zero
      count = src[2] if not expect and len(ops) == 3 else one
      sem, scope = sem_scope(mods, "release")
      def arrive(th):  # the expect-tx operation first, then the arrive-on operation
        bar = self._barrier(th, th.vc, space, addr(th))
        if bar.key[0] != th.cta:   # the exit rule: it must complete before that CTA exits
          self.remote_arrivals[bar.key[0]][th.slot] = int(th.vc[th.slot])
        bar.arrivals[th.slot] = int(th.vc[th.slot])
        self._release(th, sem, scope, bar.releases)
        self._add_tx(bar, tx(th))
        bar.pending -= count(th)
        if bar.pending < 0:
          raise ProtocolError("arrival-overflow", f"CTA {th.cta} thread {th.tid} arrives on "
                              f"{bar.describe()}")
        put(th, bar.phase)
        self._advance(bar)
        return YIELD if self.sched.yields() else None
      return arrive
    if mods[0] == "expect_tx":
      def expect(th, addr=src[0], tx=src[1]):
        self._add_tx(self._barrier(th, th.vc, space, addr(th)), tx(th))
      return expect
    if mods[0] == "complete_tx" and len(ops) == 2:
      # tx-count decremented as an asynchronous transfer's completion does (no data,
      # no ordering: the ISA's only .sem for it is .relaxed)
      def complete(th, addr=src[0], tx=src[1]):
        bar = self._barrier(th, th.vc, space, addr(th))
        self._add_tx(bar, -tx(th))
        self._advance(bar)
      return complete
    if mods[0] in ("try_wait", "test_wait") and len(ops) in (3, 4):
      # .parity: the operand is the parity of the phase to wait for; otherwise it is
      # the state an arrive returned (here: the phase number), whose parity it is.
      # test_wait (non-blocking) is run as try_wait: a poll loop around it waits the
      # same way; its early "false" answers are not explored.
      pred, addr, parity = ops[0][1], src[1], src[2]
      sem, scope = sem_scope(mods, "acquire")
      def try_wait(th):
        bar, par = self._barrier(th, th.vc, space, addr(th)), parity(th) & 1
        if bar.phase & 1 != par:   # the phase of that parity has completed
          self._observe(th, bar, sem, scope)
          th.regs[pred] = 1
          return None
        th.wait = ("mbar", bar.key, par, pred, sem, scope)
        return BLOCK
      return try_wait
    raise NotImplementedError(f"opcode mbarrier.{'.'.join(mods)}")

  def _barrier(self, th_or_none, vc, space_or_key, addr=None):
    """The Mbarrier at ``addr``; its initialisation must be visible to ``vc``."""
    key = (space_or_key if addr is None else self._bar_key(th_or_none, space_or_key, addr))
    bar = self.mbar.get(key)
    if bar is None:
      raise ProtocolError("barrier-uninit", f"no mbarrier.init at CTA {key[0]} offset "
                          f"{key[1]:#x}")
    slot, clk = bar.init
    if vc[slot] < clk:
      who = "an asynchronous operation" if th_or_none is None else \
          f"CTA {th_or_none.cta} thread {th_or_none.tid}"
      raise ProtocolError("barrier-init", f"{who} uses {bar.describe()}")
    return bar

  def _add_tx(self, bar, delta):
    self.epoch += 1
    bar.tx += delta
    if abs(bar.tx) > TX_LIMIT:
      raise ProtocolError("tx-range", f"tx-count {bar.tx} on {bar.describe()}")

  def _advance(self, bar):
    """A phase completes when no arrival is pending and the tx-count is zero."""
    if bar.pending == 0 and bar.tx == 0:
      prev = bar.records[-1] if bar.records else Releases()
      bar.records.append(prev.merged(bar.releases))
      bar.arrival_records.append(bar.arrivals)
      bar.releases, bar.arrivals = Releases(), {}
      bar.phase, bar.pending = bar.phase + 1, bar.count
      self.dirty = True   # waiters may wake

  def _observe(self, th, bar, sem, scope):
    """``th`` saw the phase before the current one complete."""
    q = bar.phase - 1
    if q < 0:
      return
    th.seen[bar.slot] = max(th.seen[bar.slot], q + 1)   # it has landed (the exit rule),
    for slot, clk in bar.arrival_records[q].items():     # and so have its arrivals
      th.seen[slot] = max(th.seen[slot], clk)
    if sem in ("acquire", "acq_rel", "sc"):
      th.vc[bar.slot] = max(th.vc[bar.slot], q + 1)  # its asynchronous data is visible
      bar.records[q].acquire_into(th, scope)
    else:  # a relaxed wait: neither data nor visibility, until a later acquire fence
      th.pending_obs.append((bar.records[q], scope, bar.slot, q + 1))

  # -- release / acquire helpers ----------------------------------------------

  def _release(self, th, sem, scope, into: Releases):
    """Publishes ``th``'s clock into ``into`` if the operation releases: by its
    own semantics, or as a relaxed operation after a fence (the fence's scope)."""
    if sem in ("release", "acq_rel", "sc"):
      into.add(th.cta, scope, th.vc)
    elif th.fence_rel is not None:
      vc, fscope = th.fence_rel
      into.add(th.cta, min(fscope, scope), vc)
    th.vc[th.slot] += 1

  def _fence(self, mods):
    """The fences, by their ``.sem`` (PTX ISA, membar/fence): ``.acquire`` acquires
    what earlier relaxed waits observed; ``.release`` lets later relaxed arrives
    release this thread's earlier accesses; ``.acq_rel`` (the default), ``.sc``
    and ``membar`` do both.  ``.sync_restrict::shared::cta`` (release only) orders
    only operations on the thread's own CTA's shared memory: accesses it made to
    other CTAs' shared memory are left out of what it releases (from the first
    such access on: conservative).  ``.sync_restrict::shared::cluster`` (acquire
    only) covers all shared memory, which is all the checker tracks.
    ``fence.mbarrier_init.release.cluster`` releases the thread's earlier
    ``mbarrier.init``s and nothing else.  ``fence.proxy.*`` orders proxies, which
    are not modelled."""
    if mods and mods[0].startswith("proxy"):
      return lambda th: None
    restrict = next((m for m in mods if m.startswith("sync_restrict")), None)
    if mods and mods[0] == "mbarrier_init":
      if mods[1:] != ["release", "cluster"]:
        raise NotImplementedError(f"opcode fence.{'.'.join(mods)}")
      scope, acquire, release = SCOPES["cluster"], False, "inits"
    elif mods and mods[0] in _MEMBAR_SCOPE:   # membar.cta / .gl / .sys
      scope, acquire, release = SCOPES[_MEMBAR_SCOPE[mods[0]]], True, "all"
    else:
      sem, scope = sem_scope([m for m in mods if m != restrict], "acq_rel")
      if (restrict, sem) not in ((None, "acq_rel"), (None, "sc"), (None, "acquire"),
                                 (None, "release"), ("sync_restrict::shared::cta", "release"),
                                 ("sync_restrict::shared::cluster", "acquire")):
        raise NotImplementedError(f"opcode fence.{'.'.join(mods)}")
      acquire = sem != "release"
      release = None if sem == "acquire" else (
          "own-cta" if restrict == "sync_restrict::shared::cta" else "all")
    def fence(th):
      init_slots = slice(self.barrier_slot0 + 1, None, 2)   # (known once launched)
      if acquire:
        for rec, wscope, data_slot, phase in th.pending_obs:
          # the observed phase's asynchronous data (in this CTA; None: a relaxed
          # strong read, see strong.py), then its releases
          if data_slot is not None:
            th.vc[data_slot] = max(th.vc[data_slot], phase)
          rec.acquire_into(th, min(scope, wscope))
        th.pending_obs.clear()
      if release == "inits":
        vc = np.zeros_like(th.vc)
        vc[init_slots] = th.vc[init_slots]
        th.fence_rel = (vc, scope)
      elif release == "own-cta":
        vc = th.vc.copy()
        if th.remote_since is not None:
          vc[th.slot] = min(vc[th.slot], th.remote_since - 1)
        th.fence_rel = (vc, scope)
      elif release == "all":
        th.fence_rel = (th.vc.copy(), scope)
      th.vc[th.slot] += 1
    return fence

  # -- table entries (opcodes.OPCODES) ------------------------------------------

  def _mbarrier_op(self, ins):
    return self._mbarrier(ins.mods, ins.ops, ins.src, ins.space)

  def _fence_op(self, ins):
    return self._fence(ins.mods)

  def _collective(self, ins):
    """shfl.sync.idx / .bfly (b32), elect.sync."""
    if ins.mods not in ((["sync"],) if ins.base == "elect" else
                        (["sync", "idx", "b32"], ["sync", "bfly", "b32"])):
      raise NotImplementedError(f"opcode {ins.opcode}")
    return self._warp_collective(ins.base, ins.mods, ins.ops, ins.src)

  # -- warp collectives -----------------------------------------------------------

  def _warp_collective_at(self, k, resolve):
    """Registers ``resolve(lanes)`` for instruction ``k``; the returned instruction
    blocks its lane until all 32 lanes of the warp wait at ``k`` (run.Runner then
    calls ``resolve`` with them in lane order)."""
    self.collectives[k] = resolve

    def block(th):
      th.wait = ("warp", k)
      return BLOCK
    return block

  def _warp_collective(self, base, mods, ops, src):
    """The lane blocks; ``resolve`` runs once all 32 lanes wait at this instruction."""
    dest = ops[0][1:] if ops[0][0] == "pair" else (ops[0],)
    puts = [self._set(dest[0], 32)] + [self._set(o, 1) for o in dest[1:]]
    k = len(self.code)

    def resolve(lanes):
      if any(src[-1](th) & 0xFFFFFFFF != 0xFFFFFFFF for th in lanes):
        raise NotImplementedError(f"{base} with a partial member mask")
      vals = [src[1](th) for th in lanes] if base == "shfl" else None
      for lane, th in enumerate(lanes):
        if base == "elect":   # full mask: lane 0 leads; every lane learns its id
          j, ok = 0, lane == 0
        else:                 # c = segment mask << 8 | clamp
          b, c = src[2](th), src[3](th)
          lo = lane & (c >> 8) & 31
          hi = lo | (c & 31 & ~(c >> 8))
          j = lane ^ b if mods[1] == "bfly" else lo | (b & ~(c >> 8) & 31)
          ok = j <= hi
          j = vals[j if ok else lane]
        puts[0](th, j)
        if len(puts) > 1:
          puts[1](th, ok)
    return self._warp_collective_at(k, resolve)

  def _vote(self, ins):
    """``vote.sync.{all,any,uni}.pred d, p, membermask`` and ``vote.sync.ballot.b32``,
    full member mask only: the lanes meet, then each gets the warp's vote (ballot:
    bit i is lane i's predicate).  PTX ISA, vote: no memory ordering is implied."""
    mode = ins.mods[1] if len(ins.mods) == 3 and ins.mods[0] == "sync" else None
    if (mode, ins.mods[-1]) not in (("all", "pred"), ("any", "pred"), ("uni", "pred"),
                                    ("ballot", "b32")) or len(ins.ops) != 3 or \
       ins.ops[0][0] != "reg" or ins.src[1] is None:
      raise NotImplementedError(f"opcode {ins.opcode}")
    put, pred, mask = self._set(ins.ops[0], 32 if mode == "ballot" else 1), ins.src[1], ins.src[2]
    k = len(self.code)

    def resolve(lanes):
      if any(mask(th) & 0xFFFFFFFF != 0xFFFFFFFF for th in lanes):
        raise NotImplementedError("vote.sync with a partial member mask")
      bits = [pred(th) & 1 for th in lanes]
      value = {"all": int(all(bits)), "any": int(any(bits)), "uni": int(len(set(bits)) == 1),
               "ballot": sum(b << i for i, b in enumerate(bits))}[mode]
      for th in lanes:
        put(th, value)
    return self._warp_collective_at(k, resolve)

  def _warp_sync(self, mask):
    """``bar.warp.sync mask`` (full mask only): the warp's lanes meet, and each one's
    earlier accesses happen before every lane's later ones (PTX ISA, bar.warp.sync:
    it "guarantees memory ordering among threads participating in barrier")."""
    k = len(self.code)

    def resolve(lanes):
      if any(mask(th) & 0xFFFFFFFF != 0xFFFFFFFF for th in lanes):
        raise NotImplementedError("bar.warp.sync with a partial member mask")
      joined = np.maximum.reduce([th.vc for th in lanes])
      for th in lanes:
        th.vc[:] = joined
        th.vc[th.slot] += 1
    return self._warp_collective_at(k, resolve)

  def _bar_key(self, th, space, addr):
    buf, off = self._mem(th, space, addr, 8)
    return self.smem_cta[id(buf)], off
