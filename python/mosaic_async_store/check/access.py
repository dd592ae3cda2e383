"""Memory accesses of the PTX checker: plain and atomic stores, asynchronous
stores in flight, warp matrix loads and stores, each checked against the
per-byte history of ``memory.Shadow`` (shared memory) or of
``global_memory.GlobalShadow`` (global memory) (strong loads and atom: ``strong``).

Functions of the machine ``k`` (``machine.Machine``): its ``smem`` / ``shadow`` /
``smem_cta`` (the CTAs' shared memories and their histories), ``gshadow`` (the
global buffers' history), ``threads`` and ``slots`` (who owns each clock slot:
``slots.SlotTable``).  ``st.async`` / ``red.async`` are issued here as ``asyncops.AsyncOp``
objects; ``asyncops`` lands them through ``_check`` and ``_write``.
"""

from __future__ import annotations

from mosaic_async_store.check import (addresses, asyncops, findings, program, strong, sync,
                                      warp_memory)
from mosaic_async_store.check.memory import (SCOPES, Access, ProtocolError, shown_source,
                                             tags_morally_strong)
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.ops import reduce_op
from mosaic_async_store.check.outcomes import YIELD
from mosaic_async_store.check.slots import MBARRIER_DATA, THREAD

__all__ = ["OPCODES"]

_SCOPE_NAMES = {rank: name for name, rank in SCOPES.items()}


def _unordered_read(sh, vc, off, n, tag):
  """(slot, clock, instruction, tag) of a read of these bytes since their last write
  that a write with clock ``vc`` (and ``tag``) is not ordered after, or None."""
  for accesses in filter(None, sh.readers[off:off + n]):
    for r, (clk, insn, other) in accesses.items():
      if vc[r] < clk and not (tag and tags_morally_strong(tag, other)):
        return r, clk, insn, other
  return None


def _name(who) -> str:
  """An access's author for a message: a Thread, or an asynchronous operation (an
  ``asyncops.AsyncOp``, a ``tma.BulkOp``: anything with a completion)."""
  return who.text if hasattr(who, "completion") else f"CTA {who.cta} thread {who.tid}"


# st / red / st.async / red.async / ldmatrix / stmatrix, with their checks.


def _store_fn(k, space, addr, vals, size, red, strong_form=None):
  """st / red, written at once and checked for races; ``strong_form``: (sem, scope
  rank) of a strong one (every red; st.relaxed / .release, strong.py), None for a
  weak st."""
  mask = (1 << (8 * size)) - 1
  traced = "::" in (space or "")   # a store instruction's own spelling (see _trace)
  insn = len(k.program.code)   # this instruction's index (it is being compiled)
  n = size * len(vals)
  if strong_form is not None and len(vals) != 1:
    raise NotImplementedError("a vector strong store")
  mem = addresses.mem_fn(k, space, n)
  if strong_form is None and red is None and len(vals) == 1 and space in addresses.NOT_SHARED:
    g = vals[0]   # the common case, inlined: a weak scalar store outside SMEM
    glob = space == "global"
    def store_plain(th):
      buf, off = mem(th, addr(th))
      if traced and k.store_trace is not None:
        _trace(k, th, buf, off, n)
      if glob:   # (_global_access, inline)
        bad = k.gshadow.access(th, buf, off, n, True, False, insn, None)
        if bad is not None:
          _global_race(k, th, buf, off, n, True, bad, None, insn)
      value = g(th) & mask
      k.epoch += 1
      if k.flags:
        strong._forget_flags(k, buf, off, n)
      buf[off:off + n] = value.to_bytes(n, "little")
    if glob:
      store_plain.lanes = warp_memory.global_store(k, addr, g, n, insn)
    return store_plain
  def store(th):
    buf, off = mem(th, addr(th))
    if traced and k.store_trace is not None:
      _trace(k, th, buf, off, n)
    tag = None if strong_form is None else (th.cta, strong_form[1], off, n)
    _access(k, th, buf, off, n, write=True, atomic=strong_form is not None, insn=insn, tag=tag)
    before = None if strong_form is None else bytes(buf[off:off + n])   # (strong.py)
    _write(k, buf, off, size, [g(th) & mask for g in vals], red, weak=strong_form is None)
    if strong_form is not None:
      strong._publish(k, th, buf, off, n, *strong_form, rmw=red is not None, before=before)
  if strong_form is None and red is None and space in warp_memory.SHARED:
    store.lanes = warp_memory.shared_store(k, addr, vals, size, insn, traced)
  return store


