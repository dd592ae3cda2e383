"""The shadow of global memory: for every byte of the launch's global buffers (the
kernel's arguments), the history that ``shadow.Shadow`` keeps for SMEM bytes, with
the same verdicts (``memory.tags_morally_strong`` for strong pairs).

Why.  The PTX ISA's data races are not a shared-memory matter: "The relations
defined in the memory consistency model are independent of state spaces. In
particular, causality order closes over all memory operations across all the
state spaces" (Memory Consistency Model, "State spaces"), and "Two conflicting
memory operations are said to be in a data-race if they are not related in
causality order and they are not morally strong" ("Conflict and Data-races").
So two warps that write one output word, or one that reads what another writes,
without ordering, race in global memory exactly as in SMEM.

Cost.  Global buffers can be megabytes, and a kernel's global accesses are many
(every input load, every output store), so the shadow is lazy and shared: a page
of ``PAGE`` cells is made when an access first touches it, and a cell holds the
record of the run of bytes last accessed together (bytes never accessed hold
None: only the initial write).  An access of exactly such a run (the common case:
a word loaded, a word stored) checks and updates one record; any other access
copies the records of the bytes it touches into records of its own
(``GlobalShadow._mixed``), so every byte keeps its own history.

A record is a list (the hot path's cheapest object) holding the history that
``shadow.Shadow`` keeps per byte, for the page's bytes [start, start + n):
``[w_slot, w_clk, w_insn, atomics, readers, start, n]``: the last weak write
(slot, clock, instruction; slot 0, clock 0: the initial contents), then every
strong write (``atomics``) and every read (``readers``) since, each None, one
(slot, clock, instruction, tag) or {slot: (clock, instruction, tag)} (``_with``).
Only cells of its run ever hold a record (it is made for a whole run and written
into all of its cells), so when all of them still do, it is updated in place.
Global memory has no asynchronous stores into it (st.async and red.async write
``.shared::cluster``) and no mbarriers, so a record holds no in-flight counts.

Launches.  A shadow lives for one launch (``machine.Machine.pack_params`` makes
it): the bytes a buffer holds when the launch starts are the initial contents
(slot 0, clock 0: the ISA's hypothetical initial write W0, "Initialization"), so
reads of inputs never race, and accesses of different clusters of a grid, which
``report.check_ptx`` runs as launches one after another, are never compared.
The exit rule (``exit_rule.thread_exits``) is about shared memory only and
never looks here.
"""

from __future__ import annotations

from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.memory import tags_morally_strong

__all__ = ["PAGE", "GlobalShadow"]

PAGE_SHIFT = 12
PAGE = 1 << PAGE_SHIFT   # cells per lazily made page
_PAGE_MASK = PAGE - 1


def _unordered(accesses, vc, tag):
  """(slot, clock, instruction, tag) of one of ``accesses`` (see ``_with``) that an
  access with clock ``vc`` and ``tag`` is not ordered after and not morally strong
  with, or None."""
  if type(accesses) is tuple:
    a, clk, _, other = accesses
    return None if vc.item(a) >= clk or (tag and tags_morally_strong(tag, other)) else accesses
  for a, (clk, insn, other) in accesses.items():
    if vc.item(a) < clk and not (tag and tags_morally_strong(tag, other)):
      return a, clk, insn, other
  return None


def _with(accesses, slot, clk, insn, tag):
  """A record's reads (or strong writes) with one more by ``slot``, which replaces
  that slot's earlier one.  One access is a tuple (slot, clock, instruction, tag),
  several a dict {slot: (clock, instruction, tag)} in the order they came (as
  ``shadow.Shadow``'s): most bytes are read once, and a tuple is cheaper."""
  if accesses is None or (type(accesses) is tuple and accesses[0] == slot):
    return slot, clk, insn, tag
  if type(accesses) is tuple:
    accesses = {accesses[0]: accesses[1:]}
  accesses[slot] = (clk, insn, tag)
  return accesses


