"""tcgen05.ld's .pack::16b and tcgen05.st's .unpack::16b (check/families/tcgen05/ldst.py)
in hand-written sm_100a PTX: 128 threads, warp 0 allocates 64 columns; each warp writes
its quarter of tensor memory with plain 32-bit stores and reads it back packed, or
stores unpacked and reads the cells back plain.  A packed register holds the low 16 bits
of two adjacent columns (the first in its low half); the expected values are this
file's own arithmetic over the cells, the fragment's placement (which cell a register
names) being ldst.cells', tested in test_tcgen05_tmem.py.  Each broken neighbour is
reported in every CI schedule."""

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx
from mosaic_async_store.check.families.tcgen05 import ldst
from mosaic_async_store.check.interp import PtxKernel

from ptx_harness import CI_SCHEDULES, kernel, rules_in_every_schedule

SCHEDULES = len(CI_SCHEDULES)
COLS = 16                 # the physical columns each test writes / reads per lane
# shape, num: the packed accesses (their registers reach 16 physical columns at most)
FORMS = [("32x32b", 8), ("16x64b", 4), ("16x128b", 2), ("16x256b", 1)]
REGS = {"32x32b": 1, "16x64b": 1, "16x128b": 2, "16x256b": 4}

_HEAD = """
  shr.u32 %r9, %r1, 5;                      // warp
  setp.ne.u32 %p1, %r9, 0;
  mov.u32 %r10, __dynamic_shmem__0;
  @%p1 bra SKIP_ALLOC;
  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r10], 64;
  tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
SKIP_ALLOC:
  bar.sync 0;
  ld.shared.b32 %r3, [%r10];
  tcgen05.fence::after_thread_sync;
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 64;
  add.u64 %rd1, %rd1, %rd2;               // this thread's 16 words of output
"""
_TAIL = """
  tcgen05.fence::before_thread_sync;
  bar.sync 0;
  @%p1 bra SKIP_DEALLOC;
  tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r3, 64;
SKIP_DEALLOC:
"""


def _vec(names):
  return "{" + ", ".join(names) + "}"


def _values(first, count, formula):
  """PTX setting %v{first}.. (count registers): register i = tid * 16 * 0x10001 +
  ``formula(i)`` (mad.lo: distinct halves per thread and register)."""
  return "\n".join(f"  mad.lo.u32 %v{first + i}, %r1, {16 * 0x10001}, {formula(i)};"
                   for i in range(count))


def _cell(i):
  """The 32-bit word a thread's plain store puts in column i of its lane (high half a
  marker, low half tid * 16 + i)."""
  return 0xBEEF0000 + i


def _unpacked(i):
  """Register i of an unpacking store: low half tid * 16 + i, high 0x8000 + that."""
  return 0x80000000 + i * 0x10001


def _stores(count):
  return "\n".join(f"  st.global.u32 [%rd1+{4 * i}], %v{32 + i};" for i in range(count))


def pack_kernel(shape, num, *, col=0):
  """Each lane stores 16 cells plain (32x32b.x16), waits, loads ``shape``.x``num`` packed
  from column ``col`` and writes its registers out."""
  n = num * REGS[shape]
  regs = [f"%v{32 + i}" for i in range(n)]
  body = _HEAD + _values(0, COLS, _cell) + f"""
  tcgen05.st.sync.aligned.32x32b.x16.b32 [%r3], {_vec(f"%v{i}" for i in range(COLS))};
  tcgen05.wait::st.sync.aligned;
  tcgen05.ld.sync.aligned.{shape}.x{num}.pack::16b.b32 {_vec(regs)}, [%r3+{col}];
  tcgen05.wait::ld.sync.aligned;
""" + _stores(n) + _TAIL
  return kernel(body, regs=".reg .b32 %v<64>;", target="sm_100a")


def unpack_kernel(shape, num, *, wait_st=True, load_col=0, store_col=0):
  """Each lane stores ``shape``.x``num`` unpacked at ``store_col``, waits, loads 16
  cells plain (32x32b.x16) from ``load_col`` and writes them out."""
  n = num * REGS[shape]
  sources, loaded = _vec(f"%v{i}" for i in range(n)), _vec(f"%v{32 + i}" for i in range(COLS))
  body = _HEAD + _values(0, n, _unpacked) + f"""
  tcgen05.st.sync.aligned.{shape}.x{num}.unpack::16b.b32 [%r3+{store_col}], {sources};
  {"tcgen05.wait::st.sync.aligned;" if wait_st else ""}
  tcgen05.ld.sync.aligned.32x32b.x16.b32 {loaded}, [%r3+{load_col}];
  tcgen05.wait::ld.sync.aligned;
""" + _stores(COLS) + _TAIL
  return kernel(body, regs=".reg .b32 %v<64>;", target="sm_100a")


