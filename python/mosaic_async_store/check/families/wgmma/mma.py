"""Family: WGMMA, the warpgroup's asynchronous matrix multiply-accumulate
(``wgmma.fence``, ``wgmma.mma_async``, ``wgmma.commit_group``, ``wgmma.wait_group``).

What it runs (the forms and layouts: ``wgmma_layout``; the ISA's sentences as recalled
there, ``wgmma_layout.RULES``):

  * every ``wgmma`` instruction is ``.sync.aligned``: the lanes of a warp meet at it
    (``warp.aligned_collective``; a lane elsewhere is ``aligned-divergence``).  The
    four warps of a warpgroup issue independently; "all threads in the warpgroup must
    execute the same" ``wgmma.fence`` / ``mma_async`` / ``commit_group`` /
    ``wait_group`` instruction (PTX ISA, each of the four), so the n-th wgmma
    instruction of each warp must be the same instruction (``wgmma_guard.aligned``:
    ``wgmma-aligned``); the n-th ``wgmma.mma_async`` of each warp is the warpgroup's
    n-th operation (``Entry``), in the same group (``wgmma-aligned``; a warpgroup
    missing warps, in a block that is not a multiple of 128 threads, is too), with the
    same a-desc, b-desc and scale-d in every thread (``wgmma-operands``: the ISA's
    "The contents of a matrix descriptor must be same across all the warps in the
    warpgroup"; an undefined operation, so the run stops there);
  * an operation executes once its fourth warp has issued it (``wgmma_exec.execute``):
    A (from shared memory through its descriptor, or from the four warps' registers) and
    B are read through the asynchronous proxy with the clock of all 128 issuing threads
    (a thread's unfenced generic write is ``proxy-fence``; an unordered access,
    ``race``), and D = (scale-a A) (scale-b B) + (scale-d ? C : 0) is formed in float64
    (each product exact; int64 for the integer types), rounded to the accumulator's
    type (the ISA gives no accumulation order or precision, so a GPU's last bits may
    differ);
  * C is each lane's accumulator registers at its issue, or, where an earlier
    operation of the same shape still has them in flight, that operation's result
    (the ISA's default ordering of accumulator accesses across same-shape operations);
  * ``wgmma.commit_group`` closes the warp's open group; ``wgmma.wait_group N`` blocks
    (``WgmmaWait``) until every group but the N newest has executed, then writes their
    results into the lanes' registers, which are in flight until then: any other
    instruction that reads or writes an accumulator or A-fragment register in flight
    is ``wgmma-registers`` (a register guard, ``wgmma_guard.RegisterGuard``, wraps the
    instructions that name them), and one accessed since the warp's last
    ``wgmma.fence`` (or with no fence yet) when a ``wgmma.mma_async`` takes it is
    ``wgmma-fence``;
  * the operations' shared-memory reads are known by a clock slot of the warpgroup
    (``wgmma_exec.WGMMA_READS``) at their group's number: a thread whose ``wait_group`` covers the
    group knows them (a buffer freed for a TMA load before then is a race).
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import findings, program, warp, waits
from mosaic_async_store.check.families.wgmma import execute as wgmma_exec
from mosaic_async_store.check.families.wgmma import layout
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.ops import ints_array
from mosaic_async_store.check.outcomes import BLOCK, FALLBACK, YIELD
from mosaic_async_store.check.registers import read, write
from mosaic_async_store.check.waits import Wait
from mosaic_async_store.check.families.wgmma.guard import (RegisterGuard, aligned,
                                                           failure as _fail,
                                                           operands_differ, uniform)

__all__ = ["OPCODES", "Warpgroup", "Entry", "WgmmaWait"]

class _Warp:
  """One warp's WGMMA state: ``issued`` (its wgmma.mma_async so far), ``committed``
  (its groups), ``written`` (operations whose results reached its registers),
  ``inflight`` (register -> (operation index, "d" or "a")), ``touched`` (registers
  that WGMMA operations take, accessed since its last wgmma.fence; None: no fence yet),
  ``executed`` (its wgmma instructions of any kind so far: ``wgmma_guard.aligned``)."""

  __slots__ = ("issued", "committed", "written", "inflight", "touched", "executed")

  def __init__(self):
    self.issued = self.committed = self.written = self.executed = 0
    self.inflight, self.touched = {}, None


class Entry:
  """The warpgroup's n-th wgmma.mma_async: ``pc``, ``form`` (``wgmma_layout.MmaForm``),
  ``group``, ``operands`` (the descriptors and scale operands), per warp ``inputs``
  (accumulator registers, their sources, A-fragment values) and ``vcs`` (its lanes'
  clocks joined), until it executes; then ``out`` (per warp: register -> lane values),
  until no warp and no later operation can take it (``Warpgroup.forget``): an
  entry keeps only what names it, so a long kernel's state stays small."""

  __slots__ = ("pc", "form", "group", "operands", "inputs", "vcs", "out")

  def __init__(self, pc, form, group, operands):
    self.pc, self.form, self.group, self.operands = pc, form, group, operands
    self.inputs, self.vcs, self.out = [None] * 4, [None] * 4, None


