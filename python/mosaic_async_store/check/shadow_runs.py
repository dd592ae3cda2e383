"""Many accesses to one CTA's shared-memory shadow (``shadow.Shadow``) checked and
recorded at once: the lanes of a warp instruction (``warp_memory``), or asynchronous
stores landing together (``asyncops.land_many``).

``record_disjoint`` takes accesses of ``n`` bytes each at distinct offsets that are
multiples of ``n`` (so their bytes are disjoint, and no access can conflict with
another of the batch: the order they are judged in does not matter).  It handles
the common case with one slice operation per run of adjacent accesses instead of
one ``Shadow.conflict`` and ``Shadow.record`` call per access: when no byte has a
history that needs a closer look (a write in flight other than the accesses' own,
an mbarrier, a strong write) and every access is ordered after the last writes of
its bytes (a write: and after the reads since), it records exactly what ``record``
would, access by access, and returns True.  Otherwise it changes nothing and returns False, and
the caller goes access by access (``Shadow.conflict`` then finds the first conflict
and the caller reports it in its own words).
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check.shadow import distinct

__all__ = ["runs", "record_disjoint", "read_at_once"]


def runs(offs, n):
  """The runs of adjacent accesses of ``offs`` (ascending, ``n`` bytes each), as
  (first byte, accesses) pairs."""
  if len(offs) > 64:   # (a WGMMA operand's or a copy's chunks: NumPy's loops)
    at = np.asarray(offs)
    starts = np.flatnonzero(np.diff(at) != n) + 1
    counts = np.diff(starts, prepend=0, append=len(at))
    return list(zip(at[np.concatenate(([0], starts))].tolist(), counts.tolist()))
  out, lo, count = [], offs[0], 1
  for off in offs[1:]:
    if off == lo + n * count:
      count += 1
    else:
      out.append((lo, count))
      lo, count = off, 1
  out.append((lo, count))
  return out


def _quiet(sh, lo, hi, own_inflight):
  """Whether bytes [lo, hi) have no write in flight but ``own_inflight`` plain ones
  each, no strong write and no mbarrier."""
  size, inflight = hi - lo, sh.inflight[lo:hi]
  return (bool((inflight == own_inflight).all()) if own_inflight else not inflight.any()) \
      and not sh.inflight_red[lo:hi].any() and sh.no_strong(lo, hi) \
      and sh.mbar_bytes.count(0, lo, hi) == size


def _each_byte(values, n):
  """Each of ``values`` ``n`` times in a row (one per byte of its access)."""
  if n == 1:
    return values
  each = range(n)
  return [v for v in values for _ in each]


def _ordered(matrix, rows, n, writers, clocks):
  """Whether each access (its clock: row ``rows[i]`` of ``matrix``; ``n`` bytes) is
  ordered after the last writes (``writers``, ``clocks``: arrays, slot and clock per
  byte, in access order) of its bytes."""
  if not clocks.any():   # (clock 0: the initial contents, before all)
    return True
  return bool((matrix[np.repeat(rows, n), writers] >= clocks).all())


def _after_reads(readers, offs, n, matrix, rows):
  """Whether each write (``n`` bytes at ``offs[i]``, its clock row ``rows[i]`` of
  ``matrix``) is ordered after every read of its bytes since their last write (a weak
  write conflicts with any read it is not ordered after: ``Shadow.conflict``)."""
  held = []
  for off in offs:
    held += readers[off:off + n]
  # At once: every read ordered before what all the writers know (their clocks'
  # minimum); else access by access, below.
  floor = matrix[rows].min(axis=0) if len(rows) > 1 else matrix[rows[0]]
  if all(floor[r] >= clk for accesses in distinct(held)
         for r, (clk, _, _) in accesses.items()):
    return True
  for i, off in enumerate(offs):
    held = readers[off:off + n]
    if held.count(None) == n:
      continue
    clock, seen = matrix[rows[i]], set()
    for accesses in held:
      if accesses is not None and id(accesses) not in seen:
        seen.add(id(accesses))
        for r, (clk, _, _) in accesses.items():
          if clock[r] < clk:
            return False
  return True


def record_disjoint(sh, offs, n, *, write, matrix, rows, slots, clocks, insn, spans=None,
                    own_inflight=0):
  """Checks and records accesses of ``n`` bytes at ``offs`` (ascending, distinct,
  multiples of ``n``) in shadow ``sh`` at once, or changes nothing (the module doc);
  returns whether it did.

  Access ``i``'s clock (the accessing thread's, or the issuer's at issue for an
  asynchronous store) is row ``rows[i]`` of ``matrix`` (``rows``: an index array).
  Each access is stamped, as ``Shadow.record`` takes it, (slot, clock, ``insn``):
  ``slots`` and ``clocks`` are lists (one per access: threads', whose clocks only
  grow) or one int each (the same for
  all: asynchronous stores landing, an asynchronous operation's reads).  ``spans``:
  ``runs(offs, n)`` where the caller has it.
  ``own_inflight``: how many writes in flight each byte holds of the accesses' own
  (1 when asynchronous stores land: they are still marked; 0 for threads' accesses)."""
  readers, w_slot, w_clk = sh.readers, sh.w_slot, sh.w_clk
  # What holds for every byte from the first access to the last holds for each run's
  # (then one check each instead of one per run, where the runs are most of the span).
  first, end, count = offs[0], offs[-1] + n, len(offs)
  # (else the span is mostly other bytes, or bytes in flight that are not the
  # accesses' own: run by run)
  dense = end - first <= (2 if own_inflight else 16) * n * count
  quiet = dense and _quiet(sh, first, end, own_inflight)
  unread = dense and readers[first:end].count(None) == end - first
  if end - first == n * count:   # one run (the common case)
    if not quiet:
      return False
    spans, where = [(first, count)], slice(first, end)
  else:
    spans = spans or runs(offs, n)
    if not quiet and not all(_quiet(sh, lo, lo + n * run, own_inflight) for lo, run in spans):
      return False
    where = (np.asarray(offs)[:, None] + np.arange(n)).ravel()   # (bytes, access order)
    if not unread:   # (some run was read: as one by one, below)
      unread = all(readers[lo:lo + n * run].count(None) == n * run for lo, run in spans)
  if not _ordered(matrix, rows, n, w_slot[where], w_clk[where]) or \
     (write and not unread and not _after_reads(readers, offs, n, matrix, rows)):
    return False
  same = type(slots) is int
  if same and not write:   # (one stamp: the reads as one access, as Shadow.record_reads)
    sh.record_reads([(lo, lo + n * run) for lo, run in spans], (slots, clocks, insn))
    return True
  if same:
    sh.note_latest(slots, clocks)
  else:   # (threads' slots: a thread's clock only grows, so its newest is its latest)
    sh.latest.update(zip(slots, clocks))
  if write:   # (one stamp for every byte where asynchronous stores land)
    w_slot[where] = slots if same else np.repeat(slots, n)
    w_clk[where] = clocks if same else np.repeat(clocks, n)
    sh.w_insn[where] = insn
    if not unread:   # (a plain write ends the reads' history, as Shadow.record)
      for lo, run in spans:
        readers[lo:lo + n * run] = [None] * (n * run)
    return True
  i = 0
  for lo, run in spans:
    hi = lo + n * run
    mine_slots, mine_clocks = slots[i:i + run], clocks[i:i + run]
    i += run
    if unread:   # (one set per access, shared by its bytes, as Shadow.record)
      made = [{s: (c, insn, None)} for s, c in zip(mine_slots, mine_clocks)]
      readers[lo:hi] = _each_byte(made, n)
    else:   # (reads joining earlier ones: as one by one)
      sh.join_reads(lo, n, mine_slots, mine_clocks, insn)   # (latest: kept above)
  return True


def read_at_once(sh, ranges, vc, stamp, writes) -> bool:
  """An asynchronous operation's reads of the bytes of ``ranges`` ((first, end) pairs,
  ascending, disjoint) with clock ``vc``, under one ``stamp`` (a WGMMA operand's):
  checked and recorded as one access (``Shadow.record_reads``) when no byte has a
  write in flight, a strong write or an mbarrier, and ``vc`` is after every one of
  ``writes`` (``Shadow.last_writes`` of the ranges); returns whether it did (else
  nothing changed: the caller goes range by range, where ``Shadow.conflict`` names the
  first conflict).  The same verdict and record as ``record_disjoint``'s for these
  reads."""
  first, end = ranges[0][0], ranges[-1][1]
  if not (end - first <= 16 * sum(hi - lo for lo, hi in ranges) and
          _quiet(sh, first, end, 0)):
    if not all(_quiet(sh, lo, hi, 0) for lo, hi in ranges):
      return False
  if any(vc[slot] < clk for slot, clk in writes):
    return False
  sh.record_reads(ranges, stamp)
  return True
