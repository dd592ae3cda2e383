"""Synchronisation semantics of the PTX checker: mbarriers, with their memory-ordering
effect, and the release helper the other families use (fences: ``fences``; CTA and
cluster barriers: ``barriers``; warp collectives: ``warp``).

Functions of the machine ``k`` (``machine.Machine``; its ``mbar`` maps a barrier's
key (CTA, offset) to its ``mbarrier_state.Mbarrier``, whose phase and tx-count
bookkeeping is ``mbarrier_state``'s).  Semantics and scopes come from the
opcode's qualifiers with the ISA's defaults: ``mbarrier.arrive`` is
``.release.cta``, ``mbarrier.try_wait`` ``.acquire.cta``.  Every change of an
mbarrier's state counts as progress (``k.epoch``: a polling thread parked by
``run`` may read something new).  The mbarrier grammar, the state an arrive returns, and
the rules ``barrier-peer`` and ``phase-overrun`` are ``mbarrier_forms``'.
"""

from __future__ import annotations

from mosaic_async_store.check import (access_core, addresses, arrival_orders, collectives,
                                      mbarrier_forms, program, warp, warp_mbarrier)
from mosaic_async_store.check.mbarrier_state import (Mbarrier, _note_remote, _observe, add_tx,
                                                     advance_phase, release_origin)
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.memory import TX_LIMIT, Releases, sem_scope
from mosaic_async_store.check.family import Family
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.outcomes import BLOCK, YIELD
from mosaic_async_store.check.slots import MBARRIER_DATA, MBARRIER_INIT
from mosaic_async_store.check.waits import Wait


__all__ = ["OPCODES", "FAMILY"]


# mbarrier.* and fences; the entries of bar.warp.sync and of the .aligned matrix
# collectives into ``warp`` (the CTA and cluster barriers are
# ``barriers``).


# -- mbarriers ---------------------------------------------------------------


def _mbarrier(k, mods, ops, src, space):
  form, pc = mbarrier_forms.form(mods, ops, space), len(k.program.code)
  if form == "init":
    def init(th, addr=src[0], count=src[1]):
      key, n = mbarrier_key(k, th, space, addr(th), form), count(th)
      if not 1 <= n <= TX_LIMIT:
        raise Stop(Finding("count-range", f"mbarrier.init with count {n}"))
      if key in k.mbar:
        raise Stop(Finding("barrier-reinit", f"mbarrier.init on {k.mbar[key].describe()}"
                            ", which is initialised and not invalidated"))
      # Two clock slots per barrier: its asynchronous data, and its initialisation
      # (so that fence.mbarrier_init can release the inits alone).
      slot = k.slots.allocate(MBARRIER_DATA)
      init_slot = k.slots.allocate(MBARRIER_INIT)
      th.vc[init_slot] = 1
      k.epoch += 1
      _object_write(k, th, key, pc)   # (the bytes' earlier accesses come before it)
      bar = k.mbar[key] = Mbarrier(key, slot, n, (init_slot, 1), k.program)
      k.slots.own(slot, bar)
      k.slots.own(init_slot, bar)
      k.shadow[key[0]].mbar_bytes[key[1]:key[1] + 8] = b"\x01" * 8
    return init
  if form == "inval":
    def inval(th, addr=src[0]):
      key = mbarrier_key(k, th, space, addr(th), form)
      bar = mbarrier_of(k, th, th.vc, key, pc=pc)
      _inval_ordered(k, th, bar, pc)
      del k.mbar[key]
      k.epoch += 1
      k.shadow[key[0]].mbar_bytes[key[1]:key[1] + 8] = bytes(8)
      _object_write(k, th, key, pc)   # (the bytes' later accesses must come after it)
    return inval
  if form in ("arrive", "arrive_drop"):
    return _arrive(k, mods, ops, src, space)
  if form == "pending_count":
    return mbarrier_forms.pending_count(k, ops, src)
  if form == "expect_tx":
    def expect(th, addr=src[0], tx=src[1]):
      bar = mbarrier_of(k, th, th.vc, space, addr(th), pc=pc, form=form)
      _note_remote(k, th, bar, pc)
      add_tx(k, bar, tx(th))
    return expect
  if form == "complete_tx":
    # tx-count decremented as an asynchronous transfer's completion does (no data,
    # no ordering: the ISA's only .sem for it is .relaxed)
    def complete(th, addr=src[0], tx=src[1]):
      bar = mbarrier_of(k, th, th.vc, space, addr(th), pc=pc, form=form)
      _note_remote(k, th, bar, pc)
      add_tx(k, bar, -tx(th))
      advance_phase(k, bar)
    return complete
  return _wait(k, mods, ops, src, space)