class Warpgroup:
  """The WGMMA state of warpgroup ``index`` of CTA ``cta``: its ``warps``, its operations
  (``entries``), how many have executed (``done``), how many have given up their
  results (``forgotten``), its clock slot (``slot``), and the instructions (indices) of
  its wgmma instructions in order from number ``order_base`` on (``order``:
  ``wgmma_guard.aligned``)."""

  __slots__ = ("cta", "index", "warps", "entries", "done", "forgotten", "slot", "order",
               "order_base")

  def __init__(self, cta, index):
    self.cta, self.index, self.warps = cta, index, [_Warp() for _ in range(4)]
    self.entries, self.done, self.forgotten, self.slot = [], 0, 0, None
    self.order, self.order_base = [], 0

  def forget(self):
    """Drops the results of the operations no one can take any more: every warp wrote
    them back, and no operation waiting to execute chains from them (a warp's later
    operations chain only from those it still has in flight, all past what it wrote
    back)."""
    keep = min(min(ws.written for ws in self.warps), self.done)
    for entry in self.entries[self.done:]:
      for held in filter(None, entry.inputs):
        keep = min([keep, *(src for src in held[1] if src is not None)])
    for entry in self.entries[self.forgotten:keep]:
      entry.out = None
    self.forgotten = max(self.forgotten, keep)

  def describe_access(self, slot, clk):
    """(who, what is missing) for a race with the reads of group ``clk``."""
    return (f"the wgmma.mma_async operations of group {clk} of CTA {self.cta} warpgroup "
            f"{self.index} (reads)", "a wgmma.wait_group by that warpgroup that covers the "
            "group, ordered before this access")

  def last_in(self, w, limit):
    """The index of warp ``w``'s last operation in a group up to ``limit`` (-1: none);
    its operations' groups never decrease, so from its newest back."""
    j = self.warps[w].issued - 1
    while j >= 0 and self.entries[j].group > limit:
      j -= 1
    return j

  def executed_through(self, w, limit):
    """The index of warp ``w``'s last operation in a group up to ``limit`` when every
    operation up to it has executed (``wgmma.wait_group``'s wait is over), else None."""
    last = self.last_in(w, limit)
    return last if last < self.done else None


