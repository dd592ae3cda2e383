"""The grammar of the mbarrier instructions and the checker's mbarrier rules that are
decided from one operation (``sync`` runs the instructions; ``warp_mbarrier`` their warp
forms):

* ``form``: an instruction's form, once its qualifiers and operand count are checked
  against the ISA's grammar (anything else is refused by name);
* the opaque state an arrive returns (``encode_state``) and ``mbarrier.pending_count``,
  which decodes it;
* ``peer``: the finding ``barrier-peer``.  Only arrive operations may name another
  CTA's mbarrier (PTX ISA, mbarrier: threads "can perform only arrive operations but
  not *_wait on an mbarrier located in shared::cluster space"): the .shared::cluster
  forms of arrive, arrive_drop, expect_tx and complete_tx, and a generic arrive /
  arrive_drop whose state is the sink ``_``: the grammar's line
  ``mbarrier.arrive{.sem.scope}{.shared::cluster}.b64 _, [addr]{, count}`` leaves the
  state space out, and "mbarrier.arrive operation on an mbarrier object located in
  .shared::cluster but not in .shared::cta cannot return a value.  Sink symbol '_' is
  mandatory for the destination operand for such cases" (the ISA's Example 4 of
  test_wait / try_wait: ``mapa.u64``, then ``mbarrier.arrive.release.cluster.b64 _,
  [remAddr]``).  init, inval, test_wait / try_wait, .noComplete, a generic arrive that
  returns a state, and the .shared::cta forms take the executing CTA's object ("If the
  address specified by addr does not fall within the address window of .shared::cta
  state space then the behavior is undefined"): a generic or .shared / .shared::cta
  address of theirs in another CTA's window (after ``mapa``) is ``barrier-peer``; a
  generic one mapped to the executing CTA's own rank names its own object (a
  .shared::cta one carrying its own rank stays a fault, as for any access:
  ``addresses.mem``).
* ``overrun_suspect`` / ``check_overrun``: the finding ``phase-overrun`` (a wait whose
  state or parity names a phase two or more behind the current one).
"""

from __future__ import annotations

from mosaic_async_store.check import program
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.memory import SCOPES, SEMS, TX_LIMIT

__all__ = ["form", "encode_state", "pending_count", "peer", "overrun_suspect",
           "check_overrun", "STATE_MARK", "NO_COMPLETE_MARK"]

# The qualifiers of each mbarrier form besides .sem, .scope, the state space and .b64
# (PTX ISA, mbarrier): (flags it may take, its .sem values, its state spaces).
_CTA_SPACES = (None, "shared", "shared::cta")
_MBARRIER_FORMS = {
    "init": ((), (), _CTA_SPACES), "inval": ((), (), _CTA_SPACES),
    "arrive": (("expect_tx", "noComplete"), ("release", "relaxed"),
               _CTA_SPACES + ("shared::cluster",)),
    "arrive_drop": (("expect_tx", "noComplete"), ("release", "relaxed"),
                    _CTA_SPACES + ("shared::cluster",)),
    "pending_count": ((), (), (None,)),
    "expect_tx": ((), ("relaxed",), _CTA_SPACES + ("shared::cluster",)),
    "complete_tx": ((), ("relaxed",), _CTA_SPACES + ("shared::cluster",)),
    "try_wait": (("parity",), ("acquire", "relaxed"), _CTA_SPACES),
    "test_wait": (("parity",), ("acquire", "relaxed"), _CTA_SPACES),
}
_MBARRIER_OPERANDS = {"init": (2,), "inval": (1,), "arrive": (2, 3), "arrive_drop": (2, 3),
                      "expect_tx": (2,), "complete_tx": (2,), "try_wait": (3, 4),
                      "test_wait": (3,), "pending_count": (2,)}

# The opaque state an arrive returns, as the checker encodes it: bit 63 marks a state
# an arrive made, bits 0..31 hold its phase number (bit 0 its parity, which the waits
# read); a .noComplete arrive (the one whose state mbarrier.pending_count may decode)
# also sets bit 62 and puts the pending count before its arrive-on in bits 32..51.
STATE_MARK, NO_COMPLETE_MARK = 1 << 63, 1 << 62


def encode_state(phase, pending_before=None) -> int:
  """The state an arrive in ``phase`` returns (see STATE_MARK)."""
  state = STATE_MARK | (phase & 0xFFFFFFFF)
  if pending_before is not None:
    state |= NO_COMPLETE_MARK | (pending_before << 32)
  return state


