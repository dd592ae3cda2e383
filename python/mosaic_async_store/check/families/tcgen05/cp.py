"""``tcgen05.cp.cta_group::1.shape{.multicast} [taddr], s-desc`` (PTX ISA 9.7.16.9.2): one
thread's asynchronous copy of a matrix from shared memory into tensor memory.

"Instruction tcgen05.cp initiates an asynchronous copy operation from shared memory to
the location specified by the address operand taddr in the Tensor Memory.  The 64-bit
register operand s-desc is the matrix descriptor which represents the source matrix in
the shared memory"; ".shape qualifier indicates the dimension of data to be copied"
(9.7.16.2.3: "lane x size", lanes of tensor memory by bits across its columns).  Like
``tcgen05.mma`` it is issued by one thread (no ``.sync.aligned``, 9.7.16.5 Table 46) and
the checker runs it at its issue, one timing the hardware may take:

  * the source: ``rows`` rows of ``size`` bits, read through the sm_100 descriptor
    (``descriptors.decode_smem``) in the K-major canonical layout (9.7.16.3.3), a row's
    bits its K bytes: the 8-row by 16-byte core matrices, SBO between 8-row groups, LBO
    (no swizzle) or the swizzle pattern between 16-byte chunks.  The ISA names the
    descriptor and the shapes but states no row -> lane rule; row ``r`` into lane
    ``r``, its byte ``b`` into column ``b / 4`` (byte ``b % 4`` of the cell) is the
    placement jax's hardware-tested ``async_copy_smem_to_tmem`` relies on (its
    ``.128x256b`` / ``.128x128b`` copies of "core matrix" tiles, read back with
    ``tcgen05.ld``), and what the checker runs;
  * the bytes are read through the asynchronous proxy ("The shared memory accesses by
    tcgen05.mma and tcgen05.cp operations are performed in the asynchronous proxy",
    9.7.16.6.5), checked and recorded as ``tcgen05.mma``'s operands are
    (``mma.read_smem``: a generic write not fenced is ``proxy-fence``; one ordered only
    by a synchronisation since the thread's last ``tcgen05.fence::after_thread_sync``
    is the warning ``tcgen05-fence-operand``; a later write into the source that does
    not know the copy completed is a ``race``);
  * the cells written are recorded (``state.access``) with the issuer's slot of tcgen05
    operations at the operation's number, the one ``tcgen05.mma`` uses, so that
    ``tcgen05.commit`` tracks it ("track the completion of all the prior asynchronous
    tcgen05 operations", 9.7.16.6.2.1.1: ``tcgen05.cp.cta_group::N`` ->
    ``tcgen05.commit.cta_group::N``) and the thread's later MMAs are ordered after it
    (9.7.16.6.2: ``tcgen05.copy.cta_group::N`` -> ``tcgen05.mma.cta_group::N``).  The
    copy itself is checked without the thread's earlier operations (``pipelined`` off):
    MMA -> cp and cp -> cp are not among the ISA's pipelined pairs ("The asynchronous
    tcgen05 operations may execute and complete in a different order than they were
    issued"), so a copy over cells an earlier MMA or copy of the thread wrote or read,
    with no commit observed between, is a ``race``.  The ISA's pattern 9.7.16.6.4.3
    (cp, before-fence, arrive; wait, after-fence, mma in another thread: pipelined
    across threads) is not modelled: a kernel relying on it is reported.

Shapes run (``SHAPES``): ``.128x256b`` (128 lanes, 8 columns), ``.128x128b`` (128 lanes,
4 columns), ``.32x128b.warpx4`` ("the data being copied is multicasted into all 4
warps": source row ``r`` into lane ``32 w + r`` of each warp ``w``'s quarter), each from
lane 0 of ``taddr``, into allocated columns (``tcgen05-lanes``).  Refused by name:
``.cta_group::2`` (which CTA's shared memory feeds the peer's tensor memory the text
does not say), ``.4x256b`` (4 rows: part of a core matrix, its source placement not
given), ``.64x128b`` with ``.warpx2::02_13`` / ``::01_23`` (which half of the data each
warp of a pair receives the text does not say), the decompressing forms
``.b8x16.b6x16_p32`` / ``.b8x16.b4x16_p64``, a ``taddr`` whose lane field is not 0.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check.families.tcgen05 import descriptors, mma, state
from mosaic_async_store.check.families.tcgen05.alloc import note_cta_group
from mosaic_async_store.check.families.tcgen05.state import COLUMNS
from mosaic_async_store.check.families.wgmma import execute as wgmma_exec
from mosaic_async_store.check.findings import Finding, Stop

__all__ = ["cp", "SHAPES", "EXAMPLES", "REFUSED"]

# (shape, multicast) -> (source rows, bytes per row, the first lane of each copy)
SHAPES = {
    ("128x256b", None): (128, 32, (0,)),
    ("128x128b", None): (128, 16, (0,)),
    ("32x128b", "warpx4"): (32, 16, (0, 32, 64, 96)),
}
EXAMPLES = (
    "tcgen05.cp.cta_group::1.128x256b [%r1], %rd1",
    "tcgen05.cp.cta_group::1.128x128b [%r1], %rd1",
    "tcgen05.cp.cta_group::1.32x128b.warpx4 [%r1], %rd1",
)
REFUSED = (
    "tcgen05.cp.cta_group::2.128x256b [%r1], %rd1",
    "tcgen05.cp.cta_group::1.4x256b [%r1], %rd1",
    "tcgen05.cp.cta_group::1.64x128b.warpx2::02_13 [%r1], %rd1",
    "tcgen05.cp.cta_group::1.128x128b.b8x16.b6x16_p32 [%r1], %rd1",
)
_DECOMPRESS = ("b8x16", "b6x16_p32", "b4x16_p64")


def _form(ins):
  """(rows, bytes per row, first lanes) of a ``tcgen05.cp`` the checker runs (``SHAPES``);
  anything else refused by name."""
  mods, op = ins.mods[1:], f"opcode {ins.opcode}"
  if any(m in _DECOMPRESS for m in mods):
    raise NotImplementedError(f"{op} (the decompressing forms .b8x16.b6x16_p32 / "
                              ".b8x16.b4x16_p64 are not run by the checker)")
  if mods[:1] == ["cta_group::2"]:
    raise NotImplementedError(f"{op} (.cta_group::2: which CTA's shared memory the peer's "
                              "tensor memory receives is not given by the ISA's text; the "
                              "checker runs .cta_group::1)")
  shape = mods[1] if len(mods) > 1 else None
  if shape == "4x256b" or shape == "64x128b":
    what = ("4 rows, part of a core matrix: where they lie in shared memory is not given"
            if shape == "4x256b" else "which half of the data each warp of a .warpx2 "
            "pair receives is not given by the ISA's text")
    raise NotImplementedError(f"{op} (.{shape}: {what}; the checker runs .128x256b, "
                              ".128x128b, .32x128b.warpx4)")
  key = (shape, mods[2] if len(mods) == 3 else None)
  if mods[:1] != ["cta_group::1"] or len(mods) > 3 or key not in SHAPES:
    raise NotImplementedError(f"{op} (tcgen05.cp.cta_group::1.{{128x256b,128x128b,"
                              "32x128b.warpx4}} is what the checker runs)")
  if len(ins.ops) != 2 or ins.ops[0][0] != "addr" or ins.ops[1][0] != "reg":
    raise NotImplementedError(f"{op} (operands [taddr], s-desc)")
  return SHAPES[key]


def cp(k, ins):
  """The handler of ``tcgen05.cp`` (module doc): a function of the issuing thread."""
  (rows, nbytes, firsts), pc = _form(ins), len(k.program.code)
  taddr_of, desc_of = ins.src[:2]
  name = ins.opcode

  def issue(th):
    note_cta_group(k, th, "cta_group::1", pc)
    where = f"CTA {th.cta} thread {th.tid}'s {name}"
    taddr = taddr_of(th) & 0xFFFFFFFF
    lane, col, ncols = taddr >> 16, taddr & 0xFFFF, nbytes // 4
    if lane:
      raise NotImplementedError(f"opcode {name} (taddr {taddr:#x} at lane {lane}: the "
                                "checker runs copies into lane 0 of taddr, where the "
                                "shape's lanes start)")
    tm = state.tmem(k, th.cta)
    if col + ncols > COLUMNS or not tm.allocated(col, ncols):
      raise Stop(Finding("tcgen05-lanes", state.outside(
          th, "tcgen05.cp", f"columns {col}..{col + ncols - 1} of taddr {taddr:#x}, not "
          "all allocated (tcgen05.alloc)")))
    desc = descriptors.decode_smem(desc_of(th), transposed=False, kind="cp", where=where,
                                   which="the source", opcode=name)
    tc = state.thread_tc(k, th)
    if tc.ops_slot is None:
      tc.ops_slot = k.slots.allocate(state.TC_OPS, tc)
    count = tc.ops + 1
    op = wgmma_exec._Op(th, pc, "tcgen05.cp", where, None)
    raw = mma.read_smem(k, th.cta, op, state.check_vc(k, th), (tc.ops_slot, count, pc),
                        desc, rows, nbytes, 1, False)
    words = np.ascontiguousarray(raw.reshape(rows, nbytes)).view("<u4")   # [rows, ncols]
    for first in firsts:
      lanes = first + np.arange(rows)
      runs = [(4 * (int(x) * COLUMNS + col), nbytes) for x in lanes]
      state.access(k, th, tm, runs, write=True, stamp=(tc.ops_slot, count), insn=pc,
                   what="tcgen05.cp")
      tm.cells[lanes[:, None], col + np.arange(ncols)[None, :]] = words
    tc.ops = count
  return issue
