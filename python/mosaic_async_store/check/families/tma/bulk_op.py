"""A bulk or tensor copy in flight (``BulkOp``, the interface of ``asyncops.AsyncOp``
with a landing of its own) and its landing: the source bytes read and checked when it
lands (shared memory through the asynchronous proxy), then each move's bytes written at
its destination and checked against their history (``tma`` issues them).

A copy's hundreds of moves (a swizzled tile's 16-byte chunks) are columns (``Moves``),
merged into runs once, at issue (``BulkOp.src_runs`` / ``dst_runs``): the in-flight
marks and the checks go run by run, which judges each byte as move by move would, and
the bytes are read with one NumPy gather and written with one scatter where the moves'
destinations are disjoint (else move by move, in order).
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import access_core, asyncops, findings
from mosaic_async_store.check.families.tma import bulk_groups
from mosaic_async_store.check.findings import Stop
from mosaic_async_store.check.memory import SCOPES
from mosaic_async_store.check.ops import bits_of
from mosaic_async_store.check.shadow import byte_index_of, disjoint_runs_of

__all__ = ["Span", "Moves", "BulkOp"]


class Span:
  """``nbytes`` bytes at ``off`` of CTA ``cta``'s shared memory that a copy writes
  (``BulkOp.writes``, marked in flight at issue) or reads (``BulkOp.reads``): a run of
  its moves."""

  __slots__ = ("cta", "off", "nbytes", "red")

  def __init__(self, cta, off, nbytes, red=None):
    self.cta, self.off, self.nbytes, self.red = cta, off, nbytes, red


class Moves:
  """A copy's moves as columns (int64 arrays, one entry per move, in the copy's order):
  ``dst`` and ``src`` byte offsets (``src`` -1: an out-of-bounds element of a tensor
  load, which lands as zeros) and ``nbytes``."""

  __slots__ = ("dst", "src", "nbytes")

  def __init__(self, dst, src, nbytes):
    self.dst, self.src, self.nbytes = (np.asarray(c, np.int64) for c in (dst, src, nbytes))

  def read(self):
    """(source offsets, bytes) of the moves that read (every one but a load's fills)."""
    if (self.src >= 0).all():
      return self.src, self.nbytes
    keep = self.src >= 0
    return self.src[keep], self.nbytes[keep]


def _spans(offs, sizes) -> list:
  """(offset, bytes) pairs of the columns, as Python ints."""
  return list(zip(offs.tolist(), sizes.tolist()))


class BulkOp:
  """One copy in flight (the interface of ``asyncops.AsyncOp``, landing itself):
  ``moves`` (``Moves``); ``src`` / ``dst``: ("smem", CTA) or ("global", buffer)."""

  __slots__ = ("th", "vc", "insn", "opcode", "writes", "reads", "proxy", "completion",
               "idx", "moves", "src", "dst", "fenced", "fenced_global", "data", "red",
               "src_runs", "dst_runs")

  def __init__(self, th, insn, opcode, src, dst, moves, completion, red=None):
    self.th, self.insn, self.opcode, self.vc = th, insn, opcode, th.vc.copy()
    self.src, self.dst, self.moves, self.completion = src, dst, moves, completion
    self.proxy, self.idx, self.data, self.red = "async", None, None, red
    # The bytes it reads and writes as runs (``disjoint_runs``: None where moves
    # overlap), once: a tile's hundreds of moves are a few runs.
    self.src_runs = disjoint_runs_of(*moves.read())
    self.dst_runs, self.writes, self.reads = None, [], []
    if dst[0] == "smem":   # (every move lands: an out-of-bounds element as zeros)
      self.dst_runs = disjoint_runs_of(moves.dst, moves.nbytes)
      self.writes = [Span(dst[1], d, n, red) for d, n in
                     self.dst_runs or _spans(moves.dst, moves.nbytes)]
    if src[0] == "smem":
      self.reads = [Span(src[1], s, n) for s, n in self.src_runs or _spans(*moves.read())]
    self.fenced = self.fenced_global = None   # (proxy.fenced, at issue)

  @property
  def ctas(self) -> set:
    """The CTAs whose shared memory or mbarriers it still touches (the exit rule)."""
    left = {s.cta for s in self.writes}
    if self.data is None:
      left |= {s.cta for s in self.reads}
    return left | ({self.completion.cta} if self.completion.mbarrier else set())

  def only_reads_own(self, cta) -> bool:
    """Whether all it still does in CTA ``cta`` is read its source there, issued by a
    thread of that CTA, with no mbarrier to signal: a bulk store or reduction into
    global memory (the exit rule's warning ``exit-async-read``)."""
    return (self.th.cta == cta and self.data is None and self.src == ("smem", cta)
            and not self.writes and not self.completion.mbarrier)

  @property
  def text(self) -> str:
    where = (f"CTA {self.dst[1]}" if self.dst[0] == "smem" else "global memory")
    return f"CTA {self.th.cta} thread {self.th.tid}: {self.opcode} into {where}"

  def land(self, k):
    """Lands (``asyncops.land``): the reads, then the writes and the completion; a
    bulk-group copy stops after its reads (the writes land later)."""
    try:
      if self.data is None:
        self.data = _read(k, self)
        if type(self.completion) is bulk_groups.BulkGroupDone:
          self.completion.groups.pending[self.completion.gid][0] -= 1
          k.dirty, k.epoch = True, k.epoch + 1
          return
      asyncops.dequeue(k, self)
      _write(k, self)
    except Stop as e:
      raise asyncops.at_issue(k, self, e) from None
    finally:
      if k.unplaced:
        findings.place_landing(k, self)
    self.completion.complete(k, self)


def _stamp(k, op, reads):
  """(slot, clock) the copy's accesses are known by: its mbarrier's phase, or its
  group's number in the issuer's reads or writes slot."""
  c = op.completion
  if type(c) is bulk_groups.BulkGroupDone:
    return (c.groups.reads_slot if reads else c.groups.writes_slot), c.gid
  return c.stamp(k, op)


def _read(k, op):
  """The source bytes of the moves that read (``Moves.read``: all but a load's fills),
  one after another (uint8), checked and recorded as read by the copy (in shared memory:
  through the asynchronous proxy)."""
  stamp = (*_stamp(k, op, True), op.insn)
  kind, where = op.src
  mem = k.smem[where] if kind == "smem" else where
  offs, sizes = op.moves.read()
  access_core.check_and_record_runs(k, op, op.vc, where, op.src_runs or _merged(offs, sizes),
                                    write=False, stamp=stamp, proxy_kind="async")
  return np.frombuffer(mem, np.uint8)[byte_index_of(offs, sizes)]   # (a copy: a snapshot)


def _merged(offs, sizes):
  """The spans ``offs`` / ``sizes`` (columns) as the fewest runs covering the same bytes:
  checking a copy's bytes run by run is the same as move by move (a move's bytes are
  checked alike)."""
  out = disjoint_runs_of(offs, sizes)
  if out is not None:
    return out
  out = []   # (moves that overlap: their union)
  for lo, n in sorted(_spans(offs, sizes)):
    if out and lo <= out[-1][0] + out[-1][1]:
      out[-1][1] = max(out[-1][1], lo + n - out[-1][0])
    else:
      out.append([lo, n])
  return out


def _landed_bytes(op):
  """The bytes of every move, one after another (uint8): what it read, or zeros for a
  load's out-of-bounds element (only a load into shared memory has those: a store's
  were left out at issue)."""
  moves, data = op.moves, op.data
  filled = moves.src < 0
  if not filled.any():
    return data
  full = np.zeros(int(moves.nbytes.sum()), np.uint8)
  full[np.repeat(~filled, moves.nbytes)] = data
  return full


def _write(k, op):
  """Each move's bytes written at its destination (an out-of-bounds element of a load
  as zeros; of a store, dropped), checked against the bytes' history."""
  stamp = (*_stamp(k, op, False), op.insn)
  kind, where = op.dst
  red = op.red
  if kind == "smem":
    k.shadow[where].mark_inflight_writes(op.writes, -1)
  mem = k.smem[where] if kind == "smem" else where
  dsts, sizes, data = op.moves.dst, op.moves.nbytes, _landed_bytes(op)
  runs = op.dst_runs or _merged(dsts, sizes)
  if red is None:
    access_core.check_and_record_runs(k, op, op.vc, where, runs, write=True, stamp=stamp,
                                      proxy_kind="async")
  else:
    _check_reductions(k, op, where, runs, stamp, bits_of(red[1]) // 8)
  if red is None:   # (access_core.write_values of each move's bytes, as they are)
    k.epoch += len(sizes)
    if not k.flags and _written_at_once(mem, dsts, sizes, data):
      return
    for d, n, chunk in _each_move(dsts, sizes, data):
      if k.flags:
        access_core.forget_flags(k, mem, d, n)
      mem[d:d + n] = chunk
    return
  size = bits_of(red[1]) // 8
  for d, n, chunk in _each_move(dsts, sizes, data):   # element by element, each a
    access_core.write_values(                          # read-modify-write
        k, mem, d, size, [int.from_bytes(chunk[i:i + size], "little")
                          for i in range(0, n, size)], red, weak=False)


def _check_reductions(k, op, where, runs, stamp, size):
  """A reduction's writes, checked and recorded element by element as strong
  ``.relaxed.gpu`` writes (PTX ISA, cp.reduce.async.bulk: "Each reduction operation
  performed by the cp.reduce.async.bulk has individually .relaxed.gpu memory ordering
  semantics"): one element's reduction is morally strong with another reduction of
  exactly that element (another copy's, a ``red`` / ``atom`` of its width), so they do
  not race; a weak access to it, or a strong one of other bytes, still does."""
  gpu = SCOPES["gpu"]
  for off, n in runs:   # (runs of whole elements: the addresses are 16-byte aligned)
    for e in range(off, off + n, size):
      access_core.check_and_record(k, op, op.vc, where, e, size, write=True, stamp=stamp,
                                   proxy_kind="async", atomic=True,
                                   tag=(op.th.cta, gpu, e, size))


def _each_move(dsts, sizes, data):
  """(destination, bytes, its bytes) of each move, in order (``data``: theirs one
  after another)."""
  at = 0
  for d, n in zip(dsts.tolist(), sizes.tolist()):
    yield d, n, data[at:at + n].tobytes()
    at += n


def _written_at_once(mem, dsts, sizes, data) -> bool:
  """Writes ``data`` (uint8: the moves' bytes one after another) at the destinations
  ``dsts`` / ``sizes`` (columns) of ``mem`` (a bytearray) with one NumPy store where the
  destinations are disjoint (then the order of the writes does not matter) and inside
  ``mem``; returns whether it did (else nothing is written)."""
  if type(mem) is not bytearray or not len(dsts) or len(data) != int(sizes.sum()):
    return False
  ends = dsts + sizes
  if dsts.min() < 0 or ends.max() > len(mem):
    return False   # (a slice past the end would grow ``mem``: as move by move)
  order = np.argsort(dsts, kind="stable")
  if (dsts[order[1:]] < ends[order[:-1]]).any():
    return False   # (overlapping moves: the later wins, as move by move)
  np.frombuffer(mem, np.uint8)[byte_index_of(dsts, sizes)] = data
  return True
