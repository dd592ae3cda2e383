"""How a warpgroup's ``wgmma.mma_async`` executes (``wgmma.py`` calls ``execute`` once the
fourth warp issued it): A and B read from shared memory through their descriptors
(``wgmma_layout``), or A from the four warps' fragment registers; the reads checked and
recorded as the operation's, through the asynchronous proxy, with the clock of all 128
issuing threads; then D = (scale-a A) (scale-b B) + (scale-d ? C : 0), each product
exact in float64, their sum and C's formed in float64 (exact unless the terms' magnitudes
span more than about 2^26; int64, exact, for the integer types), then rounded to the
accumulator's type.  The ISA gives no accumulation order or internal precision, so a
GPU's last bits may differ.
C is each warp's accumulator registers at its issue, or the result of the same-shape
operation that still had them in flight (``Entry.inputs``' sources).
"""

from __future__ import annotations

import functools

import numpy as np

from mosaic_async_store.check import access_core, proxy
from mosaic_async_store.check.families.wgmma import layout
from mosaic_async_store.check.addresses import SHARED_BASE
from mosaic_async_store.check.findings import fault
from mosaic_async_store.check.shadow import byte_index, disjoint_runs
from mosaic_async_store.check.shadow_runs import read_at_once

__all__ = ["execute", "WGMMA_READS"]

WGMMA_READS = "wgmma group reads"


class _Op:
  """An executing operation as ``access_core`` names it (an asynchronous operation)."""

  __slots__ = ("th", "insn", "opcode", "text", "fenced", "fenced_global", "completion")

  def __init__(self, th, insn, opcode, text, fenced):
    self.th, self.insn, self.opcode, self.text = th, insn, opcode, text
    self.fenced, self.fenced_global, self.completion = fenced, None, None


def execute(k, wg, j):
  """The warpgroup's operation ``j`` executes: its reads of shared memory, then D."""
  entry, form = wg.entries[j], wg.entries[j].form
  if wg.slot is None:
    wg.slot = k.slots.allocate(WGMMA_READS, wg)
  vc = np.maximum.reduce(entry.vcs)
  first = k.threads[wg.cta * k.block + wg.index * 128]
  op = _Op(first, entry.pc, k.program.texts[entry.pc].split(" ")[0],
           f"CTA {wg.cta} warpgroup {wg.index}: {k.program.texts[entry.pc].split(' ')[0]}",
           proxy.fenced(k, vc))
  desc_a, desc_b, scale_d, scale_a, scale_b, trans_a, trans_b = entry.operands
  stamp = (wg.slot, entry.group, entry.pc)
  if form.a_regs:
    a = _a_from_registers(entry, form)
  else:
    a = _read(k, wg, op, vc, stamp, desc_a, 64, form, form.atype, trans_a)
  b = _read(k, wg, op, vc, stamp, desc_b, form.n, form, form.btype, trans_b)
  d = (a * scale_a) @ (b * scale_b).T
  if scale_d:
    d = d + _accumulator_in(wg, entry, form)
  entry.out = [_accumulator_out(d[16 * w:16 * w + 16], entry.inputs[w][0], form)
               for w in range(4)]
  entry.inputs = entry.vcs = None   # (taken: only ``out`` is read from now on)
  wg.done = j + 1


def _read(k, wg, op, vc, stamp, desc, rows, form, atype, mn_major):
  """A ``rows`` x K operand read through descriptor ``desc``: checked and recorded as
  read by the operation (the asynchronous proxy), as exact values."""
  size = form.elem_bytes
  addrs, ranges, index = _operand_bytes(desc, rows, form.k, size, bool(mn_major))
  smem = k.smem[wg.cta]
  if ranges[0][0] < 0 or ranges[-1][1] > len(smem):
    raise fault(f"CTA {wg.cta} warpgroup {wg.index}: wgmma.mma_async's descriptor "
                      f"{desc:#x} reads outside the CTA's {len(smem)} bytes of shared memory")
  sh = k.shadow[wg.cta]
  writes = sh.last_writes(ranges, index)
  proxy.check_source_runs(k, op, sh, wg.cta, ranges, writes)
  if not read_at_once(sh, ranges, vc, stamp, writes):   # (at once, or range by range:)
    for lo, hi in ranges:
      access_core.check_shared(k, vc, None, wg.cta, lo, hi - lo, write=False,
                               atomic=False, who=op, stamp=stamp)
  raw = np.frombuffer(smem, np.uint8)[addrs]
  return layout.elements(raw, atype)


