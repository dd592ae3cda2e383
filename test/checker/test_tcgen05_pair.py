"""The CTA pair of ``.cta_group::2`` in hand-written sm_100a PTX (check/families/tcgen05/
mma.py, commit.py, pair.py; check/families/tma/ for the TMA loads' ``.cta_group``).

The MMA kernel: a cluster of two CTAs of 128 threads.  Warp 0 of each allocates 128
columns with ``tcgen05.alloc.cta_group::2``; every thread copies its CTA's image into
shared memory (the CTA's 128 rows of A and its half of B's columns, both K-major with
the 128-byte swizzle, ptx_harness.place_rows' placement), fences the proxy and meets the other
CTA at the cluster barrier.  Thread 0 of the even CTA issues four K = 16 MMAs with
``M = 256, N = 128`` in the idesc (the pair's, as jax writes them) and a commit
multicast to both CTAs (ctaMask 3); every thread waits on its own CTA's barrier, fences
and reads its CTA's D (its own 128 rows by the full N) with tcgen05.ld.  D equals
NumPy's exactly in each CTA (small integers: every sum is exact).  Each broken
neighbour is reported in every CI schedule.
"""

import numpy as np
import pytest

from mosaic_async_store.check import TensorMap, check_ptx
from mosaic_async_store.check.families.tcgen05 import pair
from mosaic_async_store.check.families.tma import bulk_rules
from mosaic_async_store.check.findings import Stop
from mosaic_async_store.check.interp import PtxKernel
from mosaic_async_store.errors import AsyncStoreError

from ptx_harness import CI_SCHEDULES, copy_loop, kernel, place_rows, rules_in_every_schedule

SCHEDULES = len(CI_SCHEDULES)
ROWS, N, K = 128, 128, 64            # per CTA: A rows; the pair's N; K of f16 (128 bytes)
A_OFF, B_OFF, SLOT, MBAR = 0, 16384, 24576, 24584
IMAGE, SMEM = 24576, 24592           # the bytes each CTA copies; its shared memory
SW128 = 1 << 62                      # jax's 128-byte swizzle code




_MMA = """
  {{
    .reg .b32 a_low, b_low;
    .reg .b64 a_desc, b_desc;
    add.u32 a_low, %r14, {step};
    add.u32 b_low, %r15, {step};
    mov.b64 a_desc, {{a_low, {high}}};
    mov.b64 b_desc, {{b_low, {high}}};
    tcgen05.mma.cta_group::2.kind::f16 [%r13], a_desc, b_desc, %r16, {enable};
  }}"""

_BODY = """
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd2, [k_param_1];
  mov.b64 %rd4, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd4;
  shr.u32 %r20, %r1, 5;
  setp.ne.u32 %p1, %r20, 0;             // not warp 0
  setp.ne.u32 %p2, %r1, 0;              // not thread 0
  setp.ne.u32 %p3, %r2, 0;              // the odd CTA
  add.u32 %r5, %r3, {mbar};
  @%p1 bra ALLOCATED;
  add.u32 %r4, %r3, {slot};
  tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%r4], 128;
  tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;
ALLOCATED:
  @%p2 bra INITED;
  mbarrier.init.shared::cta.b64 [%r5], 1;
INITED:
  mul.wide.u32 %rd9, %r2, {image};      // this CTA's image
  add.s64 %rd1, %rd1, %rd9;
""" + copy_loop("%p5") + """
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  ld.shared.b32 %r13, [%r3+{slot}];
  {issuer}
  @%p4 bra ISSUED;
  tcgen05.fence::after_thread_sync;
  and.b32 %r14, %r3, 262143;
  shr.u32 %r14, %r14, 4;
  add.u32 %r15, %r3, {b_off};
  and.b32 %r15, %r15, 262143;
  shr.u32 %r15, %r15, 4;
  mov.b32 %r16, {idesc};
{mmas}
  {{
    .reg .b16 %rs1;
    mov.b16 %rs1, 3;
    tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%r5], %rs1;
  }}
ISSUED:
  {after_issue}
  {skip_wait}
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p6, [%r5], 0;
  @!%p6 bra WAIT;
WAITED:
  tcgen05.fence::after_thread_sync;
{loads}
  tcgen05.wait::ld.sync.aligned;
  shl.b32 %r17, %r2, 7;
  add.u32 %r17, %r17, %r1;              // the row: 128 rank + tid
  mul.wide.u32 %rd7, %r17, {row_bytes};
  add.s64 %rd8, %rd2, %rd7;
{stores}
  tcgen05.fence::before_thread_sync;
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  @%p1 bra DONE;
  tcgen05.dealloc.cta_group::2.sync.aligned.b32 %r13, 128;
DONE:
"""


def idesc(m=256, n=N):
  """jax's descriptor: f32 D, f16 A and B, both K-major, the pair's M and N."""
  return 1 << 4 | (n >> 3) << 17 | (m >> 4) << 24