def _arrive(k, mods, ops, src, space):
  """``mbarrier.arrive{.expect_tx|.noComplete}`` / ``mbarrier.arrive_drop{...}``: [state,]
  [addr], tx-count with .expect_tx, else an optional arrive-count (mandatory with
  .noComplete).  arrive_drop first decrements the expected arrival count (of this and
  every later phase) by the count, then performs the arrive-on operation (PTX ISA,
  mbarrier.arrive_drop); below zero is the finding ``arrival-overflow``."""
  expect, zero, one = "expect_tx" in mods, (lambda th: 0), (lambda th: 1)
  zero.lanes, one.lanes = (lambda lanes: [0] * len(lanes)), (lambda lanes: [1] * len(lanes))
  no_complete, drop = "noComplete" in mods, mods[0] == "arrive_drop"
  addr, put = src[1], program.setter(k, ops[0], 64)
  tx = src[2] if expect and len(ops) == 3 else zero
  count = src[2] if not expect and len(ops) == 3 else one
  sem, scope, pc = *sem_scope(mods, "release"), len(k.program.code)
  # A generic address may name a peer CTA's object where the state is the sink `_`
  # (the .shared::cluster line of the grammar; not .noComplete, whose line is
  # .shared{::cta} alone): mbarrier_key.
  remote = space is None and ops[0][0] == "sink" and not no_complete
  def arrive(th):  # the expect-tx operation first, then the arrive-on operation
    bar = mbarrier_of(k, th, th.vc, space, addr(th), pc=pc, form=mods[0], remote=remote)
    n = count(th)
    if arrival_orders.holds(k, th, bar, n, tx(th)):   # (held back: a slower thread)
      return BLOCK
    if drop:
      bar.count -= n
      if bar.count < 0:
        raise Stop(Finding("arrival-overflow", f"CTA {th.cta} thread {th.tid}'s "
                            f"arrive_drop of {n} drops below zero expected arrivals on "
                            f"{bar.describe()}"))
    _note_remote(k, th, bar, pc)   # (before the release moves th's clock on)
    bar.arrivals[th.slot] = int(th.vc[th.slot])
    _release(k, th, sem, scope, bar.releases,
             release_origin(k, th.cta, th.tid, bar, sem, scope))
    add_tx(k, bar, tx(th))
    before = bar.pending
    bar.pending -= n
    if bar.pending < 0:
      raise Stop(Finding("arrival-overflow", f"CTA {th.cta} thread {th.tid} arrives on "
                          f"{bar.describe()}"))
    if no_complete and bar.pending == 0 and bar.tx == 0:
      raise Stop(Finding("arrive-nocomplete", f"CTA {th.cta} thread {th.tid}'s "
                          f"arrive.noComplete completes the phase of {bar.describe()}"))
    put(th, mbarrier_forms.encode_state(bar.phase, before if no_complete else None))
    advance_phase(k, bar)
    return YIELD if k.sched.pauses(k.step) else None
  # (arrive_drop, which changes the expected count, goes lane by lane)
  arrive.lanes = None if drop else warp_mbarrier.arrive(
      k, space, addr, tx, count, sem, scope, no_complete, put, pc)
  return arrive


def _wait(k, mods, ops, src, space):
  """``mbarrier.test_wait`` / ``try_wait``: the predicate says whether the phase
  completed.  .parity: the operand is the parity of the phase to wait for; else
  it is the state an arrive returned (here: the phase number), whose parity it is.

  Both may return false (PTX ISA: test_wait is non-blocking; try_wait returns when
  the phase completes or a time limit expires), and a program that proceeds on
  false observes nothing.  So the failed wait is explored: test_wait on an
  unfinished phase returns false (and yields: a poll); a wait whose phase has
  completed, but which this thread has not observed before, returns false on its
  first try (it could have run before the completion) and the truth when the
  thread retries it (same instruction, barrier and phase); try_wait on an
  unfinished phase, retried, blocks until the phase completes (``run``), or
  returns false once nothing can make progress any more."""
  pred, addr, parity = ops[0][1], src[1], src[2]
  sem, scope = sem_scope(mods, "acquire")
  blocking, pc, by_state = mods[0] == "try_wait", len(k.program.code), "parity" not in mods
  def wait(th):
    bar, raw = mbarrier_of(k, th, th.vc, space, addr(th), pc=pc, form=mods[0]), parity(th)
    par = raw & 1
    if mbarrier_forms.overrun_suspect(th, bar, raw, by_state):
      mbarrier_forms.check_overrun(th, bar, raw, by_state)
    done = bar.phase & 1 != par   # the phase of that parity has completed
    instance = (pc, bar.key, par, bar.phase)
    if done and (th.tried_wait == instance or th.seen[bar.slot] >= bar.phase):
      _observe(k, th, bar, sem, scope)
      k.registers.put(pred, th, 1)
      return None
    if th.tried_wait != instance or not blocking:
      th.tried_wait = instance
      k.registers.put(pred, th, 0)
      if done or not blocking:
        th.polled = True   # (a poll: the run parks it if nothing changes)
        return YIELD
      return None
    th.wait = MbarrierWait(bar.key, par, pred, sem, scope, bar.phase)
    return BLOCK
  wait.lanes = warp_mbarrier.wait(k, space, addr, parity, pred, sem, scope, blocking, pc,
                                  by_state)
  return wait


