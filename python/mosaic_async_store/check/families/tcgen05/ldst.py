"""``tcgen05.ld`` / ``tcgen05.st`` / ``tcgen05.wait::{ld,st}`` and the two tcgen05 fences
(PTX ISA 9.7.16.8, 9.7.16.11).

``ld`` and ``st`` are ``.sync.aligned`` warp collectives that every lane issues with
one ``taddr`` ("All the threads in the warp must specify the same value of taddr ...
Otherwise, the behavior is undefined").  Each thread moves the cells of its fragment
(``FRAGMENTS``: which lane and column register ``r[k * R + i]`` of lane ``t`` holds,
per shape, from the ISA's data-movement shapes as CUTLASS and jax lay them out), in the
lanes of its warp's quarter (``state.lane_base``) and in allocated columns.  The values
move at issue; the tensor-memory access stays unordered for everyone, the warp itself
included, until the warp's ``tcgen05.wait::ld`` / ``::st`` (9.7.16.6.4.2), and for other
threads until a ``tcgen05.fence::before_thread_sync`` after that wait, a thread
synchronisation, and their ``tcgen05.fence::after_thread_sync`` (9.7.16.6.4.4).  The
registers an ``ld`` writes may be read before ``wait::ld`` (9.7.16.6.4.5: "an
intra-thread ordering through true register dependency will be respected").

Run: ``.32x32b``, ``.16x64b``, ``.16x128b``, ``.16x256b`` with ``.x1`` .. ``.x128`` (as the
ISA bounds the register count), ``.b32``, and ``tcgen05.ld``'s ``.pack::16b`` /
``tcgen05.st``'s ``.unpack::16b`` (9.7.16.8.2: "two 16-bit chunks can be packed into a
single 32-bit chunk in the register in tcgen05.ld"; "a single 32-bit chunk in the
register can be unpacked into two 16-bit chunks in tcgen05.st"; 9.7.16.8.3: ".pack::16b
can be used to pack two 16-bit elements from adjacent columns into a single 32-bit
element").  Packed, a register's cell ``(lane, c)`` of the fragment is the two columns
``2 c`` and ``2 c + 1`` (the register count stays Table 49's, so the columns reached
double): the register's low 16 bits are column ``2 c``'s, the high ones column
``2 c + 1``'s, each the low 16 bits of its 32-bit cell (as 9.7.16.10.4.1 places a 16-bit
D: "a Tensor Memory word would contain a single 16-bit element in its lower 16 bits").
The ISA draws this in a figure (193); the columns doubling is what jax's hardware-tested
unpacked 16-bit TMEM refs rely on (their ``.16x128b`` / ``.32x32b`` accesses step 8 / 2
columns per ``.num`` packed, 4 / 1 not).  What an unpacking store leaves in a cell's high
16 bits no sentence says: the checker writes half the poison pattern there (``0xCDCD``),
so a kernel that reads it as data sees it.  Refused by name: ``.16x32bx2``,
``tcgen05.ld.red``, ``.unpack::16b`` on a load and ``.pack::16b`` on a store (not forms
of the ISA).
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import program, warp
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.memory import morally_strong
from mosaic_async_store.check.families.tcgen05 import state
from mosaic_async_store.check.families.tcgen05.state import COLUMNS
from mosaic_async_store.check.registers import write

__all__ = ["FRAGMENTS", "cells", "load", "store", "wait", "fence", "publish", "RULES",
           "WARNINGS"]

# The warnings about loads and stores, with the evidence (memory.WARNINGS).
WARNINGS = {
    "tcgen05-fence-sync": "jax 0.12.1's commit_tmem (tcgen05.wait::st and a warpgroup "
                          "bar.sync) and wait_load_tmem (tcgen05.wait::ld and bar.sync) "
                          "emit no tcgen05 fences; upstream's hardware-tested tcgen05 tests "
                          "rely on them (test/emu/test_tcgen05_calibration.py)",
}

RULES = {
    "tcgen05-lanes": "PTX ISA 9.7.16.8.1: \"A lane of the Tensor Memory can be accessed by a "
                     "single warp in the warpgroup\" (warp w % 4 reaches lanes 32 (w % 4) .. "
                     "+31); 9.7.16.7.1: tensor memory is accessed where tcgen05.alloc "
                     "allocated it",
    "tcgen05-address": "PTX ISA 9.7.16.8.3, tcgen05.ld (and st): \"All the threads in the "
                       "warp must specify the same value of taddr, which must be the base "
                       "address of the collective load operation. Otherwise, the behavior "
                       "is undefined\"",
    "tcgen05-fence-sync": "PTX ISA 9.7.16.6.4.4: a producer's tcgen05.ld / st \"must "
                          "explicitly wait for the instructions' completion before "
                          "synchronizing with the consumer threads\", with "
                          "tcgen05.fence::before_thread_sync before the synchronisation and "
                          "tcgen05.fence::after_thread_sync after it (9.7.16.6.3): a wait "
                          "and a synchronisation alone order nothing by the letter",
    "tcgen05-fence": "PTX ISA 9.7.16.6.3: \"An asynchronous tcgen05 operation subsequent to "
                     "a tcgen05.fence::after_thread_sync is ordered after all the prior "
                     "tcgen05 and the execution ordering operations\": without it, a thread "
                     "synchronisation does not order a later asynchronous tcgen05 operation "
                     "(9.7.16.6.4.4)",
}

# Shape -> (lanes it spans, registers per .x1, fragment(t, k, i) -> (lane, column) offsets
# from the base, for lane t of the warp, repeat k and register i of the repeat).
FRAGMENTS = {
    "32x32b": (32, 1, lambda t, k, i: (t, k)),
    "16x64b": (16, 1, lambda t, k, i: (8 * (t % 2) + t // 4, 2 * k + (t // 2) % 2)),
    "16x128b": (16, 2, lambda t, k, i: (8 * i + t // 4, 4 * k + t % 4)),
    "16x256b": (16, 4, lambda t, k, i: (8 * (i // 2) + t // 4, 8 * k + 2 * (t % 4) + i % 2)),
}
_MAX_REGS = 128


def cells(shape: str, num: int, t: int):
  """The (lane, column) offsets of lane ``t``'s registers, in register order."""
  _, per, frag = FRAGMENTS[shape]
  return [frag(t, k, i) for k in range(num) for i in range(per)]


