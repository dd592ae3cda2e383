"""Running a cluster: threads, the run queue, and the scheduler of the PTX checker.

Mixed into ``interp.PtxKernel``, which provides ``self.code`` /
``self.texts`` (the compiled instructions and their text), ``self.params``,
``_pack_params`` and ``self.local_bytes``; the
synchronisation methods (``_observe`` from ``sync``, ``_cluster_woken``,
``_barriers_after_exit`` and ``_named_state`` from ``barriers``) and ``_land`` from
``access``.

Polling.  A thread that spins on a strong load (``strong``) or ``nanosleep`` yields
after each poll, and any thread after ``LOOP_YIELD`` backward jumps in a row (a
spin on a weak load).  When it yields again in the same state (program counter and
registers) and nothing another thread could see has changed since (``self.epoch``,
bumped by every write, mbarrier change, barrier arrival and exit), it would only
repeat itself: it is parked (``("poll", pc)``) until the epoch moves.  So a spin
loop costs a few iterations per change, and one that nothing will ever end is
reported as a hang instead of running forever.
"""

from __future__ import annotations

import gc

import numpy as np

from mosaic_async_store.check import warp
from mosaic_async_store.check.access import AsyncOp
from mosaic_async_store.check.memory import ProtocolError, Schedule, Shadow
from mosaic_async_store.check.sync import BLOCK, YIELD

__all__ = ["EXIT", "Thread", "Runner"]

EXIT = object()   # returned by an instruction: this thread stops
LOOP_YIELD = 64   # a thread yields after this many backward jumps in a row


class Thread:
  """One thread: registers, where it is, and its memory-model state (``vc``: its
  vector clock; ``unscoped``: clocks it saw through pairs whose scopes do not
  include each other, ``unscoped_pair`` the (release, acquire) scopes of the last; ``seen``: the phases it observed complete, whatever the
  wait's semantics; ``fence_rel``: the clock its last fence releases with a
  later relaxed arrive; ``pending_obs``: phases a relaxed wait observed;
  ``remote_since``: its clock at its first access to another CTA's shared
  memory, which a ``.sync_restrict::shared::cta`` fence does not release;
  ``polled``: its last instruction was a poll (``poll_pc``: that instruction, or the
  backward branch it yielded at); ``poll_seen`` / ``poll_epoch``: the
  states it polled in since the epoch it names, see the module doc; ``back_jumps``:
  the backward jumps it took, against a runaway loop; ``poll_what``: (pc, wait) of
  the mbarrier wait it last timed out on, which a parked poll loop is waiting for;
  ``tried_wait``: the mbarrier wait that last returned false to it (sync.py);
  ``released``: per location it wrote with a release, that release (strong.py))."""

  __slots__ = ("regs", "pc", "cta", "tid", "state", "wait", "cluster_arrived", "local",
               "slot", "vc", "unscoped", "unscoped_pair", "seen", "fence_rel", "pending_obs",
               "remote_since", "polled", "poll_pc", "poll_seen", "poll_epoch", "back_jumps",
               "poll_what", "tried_wait", "released")

  def __init__(self, cta, tid, special, local_bytes, slot, nslots):
    self.regs, self.pc, self.cta, self.tid = dict(special), 0, cta, tid
    self.state, self.wait, self.cluster_arrived = "run", None, 0
    self.local = bytearray(local_bytes)
    self.slot, self.vc, self.unscoped = slot, np.zeros(nslots, np.int64), np.zeros(nslots, np.int64)
    self.seen, self.unscoped_pair = np.zeros(nslots, np.int64), None
    self.vc[slot], self.fence_rel, self.pending_obs, self.remote_since = 1, None, [], None
    self.polled, self.poll_seen, self.poll_epoch, self.back_jumps = False, set(), -1, 0
    self.poll_what, self.poll_pc, self.tried_wait, self.released = None, None, None, {}