class MbarrierWait(Wait):
  """A blocking ``mbarrier.try_wait`` on the phase ``phase`` (of parity ``parity``: the
  barrier's current phase when it blocked) of the mbarrier ``key``: it completes when
  that phase has (observing that phase with ``sem`` / ``scope``, even where later ones
  completed too while it slept, and setting the predicate ``pred``), or times out
  (``pred`` false) when nothing else can change (PTX ISA, mbarrier.test_wait / try_wait:
  "Suspended thread resumes execution when the specified phase completes OR before the
  phase completes following a system-dependent time limit")."""

  __slots__ = ("key", "parity", "pred", "sem", "scope", "phase")
  can_time_out = observes_late = True   # (observes_late: as late as it can, run's doc)

  def __init__(self, key, parity, pred, sem, scope, phase):
    self.key, self.parity, self.pred, self.sem, self.scope = key, parity, pred, sem, scope
    self.phase = phase

  def ready(self, k, th) -> bool:
    return k.mbar[self.key].phase > self.phase

  def complete(self, k, th) -> None:
    _observe(k, th, k.mbar[self.key], self.sem, self.scope, self.phase)
    k.registers.put(self.pred, th, 1)

  def time_out(self, k, th) -> None:
    th.poll_what = (th.pc, self)   # what it polls, if it then parks (a hang report)
    k.registers.put(self.pred, th, 0)

  def describe(self, k, th) -> tuple[int, str]:
    return th.pc, f"parity {self.parity} of {k.mbar[self.key].describe()}"


def mbarrier_of(k, th_or_none, vc, space_or_key, addr=None, *, pc=None, form=None,
                remote=False):
  """The Mbarrier at ``addr`` (for mbarrier.``form``: ``mbarrier_key``, with ``remote``);
  its initialisation must be visible to ``vc``.  A thread's operation (``th_or_none``,
  by instruction ``pc``) is recorded in ``Mbarrier.users`` (``_inval_ordered``)."""
  key = (space_or_key if addr is None else
         mbarrier_key(k, th_or_none, space_or_key, addr, form, remote))
  bar = k.mbar.get(key)
  if bar is None:
    raise Stop(Finding("barrier-uninit", f"no mbarrier.init at CTA {key[0]} offset "
                        f"{key[1]:#x}"))
  slot, clk = bar.init
  if vc.item(slot) < clk:
    who = "an asynchronous operation" if th_or_none is None else \
        f"CTA {th_or_none.cta} thread {th_or_none.tid}"
    raise Stop(Finding("barrier-init", f"{who} uses {bar.describe()}"))
  if th_or_none is not None:
    bar.users[th_or_none.slot] = (vc.item(th_or_none.slot), pc)
  return bar


def _inval_ordered(k, th, bar, pc):
  """``mbarrier.inval`` by ``th`` must come after every other thread's operation on the
  barrier (PTX ISA, mbarrier.inval: any mbarrier operation but init on an
  invalidated mbarrier is undefined, so one that may still run is a race), and after
  every asynchronous operation that completes on it."""
  for op in k.inflight:
    if op.completion.mbarrier == bar.key:
      raise Stop(Finding("race", f"CTA {th.cta} thread {th.tid} invalidates "
                          f"{bar.describe()} while {op.text}, which completes on it, is in "
                          "flight"))
  for slot, (clk, other_pc) in sorted(bar.users.items()):
    if slot != th.slot and th.vc[slot] < clk:
      by = k.threads[slot - 1]
      memory = f"CTA {bar.key[0]} SMEM bytes {bar.key[1]}..{bar.key[1] + 7}"
      missing = "the other thread arrives on it, or a bar.sync, before the inval"
      raise Stop(Finding(
          "race", f"CTA {th.cta} thread {th.tid} invalidates {bar.describe()} with no "
          f"happens-before from CTA {by.cta} thread {by.tid}'s operation on it at "
          f"{access_core.insn_where(k, -1 if other_pc is None else other_pc)}, which may still "
          f"be running; missing: {missing}",
          other_source=None if other_pc is None else k.program.sources[other_pc],
          access=access_core.access_of(k, th, "mbarrier.inval", memory, pc),
          other=access_core.access_of(k, by, "mbarrier operation", memory, other_pc),
          missing=missing))


