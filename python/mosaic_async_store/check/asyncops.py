"""Asynchronous operations of the PTX checker, as objects: what an operation reads
and writes, in which proxy, and how its completion is signalled.

An ``AsyncOp`` is made when a thread issues the instruction and lives in
``Machine.inflight`` until the schedule lands it (``schedule.Schedule``: any order,
any time after issue; when no thread can run, one lands).  It declares

  * ``writes``: ``Write`` s (CTA, offset, element size, values, reduction) with the
    values captured at issue (``st.async`` / ``red.async`` take registers);
  * ``reads``: the memory it reads when it lands (none for ``st.async``; a bulk
    copy's source), each a ``Read``;
  * ``proxy``: the proxy its accesses are made in ("async" for every operation
    here: ``st.async``, ``red.async``, bulk copies; the generic proxy is the
    threads').  The bulk copies' shared-memory accesses are checked against the
    threads' unfenced writes (``proxy.py``, through ``access_core``);
  * ``completion``: how the machine learns that it completed, an object with
    ``issue(k, op)`` (checks at issue), ``stamp(k, op)`` (the clock slot and
    value its writes are known by: whoever acquires that clock sees the data) and
    ``complete(k, op)`` (the signal, after the data landed), ``cta``, the CTA
    whose memory it signals in (the exit rule waits for it), and ``mbarrier``, the
    key of the mbarrier it signals on, or None (``mbarrier.inval`` waits for it).
    ``MbarrierTx`` (``.mbarrier::complete_tx::bytes``) is one; ``bulk_groups.BulkGroupDone``
    (``cp.async.bulk.commit_group`` / ``wait_group``) another; a WGMMA group would be a
    third class with the same interface.

An operation class with its own ``land(k)`` (``bulk_op.BulkOp``: a copy whose data is read
when it lands, not captured at issue) lands itself: ``land`` calls it.

``issue`` checks, marks the destination bytes in flight (a thread that touches
them before the completion is observed is reported) and queues the operation;
``land`` checks each write against the bytes' history (``access_core.check_shared``), writes
it, then signals the completion.  A finding raised while landing names the
issuing thread and instruction.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import access_core, findings, mbarrier_state, sync
from mosaic_async_store.check.findings import Stop
from mosaic_async_store.check.memory import SCOPES, TX_LIMIT
from mosaic_async_store.check.shadow_runs import record_disjoint, runs

__all__ = ["AsyncOp", "StoreGroup", "Write", "Read", "MbarrierTx", "issue", "issue_store",
           "land", "land_many", "dequeue", "at_issue"]

_BATCH = 8   # the fewest stores of a group landed at once (fewer: one by one is cheaper)


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
    sync.mbarrier_of(k, op.th, op.th.vc, self.key, pc=op.insn)

  def stamp(self, k, op):
    bar = sync.mbarrier_of(k, None, op.vc, self.key)
    return bar.slot, bar.phase + 1

  def complete(self, k, op):
    bar = sync.mbarrier_of(k, None, op.vc, self.key)
    mbarrier_state.add_tx(k, bar, -self.nbytes)
    mbarrier_state.advance_phase(k, bar)


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


class StoreGroup:
  """The plain ``st.async`` stores that lanes of one warp issue by one instruction in
  one step of their piece (``Machine.step``), in lane order, into one CTA and
  completing on one mbarrier: one operation in flight, which the schedule lands as a
  whole (where its phase completes part-way: the lanes up to that one; the rest stay
  in flight).  The per-thread issue (``issue_store``) and a warp form
  (``warp_memory.async_store``) make the same groups.  Columns, one entry per lane
  in lane order: ``lanes`` (the issuing threads), ``offs``, ``values`` (the elements
  captured at issue) and ``vcs`` (each issuer's clock at issue: a list of rows, or
  one array of them where the warp form copied them at once).  ``lane_op(i)`` is lane
  ``i``'s store as an ``AsyncOp``: what lands when the group cannot land at once."""

  __slots__ = ("insn", "opcode", "cta", "size", "completion", "step", "lanes", "offs",
               "values", "vcs", "idx")
  reads, proxy = (), "async"

  def __init__(self, insn, opcode, cta, size, completion, step):
    self.insn, self.opcode, self.cta, self.size = insn, opcode, cta, size
    self.completion, self.step, self.idx = completion, step, None
    self.lanes, self.offs, self.values, self.vcs = [], [], [], []

  @property
  def th(self):
    """The first issuing lane (messages name it)."""
    return self.lanes[0]

  @property
  def ctas(self) -> set:
    return {self.cta, self.completion.cta}

  @property
  def text(self) -> str:
    first, more = self.lanes[0], len(self.lanes) - 1
    lanes = f" (and {more} more lane{'s' * (more > 1)} of its warp)" if more else ""
    return f"CTA {first.cta} thread {first.tid}{lanes}: {self.opcode} into CTA {self.cta}"

  def lane_op(self, i) -> AsyncOp:
    return AsyncOp(self.lanes[i], self.insn, self.opcode,
                   [Write(self.cta, self.offs[i], self.size, self.values[i], None)],
                   MbarrierTx(self.completion.key, self.completion.nbytes), vc=self.vcs[i])

  def clock_matrix(self, count):
    """The first ``count`` lanes' clocks at issue, one row each."""
    return np.asarray(self.vcs[:count])   # (a view where ``vcs`` is one array)

  def drop(self, count):
    """The first ``count`` lanes landed: they leave the group."""
    del self.lanes[:count], self.offs[:count], self.values[:count]
    self.vcs = self.vcs[count:]


