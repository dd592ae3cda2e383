"""Tensor-memory allocation: ``tcgen05.alloc`` / ``dealloc`` / ``relinquish_alloc_permit``
(PTX ISA 9.7.16.7.1), and what must be deallocated when a CTA exits.

Each is ``.sync.aligned`` over the warp (``warp.aligned_collective``: a lane elsewhere
is ``aligned-divergence``), with one ``nCols`` for every lane.  ``alloc`` takes the
first ``nCols`` free columns (a multiple of ``nCols``: the ISA leaves the place to the
hardware) and writes their address, ``(0 << 16) | column``, into shared memory at
``[dst]`` as a weak store of lane 0 ("The store operation in tcgen05.alloc is treated
as a weak memory operation").  ``dealloc`` frees an allocation, named by its address
and column count; it is checked as a write of all 128 lanes of those columns by lane 0,
so a tensor-memory access not ordered before it (an MMA whose commit nobody observed,
a load not waited for) is a ``race``.

``.cta_group::2``: "one warp from each of the peer CTAs must collectively perform the
allocation and de-allocation" (the pair: the two CTAs whose ``%cluster_ctarank`` differ
in the last bit, 9.7.16.5.1).  The first of the two warps takes columns free in both
CTAs' tensor memory, the same ones in each (a pair's MMA writes D at one address in
both), and holds the peer's for the peer's warp, whose alloc takes them; a peer that
never allocates is ``tcgen05-alloc`` when its CTA exits.  (The hardware blocks the first
warp until the second comes; the checker lets it go on, which changes nothing it can
see but a hang: a pair whose second warp never allocates is reported, not hung.)  Each
warp's dealloc frees its own CTA's columns; the order of the pair's deallocs, which
the ISA says "may block", is not explored (9.7.16.5, Table 48's hang is not found).
"""

from __future__ import annotations

from mosaic_async_store.check import access_core, addresses, findings, warp
from mosaic_async_store.check.findings import Finding, Stop
from mosaic_async_store.check.families.tcgen05 import state
from mosaic_async_store.check.families.tcgen05.state import COLUMNS, LANES

__all__ = ["alloc", "dealloc", "relinquish", "at_cta_exit", "note_cta_group", "RULES",
           "WARNINGS"]

RULES = {
    "tcgen05-alloc": "PTX ISA 9.7.16.7.1, tcgen05.alloc: \"The number of columns must be a "
                     "power of 2. The operand nCols must be within the range [32, 512]. The "
                     "number of columns allocated should not increase between any two "
                     "allocations in the execution order within the CTA\"; \"it is illegal "
                     "for a CTA to perform tcgen05.alloc after any of its constituent threads "
                     "execute tcgen05.relinquish_alloc_permit\"; \"The operand taddr must "
                     "point to a previous Tensor Memory allocation\"; \"The behavior of the "
                     "instruction is undefined if all the threads in the warp do not use the "
                     "same values of nCols\"",
    "tcgen05-dealloc": "PTX ISA 9.7.16.7.1: \"All of the Tensor Memory that was allocated "
                       "using tcgen05.alloc instruction in a kernel, must be explicitly "
                       "deallocated using tcgen05.dealloc before the kernel exits\"",
    "tcgen05-dealloc-load": "PTX ISA 9.7.16.6.4.5: a register dependency on a tcgen05.ld "
                            "\"does not imply any other form of ordering ... To enforce such "
                            "memory orderings and avoiding anti-dependency hazards around "
                            "tcgen05.ld, tcgen05.wait::ld must be used\": tensor memory freed "
                            "while a load of it was never waited for",
    "tcgen05-cta-group": "PTX ISA 9.7.16 (tcgen05.alloc, mma, cp, shift, commit): \"All "
                         "tcgen05 instructions within a kernel must specify the same value "
                         "for the .cta_group qualifier\"",
}

# The family's warnings about allocation, with the evidence (memory.WARNINGS).
WARNINGS = {
    "tcgen05-dealloc-load": "jax 0.12.1's tensor-memory epilogue (Pallas and Mosaic GPU "
                            "alike) loads, uses the registers, then bar.sync and "
                            "tcgen05.dealloc with no tcgen05.wait::ld and no fences: 15 of "
                            "upstream's hardware-tested tcgen05 tests "
                            "(test/emu/test_tcgen05_calibration.py)",
}


