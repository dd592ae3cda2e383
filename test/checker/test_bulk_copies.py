"""Bulk copies and reductions (``cp.async.bulk``, ``cp.reduce.async.bulk``) in hand-written
PTX: each form runs with the values it must leave, and each rule it can break is
reported in every CI schedule next to a correct neighbour (check/tma.py, proxy.py,
bulk_rules.py)."""

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx

from ptx_harness import CI_SCHEDULES, kernel, rules_in_every_schedule

SCHEDULES = len(CI_SCHEDULES)   # seeds 0, 1, 2: what CI runs


# 32 threads each store one element of a 128-byte SMEM tile, (optionally) fence the
# generic proxy against the asynchronous one, meet at bar.sync, then thread 0 reduces
# the tile into global memory and waits for its bulk group.
_REDUCE = """
  ld.param.u64 %rd1, [k_param_0];
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  {store}
  {fence}
  bar.sync 0;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 cp.reduce.async.bulk.global.shared::cta.bulk_group.{op} [%rd1], [%r3], {size};
  cp.async.bulk.commit_group;
  cp.async.bulk.wait_group 0;
"""
_U32 = """shl.b32 %r4, %r1, 2;
  add.s32 %r5, %r3, %r4;
  add.s32 %r6, %r1, 1;
  st.shared.u32 [%r5], %r6;"""
_F16 = """shl.b32 %r4, %r1, 1;
  add.s32 %r5, %r3, %r4;
  mov.b16 %h1, {bits};
  st.shared.b16 [%r5], %h1;"""


@pytest.mark.parametrize("fenced", [True, False])
def test_a_bulk_add_reduction_into_global_memory(fenced):
  ptx = kernel(_REDUCE.format(store=_U32, op="add.u32", size=128,
                              fence="fence.proxy.async.shared::cta;" if fenced else ""))
  report = check_ptx(ptx, [np.full(32, 100, np.uint32)], smem_bytes=256, block=(32, 1, 1),
                     schedules=SCHEDULES)
  if fenced:
    assert report.ok, str(report)
    assert report.outputs[0].view(np.uint32).tolist() == [101 + t for t in range(32)]
  else:   # st.shared, then the copy reads through the asynchronous proxy: no fence
    assert "proxy-fence" in rules_in_every_schedule(report), str(report)


@pytest.mark.parametrize("bits, start, want", [
    ("0x3E00", 0x4000, 0x4300),    # 1.5 + 2.0 = 3.5
    ("0x0001", 0x0001, 0x0002),    # the smallest subnormal twice: .noftz keeps it
    ("0x3C00", 0x1001, 0x3C01)])   # 1.0 + just over half an ulp: rounds up, once
def test_a_bulk_f16_add_rounds_once_and_keeps_subnormals(bits, start, want):
  ptx = kernel(_REDUCE.format(store=_F16.format(bits=bits), op="add.noftz.f16", size=64,
                              fence="fence.proxy.async.shared::cta;"),
               regs=".reg .b16 %h<4>;")
  out = np.full(64, start, np.uint16)   # 32 elements reduced, 32 untouched
  report = check_ptx(ptx, [out], smem_bytes=256, block=(32, 1, 1), schedules=SCHEDULES)
  assert report.ok, str(report)
  got = report.outputs[0].view(np.uint16)
  assert got[:32].tolist() == [want] * 32 and got[32:].tolist() == [start] * 32


# A bulk load into SMEM completing on an mbarrier, each thread then copying its word out.
_LOAD = """
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd7, [k_param_1];
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  add.s32 %r10, %r3, 128;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r10], 1;
  bar.sync 0;
  @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r10], 128;
  @%p1 cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [%r3], [%rd1], {size}, [%r10];
  {early}
LOOP:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r10], 0;
  @!%p2 bra LOOP;
  shl.b32 %r4, %r1, 2;
  add.s32 %r5, %r3, %r4;
  ld.shared.u32 %r6, [%r5];
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd7, %rd3;
  st.global.u32 [%rd4], %r6;
"""


