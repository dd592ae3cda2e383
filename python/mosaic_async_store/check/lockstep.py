"""Warps as the unit of execution of the PTX checker: a piece of converged lanes runs
each instruction together (lockstep), splits where its lanes diverge and merges again
where their program counters meet.

``run``'s scheduling loop picks a runnable thread and asks ``piece`` for the runnable
lanes of its warp at the same instruction, then ``run_piece`` runs them until each
blocks, exits or yields.  Where the instruction is a lane's own computation
(``Program.wide``: arithmetic, moves, conversions, branches) the piece takes the
runnable lanes of every warp of the CTA there, and runs them together until an
instruction that is not (a memory access, a barrier, a warp collective): there one
warp goes on, the schedule's choice, and the others go back to the run queue, so
the schedule's choices stay where they are, at the synchronising instructions (how
the lanes' own computations interleave changes nothing another thread can see).
An instruction runs through its warp form (``program.Program.vcode``, what
``outcomes`` says it may return) when it has one,
else lane by lane through its function of the thread (``Program.code``).  Registers,
clocks and waits stay per lane (``machine.Thread``), so every rule is judged per lane:
lockstep is one interleaving a warp may run in (every lane's instruction i before any
lane's i + 1), not an assumption the verdicts rest on.
"""

from __future__ import annotations

from mosaic_async_store.check import exit_rule, findings, waits
from mosaic_async_store.check.budget import BudgetExceeded
from mosaic_async_store.check.findings import Stop
from mosaic_async_store.check.memory import CheckerError
from mosaic_async_store.check.outcomes import BLOCK, EXIT, FALLBACK, YIELD

__all__ = ["piece", "run_piece"]
LOOP_YIELD = 64   # a piece yields after this many backward jumps in a row


def piece(k, th):
  """The lanes that run with ``th``: the runnable threads of its warp at its program
  counter, in lane order (the scheduler takes them out of the run queue); of its
  whole CTA where that instruction is a lane's own computation (``Program.wide``)."""
  pc, first = th.pc, th.cta * k.block
  if k.program.wide[pc]:
    last = first + k.block
  else:
    first += th.tid & ~31
    last = min(first + 32, (th.cta + 1) * k.block)
  return [t for t in k.threads[first:last] if t.state == "run" and t.pc == pc]


