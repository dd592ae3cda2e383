"""The "must"s of the bulk and tensor copies that a kernel's values decide, each a finding
in every CI schedule beside a correct neighbour that passes (check/families/tma/
bulk_rules.py quotes each sentence; docs/checker.md lists every "must" of PTX ISA
9.7.9.25 and 5.5 and where the checker enforces it):

  * ``tensor-store-coords``: "Following are the restrictions on the .global.shared::cta
    direction: Starting co-ordinates for Bounding Box (tensorCoords) must be
    non-negative" (a tensor store or tensor reduction).  A box that runs past the
    tensor's end is not restricted: its elements out of bounds are not written (the
    neighbours);
  * ``tensor-traversal-stride``: "For non-interleaved layout, the traversal stride in
    dimension 0 must always be 1";
  * ``bulk-s2s-peer``: cp.async.bulk from .shared::cta to .shared::cluster: "the
    destination has to be in the shared memory of a different CTA within the cluster";
  * ``bulk-align`` of ``cp.async.bulk.prefetch``: "The address srcMem must be aligned to
    16 bytes"."""

import numpy as np
import pytest

from mosaic_async_store.check import TensorMap, check_ptx

import test_bulk_copies
from ptx_harness import CI_SCHEDULES, kernel, rules_in_every_schedule

SCHEDULES = len(CI_SCHEDULES)   # seeds 0, 1, 2: what CI runs

# Thread 0 loads the 4 x 4 box at column 4, row 2 of the first tensor into SMEM, waits
# for it, then stores it into the second tensor with its box starting at column {x},
# row {y} (test_bulk_copies' 2-D kernel and maps: 8 x 16 uint32 tensors).
_STORE_AT = """  bar.sync 0;
  @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r10], 64;
  @%p1 cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes [%r3], [%rd4, {{%r8, %r9}}], [%r10];
LOOP:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r10], 0;
  @!%p2 bra LOOP;
  mov.u32 %r17, {x};
  mov.u32 %r18, {y};
  @%p1 cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd5, {{%r17, %r18}}], [%r3];
  cp.async.bulk.commit_group;
  cp.async.bulk.wait_group 0;
  ret;
}}"""


def _store_at(x, y, **map_fields):
  src = np.arange(128, dtype=np.uint32).reshape(8, 16) + 1
  dst = np.zeros((8, 16), np.uint32)
  maps = [TensorMap.of(src, box=(4, 4)), TensorMap.of(dst, box=(4, 4), **map_fields), src]
  ptx = test_bulk_copies._TENSOR_2D.format(
      body=_STORE_AT.format(x=x & 0xFFFFFFFF, y=y & 0xFFFFFFFF))
  return src, check_ptx(ptx, maps, smem_bytes=256, block=(32, 1, 1), schedules=SCHEDULES)


@pytest.mark.parametrize("x, y", [(-1, 0), (0, -2), (-4, -4)])
def test_a_tensor_store_starting_at_a_negative_coordinate_is_reported(x, y):
  _, report = _store_at(x, y)
  assert "tensor-store-coords" in rules_in_every_schedule(report), str(report)
  found = next(f for f in report.findings if f.rule == "tensor-store-coords")
  assert "non-negative" in found.explained and str(min(x, y)) in found.explained


@pytest.mark.parametrize("x, y", [(0, 0), (14, 6), (13, 7)])
def test_a_tensor_store_from_non_negative_coordinates_drops_what_lies_past_the_end(x, y):
  src, report = _store_at(x, y)
  assert report.ok, str(report)
  want = np.zeros((8, 16), np.uint32)
  for r in range(4):
    for c in range(4):
      if y + r < 8 and x + c < 16:
        want[y + r, x + c] = src[2 + r, 4 + c]
  assert (report.outputs[1].view(np.uint32).reshape(8, 16) == want).all()