@pytest.mark.parametrize("case", ["ok", "read_before_wait", "size_not_16"])
def test_a_bulk_load_completes_on_its_mbarrier(case):
  early = "ld.shared.u32 %r20, [%r3];" if case == "read_before_wait" else ""
  size = 120 if case == "size_not_16" else 128
  ptx = kernel(_LOAD.format(size=size, early=early), nparams=2)
  x = np.arange(32, dtype=np.uint32) * 7
  report = check_ptx(ptx, [x, np.zeros(32, np.uint32)], smem_bytes=256, block=(32, 1, 1),
                     schedules=SCHEDULES)
  if case == "ok":
    assert report.ok, str(report)
    assert report.outputs[1].view(np.uint32).tolist() == x.tolist()
  else:
    rule = {"read_before_wait": "early-read", "size_not_16": "bulk-size"}[case]
    assert rule in rules_in_every_schedule(report), str(report)


# A bulk store of SMEM whose source is overwritten: after wait_group.read (correct) or
# before it (a write-after-read race with the copy's asynchronous read).
_STORE = """
  ld.param.u64 %rd1, [k_param_0];
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  mov.u32 %r6, 5;
  st.shared.u32 [%r3], %r6;
  fence.proxy.async.shared::cta;
  cp.async.bulk.global.shared::cta.bulk_group [%rd1], [%r3], 16;
  cp.async.bulk.commit_group;
  {before}
  mov.u32 %r7, 9;
  st.shared.u32 [%r3], %r7;
  cp.async.bulk.wait_group 0;
"""


@pytest.mark.parametrize("wait_read", [True, False])
def test_a_bulk_stores_source_is_free_after_wait_group_read(wait_read):
  ptx = kernel(_STORE.format(before="cp.async.bulk.wait_group.read 0;" if wait_read else ""))
  report = check_ptx(ptx, [np.zeros(4, np.uint32)], smem_bytes=64, block=(1, 1, 1),
                     schedules=SCHEDULES)
  if wait_read:
    assert report.ok, str(report)
    assert report.outputs[0].view(np.uint32)[0] == 5
  else:
    assert "race" in rules_in_every_schedule(report), str(report)


def test_a_cta_that_exits_before_waiting_for_its_bulk_store_is_reported():
  """The store's source is the CTA's shared memory: exiting before a wait_group (.read)
  covers it lets the memory go while the copy may still read it (every schedule: the
  copy in flight, whose read then lands at the exit, or landed but never waited for)."""
  ptx = kernel(_STORE.format(before="cp.async.bulk.wait_group.read 0;").replace(
      "cp.async.bulk.wait_group 0;", "").replace("st.shared.u32 [%r3], %r7;", ""))
  report = check_ptx(ptx, [np.zeros(4, np.uint32)], smem_bytes=64, block=(1, 1, 1),
                     schedules=SCHEDULES)
  assert report.ok, str(report)   # .read covers the source: the writes may land later
  ptx = kernel(_STORE.format(before="").replace("cp.async.bulk.wait_group 0;", "")
               .replace("st.shared.u32 [%r3], %r7;", ""))
  report = check_ptx(ptx, [np.zeros(4, np.uint32)], smem_bytes=64, block=(1, 1, 1),
                     schedules=SCHEDULES)
  # the warning exit-async-read (jax's Blackwell matmul relies on it: docs/checker.md,
  # "Warnings"), in every schedule; an error with strict
  assert "exit-async-read" in rules_in_every_schedule(report), str(report)
  assert report.ok and report.outputs[0].view(np.uint32)[0] == 5, str(report)
  assert not check_ptx(ptx, [np.zeros(4, np.uint32)], smem_bytes=64, block=(1, 1, 1),
                       schedules=SCHEDULES, strict=True).ok


@pytest.mark.parametrize("fence", ["fence.proxy.async.global;", "fence.proxy.async;", "",
                                   "fence.proxy.async.shared::cta;"])
