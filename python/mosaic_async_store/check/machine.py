"""The PTX checker's machine: the whole state of one cluster's run, in one place.

A ``Machine`` is what every family module's handlers (``opcodes.FAMILIES``) compile
against and what their instruction functions read and write at run time.  It
holds no behaviour beyond making a fresh state at launch (``reset``): the
semantics live in the family modules, as functions of the machine ``k``, and the
scheduler in ``run``.  Its state, by what it models (each attribute is set by
``reset``; ``__init__`` declares every one, so the list below is complete):

  * the program: ``program`` (``program.Program``: the compiled instructions, their
    text, PTX lines and source lines);
  * the threads: ``threads`` (``Thread``, in CTA then thread order), ``registers``
    (every thread's registers, one column per register: ``registers.Registers``), ``block``,
    ``alive`` / ``alive_total`` / ``exited`` (non-exited threads per CTA, in all,
    exited CTAs), ``warps_per_cta``, ``warp_alive`` (non-exited threads of warp ``w``
    of CTA ``c`` at ``c * warps_per_cta + w``);
  * memories: ``smem`` (each CTA's shared memory), ``shadow`` (its per-byte history,
    ``shadow.Shadow``), ``smem_cta`` (buffer id -> CTA), ``gbufs`` / ``gshadow``
    (the global buffers and their history, ``global_memory``), ``param_buf`` (the
    kernel parameters), ``tensor_maps`` (offset of each tensor-map parameter's 128
    bytes in ``param_buf`` -> its ``tensor_map.TensorMap``), ``flags`` (each strongly
    written location's release state,
    ``strong``), ``sc_fences`` (the clocks of the ``fence.sc`` operations so far, in
    Fence-SC order: ``fences``), ``remote_arrivals`` (other CTAs' mbarrier operations on
    a CTA's mbarriers, ``mbarrier_state._note_remote``: the exit rule), ``flag_reads`` (per
    CTA, the strong writes into its shared memory that its threads read from: (offset,
    writer slot) -> clock; the exit rule counts each one, alone, as completed);
  * barriers: ``mbar`` (key (CTA, offset) -> ``mbarrier_state.Mbarrier``),
    ``named`` / ``warp_arrivals`` (named CTA barriers and the warps arriving on them,
    ``barriers``), ``cluster_gens`` / ``cluster_lanes`` / ``cluster_reached`` /
    ``cluster_waiting`` (the cluster barrier's generations and arrivals),
    ``cluster_relaxed`` / ``executed_before`` (its relaxed arrives' clocks, and per CTA
    what its waits ordered by execution alone: the exit rule's ``exit-relaxed``),
    ``pair_plan`` / ``pair_seen`` / ``pair_users`` / ``held`` (the pairings of warps
    into named-barrier instances a launch explores, ``pairings.explore``),
    ``arrive_plan`` / ``arrive_seen`` / ``arrive_last`` / ``arrive_held`` (the orders of
    mbarrier arrivals, ``arrival_orders``), ``land_plan`` / ``land_seen`` (the orders of
    landing, ``landing_orders``), ``late`` / ``late_ready`` (late observers, ``run``);
  * asynchronous operations: ``inflight`` (``asyncops.AsyncOp`` and ``StoreGroup``
    issued, not landed);
  * what each opcode family keeps per launch (``family.Family.state``: attribute ->
    a fresh value; the registry, ``families.state``, lists them);
  * clocks: ``clocks`` (every thread's vector clock, ``Thread.vc``, as a row of one
    matrix: row ``slot - 1``), ``seen`` (every thread's ``Thread.seen``, the same
    way), ``slots`` (``slots.SlotTable``: who owns each vector-clock slot: the
    initial memory, the threads, the mbarriers' data and initialisations, what a family
    allocates);
  * the scheduler (``run``): ``sched`` (``schedule.Schedule``: every choice a schedule
    makes), ``runnable`` / ``blocked`` / ``parked`` (threads by state),
    ``group_waiting`` (lanes waiting at warp collectives per warp), ``dirty`` (a
    synchronisation may complete), ``epoch`` (bumped by every change another thread
    can see: polling), ``step`` (counts the instructions a piece ran: the lanes of
    one step issue one ``StoreGroup``), ``timeouts``, ``grid_clusters``;
  * what a run reports: ``findings`` (``findings.Finding`` s, each a broken rule
    as data, placed at its instruction; ``findings.py``), ``finding_keys`` (what
    makes two findings one), ``unplaced`` (findings reported by the instruction that
    is running, not yet placed), ``executed`` (thread-instructions), ``calls`` (the
    kernel's vprintf calls), ``store_trace`` (``launch(trace_stores=True)``).
"""

