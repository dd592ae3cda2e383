"""Control and hint opcodes of the PTX checker: ``exit`` / ``ret``, ``call`` (the
kernel's vprintf failure report, logged in ``Machine.calls``), ``nanosleep`` (a
poll's pause: the thread yields), ``setmaxnreg`` (below), and ``bra`` (resolved by the
parser, ``program``; listed here for the table).

``setmaxnreg`` (warp specialisation): what the ISA says (PTX ISA, setmaxnreg), and what
the checker does with each sentence:

  * "The mandatory .sync qualifier indicates that setmaxnreg instruction causes the
    executing thread to wait until all threads in the warp execute the same setmaxnreg
    instruction": the lanes of a warp meet at it (``warp.aligned_collective``; a lane
    at another instruction is ``aligned-divergence``);
  * "The same setmaxnreg instruction must be executed by all warps in a warpgroup" and
    ".aligned ... all threads in the warpgroup must execute the same setmaxnreg
    instruction": the n-th setmaxnreg of each warp of a warpgroup must be one
    instruction (``setmaxnreg-aligned``);
  * "If a setmaxnreg instruction is not executed by all warps in the warpgroup, then
    the behavior is undefined": a CTA whose warps of one warpgroup executed different
    numbers of setmaxnreg when it exits (a warp that exited or branched around it), or a
    setmaxnreg in a warpgroup with fewer than four warps (a block that is not a multiple
    of 128 threads), is ``setmaxnreg-warpgroup``;
  * "After executing a setmaxnreg instruction, all warps in the warpgroup must
    synchronize explicitly before executing subsequent setmaxnreg instructions": a
    warp's setmaxnreg number n + 1 must happen after every warp of its warpgroup executed
    number n, by happens-before (a ``bar.sync``, an mbarrier, ...; a warp that runs ahead
    is ``setmaxnreg-sync``, whether or not the other warps got there first);
  * "The value of imm-reg-count must be in the range 24 to 256 (both inclusive) and must
    be a multiple of 8": ``setmaxnreg-count`` where it runs;
  * "When qualifier .dec is specified, the maximum number of per-thread registers owned
    by the warp prior to the execution of setmaxnreg instruction should be greater than
    or equal to the imm-reg-count. Otherwise, the behaviour is undefined" (and .inc: less
    than or equal): ``setmaxnreg-direction``, against the warp's count before it: the
    count of its last setmaxnreg ("update the maximum number of per-thread registers
    owned by the executing warp to the value specified by the imm-reg-count operand"),
    or, before its first one, the kernel's ``.maxnreg N`` ("requires that the kernel has
    been launched with a valid value of maximum number of per-thread registers
    specified via ... the appropriate performance tuning directive").  Without
    ``.maxnreg`` the launch's count is not known to PTX (ptxas chooses it), and the
    first setmaxnreg of a warp is not checked ("Otherwise, the setmaxnreg instruction
    may have no effect": not undefined);
  * "A pool of available registers is maintained per-CTA. Register adjustments
    requested by the setmaxnreg instructions are handled by supplying extra registers
    from this pool to the requesting warp or by releasing extra registers from the
    requesting warp to this pool" and "The setmaxnreg.inc instruction blocks the
    execution until enough registers are available in the CTA's register pool": with
    ``.maxnreg N`` every warp's count is known, and the pool is modelled: it starts
    empty (the launch gives each warp N registers per thread), a .dec adds what the warp
    releases (32 threads x the difference), and a .inc takes what it asks for, its lanes
    waiting (``PoolWait``) until the pool holds it; one that no .dec ever satisfies is a
    ``hang`` naming the registers it waits for.  Without ``.maxnreg`` the pool is not
    known and an inc never waits;
  * not checked, and why: "the initial contents of the new registers are undefined. The
    new registers must be initialized before they are used" and "Changes to the register
    file of the warp always happen at the tail-end of the register file" are about
    physical registers, which PTX's virtual registers do not name (ptxas keeps live
    values out of the released tail).
"""

from __future__ import annotations

from mosaic_async_store.check import findings, warp
from mosaic_async_store.check.family import Family
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.outcomes import BLOCK, EXIT, FALLBACK, YIELD
from mosaic_async_store.check.waits import Wait

__all__ = ["OPCODES", "FAMILY", "SETMAXNREG_RULES", "PoolWait"]


def _exit(k, ins):
  """``exit``, ``ret`` (``ret.uni``: the same for the one function the checker runs)."""
  if ins.mods not in ([], ["uni"] if ins.base == "ret" else []) or ins.ops:
    raise NotImplementedError(f"opcode {ins.opcode}")
  return lambda th: EXIT


