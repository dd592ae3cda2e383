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
  * The run is one interleaving, so a load reads the latest write.  Each location
    (buffer, offset, size) that a strong write wrote keeps its *release state*:
    the clocks its release sequence published (``memory.Releases``, by CTA and
    scope) and the threads that wrote it (what a reader knows has completed: the
    exit rule).  A plain write or another size over it forgets the state; a read of
    another size acquires nothing.
  * A strong read yields (it may be a poll: ``run`` parks a thread that polls in
    the same state with nothing changed, and reports a hang if nothing ever will).

Vector strong accesses, ``.mmio``, ``.sc`` on ``ld``/``st``, ``atom`` on 16-bit
and 128-bit types, and ``atom.cas``/``.exch`` on anything but ``b32``/``b64`` are
refused by name.
"""

from __future__ import annotations

from mosaic_async_store.check import access, addresses, program, sync
from mosaic_async_store.check.memory import SCOPES, SEMS, Releases
from mosaic_async_store.check.opcodes import Opcode, check_qualifiers
from mosaic_async_store.check.ops import RED, RED_FORMS, reduce_op
from mosaic_async_store.check.outcomes import YIELD

__all__ = ["MEMORY_SEMS", "strong_semantics", "OPCODES"]

_MAX_STRONG = 8   # bytes: the widest strong access the checker runs (b64)
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
  put, addr = program.setter(ins.ops[0], ins.bits), ins.src[1]
  size, space = ins.bits // 8, ins.space
  insn = len(k.program.code)
  def load(th):
    buf, off = addresses.mem(k, th, space, addr(th), size)
    access._access(k, th, buf, off, size, write=False, insn=insn, tag=(th.cta, scope, off, size))
    put(th, int.from_bytes(buf[off:off + size], "little"))
    _reads_from(k, th, buf, off, size, sem, scope)
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
  put, b = program.setter(ins.ops[0], ins.bits), ins.src[2]
  c, mask = ins.src[3] if op == "cas" else None, (1 << ins.bits) - 1
  insn = len(k.program.code)
  def atom(th):
    buf, off = addresses.mem(k, th, space, addr(th), size)
    access._access(k, th, buf, off, size, write=True, atomic=True, insn=insn,
                 tag=(th.cta, scope, off, size))
    old, new = int.from_bytes(buf[off:off + size], "little"), b(th) & mask
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
    _reads_from(k, th, buf, off, size, sem, scope)
    _publish(k, th, buf, off, size, sem, scope, rmw=True)
    th.polled = True
    return YIELD
  return atom


# -- the locations' release state ---------------------------------------------------


def _reads_from(k, th, buf, off, size, sem, scope):
  """``th`` read the location: it learns that its writers' writes completed, and
  acquires their release state (``.acquire`` / ``.acq_rel``), or keeps it for an
  acquire fence (relaxed)."""
  state = k.flags.get((id(buf), off))
  if state is None or state[0] != size:
    return
  _, releases, writers = state
  read = k.flag_reads[th.cta] if k.smem_cta.get(id(buf)) == th.cta else None
  for slot, clk in writers.items():
    th.seen[slot] = max(th.seen[slot], clk)
    if read is not None:   # that write itself completed (the exit rule: it alone)
      read[(off, slot)] = max(read.get((off, slot), 0), clk)
  if sem in ("acquire", "acq_rel"):
    releases.acquire_into(th, scope)
  else:   # a snapshot: later writes to the location must not reach this read
    th.pending_obs.append((releases.merged(Releases()), scope, None, 0))


def _publish(k, th, buf, off, size, sem, scope, *, rmw):
  """A strong write of ``th`` to the location: its release state becomes this
  write's release (a plain write's) or continues with it (a read-modify-write)."""
  key = (id(buf), off)
  old = k.flags.get(key) if rmw else None
  if old is not None and old[0] != size:
    old = None
  releases = Releases() if old is None else old[1].merged(Releases())
  writers = {} if old is None else dict(old[2])
  writers[th.slot] = int(th.vc[th.slot])
  _forget_flags(k, buf, off, size)
  if sem in ("release", "acq_rel"):   # what a later strong write of th continues
    mine = Releases()
    mine.add(th.cta, scope, th.vc)
    th.released[(key, size)] = mine
  elif (key, size) in th.released:   # a release pattern: th's earlier release on
    releases = releases.merged(th.released[(key, size)])   # the location, then this
  sync._release(k, th, sem, scope, releases)   # (advances th's clock)
  k.flags[key] = (size, releases, writers)


def _forget_flags(k, buf, off, n):
  """A write over [off, off + n) of ``buf``: the release states it overlaps end
  (``k.flags``: (buffer id, offset) -> (bytes, releases, writers); a strong
  access is at most 8 bytes, so only locations from ``off - 7`` on can overlap)."""
  flags, i = k.flags, id(buf)
  for o in range(off - _MAX_STRONG + 1, off + n):
    state = flags.get((i, o))
    if state is not None and o + state[0] > off:
      del flags[(i, o)]


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/emu/test_opcode_table.py compiles every one).
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
