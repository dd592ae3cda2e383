"""Warps at the CTA barriers of the PTX checker: what the named CTA barriers
(``barriers``), the cluster barrier (``cluster_barrier``) and the pairings of warps a
launch explores (``pairings``) share.

The PTX ISA counts barrier arrivals by warp ("barriers are executed on a per-warp
basis").  Here: the warp size (``WARP``), the number of a warp's lanes that have not
exited (``warp_live``), the number of warps that complete a named barrier
(``named_need``), an instruction as a message names it (``where``), and the wait of a
lane at a named barrier (``NamedWait``).  ``barriers`` uses all of them,
``cluster_barrier`` ``WARP``, ``warp_live`` and ``where``, ``pairings`` ``WARP``,
``warp_live`` and ``NamedWait``.  They live here, below the three, so that no two of
them import each other: ``barriers`` imports ``cluster_barrier`` and ``pairings``, and
neither of those imports ``barriers`` (test/checker/test_check_imports.py fails on any
cycle of imports among the checker's modules).

These are functions of the machine ``k`` (``machine.Machine``) and change nothing
in it.  They read ``k.warp_alive`` / ``k.warps_per_cta`` (each warp's non-exited
lanes), ``k.block`` / ``k.alive`` (the threads of a CTA and its non-exited ones),
``k.named`` / ``k.warp_arrivals`` (the named barriers' current instances and the
warps arriving on them, kept by ``barriers``) and ``k.program`` (the instructions'
PTX lines and texts).
"""

from __future__ import annotations

from mosaic_async_store.check.waits import Wait

__all__ = ["WARP", "warp_live", "where", "named_need", "NamedWait"]

# The threads of a warp; a warp arriving on a named barrier counts as this many
# threads, a short last warp too.
WARP = 32


def warp_live(k, cta, w) -> int:
  """The number of non-exited lanes of warp ``w`` of CTA ``cta`` in the machine ``k``:
  at most ``WARP``, fewer in a short last warp or once lanes exited, 0 when all have."""
  return k.warp_alive[cta * k.warps_per_cta + w]


def where(k, pc) -> str:
  """Instruction ``pc`` of the machine ``k``'s program, as a message names it: its PTX
  line and its text, "PTX line <n> (`<text>`)"."""
  return f"PTX line {k.program.lines[pc]} (`{k.program.texts[pc]}`)"


def named_need(k, cta, count) -> int:
  """The number of warps whose arrivals complete a named barrier of CTA ``cta`` in the
  machine ``k``: ``count`` / ``WARP`` for a thread count ``count``, or, when ``count``
  is None (the barrier waits for the whole CTA), every warp of the CTA that has a
  non-exited thread."""
  if count is not None:
    return count // WARP
  warps = -(-k.block // WARP)
  if k.alive[cta] == k.block:
    return warps
  return sum(warp_live(k, cta, w) > 0 for w in range(warps))


class NamedWait(Wait):
  """A lane at a named CTA barrier: ``key`` is (CTA, id, warp) while it waits for its
  warp-mates to arrive, (CTA, id) once its warp arrived (``.sync``), (CTA, id, warp,
  "held") while ``pairings`` holds its warp's arrival back.  The arrival that
  completes the barrier resumes it (``barriers``): never ready by itself."""

  __slots__ = ("key",)

  def __init__(self, key):
    self.key = key

  def describe(self, k, th) -> tuple[int, str]:
    return th.pc, _named_state(k, self.key)


def _named_state(k, key) -> str:
  """A waiting thread's barrier, for a hang report: ``key`` (CTA, id) after its
  warp arrived, (CTA, id, warp) while it waits for its warp-mates."""
  if len(key) == 4:
    return (f"barrier {key[1]} of CTA {key[0]}, on which warp {key[2]}'s arrival is held "
            "back (another pairing of warps explored: pairings.py)")
  bar, rec = k.named.get(key[:2]), k.warp_arrivals.get(key)
  warps = 0 if bar is None else bar.warps
  count = rec.count if bar is None else bar.count
  need = (f"the CTA's {named_need(k, key[0], None)} warps with a non-exited thread"
          if count is None else f"{count} threads")
  state = (f"barrier {key[1]} of CTA {key[0]} ({WARP * warps} arrived of {need}; "
           f"warps count {WARP} each, {warps} arrived)")
  if len(key) == 2:
    return state
  return (f"the other non-exited lanes of warp {key[2]} ({len(rec.lanes)} of "
          f"{rec.live} arrived) to arrive on {state}")