class Runner:
  """``launch`` and the scheduling loop."""

  def launch(self, buffers, *, cluster, smem_bytes, block=128, max_timeouts=64, schedule=0,
             barrier_slots=64, trace_stores=False, smem_init=None, first_cta=0,
             grid_ctas=None):
    """Runs one cluster of ``cluster`` CTAs of ``block`` threads under the seeded
    ``schedule`` (see memory.Schedule).  ``buffers`` (NumPy arrays or
    ``Memref``s, in parameter order: see _pack_params) are copied in; returns
    their contents afterwards, in argument order, as uint8 arrays.  Raises
    ProtocolError on a violated rule.  With ``trace_stores``, ``self.store_trace``
    maps (cta, tid) to that thread's store instructions into SMEM, in program
    order, each as (destination CTA, byte offset, bytes) (``AccessSemantics._trace``
    says which stores count).  ``smem_init``, if given, holds each CTA's first SMEM
    bytes at launch (as if written before the kernel; the rest is uninitialised).
    ``first_cta`` / ``grid_ctas``: this cluster's first CTA in a grid of that many
    (``%ctaid.x``, ``%nctaid.x``, ``%clusterid.x``; default: the grid is this cluster)."""
    # A run allocates many small containers (a set per shadow byte, vector clocks,
    # queued operations) and leaves no garbage in cycles that matters for its length:
    # the cyclic collector's passes would only cost time (about a sixth of it).
    enabled = gc.isenabled()
    gc.disable()
    try:
      return self._launch(buffers, cluster, smem_bytes, block, max_timeouts, schedule,
                          barrier_slots, trace_stores, smem_init, first_cta, grid_ctas)
    finally:
      if enabled:
        gc.enable()

  def _launch(self, buffers, cluster, smem_bytes, block, max_timeouts, schedule,
              barrier_slots, trace_stores, smem_init, first_cta, grid_ctas):
    """``launch`` (its arguments in order), with the collector off."""
    self._pack_params(buffers)
    self.store_trace = {} if trace_stores else None
    self.smem = [bytearray(b"\xcd" * smem_bytes) for _ in range(cluster)]  # uninitialised
    for buf, first in zip(self.smem, smem_init or ()):
      buf[:len(first)] = bytes(first)
    self.shadow = [Shadow(smem_bytes) for _ in range(cluster)]
    self.smem_cta = {id(b): i for i, b in enumerate(self.smem)}
    self.mbar, self.calls, self.timeouts, self.threads = {}, [], 0, []
    self.sched, self.inflight, self.cluster_gens = Schedule(schedule), [], []
    self.barrier_slot0 = 1 + cluster * block   # slot 0: initial memory; then the threads
    nslots = self.barrier_slot0 + 2 * barrier_slots   # per barrier: its data, its init
    self.barriers_made, self.block = 0, block
    self.executed = 0   # thread-instructions run (bench/checker_speed.py reports it)
    self.exited = [False] * cluster
    self.remote_arrivals = [{} for _ in range(cluster)]   # CTA -> {thread slot: clock}
    self.named, self.flags = {}, {}   # barriers.py's named barriers; strong.py's flags
    self.warp_arrivals, self.cluster_lanes = {}, {}   # barriers.py: warps arriving
    self.epoch, self.parked = 0, []   # see the module doc (polling)
    self.grid_clusters = (grid_ctas or cluster) // cluster
    yz = {f"%{r}.{ax}": n for ax in "yz" for r, n in (   # the same for every thread
        ("tid", 0), ("ntid", 1), ("ctaid", 0), ("nctaid", 1), ("cluster_ctaid", 0),
        ("cluster_nctaid", 1), ("clusterid", 0), ("nclusterid", 1))}
    for c in range(cluster):
      for t in range(block):
        grid = grid_ctas or cluster
        special = {"%tid.x": t, "%ntid.x": block, "%ctaid.x": first_cta + c,
                   "%nctaid.x": grid, "%clusterid.x": first_cta // cluster,
                   "%nclusterid.x": grid // cluster,
                   "%cluster_ctaid.x": c, "%cluster_nctaid.x": cluster,
                   "%cluster_ctarank": c, "%cluster_nctarank": cluster,
                   "%laneid": t % 32, "%warpid": t // 32, **yz}
        self.threads.append(Thread(c, t, special, self.local_bytes, len(self.threads) + 1,
                                   nslots))
    self.runnable, self.dirty = list(self.threads), True
    # What _resolve needs, kept as threads block, resume and exit (so that a thread
    # that blocks costs O(1) unless its synchronisation may now complete):
    self.blocked = {}                           # thread slot -> blocked thread
    self.alive, self.alive_total = [block] * cluster, cluster * block   # not exited
    self.group_waiting = {}                     # (cta, warp) -> lanes at collectives
    self.cluster_reached = [cluster * block]    # [k]: threads with >= k cluster arrives
    self.cluster_waiting = 0                    # threads blocked in barrier.cluster.wait
    while True:
      if self.parked:
        self._unpark()
      if self.runnable:
        i = self.sched.pick_index(len(self.runnable))
        th = self.runnable[i]
        self._exec(th)
        if th.polled:
          self._polled(th)
        if th.state != "run":   # blocked or done: out of the run queue
          self._unqueue(self.runnable, i)
        elif len(self.runnable) > 1:   # it yielded: to the back of the queue, so that
          self.runnable.append(self.runnable.pop(i))   # a spin (nanosleep) lets others run
        for op in self.sched.landing_now(self.inflight):
          self._land(op)
        if self.dirty:
          self._resolve()
        continue
      if self.dirty and self._resolve():
        continue
      if self.inflight:   # nothing else can happen: something lands
        self._land(self.sched.landing_when_stuck(self.inflight))
        continue
      if not self.alive_total:
        return [np.frombuffer(bytes(b), np.uint8) for b in self.gbufs]
      blocked = [self.blocked[s] for s in sorted(self.blocked)]
      pollers = [th for th in blocked if th.wait[0] == "mbar"]
      if not pollers or self.timeouts >= max_timeouts:
        raise ProtocolError("hang", f"deadlock after {self.timeouts} timed-out polls; "
                            f"waiting: {self._describe_waits(blocked)}"
                            + self._grid_note(blocked))
      self.timeouts += 1   # nothing can change any more: these polls time out
      for th in pollers:
        th.poll_what = (th.pc, th.wait)   # what it polls, if it then parks (a hang report)
        th.regs[th.wait[3]] = 0
        self._resume(th)

  def _thread_exits(self, th):
    """When the last thread of a CTA exits, the CTA exits: every access that other
    CTAs made to its shared memory or mbarriers must have completed before, which
    the checker takes as: each is known to its threads (happens-before, or seen
    through a pair that is not morally strong, or a phase they observed), and
    none is in flight; any later one is refused (``_mem``)."""
    c = th.cta
    self.alive[c] -= 1
    self.alive_total -= 1
    self.epoch += 1
    if self.cluster_waiting or self.group_waiting.get((c, th.tid // 32)):
      self.dirty = True   # barriers and warp collectives wait for non-exited threads only
    self._barriers_after_exit(th)   # warps wait for their non-exited lanes
    if self.alive[c]:
      return
    self.exited[c] = True
    mine = [t for t in self.threads if t.cta == c]
    known = np.maximum.reduce([np.maximum(np.maximum(t.vc, t.unscoped), t.seen) for t in mine])
    for op in self.inflight:
      if op.cta == c:
        raise ProtocolError("exit", f"CTA {c} exits while {op.text} is in flight")
    # Thread slots of other CTAs; and the data slots of this CTA's mbarriers, whose
    # landed asynchronous stores count as known once a thread observed their phase.
    def owner(slot):
      if 1 <= slot < self.barrier_slot0:
        return self.threads[slot - 1].cta
      return -1 if slot >= self.barrier_slot0 else None
    late = self.shadow[c].remote_accesses(owner, c)
    for slot, clk in self.remote_arrivals[c].items():
      late[slot] = max(late.get(slot, 0), clk)
    for slot, clk in sorted(late.items()):
      if known[slot] >= clk:
        continue
      if slot >= self.barrier_slot0:
        bar = next(b for b in self.mbar.values() if b.slot == slot)
        who = f"the asynchronous stores of phase {clk - 1} of {bar.describe()}"
      else:
        who = f"the access of CTA {self.threads[slot - 1].cta} thread {self.threads[slot - 1].tid}"
      raise ProtocolError("exit", f"CTA {c} exits (its last thread: {th.tid}) with no thread "
                          f"of it knowing that {who} to its shared memory or mbarriers "
                          "completed")

  def _grid_note(self, blocked) -> str:
    """Why a polling loop in a grid of several clusters may wait in vain, or ""."""
    if self.grid_clusters < 2 or not any(th.wait[0] == "poll" for th in blocked):
      return ""
    return (f". The grid has {self.grid_clusters} clusters, which the checker runs one "
            "after another: a poll that only another cluster's write ends hangs here, as "
            "it may on hardware, where a grid's clusters need not run at the same time "
            "(unless the kernel is launched cooperatively)")

  def _describe_waits(self, blocked):
    """Every waiting thread, grouped by CTA, PTX line and what it waits for (an
    mbarrier's CTA, offset, phase, pending arrivals and tx-count)."""
    what = {"warp": "its warp's other lanes",
            "cluster": "barrier.cluster (the cluster's other threads)",
            "poll": "a value that no other thread or asynchronous operation will change "
                    "(it polls in a loop)"}
    groups = {}
    for th in blocked:
      kind, pc, w = th.wait[0], th.pc, th.wait
      if kind == "poll":
        pc = w[1]
        if th.poll_what is not None and th.poll_what[1][1] in self.mbar:   # a timed-out
          (pc, w), kind = th.poll_what, "mbar"                             # wait's loop
      wait = (f"parity {w[2]} of {self.mbar[w[1]].describe()}" if kind == "mbar"
              else self._named_state(w[1]) if kind == "bar" else what[kind])
      groups.setdefault((th.cta, pc, wait), []).append(th.tid)
    parts = []
    for (cta, pc, wait), tids in sorted(groups.items()):
      who = (f"thread {tids[0]}" if len(tids) == 1 else
             f"threads {tids[0]}..{tids[-1]}" if tids[-1] - tids[0] == len(tids) - 1 else
             f"{len(tids)} threads {tids[:4]}{'...' if len(tids) > 4 else ''}")
      parts.append(f"CTA {cta} {who} at PTX line {self.lines[pc]} (`{self.texts[pc]}`) "
                   f"waiting for {wait}")
    return "; ".join(parts)

  def _exec(self, th, max_back_jumps=1 << 20):
    """Runs ``th`` until it blocks, exits or yields: after a poll, or every
    ``LOOP_YIELD`` backward jumps (a loop may be a spin on a weak load, which only
    another thread can end: see the module doc)."""
    code, pc, jumps, n = self.code, th.pc, 0, 0
    try:
      while True:
        r = code[pc](th)
        n += 1   # (a local: the count is added to self.executed once, at the end)
        if r is None:
          pc += 1
        elif r is BLOCK or r is EXIT:
          th.pc, th.state = pc, "block" if r is BLOCK else "done"
          if r is EXIT:
            self._thread_exits(th)
          else:
            self._blocks(th)
          return
        elif r is YIELD:   # done; the schedule lets another thread go first
          th.pc, th.poll_pc = pc + 1, pc   # (poll_pc: read only if it polled)
          return
        else:
          if r <= pc:
            th.back_jumps += 1   # (over all its runs: a poll loop yields every time)
            if th.back_jumps > max_back_jumps:
              raise RuntimeError(f"runaway loop (over {max_back_jumps} backward jumps)")
            jumps += 1
            if jumps == LOOP_YIELD:   # a loop iteration's start: poll-like
              th.pc, th.polled, th.poll_pc = r, True, pc   # (pc: the branch)
              return
          pc = r
    except ProtocolError as e:  # say where, keep the rule
      if e.ptx_line is not None:
        raise
      raise ProtocolError(e.rule, f"at `{self.texts[pc]}` (PTX line {self.lines[pc]}): "
                          f"{e.detail}", cta=th.cta, thread=th.tid, ptx_line=self.lines[pc],
                          instruction=self.texts[pc]) from e
    except NotImplementedError as e:   # the checker cannot run it: not a verdict
      raise NotImplementedError(f"CTA {th.cta} thread {th.tid} at `{self.texts[pc]}` (PTX "
                                f"line {self.lines[pc]}): {e}") from e
    except Exception as e:  # say where, then re-raise
      raise RuntimeError(f"CTA {th.cta} thread {th.tid} at `{self.texts[pc]}`: "
                         f"{type(e).__name__}: {e}") from e
    finally:
      self.executed += n

  def _blocks(self, th):
    """``th`` now waits (``th.wait``); marks the run dirty if that may complete."""
    self.blocked[th.slot] = th
    kind = th.wait[0]
    if kind == "warp":   # (warp.py) dirty once every live member lane may wait
      key = (th.cta, th.tid // 32)
      n = self.group_waiting[key] = self.group_waiting.get(key, 0) + 1
      if n >= len(warp.live_lanes(self, th.cta, th.tid // 32, th.wait[1].mask)):
        self.dirty = True
    elif kind == "cluster":
      self.cluster_waiting += 1
      if self._cluster_may_complete(th.wait[1]):
        self.dirty = True
    # "mbar": it blocked on a phase that had not completed; _advance marks the run
    # dirty when one does.  "bar": the arrival that completes the named barrier
    # resumes it (barriers.py).

  def _cluster_may_complete(self, k):
    """False when some non-exited thread has not made its k-th cluster arrive yet
    (``cluster_reached`` also counts exited threads: True may be wrong, False not)."""
    return k < len(self.cluster_reached) and self.cluster_reached[k] >= self.alive_total

  def _resume(self, th):
    kind = th.wait[0]
    if kind == "warp":
      self.group_waiting[(th.cta, th.tid // 32)] -= 1
    elif kind == "cluster":
      self.cluster_waiting -= 1
    del self.blocked[th.slot]
    # a parked poller already stands after its poll (it yielded)
    th.pc, th.state, th.wait = th.pc + (kind != "poll"), "run", None
    if kind == "poll":
      th.poll_what = None
    self.runnable.append(th)

  def _polled(self, th):
    """``th`` yielded after a poll: parks it if it polled in this state before and
    nothing changed since (module doc)."""
    th.polled = False
    if th.state != "run":
      return
    if th.poll_epoch != self.epoch:
      th.poll_epoch, th.poll_seen = self.epoch, set()
    state = (th.pc, tuple(th.regs.items()), bytes(th.local))
    if state not in th.poll_seen:
      th.poll_seen.add(state)
      return
    th.state, th.wait = "block", ("poll", th.poll_pc)
    self.blocked[th.slot] = th
    self.parked.append(th)

  def _unpark(self):
    """Resumes the parked pollers for which something changed."""
    still = []
    for th in self.parked:
      if th.poll_epoch != self.epoch:
        self._resume(th)
      else:
        still.append(th)
    self.parked = still

  @staticmethod
  def _unqueue(queue, i):
    """Removes ``queue[i]`` in O(1) (the last element takes its place)."""
    last = queue.pop()
    if i < len(queue):
      queue[i] = last
      if isinstance(last, AsyncOp):
        last.idx = i

  def _resolve(self):
    """Releases every thread whose synchronisation can complete now."""
    woke, lanes, self.dirty = False, [], False
    blocked = [self.blocked[s] for s in sorted(self.blocked)]   # in thread order
    if self.cluster_waiting:
      # barrier.cluster.wait waits for the cluster's non-exited threads (PTX ISA)
      min_arrived = min(th.cluster_arrived for th in self.threads if th.state != "done")
    for th in blocked:
      kind = th.wait[0]
      if (kind == "mbar" and self.mbar[th.wait[1]].phase & 1 != th.wait[2]) or \
         (kind == "cluster" and min_arrived >= th.wait[1]):
        if kind == "mbar":
          _, key, _, pred, sem, scope = th.wait
          self._observe(th, self.mbar[key], sem, scope)
          th.regs[pred] = 1
        else:
          self._cluster_woken(th)
        self._resume(th)
        woke = True
      elif kind == "warp":
        lanes.append(th)
    return warp.meet(self, lanes) or woke if lanes else woke
