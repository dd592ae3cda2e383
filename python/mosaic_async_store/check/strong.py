"""Strong memory operations of the PTX checker, with the reads-from relation:
``ld.relaxed`` / ``ld.acquire`` / ``ld.volatile``, ``st.relaxed`` / ``st.release`` /
``st.volatile``, ``red`` (``.relaxed`` or ``.release``) and ``atom`` (every ``.sem``).

Functions of the machine ``k`` (``machine.Machine``), with ``k.flags`` (each
strongly written location's release state) and ``k.epoch``.

The PTX ISA's rules, as run here (Memory Consistency Model):
  * "Strong operations": an ``ld``/``st`` with ``.relaxed``, ``.acquire`` /
    ``.release`` or ``.volatile`` ("the same memory synchronization semantics as
    .relaxed.sys"), and every ``red`` and ``atom``.  ``red`` and ``atom`` without
    ``.sem`` are ``.relaxed``, without ``.scope`` ``.gpu``; ``ld``/``st`` name both.
    Two strong accesses that are morally strong (each one's scope includes the
    other's thread, and they overlap completely: ``memory.tags_morally_strong``) do
    not race; every other pair of conflicting accesses must be ordered.
  * "Release and acquire patterns" / "Synchronizes-with": a release (``.release``,
    ``.acq_rel``, a relaxed write after a release fence, or a strong write after a
    release on the same location by the same thread: the ISA's release pattern "a
    release operation on M followed by a strong write on M in program order") synchronises with an
    acquire (``.acquire``, ``.acq_rel``, or a relaxed read followed by an acquire
    fence) that reads the value it wrote, or a value written by an atomic
    read-modify-write after it (``red``, ``atom``: the release sequence of the C++
    model that the ISA's atomics mapping implements), when their scopes make them
    morally strong.
  * Stale reads (store buffering): each location (buffer, offset, size) that a
    strong write wrote keeps its last values in coherence order (``_Location``),
    each with its *release state*: the clocks its release sequence published
    (``memory.Releases``, by CTA and scope) and the threads that wrote it (what a
    reader knows has completed: the exit rule).  A strong load may read any value
    no older than the newest one it is ordered after (``_read``): the oldest such
    on a thread's first read since the location's newest write, the newest on a
    retry; ``atom`` / ``red`` read the newest.  A plain write or another size over
    it forgets the location; a read of another size reads the bytes and acquires
    nothing.  ``fence.sc`` / ``membar`` order the writes before them (fences.py).
  * A strong read yields (it may be a poll: ``run`` parks a thread that polls in
    the same state with nothing changed, and reports a hang if nothing ever will).

Vector strong accesses, ``.mmio``, ``.sc`` on ``ld``/``st``, ``atom`` on 16-bit
and 128-bit types, and ``atom.cas``/``.exch`` on anything but ``b32``/``b64`` are
refused by name.
"""

from __future__ import annotations

from mosaic_async_store.check import access_core, addresses, program, sync
from mosaic_async_store.check.memory import SCOPES, SEMS, Releases
from mosaic_async_store.check.family import Family
from mosaic_async_store.check.opcodes import Opcode, check_qualifiers
from mosaic_async_store.check.ops import RED, RED_FORMS, reduce_op
from mosaic_async_store.check.outcomes import YIELD

__all__ = ["MEMORY_SEMS", "strong_semantics", "OPCODES", "FAMILY"]


MEMORY_SEMS = (*SEMS, "weak", "volatile", "mmio")
# .sem each opcode accepts, and its default (None: weak, no scope)
_ALLOWED = {"ld": ({"weak", "relaxed", "acquire", "volatile"}, None),
            "st": ({"weak", "relaxed", "release", "volatile"}, None),
            "red": ({"relaxed", "release"}, "relaxed"),
            "atom": ({"relaxed", "acquire", "release", "acq_rel"}, "relaxed")}


# atom's qualifier grammar (PTX ISA, atom), as far as the checker runs it
_ATOM = {"sem": set(MEMORY_SEMS), "scope": set(SCOPES),
         "state space": {"global", "shared", "shared::cta", "shared::cluster"},
         "operation": set(RED) | {"cas", "exch"}, "noftz": {"noftz"},
         "type": {"b32", "b64", "u32", "u64", "s32", "s64", "f32", "f16", "bf16", "f16x2",
                  "bf16x2"}}