def form(mods, ops, space):
  """The form of an mbarrier instruction, once every qualifier and the operand count
  are checked against the ISA's grammar (anything else is refused by name)."""
  form = mods[0] if mods else None
  if form not in _MBARRIER_FORMS:
    raise NotImplementedError(f"opcode mbarrier.{'.'.join(mods)}")
  flags, sems, spaces = _MBARRIER_FORMS[form]
  rest = [m for m in mods[1:] if m not in ("b64", space)]
  sem = [m for m in rest if m in SEMS]
  scope = [m for m in rest if m in SCOPES]
  other = [m for m in rest if m not in SEMS and m not in SCOPES]
  bad = (len(mods) != len(set(mods)) or space not in spaces or len(sem) > 1 or
         len(scope) > 1 or (sem and sem[0] not in sems) or
         (scope and scope[0] not in ("cta", "cluster")) or not set(other) <= set(flags) or
         len(ops) not in _MBARRIER_OPERANDS[form] or "b64" not in mods[1:] or
         ("expect_tx" in other and "noComplete" in other) or
         ("noComplete" in other and (len(ops) != 3 or space == "shared::cluster")) or
         # arrive_drop.noComplete{.release}{.cta} (PTX ISA, mbarrier.arrive_drop)
         (form == "arrive_drop" and "noComplete" in other and
          (sem not in ([], ["release"]) or scope not in ([], ["cta"]))))
  if bad:
    raise NotImplementedError(f"opcode mbarrier.{'.'.join(mods)} (not a form of "
                              f"mbarrier.{form} the checker runs exactly)")
  return form


def pending_count(k, ops, src):
  """``mbarrier.pending_count.b64 count, state`` (machine ``k``): the pending count
  before the arrive-on that returned ``state`` (PTX ISA, mbarrier.pending_count),
  decoded from the state a .noComplete arrive made (``encode_state``); any other state
  is refused (the ISA defines the count only for a state of
  ``arrive{_drop}.noComplete``)."""
  put, state = program.setter(k, ops[0], 32), src[1]
  def pending_count(th):
    s = state(th)
    if not s & STATE_MARK or not s & NO_COMPLETE_MARK:
      raise NotImplementedError(
          f"mbarrier.pending_count of state {s:#x}, which no mbarrier.arrive.noComplete or "
          "arrive_drop.noComplete returned (undefined: PTX ISA, mbarrier.pending_count)")
    put(th, (s >> 32) & TX_LIMIT)
  return pending_count


def peer(th, place, form, addr, space):
  """``th``'s mbarrier.``form`` at ``addr`` in ``space`` (None: generic; else .shared /
  .shared::cta) resolves to ``place`` (CTA, offset) in another CTA: ``barrier-peer``;
  generic expect_tx / complete_tx on another CTA's object (the checker does not decide
  which window their generic form takes) are refused by name."""
  if space is None and form in ("expect_tx", "complete_tx"):
    raise NotImplementedError(f"mbarrier.{form} through a generic address in CTA "
                              f"{place[0]}'s window (use .shared::cluster)")
  how = "a generic address" if space is None else f"a .{space} address"
  why = (" (a generic arrive on another CTA's mbarrier returns no state: its destination "
         "must be the sink `_`, and .noComplete takes the executing CTA's own)"
         if space is None and form in ("arrive", "arrive_drop") else "")
  raise Stop(Finding("barrier-peer", f"CTA {th.cta} thread {th.tid}: mbarrier.{form} "
                      f"through {how} ({addr:#x}) of CTA {place[0]}'s mbarrier at offset "
                      f"{place[1]:#x}{why}"))


def overrun_suspect(th, bar, raw, by_state) -> bool:
  """Whether a wait by ``th`` on ``bar`` with operand ``raw`` (a state when
  ``by_state``, else a parity) may name a phase two or more behind the current one
  (``check_overrun`` decides; this cheap test never misses one).  A state an arrive
  made (``STATE_MARK``) names its phase; a parity names the first phase of that parity
  that the thread does not know complete (it observed, or acquired from an observer,
  ``th.seen`` / ``th.vc`` at the barrier's slot: at least those)."""
  if by_state:
    return bool(raw & STATE_MARK) and (raw & 0xFFFFFFFF) < bar.phase - 1
  known = max(th.seen.item(bar.slot), th.vc.item(bar.slot))
  return known + ((known ^ raw) & 1) < bar.phase - 1


def check_overrun(th, bar, raw, by_state):
  """The finding ``phase-overrun``: the phase a wait names is neither the current
  phase nor the immediately preceding one (PTX ISA, mbarrier.test_wait / try_wait), so
  the wait resolves to another phase of the same parity (on hardware it skips a phase,
  or hangs).  For a parity the thread's knowledge also counts the phases before the
  last one into which an arrival it is ordered after (its own included) went: a
  thread that arrived in phase j, or learnt of such an arrival, may mean phase j or
  later."""
  phase = bar.phase
  if by_state:
    meant = raw & 0xFFFFFFFF
  else:
    known = max(th.seen.item(bar.slot), th.vc.item(bar.slot))
    vc = th.vc
    if any(vc.item(slot) >= clk for slot, clk in bar.arrivals.items()):
      known = phase
    else:
      for j in range(len(bar.arrival_records) - 1, known, -1):
        slots, clocks = bar.arrival_records[j]
        if (vc[slots] >= clocks).any():
          known = j
          break
    meant = known + ((known ^ raw) & 1)
    if meant >= phase - 1:
      return
  what = "state of an arrive in" if by_state else f"parity {raw & 1}, meaning"
  raise Stop(Finding("phase-overrun", (
      f"CTA {th.cta} thread {th.tid} waits with {what} phase {meant} of {bar.describe()}, "
      f"which has completed phase {meant} and {phase - 1 - meant} phase(s) after it: the "
      f"wait resolves to phase {phase if (phase ^ meant) & 1 == 0 else phase - 1}")))