def issue_store(k, th, insn, opcode, cta, off, size, values, key):
  """``th`` issues a plain ``st.async`` of ``values`` (``size`` bytes each) at ``off`` of
  CTA ``cta``'s shared memory, completing on the mbarrier ``key``: ``issue``'s checks
  and effects, with the store joining the ``StoreGroup`` its warp-mates' stores by
  this instruction in this step started (else a new one)."""
  n = size * len(values)
  sync.mbarrier_of(k, th, th.vc, key, pc=insn)   # (MbarrierTx.issue)
  inflight = k.inflight
  group = inflight[-1] if inflight else None
  if type(group) is not StoreGroup or group.step != k.step or group.insn != insn or \
     group.completion.key != key:
    group = StoreGroup(insn, opcode, cta, size, MbarrierTx(key, n), k.step)
    group.idx = len(inflight)
    inflight.append(group)
  group.lanes.append(th)
  group.offs.append(off)
  group.values.append(values)
  group.vcs.append(th.vc.copy())   # (a group made lane by lane: a list of rows)
  k.shadow[cta].mark_inflight(off, n, 1, atomic=False)
  th.vc[th.slot] += 1


def issue(k, th, op):
  """``th`` issues ``op``: the completion's checks, its destination bytes marked in
  flight, queued; the issuing thread's clock moves on (its later accesses are not
  ordered before the operation's)."""
  op.completion.issue(k, op)
  for cta in {w.cta for w in op.writes}:
    k.shadow[cta].mark_inflight_writes([w for w in op.writes if w.cta == cta], 1)
  op.idx = len(k.inflight)
  k.inflight.append(op)
  th.vc[th.slot] += 1


def dequeue(k, op):
  """Removes ``op`` from ``k.inflight`` in O(1) (the last one takes its place)."""
  last = k.inflight.pop()
  if last is not op:
    k.inflight[op.idx], last.idx = last, op.idx


def land(k, op):
  """``op``'s data lands (each write checked, then written), then its completion.  A
  ``StoreGroup`` lands its lanes up to the one whose bytes complete its phase (all
  of them if none does); the rest stay in flight."""
  if type(op) is StoreGroup:
    _land_group_part(k, op)
    return
  own = getattr(op, "land", None)   # an operation of a family that lands itself (bulk_op.py)
  if own is not None:
    own(k)
    return
  dequeue(k, op)
  _land_one(k, op)


