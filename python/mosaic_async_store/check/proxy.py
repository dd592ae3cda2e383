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
copy needs the same with a fence over global memory (``fence.proxy.async.global`` or
all spaces: ``check_global_source``).  A copy that *writes* shared memory
(a TMA load) over bytes a thread last wrote needs the same fence (two writes through
different proxies).  Over bytes a thread read (since their last write), the ISA asks for
the fence too ("A proxy fence is required to synchronize memory operations across
different proxies"), yet CUTLASS's and Mosaic's pipelines refill a stage after the
mbarrier handshake alone: the warning ``proxy-fence-read`` (``check_reads``), a read
the fence covers as it covers writes.

The uni-directional pair ``fence.proxy.async::generic.release.sync_restrict::shared::cta
.cluster`` / ``fence.proxy.async::generic.acquire.sync_restrict::shared::cluster.cluster``
orders the generic proxy before the asynchronous one only where a release half happens
before an acquire half (``release_to_async``, ``acquire_to_async``).

State: ``Machine.proxy_fences``, per (memory, fencing thread's slot), the (clock, vector
clock) of each of its ``fence.proxy.async`` operations over that memory, in order (an
acquire half adds its entries there too); per (``RELEASED``, slot), those of its release
halves.
"""

from __future__ import annotations

import bisect

import numpy as np

from mosaic_async_store.check import findings
from mosaic_async_store.check.findings import Finding
from mosaic_async_store.check.shadow import distinct
from mosaic_async_store.check.slots import THREAD

__all__ = ["fence", "fence_lanes", "fenced", "release_to_async", "acquire_to_async",
           "check_source", "check_reads", "check_source_runs", "global_sources_fenced",
           "check_global_source", "SPACES"]

# What each .space of fence.proxy.async orders (none: all spaces).
SPACES = {None: ("shared", "global"), "shared::cta": ("shared",),
          "shared::cluster": ("shared",), "global": ("global",)}
RELEASED = "released to async"   # (the memory key of the release halves' entries)


def fence(k, th, space):
  """``th`` executes ``fence.proxy.async{.space}``: the fence is kept with the thread's
  clock under each memory it orders ("shared", "global"); the thread's clock moves on
  (its later writes are not before the fence)."""
  for memory in SPACES[space]:
    clks, vcs = k.proxy_fences.setdefault((memory, th.slot), ([], []))
    clks.append(int(th.vc[th.slot]))
    vcs.append(th.vc.copy())
  th.vc[th.slot] += 1


def fence_lanes(k, lanes, space):
  """``fence`` by each of ``lanes`` (threads of one warp, in lane order) at once: their
  clocks copied with one NumPy call (one copy serves every memory: the fences' clocks
  are only read), then each one's own slot ticks."""
  rows = k.lane_rows(lanes)
  copies = k.clocks[rows]
  own = copies[np.arange(len(lanes)), rows + 1].tolist()   # (row r: slot r + 1)
  fences = k.proxy_fences
  for memory in SPACES[space]:
    for th, clk, vc in zip(lanes, own, copies):
      clks, vcs = fences.setdefault((memory, th.slot), ([], []))
      clks.append(clk)
      vcs.append(vc)
  k.tick(rows)


def release_to_async(k, th):
  """``th`` executes ``fence.proxy.async::generic.release.sync_restrict::shared::cta.
  cluster``.  PTX ISA, membar/fence: "A uni-directional proxy ordering from the
  from-proxykind to the to-proxykind establishes ordering between a prior memory access
  performed via the from-proxykind and a subsequent memory access performed via the
  to-proxykind"; "A .release proxy fence can form a release sequence that synchronizes
  with an acquire sequence that contains a .acquire proxy fence"; with
  ``.sync_restrict::shared::cta`` "the effect of the fence only applies to operations
  performed on objects in .shared::cta state space".  So it orders nothing by itself:
  it is kept (under ``RELEASED``) for an acquire half that it happens before
  (``acquire_to_async``).  What it covers is the generic accesses that happen before it
  (cumulative, as ``fence``), restricted, conservatively, to those the clock can tell
  were made to this CTA's shared memory: the threads of this CTA up to their first
  access to another CTA's shared memory (``Thread.remote_since``); no other CTA's
  thread.  It has no effect as a thread fence (the ISA pairs it with a proxy fence only),
  so a generic race it alone would order is still reported."""
  block, rows = k.block, k.threads[th.cta * k.block:(th.cta + 1) * k.block]
  vc = th.vc.copy()
  vc[1:1 + th.cta * block] = 0   # (thread slots: row + 1, CTA by CTA)
  vc[1 + (th.cta + 1) * block:1 + len(k.threads)] = 0
  for t in rows:
    if t.remote_since is not None:
      vc[t.slot] = min(vc[t.slot], t.remote_since - 1)
  clks, vcs = k.proxy_fences.setdefault((RELEASED, th.slot), ([], []))
  clks.append(int(th.vc[th.slot]))
  vcs.append(vc)
  th.vc[th.slot] += 1


def acquire_to_async(k, th):
  """``th`` executes ``fence.proxy.async::generic.acquire.sync_restrict::shared::cluster.
  cluster``: the release halves that happen before it (``release_to_async``) now order
  what they cover before the asynchronous-proxy accesses that come after it ("the
  effect of the fence only applies to operations performed on objects in
  .shared::cluster state space": every CTA's shared memory, so the entry is kept under
  "shared", as a ``fence.proxy.async.shared::cluster`` of ``th`` covering only what the
  release halves released).  A thread's entries only grow (``fenced`` reads its latest
  one that happens before a copy's issue), so each is joined with the one before."""
  best = fenced(k, th.vc, RELEASED)
  if best is not None:
    clks, vcs = k.proxy_fences.setdefault(("shared", th.slot), ([], []))
    if vcs:
      np.maximum(best, vcs[-1], out=best)
    clks.append(int(th.vc[th.slot]))
    vcs.append(best)
  th.vc[th.slot] += 1


def fenced(k, vc, memory="shared"):
  """The writes to ``memory`` ("shared" or "global") that a copy issued with clock
  ``vc`` may access through the asynchronous proxy: the element-wise maximum of the
  clocks of the proxy fences over that memory that happen before it (each thread's
  latest such fence: its clocks grow), or None when there is none."""
  best = None
  for (kind, slot), (clks, vcs) in k.proxy_fences.items():
    if kind != memory:
      continue
    i = bisect.bisect_right(clks, int(vc[slot])) - 1
    if i >= 0:
      best = vcs[i].copy() if best is None else np.maximum(best, vcs[i], out=best)
  return best


def _unfenced(k, writes, fenced_vc):
  """The first (slot, clock) of ``writes`` that is a thread's write no fence covers."""
  return next(((slot, clk) for slot, clk in writes if slot and
               k.slots.kind(slot) == THREAD and (fenced_vc is None or fenced_vc[slot] < clk)),
              None)


def _report(k, op, verb, memory, by_slot, insn, fence_form):
  by = k.slots.owner(by_slot).obj
  known = insn is not None and insn >= 0
  findings.report(k, Finding(
      "proxy-fence", f"{op.text} {verb} {memory} through the asynchronous proxy, "
      f"written by CTA {by.cta} thread {by.tid} through the generic proxy (PTX line "
      f"{k.program.lines[insn] if known else '?'}) with no {fence_form} between the write "
      "and the copy's issue (the writer fences, then a barrier orders the fence before "
      "the issue: Mosaic's commit_smem)",
      other_source=k.program.sources[insn] if known else None))


def check_source(k, op, sh, cta, off, n, verb="reads"):
  """Reports ``proxy-fence`` where a byte in [off, off + n) of CTA ``cta``'s shared
  memory (shadow ``sh``), which ``op`` reads (``verb``: or "writes") through the
  asynchronous proxy, was last written by a thread with no proxy fence between
  (``op.fenced``); where ``op`` writes, the warning ``proxy-fence-read`` for a thread's
  read of them that happens before its issue with no proxy fence between
  (``check_reads``)."""
  end, fenced_vc = off + n, op.fenced
  if verb == "writes":
    check_reads(k, op, sh, cta, off, end)
  if _unfenced(k, sh.last_writes(((off, end),)), fenced_vc) is None:   # (few writers)
    return
  for b in range(off, end):   # the first unfenced byte, for the message
    hit = _unfenced(k, [(int(sh.w_slot[b]), int(sh.w_clk[b]))], fenced_vc)
    if hit is not None:
      _report(k, op, verb, f"CTA {cta} SMEM byte {b}", hit[0], int(sh.w_insn[b]),
              "fence.proxy.async (.shared::cta, .shared::cluster or all spaces)")
      return


def check_reads(k, op, sh, cta, off, end):
  """The warning ``proxy-fence-read``: a thread read byte b of [off, end) of CTA
  ``cta``'s shared memory (a reader since its last write, ``sh.readers``) that ``op``,
  a copy issued after the read (``op.vc``), writes through the asynchronous proxy, and
  no ``fence.proxy.async`` covering the read happens before the issue (``op.fenced``).
  The ISA asks for the fence between accesses through different proxies, a read and a
  write alike; pipelines that refill a stage after the mbarrier handshake alone rely on
  the copy not overtaking the read (docs/checker.md, "Warnings").  A read the issue is
  not ordered after is the ``race`` the write meets (``access_core.check_shared``)."""
  vc, fenced_vc = op.vc, op.fenced
  hit = next(((r, clk, insn) for accesses in distinct(sh.readers[off:end])
              for r, (clk, insn, _) in accesses.items()
              if vc[r] >= clk and (fenced_vc is None or fenced_vc[r] < clk)
              and k.slots.kind(r) == THREAD), None)
  if hit is None:
    return
  r, clk, insn = hit
  b = next(b for b in range(off, end) if (sh.readers[b] or {}).get(r, (None,))[0] == clk)
  by, known = k.slots.owner(r).obj, insn is not None and insn >= 0
  findings.report(k, Finding(
      "proxy-fence-read", f"{op.text} writes CTA {cta} SMEM byte {b} through the "
      f"asynchronous proxy, read by CTA {by.cta} thread {by.tid} through the generic "
      f"proxy (PTX line {k.program.lines[insn] if known else '?'}) with no "
      "fence.proxy.async (.shared::cta, .shared::cluster or all spaces) between the read "
      "and the copy's issue; fix: the reading threads fence after their last read, "
      "before the synchronisation that hands the buffer to the issuing thread",
      other_source=k.program.sources[insn] if known else None))


def check_source_runs(k, op, sh, cta, ranges, writes):
  """``check_source`` for the bytes of ``ranges`` ((first, end) pairs) whose last
  writes are ``writes`` (``Shadow.last_writes``): range by range only where one is
  unfenced (for the message)."""
  if _unfenced(k, writes, op.fenced) is None:
    return
  for lo, hi in ranges:
    check_source(k, op, sh, cta, lo, hi - lo)


def global_sources_fenced(k, op, buf, runs) -> bool:
  """Whether no byte of ``runs`` ((offset, bytes) pairs) of global buffer ``buf`` was
  last written by a thread with no proxy fence before ``op``'s issue (then
  ``check_global_source`` finds nothing in any of them)."""
  writes = set()
  for off, n in runs:
    writes |= k.gshadow.last_writes(buf, off, n)
  return _unfenced(k, [(slot, clk) for slot, clk, _ in writes], op.fenced_global) is None


def check_global_source(k, op, buf, off, n, verb="reads"):
  """As ``check_source``, for global memory (``op.fenced_global``: the fences over
  global memory, ``fence.proxy.async.global`` or all spaces)."""
  writes = k.gshadow.last_writes(buf, off, n)
  hit = _unfenced(k, [(slot, clk) for slot, clk, _ in writes], op.fenced_global)
  if hit is not None:
    insn = next(i for slot, clk, i in writes if (slot, clk) == hit)
    _report(k, op, verb, k.gshadow.describe(buf, off, n), hit[0], insn,
            "fence.proxy.async (.global or all spaces)")
