"""The tcgen05 family's state: each CTA's tensor memory, and who knows which of its
accesses.

Tensor memory (PTX ISA 9.7.16.1): per CTA, 128 lanes by 512 columns of 32-bit cells,
addressed as ``(lane << 16) | column``.  ``TensorMemory`` holds the cells (NumPy,
``cells[lane, column]``), a per-byte history of the accesses (``shadow.Shadow`` over
the lane-major bytes: cell (l, c) is bytes ``4 * (512 l + c)``), and the allocations.
A lane belongs to one warp of a warpgroup (9.7.16.8.1: warp ``w % 4`` reaches lanes
``32 (w % 4)`` .. ``+ 31``).

Who knows an asynchronous tcgen05 access (9.7.16.6).  Each is recorded with a clock
slot of its own kind, so that only what the ISA says orders it does:

  * a warp's ``tcgen05.ld`` reads and ``tcgen05.st`` writes: two slots per warp
    (``WarpTc``; the instructions are warp-collective), known to the warp itself after
    its ``tcgen05.wait::ld`` / ``::st``, and published in a thread's clock (so that a
    later synchronisation carries them) by its ``tcgen05.fence::before_thread_sync``
    after that wait;
  * a thread's ``tcgen05.mma`` and ``tcgen05.cp`` (their shared-memory operands and the
    tensor memory they write): one slot per issuing thread (``ThreadTc``), known to the
    issuer for its later MMAs (the MMA -> MMA and cp -> MMA pipelines) and to others
    through the arrive of a ``tcgen05.commit`` that covers it (which implies the
    before-fence);
  * the other side: a thread's tcgen05 access is checked with the clock it had at its
    last ``tcgen05.fence::after_thread_sync`` (``ThreadTc.view``; none yet: what it knew
    at launch), plus its own warp's waited accesses.  An access that a
    synchronisation since that fence would have ordered is ``tcgen05-fence``.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import access_core, findings
from mosaic_async_store.check.findings import Finding
from mosaic_async_store.check.shadow import Shadow

__all__ = ["LANES", "COLUMNS", "TC_WAITS", "Tcgen05", "TensorMemory", "WarpTc", "ThreadTc", "tmem",
           "warp_tc", "thread_tc", "lane_base", "check_vc", "access", "outside", "known_at_exit", "TC_LOADS", "TC_STORES",
           "TC_OPS"]

LANES, COLUMNS = 128, 512
POISON = 0xCDCDCDCD   # a cell never written: its bits show where a kernel reads them
TC_LOADS, TC_STORES, TC_OPS = "tcgen05 loads", "tcgen05 stores", "tcgen05 operations"
TC_WAITS = "tcgen05 waits"   # (a warp's waits, as its lanes' clocks carry them)


class Tcgen05:
  """What the family keeps per launch (``Machine.tcgen05``): ``tmem`` (CTA ->
  ``TensorMemory``, made at its first use), ``warps`` ((CTA, warp) -> ``WarpTc``),
  ``threads`` (thread slot -> ``ThreadTc``), ``cta_group`` (the first ``.cta_group``
  of the run and where: one value per kernel), ``relinquished`` (CTAs that gave up
  allocating), ``commits`` (each commit's arrival: (mbarrier slot, the phase it falls
  in, the issuer's operations slot, how many operations it covers)), ``pair_held``
  ((CTA, columns) -> the first column a pair allocation holds for that CTA's warp)."""

  def __init__(self):
    self.tmem, self.warps, self.threads = {}, {}, {}
    self.cta_group, self.relinquished, self.commits = None, set(), []
    self.pair_held = {}


class TensorMemory:
  """One CTA's tensor memory (module doc); ``allocations``: first column -> (columns,
  the warp that allocated them; None: held for the warp of a pair allocation that has
  not come yet)."""

  def __init__(self, cta):
    self.cta = cta
    self.cells = np.full((LANES, COLUMNS), POISON, np.uint32)
    self.shadow = Shadow(LANES * COLUMNS * 4)
    self.allocations = {}

  def free_at(self, ncols, start=None):
    """The first column of ``ncols`` free columns, a multiple of ``ncols`` (first fit:
    the ISA leaves the address to the hardware; a kernel uses the one written), or
    None; with ``start``: whether the ``ncols`` columns from ``start`` are free."""
    def free(s):
      return all(s + ncols <= c or c + n <= s for c, (n, _) in self.allocations.items())
    if start is not None:
      return free(start)
    return next((s for s in range(0, COLUMNS, ncols) if free(s)), None)

  def allocated(self, col, ncols) -> bool:
    """Whether columns [col, col + ncols) are all allocated."""
    return all(any(c <= x < c + n for c, (n, _) in self.allocations.items())
               for x in (col, col + ncols - 1)) and ncols > 0


class WarpTc:
  """A warp's tcgen05 loads and stores: their counts and slots, and how many it has
  waited for (``tcgen05.wait::ld`` / ``::st``).  The waits are also written into the
  waiting lanes' clocks at two slots of their own (``ld_wait_slot``, ``st_wait_slot``),
  so that a synchronisation carries them with no fence: what jax's kernels rely on."""

  __slots__ = ("cta", "warp", "ld_slot", "st_slot", "ld_wait_slot", "st_wait_slot",
               "loads", "stores", "waited_ld", "waited_st")

  def __init__(self, k, cta, warp):
    self.cta, self.warp = cta, warp
    self.ld_slot = k.slots.allocate(TC_LOADS, self)
    self.st_slot = k.slots.allocate(TC_STORES, self)
    # what its lanes' clocks carry from a wait (no fence): a conflict that only these
    # order is the warning tcgen05-fence-sync (``access``)
    self.ld_wait_slot = k.slots.allocate(TC_WAITS, self)
    self.st_wait_slot = k.slots.allocate(TC_WAITS, self)
    self.loads = self.stores = self.waited_ld = self.waited_st = 0

  def describe_access(self, slot, clk):
    """(who, what is missing) for a race with access number ``clk`` of this warp."""
    if slot == self.ld_slot:
      return (f"tcgen05.ld number {clk} of CTA {self.cta} warp {self.warp}",
              "a tcgen05.wait::ld by that warp, then tcgen05.fence::before_thread_sync, "
              "a synchronisation and tcgen05.fence::after_thread_sync on this side")
    return (f"tcgen05.st number {clk} of CTA {self.cta} warp {self.warp}",
            "a tcgen05.wait::st by that warp, then tcgen05.fence::before_thread_sync, a "
            "synchronisation and tcgen05.fence::after_thread_sync on this side")


class ThreadTc:
  """A thread's tcgen05 state: ``view`` (its clock at its last
  ``tcgen05.fence::after_thread_sync``; None: none yet), its MMAs' slot and count."""

  __slots__ = ("th", "view", "ops_slot", "ops")

  def __init__(self, th):
    self.th, self.view, self.ops_slot, self.ops = th, None, None, 0

  def describe_access(self, slot, clk):
    th = self.th
    return (f"the tcgen05 operations 1..{clk} of CTA {th.cta} thread {th.tid} (tcgen05.mma, "
            "tcgen05.cp)",
            "a tcgen05.commit by that thread whose mbarrier phase this thread observed, "
            "then tcgen05.fence::after_thread_sync")


def tmem(k, cta) -> TensorMemory:
  state = k.tcgen05
  found = state.tmem.get(cta)
  if found is None:
    found = state.tmem[cta] = TensorMemory(cta)
  return found


def warp_tc(k, th) -> WarpTc:
  key = (th.cta, th.tid // 32)
  found = k.tcgen05.warps.get(key)
  if found is None:
    found = k.tcgen05.warps[key] = WarpTc(k, *key)
  return found


def thread_tc(k, th) -> ThreadTc:
  found = k.tcgen05.threads.get(th.slot)
  if found is None:
    found = k.tcgen05.threads[th.slot] = ThreadTc(th)
  return found


def lane_base(th, lane_field: int) -> int:
  """The first tensor-memory lane a ``tcgen05.ld`` / ``st`` of ``th``'s warp reaches
  with an address whose lane field is ``lane_field``: its warp's quarter
  (``32 (w % 4)``) plus the field within it.  jax addresses lane 0 (or 16) from every
  warp of the warpgroup, CUTLASS adds the warp's quarter; both run.  A field in another
  warp's quarter is refused by the caller (``tcgen05-lanes``)."""
  return 32 * ((th.tid // 32) % 4) + lane_field % 32


def _waited_only(k, bad, full):
  """Who made the earlier access of ``bad`` (``Shadow.conflict``'s) where it is a warp's
  tcgen05.ld / st that ``full`` (a clock) orders only through that warp's wait carried
  by a synchronisation (no fences), else None."""
  slot, clk = bad[1], bad[2]
  kind = k.slots.kind(slot)
  if kind not in (TC_LOADS, TC_STORES):
    return None
  w = k.slots.owner(slot).obj
  wait_slot = w.ld_wait_slot if kind == TC_LOADS else w.st_wait_slot
  return w.describe_access(slot, clk)[0] if full[wait_slot] >= clk else None


def check_vc(k, th, *, pipelined=False):
  """The clock ``th``'s tcgen05 access is ordered by (module doc): its view at its last
  after-fence, its own thread slot now, its warp's waited loads and stores, and its
  own MMAs where ``pipelined`` (an MMA after its own MMAs)."""
  tc = thread_tc(k, th)
  vc = np.zeros_like(th.vc) if tc.view is None else tc.view.copy()
  vc[th.slot] = th.vc[th.slot]
  w = k.tcgen05.warps.get((th.cta, th.tid // 32))
  if w is not None:
    vc[w.ld_slot] = max(int(vc[w.ld_slot]), w.waited_ld)
    vc[w.st_slot] = max(int(vc[w.st_slot]), w.waited_st)
  if pipelined and tc.ops_slot is not None:
    vc[tc.ops_slot] = tc.ops
  return vc


def access(k, th, tm, runs, *, write, stamp, insn, what, pipelined=False, full_clock=False,
           load_rule=None):
  """Checks and records one thread's access to tensor memory ``tm``: ``runs`` (byte
  offset, bytes) in its lane-major bytes, by instruction ``insn`` (``what`` names it);
  ``stamp`` (slot, clock) it is known by afterwards.  An asynchronous access is
  ordered by ``check_vc`` (``pipelined``: an MMA after the thread's own); a
  synchronous one (``full_clock``: ``dealloc``) by the thread's whole clock.  A
  conflict that the thread's whole clock orders is a missing
  ``tcgen05.fence::after_thread_sync`` (rule ``tcgen05-fence``); else a ``race``, or,
  with ``load_rule``, a write over a ``tcgen05.ld``'s read is that rule."""
  vc = check_vc(k, th, pipelined=pipelined)
  if full_clock:
    vc = np.maximum(th.vc, vc)
  sh = tm.shadow
  for off, n in runs:
    bad = sh.conflict(vc, off, n, write=write, atomic=False)
    if bad is not None:
      lane, col = divmod(off // 4, COLUMNS)
      memory = f"CTA {tm.cta} tensor memory lane {lane} columns {col}..{col + n // 4 - 1}"
      full = np.maximum(th.vc, vc)
      mine = access_core.access_of(k, th, "tcgen05 " + ("write" if write else "read"),
                                   memory, insn)
      waited = _waited_only(k, bad, full)
      if waited is not None:
        findings.report(k, Finding(
            "tcgen05-fence-sync", f"CTA {th.cta} thread {th.tid}'s {what} "
            f"{'writes' if write else 'reads'} {memory}, {bad[0]} {waited}, ordered after "
            "it only by that warp's tcgen05.wait and a synchronisation with no "
            "tcgen05.fence::before_thread_sync / after_thread_sync around it", access=mine,
            missing="tcgen05.fence::before_thread_sync before the synchronisation and "
            "tcgen05.fence::after_thread_sync after it"))
      elif load_rule and bad[0] == "read by" and k.slots.kind(bad[1]) == TC_LOADS:
        who, missing = k.slots.owner(bad[1]).obj.describe_access(bad[1], bad[2])
        findings.report(k, Finding(
            load_rule, f"CTA {th.cta} thread {th.tid}'s {what} writes {memory}, read by "
            f"{who}, which that warp never waited for (tcgen05.wait::ld) before the "
            "synchronisation", access=mine, missing=missing))
      elif sh.conflict(full, off, n, write=write, atomic=False) is None:
        findings.report(k, Finding(
            "tcgen05-fence", f"CTA {th.cta} thread {th.tid}'s {what} {'writes' if write else 'reads'} "
            f"{memory}, ordered after the earlier access to it only by a thread "
            "synchronisation since its last tcgen05.fence::after_thread_sync (or with none "
            "yet): the asynchronous tcgen05 operation may run before it",
            access=mine, missing="tcgen05.fence::after_thread_sync between the "
            "synchronisation and this instruction"))
      else:
        access_core.conflict(k, f"CTA {th.cta} thread {th.tid}'s {what} "
                             f"{'writes' if write else 'reads'} {memory}", *bad, th, None,
                             mine=mine)
    sh.record(off, n, write=write, atomic=False, stamp=(*stamp, insn))


def outside(th, what, detail) -> str:
  """The message of a ``tcgen05-lanes`` finding: an access outside the warp's lanes or
  the allocated columns."""
  return f"CTA {th.cta} thread {th.tid}'s {what}: {detail}"


def known_at_exit(k, cta, known, phases) -> None:
  """The exit rule's hook (``family.Family.known_at_exit``): a thread of the CTA that
  observed the phase a ``tcgen05.commit`` arrived in knows the operations it covers,
  whatever the wait's semantics (a relaxed wait and ``tcgen05.fence::after_thread_sync``
  order them, 9.7.16.6.4.2)."""
  for bar_slot, phase, ops_slot, count in k.tcgen05.commits:
    if ops_slot is not None and phases[bar_slot] >= phase + 1:
      known[ops_slot] = max(int(known[ops_slot]), count)