def strong_semantics(ins):
  """(sem, scope rank) of a strong ``ld``/``st``/``red``/``atom``, or None for a weak
  ``ld``/``st``; refuses a ``.sem`` the opcode does not take, or a missing scope."""
  allowed, default = _ALLOWED[ins.base]
  sems = [m for m in ins.mods if m in MEMORY_SEMS]
  scopes = [m for m in ins.mods if m in SCOPES]
  if len(sems) > 1 or len(scopes) > 1 or (sems and sems[0] not in allowed):
    raise NotImplementedError(f"opcode {ins.opcode} (.sem {'.'.join(sems)}: not one of "
                              f"{', '.join(sorted(allowed))})")
  sem = sems[0] if sems else default
  if sem == "volatile":
    if scopes:
      raise NotImplementedError(f"opcode {ins.opcode} (.volatile takes no scope)")
    return "relaxed", SCOPES["sys"]
  if sem in (None, "weak"):
    if scopes:
      raise NotImplementedError(f"opcode {ins.opcode} (a scope without .sem)")
    return None
  if not scopes and ins.base in ("ld", "st"):
    raise NotImplementedError(f"opcode {ins.opcode} (.{sem} needs a .scope)")
  return sem, SCOPES[scopes[0]] if scopes else SCOPES["gpu"]


# Strong loads, stores and read-modify-writes, and the locations' release state.


def _strong_ld(k, ins, sem, scope):
  """``ld.relaxed`` / ``ld.acquire`` / ``ld.volatile``: a strong read; it acquires
  the release state of the location it reads (``.acquire``), or keeps it for a
  later acquire fence (relaxed); then it yields (a poll)."""
  if ins.ops[0][0] == "vec" or ins.t[0] == "s" and ins.bits < 32:
    raise NotImplementedError(f"opcode {ins.opcode}")
  put, addr = program.setter(k, ins.ops[0], ins.bits), ins.src[1]
  size, space = ins.bits // 8, ins.space
  insn = len(k.program.code)
  def load(th):
    buf, off = addresses.mem(k, th, space, addr(th), size)
    access_core.thread_access(k, th, buf, off, size, write=False, insn=insn, tag=(th.cta, scope, off, size))
    put(th, _read(k, th, buf, off, size, sem, scope))
    th.polled = True
    return YIELD
  return load


def _atom(k, ins):
  """``atom{.sem}{.scope}{.space}.op.type d, [a], b{, c}``: returns the old value
  and writes ``op(old, b)`` (``cas``: ``c`` if old == b; ``exch``: b) as one
  strong read-modify-write; the integer ops and float adds of ``red``."""
  sem, scope = strong_semantics(ins)
  op = next((m for m in ins.mods if m in RED + ("cas", "exch")), None)
  floats = ins.t[0] == "f" or ins.t[:2] == "bf"
  if op in ("cas", "exch"):
    ok = ins.t in ("b32", "b64") and len(ins.ops) == (4 if op == "cas" else 3)
  else:
    ok = (op, ins.t) in RED_FORMS and len(ins.ops) == 3 and \
        ("noftz" in ins.mods) == (floats and ins.t != "f32")
  check_qualifiers(ins, _ATOM, "atom")
  if not ok or ins.ops[0][0] != "reg":
    raise NotImplementedError(f"opcode {ins.opcode}")
  size, t, space, addr = ins.bits // 8, ins.t, ins.space, ins.src[1]
  put, b = program.setter(k, ins.ops[0], ins.bits), ins.src[2]
  c, mask = ins.src[3] if op == "cas" else None, (1 << ins.bits) - 1
  insn = len(k.program.code)
  def atom(th):
    buf, off = addresses.mem(k, th, space, addr(th), size)
    access_core.thread_access(k, th, buf, off, size, write=True, atomic=True, insn=insn,
                 tag=(th.cta, scope, off, size))
    before = bytes(buf[off:off + size])   # the latest value: a read-modify-write is never stale
    old, new = int.from_bytes(before, "little"), b(th) & mask
    if op == "exch":
      value = new
    elif op == "cas":
      value = (c(th) & mask) if old == new else old
    else:
      value = reduce_op(op, t, old, new, shared=id(buf) in k.smem_cta)   # (f32: ftz or not)
    if value != old:   # (a failed cas in a spin loop changes nothing: it may park)
      buf[off:off + size] = value.to_bytes(size, "little")
      k.epoch += 1
    put(th, old)
    _read(k, th, buf, off, size, sem, scope, latest=True)
    _publish(k, th, buf, off, size, sem, scope, rmw=True, before=before)
    th.polled = True
    return YIELD
  return atom


# -- the locations' release state ---------------------------------------------------


class _Write:
  """One value of a strongly written location, in coherence order: its ``index``
  there, its bytes, the release state it carries (``memory.Releases``: its own
  release, or the release sequence it continues), ``writers`` (slot -> clock: the
  threads whose writes it shows complete, for the exit rule) and ``seen_by`` (slot ->
  clock of each thread's first write or read of it: an access that happens after one
  of them may not read an older value, by coherence)."""

  __slots__ = ("index", "value", "releases", "writers", "seen_by")

  def __init__(self, index, value, releases, writers, seen_by):
    self.index, self.value, self.releases = index, value, releases
    self.writers, self.seen_by = writers, seen_by