from __future__ import annotations

import functools
from itertools import filterfalse

import numpy as np

from mosaic_async_store.check import families, params
from mosaic_async_store.check.global_memory import GlobalShadow
from mosaic_async_store.check.memory import CLOCK, Releases
from mosaic_async_store.check.shadow import Shadow
from mosaic_async_store.check.schedule import Schedule
from mosaic_async_store.check.params import Memref, ParamMismatch   # (the launch's
                                                                    #  arguments)
from mosaic_async_store.check.registers import Registers
from mosaic_async_store.check.slots import SlotTable

__all__ = ["Machine", "Memref", "ParamMismatch", "Thread"]


class Thread:
  """One thread: where it is (``row``: its index in ``Machine.threads``, which is its
  place in every register's column, ``registers.Registers``), and its memory-model
  state (``vc``: its vector clock; ``unscoped``: clocks it saw through pairs whose
  scopes do not include each other, ``unscoped_pair`` the (release, acquire) scopes of
  the last;
  ``seen``: the phases it observed complete, whatever the wait's semantics (the exit
  rule counts their operations as completed);
  ``fence_rel``: the clock its last fence releases with a later relaxed arrive;
  ``pending_obs``: phases a relaxed wait observed; ``remote_since``: its clock at
  its first access to another CTA's shared memory, which a
  ``.sync_restrict::shared::cta`` fence does not release; ``polled``: its last
  instruction was a poll (``poll_pc``: that instruction, or the backward branch it
  yielded at); ``poll_seen`` / ``poll_epoch``: the states it polled in since the
  epoch it names (``run``: polling); ``spin_epoch``: the last epoch in which it
  polled twice (it spins: nothing it could see changed); ``poll_what``: (pc, wait) of
  the mbarrier wait it last timed out on, which a parked poll loop is waiting for;
  ``tried_wait``: the mbarrier wait that last returned false to it (sync.py); ``released``: per
  location it wrote with a release, that release (strong.py); ``products``: the
  products of its float ``mul``s without a rounding modifier (contraction.py);
  ``stale_read``: per strong location (buffer id, offset, size), the newest write it
  has already had a stale read after (strong.py: a retry reads the newest)).  ``wait`` says what
  a blocked thread waits for: a ``waits.Wait``)."""

  __slots__ = ("row", "pc", "cta", "tid", "state", "wait", "cluster_arrived", "local",
               "slot", "vc", "unscoped", "unscoped_pair", "seen", "fence_rel", "pending_obs",
               "remote_since", "polled", "poll_pc", "poll_seen", "poll_epoch",
               "poll_what", "tried_wait", "released", "products", "spin_epoch", "stale_read")

  def __init__(self, cta, tid, local_bytes, slot, vc, seen):
    self.row, self.pc, self.cta, self.tid = slot - 1, 0, cta, tid
    self.state, self.wait, self.cluster_arrived = "run", None, 0
    self.local = bytearray(local_bytes)
    nslots = len(vc)
    self.slot, self.vc, self.unscoped = slot, vc, np.zeros(nslots, CLOCK)
    self.seen, self.unscoped_pair = seen, None
    self.vc[slot], self.fence_rel, self.pending_obs, self.remote_since = 1, None, [], None
    self.polled, self.poll_seen, self.poll_epoch = False, set(), -1
    self.poll_what, self.poll_pc, self.tried_wait, self.released = None, None, None, {}
    self.products, self.spin_epoch, self.stale_read = {}, -1, {}


