"""Warp collectives of the PTX checker: ``shfl.sync``, ``vote.sync``, ``elect.sync``,
``redux.sync``, ``match.sync``, ``bar.warp.sync``, and the meeting of the
``.sync.aligned`` matrix collectives (``ldmatrix`` / ``stmatrix``, whose data movement
is access.py's).

What the ISA says (PTX ISA, shfl.sync / vote.sync / elect.sync / redux.sync /
match.sync / bar.warp.sync), and
how it is run:
  * a ``.sync`` collective "causes executing thread to wait until all non-exited
    threads corresponding to membermask have executed [it] with the same qualifiers
    and same membermask value before resuming execution": lanes meet by (opcode
    with its qualifiers, membermask), wherever they execute it (sm_70 and newer: two
    call sites of one warp meet), and exited lanes (or lanes a partial last warp does
    not have) are not waited for;
  * "the behavior ... is undefined if the executing thread is not in the
    membermask": rule ``collective-mask``;
  * shfl.sync: "results are undefined if a thread sources a register from an
    inactive thread or a thread that is not in membermask": that lane receives
    ``Undefined``: computing with it is allowed, a use that needs its bits is the
    finding ``undefined-value``;
  * vote.sync votes over the lanes that met (ballot: bit i is lane i's predicate);
  * elect.sync elects one leader among the lanes that met; which one is the
    hardware's choice, so the schedule chooses (``schedule.Schedule.pick_leader``:
    the lowest lane in schedule 0, the highest in schedule 1, a seeded one else);
  * ``.aligned`` collectives need every lane of the warp at the same instruction: a
    warp whose lanes wait at two different ones, or whose lanes exited while others
    wait at one, is reported as ``aligned-divergence``.

A lane that reaches a collective blocks with its ``Meeting`` (a ``waits.Wait``); the
last member lane's arrival completes the meeting (``meet``) and resumes its lanes, which
go on together (``lockstep`` rejoins them; ``run`` calls ``meet`` too, where an exit
completes a meeting).  A piece that holds the whole meeting, every non-exited member
lane of its warp and no lane of it waiting at another collective, completes it at once
instead (each collective's warp form, ``Program.vcode``) and goes on: the same run
(test_warp_batches compares the two).  Nothing another warp can see happens at a
``.sync`` collective, ``wgmma.fence`` or ``wgmma.commit_group``, so the schedule
chooses no other warp there; after the ``.aligned`` matrix loads and stores and
``wgmma.mma_async`` the lanes yield (they complete at ``run``'s ``meet``, or at once in
the warp form, and go to the back of the run queue either way).
"""

from __future__ import annotations

import functools
import operator

import numpy as np

from mosaic_async_store.check import program, waits
from mosaic_async_store.check.memory import ProtocolError
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.outcomes import BLOCK, FALLBACK, YIELD
from mosaic_async_store.check.undefined import Undefined
from mosaic_async_store.check.waits import Wait

__all__ = ["Meeting", "meet", "warp_lanes", "live_lanes", "sync_collective",
           "aligned_collective", "shfl", "vote", "elect", "redux", "match", "warp_sync", "OPCODES"]

FULL = 0xFFFFFFFF