@functools.lru_cache(maxsize=256)
def _operand_bytes(desc, rows, k, size, mn_major):
  """(the byte offsets in shared memory of each element's bytes: int64 [rows, k, size],
  read-only; the bytes read as ascending disjoint (first, end) ranges; those bytes as
  one index array, read-only: ``shadow.byte_index``) of an operand
  read through descriptor ``desc``.  Whole 16-byte chunks (a core matrix row; the
  swizzle moves chunks): each operand's elements fill the chunks they touch, so the
  chunks are exactly the bytes read.  Kept per descriptor: a pipeline cycles through
  a few stages' descriptors."""
  addrs = layout.operand_addresses(layout.decode_descriptor(desc), rows, k, size,
                                   mn_major) - SHARED_BASE
  chunks = disjoint_runs([(16 * c, 16) for c in np.unique(addrs // 16).tolist()])
  offsets = addrs[..., None] + np.arange(size)
  ranges = tuple((lo, lo + n) for lo, n in chunks)
  index = byte_index(ranges)
  offsets.flags.writeable = index.flags.writeable = False
  return offsets, ranges, index


def _a_from_registers(entry, form):
  """A (64 x K) from the four warps' fragment registers."""
  size, per = form.elem_bytes, 4 // form.elem_bytes
  rows, cols = layout.a_register_map(form.k, size)
  a = np.zeros((64, form.k), np.float64 if form.atype not in ("s8", "u8") else np.int64)
  for w in range(4):
    regs = entry.inputs[w][3]   # uint32 [32, 4]
    raw = regs.astype("<u4").view(np.uint8).reshape(32, 4, per, size)
    a[rows + 16 * w, cols] = layout.elements(raw, form.atype)
  return a


def _accumulator_in(wg, entry, form):
  """C (64 x N): each warp's registers at its issue, or the chained operation's result."""
  c = np.zeros((64, form.n), np.int64 if form.dtype == "s32" else np.float64)
  rows, cols = layout.accumulator_map(form.n, form.dtype)
  for w in range(4):
    names, sources, values, _ = entry.inputs[w]
    chained = [i for i, src in enumerate(sources) if src is not None]
    first = wg.entries[sources[chained[0]]].out[w] if chained else None
    if chained and sources.count(sources[chained[0]]) == len(names) and \
       first.names == names:   # (the common chain: all of one operation's, at once)
      values = first.bits
    elif chained:   # (``values`` None: every register chains)
      values = np.zeros((32, len(names)), np.uint32) if values is None else values.copy()
      for i in chained:
        values[:, i] = wg.entries[sources[i]].out[w].column(names[i])
    c[rows + 16 * w, cols] = _decode(values, form.dtype)
  return c


def _decode(bits, dtype):
  """Register bits (uint32 [32, registers]) as accumulator values [32, registers, per]."""
  if dtype == "f32":
    return bits.view(np.float32)[..., None].astype(np.float64)
  if dtype == "s32":
    return bits.view(np.int32)[..., None].astype(np.int64)
  halves = np.stack([bits & 0xFFFF, bits >> 16], axis=-1).astype(np.uint16)
  return halves.view(np.float16).astype(np.float64)


def _accumulator_out(d, names, form):
  """A warp's 16 rows of D as its lanes' register values: register -> uint32 [32]."""
  rows, cols = layout.accumulator_map(form.n, form.dtype)
  bits = layout.encode_accumulator(d[rows, cols], form.dtype, form.satfinite)
  return WarpResult(names, bits)


class WarpResult:
  """A warp's results of one operation: ``bits`` (uint32 [32, registers]: its lanes'
  values, columns in the order of ``names``), as one array for the next operation of a
  chain or the write-back; ``column(name)`` one register's lanes' values (uint32 [32]),
  ``items()`` each register with them (a later operation's replace an earlier's:
  ``wgmma._write_back``)."""

  __slots__ = ("names", "bits")

  def __init__(self, names, bits):
    self.names, self.bits = names, bits

  def column(self, name):
    """Register ``name``'s lanes' values (named twice: its last place, as ``items``)."""
    return self.bits[:, len(self.names) - 1 - self.names[::-1].index(name)]

  def items(self):
    return zip(self.names, self.bits.T)
