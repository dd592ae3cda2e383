"""Findings as data: where a rule is broken, the finding is appended to the machine.

A rule's site makes a ``memory.ProtocolError`` (the finding's data: rule, message, the
two accesses of a race...) and either

  * ``report(k, finding)``: the run goes on, as the kernel would on hardware (a race,
    an early read, a write to data read through the non-coherent cache, a CTA that
    exits too early: the instruction still does what it says); or
  * raises it: the run cannot go on meaningfully (a fault, an mbarrier used in a way
    whose result the ISA leaves undefined, a hang).  The scheduler catches it, and it
    becomes the schedule's last finding (``stop``).

A reported finding does not know its instruction yet: ``lockstep`` places it after the
instruction ran (``place``: the PTX line, its text, the thread: the lane the access
names for a warp form), and ``asyncops`` after an operation landed (``place_landing``:
the issuing thread and instruction).  A finding is kept unless one of the same rule was
kept at the same instruction, or with the same other access (its source line where the
PTX has line info, else its PTX line): a race in a loop over 128 threads is one finding,
and so is an unrolled loop's every load racing with one store; at most
``MAX_PER_RULE`` of a rule are kept.  Past ``MAX_FINDINGS`` the schedule stops
(``FindingLimit``, one of the checker's own limits).
"""

from __future__ import annotations

from mosaic_async_store.check.memory import ProtocolError

__all__ = ["MAX_FINDINGS", "FindingLimit", "report", "place", "place_landing", "stop", "flush"]

MAX_FINDINGS = 16   # distinct findings a schedule collects before it stops
MAX_PER_RULE = 4    # findings of one rule a schedule keeps (the first ones)


class FindingLimit(Exception):
  """A schedule collected ``MAX_FINDINGS`` distinct findings: it stops there."""


def report(k, finding: ProtocolError) -> None:
  """A broken rule the run goes on after: kept until its instruction places it."""
  k.unplaced.append(finding)


def place(k, pc, th) -> None:
  """Gives each unplaced finding the instruction ``pc`` it broke its rule at and the
  thread (``th``, or the lane a warp form's access names), then keeps it."""
  text, line = k.program.texts[pc], k.program.lines[pc]
  for e in _take(k):
    if e.ptx_line is None:
      who = e.access if e.access is not None and e.access.thread is not None else None
      cta, tid = (who.cta, who.thread) if who is not None else (th.cta, th.tid)
      e = _placed(e, f"at `{text}` (PTX line {line}): {e.detail}", cta=cta, thread=tid,
                  ptx_line=line, instruction=text, source=k.program.sources[pc])
    _keep(k, e)


def place_landing(k, op) -> None:
  """As ``place``, for findings of an asynchronous operation's landing: they name the
  issuing thread and its instruction."""
  line, text = k.program.lines[op.insn], k.program.texts[op.insn]
  for e in _take(k):
    _keep(k, _placed(e, f"{e.detail} (issued at PTX line {line}: `{text}`)",
                     cta=op.th.cta, thread=op.th.tid, ptx_line=line, instruction=text,
                     source=k.program.sources[op.insn]))


def stop(k, finding: ProtocolError) -> None:
  """The finding that ended the run (raised): kept after the reported ones."""
  _take(k)   # (reported by the instruction that then raised: its own finding says where)
  _keep(k, finding, limit=False)


def flush(k) -> None:
  """Keeps what is still unplaced at the end of a run (no instruction ran since it was
  reported: it keeps the location it has)."""
  for e in _take(k):
    _keep(k, e, limit=False)


def _take(k) -> list:
  taken, k.unplaced = k.unplaced, []
  return taken


def _placed(e, detail, *, source, **where) -> ProtocolError:
  placed = ProtocolError(e.rule, detail, **where, source=e.source or source, **e.data())
  placed.__cause__ = e
  return placed


def _keep(k, e, *, limit=True) -> None:
  other = e.other
  keys = {(e.rule, "at", e.source or e.ptx_line)}
  if other is not None:
    keys.add((e.rule, "other", other.source or other.ptx_line))
  if keys & k.finding_keys or \
     sum(f.rule == e.rule for f in k.findings) >= MAX_PER_RULE:
    return
  k.finding_keys |= keys
  k.findings.append(e)
  if limit and len(k.findings) >= MAX_FINDINGS:
    raise FindingLimit(f"{MAX_FINDINGS} distinct findings")