def _land_one(k, op):
  """``land`` of an ``AsyncOp`` taken out of ``k.inflight``."""
  for cta in {w.cta for w in op.writes}:
    k.shadow[cta].mark_inflight_writes([w for w in op.writes if w.cta == cta], -1)
  try:
    slot, clock = op.completion.stamp(k, op)
    for w in op.writes:
      n = w.nbytes
      access_core.check_shared(k, op.vc, None, w.cta, w.off, n, write=True, atomic=w.red is not None,
                    who=op, stamp=(slot, clock, op.insn),
                    tag=w.red and (op.th.cta, SCOPES["cluster"], w.off, n))
  except Stop as e:   # (a finding that stops the run) the issue is where
    raise at_issue(k, op, e) from None
  if k.unplaced:   # (a race or early read: reported; the data lands all the same)
    findings.place_landing(k, op)
  for w in op.writes:   # red.async is a read-modify-write (it continues a release state)
    access_core.write_values(k, k.smem[w.cta], w.off, w.size, w.values, w.red, weak=not w.red)
  op.completion.complete(k, op)


def at_issue(k, op, e: Stop) -> Stop:
  """The ``Stop`` ``e`` raised while ``op`` landed, its finding placed at the issue
  (thread and instruction)."""
  return Stop(findings.locate(k, e.finding, op.insn, op.th, issued=True))


def land_many(k, ops):
  """Lands every one of ``ops`` (distinct operations in flight), one after another,
  as ``land`` does each; a ``StoreGroup`` lands whole (part by part, where its
  phase completes part-way)."""
  for op in ops:
    if type(op) is StoreGroup:
      while op.lanes:
        _land_group_part(k, op)
    else:
      land(k, op)


def _land_group_part(k, group):
  """Lands the lanes of ``group`` up to the one whose bytes complete the phase (all
  if none does), in lane order: at once where ``_land_together`` can, else each
  lane's store as an ``AsyncOp`` (``land``'s checks and messages).  The lanes that
  landed leave the group; the group leaves ``k.inflight`` when none is left."""
  count = _lanes_to_completion(k, group)
  if not _land_together(k, group, count):
    for i in range(count):
      _land_one(k, group.lane_op(i))
  group.drop(count)
  if not group.lanes:
    dequeue(k, group)


def _lanes_to_completion(k, group) -> int:
  """How many of ``group``'s lanes land before its phase completes: up to the first
  whose bytes bring the tx-count to 0 with no arrival pending, else all."""
  bar, count = k.mbar.get(group.completion.key), len(group.lanes)
  if bar is None or bar.pending or bar.tx <= 0 or bar.tx % group.completion.nbytes:
    return count
  return min(count, bar.tx // group.completion.nbytes)


def _land_together(k, group, count) -> bool:
  """Lands the first ``count`` lanes of ``group`` (whose phase completes, if at all,
  with the last of them) at once, exactly as one by one: no check fails and no
  tx-count leaves its range.  Returns whether it did (else nothing changed)."""
  bar, n = k.mbar.get(group.completion.key), group.completion.nbytes
  if count < _BATCH or bar is None or k.flags or group.size not in (1, 2, 4, 8) or \
     abs(bar.tx - n * count) > TX_LIMIT:   # (bar.tx itself is in range)
    return False
  offs = group.offs[:count]
  clocks = group.clock_matrix(count)
  init_slot, init_clock = bar.init
  if len(set(offs)) != count or any(map(n.__rmod__, offs)) or \
     (clocks[:, init_slot] < init_clock).any():
    return False
  order = sorted(range(count), key=offs.__getitem__)
  at = [offs[i] for i in order]
  rows, spans = np.fromiter(order, np.intp, count), runs(at, n)
  sh, buf = k.shadow[group.cta], k.smem[group.cta]
  if not record_disjoint(sh, at, n, write=True, matrix=clocks, rows=rows, slots=bar.slot,
                         clocks=bar.phase + 1, insn=group.insn, spans=spans, own_inflight=1):
    return False
  data, i = np.asarray(group.values[:count], f"<u{group.size}")[rows].tobytes(), 0
  for lo, run in spans:   # each byte was in flight once: its own
    hi = lo + n * run
    sh.inflight[lo:hi] = 0
    buf[lo:hi] = data[i:i + hi - lo]
    i += hi - lo
  k.epoch += 2 * count   # (each store's write and complete-tx, as land)
  bar.tx -= n * count
  mbarrier_state.advance_phase(k, bar)
  return True
