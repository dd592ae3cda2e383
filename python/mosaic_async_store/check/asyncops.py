"""Asynchronous operations of the PTX checker, as objects: what an operation reads
and writes, in which proxy, and how its completion is signalled.

An ``AsyncOp`` is made when a thread issues the instruction and lives in
``Machine.inflight`` until the schedule lands it (``memory.Schedule``: any order,
any time after issue; when no thread can run, one lands).  It declares

  * ``writes``: ``Write`` s (CTA, offset, element size, values, reduction) with the
    values captured at issue (``st.async`` / ``red.async`` take registers);
  * ``reads``: the memory it reads when it lands (none for ``st.async``; a bulk
    copy's source), each a ``Read``;
  * ``proxy``: the proxy its accesses are made in ("async" for every operation
    here: ``st.async``, ``red.async``, bulk copies; the generic proxy is the
    threads').  The shadow does not tell proxies apart yet: the declaration is
    what the asynchronous-proxy rules (``fence.proxy.async``) will read;
  * ``completion``: how the machine learns that it completed, an object with
    ``issue(k, op)`` (checks at issue), ``stamp(k, op)`` (the clock slot and
    value its writes are known by: whoever acquires that clock sees the data) and
    ``complete(k, op)`` (the signal, after the data landed), ``cta``, the CTA
    whose memory it signals in (the exit rule waits for it), and ``mbarrier``, the
    key of the mbarrier it signals on, or None (``mbarrier.inval`` waits for it).
    ``MbarrierTx`` (``.mbarrier::complete_tx::bytes``) is the one mechanism today; a
    bulk-group completion (``cp.async.bulk.commit_group`` / ``wait_group``) or a
    WGMMA group is another class with the same interface.

``issue`` checks, marks the destination bytes in flight (a thread that touches
them before the completion is observed is reported) and queues the operation;
``land`` checks each write against the bytes' history (``access._check``), writes
it, then signals the completion.  A finding raised while landing names the
issuing thread and instruction.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import access, sync
from mosaic_async_store.check.memory import SCOPES, TX_LIMIT, ProtocolError
from mosaic_async_store.check.shadow_runs import record_disjoint, runs

__all__ = ["AsyncOp", "Write", "Read", "MbarrierTx", "issue", "land", "land_many"]

_BATCH = 8   # the fewest stores landed together (fewer: one by one is cheaper)


class Write:
  """``values`` (one per element of ``size`` bytes) written at ``off`` of CTA ``cta``'s
  shared memory; ``red``: (operation, type) of a reduction, None for a store."""

  __slots__ = ("cta", "off", "size", "values", "red")

  def __init__(self, cta, off, size, values, red):
    self.cta, self.off, self.size, self.values, self.red = cta, off, size, values, red

  @property
  def nbytes(self) -> int:
    return self.size * len(self.values)


class Read:
  """``nbytes`` read at ``off`` of ``buf`` when the operation lands."""

  __slots__ = ("buf", "off", "nbytes")

  def __init__(self, buf, off, nbytes):
    self.buf, self.off, self.nbytes = buf, off, nbytes


class MbarrierTx:
  """Completion through ``complete_tx`` on the mbarrier ``key`` (CTA, offset): when
  the operation lands, its bytes are counted off the barrier's tx-count (PTX ISA,
  mbarrier: complete-tx), which may complete the phase; a thread that observes that
  phase with acquire semantics sees the data (the barrier's data clock slot, at the
  phase's number)."""

  __slots__ = ("key", "nbytes")

  def __init__(self, key, nbytes):
    self.key, self.nbytes = key, nbytes

  @property
  def cta(self) -> int:
    return self.key[0]

  @property
  def mbarrier(self) -> tuple:
    return self.key

  def issue(self, k, op):
    """The barrier must exist and its initialisation be visible to the issuer."""
    sync._barrier(k, op.th, op.th.vc, self.key, pc=op.insn)

  def stamp(self, k, op):
    bar = sync._barrier(k, None, op.vc, self.key)
    return bar.slot, bar.phase + 1

  def complete(self, k, op):
    bar = sync._barrier(k, None, op.vc, self.key)
    sync._add_tx(k, bar, -self.nbytes)
    sync._advance(k, bar)


class AsyncOp:
  """One asynchronous operation in flight (the module doc): ``th`` issued it by
  instruction ``insn`` (its index) with clock ``vc``; ``text`` names it in messages;
  ``idx`` is its place in ``Machine.inflight``; ``vc``, if given, is a copy of
  ``th``'s clock the caller made (a warp's issue copies its lanes' at once)."""

  __slots__ = ("th", "vc", "insn", "opcode", "writes", "reads", "proxy", "completion", "idx")

  def __init__(self, th, insn, opcode, writes, completion, reads=(), proxy="async", vc=None):
    self.th, self.insn, self.opcode = th, insn, opcode
    self.vc = th.vc.copy() if vc is None else vc   # (vc: a copy the caller made)
    self.writes, self.reads, self.proxy, self.completion = writes, reads, proxy, completion
    self.idx = None

  @property
  def ctas(self) -> set:
    """The CTAs whose shared memory it still touches (the exit rule)."""
    return {w.cta for w in self.writes} | {self.completion.cta}

  @property
  def text(self) -> str:
    """Who issued it, what, and into which CTA (for messages)."""
    into = sorted({w.cta for w in self.writes})
    return (f"CTA {self.th.cta} thread {self.th.tid}: {self.opcode} into CTA "
            f"{', '.join(map(str, into))}")


def issue(k, th, op):
  """``th`` issues ``op``: the completion's checks, its destination bytes marked in
  flight, queued; the issuing thread's clock moves on (its later accesses are not
  ordered before the operation's)."""
  op.completion.issue(k, op)
  for w in op.writes:
    k.shadow[w.cta].mark_inflight(w.off, w.nbytes, 1, atomic=w.red is not None)
  op.idx = len(k.inflight)
  k.inflight.append(op)
  th.vc[th.slot] += 1


def _dequeue(k, op):
  """Removes ``op`` from ``k.inflight`` in O(1) (the last one takes its place)."""
  last = k.inflight.pop()
  if last is not op:
    k.inflight[op.idx], last.idx = last, op.idx


def land(k, op):
  """``op``'s data lands (each write checked, then written), then its completion."""
  _dequeue(k, op)
  for w in op.writes:
    k.shadow[w.cta].mark_inflight(w.off, w.nbytes, -1, atomic=w.red is not None)
  try:
    slot, clock = op.completion.stamp(k, op)
    for w in op.writes:
      n = w.nbytes
      access._check(k, op.vc, None, w.cta, w.off, n, write=True, atomic=w.red is not None,
                    who=op, stamp=(slot, clock, op.insn),
                    tag=w.red and (op.th.cta, SCOPES["cluster"], w.off, n))
  except ProtocolError as e:   # the issuing thread's instruction is where
    line, text = k.program.lines[op.insn], k.program.texts[op.insn]
    raise ProtocolError(e.rule, f"{e.detail} (issued at PTX line {line}: `{text}`)",
                        cta=op.th.cta, thread=op.th.tid, ptx_line=line,
                        instruction=text, **e.data()) from e
  for w in op.writes:   # red.async is a read-modify-write (it continues a release state)
    access._write(k, k.smem[w.cta], w.off, w.size, w.values, w.red, weak=not w.red)
  op.completion.complete(k, op)


def land_many(k, ops):
  """Lands ``ops`` one after another, as ``land`` does each: consecutive ``st.async``
  stores into one CTA that complete on one mbarrier (a warp's, or many warps')
  land together when ``_land_together`` can (the same checks, records, bytes and
  tx-counts), the others one by one."""
  i = 0
  while i < len(ops):
    j = i + 1
    first = ops[i]
    if _plain_store(first):
      shape = _shape(first)
      while j < len(ops) and _plain_store(ops[j]) and _shape(ops[j]) == shape:
        j += 1
    j = i + _land_together(k, ops[i:j]) if j - i >= _BATCH else i
    if j == i:   # (one by one)
      land(k, ops[i])
      j = i + 1
    i = j


def _plain_store(op) -> bool:
  """One ``st.async`` write (no reduction, no reads) completing on an mbarrier."""
  return type(op.completion) is MbarrierTx and len(op.writes) == 1 and \
      op.writes[0].red is None and not op.reads


def _shape(op):
  """What the stores landed together share: the mbarrier, the CTA, the element size
  and count."""
  w = op.writes[0]
  return op.completion.key, w.cta, w.size, len(w.values)


def _land_together(k, ops) -> int:
  """Lands the longest prefix of ``ops`` (``_plain_store`` s into one CTA, of one
  element size and count, on one mbarrier) that can land at once, exactly as one by one: no check fails, no
  tx-count leaves its range, and the phase completes, if at all, with the last.
  Returns how many landed (0: none; the caller lands them one by one)."""
  bar, w0 = k.mbar.get(ops[0].completion.key), ops[0].writes[0]
  if bar is None or k.flags or w0.size not in (1, 2, 4, 8):   # (sizes NumPy packs)
    return 0
  n = w0.nbytes
  tx = np.cumsum([bar.tx] + [-n] * len(ops))[1:]
  if np.abs(tx).max() > TX_LIMIT:
    return 0
  if bar.pending == 0:   # the phase completes where the tx-count reaches 0
    zero = np.flatnonzero(tx == 0)
    if len(zero):
      ops = ops[:zero[0] + 1]
  init_slot, init_clock = bar.init
  offs = [op.writes[0].off for op in ops]
  if len(ops) < _BATCH or len(set(offs)) != len(ops) or any(off % n for off in offs) or \
     any(op.vc.item(init_slot) < init_clock for op in ops):
    return 0
  ordered = sorted(ops, key=lambda op: op.writes[0].off)
  at = [op.writes[0].off for op in ordered]
  clocks = np.stack([op.vc for op in ordered])
  stamps = [(bar.slot, bar.phase + 1, op.insn) for op in ordered]
  if not record_disjoint(k.shadow[w0.cta], at, n, write=True, stamps=stamps,
                         clocks_at=lambda accesses, slots: clocks[accesses, slots],
                         own_inflight=1):
    return 0
  sh, buf = k.shadow[w0.cta], k.smem[w0.cta]
  for op in ops:
    _dequeue(k, op)
  dtype, i = np.dtype(f"<u{w0.size}"), 0
  for lo, count in runs(at, n):   # each byte was in flight once: its own
    hi, writes = lo + n * count, [op.writes[0] for op in ordered[i:i + count]]
    i += count
    sh.inflight[lo:hi] = [0] * (hi - lo)
    buf[lo:hi] = np.array([w.values for w in writes], dtype).tobytes()
  k.epoch += 2 * len(ops)   # (each op's write and complete-tx, as land)
  bar.tx -= n * len(ops)
  sync._advance(k, bar)
  return len(ops)