def test_a_bulk_load_of_global_memory_threads_wrote_needs_a_global_proxy_fence(fence):
  """Each thread writes its word of the source with st.global, (fences,) then the CTA
  meets at bar.sync and thread 0 loads the source by a bulk copy: only a fence over
  global memory (.global or all spaces) orders the generic writes before the copy's
  asynchronous read."""
  write = f"""mul.lo.u32 %r21, %r1, 3;
  mul.wide.u32 %rd8, %r1, 4;
  add.s64 %rd9, %rd1, %rd8;
  st.global.u32 [%rd9], %r21;
  {fence}"""
  ptx = kernel(_LOAD.format(size=128, early="").replace(
      "  @%p1 mbarrier.init", f"  {write}\n  @%p1 mbarrier.init"), nparams=2)
  report = check_ptx(ptx, [np.zeros(32, np.uint32), np.zeros(32, np.uint32)],
                     smem_bytes=256, block=(32, 1, 1), schedules=SCHEDULES)
  if fence in ("fence.proxy.async.global;", "fence.proxy.async;"):
    assert report.ok, str(report)
    assert report.outputs[1].view(np.uint32).tolist() == [3 * t for t in range(32)]
  else:
    assert "proxy-fence" in rules_in_every_schedule(report), str(report)


def test_a_bulk_group_not_waited_for_keeps_its_read_whatever_the_landing_order():
  """Two stores of one SMEM word in groups 1 and 2, wait_group.read 1 (group 1 only),
  then the word is overwritten: a race with group 2's read in every schedule, also
  where group 2's copy lands first (schedule 1: newest first)."""
  body = _STORE.format(before="").replace(
      "  cp.async.bulk.commit_group;\n", "  cp.async.bulk.commit_group;\n"
      "  cp.async.bulk.global.shared::cta.bulk_group [%rd5], [%r3], 16;\n"
      "  cp.async.bulk.commit_group;\n  cp.async.bulk.wait_group.read 1;\n", 1)
  ptx = kernel("  ld.param.u64 %rd5, [k_param_1];\n" + body, nparams=2)
  report = check_ptx(ptx, [np.zeros(4, np.uint32), np.zeros(4, np.uint32)], smem_bytes=64,
                     block=(1, 1, 1), schedules=SCHEDULES)
  assert "race" in rules_in_every_schedule(report), str(report)


# A tensor reduction: 32 threads each store one element of a 1-D tile, fence, meet, and
# thread 0 reduces the tile into the tensor at element 16 (half the box lies past its end:
# those elements are dropped), through the tensor map parameter.
_TENSOR_REDUCE = """.version 8.6
.target sm_90a
.address_size 64
.visible .entry k(
  .param .align 64 .b8 k_param_0[128]
)
{{
  .reg .pred %p<4>;
  .reg .b32 %r<16>;
  .reg .b64 %rd<8>;
  .shared .align 128 .b8 __dynamic_shmem__0;
  mov.u32 %r1, %tid.x;
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  shl.b32 %r4, %r1, 2;
  add.s32 %r5, %r3, %r4;
  add.s32 %r6, %r1, 1;
  st.shared.u32 [%r5], %r6;
  fence.proxy.async.shared::cta;
  bar.sync 0;
  setp.eq.u32 %p1, %r1, 0;
  mov.b64 %rd3, k_param_0;
  cvta.param.u64 %rd4, %rd3;
  mov.u32 %r7, 16;
  @%p1 cp.reduce.async.bulk.tensor.1d.global.shared::cta.add.tile.bulk_group [%rd4, {{%r7}}], [%r3];
  cp.async.bulk.commit_group;
  cp.async.bulk.wait_group 0;
  ret;
}}
"""


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.float16])
def test_a_tensor_reduction_adds_the_box_and_drops_what_lies_outside(dtype):
  from mosaic_async_store.check import TensorMap
  from mosaic_async_store.errors import AsyncStoreError
  x = np.full(32, 100, dtype)
  tmap = TensorMap.of(x, box=(32,) if dtype != np.float16 else (64,))
  if dtype == np.float16:   # the tensor form has no .noftz: refused, not guessed
    with pytest.raises(AsyncStoreError, match=r"add\.f16"):
      check_ptx(_TENSOR_REDUCE.format(), [tmap], smem_bytes=256, block=(32, 1, 1))
    return
  report = check_ptx(_TENSOR_REDUCE.format(), [tmap], smem_bytes=256, block=(32, 1, 1),
                     schedules=SCHEDULES)
  assert report.ok, str(report)
  got = report.outputs[0].view(dtype)
  assert got[:16].tolist() == [100] * 16 and got[16:].tolist() == [101 + t for t in range(16)]