def _state(k, th):
  """(warpgroup, warp index in it) of ``th``."""
  key = (th.cta, th.tid // 128)
  wg = k.wgmma.get(key)
  if wg is None:
    if k.block < 128 * (key[1] + 1):   # (a warpgroup missing warps cannot execute it all)
      raise Stop(Finding("wgmma-aligned", (
          f"CTA {th.cta} warpgroup {key[1]} warp {th.tid // 32 % 4} executes a wgmma "
          f"instruction in a warpgroup of {(k.block - 128 * key[1] + 31) // 32} warps (a "
          f"block of {k.block} threads): all threads of a warpgroup, four whole warps, must "
          "execute it; launch a multiple of 128 threads or keep wgmma to whole warpgroups")))
    wg = k.wgmma[key] = Warpgroup(*key)
  return wg, th.tid // 32 % 4


# -- wgmma.fence, commit_group --------------------------------------------------------


def _fence(k, ins):
  if ins.mods != ["fence", "sync", "aligned"] or ins.ops:
    raise NotImplementedError(f"opcode {ins.opcode}")
  pc = len(k.program.code)

  def resolve(lanes):
    wg, w = _state(k, lanes[0])
    aligned(k, wg, w, pc)
    wg.warps[w].touched = set()
  return warp.aligned_collective(k, resolve, goes_on=True)


def _commit(k, ins):
  if ins.mods != ["commit_group", "sync", "aligned"] or ins.ops:
    raise NotImplementedError(f"opcode {ins.opcode}")
  pc = len(k.program.code)

  def resolve(lanes):
    wg, w = _state(k, lanes[0])
    aligned(k, wg, w, pc)
    wg.warps[w].committed += 1
  return warp.aligned_collective(k, resolve, goes_on=True)


# -- wgmma.mma_async ------------------------------------------------------------------


def _names(op, count, what):
  if op[0] != "vec" or len(op[1]) != count or any(o[0] != "reg" for o in op[1]):
    raise NotImplementedError(f"({what}: a vector of {count} registers)")
  return [o[1] for o in op[1]]


def _mma(k, ins):
  form = layout.parse_form(ins.mods, ins.ops)
  pc = len(k.program.code)
  d_names = _names(ins.ops[0], form.d_count, "the accumulator")
  a_names = _names(ins.ops[1], 4, "A's fragment") if form.a_regs else []
  first_imm = 3   # d, a-desc or A's fragment, b-desc, scale-d, immediates
  desc_a = None if form.a_regs else ins.src[1]
  desc_b = ins.src[2]
  scale_d = ins.src[first_imm]
  imms = ins.ops[first_imm + 1:]
  if any(o[0] != "imm" for o in imms):
    raise NotImplementedError("(imm-scale-a, imm-scale-b and the transposes: immediates)")
  imms = [o[1] for o in imms]
  scale_a, scale_b = (imms[0], imms[1]) if form.imms else (1, 1)
  trans = imms[2:] if form.transposable else []
  trans_a, trans_b = (0, *trans) if form.a_regs and trans else (tuple(trans) or (0, 0))
  if {scale_a, scale_b} - {1, -1} or {trans_a, trans_b} - {0, 1}:
    raise NotImplementedError("(imm-scale-a / imm-scale-b are 1 or -1, the transposes 0 or 1)")
  d_cols, a_cols = [k.registers.column(n) for n in d_names], \
      [k.registers.column(n) for n in a_names]
  guard = k.program.finishers.setdefault("wgmma", RegisterGuard(k))
  guard.registers.update(d_names, a_names)
  shape = form.shape
  desc_a_lanes = program.lanes_getter(desc_a) if desc_a else None
  desc_b_lanes, scale_d_lanes = program.lanes_getter(desc_b), program.lanes_getter(scale_d)

  def resolve(lanes):
    wg, w = _state(k, lanes[0])
    aligned(k, wg, w, pc)
    ws = wg.warps[w]
    operands = (uniform(wg, w, "a-desc", desc_a_lanes(lanes)) if desc_a else None,
                uniform(wg, w, "b-desc", desc_b_lanes(lanes)),
                uniform(wg, w, "scale-d", [int(v) & 1 for v in scale_d_lanes(lanes)]),
                scale_a, scale_b, trans_a, trans_b)
    if ws.touched is None:
      findings.report(k, _fail("wgmma-fence", wg, w, "wgmma.mma_async with no wgmma.fence "
                               "before it (the warpgroup's first one needs one)"))
    j, group = ws.issued, ws.committed + 1
    sources = _sources(wg, ws, d_names, shape)
    _check_registers(k, wg, w, ws, d_names, sources, a_names)
    # (C's registers are read only where D takes them: scale-d 1, not a chain's result)
    c = _registers(lanes, d_cols) if operands[2] and None in sources else None
    a = _registers(lanes, a_cols) if a_names else None
    if j == len(wg.entries):
      wg.entries.append(Entry(pc, form, group, operands))
    entry = wg.entries[j]
    if entry.pc != pc or entry.group != group or entry.operands != operands:
      if entry.pc == pc and entry.group == group:
        raise Stop(operands_differ(wg, w, j, entry.operands, operands,
                                   [x for x, held in enumerate(entry.inputs) if held]))
      what = "instruction" if entry.pc != pc else "group"
      raise Stop(_fail("wgmma-aligned", wg, w, f"its wgmma.mma_async number {j + 1} "
                       f"differs from another warp's in its {what}: all threads of the "
                       "warpgroup must execute the same one"))
    entry.inputs[w] = (d_names, sources, c, a)
    entry.vcs[w] = k.lane_clocks(lanes).max(axis=0)
    ws.issued += 1
    ws.inflight.update(dict.fromkeys(d_names, (j, "d")))
    ws.inflight.update(dict.fromkeys(a_names, (j, "a")))
    k.tick(k.lane_rows(lanes))   # (its later accesses are not before the operation's)
    if all(x is not None for x in entry.inputs):
      wgmma_exec.execute(k, wg, j)
      k.dirty = True
  return warp.aligned_collective(k, resolve)


def _sources(wg, ws, d_names, shape):
  """Per accumulator register, the operation whose result it takes as C: the one that
  has it in flight where that is a same-shape accumulator chain (ordered by default),
  else None (the register's value at issue)."""
  held = list(map(ws.inflight.get, d_names))
  first = held[0]
  if held.count(first) == len(held):   # (one operation's registers, or none in flight:
    chained = first is not None and first[1] == "d" and \
        wg.entries[first[0]].form.shape == shape   # the common case, at once)
    return [first[0] if chained else None] * len(held)
  chains = {}   # entry -> whether it is of this shape
  for h in held:
    if h is not None and h[1] == "d" and h[0] not in chains:
      chains[h[0]] = wg.entries[h[0]].form.shape == shape
  return [h[0] if h is not None and h[1] == "d" and chains[h[0]] else None for h in held]


def _registers(lanes, columns):
  """The 32-bit values of the registers of ``columns`` (``registers.Registers``) in
  each of ``lanes``: uint32 [lanes, registers] (a register never written reads as
  ``ops.UNDEFINED``'s low bits)."""
  values = ints_array([read(col, lanes) for col in columns])   # [registers, lanes]
  return (values.T & 0xFFFFFFFF).astype(np.uint32, order="C")


def _check_registers(k, wg, w, ws, d_names, sources, a_names):
  """``wgmma-registers`` for a register in flight that is not a same-shape accumulator
  chain; ``wgmma-fence`` for one accessed since the warp's last wgmma.fence."""
  if sources.count(None) == 0 and not a_names:   # (every register a chain's: none taken
    return                                       # at issue)
  for name, src in zip(d_names + a_names, sources + [None] * len(a_names)):
    if src is None and name in ws.inflight:
      findings.report(k, _fail("wgmma-registers", wg, w, f"wgmma.mma_async takes {name}, "
                               "which an earlier wgmma.mma_async (of another shape, or as "
                               "A's fragment) still has in flight: a wgmma.wait_group "
                               "covering it must come first"))
      return
    if src is None and ws.touched and name in ws.touched:
      findings.report(k, _fail("wgmma-fence", wg, w, f"{name} was accessed since the warp's "
                               "last wgmma.fence and a wgmma.mma_async takes it: a "
                               "wgmma.fence must come between"))
      return


# -- wgmma.wait_group -----------------------------------------------------------------


class WgmmaWait(Wait):
  """``wgmma.wait_group N`` blocked: the warp's lanes meet (``.aligned``) and go on
  once every group up to ``limit`` has executed."""

  __slots__ = ("limit", "pc")
  grouped = True

  def __init__(self, limit, pc):
    self.limit, self.pc = limit, pc

  def on_block(self, k, th) -> None:
    k.dirty = True

  @classmethod
  def resolve_group(cls, k, threads) -> bool:
    warps, woke = {}, False
    for th in threads:
      warps.setdefault((th.cta, th.tid // 32), []).append(th)
    for (cta, w), lanes in warps.items():
      if len(lanes) != len(warp.live_lanes(k, cta, w, warp.FULL)):
        continue
      first = lanes[0].wait
      if len(lanes) != 32 or any(th.wait.pc != first.pc for th in lanes):
        text, line = k.program.texts[first.pc], k.program.lines[first.pc]
        raise Stop(Finding("aligned-divergence", f"CTA {cta} warp {w} meets at `{text}` "
                            f"(PTX line {line}) with {len(lanes)} lanes: an .aligned "
                            "instruction needs all 32", cta=cta, thread=lanes[0].tid,
                            ptx_line=line, instruction=text))
      wg, wi = _state(k, lanes[0])
      last = wg.executed_through(wi, first.limit)
      if last is None:
        continue
      aligned(k, wg, wi, first.pc)
      _write_back(k, wg, wi, last, lanes, first.limit)
      for th in lanes:
        waits.resume(k, th)
      woke = True
    return woke

  def describe(self, k, th) -> tuple[int, str]:
    wg, w = _state(k, th)
    missing = [i for i, x in enumerate(wg.entries[wg.done].inputs) if x is None] \
        if wg.done < len(wg.entries) else []
    return th.pc, (f"wgmma groups up to {self.limit} of CTA {th.cta} warpgroup {wg.index} "
                   f"(warps {missing} of the warpgroup have not issued its wgmma.mma_async "
                   f"number {wg.done + 1})")


def _write_back(k, wg, w, last, lanes, limit):
  """The results of warp ``w``'s operations up to ``last`` reach its lanes' registers;
  those registers are no longer in flight; the lanes know the groups' reads."""
  ws = wg.warps[w]
  outs = [wg.entries[j].out[w] for j in range(ws.written, last + 1)]
  if len(outs) == 1:   # (one operation's: its array [lanes, registers])
    names, columns = outs[0].names, outs[0].bits.T.tolist()
  else:   # register -> its lanes' values (a later operation's replace an earlier's)
    results = {}
    for out in outs:
      results.update(out.items())
    names, columns = list(results), [np.asarray(v).tolist() for v in results.values()]
  regs = k.registers
  for name, values in zip(names, columns):
    write(regs, regs.column(name), lanes, values)
  ws.written = max(ws.written, last + 1)
  wg.forget()
  ws.inflight = {n: held for n, held in ws.inflight.items() if held[0] > last}
  if wg.slot is not None:
    for th in lanes:
      th.vc[wg.slot] = max(int(th.vc[wg.slot]), limit)


def _wait(k, ins):
  if ins.mods != ["wait_group", "sync", "aligned"] or len(ins.ops) != 1 or \
     ins.ops[0][0] != "imm":
    raise NotImplementedError(f"opcode {ins.opcode} (wgmma.wait_group.sync.aligned N)")
  keep, pc = ins.ops[0][1], len(k.program.code)

  def wait(th):
    wg, w = _state(k, th)
    th.wait = WgmmaWait(wg.warps[w].committed - keep, pc)
    return BLOCK

  def wait_lanes(lanes):   # the whole warp, its groups executed: on at once
    if len(lanes) != 32:
      return FALLBACK
    wg, w = _state(k, lanes[0])
    limit = wg.warps[w].committed - keep
    last = wg.executed_through(w, limit)
    if last is None:
      return FALLBACK
    aligned(k, wg, w, pc)
    _write_back(k, wg, w, last, lanes, limit)
    return YIELD
  wait.lanes = wait_lanes
  return wait


OPCODES = {
    "wgmma": Opcode(
        lambda k, ins: {"fence": _fence, "commit_group": _commit, "wait_group": _wait,
                        "mma_async": _mma}.get(ins.mods[0] if ins.mods else "",
                                               _refuse)(k, ins),
        ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
         "wgmma.wait_group.sync.aligned 1",
         "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%r1, %r2, %r3, %r4}, %rd1, "
         "%rd2, %p1, 1, 1, 0, 1",
         "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r1, %r2, %r3, %r4}, "
         "{%r5, %r6, %r7, %r8}, %rd2, %p1, 1, -1, 1",
         "wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.u8 {%r1, %r2, %r3, %r4}, %rd1, %rd2, "
         "%p1"),
        ("wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16 {%r1, %r2, %r3, %r4}, %rd1, "
         "%rd2, %r5, 0, %p1, 1, 1, 0, 1",
         "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.bf16 {%r1, %r2, %r3, %r4}, %rd1, "
         "%rd2, %p1, 1, 1, 0, 1",
         "wgmma.wait_group.sync.aligned %r1", "wgmma.fence.aligned")),
}


def _refuse(k, ins):
  raise NotImplementedError(f"opcode {ins.opcode}")