class _Location:
  """A strongly written location of ``size`` bytes: its last ``_KEEP`` values in
  coherence order (``writes``; the first, when nothing was dropped, is the value
  before its first strong write) and how many values it has had (``count``)."""

  __slots__ = ("size", "writes", "count")

  def __init__(self, size, before):
    self.size, self.count = size, 1
    self.writes = [_Write(0, before, Releases(), {}, {})]


_KEEP = 8   # values of a location a read may choose from (fewer: fewer stale reads)


def _location(k, buf, off, size):
  loc = k.flags.get((id(buf), off))
  return loc if loc is not None and loc.size == size else None


def _read(k, th, buf, off, size, sem, scope, *, latest=False):
  """The value a strong read of ``th`` returns, and what it learns from it.  Any value
  no older than the newest one the read is ordered after (a write or read of it that
  happens before the read: coherence; ``_Write.seen_by``) may be read (PTX ISA,
  Memory Consistency Model: "Coherence" / "Causality order"); the checker returns the
  oldest such value on the thread's first read of the location since its newest
  write (a store-buffering outcome: a fence.acq_rel does not forbid it, fence.sc
  orders the fences and so the writes before them) and the newest on a retry, so that
  a poll loop ends.  ``latest``: a read-modify-write, which reads the newest.
  Then ``th`` acquires the release state of the value read (``.acquire`` /
  ``.acq_rel``) or keeps it for an acquire fence (relaxed)."""
  loc = _location(k, buf, off, size)
  if loc is None:
    return int.from_bytes(buf[off:off + size], "little")
  writes, vc = loc.writes, th.vc
  top = len(writes) - 1
  floor = next((i for i in range(top, 0, -1)
                if any(vc[s] >= c for s, c in writes[i].seen_by.items())), 0)
  mark = (id(buf), off, size)
  pick = top
  if not latest and floor < top and th.stale_read.get(mark) != writes[top].index:
    th.stale_read[mark], pick = writes[top].index, floor
  entry = writes[pick]
  entry.seen_by.setdefault(th.slot, int(vc[th.slot]))   # (its first read: the earliest)
  read = k.flag_reads[th.cta] if k.smem_cta.get(id(buf)) == th.cta else None
  for slot, clk in entry.writers.items():
    th.seen[slot] = max(th.seen[slot], clk)
    if read is not None:   # that write itself completed (the exit rule: it alone)
      read[(off, slot)] = max(read.get((off, slot), 0), clk)
  if sem in ("acquire", "acq_rel"):
    entry.releases.acquire_into(th, scope)
  else:   # a snapshot: later writes to the location must not reach this read
    th.pending_obs.append((entry.releases.merged(Releases()), scope, None, 0))
  return int.from_bytes(entry.value, "little")


def _publish(k, th, buf, off, size, sem, scope, *, rmw, before):
  """A strong write of ``th`` to the location, whose bytes were ``before``: a new
  value in its coherence order, whose release state is this write's release (a plain
  write's) or continues the previous one's (a read-modify-write)."""
  key = (id(buf), off)
  loc = _location(k, buf, off, size) or _Location(size, before)
  prev = loc.writes[-1]
  releases = prev.releases.merged(Releases()) if rmw else Releases()
  writers = dict(prev.writers) if rmw else {}
  clk = int(th.vc[th.slot])
  writers[th.slot] = clk
  access_core.forget_flags(k, buf, off, size)
  if sem in ("release", "acq_rel"):   # what a later strong write of th continues
    mine = Releases()
    mine.add(th.cta, scope, th.vc)
    th.released[(key, size)] = mine
  elif (key, size) in th.released:   # a release pattern: th's earlier release on
    releases = releases.merged(th.released[(key, size)])   # the location, then this
  sync._release(k, th, sem, scope, releases)   # (advances th's clock)
  loc.writes.append(_Write(loc.count, bytes(buf[off:off + size]), releases, writers,
                           {th.slot: clk}))
  loc.count += 1
  del loc.writes[:-_KEEP]
  k.flags[key] = loc


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/checker/test_opcode_table.py compiles every one).
OPCODES = {
    "atom": Opcode(_atom, ("atom.shared.add.u32 %r1, [%r2], 1",
                           "atom.acquire.cluster.shared::cluster.or.b32 %r1, [%r2], %r3",
                           "atom.acq_rel.gpu.global.cas.b64 %rd1, [%rd2], %rd3, %rd4",
                           "atom.release.cta.shared::cta.exch.b32 %r1, [%r2], %r3",
                           "atom.global.min.s32 %r1, [%rd2], %r3",
                           "atom.shared.add.f32 %f1, [%r2], %f3"),
                   ("atom.sc.gpu.global.add.u32 %r1, [%rd2], %r3",
                    "atom.shared.cas.b16 %h1, [%r2], %h3, %h4",
                    "atom.shared.add.f16 %h1, [%r2], %h3",
                    "atom.global.v2.f32.add %rd1, [%rd2], %rd3")),
}

FAMILY = Family("strong", OPCODES)