# A 2-D tensor copy whose box is 4 rows of a wider tensor: its global bytes are 4 runs
# (16 bytes each, 64 apart), checked together where none needs a proxy fence
# (access_core.check_and_record_runs), run by run where one does.  Load: 32 threads
# each write one element of rows 2..5, columns 4..11 with st.global, (fence,) meet,
# and thread 0 loads the box at row 2, column 4 into SMEM, waits, and stores it to
# the second tensor's row 0.. by a second map.  Store: thread 0 stores an SMEM tile
# into the box after thread 1 read one of its elements with ld.global (the test's doc).
_TENSOR_2D = """.version 8.6
.target sm_90a
.address_size 64
.visible .entry k(
  .param .align 64 .b8 k_param_0[128],
  .param .align 64 .b8 k_param_1[128],
  .param .u64 k_param_2
)
{{
  .reg .pred %p<8>;
  .reg .b32 %r<32>;
  .reg .b64 %rd<16>;
  .shared .align 128 .b8 __dynamic_shmem__0;
  mov.u32 %r1, %tid.x;
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  add.s32 %r10, %r3, 128;
  mov.b64 %rd3, k_param_0;
  cvta.param.u64 %rd4, %rd3;
  mov.b64 %rd8, k_param_1;
  cvta.param.u64 %rd5, %rd8;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r10], 1;
  mov.u32 %r8, 4;
  mov.u32 %r9, 2;
{body}
"""
# (after the CTA meets) thread 0 loads the box at column %r8, row %r9 into SMEM, waits
# for it, and stores it to the second tensor's corner
_BOX_THERE_AND_BACK_2D = """  bar.sync 0;
  @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r10], 64;
  @%p1 cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes [%r3], [%rd4, {{%r8, %r9}}], [%r10];
LOOP:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r10], 0;
  @!%p2 bra LOOP;
  mov.u32 %r17, 0;
  @%p1 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd5, {{%r17, %r17}}], [%r3];
  cp.async.bulk.commit_group;
  cp.async.bulk.wait_group 0;
  ret;
}}"""
_LOAD_2D = """  ld.param.u64 %rd1, [k_param_2];
  shr.u32 %r11, %r1, 3;
  add.s32 %r12, %r11, 2;
  shl.b32 %r13, %r12, 4;
  and.b32 %r14, %r1, 7;
  add.s32 %r15, %r13, %r14;
  add.s32 %r15, %r15, 4;
  mul.wide.u32 %rd6, %r15, 4;
  add.s64 %rd7, %rd1, %rd6;
  add.s32 %r16, %r1, 1;
  st.global.u32 [%rd7], %r16;
  {fence}
""" + _BOX_THERE_AND_BACK_2D
_STORE_2D = """  ld.param.u64 %rd1, [k_param_2];
  shl.b32 %r4, %r1, 2;
  add.s32 %r5, %r3, %r4;
  add.s32 %r6, %r1, 1;
  setp.lt.u32 %p3, %r1, 16;
  @%p3 st.shared.u32 [%r5], %r6;
  fence.proxy.async.shared::cta;
  bar.sync 0;
  setp.eq.u32 %p4, %r1, 1;
  mov.u32 %r19, 1;
  @%p4 ld.global.u32 %r18, [%rd1+{offset}];
  @%p4 st.{flag_store}.gpu.global.u32 [%rd1], %r19;
  @!%p1 bra DONE;
WAIT:
  ld.{flag_load}.gpu.global.u32 %r20, [%rd1];
  setp.eq.u32 %p5, %r20, 0;
  @%p5 bra WAIT;
  cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd4, {{%r8, %r9}}], [%r3];
  cp.async.bulk.commit_group;
  cp.async.bulk.wait_group 0;
DONE:
  ret;
}}"""


def _maps_2d():
  """Two 8 x 16 uint32 tensors with 4 x 4 boxes (rows of 64 bytes: a box is 4 runs),
  their maps and the first one's array again (the threads' pointer: the same buffer)."""
  from mosaic_async_store.check import TensorMap
  x, y = np.zeros((8, 16), np.uint32), np.zeros((8, 16), np.uint32)
  return x, y, [TensorMap.of(x, box=(4, 4)), TensorMap.of(y, box=(4, 4)), x]