def _conflict(rec, vc, write, tag):
  """``shadow.Shadow.conflict`` for the bytes of record ``rec`` (nothing is ever in
  flight in global memory)."""
  if rec[1] and vc.item(rec[0]) < rec[1]:   # (clock 0: the initial contents)
    return "written by", rec[0], rec[1], rec[2], None
  bad = rec[3] and _unordered(rec[3], vc, tag)
  if bad:
    return ("written by", *bad)
  bad = write and rec[4] and _unordered(rec[4], vc, tag)
  return ("read by", *bad) if bad else None


def _record(rec, slot, clk, insn, write, atomic, tag):
  """``shadow.Shadow.record`` into record ``rec``."""
  if write and not atomic:
    rec[:5] = slot, clk, insn, None, None
  elif write:
    rec[3] = _with(rec[3], slot, clk, insn, tag)
  else:
    rec[4] = _with(rec[4], slot, clk, insn, tag)


def _copy(accesses):
  """A record's reads or strong writes for a new record (a dict is updated in
  place, so each record needs its own; a tuple never is)."""
  return dict(accesses) if type(accesses) is dict else accesses


class GlobalShadow:
  """The shadows of one launch's global buffers, by buffer: a page list each, every
  page None until an access touches it.  ``names[i]``: how a message names buffer
  ``i`` (its argument and parameter)."""

  def __init__(self, bufs, names):
    self.pages = {id(b): [None] * (-(-len(b) // PAGE)) for b in bufs}
    self.index = {id(b): i for i, b in enumerate(bufs)}
    self.names = names
    self.nc = {}   # id(buf) -> {byte: (cta, thread, PTX line)}: bytes ld.global.nc read

  def nc_read(self, th, buf, off, n, line):
    """Records that ``th`` read bytes [off, off + n) of ``buf`` with ``ld.global.nc`` at
    PTX ``line``; returns (slot, instruction) of a write of this launch to one of them
    (a weak write's, else a strong one's), or None.  A write after it is refused by
    ``access`` (rule ``nc-written``)."""
    marks, cells = self.nc.setdefault(id(buf), {}), self.pages[id(buf)]
    for b in range(off, off + n):
      marks.setdefault(b, (th.cta, th.tid, line))
      page = cells[b >> PAGE_SHIFT]
      rec = page and page[b & _PAGE_MASK]
      if rec is not None and rec[1]:   # (clock 0: the initial contents, not a write)
        return rec[0], rec[2]
      if rec is not None and rec[3]:
        strong = rec[3]
        return strong[:3:2] if type(strong) is tuple else \
            next((a, v[1]) for a, v in strong.items())
    return None

  def _nc_written(self, th, buf, off, n):
    """A write to bytes some thread read with ld.global.nc (PTX ISA, ld.global.nc:
    through the "non-coherent read-only cache"): rule ``nc-written``."""
    marks = self.nc.get(id(buf))
    hit = marks and next((b for b in range(off, off + n) if b in marks), None)
    if hit is not None:
      cta, tid, line = marks[hit]
      raise Stop(Finding("nc-written", f"CTA {th.cta} thread {th.tid} writes "
                          f"{self.describe(buf, off, n)}, which CTA {cta} thread {tid} "
                          f"reads with ld.global.nc (PTX line {line}): data read through "
                          "the non-coherent cache must be read-only for the whole kernel"))

  def last_writes(self, buf, off: int, n: int) -> set:
    """(slot, clock, instruction) of the last weak write of each byte in [off, off + n)
    that an access of this launch made (bytes never written hold the launch's
    contents: none); ``proxy.check_global_source`` asks who wrote them."""
    found, b, end = set(), off, off + n
    pages = self.pages[id(buf)]
    while b < end:
      page, o = b >> PAGE_SHIFT, b & _PAGE_MASK
      stop = min(end - b, PAGE - o)
      cells = pages[page]
      if cells is not None:
        for rec in {id(r): r for r in cells[o:o + stop] if r is not None}.values():
          if rec[1]:   # (clock 0: the initial contents)
            found.add((rec[0], rec[1], rec[2]))
      b += stop
    return found

  def describe(self, buf, off: int, n: int) -> str:
    """The bytes of an access, for a message."""
    i = self.index[id(buf)]
    return f"global buffer {i} ({self.names[i]}) bytes {off}..{off + n - 1}"

  def page(self, buf, lo: int, hi: int):
    """The cells of the page that holds bytes [lo, hi) of ``buf`` (made if no access
    touched it yet), or None when they lie in two pages (``warp_memory`` records a
    warp's accesses of untouched bytes at once, as ``access`` does one by one)."""
    if lo >> PAGE_SHIFT != (hi - 1) >> PAGE_SHIFT:
      return None
    return self._cells(buf, lo >> PAGE_SHIFT)

  def _cells(self, buf, k: int):
    """The cells of page ``k`` of ``buf``, made if no access touched it yet."""
    pages = self.pages[id(buf)]
    cells = pages[k]
    if cells is None:
      cells = pages[k] = [None] * PAGE
    return cells

  def access(self, th, buf, off, n, write, atomic, insn, tag, clk=None):
    """Checks thread ``th``'s access to ``n`` bytes of ``buf`` at ``off`` by
    instruction ``insn`` (its index; ``tag``: a strong access's, see
    ``shadow.Shadow.conflict``) and records it; returns None, or the conflict
    (``Shadow.conflict``'s tuple: the caller reports it; the access is recorded all
    the same, as the run goes on).  A
    write to bytes read with ld.global.nc raises ``nc-written``.  ``clk``: the clock the
    access is recorded with in ``th.slot``, where it is not ``th.vc``'s own (an
    asynchronous copy's: ``bulk_op.py``)."""
    if write and self.nc:
      self._nc_written(th, buf, off, n)
    o = off & _PAGE_MASK
    end = o + n
    if end > PAGE:   # (naturally aligned accesses of at most a page never cross one)
      first = PAGE - o
      return (self.access(th, buf, off, first, write, atomic, insn, tag, clk)
              or self.access(th, buf, off + first, n - first, write, atomic, insn, tag, clk))
    cells = self._cells(buf, off >> PAGE_SHIFT)
    rec, slot, vc = cells[o], th.slot, th.vc
    if clk is None:
      clk = vc.item(slot)
    if rec is None and (n == 1 or cells[o:end].count(None) == n):   # untouched bytes:
                                                                    # nothing to check
      rec = ([0, 0, -1, None, (slot, clk, insn, tag), o, n] if not write else
             [0, 0, -1, (slot, clk, insn, tag), None, o, n] if atomic else
             [slot, clk, insn, None, None, o, n])
      cells[o:end] = [rec] * n
      return None
    # (count compares lists, but no other record has this run: equal means the same)
    if rec is None or rec[5] != o or rec[6] != n or (n > 1 and cells[o:end].count(rec) != n):
      return self._mixed(cells, o, n, vc, slot, write, atomic, insn, tag, clk)
    bad = _conflict(rec, vc, write, tag)
    _record(rec, slot, clk, insn, write, atomic, tag)   # (after a race too: the
    return bad                                                     # run goes on)

  @staticmethod
  def _mixed(cells, o, n, vc, slot, write, atomic, insn, tag, clk):
    """``access`` to bytes whose records are not one run of exactly these bytes:
    each record is checked, then each run of bytes sharing one gets a copy of its
    own that records the access (a weak write: one new record for them all)."""
    end, seen, bad = o + n, set(), None
    for b in range(o, end):
      rec = cells[b]
      if rec is not None and id(rec) not in seen:
        seen.add(id(rec))
        bad = _conflict(rec, vc, write, tag)
        if bad is not None:
          break
    b = o
    if write and not atomic:
      cells[o:end] = [[slot, clk, insn, None, None, o, n]] * n
      return bad
    while b < end:
      old, run = cells[b], b + 1
      while run < end and cells[run] is old:
        run += 1
      rec = ([0, 0, -1, None, None, b, run - b] if old is None else
             [*old[:3], _copy(old[3]), _copy(old[4]), b, run - b])
      _record(rec, slot, clk, insn, write, atomic, tag)
      cells[b:run] = [rec] * (run - b)
      b = run
    return bad
