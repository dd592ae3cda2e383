"""``tcgen05.commit.cta_group::{1,2}.mbarrier::arrive::one{.shared::cluster}
{.multicast::cluster}.b64 [mbar]{, ctaMask}`` (PTX ISA 9.7.16.12.1): an mbarrier arrive
that carries the thread's tcgen05 operations.

"The instruction tcgen05.commit is an asynchronous instruction which makes the mbarrier
object, specified by the address operand mbar, track the completion of all the prior
asynchronous tcgen05 operations ... initiated by the executing thread.  Upon the
completion of the tracked asynchronous tcgen05 operations, the signal specified by the
.completion_mechanism is triggered"; ".mbarrier::arrive::one indicates that ... an
arrive-on operation, with the count argument of 1, is signaled on the mbarrier object.
The scope of the arrive-on operation is the cluster scope."  With
``.multicast::cluster`` the arrive is signalled on the mbarrier "at the same offset as
mbar in the shared memory of each destination CTA", one per bit of the 16-bit
``ctaMask`` (bit i: ``%cluster_ctarank`` i; a bit with no CTA in the cluster is a
``fault``).  Issued by one thread (no ``.sync.aligned``, 9.7.16.5 Table 46).

The checker runs the thread's MMAs at their issue (``mma``), so every operation the
commit tracks has completed when it is issued, and the arrive happens at the commit
itself: one timing the hardware may take (the others are later, which a waiter cannot
tell apart from a slow MMA).  The arrive is the one of ``mbarrier.arrive.release.cluster``
(``sync._arrive``: the arrival recorded, the clock released into the phase, the pending
count down, the phase completing when nothing is pending; over-arrival is
``arrival-overflow``, an uninitialised barrier ``barrier-uninit``, an operation on
another CTA's barrier is kept for the exit rule), so the waits, the phases, ``hang``
and ``exit`` work as for any arrive.  What it releases: the thread's clock at the
commit, with its tcgen05 operations' slot at their count (whoever observes the phase
knows the MMAs' reads and writes), and, since the commit implies
``tcgen05.fence::before_thread_sync`` (9.7.16.6.4.2: "No explicit
tcgen05.fence::before_thread_sync is needed as this is implicitly performed by
tcgen05.commit"), its warp's waited ``tcgen05.ld`` / ``st`` first published into the
thread's clock as that fence does (``state``'s doc).  The MMAs and copies
(``tcgen05.cp``) are tracked, both counted in the thread's slot of tcgen05 operations
(the checker runs no ``tcgen05.shift``).

``.cta_group::2``: "the instruction tcgen05.commit.cta_group::2 tracks for the
completion of all prior asynchronous tcgen05 operations with .cta_group::2 issued by the
current thread".  A kernel names one ``.cta_group`` (``alloc.note_cta_group``), so the
thread's operations so far are all of its own group and the commit covers all of them,
as with ``::1``; with ``.multicast::cluster`` it arrives once on the barrier at mbar's
offset in each CTA of ``ctaMask`` (jax: mask 3, both CTAs of the pair).  Its peer CTA
must be in the cluster and not have exited ("the peer CTA should be active and should
not have exited", 9.7.16.5 Table 46: ``tcgen05-peer``).  Either CTA of the pair may
issue it (the commit places no data).

Who learns of the operations.  The thread's own clock is released at cluster scope
from its CTA, as an arrive-on of "the cluster scope"; a waiter in another CTA whose
wait is ``.cta``-scoped (jax's ``try_wait.parity.shared``) does not acquire it.  The
operations themselves are signalled "by the system on the mbarrier object" when they
complete, and the ISA orders a consumer after them by the phase it observes and its
``tcgen05.fence::after_thread_sync``, with a relaxed wait (9.7.16.6.4.4, "mbarrier.
try_wait.relaxed.cluster [mbar] (loop); tcgen05.fence::after_thread_sync; tcgen05.ld"):
no scope is named there.  So the operations' slot alone is also released as from the
barrier's own CTA, which every waiter on that barrier (always of that CTA) observes
with any wait, as the data of a TMA's ``complete_tx`` is; ``tcgen05.fence::
after_thread_sync`` then orders its tcgen05 accesses after them (``ldst``).  A verdict
resting on that reading, not on a sentence: for ``::1`` it changes nothing (issuer and
waiter share the CTA).

Refused by name: any other completion mechanism or qualifier.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import sync
from mosaic_async_store.check.families.tcgen05 import ldst, pair, state
from mosaic_async_store.check.families.tcgen05.alloc import note_cta_group
from mosaic_async_store.check.findings import Finding, Stop, fault
from mosaic_async_store.check.mbarrier_state import _note_remote, advance_phase
from mosaic_async_store.check.memory import SCOPES
from mosaic_async_store.check.outcomes import YIELD

__all__ = ["commit", "RULES", "EXAMPLES", "REFUSED"]

RULES = pair.RULES   # (and the core's mbarrier rules and "fault")

EXAMPLES = (
    "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r1]",
    "tcgen05.commit.cta_group::1.mbarrier::arrive::one.b64 [%rd1]",
    "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 "
    "[%r1], %h1",
    "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 "
    "[%r1], %h1",
    "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.b64 [%r1]",
)
REFUSED = (
    "tcgen05.commit.cta_group::1.b64 [%r1]",
)
# The qualifiers after .cta_group::N that the checker runs.
_FORMS = (["mbarrier::arrive::one", "b64"],
          ["mbarrier::arrive::one", "shared::cluster", "b64"],
          ["mbarrier::arrive::one", "multicast::cluster", "b64"],
          ["mbarrier::arrive::one", "shared::cluster", "multicast::cluster", "b64"])


def commit(k, ins):
  """The handler of ``tcgen05.commit`` (module doc): a function of the issuing thread."""
  mods, op = ins.mods[1:], f"opcode {ins.opcode}"
  group = mods[0] if mods[:1] in (["cta_group::1"], ["cta_group::2"]) else None
  if group is None or mods[1:] not in _FORMS:
    raise NotImplementedError(f"{op} (tcgen05.commit.cta_group::{{1,2}}.mbarrier::arrive::"
                              "one{.shared::cluster}{.multicast::cluster}.b64 is what the "
                              "checker runs)")
  multicast = "multicast::cluster" in mods
  if len(ins.ops) != 1 + multicast or ins.ops[0][0] != "addr" or \
     multicast and ins.ops[1][0] not in ("reg", "imm"):
    raise NotImplementedError(f"{op} (operands [mbar]{', ctaMask' if multicast else ''})")
  pc, space, addr = len(k.program.code), ins.space, ins.src[0]
  mask = ins.src[1] if multicast else None

  def issue(th):
    note_cta_group(k, th, group, pc)
    if group == "cta_group::2":
      pair.peer(k, th, f"CTA {th.cta} thread {th.tid}'s tcgen05.commit.cta_group::2")
    cta, off = sync.mbarrier_key(k, th, space, addr(th), "arrive", remote=True)
    keys = [(cta, off)]
    if mask is not None:
      bits, size = mask(th) & 0xFFFF, len(k.smem)
      if bits >> size:
        raise fault(f"CTA {th.cta} thread {th.tid}'s tcgen05.commit multicasts to ctaMask "
                    f"{bits:#06x}, naming a CTA beyond the cluster's {size}")
      keys = [(rank, off) for rank in range(size) if bits >> rank & 1]
    bars = [sync.mbarrier_of(k, th, th.vc, key, pc=pc) for key in keys]
    w = k.tcgen05.warps.get((th.cta, th.tid // 32))
    if w is not None:   # (the implied before-fence)
      ldst.publish(th, w)
    tc = state.thread_tc(k, th)
    released = th.vc.copy()
    ops = None
    if tc.ops_slot is not None:   # (the MMAs and copies so far: all complete, module doc)
      released[tc.ops_slot] = max(int(released[tc.ops_slot]), tc.ops)
      ops = np.zeros_like(released)
      ops[tc.ops_slot] = released[tc.ops_slot]
    for bar in bars:
      _note_remote(k, th, bar, pc)   # (before the thread's clock moves on)
      if bar.pending < 1:
        raise Stop(Finding("arrival-overflow", f"CTA {th.cta} thread {th.tid}'s "
                           f"tcgen05.commit arrives on {bar.describe()}"))
      bar.arrivals[th.slot] = int(th.vc[th.slot])
      bar.releases.add(th.cta, SCOPES["cluster"], released)
      if ops is not None:   # (the system's signal, in the barrier's CTA: module doc)
        bar.releases.add(bar.key[0], SCOPES["cluster"], ops)
      bar.pending -= 1
      k.tcgen05.commits.append((bar.slot, bar.phase, tc.ops_slot, tc.ops))
    th.vc[th.slot] += 1   # (its later accesses are not before the release)
    k.epoch += 1
    for bar in bars:
      advance_phase(k, bar)
    return YIELD if k.sched.pauses(k.step) else None
  return issue

