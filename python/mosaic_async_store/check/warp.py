"""Warp collectives' meeting in the PTX checker: the lanes of a ``.sync`` collective
(``collectives``: ``shfl.sync``, ``vote.sync``, ``elect.sync``, ``redux.sync``,
``match.sync``, ``bar.warp.sync``) and of the ``.sync.aligned`` matrix collectives
(``ldmatrix`` / ``stmatrix``, whose data movement is access.py's; ``wgmma``) meet here.

What the ISA says (PTX ISA, shfl.sync / vote.sync / elect.sync / redux.sync /
match.sync / bar.warp.sync), and how the meeting runs it:
  * a ``.sync`` collective "causes executing thread to wait until all non-exited
    threads corresponding to membermask have executed [it] with the same qualifiers
    and same membermask value before resuming execution": lanes meet by (opcode
    with its qualifiers, membermask), wherever they execute it (sm_70 and newer: two
    call sites of one warp meet), and exited lanes (or lanes a partial last warp does
    not have) are not waited for;
  * "the behavior ... is undefined if the executing thread is not in the
    membermask": rule ``collective-mask``;
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

from mosaic_async_store.check import program, waits
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.outcomes import BLOCK, FALLBACK, YIELD
from mosaic_async_store.check.waits import Wait

__all__ = ["Meeting", "meet", "warp_lanes", "live_lanes", "sync_collective",
           "aligned_collective", "FULL"]

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
      raise Stop(Finding("collective-mask", f"lane {th.tid % 32} executes {opcode} with "
                          f"membermask {mask:#010x}, which does not name it"))
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
        raise Stop(Finding("aligned-divergence", f"CTA {cta} warp {w} meets at `{text}` "
                            f"(PTX line {line}) with {len(group)} lanes: an .aligned "
                            "instruction needs all 32", cta=cta, thread=group[0].tid,
                            ptx_line=line, instruction=text))
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
    raise Stop(Finding("aligned-divergence", f"CTA {cta} warp {w}: lanes wait at "
                        f"`{texts[a]}` (PTX line {lines[a]}) and at `{texts[b]}` "
                        f"(PTX line {lines[b]}); an .aligned instruction must be executed "
                        "by all threads of the warp together", cta=cta, ptx_line=lines[b],
                        instruction=texts[b]))