def _check(ptx, schedules=SCHEDULES):
  report = check_ptx(ptx, [np.zeros((128, 16), np.uint32)], smem_bytes=16,
                     block=(128, 1, 1), schedules=schedules)
  got = None if report.outputs is None else report.outputs[0].view(np.uint32).reshape(128, 16)
  return report, got


def _lane_cells():
  """The cells the plain stores leave: [lane, column] for 16 columns."""
  lane = np.arange(128)[:, None].astype(np.uint64)
  col = np.arange(COLS)[None, :].astype(np.uint64)
  return ((lane * 16 * 0x10001 + 0xBEEF0000 + col) & 0xFFFFFFFF).astype(np.uint32)


@pytest.mark.parametrize("shape, num", FORMS)
def test_a_packed_load_joins_the_low_halves_of_two_adjacent_columns(shape, num):
  report, got = _check(pack_kernel(shape, num), schedules=1)
  assert report.ok, str(report)
  cells = _lane_cells()
  for tid in range(128):
    base = 32 * (tid // 32)
    for j, (dl, dc) in enumerate(ldst.cells(shape, num, tid % 32)):
      lo, hi = cells[base + dl, 2 * dc], cells[base + dl, 2 * dc + 1]
      want = int(lo) & 0xFFFF | (int(hi) & 0xFFFF) << 16
      assert int(got[tid, j]) == want, (tid, j)


@pytest.mark.parametrize("shape, num", FORMS)
def test_an_unpacking_store_splits_each_register_over_two_columns(shape, num):
  """Each register's low half into column 2 c's low half, its high half into column
  2 c + 1's; the high half of each cell written is 0xCDCD (ldst's doc: not given)."""
  report, got = _check(unpack_kernel(shape, num), schedules=1)
  assert report.ok, str(report)
  want, written = np.zeros((128, COLS), np.int64), np.zeros((128, COLS), bool)
  for tid in range(128):
    base = 32 * (tid // 32)
    for j, (dl, dc) in enumerate(ldst.cells(shape, num, tid % 32)):
      v = (tid * 16 * 0x10001 + _unpacked(j)) & 0xFFFFFFFF
      for h in (0, 1):
        want[base + dl, 2 * dc + h] = 0xCDCD0000 | (v >> 16 * h) & 0xFFFF
        written[base + dl, 2 * dc + h] = True
  assert written.sum() == 128 * num * REGS[shape] * 2   # (each register: two cells of its own)
  np.testing.assert_array_equal(got.astype(np.int64)[written], want[written])


def test_the_doubled_columns_are_accessed():
  """An unpacking .32x32b.x1 reaches columns 0 and 1: a plain load of column 1 before
  tcgen05.wait::st races with it (the correct neighbour waits)."""
  assert _check(unpack_kernel("32x32b", 1, load_col=1))[0].ok
  report, _ = _check(unpack_kernel("32x32b", 1, wait_st=False, load_col=1))
  assert "race" in rules_in_every_schedule(report), str(report)


def test_an_unpacking_store_past_the_allocation_is_tcgen05_lanes():
  """.32x32b.x8.unpack::16b reaches 16 columns: at column 48 of 64 it fits, at 56 not."""
  assert _check(unpack_kernel("32x32b", 8, store_col=48))[0].ok
  report, _ = _check(unpack_kernel("32x32b", 8, store_col=56))
  assert "tcgen05-lanes" in rules_in_every_schedule(report), str(report)


@pytest.mark.parametrize("statement, named", [
    ("tcgen05.ld.sync.aligned.32x32b.x1.unpack::16b.b32 {%r1}, [%r3]", "pack::16b"),
    ("tcgen05.st.sync.aligned.32x32b.x1.pack::16b.b32 [%r3], {%r1}", "unpack::16b"),
    ("tcgen05.ld.sync.aligned.16x32bx2.x1.pack::16b.b32 {%r1}, [%r3], 2", "16x32bx2"),
])
def test_the_wrong_packing_qualifier_is_refused_by_name(statement, named):
  with pytest.raises(NotImplementedError, match=named):
    PtxKernel(kernel(f"  {statement};", target="sm_100a"))