def _object_write(k, th, key, pc):
  """``mbarrier.init`` / ``inval`` write the barrier's 8 bytes: checked and recorded as
  a write in the shadow (plain accesses to them before the init, or after the inval,
  must be ordered with it)."""
  buf = k.smem[key[0]]
  access_core.thread_access(k, th, buf, key[1], 8, write=True, insn=pc)


# -- release / acquire helpers ----------------------------------------------


def _release(k, th, sem, scope, into: Releases, origin=None):
  """Publishes ``th``'s clock into ``into`` if the operation releases: by its
  own semantics (as ``origin``'s, a CTA: ``th``'s unless given,
  ``mbarrier_state.release_origin``), or as a relaxed operation after a fence (the
  fence's scope)."""
  if sem in ("release", "acq_rel", "sc"):
    into.add(th.cta if origin is None else origin, scope, th.vc)
  elif th.fence_rel is not None:
    vc, fscope = th.fence_rel
    into.add(th.cta, min(fscope, scope), vc)
  th.vc[th.slot] += 1


# -- table entries (opcodes.OPCODES) ------------------------------------------


def _mbarrier_op(k, ins):
  return _mbarrier(k, ins.mods, ins.ops, ins.src, ins.space)


# -- warp collectives (warp.py, collectives.py) -------------------------------------


def _warp_collective_at(k, pc, resolve):
  """The meeting of an ``.aligned`` collective at instruction ``pc`` (the one being
  compiled): ``resolve(lanes)`` runs once the warp's 32 lanes wait there."""
  assert pc == len(k.program.code)
  return warp.aligned_collective(k, resolve)


def _warp_sync(k, mask):
  """``bar.warp.sync membermask`` (collectives.py)."""
  return collectives.warp_sync(k, mask)


def mbarrier_key(k, th, space, addr, form=None, remote=False):
  """(CTA, offset) of the mbarrier at ``addr`` in ``space`` for mbarrier.``form``: the
  plain case at once (``addresses.plain_shared``), any other through ``addresses.mem``
  (its checks and messages).  Only a .shared::cluster form, or a generic arrive /
  arrive_drop whose state is the sink ``_`` (``remote``), may name another CTA's
  mbarrier: a generic or .shared::cta address of another CTA's is otherwise
  ``barrier-peer`` (``mbarrier_forms.peer``); a .shared::cta address carrying the
  executing CTA's own rank stays a fault (``mem``); a generic one names its own object."""
  place = None if space is None else addresses.plain_shared(
      k, th, addr, 8, space == "shared::cluster")
  if place is None:
    rank = (addr >> 24) - 1
    if form is not None and space in ("shared", "shared::cta") and \
       0 <= rank < len(k.smem) and rank != th.cta:
      mbarrier_forms.peer(th, (rank, (addr & 0xFFFFFF) - addresses.SHARED_BASE), form, addr,
                          space)
    buf, off = addresses.mem(k, th, space, addr, 8)
    place = k.smem_cta[id(buf)], off
  if place[0] != th.cta and space != "shared::cluster" and form is not None and not remote:
    mbarrier_forms.peer(th, place, form, addr, space)
  return place


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/checker/test_opcode_table.py compiles every one).
OPCODES = {
    "mbarrier": Opcode(_mbarrier_op, (
        "mbarrier.init.shared.b64 [%r1], 1", "mbarrier.inval.shared.b64 [%r1]",
        "mbarrier.arrive.shared::cta.b64 %rd1, [%r1]",
        "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r1], 16",
        "mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%r1], 16",
        "mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [%r1], 16",
        "mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], %r2",
        "mbarrier.try_wait.relaxed.cluster.shared::cta.b64 %p1, [%r1], %rd2",
        "mbarrier.test_wait.parity.shared::cta.b64 %p1, [%r1], 0",
        "mbarrier.pending_count.b64 %r1, %rd2", "mbarrier.arrive_drop.shared.b64 %rd1, [%r1]",
        "mbarrier.arrive_drop.noComplete.release.cta.shared::cta.b64 %rd1, [%r1], 1",
        "mbarrier.arrive_drop.expect_tx.relaxed.cluster.shared::cluster.b64 _, [%r1], 8"),
        ("mbarrier.arrive_drop.noComplete.relaxed.cta.shared.b64 %rd1, [%r1], 1",
         "mbarrier.pending_count.shared.b64 %r1, %rd2")),
}

FAMILY = Family("sync", OPCODES)