def _write(k, buf, off, size, values, red, *, weak):
  """Writes (or reduces) ``values`` at ``off``; a weak write ends the release state
  of the locations it overlaps (strong.py)."""
  k.epoch += 1
  if weak and k.flags:
    strong._forget_flags(k, buf, off, size * len(values))
  if not red and len(values) == 1:
    buf[off:off + size] = values[0].to_bytes(size, "little")
    return
  if not red:   # one conversion for the whole (vector) store
    buf[off:off + size * len(values)] = sum(
        v << (8 * size * i) for i, v in enumerate(values)).to_bytes(size * len(values), "little")
    return
  for i, new in enumerate(values):
    at = slice(off + i * size, off + (i + 1) * size)
    buf[at] = (reduce_op(*red, int.from_bytes(buf[at], "little"), new,
                         shared=id(buf) in k.smem_cta) if red else new).to_bytes(size, "little")


def _async_fn(k, addr, vals, size, red, mbar):
  """st.async / red.async: checked at issue, queued, landed by the schedule."""
  mask, text = (1 << (8 * size)) - 1, "red.async" if red else "st.async"
  insn = len(k.program.code)   # this instruction's index (it is being compiled)
  n = size * len(vals)
  mem = addresses.mem_fn(k, "shared::cluster", n)
  bar_mem = addresses.mem_fn(k, "shared::cluster", 8)
  completions = {}   # mbarrier key -> its MbarrierTx (which holds no state of its own)
  def issue(th):
    buf, off = mem(th, addr(th))
    bar_buf, bar_off = bar_mem(th, mbar(th))   # as _bar_key
    cta, key = k.smem_cta[id(buf)], (k.smem_cta[id(bar_buf)], bar_off)
    if k.store_trace is not None:
      _trace(k, th, buf, off, n)
    if len(k.smem) == 1 or key[0] != cta or (red and cta == th.cta):
      where = f"CTA {th.cta} thread {th.tid}: {text} into CTA {cta}"
      if len(k.smem) == 1:
        raise ProtocolError("st.async-cluster-of-one", where)
      if key[0] != cta:
        raise ProtocolError("barrier-elsewhere", f"{where} completing on CTA {key[0]}'s "
                            "mbarrier")
      raise ProtocolError("red.async-self", where)
    values = [g(th) & mask for g in vals]
    if red is None:
      asyncops.issue_store(k, th, insn, text, cta, off, size, values, key)
    else:
      completion = completions.get(key)
      if completion is None:
        completion = completions[key] = asyncops.MbarrierTx(key, n)
      write = asyncops.Write(cta, off, size, values, red)
      asyncops.issue(k, th, asyncops.AsyncOp(th, insn, text, [write], completion))
    return YIELD if k.sched.pauses(k.step) else None
  issue.lanes = warp_memory.async_store(k, addr, vals, size, red, mbar, insn, text)
  return issue


def _trace(k, th, buf, off, n):
  """Records one thread's store into SMEM for ``store_trace`` (``run.launch``):
  asynchronous stores, and plain st/red that spell their state space with a
  ``::cta`` / ``::cluster`` qualifier, as both implementations' store code does;
  the kernels' own SMEM copies (LLVM's ``st.shared``) are left out."""
  if buf is not th.local:
    k.store_trace.setdefault((th.cta, th.tid), []).append((_cta_of(k, buf), off, n))


def _cta_of(k, buf):
  return k.smem_cta[id(buf)]


def _access(k, th, buf, off, n, *, write, insn, atomic=False, tag=None):
  """A thread's access to ``buf`` by instruction ``insn`` (its index): checked
  against the byte history if it is SMEM or global memory (``tag``: see
  ``memory.Shadow.conflict``); local memory and parameters have none."""
  cta = k.smem_cta.get(id(buf))
  if cta is not None:
    _check(k, th.vc, th, cta, off, n, write=write, atomic=atomic,
                who=th, stamp=(th.slot, th.vc[th.slot], insn), tag=tag)
  elif id(buf) in k.gshadow.pages:
    _global_access(k, th, buf, off, n, write=write, insn=insn, atomic=atomic, tag=tag)