def _dims(value, default_yz=1) -> tuple[int, int, int]:
  """An int x, or (x, y, z), as (x, y, z)."""
  return tuple(value) if isinstance(value, tuple) else (int(value), default_yz, default_yz)


def _special_columns(ctas, cluster, block, first, grid):
  """The preset registers of every thread of the ``ctas`` CTAs of a cluster of shape
  ``cluster`` whose first CTA is at ``first`` of a grid of ``grid`` CTAs (each (x, y,
  z); blocks are x only), as columns (``registers.Registers.reset``): name -> one
  value per thread, CTA by CTA (its rank: x fastest, PTX ISA %cluster_ctarank)."""
  tids = range(block)
  columns = {"%tid.x": list(tids) * ctas, "%laneid": [t % 32 for t in tids] * ctas,
             "%warpid": [t // 32 for t in tids] * ctas}
  per_cta = [_cta_registers(c, tuple(cluster), block, tuple(first), tuple(grid))
             for c in range(ctas)]
  for name in per_cta[0]:
    columns[name] = [v for regs in per_cta for v in [regs[name]] * block]
  return columns


@functools.lru_cache(maxsize=256)
def _cta_registers(c, cluster, block, first, grid):
  """The preset registers every thread of CTA ``c`` shares (``_special_columns``; the
  shapes as tuples, which the cache keys on)."""
  cx, cy, _ = cluster
  at = (c % cx, c // cx % cy, c // (cx * cy))   # the CTA's place in its cluster
  special = {f"%{r}.{ax}": n for ax in "yz" for r, n in (("tid", 0), ("ntid", 1))}
  for i, ax in enumerate("xyz"):
    special.update({f"%ctaid.{ax}": first[i] + at[i], f"%nctaid.{ax}": grid[i],
                    f"%clusterid.{ax}": first[i] // cluster[i],
                    f"%nclusterid.{ax}": grid[i] // cluster[i],
                    f"%cluster_ctaid.{ax}": at[i], f"%cluster_nctaid.{ax}": cluster[i]})
  special.update({"%ntid.x": block, "%cluster_ctarank": c,
                  "%cluster_nctarank": cluster[0] * cluster[1] * cluster[2]})
  return special


class Machine:
  """The state of one cluster's run (the module doc lists it)."""

  def __init__(self):
    self.program = None
    self.threads, self.block, self.alive, self.alive_total, self.exited = [], 0, [], 0, []
    self.registers = Registers()   # (one for the machine's life: compiled code holds its
                                   #  columns)
    self.warps_per_cta, self.warp_alive = 0, []
    self.smem, self.shadow, self.smem_cta = [], [], {}
    self.gbufs, self.gshadow, self.param_buf = [], None, b""
    self.tensor_maps = {}   # set by pack_params (at reset)
    self.flags, self.remote_arrivals, self.flag_reads = {}, [], []
    self.sc_fences = None
    self.mbar, self.named, self.warp_arrivals = {}, {}, {}
    self.cluster_gens, self.cluster_lanes, self.cluster_reached = [], {}, []
    self.cluster_waiting = 0
    self.cluster_relaxed, self.executed_before = [], {}
    self.pair_plan, self.pair_seen, self.pair_users, self.held = None, [], {}, {}
    self.arrive_plan, self.arrive_seen, self.arrive_last, self.arrive_held = None, [], {}, []
    self.land_plan, self.land_seen, self.late, self.late_ready = None, 0, {}, 0
    self.inflight, self.step = [], 0
    self.slots, self.clocks, self.seen = None, None, None
    self.sched, self.runnable, self.blocked, self.parked = None, [], {}, []
    self.group_waiting, self.dirty, self.epoch, self.timeouts = {}, False, 0, 0
    self.grid_clusters = 1
    self.executed, self.calls, self.store_trace = 0, [], None
    self.findings, self.finding_keys, self.unplaced = [], set(), []
    self.proxy_fences = {}
    for name, fresh in families.state().items():   # what each family keeps per launch
      setattr(self, name, fresh())

  def drop_state(self):
    """Lets go of a run's threads, memories and shadows (a run stopped for its memory
    budget: what it held is what filled memory)."""
    self.threads, self.runnable, self.blocked, self.parked, self.inflight = [], [], {}, [], []
    self.shadow, self.gshadow, self.clocks, self.mbar, self.flags = [], None, None, {}, {}
    self.seen = None
    self.registers.reset(0, {})

  def reset(self, buffers, *, cluster, smem_bytes, block, schedule, barrier_slots,
            trace_stores, smem_init, first_cta, grid_ctas):
    """A fresh state for ``run.launch`` (its arguments)."""
    self.pack_params(buffers)
    shape = _dims(cluster)   # (x, y, z) of the cluster; ``cluster``: its CTAs
    cluster = shape[0] * shape[1] * shape[2]
    grid = shape if grid_ctas is None else _dims(grid_ctas)
    first = _dims(first_cta, 0)
    self.store_trace = {} if trace_stores else None
    self.smem = [bytearray(b"\xcd" * smem_bytes) for _ in range(cluster)]  # uninitialised
    for buf, image in zip(self.smem, smem_init or ()):
      buf[:len(image)] = bytes(image)
    self.shadow = [Shadow(smem_bytes) for _ in range(cluster)]
    self.smem_cta = {id(b): i for i, b in enumerate(self.smem)}
    self.flags, self.remote_arrivals = {}, [{} for _ in range(cluster)]
    self.sc_fences = Releases()   # the fence.sc operations so far (Fence-SC order)
    self.flag_reads = [{} for _ in range(cluster)]
    self.mbar, self.named, self.warp_arrivals = {}, {}, {}
    self.cluster_gens, self.cluster_lanes = [], {}
    self.cluster_reached = [cluster * block]   # [n]: threads with >= n cluster arrives
    self.cluster_waiting = 0                   # threads blocked in barrier.cluster.wait
    self.cluster_relaxed = []    # per generation: its relaxed arrives' clocks (no release)
    self.executed_before = {}    # CTA -> what its waits ordered by execution alone
    self.pair_seen, self.pair_users, self.held = [], {}, {}   # (pair_plan: the launch's)
    self.inflight, self.step = [], 0
    nslots = 1 + cluster * block + 2 * barrier_slots   # the initial memory, the threads,
                                                      # then two per barrier (slots.py)
    self.block, self.exited = block, [False] * cluster
    # every thread's clock is a row of one matrix (row i: slot i + 1), so a warp form
    # reads the clocks of all its lanes at once
    self.clocks = np.zeros((cluster * block, nslots), CLOCK)
    self.seen = np.zeros((cluster * block, nslots), CLOCK)   # (the same: Thread.seen)
    self.threads = [Thread(c, t, self.program.local_bytes, c * block + t + 1,
                           self.clocks[c * block + t], self.seen[c * block + t])
                    for c in range(cluster) for t in range(block)]
    self.registers.reset(cluster * block, _special_columns(cluster, shape, block, first,
                                                           grid))
    self.slots = SlotTable(self.threads, nslots)
    self.alive, self.alive_total = [block] * cluster, cluster * block   # not exited
    self.warps_per_cta = -(-block // 32)
    self.warp_alive = [min(32, block - 32 * w) for _ in range(cluster)
                       for w in range(self.warps_per_cta)]
    self.sched, self.runnable, self.blocked, self.parked = Schedule(schedule), \
        list(self.threads), {}, []
    self.group_waiting, self.dirty, self.epoch, self.timeouts = {}, True, 0, 0
    self.grid_clusters = grid[0] * grid[1] * grid[2] // cluster
    self.executed, self.calls = 0, []
    self.findings, self.finding_keys, self.unplaced = [], set(), []
    self.proxy_fences = {}   # thread slot -> its fence.proxy.async clocks (proxy.py)
    for name, fresh in families.state().items():   # (family.Family.state)
      setattr(self, name, fresh())

  @staticmethod
  def _first_row(lanes):
    """The row of ``lanes[0]`` where ``lanes`` (threads of one warp in lane order) are
    consecutive threads (a converged piece: first and last tell), else None."""
    first = lanes[0].slot - 1
    return first if lanes[-1].slot - first == len(lanes) else None

  @staticmethod
  def _first_of_run(rows):
    """The first of ``rows`` (ascending and distinct, an index array) where they are
    consecutive (a warp's lanes, whole warps in order), else None."""
    if not len(rows):
      return None
    first = int(rows[0])
    return first if int(rows[-1]) - first + 1 == len(rows) else None

  def acquire_rows(self, rows, vc):
    """Each thread of ``rows`` (rows of ``clocks``, ascending and distinct, an index
    array) acquires ``vc``: its clock becomes the join of both (in place where the rows
    are consecutive)."""
    first = self._first_of_run(rows)
    if first is not None:
      view = self.clocks[first:first + len(rows)]
      np.maximum(view, vc, out=view)
    elif len(rows):
      self.clocks[rows] = np.maximum(self.clocks[rows], vc)

  def tick(self, rows):
    """Each thread of ``rows`` (rows of ``clocks``, ascending and distinct, an index
    array) ticks its own slot (row ``r`` is slot ``r + 1``): its later accesses are not
    before what it did."""
    first = self._first_of_run(rows)
    if first is not None and self.clocks.flags.c_contiguous:   # (a strided view of the
      stride = self.clocks.shape[1] + 1                         # diagonal)
      start = first * stride + 1
      self.clocks.reshape(-1)[start:start + len(rows) * stride:stride] += 1
    else:
      self.clocks[rows, rows + 1] += 1

  def dequeue(self, threads) -> None:
    """Takes ``threads`` (distinct, each in the run queue) out of the run queue, the
    others keeping their order: one slice where they stand together in it in this order
    (a warp queued together, the common case), else a filter (C loops: the queue may
    hold a whole CTA)."""
    queue = self.runnable
    try:
      at = queue.index(threads[0])
    except ValueError:
      at = -1
    if at >= 0 and queue[at:at + len(threads)] == threads:
      del queue[at:at + len(threads)]
    else:
      self.runnable = list(filterfalse(set(threads).__contains__, queue))

  def lane_rows(self, lanes):
    """The rows of ``clocks`` of ``lanes`` (threads of one warp in lane order), an
    index array (row ``slot - 1``)."""
    first = self._first_row(lanes)
    if first is not None:
      return np.arange(first, first + len(lanes))
    return np.fromiter((th.slot - 1 for th in lanes), np.intp, len(lanes))

  def lane_clocks(self, lanes):
    """The clocks of ``lanes`` (threads of one warp in lane order), one row each: a
    view of ``clocks`` where they are consecutive threads, else a copy."""
    first = self._first_row(lanes)
    if first is not None:
      return self.clocks[first:first + len(lanes)]
    return self.clocks[self.lane_rows(lanes)]

  def lane_stamps(self, lanes):
    """(slots, clocks): each of ``lanes``' slot and its own clock there, as lists in
    lane order (one diagonal of ``clocks`` where the lanes are consecutive threads)."""
    first = self._first_row(lanes)
    if first is not None:
      end = first + len(lanes)   # (row r: slot r + 1)
      return list(range(first + 1, end + 1)), \
          self.clocks[first:end, first + 1:end + 1].diagonal().tolist()
    rows = self.lane_rows(lanes)
    return (rows + 1).tolist(), self.clocks[rows, rows + 1].tolist()

  def pack_params(self, args):
    """The launch arguments (arrays, ``Memref``s, ``tensor_map.TensorMap``s) packed into
    the kernel's parameters (``params.pack``: layout, aliasing, ``ParamMismatch``);
    each distinct array is one global buffer at (j + 1) << 40; then a fresh shadow
    (global_memory: the bytes now are the initial contents)."""
    packed = params.pack(self.program, args)
    self.gbufs, self.param_buf, self.tensor_maps = packed.gbufs, packed.param_buf, \
        packed.tensor_maps
    self.gshadow = GlobalShadow(self.gbufs, packed.names)
