"""The access core of the PTX checker: every access to shared or global memory is checked
against the bytes' history here and recorded, whoever makes it (a thread, an
asynchronous operation landing), through which proxy.

``check_and_record(k, who, vc, where, off, n, ...)`` is the one entry for a family:
``where`` is a CTA (its shared memory) or a global buffer; ``who`` a thread or an
asynchronous operation (anything with a ``completion``); ``vc`` the clock the access is
ordered by; ``stamp`` the (slot, clock, instruction) it is known by afterwards; ``proxy``
"generic" (a thread's ``ld`` / ``st``) or "async" (a bulk or tensor copy: its
shared-memory accesses meet the threads' unfenced writes, ``proxy.check_source``).  A
finding is reported (``findings.report``) and the access recorded all the same, as the
run goes on.  The hot paths of the families call the pieces directly:
``thread_access`` (a thread's access), ``check_shared`` (shared memory, any author),
``global_race`` (a conflict the global shadow returned), ``write_values`` (the bytes
written, and the strong-location states they end: ``forget_flags``), and for messages
``name_of``, ``access_of``, ``access_kind``, ``insn_where``, ``conflict``, ``trace``.

Functions of the machine ``k`` (``machine.Machine``): its ``smem`` / ``shadow`` /
``smem_cta`` (the CTAs' shared memories and their histories), ``gshadow`` (the global
buffers' history), ``flags`` (strong locations' release states), ``threads`` and
``slots`` (who owns each clock slot: ``slots.SlotTable``).
"""

from __future__ import annotations

from mosaic_async_store.check import findings, proxy
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.memory import SCOPES, Access, shown_source, tags_morally_strong
from mosaic_async_store.check.ops import reduce_op
from mosaic_async_store.check.slots import MBARRIER_DATA, THREAD

__all__ = ["check_and_record", "check_and_record_runs", "thread_access", "check_shared",
           "global_race", "write_values", "forget_flags", "name_of", "access_of", "access_kind",
           "insn_where", "conflict", "trace", "global_access", "MAX_STRONG"]

_SCOPE_NAMES = {rank: name for name, rank in SCOPES.items()}
MAX_STRONG = 8   # bytes: the widest strong access the checker runs (b64)


def check_and_record(k, who, vc, where, off, n, *, write, stamp, proxy_kind="generic",
                     atomic=False, tag=None):
  """Checks the access of ``n`` bytes at ``off`` of ``where`` (a CTA's index: its
  shared memory; else a global buffer) by ``who`` with clock ``vc`` and records it with
  ``stamp`` (module doc); an "async" access is also checked against the threads'
  unfenced writes (``proxy.check_source``, ``proxy.check_global_source``)."""
  if type(where) is int:
    if proxy_kind == "async":
      proxy.check_source(k, who, k.shadow[where], where, off, n,
                         "writes" if write else "reads")
    check_shared(k, vc, None if hasattr(who, "completion") else who, where, off, n,
                 write=write, atomic=atomic, who=who, stamp=stamp, tag=tag)
    return
  if proxy_kind == "async":
    proxy.check_global_source(k, who, where, off, n, "writes" if write else "reads")
  bad = k.gshadow.access(_Stamped(who, vc, stamp[0]), where, off, n, write, atomic,
                         stamp[2], tag, stamp[1])
  if bad is not None:
    global_race(k, who, where, off, n, write, bad, tag, stamp[2])


def check_and_record_runs(k, who, vc, where, runs, *, write, stamp, proxy_kind="generic",
                          atomic=False):
  """``check_and_record`` of each (offset, bytes) of ``runs`` (disjoint: an access of
  none changes what another finds), in order.  A global buffer's runs through the
  asynchronous proxy (a tile's rows in a larger tensor) are checked against the threads'
  unfenced writes at once where none of their bytes has one (else run by run, where the
  finding names its run), then each checked and recorded."""
  if type(where) is not int and proxy_kind == "async" and len(runs) > 1 and \
     proxy.global_sources_fenced(k, who, where, runs):
    proxy_kind = "generic"   # (in global memory it says only whether to check the proxy)
  for off, n in runs:
    check_and_record(k, who, vc, where, off, n, write=write, stamp=stamp,
                     proxy_kind=proxy_kind, atomic=atomic)


