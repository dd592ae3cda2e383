"""CTA and cluster barriers of the PTX checker: ``bar`` / ``barrier`` (named CTA
barriers, with ``.sync``, ``.arrive`` and ``.red`` and an optional thread count) and
``barrier.cluster.arrive`` / ``.wait`` (run by ``cluster_barrier``), each with its
memory-ordering effect and the ``.aligned`` rule.

Functions of the machine ``k`` (``machine.Machine``), whose state they use:
``k.named`` (the named barriers' current instances, (CTA, id) -> ``NamedBarrier``),
``k.warp_arrivals`` (the warps arriving, (CTA, id, warp) -> ``WarpArrival``),
``k.pair_users`` / ``k.held`` (``pairings``; ``release_held`` lets the held warps
arrive), ``k.threads`` / ``k.block`` / ``k.alive`` (the threads, in CTA then thread
order, and each CTA's non-exited ones) and ``k.epoch`` (bumped on every change another
thread may see).  The warp size, a warp's non-exited lanes, the wait of a lane at a
named barrier (``NamedWait``) and the messages' instruction names are
``barrier_warps``'s, which ``cluster_barrier`` and ``pairings`` use too.

What the ISA says, and how it is run (PTX ISA, bar / barrier):
  * Warps are counted: "The barrier{.cta} instruction causes executing thread to
    wait for all non-exited threads from its warp and marks warps' arrival at
    barrier".  A lane that arrives on barrier ``a`` (0..15) waits until every
    non-exited lane of its warp has arrived on ``a`` (at any instruction naming
    it, without ``.aligned``); then the warp arrives, counting 32 threads (a short
    last warp too: "barriers are executed on a per-warp basis").  The barrier
    completes once (warps arrived) * 32 >= ``b``, or, without ``b``, once every
    warp of the CTA that has a non-exited thread arrived; "the waiting threads are
    restarted without delay".  ``.arrive`` "does not cause executing thread to wait
    for threads of other participating warps".  ``b`` "must be a multiple of the
    warp size" (else the finding ``barrier-count``) and the same for every
    arrival of one barrier instance (a different count is refused: the ISA allows
    forms "using the same barrier name and thread count" and says nothing of others).
    Which warps meet in one instance depends on their order of arrival where more
    warps share a counted barrier than its count covers: ``pairings`` explores
    other pairings than the schedule's order makes (other runs, a warp held back).
  * ``.red`` ("barrier{.cta}.red performs a reduction operation across threads"):
    a ``.sync`` whose waiting threads get ``.popc`` (the number of arrived threads
    with a true predicate), ``.and`` or ``.or`` of the predicates ``{!}c`` of the
    threads that arrived on the instance.  "barrier{.cta}.red should not be
    intermixed with barrier{.cta}.sync or barrier{.cta}.arrive using the same active
    barrier" (``bar-red-mixed``); two different reductions on one instance are
    refused (not specified).
  * ``.aligned``: "all threads in CTA will execute the same barrier instruction";
    ``bar{.cta}.sync`` / ``.arrive`` are ``barrier{.cta}.sync.aligned`` /
    ``.arrive.aligned``.  Checked per warp (what the checker can observe): the
    lanes of a warp arriving on one barrier must do so at one instruction when any
    of them is aligned; a lane arriving elsewhere, or exiting while its warp-mates
    wait at an aligned barrier, is the finding ``aligned-divergence`` (a lane
    that never arrives is a ``hang``).
  * Memory ordering (Memory Consistency Model, "Synchronizes-with"): a
    ``bar.sync`` / ``bar.red`` / ``bar.arrive`` synchronises with every
    ``bar.sync`` / ``bar.red`` of the same barrier instance, at CTA scope: the
    waiting threads acquire every arriving thread's earlier accesses; an arriving
    (``.arrive``) thread acquires nothing.
  * ``barrier.cluster``: see ``cluster_barrier``.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import cluster_barrier, pairings, program, sync
from mosaic_async_store.check.barrier_warps import WARP, NamedWait, named_need, warp_live, where
from mosaic_async_store.check.waits import block_all, resume_all
from mosaic_async_store.check.waits import block as block_thread
from mosaic_async_store.check.findings import Finding, Stop, fault
from mosaic_async_store.check.family import Family
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.outcomes import BLOCK, FALLBACK

__all__ = ["NamedBarrier", "WarpArrival", "OPCODES", "FAMILY", "release_held"]

_NAMED_BARRIERS = 16   # barrier ids 0..15 (PTX ISA, bar)
_ALIGNED = ("PTX ISA, bar / barrier.cluster: .aligned (bar is barrier.aligned) requires "
            "all threads of the warp to execute the same barrier instruction")


class NamedBarrier:
  """One instance of a named CTA barrier: the thread count its arrivals give (None:
  the whole CTA), the warps that arrived, the join of their clocks, the lanes that
  wait (``.sync``)."""

  __slots__ = ("count", "warps", "vc", "waiters", "red", "trues", "votes", "members")

  def __init__(self, count, vc, red):
    self.count, self.warps, self.vc, self.waiters = count, 0, vc, []
    self.members = set()   # the warps that arrived
    self.red, self.trues, self.votes = red, 0, 0   # bar.red: its operation, the tally


class WarpArrival:
  """The lanes of one warp that arrived on one named barrier, waiting for the warp's
  other non-exited lanes (``live``): tid -> (thread, whether it syncs); the
  thread count they give, the join of their clocks, the first lane at each
  instruction (pc -> tid), whether any arrived at an aligned one."""

  __slots__ = ("lanes", "live", "count", "vc", "pcs", "aligned", "red", "trues")

  def __init__(self, count, live, vc, red):
    self.lanes, self.live, self.count, self.vc = {}, live, count, vc
    self.pcs, self.aligned, self.red, self.trues = {}, False, red, 0


# bar.sync / bar.arrive / barrier.sync / barrier.arrive (named CTA barriers) and
# barrier.cluster.arrive / .wait.


def _bar_op(k, ins):
  """bar.sync / barrier.sync / bar.arrive / barrier.arrive / bar.red / barrier.red
  (``.cta`` and ``.aligned`` spellings), bar.warp.sync, barrier.cluster.*."""
  mods, ops, src, pc = ins.mods, ins.ops, ins.src, len(k.program.code)
  if ins.base == "bar" and mods == ["warp", "sync"] and len(ops) == 1:
    return sync._warp_sync(k, src[0])
  aligned = ins.base == "bar" or "aligned" in mods   # bar{.cta}.* is .aligned
  if ins.base == "barrier" and mods[:1] == ["cluster"] and not ops:
    if mods[1:2] == ["arrive"] and set(mods[2:]) <= {"release", "relaxed", "aligned"}:
      return cluster_barrier.arrive(k, mods[2:], pc, aligned)
    if mods[1:2] == ["wait"] and set(mods[2:]) <= {"acquire", "aligned"}:
      return cluster_barrier.wait(k, mods[2:], pc, aligned)
  plain = [m for m in mods if m not in ("cta", "aligned")]
  if plain[:1] == ["red"] and plain[1:] in (["popc", "u32"], ["and", "pred"],
                                            ["or", "pred"]) and \
     mods.count("cta") <= 1 and mods.count("aligned") <= 1 and len(ops) in (3, 4) and \
     ops[0][0] == "reg" and all(src[1:]):
    put = program.setter(k, ops[0], 32 if plain[1] == "popc" else 1)
    return _named(k, True, src[1], src[2] if len(ops) == 4 else None, pc, aligned,
                  (plain[1], src[-1], put))
  if plain in (["sync"], ["arrive"]) and mods.count("cta") <= 1 and \
     mods.count("aligned") <= 1 and len(ops) in (1, 2) and all(src):
    if plain == ["arrive"] and len(ops) != 2:
      raise NotImplementedError(f"opcode {ins.opcode} (bar.arrive needs a thread count)")
    return _named(k, plain[0] == "sync", src[0], src[1] if len(ops) == 2 else None,
                       pc, aligned)
  raise NotImplementedError(f"opcode {ins.opcode}")


# -- named CTA barriers --------------------------------------------------------


def _named(k, waits, bar_id, count, pc, aligned, red=None):
  """The arrival of a lane on barrier ``bar_id(th)`` of its CTA at instruction
  ``pc``: it waits for its warp; then, if ``waits``, it waits for the barrier to complete.
  ``red``: bar.red's (operation, predicate getter, destination setter), else None."""
  op = None if red is None else red[0]
  ids, counts = program.lanes_getter(bar_id), count and program.lanes_getter(count)
  def arrive(th):
    a, b = bar_id(th), None if count is None else count(th)
    if not 0 <= a < _NAMED_BARRIERS:
      raise fault(f"barrier id {a}: the ISA allows 0..{_NAMED_BARRIERS - 1}")
    if b is not None and (b <= 0 or b % WARP):
      raise Stop(Finding("barrier-count", f"barrier {a} of CTA {th.cta} with thread "
                          f"count {b}"))
    wkey = (th.cta, a, th.tid // WARP)
    rec = k.warp_arrivals.get(wkey)
    if rec is None:
      live = warp_live(k, th.cta, wkey[2])
      rec = k.warp_arrivals[wkey] = WarpArrival(b, live, th.vc.copy(), op)
    else:
      _lane_joins(k, rec, wkey, th, pc, aligned, b, op)
      np.maximum(rec.vc, th.vc, out=rec.vc)
    if red is not None:
      rec.trues += red[1](th) & 1
    rec.lanes[th.tid] = (th, waits, None if red is None else red[2])
    rec.pcs.setdefault(pc, th.tid)
    rec.aligned |= aligned
    th.vc[th.slot] += 1   # what it releases to the threads that wait
    k.epoch += 1
    th.wait = NamedWait(wkey)
    if len(rec.lanes) >= rec.live:
      _warp_arrives(k, wkey, th)
    return None if th.wait is None else BLOCK

  def arrive_lanes(lanes):   # every live lane of a warp at once: as lane by lane
    th = lanes[0]
    a, b = bar_id(th), None if count is None else count(th)
    wkey = (th.cta, a, th.tid // WARP)
    if not 0 <= a < _NAMED_BARRIERS or (b is not None and (b <= 0 or b % WARP)) or \
       wkey in k.warp_arrivals or len(lanes) != warp_live(k, th.cta, wkey[2]) or \
       ids(lanes).count(a) != len(lanes) or \
       (count is not None and counts(lanes).count(b) != len(lanes)):
      return FALLBACK   # (lane by lane: a finding, or warp-mates elsewhere)
    rows = k.lane_rows(lanes)
    rec = k.warp_arrivals[wkey] = WarpArrival(b, len(lanes), k.lane_clocks(lanes).max(axis=0),
                                              op)   # (a view where the lanes are consecutive)
    if red is not None:
      rec.trues = sum(red[1](t) & 1 for t in lanes)
    rec.lanes = {t.tid: (t, waits, None if red is None else red[2]) for t in lanes}
    rec.pcs[pc], rec.aligned = th.tid, aligned
    k.tick(rows)   # (each lane's own slot: what it releases)
    k.epoch += len(lanes)
    last = lanes[-1]
    wait = NamedWait(wkey)   # (one for the warp's lanes: it holds only the key)
    last.wait = wait   # (the others wait for it, which completes the warp's arrival)
    block_all(k, lanes[:-1], pc, wait)
    _warp_arrives(k, wkey, last)
    if last.wait is not None:
      last.pc, last.state = pc, "block"
      block_thread(k, last)
      return dict.fromkeys(lanes, BLOCK)
    return dict.fromkeys(lanes[:-1], BLOCK)   # (those it resumed rejoin: lockstep)
  arrive.lanes = arrive_lanes
  return arrive


def _lane_joins(k, rec, wkey, th, pc, aligned, b, op):
  """Checks a lane joining its warp's arrival: the same thread count, bar.red or
  not as its warp-mates (and the same reduction), and the same instruction as
  its warp-mates when any of them is aligned."""
  _same_red(rec.red, op, f"lane {th.tid % WARP} of warp {wkey[2]}", "its warp-mates",
            wkey[:2])
  if rec.count != b:
    raise NotImplementedError(
        f"barrier {wkey[1]} of CTA {th.cta} arrived on by lane {th.tid % WARP} of warp "
        f"{wkey[2]} with thread count {'the CTA' if b is None else b} while its "
        f"warp-mates gave {'the CTA' if rec.count is None else rec.count}")
  other = next((q for q in rec.pcs if q != pc), None)
  if other is not None and (aligned or rec.aligned):
    raise Stop(Finding("aligned-divergence", (
        f"CTA {th.cta} warp {wkey[2]}: lane {th.tid % WARP} arrives on barrier "
        f"{wkey[1]} at {where(k, pc)} while lane {rec.pcs[other] % WARP} of its warp "
        f"arrived on the same barrier instance at {where(k, other)}")))


def _red_name(op) -> str:
  return "bar.sync / bar.arrive" if op is None else f"bar.red.{op}"


def _same_red(have, op, who, others, key):
  """An arrival of ``op`` (a bar.red operation, or None) on an instance whose other
  arrivals were ``have``: bar.red beside .sync / .arrive is ``bar-red-mixed``; two
  reductions are refused (the ISA does not say how they combine)."""
  if have == op:
    return
  what = (f"barrier {key[1]} of CTA {key[0]}: {who} arrives with {_red_name(op)} while "
          f"{others} arrived on the same instance with {_red_name(have)}")
  if have is None or op is None:
    raise Stop(Finding("bar-red-mixed", what))
  raise NotImplementedError(f"{what} (two reductions on one barrier instance: the PTX ISA "
                            "does not say how they combine)")


def _wake(k, threads, current):
  """Each of ``threads`` goes on, in order: resumed, or (``current``, the thread whose
  instruction runs) not blocked."""
  if current in threads:
    threads = [th for th in threads if th is not current]
    current.wait = None
  resume_all(k, threads)


def _warp_arrives(k, wkey, current, rec=None):
  """Every non-exited lane of the warp arrived (``rec``: its arrival, held back
  before by ``pairings``): the warp arrives on the barrier's current instance; its
  ``.arrive`` lanes go on, its ``.sync`` lanes wait for the barrier to complete."""
  if rec is None:
    rec = k.warp_arrivals.pop(wkey)
  key = wkey[:2]
  k.pair_users.setdefault(key, set()).add(wkey[2])
  bar = k.named.get(key)
  if bar is not None and pairings.holds(k, key, bar, rec, wkey[2]):
    return
  if bar is None:
    bar = k.named[key] = NamedBarrier(rec.count, rec.vc, rec.red)
  else:
    _same_red(bar.red, rec.red, f"warp {wkey[2]}", "other warps", key)
  if bar.count != rec.count:
    raise NotImplementedError(
        f"barrier {key[1]} of CTA {key[0]} arrived on with thread count "
        f"{'the CTA' if rec.count is None else rec.count} while its other arrivals "
        f"gave {'the CTA' if bar.count is None else bar.count}")
  elif bar.warps:
    np.maximum(bar.vc, rec.vc, out=bar.vc)
  bar.warps += 1
  bar.members.add(wkey[2])
  bar.trues += rec.trues
  bar.votes += len(rec.lanes)
  wait = NamedWait(key)   # (one for every waiting lane: it holds only the key)
  lanes = rec.lanes.values()
  waiting = [(th, put) for th, waits, put in lanes if waits]
  for th, _ in waiting:
    th.wait = wait
  bar.waiters += waiting
  if len(waiting) < len(lanes):   # (.arrive lanes: they go on)
    _wake(k, [th for th, waits, _ in lanes if not waits], current)
  if _named_complete(k, key, current) and k.held:
    release_held(k, key)   # a held warp arrives on the next instance


def release_held(k, key=None) -> bool:
  """The warps ``pairings`` held back on barrier ``key`` (None: on every barrier, when no
  thread can run: ``run`` calls it) arrive now; returns whether there were any."""
  keys = list(k.held) if key is None else [key] if key in k.held else []
  for bkey in keys:
    for w, rec in k.held.pop(bkey):
      _warp_arrives(k, (*bkey, w), None, rec)
  return bool(keys)


def _named_complete(k, key, current=None) -> bool:
  """Completes barrier ``key`` if enough warps arrived: every waiting thread
  acquires every arrival; the waiters other than ``current`` (the thread whose
  instruction completes it) resume.  Returns whether it completed."""
  bar = k.named.get(key)
  if bar is None or bar.warps < named_need(k, key[0], bar.count):
    return False
  del k.named[key]
  # bar.red: "The c predicate (or its complement) from all threads ... are combined"
  value = {None: 0, "popc": bar.trues, "and": int(bar.trues == bar.votes),
           "or": int(bar.trues > 0)}[bar.red]
  # (every waiter's clock at once: a thread's clock is row slot - 1 of ``k.clocks``)
  rows = np.sort(np.array([th.slot for th, _ in bar.waiters], np.intp)) - 1
  k.acquire_rows(rows, bar.vc)
  k.tick(rows)
  if bar.red is not None:   # (bar.red's destinations; a .sync / .arrive has none)
    for th, put in bar.waiters:
      put(th, value)
  _wake(k, [th for th, _ in bar.waiters], current)
  return True


def _barriers_after_exit(k, th):
  """``th`` exited: a warp-mate waiting at an aligned barrier (or whose aligned
  cluster barrier it skipped) is a divergence; its warp's arrivals may now be
  complete (they wait for the non-exited lanes), and so may the barriers that
  wait for the whole CTA (its warps with a non-exited thread)."""
  c, w = th.cta, th.tid // WARP
  for wkey in [key for key in k.warp_arrivals if key[0] == c and key[2] == w]:
    rec = k.warp_arrivals[wkey]
    if rec.aligned:
      pc, tid = next(iter(rec.pcs.items()))
      raise Stop(Finding("aligned-divergence", (
          f"CTA {c} warp {w}: lane {th.tid % WARP} exits while lane {tid % WARP} of its "
          f"warp waits at {where(k, pc)} on barrier {wkey[1]}")))
    rec.live -= 1
    if len(rec.lanes) >= rec.live:
      _warp_arrives(k, wkey, None)
  for key in [key for key, b in k.named.items() if key[0] == c and b.count is None]:
    _named_complete(k, key)
  cluster_barrier.lanes_exit(k, th)


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/checker/test_opcode_table.py compiles every one).
OPCODES = {
    "bar": Opcode(_bar_op, ("bar.sync 0", "bar.sync 1, 128", "bar.warp.sync -1",
                            "bar.arrive 1, 128", "bar.cta.sync %r1, %r2",
                            "bar.red.popc.u32 %r1, 0, %p1", "bar.cta.red.and.pred %p2, 1, !%p1",
                            "bar.red.or.pred %p2, 2, 64, %p1"),
                  ("bar.arrive 1", "bar.red.add.u32 %r1, 0, %p1", "bar.red.popc.u32 %r1, 0",
                   "bar.sync.foo 0")),
    "barrier": Opcode(_bar_op, ("barrier.sync 0", "barrier.sync.aligned 2, 64",
                                "barrier.cta.arrive.aligned 3, 96", "barrier.cluster.arrive",
                                "barrier.cluster.arrive.relaxed.aligned",
                                "barrier.cluster.wait", "barrier.cluster.wait.aligned",
                                "barrier.red.or.pred %p1, 0, %p2",
                                "barrier.cta.red.popc.aligned.u32 %r1, %r2, 96, !%p2"),
                      ("barrier.cluster.arrive.acquire", "barrier.red.popc.pred %p1, 0, %p2",
                       "barrier.red.or.u32 %r1, 0, %p2")),
}

FAMILY = Family("barriers", OPCODES)
