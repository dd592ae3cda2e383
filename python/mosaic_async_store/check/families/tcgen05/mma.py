"""``tcgen05.mma.cta_group::{1,2}.kind::{f16,tf32,f8f6f4,i8} [d-tmem], a-desc, b-desc,
idesc, enable-input-d`` (PTX ISA 9.7.16.10.9.1): one thread's matrix multiply-accumulate
into tensor memory.

"The instruction tcgen05.mma has single thread semantics ... a single thread issuing
the tcgen05.mma will result in the initiation of the whole matrix multiply and
accumulate operation": each thread that executes it issues one operation (no
``.sync.aligned``).  It is asynchronous; the checker runs it at its issue, which is
one timing the hardware may take, and lets the clocks say who may know of it:

  * the instruction descriptor (``descriptors.decode_idesc``) gives the types, M, N,
    the transposes and negations; A and B come from shared memory through their
    sm_100 descriptors (``descriptors.decode_smem``), in WGMMA's canonical layouts
    (``wgmma.layout.operand_addresses``, ``wgmma.execute``'s byte ranges);
  * their bytes are read through the asynchronous proxy ("The shared memory accesses
    by tcgen05.mma and tcgen05.cp operations are performed in the asynchronous proxy",
    9.7.16.6.5: an unfenced generic write is ``proxy-fence``), ordered by the thread's
    clock at its last ``tcgen05.fence::after_thread_sync`` plus its own earlier MMAs
    (``state.check_vc``, pipelined: "An asynchronous tcgen05 operation subsequent to a
    tcgen05.fence::after_thread_sync is ordered after all the prior tcgen05 and the
    execution ordering operations", 9.7.16.6.3).  A write that only a synchronisation
    since that fence orders is ``tcgen05-fence-operand``, a warning: jax's Blackwell
    matmul waits on its TMA barrier after the fence, CUTLASS's SM100 examples issue the
    MMA after the wait with no fence (``memory.WARNINGS``); one nothing orders, ``race``;
  * D's cells (``state.access``: 9.7.16.10.5, M = 128: row m in lane m; M = 64, layout
    F: row m in lane L0 + 32 (m / 16) + m % 16, L0 in {0, 16}; column n in column C0 +
    n; a 16-bit D in the low half of its 32-bit cell, 9.7.16.10.4.1) must be allocated
    columns (``tcgen05-lanes``); they are checked and recorded as written (a write's
    ordering covers a read's, so enable-input-d's read of D needs no record of its own);
  * D = A B (+ D where enable-input-d), each product exact in float64 (int64 for
    ``i8``) and the sum rounded once to D's type, as WGMMA's execution does: the ISA
    gives no accumulation order, so a GPU's last bits may differ.

``.cta_group::2`` (the CTA pair, ``pair``): "The qualifier .cta_group::2 specifies that
the matrix multiply and accumulate operation is performed on the Tensor Memory of the
executing thread's CTA and its peer CTA".  The idesc's M and N are the pair's (Table 39:
M 128 or 256).  M = 256 is layout A (9.7.16.10.5, "4x1"): each CTA's shared memory
holds its own 128 rows of A at the descriptor's offset (the even CTA rows 0..127), B's
N columns are split, the even CTA's shared memory holding the first N / 2 and the odd
CTA's the rest, at the same offset; D in each CTA's tensor memory, at the one address,
is that CTA's 128 rows (row m in lane m mod 128) by the full N.  The ISA draws this in
figures only; it is the placement jax's collective kernels rely on (their A and B
partitions, ``d.shape == (m, n * num_cta)``), and it is what the checker runs.  The
peer's bytes are read through the same asynchronous proxy with the issuer's clocks and
stamps, and D's writes go through ``state.access`` on each CTA's tensor memory.  A peer
not in the cluster or already exited is ``tcgen05-peer``.

Every access is stamped with the issuing thread's slot of tcgen05 operations
(``state.ThreadTc.ops_slot``, made at its first MMA) at the operation's number
(``ThreadTc.ops``); a ``tcgen05.commit`` publishes them (``commit``).  MMA -> MMA of
one thread is a pipeline (9.7.16.6.2, "same N and accumulator and shape"; the checker
orders any two MMAs of a thread, as it runs them in issue order), and so is cp -> MMA
("tcgen05.copy.cta_group::N -> tcgen05.mma.cta_group::N": a thread's ``tcgen05.cp``
counts in the same slot, ``cp``).

Refused by name: ``.cta_group::2`` with M = 128 (layout B: its placement is a figure
the checker was not written from) or issued from the odd CTA (``pair.ctas``), ``.sp``,
``.ws``, the block-scaled kinds, A in tensor memory (``[a-tmem]``: its layout is not
among the facts the checker was written from), ``disable-output-lane``,
``scale-input-d``, and what ``descriptors`` refuses.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import access_core, findings, proxy
from mosaic_async_store.check.families.tcgen05 import descriptors, pair, state
from mosaic_async_store.check.families.tcgen05.alloc import note_cta_group
from mosaic_async_store.check.families.tcgen05.state import COLUMNS
from mosaic_async_store.check.families.wgmma import execute as wgmma_exec
from mosaic_async_store.check.families.wgmma import layout as wgmma_layout
from mosaic_async_store.check.findings import Finding, Stop, fault
from mosaic_async_store.check.shadow_runs import read_at_once

__all__ = ["mma", "read_smem", "RULES", "EXAMPLES", "REFUSED"]

RULES = {**descriptors.RULES, **pair.RULES}   # (the descriptors' and shapes', the pair's)

EXAMPLES = (
    "tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r2, %p1",
    "tcgen05.mma.cta_group::2.kind::f16 [%r1], %rd1, %rd2, %r2, %p1",
    "tcgen05.mma.cta_group::2.kind::i8 [%r1], %rd1, %rd2, %r2, 1",
    "tcgen05.mma.cta_group::1.kind::tf32 [%r1], %rd1, %rd2, %r2, 1",
    "tcgen05.mma.cta_group::1.kind::f8f6f4 [%r1], %rd1, %rd2, %r2, %p1",
    "tcgen05.mma.cta_group::1.kind::i8 [%r1], %rd1, %rd2, %r2, 0",
)
REFUSED = (
    "tcgen05.mma.cta_group::2.kind::f16 [%r1], [%r3], %rd2, %r2, %p1",
    "tcgen05.mma.cta_group::1.kind::f16 [%r1], [%r3], %rd2, %r2, %p1",
    "tcgen05.mma.cta_group::1.kind::tf32 [%r1], %rd1, %rd2, %r2, {%r4, %r5, %r6, %r7}, %p1",
    "tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r2, %p1, 3",
    "tcgen05.mma.sp.cta_group::1.kind::f16 [%r1], %rd1, %rd2, [%r3], %r2, %p1",
    "tcgen05.mma.ws.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r2, %p1",
    "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale [%r1], %rd1, %rd2, %r2, [%r3], "
    "[%r4], %p1",
)


def _form(ins) -> tuple[int, str]:
  """(cta_group, kind) of a ``tcgen05.mma`` the checker runs; anything else refused by
  name."""
  mods, op = ins.mods[1:], f"opcode {ins.opcode}"
  if "sp" in mods or "ws" in mods:
    raise NotImplementedError(f"{op} (.{'sp' if 'sp' in mods else 'ws'}: the sparse and "
                              "weight-stationary forms are not run by the checker)")
  kinds = [m for m in mods if m.startswith("kind::")]
  kind = kinds[0][6:] if len(kinds) == 1 else None
  if kind is not None and kind.startswith(("mxf", "block")) or "block_scale" in mods:
    raise NotImplementedError(f"{op} (the block-scaled kinds are not run by the checker)")
  group = mods[0] if mods[:1] in (["cta_group::1"], ["cta_group::2"]) else None
  if group is None or mods != [group, f"kind::{kind}"] or kind not in descriptors.KINDS:
    raise NotImplementedError(f"{op} (tcgen05.mma.cta_group::{{1,2}}.kind::{{f16,tf32,"
                              "f8f6f4,i8}} is what the checker runs)")
  ops = ins.ops
  if len(ops) > 1 and ops[1][0] == "addr":
    raise NotImplementedError(f"{op} (the [a-tmem] form, A in tensor memory: not run by the "
                              "checker)")
  if any(o[0] == "vec" for o in ops):
    raise NotImplementedError(f"{op} (disable-output-lane: not run by the checker)")
  if len(ops) == 6:
    raise NotImplementedError(f"{op} (scale-input-d: not run by the checker)")
  if len(ops) != 5 or ops[0][0] != "addr" or any(o[0] not in ("reg", "imm") for o in ops[1:]):
    raise NotImplementedError(f"{op} (operands [d-tmem], a-desc, b-desc, idesc, "
                              "enable-input-d)")
  return int(group[-1]), kind


def mma(k, ins):
  """The handler of ``tcgen05.mma`` (module doc): a function of the issuing thread."""
  (group, kind), pc = _form(ins), len(k.program.code)
  d_addr, a_desc, b_desc, idesc, enable = ins.src[:5]

  def issue(th):
    note_cta_group(k, th, f"cta_group::{group}", pc)
    where = f"CTA {th.cta} thread {th.tid}'s tcgen05.mma.cta_group::{group}.kind::{kind}"
    form = descriptors.decode_idesc(idesc(th), kind, where, group)
    ctas = pair.ctas(k, th, where, ins.opcode) if group == 2 else (th.cta,)
    rows, cols = form.m // group, form.n // group   # (per CTA: A's rows, B's columns)
    taddr = d_addr(th) & 0xFFFFFFFF
    col, lanes = taddr & 0xFFFF, _d_lanes(rows, taddr >> 16, where)
    tms = [state.tmem(k, c) for c in ctas]
    for tm in tms:
      if col + form.n > COLUMNS or not tm.allocated(col, form.n):
        raise Stop(Finding("tcgen05-lanes", state.outside(
            th, "tcgen05.mma", f"D at {taddr:#x} spans columns {col}..{col + form.n - 1} "
            f"of CTA {tm.cta}'s tensor memory, not all allocated (tcgen05.alloc)")))
    da = descriptors.decode_smem(a_desc(th), transposed=form.trans_a, kind=kind,
                                 where=where, which="A")
    db = descriptors.decode_smem(b_desc(th), transposed=form.trans_b, kind=kind,
                                 where=where, which="B")
    tc = state.thread_tc(k, th)
    if tc.ops_slot is None:
      tc.ops_slot = k.slots.allocate(state.TC_OPS, tc)
    count = tc.ops + 1   # (this operation's number; check_vc counts the earlier ones)
    vc = state.check_vc(k, th, pipelined=True)
    op = wgmma_exec._Op(th, pc, "tcgen05.mma", where, None)
    stamp = (tc.ops_slot, count, pc)
    # (one reader for every CTA's bytes: the peer's go through the same asynchronous
    # proxy, with the issuer's clocks, and are stamped with its operations' slot)
    a = [_operand(k, c, op, vc, stamp, da, rows, form, form.atype, form.trans_a)
         for c in ctas]
    b = np.concatenate([_operand(k, c, op, vc, stamp, db, cols, form, form.btype,
                                 form.trans_b) for c in ctas])
    b = -b if form.neg_b else b
    runs = [(4 * (lane * COLUMNS + col), 4 * form.n) for lane in lanes.tolist()]
    where_d = lanes[:, None], col + np.arange(form.n)[None, :]
    for tm, a_rows in zip(tms, a):   # (each CTA's D: its own rows by the full N)
      d = (-a_rows if form.neg_a else a_rows) @ b.T
      state.access(k, th, tm, runs, write=True, stamp=(tc.ops_slot, count), insn=pc,
                   what="tcgen05.mma", pipelined=True)
      if enable(th) & 1:
        d = d + wgmma_exec._decode(tm.cells[where_d], form.dtype)[..., 0]
      tm.cells[where_d] = _encode(d, form.dtype, form.saturate)
    tc.ops = count
  return issue


def _d_lanes(m, lane, where):
  """The tensor-memory lane of each row of D (module doc) from the address's lane
  field ``lane``: M = 128 at lane 0, M = 64 at lane 0 or 16 (``tcgen05-mma``)."""
  if m == 128 and lane == 0:
    return np.arange(128)
  if m == 64 and lane in (0, 16):
    rows = np.arange(64)
    return lane + 32 * (rows // 16) + rows % 16
  raise Stop(Finding("tcgen05-mma", f"{where}: an M = {m} D at lane {lane} (M = 128 is at "
                     "lane 0; M = 64, layout F, at lane 0 or 16)"))


def _operand(k, cta, op, vc, stamp, desc, rows, form, atype, mn_major):
  """A ``rows`` x K operand read through ``desc`` from CTA ``cta``'s shared memory as
  exact values (``read_smem``)."""
  raw = read_smem(k, cta, op, vc, stamp, desc, rows, form.k, form.elem_bytes, mn_major)
  return wgmma_layout.elements(raw, atype)


def read_smem(k, cta, op, vc, stamp, desc, rows, cols, size, mn_major):
  """The bytes (uint8 [rows, cols, size]) of a ``rows`` x ``cols`` matrix of
  ``size``-byte elements read through ``desc`` (a ``wgmma.layout.Descriptor``) from CTA
  ``cta``'s shared memory, checked and recorded as read by the operation ``op`` (whose
  thread issued it) through the asynchronous proxy: ordered by ``vc`` (``_ordering``),
  stamped ``stamp``.  ``tcgen05.mma``'s operands and ``tcgen05.cp``'s source."""
  addrs, ranges, index = wgmma_exec._operand_bytes(
      descriptors.hopper_bits(desc), rows, cols, size, bool(mn_major))
  smem = k.smem[cta]
  if ranges[0][0] < 0 or ranges[-1][1] > len(smem):
    raise fault(f"{op.text}: a descriptor at {desc.start:#x} reads outside CTA {cta}'s "
                f"{len(smem)} bytes of shared memory")
  sh = k.shadow[cta]
  writes = sh.last_writes(ranges, index)
  vc = _ordering(k, op.th, op, vc, writes)
  op.fenced = proxy.fenced(k, vc)
  proxy.check_source_runs(k, op, sh, cta, ranges, writes)
  if not read_at_once(sh, ranges, vc, stamp, writes):   # (at once, or range by range:)
    # (the proxy is checked above, over every range at once)
    access_core.check_and_record_runs(k, op, vc, cta, [(lo, hi - lo) for lo, hi in ranges],
                                      write=False, stamp=stamp)
  return np.frombuffer(smem, np.uint8)[addrs]


def _ordering(k, th, op, vc, writes):
  """The clock the operand's reads are checked with: ``vc`` (``state.check_vc``), or,
  where only ``th``'s whole clock orders the last writes of the bytes (a
  synchronisation since its last ``tcgen05.fence::after_thread_sync``), that clock
  after reporting ``tcgen05-fence-operand`` once (a write nothing orders stays a ``race``)."""
  if all(vc[slot] >= clk for slot, clk in writes):
    return vc
  full = np.maximum(th.vc, vc)
  if any(full[slot] < clk for slot, clk in writes):
    return vc
  slot = next(s for s, c in writes if vc[s] < c)
  by = k.slots.owner(slot).obj
  who = f"CTA {by.cta} thread {by.tid}" if hasattr(by, "tid") else "an earlier write"
  findings.report(k, Finding(
      "tcgen05-fence-operand", f"{op.text} reads its shared-memory operand, written by {who}, "
      "ordered after that write only by a thread synchronisation since its last "
      f"tcgen05.fence::after_thread_sync (or with none yet): the asynchronous {op.opcode} "
      "may run before it", missing="tcgen05.fence::after_thread_sync between the "
      f"synchronisation and the {op.opcode}"))
  return full


def _encode(d, dtype, saturate):
  """D's values as cells: f32 / s32 as WGMMA's accumulator registers; f16 in the low
  16 bits, the high ones 0 (9.7.16.10.4.1: "a Tensor Memory word would contain a single
  16-bit element in its lower 16 bits")."""
  if dtype == "f16":
    return wgmma_layout.encode_accumulator(np.stack([d, np.zeros_like(d)], -1), "f16", False)
  return wgmma_layout.encode_accumulator(d[..., None], dtype, saturate)
