"""Findings as data: one record (``Finding``) per broken rule, built where the rule is
broken and appended to the machine.

A rule's site builds a ``Finding`` (rule, message, and what it knows: the thread, the
two accesses of a race, what was missing) and either

  * ``report(k, finding)``: the run goes on, as the kernel would on hardware (a race,
    an early read, a write to data read through the non-coherent cache, a CTA that
    exits too early: the instruction still does what it says); or
  * ``raise Stop(finding)``: the run cannot go on meaningfully (a fault, an mbarrier
    used in a way whose result the ISA leaves undefined, a hang).  The scheduler
    catches it, and its finding becomes the run's last (``stop``).

A finding that does not know its instruction yet gets it from ``locate``, the one
function that attaches a location: ``lockstep`` after the instruction ran (``place``,
and for a ``Stop`` raised inside it), ``asyncops`` after an operation landed
(``place_landing``, and for a ``Stop`` raised while it landed: the issuing thread and
instruction).  A finding is kept unless one of the same rule was kept at the same
instruction, or with the same other access (its source line where the PTX has line
info, else its PTX line): a race in a loop over 128 threads is one finding, and so is
an unrolled loop's every load racing with one store; at most ``MAX_PER_RULE`` of a rule
are kept.  Past ``MAX_FINDINGS`` the schedule stops (``FindingLimit``, one of the
checker's own limits).  ``PtxKernel.launch`` returns the findings; ``check_ptx`` gives
each its schedule.
"""

from __future__ import annotations

import dataclasses
import re

from mosaic_async_store.check.memory import RULES, WARNINGS, Access, shown_source

__all__ = ["MAX_FINDINGS", "MAX_LISTED", "Finding", "elided", "detailed", "Stop",
           "FindingLimit", "fault", "report", "locate",
           "place", "place_landing", "stop", "flush"]

MAX_FINDINGS = 16   # distinct findings a schedule collects before it stops
MAX_PER_RULE = 4    # findings of one rule a schedule keeps (the first ones)


@dataclasses.dataclass(frozen=True)
class Finding:
  """One broken rule.

  Attributes:
    rule: a key of ``mosaic_async_store.check.RULES`` ("race", "hang", "exit", ...), or
      "fault" for a memory fault of the kernel (out of bounds, misaligned, a runaway loop).
    message: what happened, in the checker's words (once located: "at `instruction`
      (PTX line N): ..." or "... (issued at PTX line N: `instruction`)").
    cta, thread: the thread whose instruction broke it (None for a hang or a landing
      asynchronous store, whose message names the parties).
    ptx_line: that instruction's line in the PTX text (1-based), or None.
    schedule: the schedule's seed (``check_ptx``'s findings; None in a machine's own).
    source: that instruction's line in the user's source, "path/to/file.py:42", from
      the PTX's line info (``.file`` / ``.loc``: ``check`` compiles with it), or None.
    other_source: the same for the earlier access it conflicts with (a race, an early
      read: the message names that access), or None.
    access, other: a race's or an early read's two accesses as data
      (``memory.Access``: who, CTA, thread, kind, memory, PTX line, instruction,
      source): this one and the earlier one it conflicts with; None for other rules.
    missing: what would have ordered them (a race, an early read), or None.
    instruction: the text of the instruction at ``ptx_line``, or None.
    ctaid: the block of the grid whose thread broke it, (x, y, z) as ``%ctaid`` (None
      where ``cta`` is None); ``cta`` is its rank in its cluster (``%cluster_ctarank``).
    clusterid: the cluster of the grid it broke it in, (x, y, z) as ``%clusterid``
      (None in a finding no run kept).
  """

  rule: str
  message: str
  cta: int | None = None
  thread: int | None = None
  ptx_line: int | None = None
  schedule: int | None = None
  source: str | None = None
  other_source: str | None = None
  access: Access | None = None
  other: Access | None = None
  missing: str | None = None
  instruction: str | None = None
  ctaid: tuple[int, int, int] | None = None
  clusterid: tuple[int, int, int] | None = None

  def __post_init__(self):
    if self.rule not in RULES:
      raise KeyError(f"finding of an unknown rule {self.rule!r} (memory.RULES)")

  @property
  def severity(self) -> str:
    """"warning" for a rule of ``memory.WARNINGS`` (the ISA's letter broken where
    widely used code relies on it), else "error"."""
    return "warning" if self.rule in WARNINGS else "error"

  @property
  def explained(self) -> str:
    """The message with the rule and the rule's ISA source: "... [rule: source]"."""
    return f"{self.message} [{self.rule}: {RULES[self.rule]}]"

  def __str__(self) -> str:
    """One line: rule, thread (and its block outside the grid's first cluster), PTX and
    Python line, schedule, message (long operand lists elided: ``elided``); the text
    report's form is ``detailed``."""
    where = "" if self.cta is None else f"CTA {self.cta} thread {self.thread}, "
    if where and self.ctaid is not None and any(self.clusterid or ()):
      where = f"CTA {self.cta} thread {self.thread} of block {_dim3(self.ctaid)}, "
    at = [] if self.ptx_line is None else [f"PTX line {self.ptx_line}"]
    if self.source is not None:   # the user's line, next to the PTX line
      at.append(f"({shown_source(self.source)})" if at else shown_source(self.source))
    line = f"{' '.join(at)}, " if at else ""
    seed = "" if self.schedule is None else f"schedule {self.schedule}: "
    label = f"warning: {self.rule}" if self.rule in WARNINGS else self.rule
    return f"[{label}] {where}{line}{seed}{elided(self.message)}"