def note_cta_group(k, th, value: str, pc: int) -> None:
  """Every tcgen05 instruction of a kernel names one ``.cta_group`` (``RULES``): the
  first of the run is kept, another is ``tcgen05-cta-group``."""
  first = k.tcgen05.cta_group
  if first is None:
    k.tcgen05.cta_group = (value, pc)
  elif first[0] != value:
    findings.report(k, Finding(
        "tcgen05-cta-group", f"CTA {th.cta} thread {th.tid}'s .{value} after .{first[0]} "
        f"at PTX line {k.program.lines[first[1]]}: one kernel names one .cta_group"))


def _group(ins, form):
  """The ``.cta_group`` of ``ins``, refusing ``::2`` and any qualifier not of ``form``."""
  mods = [m for m in ins.mods[1:]]
  group = next((m for m in mods if m.startswith("cta_group::")), None)
  if group not in ("cta_group::1", "cta_group::2") or \
     [m for m in mods if m != group] not in form:
    raise NotImplementedError(f"opcode {ins.opcode}")
  return group


def _peer(k, th, where):
  """The CTA of ``th``'s pair (``%cluster_ctarank`` with its last bit flipped); a
  cluster without it is ``tcgen05-alloc`` ("the issuing warp must make sure that peer
  CTA is launched")."""
  peer = th.cta ^ 1
  if peer >= len(k.smem):
    raise Stop(Finding("tcgen05-alloc", f"{where} with .cta_group::2 in a cluster of "
                       f"{len(k.smem)} CTA(s): CTA {th.cta} has no peer CTA"))
  return peer


def _uniform_cols(k, lanes, values, what):
  cols = {int(v) for v in values}
  if len(cols) != 1:
    raise Stop(Finding("tcgen05-alloc", f"CTA {lanes[0].cta} warp {lanes[0].tid // 32}'s "
                       f"{what}: its lanes give different nCols ({sorted(cols)})"))
  return cols.pop()