class _Stamped:
  """``who`` as ``global_memory.GlobalShadow.access`` takes it: ``vc`` to check with,
  ``slot`` to record in (the clock is given apart: ``stamp``)."""

  __slots__ = ("slot", "vc", "cta", "tid")

  def __init__(self, who, vc, slot):
    issuer = who.th if hasattr(who, "completion") else who
    self.slot, self.vc, self.cta, self.tid = slot, vc, issuer.cta, issuer.tid


def forget_flags(k, buf, off, n):
  """A write over [off, off + n) of ``buf``: the release states it overlaps end
  (``k.flags``: (buffer id, offset) -> ``strong._Location``; a strong access is at
  most ``MAX_STRONG`` bytes, so only locations from ``off - 7`` on can overlap)."""
  flags, i = k.flags, id(buf)
  for o in range(off - MAX_STRONG + 1, off + n):
    state = flags.get((i, o))
    if state is not None and o + state.size > off:
      del flags[(i, o)]


def _unordered_read(sh, vc, off, n, tag):
  """(slot, clock, instruction, tag) of a read of these bytes since their last write
  that a write with clock ``vc`` (and ``tag``) is not ordered after, or None."""
  for accesses in filter(None, sh.readers[off:off + n]):
    for r, (clk, insn, other) in accesses.items():
      if vc[r] < clk and not (tag and tags_morally_strong(tag, other)):
        return r, clk, insn, other
  return None


def name_of(who) -> str:
  """An access's author for a message: a Thread, or an asynchronous operation (an
  ``asyncops.AsyncOp``, a ``bulk_op.BulkOp``: anything with a completion)."""
  return who.text if hasattr(who, "completion") else f"CTA {who.cta} thread {who.tid}"


def write_values(k, buf, off, size, values, red, *, weak):
  """Writes (or reduces) ``values`` at ``off``; a weak write ends the release state
  of the locations it overlaps (strong.py)."""
  k.epoch += 1
  if weak and k.flags:
    forget_flags(k, buf, off, size * len(values))
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


def trace(k, th, buf, off, n):
  """Records one thread's store into SMEM for ``store_trace`` (``run.launch``):
  asynchronous stores, and plain st/red that spell their state space with a
  ``::cta`` / ``::cluster`` qualifier, as both implementations' store code does;
  the kernels' own SMEM copies (LLVM's ``st.shared``) are left out."""
  if buf is not th.local:
    k.store_trace.setdefault((th.cta, th.tid), []).append((_cta_of(k, buf), off, n))


def _cta_of(k, buf):
  return k.smem_cta[id(buf)]


def thread_access(k, th, buf, off, n, *, write, insn, atomic=False, tag=None):
  """A thread's access to ``buf`` by instruction ``insn`` (its index): checked
  against the byte history if it is SMEM or global memory (``tag``: see
  ``shadow.Shadow.conflict``); local memory and parameters have none."""
  cta = k.smem_cta.get(id(buf))
  if cta is not None:
    check_shared(k, th.vc, th, cta, off, n, write=write, atomic=atomic,
                who=th, stamp=(th.slot, th.vc[th.slot], insn), tag=tag)
  elif id(buf) in k.gshadow.pages:
    global_access(k, th, buf, off, n, write=write, insn=insn, atomic=atomic, tag=tag)


def global_access(k, th, buf, off, n, *, write, insn, atomic=False, tag=None):
  """``_access`` to global buffer ``buf`` (global_memory: no asynchronous stores,
  no mbarriers, no exit rule)."""
  bad = k.gshadow.access(th, buf, off, n, write, atomic, insn, tag)
  if bad is not None:
    global_race(k, th, buf, off, n, write, bad, tag, insn)


def global_race(k, who, buf, off, n, write, bad, tag, insn):
  """Reports the race ``bad`` (``shadow.Shadow.conflict``'s tuple) in global memory,
  as in SMEM, naming the buffer; ``who``: the accessing thread or asynchronous
  operation; ``insn``: the accessing instruction's index."""
  memory = k.gshadow.describe(buf, off, n)
  asynchronous = hasattr(who, "completion")
  kind = ("asynchronous " + ("write" if write else "read") if asynchronous else
          access_kind(write, tag))
  mine = access_of(k, who, kind, memory, insn)
  conflict(k, f"{name_of(who)} {'writes' if write else 'reads'} {memory}", *bad,
           who.th if asynchronous else who, tag, mine=mine)