def _global_access(k, th, buf, off, n, *, write, insn, atomic=False, tag=None):
  """``_access`` to global buffer ``buf`` (global_memory: no asynchronous stores,
  no mbarriers, no exit rule)."""
  bad = k.gshadow.access(th, buf, off, n, write, atomic, insn, tag)
  if bad is not None:
    _global_race(k, th, buf, off, n, write, bad, tag, insn)


def _global_race(k, th, buf, off, n, write, bad, tag, insn):
  """Reports the race ``bad`` (``memory.Shadow.conflict``'s tuple) in global memory,
  as in SMEM, naming the buffer; ``insn``: the accessing instruction's index."""
  memory = k.gshadow.describe(buf, off, n)
  mine = _access_of(k, th, _kind(write, tag), memory, insn)
  _conflict(k, f"{_name(th)} {'writes' if write else 'reads'} {memory}", *bad, th, tag,
            mine=mine)


def _check(k, vc, th, cta, off, n, *, write, atomic, who, stamp, tag=None):
  """Reports a finding (``findings.report``) unless the access is ordered after the
  conflicting earlier ones; then records it (``stamp``: the (slot, clock) it is known by; ``who``: the
  accessing Thread or AsyncOp, named in a message; ``tag``: a strong access's
  (CTA, scope, offset, bytes), None for a weak one)."""
  sh = k.shadow[cta]
  if any(sh.mbar_bytes[off:off + n]):   # (sh.barrier_bytes, inline: a hot path)
    who = _name(who)
    raise ProtocolError("barrier-memory", f"{who} {'writes' if write else 'reads'} CTA "
                        f"{cta} SMEM bytes {off}..{off + n - 1}, which hold an initialised "
                        "mbarrier")
  bad = sh.conflict(vc, off, n, write=write, atomic=atomic, tag=tag)
  if bad is not None:
    memory = f"CTA {cta} SMEM bytes {off}..{off + n - 1}"
    what = f"{_name(who)} {'writes' if write else 'reads'} {memory}"
    kind = _kind(write, tag) if th is not None else (
        "asynchronous reduction" if atomic else "asynchronous store" if write else
        "asynchronous read")
    mine = _access_of(k, who, kind, memory, stamp[2])
    if bad[0] == "in flight":
      findings.report(k, ProtocolError("early-read", f"{what} while an asynchronous store "
                                       "into them is in flight", access=mine))
    else:
      _conflict(k, what, *bad, th if th is not None else who.th, tag,
                reads=(sh, vc, off, n) if write else None, mine=mine)
  sh.record(off, n, write=write, atomic=atomic, stamp=stamp, tag=tag)


def _insn_where(k, insn):
  """Instruction ``insn`` for a message: its PTX line, its source line (if the PTX
  has line info) and its text."""
  if insn < 0:
    return "?"
  source = k.program.sources[insn]
  shown = f" ({shown_source(source)})" if source is not None else ""
  return f"PTX line {k.program.lines[insn]}{shown}: `{k.program.texts[insn]}`"


def _kind(write, tag):
  """An access's kind for ``memory.Access``: a strong one has a ``tag``."""
  return ("strong " if tag else "") + ("write" if write else "read")


def _access_of(k, who, kind, memory, insn):
  """``memory.Access`` of an access by ``who`` (a Thread, or an AsyncOp: its issuer)
  by instruction ``insn``."""
  issuer = who.th if hasattr(who, "completion") else who
  known = insn is not None and insn >= 0
  return Access(_name(who), issuer.cta, issuer.tid, kind, memory,
                k.program.lines[insn] if known else None,
                k.program.texts[insn] if known else None,
                k.program.sources[insn] if known else None)