# The 16-bit packing qualifier each verb takes (9.7.16.8.3 / .4).
_PACKING = {"ld": "pack::16b", "st": "unpack::16b"}
_HIGH_POISON = state.POISON & 0xFFFF0000   # (an unpacked cell's high half: module doc)


def _form(ins, verb):
  """(shape, num, packed) of ``tcgen05.{ld,st}.sync.aligned.shape.num{.pack}.b32``;
  anything else is refused by name."""
  mods = ins.mods[1:]
  if mods[:1] == ["red"]:
    raise NotImplementedError(f"opcode {ins.opcode} (tcgen05.ld.red: not run by the checker)")
  packed = len(mods) == 6 and mods[4] == _PACKING[verb]
  if packed:
    mods = mods[:4] + mods[5:]
  if len(mods) != 5 or mods[:2] != ["sync", "aligned"] or mods[4] != "b32":
    what = "the form"
    if any("pack" in m for m in mods):
      what = f"tcgen05.{verb} takes .{_PACKING[verb]}, not {[m for m in mods if 'pack' in m]}"
    raise NotImplementedError(f"opcode {ins.opcode} ({what}: the checker runs tcgen05.{verb}"
                              ".sync.aligned.{32x32b,16x64b,16x128b,16x256b}.xN"
                              f"{{.{_PACKING[verb]}}}.b32)")
  shape, num = mods[2], mods[3]
  if shape not in FRAGMENTS or not num.startswith("x") or not num[1:].isdigit():
    raise NotImplementedError(f"opcode {ins.opcode} (shape .{shape}: the checker runs "
                              f"{', '.join('.' + s for s in FRAGMENTS)})")
  n = int(num[1:])
  if n & (n - 1) or not 1 <= n <= 128 or n * FRAGMENTS[shape][1] > _MAX_REGS:
    raise NotImplementedError(f"opcode {ins.opcode} (.{num}: not a count the ISA gives "
                              f".{shape})")
  return shape, n, packed


def _columns(frag, packed):
  """The cells a fragment reaches: ``frag`` itself, or, ``packed``, each cell's two
  columns ``2 c`` and ``2 c + 1`` (module doc), in register order."""
  if not packed:
    return frag
  return [(dl, 2 * dc + h) for dl, dc in frag for h in (0, 1)]


