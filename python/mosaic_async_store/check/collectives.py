"""Warp collectives of the PTX checker (a family: ``OPCODES``): ``shfl.sync``,
``vote.sync``, ``elect.sync``, ``redux.sync``, ``match.sync`` and ``bar.warp.sync``; their
lanes meet through ``warp.sync_collective`` (the meeting's rules: warp.py's doc).

What the ISA says of their results (PTX ISA, shfl.sync / vote.sync / elect.sync /
redux.sync / match.sync / bar.warp.sync), and how it is run:
  * shfl.sync: "results are undefined if a thread sources a register from an
    inactive thread or a thread that is not in membermask": that lane receives
    ``Undefined``: computing with it is allowed, a use that needs its bits is the
    finding ``undefined-value``;
  * vote.sync votes over the lanes that met (ballot: bit i is lane i's predicate);
  * elect.sync elects one leader among the lanes that met; which one is the
    hardware's choice, so the schedule chooses (``schedule.Schedule.pick_leader``:
    the lowest lane in schedule 0, the highest in schedule 1, a seeded one else);
  * bar.warp.sync: the member lanes' earlier accesses happen before every member's
    later ones.
"""

from __future__ import annotations

import functools
import operator

import numpy as np

from mosaic_async_store.check import program
from mosaic_async_store.check.family import Family
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.undefined import Undefined
from mosaic_async_store.check.warp import FULL, sync_collective

__all__ = ["shfl", "vote", "elect", "redux", "match", "warp_sync", "OPCODES", "FAMILY"]


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
# statements it refuses; test/checker/test_opcode_table.py compiles every one).
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

FAMILY = Family("collectives", OPCODES)
