"""Family: stores and warp matrix accesses of the PTX checker: plain and atomic
stores (``st`` / ``red``, handed here by ``memops``), ``st.async`` / ``red.async``
issued as ``asyncops.AsyncOp`` objects, and ``ldmatrix`` / ``stmatrix``; each access is
checked and recorded by the access core (``access_core``), strong loads and ``atom`` by
``strong``.
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from mosaic_async_store.check import (access_core, addresses, asyncops, program, strong,
                                      sync, warp_memory)
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.family import Family
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.ops import ints_array
from mosaic_async_store.check.outcomes import YIELD
from mosaic_async_store.check.shadow_runs import record_disjoint

__all__ = ["OPCODES", "FAMILY"]

# st / red / st.async / red.async / ldmatrix / stmatrix, with their checks.


def store_fn(k, space, addr, vals, size, red, strong_form=None):
  """st / red, written at once and checked for races; ``strong_form``: (sem, scope
  rank) of a strong one (every red; st.relaxed / .release, strong.py), None for a
  weak st."""
  mask = (1 << (8 * size)) - 1
  traced = "::" in (space or "")   # a store instruction's own spelling (see _trace)
  insn = len(k.program.code)   # this instruction's index (it is being compiled)
  n = size * len(vals)
  if strong_form is not None and len(vals) != 1:
    raise NotImplementedError("a vector strong store")
  mem = addresses.mem_fn(k, space, n)
  if strong_form is None and red is None and len(vals) == 1 and space in addresses.NOT_SHARED:
    g = vals[0]   # the common case, inlined: a weak scalar store outside SMEM
    glob = space == "global"
    def store_plain(th):
      buf, off = mem(th, addr(th))
      if traced and k.store_trace is not None:
        access_core.trace(k, th, buf, off, n)
      if glob:   # (_global_access, inline)
        bad = k.gshadow.access(th, buf, off, n, True, False, insn, None)
        if bad is not None:
          access_core.global_race(k, th, buf, off, n, True, bad, None, insn)
      value = g(th) & mask
      k.epoch += 1
      if k.flags:
        access_core.forget_flags(k, buf, off, n)
      buf[off:off + n] = value.to_bytes(n, "little")
    if glob:
      store_plain.lanes = warp_memory.global_store(k, addr, g, n, insn)
    return store_plain
  def store(th):
    buf, off = mem(th, addr(th))
    if traced and k.store_trace is not None:
      access_core.trace(k, th, buf, off, n)
    tag = None if strong_form is None else (th.cta, strong_form[1], off, n)
    access_core.thread_access(k, th, buf, off, n, write=True, atomic=strong_form is not None, insn=insn, tag=tag)
    before = None if strong_form is None else bytes(buf[off:off + n])   # (strong.py)
    access_core.write_values(k, buf, off, size, [g(th) & mask for g in vals], red, weak=strong_form is None)
    if strong_form is not None:
      strong._publish(k, th, buf, off, n, *strong_form, rmw=red is not None, before=before)
  if strong_form is None and red is None and space in warp_memory.SHARED:
    store.lanes = warp_memory.shared_store(k, addr, vals, size, insn, traced)
  return store




def async_store_fn(k, addr, vals, size, red, mbar):
  """st.async / red.async: checked at issue, queued, landed by the schedule."""
  mask, text = (1 << (8 * size)) - 1, "red.async" if red else "st.async"
  insn = len(k.program.code)   # this instruction's index (it is being compiled)
  n = size * len(vals)
  mem = addresses.mem_fn(k, "shared::cluster", n)
  bar_mem = addresses.mem_fn(k, "shared::cluster", 8)
  completions = {}   # mbarrier key -> its MbarrierTx (which holds no state of its own)
  def issue(th):
    buf, off = mem(th, addr(th))
    bar_buf, bar_off = bar_mem(th, mbar(th))   # as sync.mbarrier_key
    cta, key = k.smem_cta[id(buf)], (k.smem_cta[id(bar_buf)], bar_off)
    if k.store_trace is not None:
      access_core.trace(k, th, buf, off, n)
    if len(k.smem) == 1 or key[0] != cta or (red and cta == th.cta):
      where = f"CTA {th.cta} thread {th.tid}: {text} into CTA {cta}"
      if len(k.smem) == 1:
        raise Stop(Finding("st.async-cluster-of-one", where))
      if key[0] != cta:
        raise Stop(Finding("barrier-elsewhere", f"{where} completing on CTA {key[0]}'s "
                            "mbarrier"))
      raise Stop(Finding("red.async-self", where))
    values = [g(th) & mask for g in vals]
    if red is None:
      asyncops.issue_store(k, th, insn, text, cta, off, size, values, key)
    else:
      completion = completions.get(key)
      if completion is None:
        completion = completions[key] = asyncops.MbarrierTx(key, n)
      write = asyncops.Write(cta, off, size, values, red)
      asyncops.issue(k, th, asyncops.AsyncOp(th, insn, text, [write], completion))
    return YIELD if k.sched.pauses(k.step) else None
  issue.lanes = warp_memory.async_store(k, addr, vals, size, red, mbar, insn, text)
  return issue


def _stmatrix_op(k, ins):
  mods = ins.mods
  if mods[:4] != ["sync", "aligned", "m8n8", "x4"] or ins.t != "b16" or \
     not set(mods[4:]) <= {"trans", "shared", "shared::cta", "b16"}:
    raise NotImplementedError(f"opcode {ins.opcode}")
  return _stmatrix(k, "trans" in mods, ins.space, ins.src[0], ins.vals)


def _ldmatrix_op(k, ins):
  mods = ins.mods
  if mods[:3] != ["sync", "aligned", "m8n8"] or ins.t != "b16" or \
     mods[3:4] not in (["x1"], ["x2"], ["x4"]) or \
     not set(mods[4:]) <= {"trans", "shared", "shared::cta", "b16"}:
    raise NotImplementedError(f"opcode {ins.opcode}")
  dests = ins.ops[0][1] if ins.ops[0][0] == "vec" else [ins.ops[0]]
  return _ldmatrix(k, "trans" in mods, ins.space, dests, ins.src[1])


def _ldmatrix(k, trans, space, dests, addr):
  """``ldmatrix.sync.aligned.m8n8.x<n>{.trans}.shared.b16 {r0..}, [p]``: a warp loads
  n 8x8 matrices of 16-bit elements (stmatrix's inverse).  Lane ``8i + j`` gives the
  address of row ``j`` of matrix ``i``; register ``ri`` of lane ``l`` receives row
  ``l // 4``, columns ``2 (l % 4)`` and ``+1`` (low half first) of matrix ``i``;
  ``.trans`` loads each matrix transposed (register row ``r`` = memory column ``r``)."""
  puts, pc = [program.setter(k, o, 32) for o in dests], len(k.program.code)

  def resolve(lanes):
    rows = []                                  # rows[8 i + j]: row j of matrix i
    for reader in lanes[:8 * len(puts)]:
      buf, off = addresses.mem(k, reader, space, addr(reader), 16)
      access_core.thread_access(k, reader, buf, off, 16, write=False, insn=pc)
      rows.append(bytes(buf[off:off + 16]))
    for lane, th in enumerate(lanes):
      for i, put in enumerate(puts):
        word = 0
        for half, col in enumerate((2 * (lane % 4), 2 * (lane % 4) + 1)):
          r, c = (col, lane // 4) if trans else (lane // 4, col)   # memory row, column
          word |= int.from_bytes(rows[8 * i + r][2 * c:2 * c + 2], "little") << (16 * half)
        put(th, word)
  return sync._warp_collective_at(k, pc, resolve)


def _stmatrix(k, trans, space, addr, regs):
  """``stmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 [p], {r0..r3}``: a warp stores
  four 8x8 matrices of 16-bit elements.  Lane ``8i + j`` gives the address of row
  ``j`` of matrix ``i``; register ``ri`` of lane ``l`` holds row ``l // 4``, columns
  ``2 (l % 4)`` and ``+1`` (low half first) of matrix ``i``.  ``.trans`` stores each
  matrix transposed: memory row ``j`` gets the matrix's column ``j``."""
  pc = len(k.program.code)
  addr_lanes, reg_lanes = program.lanes_getter(addr), [program.lanes_getter(g) for g in regs]

  def resolve(lanes):
    rows = addr_lanes(lanes)          # lane 8i + j: row j of matrix i
    data = list(zip(*(g(lanes) for g in reg_lanes)))   # (per lane, its registers)
    memory_rows = _rows_at_once(data, trans)
    if memory_rows is not None and _store_rows_at_once(k, lanes, space, rows, memory_rows,
                                                       pc):
      return
    for i in range(4):
      for j in range(8):
        row = _row(data, i, j, trans) if memory_rows is None else bytes(memory_rows[i, j])
        writer = lanes[8 * i + j]
        buf, off = addresses.mem(k, writer, space, rows[8 * i + j], 16)
        access_core.thread_access(k, writer, buf, off, 16, write=True, insn=pc)
        access_core.write_values(k, buf, off, 16, [int.from_bytes(row, "little")], None, weak=True)
  return sync._warp_collective_at(k, pc, resolve)


def _store_rows_at_once(k, lanes, space, addrs, memory_rows, pc):
  """The 32 rows' stores (lane ``8i + j``: ``memory_rows[i, j]`` at ``addrs[8i + j]``)
  checked, recorded and written at once (``shadow_runs.record_disjoint``: the verdict
  of row by row, their bytes being disjoint) where every row is the plain case in the
  own CTA's shared memory at a distinct offset; else nothing done, False."""
  if space not in warp_memory.SHARED or k.flags:
    return False
  places = addresses.plain_shared_lanes(k, lanes, addrs, 16, False)
  if places is None or len(set(places[1])) != len(lanes):
    return False
  cta, offs = places
  order = sorted(range(len(offs)), key=offs.__getitem__)
  slots, clocks = k.lane_stamps(lanes)
  if not record_disjoint(k.shadow[cta], [offs[i] for i in order], 16, write=True,
                         matrix=k.clocks, rows=k.lane_rows(lanes)[order],
                         slots=[slots[i] for i in order], clocks=[clocks[i] for i in order],
                         insn=pc):
    return False
  where = (np.asarray(offs)[:, None] + np.arange(16)).ravel()   # (lane 8i + j: row [i, j])
  np.frombuffer(k.smem[cta], np.uint8)[where] = memory_rows.reshape(-1)
  k.epoch += len(lanes)
  return True


def _rows_at_once(data, trans):
  """Every memory row of the four matrices (``[i, j]``: 16 bytes, uint8) from the lanes'
  register values, with NumPy; None where a value is not a known int (``shfl``'s
  undefined: ``_row`` then says where its bits are used)."""
  if set(map(type, chain.from_iterable(data))) != {int}:
    return None
  # halves[l, i, h]: half h of lane l's register i; matrix i's element (r, 2q + h) is
  # lane 4r + q's half h, so each matrix is its 32 lanes' halves as 8 x 8
  halves = (ints_array(data) & 0xFFFFFFFF).astype("<u4").view("<u2")
  matrices = halves.reshape(32, 4, 2).transpose(1, 0, 2).reshape(4, 8, 8)
  if trans:
    matrices = matrices.transpose(0, 2, 1)
  return np.ascontiguousarray(matrices).view(np.uint8).reshape(4, 8, 16)


def _row(data, i, j, trans):
  """Memory row ``j`` of matrix ``i`` from the lanes' register values, value by value
  (a value ``shfl`` left undefined says so where its bits are used)."""
  row = bytearray(16)
  for c in range(8):                     # memory column c of memory row j
    r, col = (c, j) if trans else (j, c)  # fragment element (row, column)
    word = data[4 * r + col // 2][i]
    half = (word >> (16 * (col % 2))) & 0xFFFF
    row[2 * c:2 * c + 2] = half.to_bytes(2, "little")
  return bytes(row)


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/checker/test_opcode_table.py compiles every one).
OPCODES = {
    "stmatrix": Opcode(_stmatrix_op, ("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r1], {%r2, %r3, %r4, %r5}",
                                      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%r1], {%r2, %r3, %r4, %r5}"),
                       ("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%r1], {%r2, %r3}",)),
    "ldmatrix": Opcode(_ldmatrix_op, ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r2, %r3, %r4, %r5}, [%r1]",
                                      "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%r2}, [%r1]"),
                       ("ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%r2, %r3}, [%r1]",)),
}

FAMILY = Family("access", OPCODES)