MAX_LISTED = 8   # operands of a brace list shown in full ({%f1, ..., %f64} is cut)
_BRACES = re.compile(r"\{([^{}]*)\}")


def elided(text: str) -> str:
  """``text`` with each brace list of more than ``MAX_LISTED`` operands (a WGMMA's 64
  accumulator registers) cut to its first three, the count and its last one."""
  def cut(m: re.Match) -> str:
    items = [item.strip() for item in m.group(1).split(",")]
    if len(items) <= MAX_LISTED:
      return m.group(0)
    return f"{{{', '.join(items[:3])}, ... {len(items) - 4} more ..., {items[-1]}}}"
  return _BRACES.sub(cut, text)


def _dim3(values) -> str:
  return f"({', '.join(map(str, values))})"


def _blocks(ctaids, clusters) -> str:
  """The blocks (and clusters) a finding was found in: "block (3, 0, 0) in cluster (1, 0,
  0)", or "in 16 blocks: (0, 0, 0), (1, 0, 0), ..., (15, 0, 0) of 8 cluster(s)"."""
  shown = [_dim3(c) for c in ctaids]
  if len(shown) == 1:
    return f"block {shown[0]}" + (f" in cluster {_dim3(clusters[0])}" if clusters else "")
  listed = shown if len(shown) <= 4 else [*shown[:2], "...", shown[-1]]
  return f"in {len(shown)} blocks: {', '.join(listed)} of {len(clusters)} cluster(s)"


def _place(source: str | None, ptx_line: int | None) -> str | None:
  """"file.py:42 (PTX line 80)", "file.py:42", "PTX line 80" or None."""
  at = shown_source(source) if source is not None else None
  if ptx_line is not None:
    return f"{at} (PTX line {ptx_line})" if at else f"PTX line {ptx_line}"
  return at


def detailed(f: Finding, ctaids=(), clusterids=()) -> list[str]:
  """``f`` as the text report shows it: a short first line (rule, the user's line, the
  PTX line, the thread, the blocks, the schedule), then indented lines: what happened,
  the instruction, the other access (its Python and PTX line), each brace list of many
  operands elided (``elided``).  ``ctaids`` / ``clusterids``: the blocks and clusters
  of the identical findings it stands for (empty: ``f``'s own, shown only outside
  cluster 0)."""
  label = f"warning: {f.rule}" if f.rule in WARNINGS else f.rule
  at = _place(f.source, f.ptx_line)
  who = [] if f.cta is None else [f"CTA {f.cta} thread {f.thread}"]
  clusters = sorted(set(clusterids)) or ([f.clusterid] if f.clusterid else [])
  ctaids = list(ctaids) or ([f.ctaid] if f.ctaid else [])
  if ctaids and (len(ctaids) > 1 or any(any(c) for c in clusters)):
    who.append(_blocks(ctaids, clusters))
  elif len(clusters) > 1:   # (a finding of no one CTA: a hang)
    who.append(f"in {len(clusters)} clusters")
  seed = [] if f.schedule is None else [f"schedule {f.schedule}"]
  first = f"[{label}] " + ", ".join([*([at] if at else []), *who, *seed])
  message, insn_line = f.message, None
  if f.instruction is not None:
    insn = f"`{f.instruction}`"
    prefix = f"at {insn} (PTX line {f.ptx_line}): "
    issued = f" (issued at PTX line {f.ptx_line}: {insn})"
    if message.endswith(issued):
      message, insn_line = message[:-len(issued)], f"issued by: {insn}"
    else:
      message, insn_line = message.removeprefix(prefix), f"at: {insn}"
  lines = [first, f"    {elided(message)}"]
  if insn_line is not None:
    lines.append(f"    {elided(insn_line)}")
  other = f.other
  other_source = f.other_source or (other.source if other is not None else None)
  if other is not None or other_source is not None:
    place = _place(other_source, other.ptx_line if other is not None else None)
    text = ", ".join(p for p in (other and f"{other.who}, {other.kind}",
                                 place and f"at {place}") if p)
    if other is not None and other.instruction:
      text += f": `{other.instruction}`"
    lines.append(f"    other access: {elided(text)}")
  hint = _pallas_hint(f)
  if hint is not None:
    lines.append(f"    hint: {hint}")
  return lines