@pytest.mark.parametrize("start, ok", [(-16, False), (-1, False), (16, True), (0, True)])
def test_a_tensor_reduction_starting_at_a_negative_coordinate_is_reported(start, ok):
  x = np.full(32, 100, np.int32)
  ptx = test_bulk_copies._TENSOR_REDUCE.format().replace(
      "mov.u32 %r7, 16;", f"mov.u32 %r7, {start & 0xFFFFFFFF};")
  report = check_ptx(ptx, [TensorMap.of(x, box=(32,))], smem_bytes=256, block=(32, 1, 1),
                     schedules=SCHEDULES)
  if not ok:
    assert "tensor-store-coords" in rules_in_every_schedule(report), str(report)
    return
  assert report.ok, str(report)
  got = report.outputs[0].view(np.int32)
  want = np.full(32, 100, np.int32)
  want[start:] += np.arange(1, 33 - start, dtype=np.int32)
  assert got.tolist() == want.tolist()


@pytest.mark.parametrize("element_strides, ok", [((1, 2), False), ((2, 1), True)])
def test_an_inner_traversal_stride_other_than_one_is_reported(element_strides, ok):
  """The store's map traverses every second element of dimension 0 (wrong) or every
  second row (right: the box's 4 rows are 2 in shared memory)."""
  src, report = _store_at(0, 0, element_strides=element_strides)
  if not ok:
    assert "tensor-traversal-stride" in rules_in_every_schedule(report), str(report)
    return
  assert report.ok, str(report)
  got = report.outputs[1].view(np.uint32).reshape(8, 16)
  want = np.zeros((8, 16), np.uint32)
  want[0, :4] = src[2, 4:8]   # (shared memory's first two rows of 4: the load's rows 0, 1)
  want[2, :4] = src[3, 4:8]
  assert (got == want).all(), got


# CTA 0's thread 0 copies 64 bytes of its shared memory into CTA {target}'s, completing on
# that CTA's mbarrier; CTA 1 waits for the bytes and stores them; every thread meets at a
# cluster barrier before it exits (the copy no longer reads CTA 0's memory).
_PEER_COPY = """
  ld.param.u64 %rd1, [k_param_0];
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  add.u32 %r10, %r3, 128;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r10], 1;
  fence.mbarrier_init.release.cluster;
  shl.b32 %r4, %r1, 2;
  add.u32 %r5, %r3, %r4;
  mad.lo.u32 %r6, %r2, 1000, %r1;
  st.shared.u32 [%r5], %r6;
  fence.proxy.async.shared::cta;
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
  setp.eq.u32 %p3, %r2, 1;
  and.pred %p4, %p1, %p3;
  @%p4 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r10], 64;
  setp.eq.u32 %p5, %r2, 0;
  and.pred %p6, %p1, %p5;
  mapa.shared::cluster.u32 %r11, %r3, {target};
  mapa.shared::cluster.u32 %r12, %r10, {target};
  @%p6 cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r11], [%r3], 64, [%r12];
  @!%p3 bra MEET;
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r10], 0;
  @!%p2 bra WAIT;
  ld.shared.u32 %r7, [%r5];
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  st.global.u32 [%rd4], %r7;
MEET:
  barrier.cluster.arrive.release.aligned;
  barrier.cluster.wait.acquire.aligned;
"""


@pytest.mark.parametrize("target", [0, 1])
def test_a_shared_to_cluster_bulk_copy_into_the_own_cta_is_reported(target):
  report = check_ptx(kernel(_PEER_COPY.format(target=target)), [np.zeros(16, np.uint32)],
                     smem_bytes=256, block=(16, 1, 1), cluster=(2, 1, 1),
                     schedules=SCHEDULES)
  if target == 0:
    assert "bulk-s2s-peer" in rules_in_every_schedule(report), str(report)
    return
  assert report.ok, str(report)
  assert report.outputs[0].view(np.uint32).tolist() == list(range(16))


_PREFETCH = """
  ld.param.u64 %rd1, [k_param_0];
  add.s64 %rd2, %rd1, {offset};
  cp.async.bulk.prefetch.L2.global [%rd2], 32;
"""


@pytest.mark.parametrize("offset, ok", [(8, False), (16, True)])
def test_a_bulk_prefetch_of_a_misaligned_address_is_reported(offset, ok):
  report = check_ptx(kernel(_PREFETCH.format(offset=offset)), [np.zeros(64, np.uint8)],
                     smem_bytes=16, block=(32, 1, 1), schedules=SCHEDULES)
  if ok:
    assert report.ok, str(report)
  else:
    assert "bulk-align" in rules_in_every_schedule(report), str(report)
