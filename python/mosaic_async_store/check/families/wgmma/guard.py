"""WGMMA's register guard: the instructions other than ``wgmma`` that name a register a
``wgmma.mma_async`` takes are checked, each time they run, against the registers the
warp's operations still have in flight (``wgmma-registers``; ``wgmma_layout.RULES``
quotes the ISA's sentence), and recorded as accessed since the warp's last
``wgmma.fence`` (for ``wgmma-fence``); ``aligned``: the rule ``wgmma-aligned`` on the
order of a warpgroup's wgmma instructions; ``uniform`` and ``operands_differ``: the rule
``wgmma-operands`` on the operands of one ``wgmma.mma_async`` across the warpgroup.  The
family itself: ``wgmma``.
"""

from __future__ import annotations

import re

from mosaic_async_store.check import findings
from mosaic_async_store.check.findings import Finding, Stop

__all__ = ["RegisterGuard", "aligned", "failure", "uniform", "operands_differ"]


def failure(rule, wg, w, text):
  """The finding ``rule`` of warp ``w`` of warpgroup ``wg`` (a ``wgmma.Warpgroup``)."""
  return Finding(rule, f"CTA {wg.cta} warpgroup {wg.index} warp {w}: {text}")


def aligned(k, wg, w, pc):
  """Warp ``w`` of ``wg`` (a ``wgmma.Warpgroup``) executes its next wgmma instruction,
  instruction ``pc``: the warpgroup's n-th one must be the same instruction in each of
  its warps (PTX ISA,
  wgmma.fence / mma_async / commit_group / wait_group: "The mandatory .aligned
  qualifier indicates that all threads in the warpgroup must execute the same
  wgmma.[...] instruction. In conditionally executed code, [it] should only be used if
  it is known that all threads in the warpgroup evaluate the condition identically,
  otherwise the behavior is undefined"), else ``wgmma-aligned``.  The numbers every
  warp has passed are dropped (a long loop keeps a short list)."""
  ws = wg.warps[w]
  j = ws.executed - wg.order_base
  if j == len(wg.order):
    wg.order.append(pc)
  elif wg.order[j] != pc:
    texts, lines, other = k.program.texts, k.program.lines, wg.order[j]
    raise Stop(failure("wgmma-aligned", wg, w, (
        f"its wgmma instruction number {ws.executed + 1} is `{texts[pc]}` (PTX line "
        f"{lines[pc]}), another warp's is `{texts[other]}` (PTX line {lines[other]}): "
        "all threads of the warpgroup must execute the same one")))
  ws.executed += 1
  passed = min(x.executed for x in wg.warps) - wg.order_base
  if passed >= 64:
    del wg.order[:passed]
    wg.order_base += passed


# The register and predicate operands of wgmma.mma_async that must be one value for the
# whole warpgroup (``Entry.operands``' first three; the rest are immediates of the one
# instruction, equal wherever the instruction is).
_SHARED_OPERANDS = ("a-desc", "b-desc", "scale-d")


def uniform(wg, w, operand, values):
  """The one value every lane of warp ``w`` gives for ``operand`` (a descriptor,
  scale-d); lanes that give different ones are ``wgmma-operands`` (undefined: the
  "contents of a matrix descriptor must be same across all the warps in the
  warpgroup", and the instruction is one operation of the whole warpgroup)."""
  distinct = sorted(set(int(v) for v in values))
  if len(distinct) != 1:
    raise Stop(failure("wgmma-operands", wg, w, (
        f"wgmma.mma_async's {operand} differs between the lanes of the warp "
        f"({_values(operand, distinct)}): every thread of the warpgroup must give the "
        f"same {operand}; compute it from warpgroup-uniform values")))
  return values[0]


def operands_differ(wg, w, j, first, mine, earlier):
  """The ``wgmma-operands`` finding of warp ``w``, whose operation ``j`` (the same
  instruction, in the same group) has operands ``mine`` where the warps ``earlier``,
  which issued it before, had ``first``."""
  name = next(n for n, a, b in zip(_SHARED_OPERANDS, first, mine) if a != b)
  i = _SHARED_OPERANDS.index(name)
  return failure("wgmma-operands", wg, w, (
      f"its wgmma.mma_async number {j + 1} has {name} {_values(name, [mine[i]])}, warps "
      f"{earlier} of the warpgroup gave {_values(name, [first[i]])}: every warp of the "
      f"warpgroup must give the same {name}; compute it from warpgroup-uniform values"))


def _values(operand, values):
  return ", ".join(f"{v:#x}" if operand.endswith("desc") else str(v) for v in values[:4]) \
      + (", ..." if len(values) > 4 else "")


class RegisterGuard:
  """Run once the kernel is compiled (``Program.finishers``): wraps every instruction
  other than ``wgmma`` that names a register some ``wgmma.mma_async`` takes
  (``registers``), so that each execution checks it against the warp's registers in
  flight (``wgmma-registers``) and records it as accessed since the last wgmma.fence."""

  def __init__(self, k):
    self.k, self.registers = k, set()

  def __call__(self, program):
    for i, text in enumerate(program.texts):
      named = self.registers.intersection(re.findall(r"%\w+", text))
      if named and not text.startswith("wgmma.") and program.code[i] is not None:
        program.code[i] = self._wrap(program.code[i], frozenset(named), i)

  def _wrap(self, fn, named, pc):
    k, guard = self.k, getattr(fn, "guard", None)

    def touch(th):
      if guard is not None and k.registers.get(guard[0], th) != guard[1]:
        return
      wg = k.wgmma.get((th.cta, th.tid // 128))
      if wg is None:
        return
      ws = wg.warps[th.tid // 32 % 4]
      if ws.touched is not None:
        ws.touched |= named
      hit = named.intersection(ws.inflight)
      if hit:
        findings.report(k, failure("wgmma-registers", wg, th.tid // 32 % 4,
                                 f"{min(hit)} is accessed while a wgmma.mma_async still has "
                                 "it in flight (no wgmma.wait_group covering that operation "
                                 "came before)"))

    def guarded(th):
      touch(th)
      return fn(th)
    inner = getattr(fn, "lanes", None)
    if inner is not None:
      def guarded_lanes(lanes):   # (a warp's state once, or each lane's guard; lanes
        warp = -1                 # of several warps where ``inner`` is ``wide``)
        if guard is None and lanes[0].tid >> 5 == lanes[-1].tid >> 5:
          lanes_of_warps = lanes[:1]   # (one warp, in lane order: its first lane)
        else:
          lanes_of_warps = lanes
        for th in lanes_of_warps:
          if guard is not None or th.tid >> 5 != warp:
            warp = th.tid >> 5
            touch(th)
            if k.unplaced:   # (the finding names a lane of the warp that broke the rule)
              findings.place(k, pc, th)
        return inner(lanes)
      guarded.lanes, guarded_lanes.wide = guarded_lanes, getattr(inner, "wide", False)
    return guarded