def _conflict(k, what, how, slot, clk, insn, other_tag, th, tag, *, reads=None, mine=None):
  """Reports the race (or early read) between this access (``what``, by or issued by
  thread ``th``; ``tag``: see ``memory.Shadow.conflict``) and the earlier one of
  (``slot``, ``clk``) by instruction ``insn`` (``other_tag``), naming both, their
  sources and what is missing between them.  ``reads``: (shadow, clock, offset,
  bytes) of a write.  A write over asynchronous data that a thread has read since,
  unordered with that read, is a write-after-read race, not an early read: had the
  read been ordered before it, the write would have been ordered after the data.
  ``mine``: this access as data (``memory.Access``); the error carries both."""
  data = k.slots.kind(slot) == MBARRIER_DATA   # (the asynchronous data of a phase)
  read = reads and data and _unordered_read(*reads, tag)
  if read:
    how, slot, clk, insn, other_tag = "read by", *read
  other_source = k.program.sources[insn] if insn >= 0 else None
  line, text = (k.program.lines[insn], k.program.texts[insn]) if insn >= 0 else (None, None)
  if data and not read:
    bar = k.slots.owner(slot).obj
    stores = f"the asynchronous stores of phase {clk - 1} of {bar.describe()}"
    other = Access(stores, None, None, "asynchronous store", None, line, text, other_source)
    missing = f"an observation of phase {clk - 1} of that mbarrier (a wait on it)"
    findings.report(k, ProtocolError(
        "early-read", f"{what}, {how} {stores} (one issued at {_insn_where(k, insn)}), "
        "which it has not observed", other_source=other_source, access=mine, other=other,
        missing=missing))
    return
  owner = k.slots.owner(slot)
  if owner.kind != THREAD:   # a family's asynchronous accesses (tma.BulkGroups)
    who, missing = owner.obj.describe_access(slot, clk)
    other = Access(who, None, None, "asynchronous " + ("write" if how == "written by" else
                   "read"), None, line, text, other_source)
    findings.report(k, ProtocolError(
        "race", f"{what}, {how} {who} (one issued at {_insn_where(k, insn)}), with no "
        f"happens-before between them; missing: {missing}", other_source=other_source,
        access=mine, other=other, missing=missing))
    return
  by = owner.obj
  kind = "write-after-read: " if how == "read by" else ""   # (only writes meet reads)
  missing = _missing(by, slot, clk, th, tag, other_tag)
  other = Access(f"CTA {by.cta} thread {by.tid}", by.cta, by.tid,
                 _kind(how == "written by", other_tag), None, line, text, other_source)
  findings.report(k, ProtocolError(
      "race", f"{kind}{what}, {how} CTA {by.cta} thread {by.tid} at {_insn_where(k, insn)}, "
      f"with no happens-before between them; {missing}", other_source=other_source,
      access=mine, other=other, missing=missing))


def _missing(other, slot, clk, th, tag, other_tag) -> str:
  """What a race's message says is missing between the two accesses."""
  if tag and other_tag:
    return (f"both are strong, but not morally strong (.{_SCOPE_NAMES[other_tag[1]]} "
            f"by CTA {other_tag[0]}, bytes {other_tag[2]}..+{other_tag[3]}; "
            f".{_SCOPE_NAMES[tag[1]]} by CTA {tag[0]}, bytes {tag[2]}..+{tag[3]}: each "
            "scope must include the other's thread, .cluster across CTAs, and the "
            "accesses must overlap completely)")
  if th.unscoped[slot] >= clk:
    rel, acq = (_SCOPE_NAMES[s] for s in th.unscoped_pair)
    return (f"they synchronised only through a release at .{rel} scope and an "
            f"acquire at .{acq} scope, across CTAs: not morally strong (both scopes "
            "must include both threads: .cluster)")
  if other.cta != th.cta:
    return ("no release by that thread after its access is acquired by this one "
            "at a scope that includes both CTAs (.cluster)")
  return ("no release by that thread after its access (an arrive, bar.sync, a "
          "release fence) is acquired by this one before it")


def _stmatrix_op(k, ins):
  mods = ins.mods
  if mods[:4] != ["sync", "aligned", "m8n8", "x4"] or ins.t != "b16" or \
     not set(mods[4:]) <= {"trans", "shared", "shared::cta", "b16"}:
    raise NotImplementedError(f"opcode {ins.opcode}")
  return _stmatrix(k, "trans" in mods, ins.space, ins.src[0], ins.vals)