class Meeting(Wait):
  """What one lane brings to a collective, and its wait (``waits.Wait``, grouped: the
  lanes of a meeting complete together): ``sig`` (lanes meet when theirs are
  equal), ``mask`` (the member lanes), ``value`` (its contribution), ``pc``,
  ``resolve(lanes, values) -> results`` (one per lane, in lane order) and
  ``finish(th, result)`` (writes the lane's destinations)."""

  __slots__ = ("sig", "mask", "value", "pc", "resolve", "finish", "aligned", "goes_on")
  grouped = True

  def __init__(self, sig, mask, value, pc, resolve, finish, aligned=False, goes_on=True):
    self.sig, self.mask, self.value, self.pc = sig, mask, value, pc
    self.resolve, self.finish, self.aligned = resolve, finish, aligned
    self.goes_on = goes_on   # (else its lanes yield once it completes: aligned_collective)

  def on_block(self, k, th) -> None:
    """Once every live member lane may wait (the member lanes, less every exited
    thread of the CTA: at most the live ones, so the exact count is needed only from
    there): a meeting that ``goes_on`` completes at this, its last lane's arrival,
    which resumes its lanes, and they go on together (``lockstep``), as the warp form
    does; else the run is marked dirty (``run`` calls ``meet``)."""
    key = (th.cta, th.tid // 32)
    n = k.group_waiting[key] = k.group_waiting.get(key, 0) + 1
    if n >= (self.mask & warp_lanes(k, th.tid // 32)).bit_count() - k.block + k.alive[th.cta] \
       and n >= len(live_lanes(k, th.cta, th.tid // 32, self.mask)):
      if self.goes_on:
        base = th.cta * k.block + (th.tid & ~31)
        waiting = [t for t in k.threads[base:base + 32]
                   if t.state == "block" and type(t.wait) is Meeting and t.wait.goes_on]
        if meet(k, waiting):
          return
      k.dirty = True

  def on_resume(self, k, th) -> None:
    k.group_waiting[(th.cta, th.tid // 32)] -= 1

  @classmethod
  def resolve_group(cls, k, threads) -> bool:
    return meet(k, threads)

  def describe(self, k, th) -> tuple[int, str]:
    return th.pc, "its warp's other lanes"


def warp_lanes(k, warp):
  """The mask of the lanes that warp ``warp`` has (all 32 but in a partial last warp)."""
  return (1 << min(32, k.block - 32 * warp)) - 1


def live_lanes(k, cta, warp, mask):
  """The non-exited threads of ``warp`` in ``cta`` whose lanes ``mask`` names."""
  base, n = cta * k.block + 32 * warp, min(32, k.block - 32 * warp)
  return [k.threads[base + lane] for lane in range(n)
          if mask >> lane & 1 and k.threads[base + lane].state != "done"]


def sync_collective(k, opcode, mask_getter, contribution, resolve, finish):
  """The instruction ``opcode`` of a ``.sync`` collective at ``len(k.program.code)``: the lane
  checks it is in the membermask, then blocks with its Meeting.  Where the whole
  meeting is one piece its warp form reads the lanes' operands through the
  ``lanes`` forms ``contribution`` and ``finish`` have (``program.with_lanes``: else one
  call per lane)."""
  pc = len(k.program.code)
  masks_of = program.lanes_getter(mask_getter)
  contributions = program.lanes_getter(contribution)
  finish_lanes = None if finish is None else getattr(
      finish, "lanes", lambda lanes, results: [finish(th, r) for th, r in zip(lanes, results)])

  def block(th):
    mask = mask_getter(th) & FULL
    if not mask >> (th.tid % 32) & 1:
      raise ProtocolError("collective-mask", f"lane {th.tid % 32} executes {opcode} with "
                          f"membermask {mask:#010x}, which does not name it")
    th.wait = Meeting((opcode, mask), mask, contribution(th), pc, resolve, finish)
    return BLOCK

  def block_lanes(lanes):   # the whole meeting in one piece: at once (module doc)
    masks = masks_of(lanes)
    mask = masks[0] & FULL
    if any(m & FULL != mask for m in masks) or \
       not all(mask >> (th.tid & 31) & 1 for th in lanes) or \
       not _whole_meeting(k, lanes, mask):
      return FALLBACK
    results = resolve(lanes, contributions(lanes))
    if finish_lanes is not None:
      finish_lanes(lanes, results)
  block.lanes = block_lanes
  return block


def _pair_finish(puts):
  """The ``finish`` of a collective whose lanes each get (value, predicate): into the
  registers of ``puts`` (the predicate's, if there is one), with its warp form."""
  def finish(th, result):
    puts[0](th, result[0])
    if len(puts) > 1:
      puts[1](th, result[1])
  def finish_lanes(lanes, results):
    puts[0].lanes(lanes, [r[0] for r in results])
    if len(puts) > 1:
      puts[1].lanes(lanes, [r[1] for r in results])
  return program.with_lanes(finish, finish_lanes)


def _whole_meeting(k, lanes, mask):
  """Whether ``lanes`` (a piece: running lanes of one warp at one instruction, in lane
  order) are every non-exited lane of their warp that ``mask`` names, with no lane of
  the warp waiting at a collective (it might meet these)."""
  th = lanes[0]
  w = th.tid >> 5
  if k.group_waiting.get((th.cta, w)):
    return False
  if mask & warp_lanes(k, w) == warp_lanes(k, w):   # (every lane named: the live ones,
    return len(lanes) == k.warp_alive[th.cta * k.warps_per_cta + w]   # counted)
  return lanes == live_lanes(k, th.cta, w, mask)


def aligned_collective(k, resolve, goes_on=False):
  """The instruction of an ``.aligned`` collective at ``len(k.program.code)``: every lane of
  the warp meets at it; ``resolve(lanes)`` runs with the 32 lanes in lane order.  Its
  lanes go on together (``goes_on``: nothing another warp can see happens there), or
  yield (the matrix loads and stores, ``wgmma.mma_async``: the schedule chooses who
  goes next after their memory accesses)."""
  pc = len(k.program.code)

  def block(th):
    th.wait = Meeting(("aligned", pc), FULL, None, pc,
                      lambda lanes, values: resolve(lanes) or [None] * len(lanes),
                      None, aligned=True, goes_on=goes_on)
    return BLOCK

  def block_lanes(lanes):   # all 32 lanes in one piece: at once (module doc)
    if len(lanes) != 32:
      return FALLBACK
    resolve(lanes)
    return None if goes_on else YIELD
  block.lanes = block_lanes
  return block


def meet(k, waiting) -> bool:
  """Completes every meeting whose non-exited member lanes all wait at it (``waiting``:
  the threads blocked at warp collectives, in thread order); True if one did."""
  warps = {}
  for th in waiting:
    warps.setdefault((th.cta, th.tid // 32), []).append(th)
  woke = False
  for (cta, w), lanes in warps.items():
    _check_aligned(k, cta, w, lanes)
    groups = {}
    for th in lanes:
      groups.setdefault(th.wait.sig, []).append(th)
    for group in groups.values():
      first = group[0].wait
      if len(group) != len(live_lanes(k, cta, w, first.mask)):
        continue
      if first.aligned and len(group) != 32:
        text, line = k.program.texts[first.pc], k.program.lines[first.pc]
        raise ProtocolError("aligned-divergence", f"CTA {cta} warp {w} meets at `{text}` "
                            f"(PTX line {line}) with {len(group)} lanes: an .aligned "
                            "instruction needs all 32", cta=cta, thread=group[0].tid,
                            ptx_line=line, instruction=text)
      results = first.resolve(group, [th.wait.value for th in group])
      for th, result in zip(group, results):
        finish = th.wait.finish
        if finish is not None:
          finish(th, result)
        waits.resume(k, th)
      woke = True
  return woke


def _check_aligned(k, cta, w, lanes):
  """Lanes of one warp waiting at two different .aligned collectives diverged."""
  pcs = sorted({th.wait.pc for th in lanes if th.wait.aligned})
  if len(pcs) > 1:
    texts, lines = k.program.texts, k.program.lines
    a, b = pcs[:2]
    raise ProtocolError("aligned-divergence", f"CTA {cta} warp {w}: lanes wait at "
                        f"`{texts[a]}` (PTX line {lines[a]}) and at `{texts[b]}` "
                        f"(PTX line {lines[b]}); an .aligned instruction must be executed "
                        "by all threads of the warp together", cta=cta, ptx_line=lines[b],
                        instruction=texts[b])


# -- the collectives ------------------------------------------------------------------


def shfl(k, ins):
  """``shfl.sync.{idx,bfly}.b32 d{|p}, a, b, c, membermask``: lane i reads lane j's
  ``a`` (idx: j = (i & segmask) | (b & ~segmask); bfly: j = i ^ b; c = segmask << 8 |
  clamp); out of range (j above the segment's clamp) it keeps its own ``a`` and p is
  false."""
  if ins.mods not in (["sync", "idx", "b32"], ["sync", "bfly", "b32"]) or len(ins.ops) != 5:
    raise NotImplementedError(f"opcode {ins.opcode}")
  dest = ins.ops[0][1:] if ins.ops[0][0] == "pair" else (ins.ops[0],)
  puts = [program.setter(k, dest[0], 32)] + [program.setter(k, o, 1) for o in dest[1:]]
  a, b, c, mask = ins.src[1], ins.src[2], ins.src[3], ins.src[4]
  bfly, line = ins.mods[1] == "bfly", k.program.lines[-1]

  def resolve(lanes, values):
    by_lane = {th.tid % 32: v[0] for th, v in zip(lanes, values)}
    out = []
    for th, (own, bv, cv) in zip(lanes, values):
      lane = th.tid % 32
      lo = lane & (cv >> 8) & 31
      hi = lo | (cv & 31 & ~(cv >> 8))
      j = lane ^ bv if bfly else lo | (bv & ~(cv >> 8) & 31)
      ok = j <= hi
      got = by_lane.get(j) if ok else own
      if got is None:   # the source lane is outside membermask, or exited
        got = Undefined(f"CTA {th.cta} lane {lane}'s shfl.sync at PTX line {line} reads "
                        f"lane {j}, which is not in membermask {mask(th) & FULL:#010x} "
                        "or has exited")
      out.append((got, ok))
    return out

  a_of, b_of, c_of = map(program.lanes_getter, (a, b, c))
  operands = program.with_lanes(lambda th: (a(th), b(th) & 31, c(th) & 0x1F1F),
                         lambda lanes: list(zip(a_of(lanes), [v & 31 for v in b_of(lanes)],
                                                [v & 0x1F1F for v in c_of(lanes)])))
  return sync_collective(k, ins.opcode, ins.src[4], operands, resolve, _pair_finish(puts))


def vote(k, ins):
  """``vote.sync.{all,any,uni}.pred d, p, membermask`` and ``vote.sync.ballot.b32``:
  every lane that met gets the vote of those lanes (no memory ordering: PTX ISA)."""
  mode = ins.mods[1] if len(ins.mods) == 3 and ins.mods[0] == "sync" else None
  if (mode, ins.mods[-1]) not in (("all", "pred"), ("any", "pred"), ("uni", "pred"),
                                  ("ballot", "b32")) or len(ins.ops) != 3 or \
     ins.ops[0][0] != "reg" or ins.src[1] is None:
    raise NotImplementedError(f"opcode {ins.opcode}")
  put, pred = program.setter(k, ins.ops[0], 32 if mode == "ballot" else 1), ins.src[1]

  def resolve(lanes, bits):
    value = {"all": int(all(bits)), "any": int(any(bits)), "uni": int(len(set(bits)) == 1),
             "ballot": sum(bit << (th.tid % 32) for th, bit in zip(lanes, bits))}[mode]
    return [value] * len(lanes)
  return sync_collective(k, ins.opcode, ins.src[2], lambda th: pred(th) & 1, resolve, put)


def elect(k, ins):
  """``elect.sync d|p, membermask``: one lane that met leads (the schedule's choice);
  every lane gets its lane id in d, p is true in the leader only."""
  if ins.mods != ["sync"] or len(ins.ops) != 2 or ins.ops[0][0] not in ("pair", "reg", "sink"):
    raise NotImplementedError(f"opcode {ins.opcode}")
  dest = ins.ops[0][1:] if ins.ops[0][0] == "pair" else (ins.ops[0],)
  puts = [program.setter(k, dest[0], 32)] + [program.setter(k, o, 1) for o in dest[1:]]

  def resolve(lanes, values):
    leader = lanes[k.sched.pick_leader(len(lanes))]
    return [(leader.tid % 32, th is leader) for th in lanes]
  return sync_collective(k, ins.opcode, ins.src[1], _NOTHING, resolve, _pair_finish(puts))


# What a lane brings to a collective that takes nothing from it (elect, bar.warp.sync).
_NOTHING = program.with_lanes(lambda th: None, lambda lanes: [None] * len(lanes))


_REDUX = {("add", "u32"), ("add", "s32"), ("min", "u32"), ("min", "s32"), ("max", "u32"),
          ("max", "s32"), ("and", "b32"), ("or", "b32"), ("xor", "b32")}


def redux(k, ins):
  """``redux.sync.op.type dst, src, membermask``: every lane that met gets ``.op`` of
  their ``src`` (PTX ISA, redux.sync: "performs a reduction operation .op of the 32
  bit source register src across all non-exited threads in the membermask"; ".add"
  is "truncated to 32 bits").  The ``.f32`` forms (``.abs``, ``.NaN``) need sm_100a:
  refused."""
  form = tuple(ins.mods[1:]) if ins.mods[:1] == ["sync"] else ()
  if form not in _REDUX or len(ins.ops) != 3 or ins.ops[0][0] != "reg" or ins.src[1] is None:
    raise NotImplementedError(f"opcode {ins.opcode}")
  op, t = form
  put, src = program.setter(k, ins.ops[0], 32), ins.src[1]
  sv = (lambda v: v - (1 << 32) if v >> 31 else v) if t == "s32" else (lambda v: v)
  fold = {"add": sum, "min": min, "max": max,
          "and": lambda vs: functools.reduce(operator.and_, vs),
          "or": lambda vs: functools.reduce(operator.or_, vs),
          "xor": lambda vs: functools.reduce(operator.xor, vs)}[op]

  def resolve(lanes, values):
    return [fold([sv(v) for v in values]) & FULL] * len(lanes)
  return sync_collective(k, ins.opcode, ins.src[2], lambda th: src(th) & FULL, resolve, put)


def match(k, ins):
  """``match.any.sync.type d, a, membermask`` / ``match.all.sync.type d{|p}, a,
  membermask`` (.b32, .b64), over the lanes that met (PTX ISA, match.sync: "broadcast
  and compare of operand a across all non-exited threads in membermask"): .any: d is
  the mask of those lanes whose ``a`` equals the lane's own; .all: d is the mask of
  those lanes if all their ``a`` are equal, else 0, and p whether they are."""
  mode = ins.mods[0] if ins.mods[1:2] == ["sync"] and len(ins.mods) == 3 else None
  if mode not in ("any", "all") or ins.mods[2] not in ("b32", "b64") or len(ins.ops) != 3 or \
     ins.src[1] is None or ins.ops[0][0] not in (("reg",) if mode == "any" else ("reg", "pair")):
    raise NotImplementedError(f"opcode {ins.opcode}")
  dest = ins.ops[0][1:] if ins.ops[0][0] == "pair" else (ins.ops[0],)
  puts = [program.setter(k, dest[0], 32)] + [program.setter(k, o, 1) for o in dest[1:]]
  a, vmask = ins.src[1], (1 << ins.bits) - 1

  def resolve(lanes, values):
    bits = [1 << (th.tid % 32) for th in lanes]
    if mode == "any":
      return [(sum(b for b, w in zip(bits, values) if w == v), 0) for v in values]
    same = int(len(set(values)) == 1)
    return [(sum(bits) if same else 0, same)] * len(lanes)

  return sync_collective(k, ins.opcode, ins.src[2], lambda th: a(th) & vmask, resolve,
                         _pair_finish(puts))


def warp_sync(k, mask):
  """``bar.warp.sync membermask``: the member lanes meet, and each one's earlier
  accesses happen before every member's later ones (PTX ISA, bar.warp.sync: it
  "guarantees memory ordering among threads participating in barrier")."""
  def resolve(lanes, values):
    joined = np.maximum.reduce([th.vc for th in lanes])
    for th in lanes:
      th.vc[:] = joined
      th.vc[th.slot] += 1
    return [None] * len(lanes)
  return sync_collective(k, "bar.warp.sync", mask, _NOTHING, resolve, None)


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/emu/test_opcode_table.py compiles every one).
OPCODES = {
    "shfl": Opcode(shfl, ("shfl.sync.idx.b32 %r1, %r2, 0, 31, -1",
                                 "shfl.sync.bfly.b32 %r1|%p1, %r2, 1, 31, -1"),
                   ("shfl.sync.up.b32 %r1, %r2, 1, 0, -1",)),
    "elect": Opcode(elect, ("elect.sync %r1|%p1, -1",)),
    "redux": Opcode(redux, ("redux.sync.add.u32 %r1, %r2, -1",
                            "redux.sync.min.s32 %r1, %r2, %r3",
                            "redux.sync.max.u32 %r1, %r2, 0xff",
                            "redux.sync.xor.b32 %r1, %r2, -1"),
                    ("redux.sync.min.f32 %f1, %f2, -1", "redux.sync.add.u64 %rd1, %rd2, -1",
                     "redux.sync.and.u32 %r1, %r2, -1", "redux.add.u32 %r1, %r2, -1")),
    "match": Opcode(match, ("match.any.sync.b32 %r1, %r2, -1",
                            "match.all.sync.b64 %r1|%p1, %rd2, %r3",
                            "match.all.sync.b32 %r1, %r2, -1"),
                    ("match.any.sync.b32 %r1|%p1, %r2, -1", "match.any.sync.u32 %r1, %r2, -1",
                     "match.sync.b32 %r1, %r2, -1")),
    "vote": Opcode(vote, ("vote.sync.all.pred %p1, %p2, -1", "vote.sync.any.pred %p1, %p2, -1",
                           "vote.sync.uni.pred %p1, %p2, -1",
                           "vote.sync.ballot.b32 %r1, %p2, -1",
                           "vote.sync.any.pred %p1, !%p2, -1"),
                   ("vote.all.pred %p1, %p2", "vote.sync.any.b32 %r1, %p2, -1")),
}