@pytest.mark.parametrize("fence", ["fence.proxy.async.global;", ""])
def test_a_tensor_load_of_rows_threads_wrote_needs_a_global_proxy_fence(fence):
  x, y, maps = _maps_2d()
  ptx = _TENSOR_2D.format(body=_LOAD_2D.format(fence=fence))
  report = check_ptx(ptx, maps, smem_bytes=256, block=(32, 1, 1), schedules=SCHEDULES)
  if not fence:   # (every run's bytes a thread wrote: the first run is named)
    assert "proxy-fence" in rules_in_every_schedule(report), str(report)
    assert "bytes 144..159" in str(report), str(report)   # (row 2, columns 4..7)
    return
  assert report.ok, str(report)
  want = np.zeros((8, 16), np.uint32)
  want[:4, :4] = [[8 * r + c + 1 for c in range(4)] for r in range(4)]
  assert (report.outputs[1].view(np.uint32).reshape(8, 16) == want).all()


@pytest.mark.parametrize("flag, offset, race", [
    ("relaxed", 4 * (3 * 16 + 6), True),    # (row 3, column 6: in the box, unordered)
    ("relaxed", 4 * (3 * 16 + 9), False),   # (column 9: outside the box)
    ("release", 4 * (3 * 16 + 6), False)])  # (release / acquire: before the copy)
def test_a_tensor_store_of_rows_races_with_an_unordered_thread_read(flag, offset, race):
  """Thread 1 reads an element of the tensor, then sets a flag (element 0) that thread
  0 polls before it stores an SMEM tile into the box: the copy lands after the read in
  every schedule, so its own check (its 4 rows together: no thread wrote them, nothing
  for a proxy fence) must find the read it is not ordered after."""
  x, y, maps = _maps_2d()
  ptx = _TENSOR_2D.format(body=_STORE_2D.format(
      offset=offset, flag_store=flag, flag_load="relaxed" if flag == "relaxed" else "acquire"))
  report = check_ptx(ptx, maps, smem_bytes=256, block=(32, 1, 1), schedules=SCHEDULES)
  if race:
    assert rules_in_every_schedule(report) == {"race"}, str(report)
    assert "bytes 208..223, read by CTA 0 thread 1" in str(report), str(report)
    return
  assert report.ok, str(report)
  got = report.outputs[0].view(np.uint32).reshape(8, 16)
  want = np.zeros((8, 16), np.uint32)
  want[0, 0] = 1
  want[2:6, 4:8] = np.arange(1, 17).reshape(4, 4)
  assert (got == want).all()


_EDGE_2D = """  mov.u32 %r8, {x};
  mov.u32 %r9, {y};
""" + _BOX_THERE_AND_BACK_2D


@pytest.mark.parametrize("x, y", [(14, 6), (-2, 1), (6, -3), (13, 5)])
def test_a_tensor_load_over_the_edge_lands_zeros_where_the_box_lies_outside(x, y):
  """A 4 x 4 box at column ``x``, row ``y`` of an 8 x 16 tensor, partly outside it:
  the elements outside land as zeros, the others as the tensor's (then stored to the
  second tensor's corner)."""
  from mosaic_async_store.check import TensorMap
  src, dst = np.arange(128, dtype=np.uint32).reshape(8, 16) + 1, np.zeros((8, 16), np.uint32)
  maps = [TensorMap.of(src, box=(4, 4)), TensorMap.of(dst, box=(4, 4)), src]
  ptx = _TENSOR_2D.format(body=_EDGE_2D.format(x=x & 0xFFFFFFFF, y=y & 0xFFFFFFFF))
  report = check_ptx(ptx, maps, smem_bytes=256, block=(32, 1, 1), schedules=SCHEDULES)
  assert report.ok, str(report)
  want = np.zeros((8, 16), np.uint32)
  for r in range(4):
    for c in range(4):
      if 0 <= y + r < 8 and 0 <= x + c < 16:
        want[r, c] = src[y + r, x + c]
  assert (report.outputs[1].view(np.uint32).reshape(8, 16) == want).all()
