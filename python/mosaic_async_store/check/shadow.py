"""The shadow of one CTA's shared memory: every byte's access history, for the
memory model's verdicts (``memory``: happens-before by vector clocks).

Each byte holds its last plain write (slot, clock, instruction), every strong write
and every read since ({slot: (clock, instruction, tag)}: full sets, so a later access
that is not ordered after *any* of them is found whatever the interleaving), how many
asynchronous writes to it are in flight, and whether it belongs to an initialised
mbarrier.  ``Shadow.conflict`` finds the first earlier access an access is not
ordered after; ``Shadow.record`` records it.  ``shadow_runs`` checks and records
many disjoint accesses at once.
"""

from __future__ import annotations

import itertools
from collections import Counter
from itertools import repeat
from operator import is_

import numpy as np

from mosaic_async_store.check.memory import CLOCK, tags_morally_strong

__all__ = ["Shadow", "AccessSet", "distinct", "disjoint_runs", "disjoint_runs_of", "byte_index",
           "byte_index_of"]

_NO_ENTRY = (-1,)   # (clock, ...) of a slot a byte's access set does not hold


def distinct(sets):
  """The sets of ``sets`` (bytes' reader or strong-writer sets; None: none), each once
  (bytes share them), for their entries: by identity, with C loops over the bytes;
  where every byte holds one set (or sets equal to it: the same entries), that set
  alone, by one comparison per byte (``id`` makes an int per byte: ten times that)."""
  held = list(filter(None, sets))
  if held and held[-1] is held[0] is held[len(held) // 2] and \
     held.count(held[0]) == len(held):   # (first, middle and last: likely one set)
    return (held[0],)
  return dict(zip(map(id, held), held)).values()


def disjoint_runs(spans):
  """The bytes of (offset, bytes) spans as sorted maximal runs, (offset, bytes) pairs
  (empty spans hold none); None where two spans share a byte.  Past 32 spans with
  NumPy's loops (``disjoint_runs_of``: a copy's hundreds of moves, a swizzled tile's
  16-byte chunks)."""
  spans = [span for span in spans if span[1]]
  if len(spans) <= 32:
    runs = []
    for off, n in sorted(spans):
      if runs and off < runs[-1][0] + runs[-1][1]:
        return None
      if runs and off == runs[-1][0] + runs[-1][1]:
        runs[-1][1] += n
      else:
        runs.append([off, n])
    return [tuple(run) for run in runs]
  return disjoint_runs_of(np.fromiter((off for off, _ in spans), np.int64, len(spans)),
                          np.fromiter((n for _, n in spans), np.int64, len(spans)))


def disjoint_runs_of(offs, sizes):
  """``disjoint_runs`` of the spans given as columns: ``offs`` and ``sizes`` (int64
  arrays, one entry per span), with NumPy's loops."""
  keep = sizes > 0
  if not keep.all():
    offs, sizes = offs[keep], sizes[keep]
  if not len(offs):
    return []
  order = np.argsort(offs, kind="stable")
  offs = offs[order]
  ends = offs + sizes[order]
  if (offs[1:] < ends[:-1]).any():
    return None
  breaks = np.flatnonzero(offs[1:] != ends[:-1]) + 1
  firsts = offs[np.concatenate(([0], breaks))]
  lasts = ends[np.concatenate((breaks - 1, [len(offs) - 1]))]
  return list(zip(firsts.tolist(), (lasts - firsts).tolist()))


def byte_index(ranges):
  """The bytes of ``ranges`` ((first, end) pairs, disjoint) as one index array, in
  the ranges' order (a WGMMA operand's hundreds of 16-byte chunks: one gather)."""
  if len(ranges) == 1:
    lo, hi = ranges[0]
    return np.arange(lo, hi)
  bounds = np.array(ranges, np.intp).reshape(-1, 2)
  return byte_index_of(bounds[:, 0], bounds[:, 1] - bounds[:, 0])


def byte_index_of(firsts, sizes):
  """The bytes of the spans ``firsts`` / ``sizes`` (integer arrays, one entry per span)
  as one index array, span by span in their order."""
  # (byte j of span r: first_r + j; as a running count, offset per span)
  return np.arange(int(sizes.sum())) + np.repeat(firsts - np.cumsum(sizes) + sizes, sizes)


def _pairs(slots, clocks) -> set:
  """The distinct (slot, clock) pairs of two equally long arrays, as Python ints."""
  if not slots.size:
    return set()
  if slots.min() == slots.max():   # (one writer slot, the common case)
    if clocks.min() == clocks.max():   # (one write: a copy's landing, the initial contents)
      return {(int(slots[0]), int(clocks[0]))}
    return set(zip(itertools.repeat(int(slots[0])), _distinct_sorted(clocks).tolist()))
  both = _distinct_sorted((slots.astype(np.int64) << 32) | clocks.astype(np.int64))
  return set(zip((both >> 32).tolist(), (both & 0xFFFFFFFF).tolist()))


def _distinct_sorted(values):
  """The distinct values of a 1-d integer array, ascending (``np.unique``'s result, by
  sorting: NumPy 2's hashing ``unique`` is the slower for these thousands of bytes)."""
  ordered = np.sort(values)
  keep = np.empty(len(ordered), bool)
  keep[0] = True
  np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
  return ordered[keep]


def _joined(accesses, mine, slot, entry):
  """The set that ``mine`` bytes holding ``accesses`` (a set, or None) hold once
  ``slot``: ``entry`` joins it: ``accesses`` itself, changed in place, where it is an
  ``AccessSet`` only these bytes hold; else a new ``AccessSet`` of their own (an
  ``AccessSet`` other bytes still hold counts these out).  A slot keeps its latest
  entry (``Shadow.record``)."""
  if accesses is not None and type(accesses) is AccessSet and accesses.owners == mine:
    if accesses.get(slot, _NO_ENTRY)[0] <= entry[0]:
      accesses[slot] = entry
    return accesses
  joined = AccessSet() if accesses is None else AccessSet(accesses)
  if joined.get(slot, _NO_ENTRY)[0] <= entry[0]:
    joined[slot] = entry
  joined.owners = mine
  if type(accesses) is AccessSet:
    accesses.owners -= mine
  return joined


class AccessSet(dict):
  """The reads (or strong writes) of some shared-memory bytes since their last plain
  write, {slot: (clock, instruction, tag)}, as ``Shadow.record`` grows it in place.
  ``owners``: at least how many bytes hold it (a plain write that drops it does not
  count down), so ``record`` changes it in place only when the bytes it records are
  all that hold it, and never a set other bytes still see.  A plain dict is a set
  made for the bytes of one access whose holders are not counted (``shadow_runs``
  makes them for a warp's lanes): ``record`` never changes one in place."""

  __slots__ = ("owners",)


class Shadow:
  """Per-byte access history of one CTA's shared memory: the numbers (last writes,
  writes in flight) in NumPy columns, the access sets in Python lists (bytes share
  them by identity).  Almost every access comes in many at once (a warp's lanes, a
  copy's chunks, a WGMMA operand: ``shadow_runs``), where a column's one call beats a
  loop over the bytes."""

  def __init__(self, nbytes: int):
    # the last plain (non-atomic) write, and the instruction (index) that made it;
    # slot 0, clock 0, instruction -1: the initial contents
    self.w_slot, self.w_clk = np.zeros(nbytes, np.intp), np.zeros(nbytes, CLOCK)
    self.w_insn = np.full(nbytes, -1, np.int32)
    # every strong write (red, red.async, atom, st.relaxed / .release) since it: None,
    # or {slot: (clock, instruction, tag)}; morally strong ones do not conflict with
    # each other, but each must come after the last plain write
    self.atomics: list[dict | None] = [None] * nbytes
    self.strong = False   # whether any was ever recorded (else every entry is None)
    # every read since the last plain write: None, or {slot: (clock, instruction,
    # tag)}, ``tag`` None for a weak read (see ``conflict``); the bytes of an access
    # share one (``AccessSet``)
    self.readers: list[dict | None] = [None] * nbytes
    # asynchronous writes in flight: st.async (conflicts with any access) and
    # red.async (an atomic: conflicts with everything but other atomics)
    self.inflight, self.inflight_red = np.zeros(nbytes, np.int32), np.zeros(nbytes, np.int32)
    # the bytes of initialised mbarriers (mbarrier.init .. mbarrier.inval)
    self.mbar_bytes = bytearray(nbytes)
    # every slot that recorded an access here -> the latest clock it recorded (for
    # the exit rule: what other CTAs and asynchronous operations did here)
    self.latest: dict[int, int] = {}

  def no_strong(self, lo: int, hi: int) -> bool:
    """Whether no strong write is recorded on bytes [lo, hi) since their last plain
    write (at once where none was ever recorded here)."""
    return not self.strong or self.atomics[lo:hi].count(None) == hi - lo

  def barrier_bytes(self, off: int, n: int) -> bool:
    """Whether any of these bytes belongs to an initialised mbarrier."""
    return any(self.mbar_bytes[off:off + n])

  def remote_accesses(self, cta_of_slot, cta: int):
    """{slot: its latest clock} of the accesses ever recorded here by others than
    threads of ``cta`` (``cta_of_slot(slot)``: the CTA of a thread slot, None for
    slots that are no one's, e.g. the initial contents).  Overwritten accesses count
    too (kept as recorded, not scanned from the bytes): the exit rule confirms a
    late one against the bytes' surviving history (``exit_rule``)."""
    return {slot: clk for slot, clk in self.latest.items()
            if cta_of_slot(slot) not in (None, cta)}

  def note_latest(self, slot: int, clk: int) -> None:
    """Keeps ``clk`` as ``slot``'s latest access here if it is later than the one kept."""
    if self.latest.get(slot, -1) < clk:
      self.latest[slot] = clk

  def mark_inflight(self, off: int, n: int, delta: int, *, atomic: bool) -> None:
    (self.inflight_red if atomic else self.inflight)[off:off + n] += delta

  def mark_inflight_spans(self, spans, delta: int, *, atomic: bool) -> None:
    """``mark_inflight(off, n, delta)`` for each (off, n) of ``spans``: adjacent
    disjoint ones as one run (overlapping ones each alone: their bytes count twice)."""
    spans = list(spans)
    for off, n in disjoint_runs(spans) or spans:
      self.mark_inflight(off, n, delta, atomic=atomic)

  def mark_inflight_writes(self, writes, delta: int) -> None:
    """``mark_inflight_spans`` of an operation's ``writes`` into this CTA (each with
    ``off``, ``nbytes`` and ``red``: None for a plain write)."""
    for atomic in (False, True):
      self.mark_inflight_spans([(w.off, w.nbytes) for w in writes
                                if (w.red is not None) == atomic], delta, atomic=atomic)

  def mark_inflight_all(self, offs, n: int, *, atomic: bool) -> None:
    """``mark_inflight(off, n, 1)`` for each of ``offs`` (a warp's issue)."""
    self.mark_inflight_spans([(off, n) for off in offs], 1, atomic=atomic)

  def last_writes(self, ranges, index=None) -> set:
    """The distinct (slot, clock) last writes of the bytes of ``ranges`` ((first, end)
    pairs; ``index``: their ``byte_index`` where the caller has it)."""
    if index is None and len(ranges) == 1:
      lo, hi = ranges[0]
      return _pairs(self.w_slot[lo:hi], self.w_clk[lo:hi])
    if index is None:
      index = byte_index(ranges)
    return _pairs(self.w_slot[index], self.w_clk[index])

  def conflict(self, vc, off: int, n: int, *, write: bool, atomic: bool, tag=None):
    """None, or (how, slot, clock, instruction, tag) of the first earlier access to
    these bytes that this one is not ordered after (``how``: "in flight", "written
    by", "read by"; ``instruction``: its index in the kernel, -1 if unknown; ``tag``:
    that access's, see below).
    ``tag``: a strong access's (CTA, scope, offset, bytes), None for a weak one; two
    strong accesses whose tags are ``tags_morally_strong`` do not conflict."""
    w_slot, w_clk, atomics, readers = self.w_slot, self.w_clk, self.atomics, self.readers
    both_atomic = write and atomic
    end = off + n
    inflight, inflight_red = self.inflight[off:end], self.inflight_red[off:end]
    if not inflight.any() and (both_atomic or not inflight_red.any()) and \
       self.no_strong(off, end) and (not write or readers[off:end].count(None) == n):
      # the common case at once: only the last writes to judge, the first unordered
      # one named (as byte by byte, below)
      ordered = np.asarray(vc)[w_slot[off:end]] >= w_clk[off:end]
      if ordered.all():
        return None
      b = off + int(ordered.argmin())   # (the first False)
      return "written by", int(w_slot[b]), int(w_clk[b]), int(self.w_insn[b]), None
    if n > 64 and self._none_unordered(vc, off, end, write, both_atomic):
      return None
    slots, clocks = w_slot[off:end].tolist(), w_clk[off:end].tolist()
    inflight, inflight_red = inflight.tolist(), inflight_red.tolist()
    for i, b in enumerate(range(off, end)):
      if inflight[i] or (inflight_red[i] and not both_atomic):
        return "in flight", 0, 0, -1, None
      s = slots[i]
      if vc[s] < clocks[i]:
        return "written by", s, clocks[i], int(self.w_insn[b]), None
      if atomics[b]:
        for a, (clk, insn, other) in atomics[b].items():
          if vc[a] < clk and not (tag and tags_morally_strong(tag, other)):
            return "written by", a, clk, insn, other
      if write and readers[b]:
        for r, (clk, insn, other) in readers[b].items():
          if vc[r] < clk and not (tag and tags_morally_strong(tag, other)):
            return "read by", r, clk, insn, other
    return None

  def _none_unordered(self, vc, off, end, write, both_atomic) -> bool:
    """Whether a long access with clock ``vc`` to bytes [off, end) with no strong write
    among them is ordered after all their history (then ``conflict`` finds nothing),
    judged by their distinct last writers and reader sets; False where that does not
    show it (``conflict`` then goes byte by byte, to name the first conflict)."""
    if self.inflight[off:end].any() or not self.no_strong(off, end) or \
       (not both_atomic and self.inflight_red[off:end].any()):
      return False
    if any(vc[s] < c for s, c in self.last_writes(((off, end),))):
      return False
    return not write or all(vc[r] >= clk for accesses in distinct(self.readers[off:end])
                            for r, (clk, _, _) in accesses.items())

  def record(self, off: int, n: int, *, write: bool, atomic: bool, stamp, tag=None) -> None:
    slot, clk, insn = int(stamp[0]), int(stamp[1]), stamp[2]
    self.note_latest(slot, clk)
    if write and not atomic:
      self.w_slot[off:off + n], self.w_clk[off:off + n] = slot, clk
      self.w_insn[off:off + n] = insn
      self.atomics[off:off + n] = [None] * n
      self.readers[off:off + n] = [None] * n
      return
    # A slot keeps its latest access: a thread's clock only grows, a barrier's phase at
    # landing too; a bulk group's number does not (two groups' copies land in any
    # order), so an entry is replaced only by one at least as late.
    self.strong |= write
    self._join(self.atomics if write else self.readers, ((off, off + n),), slot,
               (clk, insn, tag))

  def record_reads(self, ranges, stamp) -> None:
    """``record`` of reads of the bytes ``ranges`` ((first, end) pairs, disjoint) as
    one access under one ``stamp``: an asynchronous operation's reads (a WGMMA
    operand, a bulk copy's source) scattered over runs."""
    slot, clk = int(stamp[0]), int(stamp[1])
    self.note_latest(slot, clk)
    self._join(self.readers, ranges, slot, (clk, stamp[2], None))

  def join_reads(self, lo: int, n: int, slots, clocks, insn) -> None:
    """``record`` of adjacent reads of ``n`` bytes from ``lo`` on, read ``i`` by
    ``slots[i]`` at ``clocks[i]`` (instruction ``insn``), whose slots' latest clocks the
    caller keeps (``note_latest``): the sets ``_join`` would make one read after another,
    without its counting where each read's bytes hold one set (or none), and with one
    slice each way for them all (a warp's lanes reading bytes earlier accesses read)."""
    readers = self.readers
    hi = lo + n * len(slots)
    held = readers[lo:hi]
    ids = list(map(id, held))
    if n > 1 and any(ids[k::n] != ids[::n] for k in range(1, n)):   # (read by read)
      for j, (slot, clock) in enumerate(zip(slots, clocks)):
        at, mine = lo + j * n, ids[j * n:(j + 1) * n]
        if mine.count(mine[0]) == n:
          self.join_reads(at, n, [slot], [clock], insn)
        else:   # (its bytes hold several sets)
          self._join(readers, ((at, at + n),), slot, (clock, insn, None))
      return
    made = [_joined(before, n, slot, (clock, insn, None))
            for before, slot, clock in zip(held[::n], slots, clocks)]
    readers[lo:hi] = [s for s in made for _ in range(n)]

  def _join(self, sets, ranges, slot, entry) -> None:
    """Adds ``slot``: ``entry`` to the sets (``readers`` or ``atomics``) of the bytes
    of ``ranges``, one access: its bytes share one set; a set that bytes outside the
    access may hold too (``AccessSet``) is left to them, and these bytes get a
    successor (shared as the earlier one was)."""
    # The two common cases first, each with C loops over the bytes and no list of
    # them all (an access may span kilobytes, a WGMMA operand's reads): none yet, or
    # one set that only these bytes hold.
    total = sum(hi - lo for lo, hi in ranges)
    if not total:   # (no byte: nothing to join)
      return
    first = sets[ranges[0][0]]   # (ranges ascend: a byte of the access, or before one)
    if first is None:
      if all(sets[lo:hi].count(None) == hi - lo for lo, hi in ranges):   # one new set
        fresh = AccessSet({slot: entry})
        fresh.owners = total
        for lo, hi in ranges:
          sets[lo:hi] = [fresh] * (hi - lo)
        return
    elif type(first) is AccessSet and first.owners == total and \
        all(sum(map(is_, sets[lo:hi], repeat(first))) == hi - lo for lo, hi in ranges):
      if first.get(slot, _NO_ENTRY)[0] <= entry[0]:   # (by identity: in place)
        first[slot] = entry
      return
    held = []
    for lo, hi in ranges:
      held += sets[lo:hi]
    # (bytes by the identity of their set, counted and looked up with C loops)
    ids = list(map(id, held))
    counts, held = Counter(ids), dict(zip(ids, held))   # id -> bytes holding it, it
    nones = counts.pop(id(None), 0)
    held.pop(id(None), None)
    # id(earlier set, or of None) -> what these of its bytes hold now
    made = {key: _joined(accesses, counts[key], slot, entry)
            for key, accesses in held.items()}
    if nones:
      made[id(None)] = _joined(None, nones, slot, entry)
    now, at = list(map(made.__getitem__, ids)), 0
    for lo, hi in ranges:
      sets[lo:hi] = now[at:at + hi - lo]
      at += hi - lo