def _pallas_hint(f: Finding) -> str | None:
  """What a Pallas kernel changes for ``f``, where its pattern is a Pallas pipeline's:
  a TMA copy into shared memory that a WGMMA still in flight reads (a pipeline slot
  refilled while the step's WGMMA, left in flight by ``wgmma_wait(1)``, reads it)."""
  other = f.other
  if (f.rule == "race" and other is not None and "wgmma.mma_async" in (other.who or "")
      and "cp.async.bulk" in (f.instruction or "")):
    return ("in a Pallas pipeline (emit_pipeline, a pallas_call grid) this is an operand "
            "slot refilled while a WGMMA still reads it: give the operand's BlockSpec "
            "delay_release=1 (release the slot a step later), or plgpu.wgmma_wait(0) "
            "before the step ends")
  return None


class Stop(Exception):
  """Ends a run: raised with the ``Finding`` of a rule whose breaking leaves nothing
  meaningful to run (a fault, an undefined mbarrier state, a hang).  ``finding`` is
  the record; the scheduler keeps it (``stop``)."""

  def __init__(self, finding: Finding):
    self.finding = finding
    super().__init__(finding.explained)


def fault(message: str, **where) -> Stop:
  """The kernel faults (rule "fault": an access out of bounds or misaligned, an address
  no CTA of the cluster has; where hardware would stop the kernel with an error): the
  ``Stop`` to raise."""
  return Stop(Finding("fault", message, **where))


class FindingLimit(Exception):
  """A schedule collected ``MAX_FINDINGS`` distinct findings: it stops there."""


def report(k, finding: Finding) -> None:
  """A broken rule the run goes on after: kept until its instruction places it."""
  k.unplaced.append(finding)


def locate(k, f: Finding, pc: int, th, *, issued: bool = False) -> Finding:
  """``f`` placed at instruction ``pc`` run by thread ``th`` (the one place a location
  is attached): its PTX line, text and source line, the thread (the lane a warp form's
  access names, else ``th``), and the message saying where ("at `...` (PTX line N):
  ...").  ``issued``: ``pc`` issued an asynchronous operation whose landing broke the
  rule; the finding names the issuing thread ("... (issued at PTX line N: `...`)").  A
  finding already placed (it has a PTX line) is returned as it is."""
  if f.ptx_line is not None:
    return f
  cta, thread = (th.cta, th.tid) if issued else _thread_of(f, th)
  text, line = k.program.texts[pc], k.program.lines[pc]
  message = (f"{f.message} (issued at PTX line {line}: `{text}`)" if issued else
             f"at `{text}` (PTX line {line}): {f.message}")
  return dataclasses.replace(f, message=message, cta=cta, thread=thread, ptx_line=line,
                             instruction=text, source=f.source or k.program.sources[pc])


def place(k, pc, th) -> None:
  """Gives each unplaced finding the instruction ``pc`` it broke its rule at and the
  thread (``th``, or the lane a warp form's access names), then keeps it."""
  for e in _take(k):
    _keep(k, locate(k, e, pc, th))


def place_landing(k, op) -> None:
  """As ``place``, for findings of an asynchronous operation's landing: they name the
  issuing thread and its instruction."""
  for e in _take(k):
    _keep(k, locate(k, e, op.insn, op.th, issued=True))


def stop(k, finding: Finding) -> None:
  """The finding that ended the run (raised): kept after the reported ones."""
  _take(k)   # (reported by the instruction that then raised: its own finding says where)
  _keep(k, finding, limit=False)


def flush(k) -> None:
  """Keeps what is still unplaced at the end of a run (no instruction ran since it was
  reported: it keeps the location it has)."""
  for e in _take(k):
    _keep(k, e, limit=False)


def _thread_of(e: Finding, th) -> tuple[int, int]:
  """The thread a finding at ``th``'s instruction names: the lane its access names
  (a warp form runs the lanes together), else ``th``."""
  who = e.access
  if who is not None and who.thread is not None:
    return who.cta, who.thread
  return th.cta, th.tid


def _take(k) -> list:
  taken, k.unplaced = k.unplaced, []
  return taken


def _in_grid(k, e: Finding) -> Finding:
  """``e`` with its block's ``%ctaid`` and its cluster's ``%clusterid``, read off the
  preset registers of the CTA it names (its cluster's first CTA for a hang)."""
  columns, row = k.registers.columns, (e.cta or 0) * k.block

  def dim(register):
    values = [columns.get(f"%{register}.{axis}") or () for axis in "xyz"]
    return tuple(int(v[row]) for v in values) if all(len(v) > row for v in values) else None
  return dataclasses.replace(e, ctaid=None if e.cta is None else dim("ctaid"),
                             clusterid=dim("clusterid"))


def _keep(k, e, *, limit=True) -> None:
  e = _in_grid(k, e)
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