def _call(k, ins):
  """A call of ``vprintf`` (the kernel's failure report) is logged in ``k.calls``, not
  run; a call of any other function is refused (the checker runs one function)."""
  callee = ins.ops[0][1]
  if ins.mods not in ([], ["uni"]) or callee != "vprintf":
    raise NotImplementedError(f"opcode {ins.opcode} of {callee} (the checker runs no "
                              "function calls; it logs calls of vprintf, the kernel's "
                              "failure report)")
  return lambda th: k.calls.append((th.cta, th.tid, ins.opcode))


def _setmaxnreg(k, ins):
  """``setmaxnreg.{inc,dec}.sync.aligned.u32 N`` (PTX ISA, setmaxnreg): a hint to the
  register allocator with no memory effect.  The lanes of a warp meet at it (``.sync``:
  ``warp.aligned_collective``; a lane elsewhere is ``aligned-divergence``); the met warp
  is checked against every rule of the ISA over its warpgroup (``_execute``:
  the same instruction in all four warps, explicit synchronisation between two, the
  count's range, .inc / .dec against the warp's count), and an .inc waits for the CTA's
  register pool where the kernel gives ``.maxnreg`` (``_pooled``).  A form
  that is not PTX (other qualifiers, a register count) is refused by name."""
  if ins.mods not in (["inc", "sync", "aligned", "u32"], ["dec", "sync", "aligned", "u32"]) \
     or len(ins.ops) != 1 or ins.ops[0][0] != "imm":
    raise NotImplementedError(f"opcode {ins.opcode} (setmaxnreg.{{inc,dec}}.sync.aligned.u32 "
                              "with an immediate count)")
  pc, action, count = len(k.program.code), ins.mods[0], ins.ops[0][1]
  return _pooled(k, warp.aligned_collective(
      k, lambda lanes: _execute(k, lanes, pc, action, count), goes_on=True),
      action, count)


def _nanosleep(k, ins):
  """A hint: let the other threads run (a poll loop's pause: see run.py)."""
  if ins.mods != ["u32"] or len(ins.ops) != 1:
    raise NotImplementedError(f"opcode {ins.opcode}")
  def nanosleep(th):
    th.polled = True
    return YIELD
  return nanosleep


# -- setmaxnreg: its rules over the warpgroup, its state, the register pool ----------

_COUNTS = range(24, 257, 8)   # the ISA's imm-reg-count: 24..256, a multiple of 8

_ISA = "PTX ISA, setmaxnreg: "
SETMAXNREG_RULES = {
    "setmaxnreg-aligned": _ISA + "\"The same setmaxnreg instruction must be executed by all "
                          "warps in a warpgroup\"; \"The mandatory .aligned qualifier "
                          "indicates that all threads in the warpgroup must execute the same "
                          "setmaxnreg instruction. In conditionally executed code, setmaxnreg "
                          "instruction should only be used if it is known that all threads in "
                          "warpgroup evaluate the condition identically, otherwise the "
                          "behavior is undefined.\"",
    "setmaxnreg-warpgroup": _ISA + "\"If a setmaxnreg instruction is not executed by all warps "
                            "in the warpgroup, then the behavior is undefined.\"",
    "setmaxnreg-sync": _ISA + "\"After executing a setmaxnreg instruction, all warps in the "
                       "warpgroup must synchronize explicitly before executing subsequent "
                       "setmaxnreg instructions.\"",
    "setmaxnreg-count": _ISA + "\"The value of imm-reg-count must be in the range 24 to 256 "
                        "(both inclusive) and must be a multiple of 8.\"",
    "setmaxnreg-direction": _ISA + "\"When qualifier .dec is specified, the maximum number of "
                            "per-thread registers owned by the warp prior to the execution "
                            "of setmaxnreg instruction should be greater than or equal to "
                            "the imm-reg-count. Otherwise, the behaviour is undefined. When "
                            "qualifier .inc is specified, [it] should be less than or equal "
                            "to the imm-reg-count. Otherwise, the behaviour is undefined.\"",
}


class _Warpgroup:
  """One warpgroup's setmaxnreg state: ``order`` (the instruction of its n-th setmaxnreg,
  n from ``base``), per warp ``executed`` (how many it ran), ``count`` (its per-thread
  register count: None where not known) and ``stamps`` (n -> warp -> its lanes' (slots,
  own clocks) just after its n-th: what a warp's next one must know)."""

  __slots__ = ("order", "base", "executed", "count", "stamps")

  def __init__(self, launch_count):
    self.order, self.base = [], 0
    self.executed, self.count = [0] * 4, [launch_count] * 4
    self.stamps = {}


# The machine attributes this module keeps per launch (``family.Family.state``):
# (CTA, warpgroup) -> ``_Warpgroup``; CTA -> the registers its pool holds; (CTA, warp)
# -> the registers a warp's pending .inc took from the pool.
_STATE = {"setmaxnreg": dict, "setmaxnreg_pool": dict, "setmaxnreg_taken": dict}