def run_piece(k, lanes):
  """Runs ``lanes`` (threads of one CTA at one program counter, in lane order: of one
  warp, or of several where the instruction is ``Program.wide``) in lockstep until
  each blocks, exits or yields; returns the lanes that yielded (and those of the
  warps a piece of several leaves at an instruction that is not ``wide``:
  ``_one_warp``).

  Each instruction runs once for all the lanes of the piece: through its warp form
  (``Program.vcode``) where it has one, else lane by lane in lane order, each lane's
  outcome taken at once (a lane that blocks is waiting before the next lane runs, as
  if the lanes had run one after another).  Lanes whose next instructions differ
  (a branch some lanes take, a lane that blocks) split: the piece with the lowest
  program counter runs first and the others wait in ``pending`` until it reaches
  theirs, where they merge again (so an if / else reconverges after it, and a loop
  exit waits for the lanes still in the loop).  A piece yields after
  ``LOOP_YIELD`` backward jumps in a row (a loop may be a spin on a weak load,
  which only another thread can end: see ``run``'s doc)."""
  code, vcode, wide = k.program.code, k.program.vcode, k.program.wide
  pc, jumps, n, th = lanes[0].pc, 0, 0, lanes[0]
  pending, low, yielded = {}, None, []   # pc -> diverged lanes; min(pending)
  try:
    while True:
      if not wide[pc] and (lanes[0].tid ^ lanes[-1].tid) >= 32:   # (several warps)
        lanes = _one_warp(k, lanes, pc, yielded)
      n += len(lanes)   # (a local: added to k.executed once, at the end)
      k.step += 1
      vf, th = vcode[pc], lanes[0]   # (th: the lane an error names; lane by lane, each)
      queued = len(k.runnable)   # (lanes the instruction resumes are queued after these)
      r = vf(lanes) if vf is not None else FALLBACK
      if k.unplaced:   # (findings the run goes on after: placed at this instruction)
        findings.place(k, pc, th)
      if r is None:
        nxt = pc + 1
      elif type(r) is int:
        nxt = r
      elif r is YIELD:   # (a warp form's: every lane yields; the schedule goes on)
        for th in lanes:
          th.pc, th.poll_pc = pc + 1, pc
        yielded += lanes
        lanes = []
      else:
        if r is FALLBACK:   # lane by lane
          f, moved = code[pc], None
          for th in lanes:
            r = f(th)
            if r is not None:
              if moved is None:
                moved = {}
              moved[th] = r
              if r is BLOCK or r is EXIT:   # (at once: the next lane may release it)
                th.pc, th.state = pc, "block" if r is BLOCK else "done"
                if r is EXIT:
                  exit_rule.thread_exits(k, th)
                else:
                  waits.block(k, th)
            if k.unplaced:   # (findings the run goes on after: placed at this lane)
              findings.place(k, pc, th)
        else:   # a warp form's lanes that yield or block (it blocked them)
          moved = r
        if moved is None:
          nxt = pc + 1
        else:
          groups = {}
          for th in lanes:
            r = moved.get(th)
            if r is None or type(r) is int:
              groups.setdefault(pc + 1 if r is None else r, []).append(th)
            elif r is YIELD:   # done; the schedule lets other threads go first
              th.pc, th.poll_pc = pc + 1, pc   # (poll_pc: read only if it polled)
              yielded.append(th)
          if len(groups) == 1:
            (nxt, lanes), = groups.items()
          else:   # divergence: every group waits; the lowest runs first
            for at, group in groups.items():
              pending.setdefault(at, []).extend(group)
            if not groups and all(moved[t] is BLOCK and t.state == "run" for t in lanes):
              nxt = pc + 1   # (every lane blocked, and the last one's arrival resumed them
              lanes = _rejoin(k, [], nxt, queued, th)   # all: a warp collective's meeting)
            else:
              lanes = []
        if lanes and len(k.runnable) > queued:
          lanes = _rejoin(k, lanes, nxt, queued)   # warp-mates it resumed
      if lanes and nxt <= pc:   # a backward jump (a loop that never ends: the budget)
        jumps += 1
        if jumps == LOOP_YIELD:   # a loop iteration's start: poll-like
          for th in lanes:
            th.pc, th.polled, th.poll_pc = nxt, True, pc   # (pc: the branch)
          yielded += lanes
          lanes = []
      if lanes:
        pc = nxt
        if low is None or pc < low:
          continue
        pending.setdefault(pc, []).extend(lanes)   # a diverged piece is at or behind
      if not pending:
        return yielded
      pc = min(pending)
      lanes = pending.pop(pc)
      if len(lanes) > 1:
        lanes.sort(key=_tid)
      low = min(pending) if pending else None
  except Stop as e:  # say where, keep the rule
    if e.finding.ptx_line is not None:
      raise
    raise Stop(findings.locate(k, e.finding, pc, th)) from None
  except NotImplementedError as e:   # the checker cannot run it: not a verdict
    text, line = k.program.texts[pc], k.program.lines[pc]
    raise NotImplementedError(f"CTA {th.cta} thread {th.tid} at `{text}` (PTX line {line}): "
                              f"{e}") from e
  except (CheckerError, BudgetExceeded, MemoryError, findings.FindingLimit):
    raise
  except Exception as e:  # the checker's own failure: never a finding about the kernel
    text, line = k.program.texts[pc], k.program.lines[pc]
    raise CheckerError(f"internal error of the checker at `{text}` (PTX line {line}), "
                       f"CTA {th.cta} thread {th.tid}: {type(e).__name__}: {e} (please "
                       "report it, with the kernel)") from e
  finally:
    k.executed += n


def _tid(th):
  return th.tid


def _one_warp(k, lanes, pc, yielded):
  """The lanes of one warp of ``lanes`` (a piece of several warps, in lane order, at
  ``pc``, an instruction that is not a lane's own computation: a synchronising one,
  a warp collective), the schedule's choice; the others go back to the run queue
  (through ``yielded``) at ``pc``, where the schedule chooses who goes next, as it
  would have had they come there as pieces of one warp."""
  warps = sorted({th.tid >> 5 for th in lanes})
  chosen = warps[k.sched.pick_index(len(warps))]
  mine = []
  for th in lanes:
    if th.tid >> 5 == chosen:
      mine.append(th)
    else:
      th.pc = pc
      yielded.append(th)
  return mine


def _rejoin(k, lanes, pc, queued, like=None):
  """``lanes`` with the lanes of their warp (``like``'s, where ``lanes`` is empty) that the
  last instruction resumed at ``pc`` (``k.runnable[queued:]``; e.g. the lane whose
  arrival completes a ``bar.sync`` goes on while it resumes its warp-mates), taken out
  of the run queue; of every warp of their CTA where ``pc`` is ``Program.wide`` (the
  warps a barrier released run their own computations together, up to the next
  instruction that is not: ``_one_warp``)."""
  like = lanes[0] if like is None else like
  cta, warp = like.cta, like.tid >> 5
  if k.program.wide[pc]:
    back = [t for t in k.runnable[queued:] if t.pc == pc and t.cta == cta]
  else:
    back = [t for t in k.runnable[queued:]
            if t.pc == pc and t.cta == cta and t.tid >> 5 == warp]
  if not back:
    return lanes
  k.dequeue(back)
  return sorted(lanes + back, key=_tid)
