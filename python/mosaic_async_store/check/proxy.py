"""The asynchronous proxy: which generic-proxy writes a bulk or tensor copy may read.

PTX ISA, memory consistency model, "Proxies": memory accesses made through different
proxies to the same location need a *proxy fence* between them; the bulk and tensor
copies (``cp.async.bulk*``) access memory through the asynchronous proxy, the threads'
``ld`` / ``st`` through the generic proxy, and ``fence.proxy.async`` is "a bidirectional
proxy fence between the generic proxy and the async proxy".  So shared memory that
threads wrote with ``st.shared`` and that a TMA store then reads must be fenced: each
writing thread (or a thread that the writes happen before) executes
``fence.proxy.async`` (all spaces, ``.shared::cta`` or ``.shared::cluster``) between the
writes and the copy's issue, and the fence happens before the issue.  A byte whose last
write is a thread's and is not so fenced when an asynchronous-proxy copy reads it is
the finding ``proxy-fence``.

The checker's choice where the ISA says no more: a fence covers every write that
happens before it (the fence is cumulative, as the model's release patterns are), so
"all threads write, a barrier, one thread fences and issues" passes, as does Mosaic's
``commit_smem`` (every thread fences, then the barrier).  Data that the asynchronous
proxy itself wrote (a TMA load that landed, observed through its mbarrier) needs no
fence to be read by another copy.  Global memory written by threads and read by a
copy is not checked yet (docs/checker.md lists it).  A copy that *writes* shared memory
(a TMA load) over bytes a thread last wrote needs the same fence (two writes through
different proxies); over bytes threads only read, the mbarrier handshake that frees a
pipeline slot orders it (no fence: CUTLASS's and Mosaic's pipelines have none there).

State: ``Machine.proxy_fences``, per fencing thread's slot, the (clock, vector clock)
of each of its ``fence.proxy.async`` operations that covers shared memory, in order.
"""

from __future__ import annotations

import bisect

import numpy as np

from mosaic_async_store.check import findings
from mosaic_async_store.check.memory import ProtocolError
from mosaic_async_store.check.slots import THREAD

__all__ = ["fence", "fenced", "check_source", "SHARED_SPACES"]

# The .space of fence.proxy.async that orders shared-memory accesses (none: all spaces).
SHARED_SPACES = (None, "shared::cta", "shared::cluster")


def fence(k, th, space):
  """``th`` executes ``fence.proxy.async{.space}``: a fence over shared memory is kept
  with the thread's clock; the thread's clock moves on (its later writes are not
  before the fence)."""
  if space in SHARED_SPACES:
    clks, vcs = k.proxy_fences.setdefault(th.slot, ([], []))
    clks.append(int(th.vc[th.slot]))
    vcs.append(th.vc.copy())
  th.vc[th.slot] += 1


def fenced(k, vc):
  """The writes that a copy issued with clock ``vc`` may read through the
  asynchronous proxy: the element-wise maximum of the clocks of the shared-memory
  proxy fences that happen before it (each thread's latest such fence: its clocks
  grow), or None when there is none."""
  best = None
  for slot, (clks, vcs) in k.proxy_fences.items():
    i = bisect.bisect_right(clks, int(vc[slot])) - 1
    if i >= 0:
      best = vcs[i].copy() if best is None else np.maximum(best, vcs[i], out=best)
  return best


def check_source(k, op, sh, cta, off, n, verb="reads"):
  """Reports ``proxy-fence`` where a byte in [off, off + n) of CTA ``cta``'s shared
  memory (shadow ``sh``), which ``op`` reads (``verb``: or "writes") through the
  asynchronous proxy, was last written by a thread with no proxy fence between
  (``op.fenced``)."""
  end, fenced = off + n, op.fenced
  writes = set(zip(sh.w_slot[off:end], sh.w_clk[off:end]))   # (few: a copy's writers)
  if all(not slot or k.slots.kind(slot) != THREAD or
         (fenced is not None and fenced[slot] >= clk) for slot, clk in writes):
    return
  for b in range(off, end):   # the first unfenced byte, for the message
    slot, clk = sh.w_slot[b], sh.w_clk[b]
    if slot and k.slots.kind(slot) == THREAD and (fenced is None or fenced[slot] < clk):
      by = k.slots.owner(slot).obj
      line = k.program.lines[sh.w_insn[b]] if sh.w_insn[b] >= 0 else "?"
      findings.report(k, ProtocolError(
          "proxy-fence", f"{op.text} {verb} CTA {cta} SMEM byte {b} through the "
          f"asynchronous proxy, written by CTA {by.cta} thread {by.tid} through the "
          f"generic proxy (PTX line {line}) with no fence.proxy.async between the write "
          "and the copy's issue (the writer fences, then a barrier orders the fence "
          "before the issue: Mosaic's commit_smem)",
          other_source=k.program.sources[sh.w_insn[b]] if sh.w_insn[b] >= 0 else None))
      return