def _run(*, edits=None, seed=0, schedules=SCHEDULES):
  """The MMA kernel (module doc): (report, D of both CTAs from the checker, A @ B)."""
  rng = np.random.default_rng(seed)
  a = rng.integers(-3, 4, (2 * ROWS, K)).astype(np.float16)
  b = rng.integers(-3, 4, (K, N)).astype(np.float16)
  images = np.zeros((2, IMAGE), np.uint8)
  for r in range(2):   # (CTA r: A rows 128 r.., B columns N/2 r..)
    place_rows(images[r], A_OFF, a[ROWS * r:ROWS * (r + 1)])
    place_rows(images[r], B_OFF, np.ascontiguousarray(b[:, N // 2 * r:N // 2 * (r + 1)].T))
  high = SW128 >> 32 | 1024 >> 4   # (SBO 1024: 8-row groups; K-major swizzled: no LBO)
  mmas = "".join(_MMA.format(step=2 * j, high=high, enable=int(j > 0)) for j in range(4))
  vectors = ["{" + ", ".join(f"%v{32 * c + i}" for i in range(32)) + "}" for c in range(4)]
  loads = "\n".join(f"  tcgen05.ld.sync.aligned.32x32b.x32.b32 {v}, [%r13+{32 * c}];"
                    for c, v in enumerate(vectors))
  stores = "\n".join(f"  st.global.u32 [%rd8+{4 * i}], %v{i};" for i in range(N))
  fill = dict(mbar=MBAR, slot=SLOT, image=IMAGE, chunks=IMAGE // 16, b_off=B_OFF,
              idesc=idesc(), mmas=mmas, loads=loads, stores=stores, row_bytes=4 * N,
              issuer="or.pred %p4, %p2, %p3;", after_issue="", skip_wait="")
  fill.update(edits or {})
  ptx = kernel(_BODY.format(**fill), nparams=2, regs=".reg .b32 %v<128>;",
               target="sm_100a")
  out = np.zeros((2 * ROWS, N), np.float32)
  report = check_ptx(ptx, [images.reshape(-1), out], smem_bytes=SMEM, block=(128, 1, 1),
                     cluster=(2, 1, 1), schedules=schedules)
  got = None if report.outputs is None else report.outputs[1].view(np.float32).reshape(
      2 * ROWS, N)
  return report, got, a.astype(np.float64) @ b.astype(np.float64)


def test_each_cta_holds_its_rows_of_d_by_the_full_n():
  """Layout A: CTA r's tensor memory holds rows 128 r .. 128 r + 127 of A @ B, all N
  columns, though each CTA's shared memory held only half of B."""
  report, got, want = _run()
  assert report.ok, str(report)
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("edits, rule", [
    # the odd CTA overwrites one of its A rows before the commit's phase
    ({"after_issue": "setp.eq.u32 %p7, %r1, 64;\n  and.pred %p7, %p7, %p3;\n"
                     "  @%p7 st.shared.u32 [%r3+256], %r1;"}, "race"),
    # the odd CTA reads its D without waiting for the commit's phase
    ({"skip_wait": "@%p3 bra WAITED;"}, "race"),
], ids=["odd-cta-overwrites-a", "odd-cta-reads-d-unwaited"])
def test_each_broken_neighbour_is_reported_in_every_schedule(edits, rule):
  report, _, _ = _run(edits=edits)
  assert rule in rules_in_every_schedule(report), str(report)


def test_an_mma_issued_from_the_odd_cta_is_refused_by_name():
  """The ISA lets either CTA's thread issue (Table 46); where the operands lie then is
  in its figures only: refused, not guessed."""
  with pytest.raises(AsyncStoreError, match="odd CTA 1 of its pair"):
    _run(edits={"issuer": "setp.ne.u32 %p4, %r1, 0;\n  @!%p3 mov.pred %p4, 1;"},
         schedules=1)


def test_the_pairs_m128_layout_b_is_refused_by_name():
  with pytest.raises(AsyncStoreError, match="M = 128: layout B"):
    _run(edits={"idesc": idesc(m=128)}, schedules=1)


@pytest.mark.parametrize("m, n", [(64, N), (256, 120)], ids=["m64", "n-not-16"])
def test_a_shape_the_pair_has_not_is_tcgen05_mma(m, n):
  report, _, _ = _run(edits={"idesc": idesc(m=m, n=n)}, schedules=1)
  assert "tcgen05-mma" in rules_in_every_schedule(report, 1), str(report)


class _Machine:
  """What ``pair.peer`` reads of a machine: the cluster's shared memories and exits."""

  def __init__(self, ctas, exited=()):
    self.smem = [b""] * ctas
    self.exited = [c in exited for c in range(ctas)]


class _Thread:
  def __init__(self, cta):
    self.cta, self.tid = cta, 0


@pytest.mark.parametrize("machine, match", [
    (_Machine(1), "has no peer CTA"), (_Machine(2, exited=(1,)), "should not have exited")])
def test_a_peer_that_is_missing_or_exited_is_tcgen05_peer(machine, match):
  with pytest.raises(Stop) as e:
    pair.peer(machine, _Thread(0), "the MMA")
  assert e.value.finding.rule == "tcgen05-peer" and match in e.value.finding.message


def test_the_forms_of_the_pair_compile():
  ptx = kernel("\n".join(f"  {s};" for s in (
      "tcgen05.mma.cta_group::2.kind::tf32 [%r1], %rd1, %rd2, %r2, 1",
      "tcgen05.mma.cta_group::2.kind::f8f6f4 [%r1], %rd1, %rd2, %r2, 1",
      "tcgen05.mma.cta_group::2.kind::i8 [%r1], %rd1, %rd2, %r2, 1",
      "tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.b64 [%r1]")),
      target="sm_100a")
  PtxKernel(ptx)


# -- TMA loads with .cta_group ----------------------------------------------------------

# Each CTA of a pair loads a 4 x 4 box (rows 4 rank ..) of an 8 x 16 uint32 tensor into
# its own shared memory, signalling the barrier at the same offset in CTA {bar_rank}
# (mapa: jax passes the leader's); CTA 0's thread 0 expects both boxes' bytes and waits,
# the cluster meets, and each CTA's 16 threads write their box out.
_TMA = """.version 8.6
.target sm_100a
.address_size 64
.visible .entry k(
  .param .align 64 .b8 k_param_0[128],
  .param .u64 k_param_1
)
{{
  .reg .pred %p<8>;
  .reg .b32 %r<32>;
  .reg .b64 %rd<16>;
  .shared .align 128 .b8 __dynamic_shmem__0;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %cluster_ctarank;
  mov.b64 %rd2, __dynamic_shmem__0;
  cvt.u32.u64 %r3, %rd2;
  add.s32 %r10, %r3, 128;
  mov.b64 %rd3, k_param_0;
  cvta.param.u64 %rd4, %rd3;
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r2, 0;
  and.pred %p3, %p1, %p2;
  @%p3 mbarrier.init.shared::cta.b64 [%r10], 1;
  @%p3 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r10], 128;
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  mapa.shared::cluster.u32 %r11, %r10, {bar_rank};
  mov.u32 %r8, 0;
  shl.b32 %r9, %r2, 2;
  @%p1 cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes.cta_group::{group} [%r3], [%rd4, {{%r8, %r9}}], [%r11];
  @!%p3 bra WAITED;
LOOP:
  mbarrier.try_wait.parity.shared::cta.b64 %p4, [%r10], 0;
  @!%p4 bra LOOP;
WAITED:
  barrier.cluster.arrive.aligned;
  barrier.cluster.wait.aligned;
  setp.lt.u32 %p5, %r1, 16;
  shl.b32 %r12, %r1, 2;
  add.s32 %r13, %r3, %r12;
  @%p5 ld.shared.u32 %r14, [%r13];
  ld.param.u64 %rd1, [k_param_1];
  shl.b32 %r15, %r2, 4;
  add.s32 %r15, %r15, %r1;
  mul.wide.u32 %rd6, %r15, 4;
  add.s64 %rd7, %rd1, %rd6;
  @%p5 st.global.u32 [%rd7], %r14;
  ret;
}}
"""


def _tma(group, bar_rank=0):
  x = np.arange(128, dtype=np.uint32).reshape(8, 16) + 1
  out = np.zeros(32, np.uint32)
  report = check_ptx(_TMA.format(group=group, bar_rank=bar_rank),
                     [TensorMap.of(x, box=(4, 4)), out], smem_bytes=256, block=(32, 1, 1),
                     cluster=(2, 1, 1), schedules=SCHEDULES)
  return report, x


def test_a_cta_group_2_load_completes_on_the_peers_barrier():
  """9.7.9.25.5.1: with .cta_group::2 "the mbarrier object mbar can be in shared memory
  of either the same CTA as the shared memory destination dstMem or in its peer-CTA":
  CTA 1's box counts off CTA 0's barrier, whose phase completes with both."""
  report, x = _tma(2)
  assert report.ok, str(report)
  got = report.outputs[1].view(np.uint32).reshape(2, 4, 4)
  np.testing.assert_array_equal(got, [x[0:4, 0:4], x[4:8, 0:4]])


def test_a_cta_group_1_load_signalling_the_peers_barrier_is_bulk_mbar_dst():
  """With .cta_group::1 "the mbarrier object mbar ... must be in the shared memory of the
  same CTA as the shared memory destination dstMem"."""
  report, _ = _tma(1)
  assert "bulk-mbar-dst" in rules_in_every_schedule(report), str(report)


def test_the_mbar_rule_allows_the_peer_for_cta_group_2_only():
  assert bulk_rules.mbar_with_dst(1, 0, cta_group=2) is None
  assert "same CTA" in bulk_rules.mbar_with_dst(1, 0, cta_group=1)
  assert "peer CTA 3" in bulk_rules.mbar_with_dst(2, 0, cta_group=2)   # (not its pair)