def check_shared(k, vc, th, cta, off, n, *, write, atomic, who, stamp, tag=None):
  """Reports a finding (``findings.report``) unless the access is ordered after the
  conflicting earlier ones; then records it (``stamp``: the (slot, clock) it is known by; ``who``: the
  accessing Thread or AsyncOp, named in a message; ``tag``: a strong access's
  (CTA, scope, offset, bytes), None for a weak one)."""
  sh = k.shadow[cta]
  if any(sh.mbar_bytes[off:off + n]):   # (sh.barrier_bytes, inline: a hot path)
    who = name_of(who)
    raise Stop(Finding("barrier-memory", f"{who} {'writes' if write else 'reads'} CTA "
                        f"{cta} SMEM bytes {off}..{off + n - 1}, which hold an initialised "
                        "mbarrier"))
  bad = sh.conflict(vc, off, n, write=write, atomic=atomic, tag=tag)
  if bad is not None:
    memory = f"CTA {cta} SMEM bytes {off}..{off + n - 1}"
    what = f"{name_of(who)} {'writes' if write else 'reads'} {memory}"
    kind = access_kind(write, tag) if th is not None else (
        "asynchronous reduction" if atomic else "asynchronous store" if write else
        "asynchronous read")
    mine = access_of(k, who, kind, memory, stamp[2])
    if bad[0] == "in flight":
      findings.report(k, Finding("early-read", f"{what} while an asynchronous store "
                                       "into them is in flight", access=mine))
    else:
      conflict(k, what, *bad, th if th is not None else who.th, tag,
                reads=(sh, vc, off, n) if write else None, mine=mine)
  sh.record(off, n, write=write, atomic=atomic, stamp=stamp, tag=tag)


def insn_where(k, insn):
  """Instruction ``insn`` for a message: its PTX line, its source line (if the PTX
  has line info) and its text."""
  if insn < 0:
    return "?"
  source = k.program.sources[insn]
  shown = f" ({shown_source(source)})" if source is not None else ""
  return f"PTX line {k.program.lines[insn]}{shown}: `{k.program.texts[insn]}`"


def access_kind(write, tag):
  """An access's kind for ``memory.Access``: a strong one has a ``tag``."""
  return ("strong " if tag else "") + ("write" if write else "read")


def access_of(k, who, kind, memory, insn):
  """``memory.Access`` of an access by ``who`` (a Thread, or an AsyncOp: its issuer)
  by instruction ``insn``."""
  issuer = who.th if hasattr(who, "completion") else who
  known = insn is not None and insn >= 0
  return Access(name_of(who), issuer.cta, issuer.tid, kind, memory,
                k.program.lines[insn] if known else None,
                k.program.texts[insn] if known else None,
                k.program.sources[insn] if known else None)


def conflict(k, what, how, slot, clk, insn, other_tag, th, tag, *, reads=None, mine=None):
  """Reports the race (or early read) between this access (``what``, by or issued by
  thread ``th``; ``tag``: see ``shadow.Shadow.conflict``) and the earlier one of
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
    findings.report(k, Finding(
        "early-read", f"{what}, {how} {stores} (one issued at {insn_where(k, insn)}), "
        "which it has not observed", other_source=other_source, access=mine, other=other,
        missing=missing))
    return
  owner = k.slots.owner(slot)
  if owner.kind != THREAD:   # a family's asynchronous accesses (bulk_groups.BulkGroups)
    who, missing = owner.obj.describe_access(slot, clk)
    other = Access(who, None, None, "asynchronous " + ("write" if how == "written by" else
                   "read"), None, line, text, other_source)
    findings.report(k, Finding(
        "race", f"{what}, {how} {who} (one issued at {insn_where(k, insn)}), with no "
        f"happens-before between them; missing: {missing}", other_source=other_source,
        access=mine, other=other, missing=missing))
    return
  by = owner.obj
  kind = "write-after-read: " if how == "read by" else ""   # (only writes meet reads)
  missing = _missing(by, slot, clk, th, tag, other_tag)
  other = Access(f"CTA {by.cta} thread {by.tid}", by.cta, by.tid,
                 access_kind(how == "written by", other_tag), None, line, text, other_source)
  findings.report(k, Finding(
      "race", f"{kind}{what}, {how} CTA {by.cta} thread {by.tid} at {insn_where(k, insn)}, "
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