def _ldmatrix_op(k, ins):
  mods = ins.mods
  if mods[:3] != ["sync", "aligned", "m8n8"] or ins.t != "b16" or \
     mods[3:4] not in (["x1"], ["x2"], ["x4"]) or \
     not set(mods[4:]) <= {"trans", "shared", "shared::cta", "b16"}:
    raise NotImplementedError(f"opcode {ins.opcode}")
  dests = ins.ops[0][1] if ins.ops[0][0] == "vec" else [ins.ops[0]]
  return _ldmatrix(k, "trans" in mods, ins.space, dests, ins.src[1])


def _ldmatrix(k, trans, space, dests, addr):
  """``ldmatrix.sync.aligned.m8n8.x<n>{.trans}.shared.b16 {r0..}, [p]``: a warp loads
  n 8x8 matrices of 16-bit elements (stmatrix's inverse).  Lane ``8i + j`` gives the
  address of row ``j`` of matrix ``i``; register ``ri`` of lane ``l`` receives row
  ``l // 4``, columns ``2 (l % 4)`` and ``+1`` (low half first) of matrix ``i``;
  ``.trans`` loads each matrix transposed (register row ``r`` = memory column ``r``)."""
  puts, pc = [program.setter(o, 32) for o in dests], len(k.program.code)

  def resolve(lanes):
    rows = []                                  # rows[8 i + j]: row j of matrix i
    for reader in lanes[:8 * len(puts)]:
      buf, off = addresses.mem(k, reader, space, addr(reader), 16)
      _access(k, reader, buf, off, 16, write=False, insn=pc)
      rows.append(bytes(buf[off:off + 16]))
    for lane, th in enumerate(lanes):
      for i, put in enumerate(puts):
        word = 0
        for half, col in enumerate((2 * (lane % 4), 2 * (lane % 4) + 1)):
          r, c = (col, lane // 4) if trans else (lane // 4, col)   # memory row, column
          word |= int.from_bytes(rows[8 * i + r][2 * c:2 * c + 2], "little") << (16 * half)
        put(th, word)
  return sync._warp_collective_at(k, pc, resolve)


def _stmatrix(k, trans, space, addr, regs):
  """``stmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 [p], {r0..r3}``: a warp stores
  four 8x8 matrices of 16-bit elements.  Lane ``8i + j`` gives the address of row
  ``j`` of matrix ``i``; register ``ri`` of lane ``l`` holds row ``l // 4``, columns
  ``2 (l % 4)`` and ``+1`` (low half first) of matrix ``i``.  ``.trans`` stores each
  matrix transposed: memory row ``j`` gets the matrix's column ``j``."""
  pc = len(k.program.code)

  def resolve(lanes):
    rows = [addr(th) for th in lanes]          # lane 8i + j: row j of matrix i
    data = [[g(th) for g in regs] for th in lanes]
    for i in range(4):
      for j in range(8):
        row = bytearray(16)
        for c in range(8):                     # memory column c of memory row j
          r, col = (c, j) if trans else (j, c)  # fragment element (row, column)
          word = data[4 * r + col // 2][i]
          half = (word >> (16 * (col % 2))) & 0xFFFF
          row[2 * c:2 * c + 2] = half.to_bytes(2, "little")
        writer = lanes[8 * i + j]
        buf, off = addresses.mem(k, writer, space, rows[8 * i + j], 16)
        _access(k, writer, buf, off, 16, write=True, insn=pc)
        _write(k, buf, off, 16, [int.from_bytes(row, "little")], None, weak=True)
  return sync._warp_collective_at(k, pc, resolve)


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/emu/test_opcode_table.py compiles every one).
OPCODES = {
    "stmatrix": Opcode(_stmatrix_op, ("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r1], {%r2, %r3, %r4, %r5}",
                                      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%r1], {%r2, %r3, %r4, %r5}"),
                       ("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%r1], {%r2, %r3}",)),
    "ldmatrix": Opcode(_ldmatrix_op, ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r2, %r3, %r4, %r5}, [%r1]",
                                      "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%r2}, [%r1]"),
                       ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%r2, %r3}, [%r1]",)),
}