def alloc(k, ins):
  """``tcgen05.alloc.cta_group::1.sync.aligned{.shared::cta}.b32 [dst], nCols``."""
  group = _group(ins, (["sync", "aligned", "shared::cta", "b32"], ["sync", "aligned", "b32"]))
  if len(ins.ops) != 2 or ins.ops[0][0] != "addr":
    raise NotImplementedError(f"opcode {ins.opcode} (operands [dst], nCols)")
  pc, space = len(k.program.code), ("shared" if "shared::cta" in ins.mods else None)
  dst, ncols = ins.src[0], ins.src[1]

  def resolve(lanes):
    th = lanes[0]
    note_cta_group(k, th, group, pc)
    n = _uniform_cols(k, lanes, [ncols(t) for t in lanes], "tcgen05.alloc")
    where = f"CTA {th.cta} warp {th.tid // 32}'s tcgen05.alloc of {n} columns"
    if n < 32 or n > COLUMNS or n & (n - 1):
      raise Stop(Finding("tcgen05-alloc", f"{where}: nCols must be a power of 2 in "
                         "[32, 512]"))
    if th.cta in k.tcgen05.relinquished:
      raise Stop(Finding("tcgen05-alloc", f"{where} after the CTA relinquished the right "
                         "to allocate (tcgen05.relinquish_alloc_permit)"))
    tm = state.tmem(k, th.cta)
    last = getattr(tm, "last_alloc", None)
    if last is not None and n > last:
      findings.report(k, Finding("tcgen05-alloc", f"{where}, more than the CTA's previous "
                                 f"allocation ({last}): allocations may not grow"))
    tm.last_alloc = n
    warp_id = th.tid // 32
    if group == "cta_group::2":
      peer = _peer(k, th, where)
      held = k.tcgen05.pair_held.pop((th.cta, n), None)
      if held is not None:   # (the peer's warp came first: its columns are ours)
        tm.allocations[held] = (n, warp_id)
        _write_address(k, th, dst(th), held)
        return
      both = state.tmem(k, peer)
      start = next((s for s in range(0, COLUMNS, n)
                    if tm.free_at(n, s) and both.free_at(n, s)), None)
      if start is None:
        raise NotImplementedError(f"opcode {ins.opcode} (a pair allocation that must wait "
                                  "for columns to be freed: not run by the checker)")
      tm.allocations[start] = (n, warp_id)
      both.allocations[start] = (n, None)   # (held for the peer's warp)
      k.tcgen05.pair_held[(peer, n)] = start
      _write_address(k, th, dst(th), start)
      return
    start = tm.free_at(n)
    if start is None:
      holders = {w for _, w in tm.allocations.values()}
      if holders == {th.tid // 32}:
        raise Stop(Finding("hang", f"{where}: its own allocations hold the columns it "
                           "waits for, and it cannot free them while it waits"))
      raise NotImplementedError(f"opcode {ins.opcode} (an allocation that must wait for "
                                "another warp to free columns: not run by the checker)")
    tm.allocations[start] = (n, warp_id)
    _write_address(k, th, dst(th), start)

  def _write_address(k, th, addr, start):
    """The allocation's address, written by lane 0 as a weak store."""
    buf, off = addresses.mem(k, th, space, addr, 4)
    access_core.thread_access(k, th, buf, off, 4, write=True, insn=pc)
    access_core.write_values(k, buf, off, 4, [start], None, weak=True)
  return warp.aligned_collective(k, resolve, goes_on=True)


def dealloc(k, ins):
  """``tcgen05.dealloc.cta_group::1.sync.aligned.b32 taddr, nCols``."""
  group = _group(ins, (["sync", "aligned", "b32"],))
  if len(ins.ops) != 2:
    raise NotImplementedError(f"opcode {ins.opcode} (operands taddr, nCols)")
  pc = len(k.program.code)
  taddr, ncols = ins.src[0], ins.src[1]

  def resolve(lanes):
    th = lanes[0]
    note_cta_group(k, th, group, pc)
    n = _uniform_cols(k, lanes, [ncols(t) for t in lanes], "tcgen05.dealloc")
    addrs = {int(taddr(t)) for t in lanes}
    where = f"CTA {th.cta} warp {th.tid // 32}'s tcgen05.dealloc"
    tm = state.tmem(k, th.cta)
    addr = addrs.pop() if len(addrs) == 1 else None
    if addr is None or addr >> 16 or tm.allocations.get(addr & 0xFFFF, (None,))[0] != n:
      raise Stop(Finding("tcgen05-alloc", f"{where} of {n} columns at "
                         f"{'differing addresses' if addr is None else hex(addr)}: not an "
                         "allocation of the CTA with that many columns (the operand taddr "
                         "must point to a previous allocation)"))
    col = addr & 0xFFFF
    runs = [(4 * (lane * COLUMNS + col), 4 * n) for lane in range(LANES)]
    state.access(k, th, tm, runs, write=True, stamp=(th.slot, int(th.vc[th.slot])),
                 insn=pc, what="tcgen05.dealloc", full_clock=True,
                 load_rule="tcgen05-dealloc-load")
    del tm.allocations[col]
  return warp.aligned_collective(k, resolve, goes_on=True)


def relinquish(k, ins):
  """``tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned``: the CTA allocates
  no more."""
  group = _group(ins, (["sync", "aligned"],))
  if ins.ops:
    raise NotImplementedError(f"opcode {ins.opcode} (no operands)")
  pc = len(k.program.code)

  def resolve(lanes):
    note_cta_group(k, lanes[0], group, pc)
    k.tcgen05.relinquished.add(lanes[0].cta)
  return warp.aligned_collective(k, resolve, goes_on=True)


def at_cta_exit(k, cta) -> None:
  """What the CTA allocated must be deallocated by now (``tcgen05-dealloc``)."""
  tm = k.tcgen05.tmem.get(cta)
  if tm is None:
    return
  for col, (n, w) in sorted(tm.allocations.items()):
    if w is None:   # (held for a pair allocation its warp never made)
      findings.report(k, Finding(
          "tcgen05-alloc", f"CTA {cta} exits without the tcgen05.alloc.cta_group::2 of "
          f"{n} columns its peer CTA {cta ^ 1} made: one warp of each CTA of the pair must "
          "perform it"))
      continue
    findings.report(k, Finding(
        "tcgen05-dealloc", f"CTA {cta} exits holding tensor-memory columns {col}..{col + n - 1} "
        f"that warp {w} allocated: no tcgen05.dealloc freed them"))
  tm.allocations.clear()