def _launch_count(k):
  """The kernel's ``.maxnreg N`` (``program.Program.maxnreg``), else None."""
  return getattr(k.program, "maxnreg", None)


def _where(cta, group, w):
  return f"CTA {cta} warpgroup {group} warp {w}"


def _execute(k, lanes, pc, action, count):
  """Warp ``lanes`` (its 32 lanes, met) executes ``setmaxnreg.{action}`` ``count`` at
  instruction ``pc``: every rule of the module doc, each a ``Stop`` (the register file is
  undefined after it); then the warp's count is ``count`` and its lanes' clocks tick (a
  release before this instruction does not order it)."""
  th = lanes[0]
  cta, group, w = th.cta, th.tid // 128, th.tid // 32 % 4
  where, text = _where(cta, group, w), k.program.texts[pc]
  if k.block < 128 * (group + 1):
    raise Stop(Finding("setmaxnreg-warpgroup", (
        f"{where}: `{text}` in a warpgroup of {(k.block - 128 * group + 31) // 32} warps (a "
        f"block of {k.block} threads): all four warps of a warpgroup must execute it; "
        "launch a multiple of 128 threads")))
  if count not in _COUNTS:
    raise Stop(Finding("setmaxnreg-count", (
        f"{where}: `{text}`: imm-reg-count {count} is not one of 24..256 in steps of 8; "
        f"use {min(_COUNTS, key=lambda c: abs(c - count))}")))
  state = k.setmaxnreg.get((cta, group))
  if state is None:
    state = k.setmaxnreg[(cta, group)] = _Warpgroup(_launch_count(k))
  n = state.executed[w]
  _check_aligned(k, state, where, n, pc)
  if n:
    _check_synchronized(k, state, lanes, where, n)
  _check_direction(state, where, w, text, action, count, n)
  before = state.count[w]
  state.count[w] = count
  k.setmaxnreg_taken.pop((cta, th.tid // 32), None)   # (an .inc's: taken at ``_pooled``)
  if action == "dec" and before is not None and _launch_count(k) is not None:
    k.setmaxnreg_pool[cta] = k.setmaxnreg_pool.get(cta, 0) + 32 * (before - count)
    k.dirty = True   # (an .inc waiting for the pool may go on)
  rows = k.lane_rows(lanes)
  k.tick(rows)
  state.stamps.setdefault(n, {})[w] = k.lane_stamps(lanes)
  state.executed[w] = n + 1
  passed = min(state.executed)
  for old in [m for m in state.stamps if m < passed - 1]:   # (no warp needs them again)
    del state.stamps[old]
  if passed - state.base >= 64:
    del state.order[:passed - state.base]
    state.base = passed


class PoolWait(Wait):
  """A lane of a warp whose ``setmaxnreg.inc`` needs ``need`` registers the CTA's pool
  does not hold: it executes the instruction again (no advance) once its warp took them
  or the pool holds them."""

  __slots__ = ("need",)
  advance = 0

  def __init__(self, need):
    self.need = need

  def ready(self, k, th) -> bool:
    return (th.cta, th.tid // 32) in k.setmaxnreg_taken or \
        k.setmaxnreg_pool.get(th.cta, 0) >= self.need

  def describe(self, k, th) -> tuple[int, str]:
    return th.pc, (f"{self.need} registers from CTA {th.cta}'s register pool, which holds "
                   f"{k.setmaxnreg_pool.get(th.cta, 0)} (setmaxnreg.inc blocks until other "
                   "warps' setmaxnreg.dec release enough; the pool starts empty: the launch "
                   "gives every warp the .maxnreg count)")


def _pooled(k, collective, action, count):
  """``collective`` (the instruction's lanes meeting) behind the CTA's register pool: a
  ``.inc`` whose warp's registers the pool does not hold waits (``PoolWait``); the first
  lane of the warp to find them takes them for the warp.  Only where the kernel gives
  ``.maxnreg`` (the module doc); a ``.dec`` goes on (``_execute`` returns its registers)."""
  if action != "inc" or _launch_count(k) is None:
    return collective

  def take(th):
    """Whether ``th``'s warp holds (or now takes) the registers, else how many."""
    key = (th.cta, th.tid // 32)
    if key in k.setmaxnreg_taken or count not in _COUNTS or \
       k.block < 128 * (th.tid // 128 + 1):   # (``_execute`` reports those two)
      return 0
    state = k.setmaxnreg.get((th.cta, th.tid // 128))
    before = _launch_count(k) if state is None else state.count[th.tid // 32 % 4]
    need = 32 * (count - before) if before is not None else 0
    if need <= 0:   # (not an increase: nothing to take; ``_execute`` checks the direction)
      return 0
    free = k.setmaxnreg_pool.get(th.cta, 0)
    if free < need:
      return need
    k.setmaxnreg_pool[th.cta], k.setmaxnreg_taken[key] = free - need, need
    return 0

  def enter(th):
    need = take(th)
    if need:
      th.wait = PoolWait(need)
      return BLOCK
    return collective(th)
  inner = collective.lanes

  def enter_lanes(lanes):
    return FALLBACK if take(lanes[0]) else inner(lanes)
  enter.lanes = enter_lanes
  return enter


def _check_aligned(k, state, where, n, pc):
  j = n - state.base
  if j == len(state.order):
    state.order.append(pc)
  elif state.order[j] != pc:
    texts, lines, other = k.program.texts, k.program.lines, state.order[j]
    raise Stop(Finding("setmaxnreg-aligned", (
        f"{where}: its setmaxnreg number {n + 1} is `{texts[pc]}` (PTX line {lines[pc]}), "
        f"another warp of its warpgroup's is `{texts[other]}` (PTX line {lines[other]}): "
        "every warp of a warpgroup must execute the same setmaxnreg; branch on the "
        "warpgroup (tid / 128), not on the warp")))


def _check_synchronized(k, state, lanes, where, n):
  """Every warp of the warpgroup executed its setmaxnreg number ``n`` (1-based: index
  ``n - 1``) before this warp's number ``n + 1``, ordered by happens-before."""
  previous = state.stamps.get(n - 1, {})
  known = k.lane_clocks(lanes).max(axis=0)
  for v in range(4):
    stamp = previous.get(v)
    if stamp is None or any(known[s] < c for s, c in zip(*stamp)):
      status = ("has not executed it yet" if stamp is None else
                "executed it, but nothing orders that before this one")
      raise Stop(Finding("setmaxnreg-sync", (
          f"{where}: executes its setmaxnreg number {n + 1} while warp {v} of its "
          f"warpgroup, which must execute setmaxnreg number {n} first, {status}: all "
          "warps of the warpgroup must synchronize explicitly between two setmaxnreg "
          "(a bar.sync of the warpgroup's threads between them)")))


def _check_direction(state, where, w, text, action, count, n):
  before = state.count[w]
  if before is None:
    return
  what = "its last setmaxnreg's" if n else "the kernel's .maxnreg (the launch's)"
  if action == "dec" and count > before or action == "inc" and count < before:
    verb = "raise" if action == "dec" else "lower"
    raise Stop(Finding("setmaxnreg-direction", (
        f"{where}: `{text}` would {verb} the warp's per-thread register count from "
        f"{before} ({what}) to {count}: .dec must not raise it and .inc must not lower "
        f"it; use setmaxnreg.{'inc' if action == 'dec' else 'dec'}")))


def _setmaxnreg_at_exit(k, cta) -> None:
  """Every warp of each warpgroup of the exiting CTA executed as many setmaxnreg
  (``setmaxnreg-warpgroup``: one that exited, or branched around one its warpgroup
  executed, did not)."""
  for (c, group), state in sorted(k.setmaxnreg.items()):
    if c != cta or len(set(state.executed)) == 1:
      continue
    most = max(state.executed)
    short = [w for w in range(4) if state.executed[w] < most]
    findings.report(k, Finding("setmaxnreg-warpgroup", (
        f"CTA {cta} warpgroup {group}: warps {short} executed {min(state.executed)} "
        f"setmaxnreg, warps {[w for w in range(4) if w not in short]} executed {most}: "
        "every warp of a warpgroup must execute each setmaxnreg; do not exit or branch "
        "around it in some warps of the warpgroup")))


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/checker/test_opcode_table.py compiles every one).
OPCODES = {
    "setmaxnreg": Opcode(_setmaxnreg, ("setmaxnreg.dec.sync.aligned.u32 40",
                                       "setmaxnreg.inc.sync.aligned.u32 232",
                                       "setmaxnreg.inc.sync.aligned.u32 20"),
                         ("setmaxnreg.dec.u32 40", "setmaxnreg.inc.sync.aligned.u32 %r1")),
    "nanosleep": Opcode(_nanosleep, ("nanosleep.u32 20",), ("nanosleep.u64 %rd1",)),
    "bra": Opcode(None, ("bra L", "@%p1 bra.uni L")),
    "ret": Opcode(_exit, ("ret", "ret.uni")),
    "exit": Opcode(_exit, ("exit",), ("exit.foo",)),
    "call": Opcode(_call, ("call.uni (retval0), vprintf, (param0, param1)",),
                   ("call.uni (retval0), helper, (param0, param1)", "call.foo vprintf")),
}

FAMILY = Family("control", OPCODES, rules=SETMAXNREG_RULES, state=_STATE,
                at_cta_exit=_setmaxnreg_at_exit)