def _base(k, lanes, taddr, what, pc):
  """(tensor memory, first lane, first column) of a warp collective at ``taddr`` (one
  value per lane), checking the lanes it may reach."""
  th = lanes[0]
  addrs = {int(taddr(t)) for t in lanes}
  if len(addrs) != 1:
    raise Stop(Finding("tcgen05-address", f"CTA {th.cta} warp {th.tid // 32}'s {what}: its "
                       f"lanes give {len(addrs)} different addresses"))
  addr = addrs.pop()
  field, col = addr >> 16, addr & 0xFFFF
  quarter = (th.tid // 32) % 4
  if field >= 32 and field // 32 != quarter:
    raise Stop(Finding("tcgen05-lanes", state.outside(
        th, what, f"lane {field} of tensor memory, which warp {th.tid // 32} (lanes "
        f"{32 * quarter}..{32 * quarter + 31}) cannot reach")))
  return state.tmem(k, th.cta), state.lane_base(th, field), col


def _check_cells(th, tm, base_lane, base_col, frag, what):
  """Every cell of the collective lies in the warp's quarter and allocated columns."""
  quarter = 32 * ((th.tid // 32) % 4)
  lanes_hit = {base_lane + dl for dl, _ in frag}
  cols_hit = [base_col + dc for _, dc in frag]
  lo, hi = min(cols_hit), max(cols_hit)
  if max(lanes_hit) >= quarter + 32:
    raise Stop(Finding("tcgen05-lanes", state.outside(
        th, what, f"lanes up to {max(lanes_hit)}, past its warp's lanes "
        f"{quarter}..{quarter + 31}")))
  if hi >= COLUMNS or not tm.allocated(lo, hi - lo + 1):
    raise Stop(Finding("tcgen05-lanes", state.outside(
        th, what, f"columns {lo}..{hi}, not all allocated by tcgen05.alloc")))


def _runs(base_lane, base_col, frag):
  """The lane-major byte runs (offset, bytes) of a fragment's cells, adjacent cells
  of one lane joined."""
  offs = sorted(4 * ((base_lane + dl) * COLUMNS + base_col + dc) for dl, dc in frag)
  runs = []
  for off in offs:
    if runs and runs[-1][0] + runs[-1][1] == off:
      runs[-1][1] += 4
    else:
      runs.append([off, 4])
  return [tuple(r) for r in runs]


def load(k, ins):
  """``tcgen05.ld.sync.aligned.shape.num{.pack::16b}.b32 {r...}, [taddr]``."""
  shape, num, packed = _form(ins, "ld")
  if len(ins.ops) != 2 or ins.ops[0][0] != "vec" or ins.ops[1][0] != "addr":
    raise NotImplementedError(f"opcode {ins.opcode} (operands {{r...}}, [taddr])")
  names = [op[1] for op in ins.ops[0][1]]
  if len(names) != num * FRAGMENTS[shape][1] or any(op[0] != "reg" for op in ins.ops[0][1]):
    raise NotImplementedError(f"opcode {ins.opcode} ({len(names)} registers for "
                              f".{shape}.x{num})")
  cols = [k.registers.column(n) for n in names]
  pc, taddr = len(k.program.code), ins.src[1]

  def resolve(lanes):
    tm, lane0, col0 = _base(k, lanes, taddr, "tcgen05.ld", pc)
    w = state.warp_tc(k, lanes[0])
    w.loads += 1
    values = []
    for th in lanes:
      frag = _columns(cells(shape, num, th.tid % 32), packed)
      _check_cells(th, tm, lane0, col0, frag, "tcgen05.ld")
      state.access(k, th, tm, _runs(lane0, col0, frag), write=False,
                   stamp=(w.ld_slot, w.loads), insn=pc, what="tcgen05.ld")
      got = [int(tm.cells[lane0 + dl, col0 + dc]) for dl, dc in frag]
      if packed:   # (the low halves of two adjacent columns, the first in the low half)
        got = [lo & 0xFFFF | (hi & 0xFFFF) << 16 for lo, hi in zip(got[::2], got[1::2])]
      values.append(got)
    for j, col in enumerate(cols):
      write(k.registers, col, lanes, [v[j] for v in values])
  return warp.aligned_collective(k, resolve)


def store(k, ins):
  """``tcgen05.st.sync.aligned.shape.num{.unpack::16b}.b32 [taddr], {r...}``."""
  shape, num, packed = _form(ins, "st")
  if len(ins.ops) != 2 or ins.ops[0][0] != "addr" or ins.ops[1][0] != "vec":
    raise NotImplementedError(f"opcode {ins.opcode} (operands [taddr], {{r...}})")
  if len(ins.ops[1][1]) != num * FRAGMENTS[shape][1]:
    raise NotImplementedError(f"opcode {ins.opcode} ({len(ins.ops[1][1])} registers for "
                              f".{shape}.x{num})")
  getters = [program.lanes_getter(g) for g in ins.vals]
  pc, taddr = len(k.program.code), ins.src[0]

  def resolve(lanes):
    tm, lane0, col0 = _base(k, lanes, taddr, "tcgen05.st", pc)
    w = state.warp_tc(k, lanes[0])
    w.stores += 1
    values = [g(lanes) for g in getters]
    for t, th in enumerate(lanes):
      frag = _columns(cells(shape, num, th.tid % 32), packed)
      _check_cells(th, tm, lane0, col0, frag, "tcgen05.st")
      state.access(k, th, tm, _runs(lane0, col0, frag), write=True,
                   stamp=(w.st_slot, w.stores), insn=pc, what="tcgen05.st")
      words = [int(vals[t]) & 0xFFFFFFFF for vals in values]
      if packed:   # (each register's halves into two columns' low halves)
        words = [_HIGH_POISON | v >> 16 * h & 0xFFFF for v in words for h in (0, 1)]
      for (dl, dc), v in zip(frag, words):
        tm.cells[lane0 + dl, col0 + dc] = v
    k.epoch += 1
  return warp.aligned_collective(k, resolve)


def wait(k, ins):
  """``tcgen05.wait::ld.sync.aligned`` / ``tcgen05.wait::st.sync.aligned``: the warp's
  loads (stores) so far have completed; it knows their accesses."""
  if ins.mods[1:] != ["sync", "aligned"] or ins.ops:
    raise NotImplementedError(f"opcode {ins.opcode}")
  loads = ins.mods[0] == "wait::ld"

  def resolve(lanes):
    w = state.warp_tc(k, lanes[0])
    if loads:
      w.waited_ld = w.loads
    else:
      w.waited_st = w.stores
    slot, count = (w.ld_wait_slot, w.loads) if loads else (w.st_wait_slot, w.stores)
    for th in lanes:   # (carried by a later synchronisation: state.TC_WAITS)
      th.vc[slot] = max(int(th.vc[slot]), count)
  return warp.aligned_collective(k, resolve, goes_on=True)


def fence(k, ins):
  """``tcgen05.fence::before_thread_sync``: the tensor-memory accesses its warp has waited
  for are published in the thread's clock, for a later synchronisation to carry;
  ``tcgen05.fence::after_thread_sync``: the thread's later asynchronous tcgen05
  operations are ordered by what it knows now (``ThreadTc.view``)."""
  if ins.ops or ins.mods not in (["fence::before_thread_sync"], ["fence::after_thread_sync"]):
    raise NotImplementedError(f"opcode {ins.opcode}")
  if ins.mods[0] == "fence::after_thread_sync":
    def after(th):
      state.thread_tc(k, th).view = _view(th)
    return program.each_lane(after)

  def before(th):
    w = k.tcgen05.warps.get((th.cta, th.tid // 32))
    if w is not None:
      publish(th, w)
  return program.each_lane(before)


def _view(th):
  """What ``th``'s later asynchronous tcgen05 operations are ordered after: its clock,
  and the releases of the phases its relaxed waits observed (the ISA's own pattern is
  ``mbarrier.try_wait.relaxed.cluster``, then ``tcgen05.fence::after_thread_sync``, then
  the tcgen05 operation, 9.7.16.6.4.2; the fence is not an acquire of anything else, so
  the observations stay pending for a later ``fence.acquire``)."""
  view = th.vc.copy()
  for rec, wscope, data_slot, phase in th.pending_obs:
    for (cta, scope), vc in rec.by_origin.items():
      if morally_strong(cta, scope, th.cta, wscope):
        np.maximum(view, vc, out=view)
    if data_slot is not None:
      view[data_slot] = max(int(view[data_slot]), phase)
  return view


def publish(th, w) -> None:
  """``th`` publishes its warp ``w``'s waited loads and stores in its clock (a
  before-fence, or a commit, which implies one)."""
  th.vc[w.ld_slot] = max(int(th.vc[w.ld_slot]), w.waited_ld)
  th.vc[w.st_slot] = max(int(th.vc[w.st_slot]), w.waited_st)

