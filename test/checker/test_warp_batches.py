"""The checker's batched paths are exact: what the warp forms of loads and stores
(check/warp_memory.py), of mbarrier arrivals and waits (check/warp_mbarrier.py) and the
landing of many asynchronous stores at once (``asyncops.land_many``) check and record in
one go (check/shadow_runs.py) gives the verdict that the lanes give one by one.

Each test generates kernels whose lanes access shared and global memory (scalars of
1 to 8 bytes, .v2 / .v4 vectors, st.async) in patterns (``(tid * a + b) & mask``: lanes
on distinct words in and out of order, strided, two lanes on one word, every lane on
one word), or arrive on and wait for mbarriers, with or without synchronisation
between the accesses, and runs each twice under every CI schedule: as the checker
runs it, and with every warp form off and every asynchronous store landing alone.  The
two verdicts, the output bytes and the thread-instructions executed, or the finding
(rule, CTA, thread and message), must be equal.
"""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mosaic_async_store.check import PtxKernel, asyncops
from ptx_harness import SCHEDULES, finding, kernel, launch, outputs

# Bytes per lane -> (the access's type, the registers it stores / loads), and the
# shift that scales a word index to bytes.
_SIZES = {1: ("u8", "{r}"), 2: ("u16", "{r}"), 4: ("u32", "{r}"),
          8: ("v2.u32", "{{{r}, %r10}}"), 16: ("v4.u32", "{{{r}, %r10, %r11, %r12}}")}
_SHIFT = {1: 0, 2: 1, 4: 2, 8: 3, 16: 4}


def _place(dest, src, a, b, size, base="%r2"):
  """PTX setting ``dest`` to ``base`` + ((``src`` * a + b) & 63) * size."""
  return (f"  mul.lo.u32 {dest}, {src}, {a};\n  add.u32 {dest}, {dest}, {b};\n"
          f"  and.b32 {dest}, {dest}, 63;\n  shl.b32 {dest}, {dest}, {_SHIFT[size]};\n"
          f"  add.u32 {dest}, {dest}, {base};\n")


def _verdict(ptx, schedule, batched, **how):
  """("bytes", outputs, thread-instructions executed) or ("finding", rule, CTA, thread,
  message) of one launch (its first finding; ``how``: the launch's arguments)."""
  kern = PtxKernel(ptx)
  land_together = asyncops._land_together
  if not batched:
    kern.program.vcode[:] = [None] * len(kern.program.vcode)
    asyncops._land_together = lambda *args: False
  try:
    outs, found = launch(kern, schedule=schedule, **how)
  finally:
    asyncops._land_together = land_together
  if found:
    f = found[0]
    return ("finding", f.rule, f.cta, f.thread, f.explained)
  return ("bytes", [o.tobytes() for o in outs], kern.executed)


def _same_verdicts(ptx, **how):
  """The verdicts of every CI schedule (each the same with and without the batched
  paths)."""
  verdicts = []
  for schedule in SCHEDULES:
    batched = _verdict(ptx, schedule, True, **how)
    assert batched == _verdict(ptx, schedule, False, **how), (schedule, ptx)
    verdicts.append(batched)
  return verdicts


_PATTERN = st.tuples(st.sampled_from([0, 1, 2, 3, 5, 31, 32, 33, 63]), st.integers(0, 63))
_SYNC = st.sampled_from(["", "bar.warp.sync -1;", "bar.sync 0;"])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(size=st.sampled_from(sorted(_SIZES)), store=_PATTERN, load=_PATTERN,
       again=_PATTERN, out=_PATTERN, first=_SYNC, second=_SYNC)
def test_shared_and_global_accesses_of_a_warp(size, store, load, again, out, first, second):
  """Two warps store into SMEM (scalars of 1, 2 or 4 bytes, or .v2 / .v4 vectors), load,
  store again (a write after the reads) and load and store global memory, each by its
  pattern."""
  t, regs = _SIZES[size]
  body = ("  ld.param.u64 %rd1, [k_param_0];\n  mov.u32 %r2, __dynamic_shmem__0;\n"
          "  mul.lo.u32 %r7, %r1, %r1;\n  add.u32 %r10, %r7, 1;\n  add.u32 %r11, %r7, 2;\n"
          "  add.u32 %r12, %r7, 3;\n"   # (values: tid * tid + i, any bits)
          + _place("%r3", "%r1", *store, size)
          + f"  st.shared.{t} [%r3], {regs.format(r='%r7')};\n  {first}\n"
          + _place("%r4", "%r1", *load, size)
          + f"  ld.shared.{t} {regs.format(r='%r5')}, [%r4];\n  {second}\n"
          + _place("%r6", "%r1", *again, size)
          + f"  st.shared.{t} [%r6], {regs.format(r='%r5')};\n"
          + _place("%r8", "%r1", *out, 4, base="0")
          + "  cvt.u64.u32 %rd2, %r8;\n  add.s64 %rd3, %rd1, %rd2;\n"
          + "  ld.global.u32 %r9, [%rd3];\n  add.u32 %r9, %r9, %r5;\n"
          + "  st.global.u32 [%rd3], %r9;\n")
  _same_verdicts(kernel(body), buffers=[np.arange(64, dtype=np.uint32)], cluster=1,
                 smem_bytes=64 * size, block=64, smem_init=[bytes(64 * size)])


_GLOBAL_SIZES = {1: "u8", 2: "u16", 4: "u32", 8: "u64"}
# (a, b): lane t at element (t * a + b) & 255, of 256: a warp's lanes in a progression
# (a = 1 .. 4: adjacent or strided, the other warp's elements or its own again), on one
# element, interleaved, or descending
_GLOBAL_PATTERN = st.tuples(st.sampled_from([1, 2, 3, 4, 0, 33, 255]),
                            st.sampled_from([0, 1, 8, 32, 64, 96]))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(size=st.sampled_from(sorted(_GLOBAL_SIZES)), first=_GLOBAL_PATTERN,
       second=_GLOBAL_PATTERN, ops=st.sampled_from(["ld ld", "st ld", "ld st", "st st"]),
       sync=_SYNC)
def test_first_global_accesses_of_a_warp(size, first, second, ops, sync):
  """Two warps access global memory twice, each time at their pattern's element (1 to 8
  bytes): a warp's first accesses to a page are recorded at once, in one pass per byte
  of an element where its lanes step through memory (``warp_memory._global_first``),
  and must see the bytes that either warp touched before, with or without a barrier
  between."""
  t = _GLOBAL_SIZES[size]
  body = "  ld.param.u64 %rd1, [k_param_0];\n  cvt.u64.u32 %rd9, %r1;\n"
  for (a, b), op in zip((first, second), ops.split()):
    body += (f"  mad.lo.u32 %r3, %r1, {a}, {b};\n  and.b32 %r3, %r3, 255;\n"
             f"  mul.wide.u32 %rd2, %r3, {size};\n  add.s64 %rd3, %rd1, %rd2;\n" +
             (f"  ld.global.{t} %rd4, [%rd3];\n" if op == "ld" else
              f"  st.global.{t} [%rd3], %rd9;\n") + f"  {sync}\n")
  verdicts = _same_verdicts(kernel(body), buffers=[np.arange(256 * size, dtype=np.uint8)],
                            cluster=1, smem_bytes=16, block=64, smem_init=[bytes(16)])
  _GLOBAL_KINDS.update(v[0] if v[0] == "bytes" else v[1] for v in verdicts)


_GLOBAL_KINDS = set()


def test_first_global_accesses_meet_races_and_clean_runs():
  """The generated kernels above include racy ones and clean ones (else they would
  not test the batched path's checks)."""
  test_first_global_accesses_of_a_warp()
  assert {"bytes", "race"} <= _GLOBAL_KINDS, _GLOBAL_KINDS


# Thread 0 makes an mbarrier at 256 expecting COUNT arrivals; after a cluster barrier
# every thread stores its tid at its word of its CTA's SMEM, the threads below LANES
# arrive on the mbarrier by ARRIVE and COMPLETE (their CTA's, or the peer's: a lane's
# first access to the peer goes lane by lane, its second may go at once), the others do
# not; every thread waits for phase 0 (WAIT: blocking, or a poll), twice (the second
# wait sees at once what the first observed),
# then copies its neighbour's word (its own where the arrivals are the peer's, which do
# not order the neighbour's store) and the state the arrive returned to global memory.
# LATE: the arriving threads store their word again after arriving (a race with the
# neighbour's read, which the arrive does not order); END: a cluster barrier before the
# exit, or none (the exit rule then judges the peer's arrivals).
_ARRIVE = """
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r2, __dynamic_shmem__0;
  mov.u32 %r4, %cluster_ctarank;
  add.u32 %r3, %r2, 256;
  shl.b32 %r5, %r1, 2;
  add.u32 %r6, %r2, %r5;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r3], {COUNT};
  fence.mbarrier_init.release.cluster;
  barrier.cluster.arrive.release;
  barrier.cluster.wait.acquire;
  st.shared.u32 [%r6], %r1;
  xor.b32 %r7, %r4, {REMOTE};
  mapa.shared::cluster.u32 %r8, %r3, %r7;
  mov.u64 %rd5, 7;
  setp.lt.u32 %p2, %r1, {LANES};
  {FENCE}
  @%p2 {ARRIVE}
  @%p2 {COMPLETE}
  {LATE}
WAIT:
  mbarrier.{WAIT}.parity.shared::cta.b64 %p3, [%r3], 0;
  @!%p3 bra WAIT;
AGAIN:
  mbarrier.{WAIT}.parity.shared::cta.b64 %p3, [%r3], 0;
  @!%p3 bra AGAIN;
  add.u32 %r9, %r1, {NEIGHBOUR};
  and.b32 %r9, %r9, 63;
  shl.b32 %r9, %r9, 2;
  add.u32 %r9, %r9, %r2;
  ld.shared.u32 %r10, [%r9];
  mad.lo.u32 %r11, %r4, 64, %r1;
  mul.wide.u32 %rd2, %r11, 16;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r10;
  st.global.u64 [%rd3+8], %rd5;
  {END}
"""
_ARRIVES = {
    "arrive": ("mbarrier.arrive.shared::cta.b64 %rd5, [%r3];", ""),
    "arrive, cluster scope": ("mbarrier.arrive.release.cluster.shared::cta.b64 %rd5, [%r3];", ""),
    "expect_tx": ("mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r3], 4;",
                  "mbarrier.complete_tx.shared::cta.b64 [%r3], 4;"),
    "expect_tx, never completed": ("mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r3], 4;",
                                   ""),
    "count 2": ("mbarrier.arrive.shared::cta.b64 %rd5, [%r3], 2;", ""),
    "noComplete": ("mbarrier.arrive.noComplete.shared::cta.b64 %rd5, [%r3], 1;", ""),
    "relaxed": ("mbarrier.arrive.relaxed.cta.shared::cta.b64 %rd5, [%r3];", ""),
    "into the peer, twice": ("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r8];",
                             "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r8];"),
}


_END = "barrier.cluster.arrive.release;\n  barrier.cluster.wait.acquire;"


@settings(max_examples=120, deadline=None, derandomize=True)
@example("arrive", 64, 64, 1, "", "try_wait", False, _END)   # (the counts met: passes)
@example("expect_tx", 64, 64, 2, "", "test_wait", False, "")
@example("into the peer, twice", 128, 64, 2, "", "try_wait", False, "")
@example("into the peer, twice", 64, 64, 2, "", "try_wait", False, "")   # (exit: phase 1)
@given(arrive=st.sampled_from(sorted(_ARRIVES)), count=st.sampled_from([16, 32, 40, 64, 96]),
       lanes=st.sampled_from([64, 48, 32, 8]), cluster=st.sampled_from([1, 2]),
       fence=st.sampled_from(["", "fence.release.cta;"]),
       wait=st.sampled_from(["try_wait", "test_wait"]), late=st.booleans(),
       end=st.sampled_from([_END, ""]))
def test_arrivals_of_a_warp(arrive, count, lanes, cluster, fence, wait, late, end):
  """Two warps (per CTA) arrive on an mbarrier: all lanes or some (a guard), with every
  arrive form the warp form runs and some it hands back lane by lane (``.noComplete``, a
  relaxed arrive after a fence, the peer CTA's barrier), against arrival counts that
  the arrivals meet, exceed (an overflow) or miss (a hang, or an early read)."""
  op, complete = _ARRIVES[arrive]
  if cluster == 1 and arrive.startswith("into the peer"):
    return
  body = (_ARRIVE.replace("{COUNT}", str(count)).replace("{LANES}", str(lanes))
          .replace("{ARRIVE}", op).replace("{COMPLETE}", complete or "add.u32 %r12, %r1, 1;")
          .replace("{FENCE}", fence).replace("{REMOTE}", "1" if cluster == 2 else "0")
          .replace("{WAIT}", wait).replace("{END}", end)
          .replace("{NEIGHBOUR}", "0" if arrive.startswith("into the peer") else "1")
          .replace("{LATE}", "@%p2 st.shared.u32 [%r6], %r1;" if late else ""))
  verdicts = _same_verdicts(kernel(body), buffers=[np.zeros(64 * 4 * cluster, np.uint32)],
                            cluster=cluster, smem_bytes=272, block=64,
                            smem_init=[bytes(272)] * cluster)
  _ARRIVE_KINDS.update(v[0] if v[0] == "bytes" else v[1] for v in verdicts)


_ARRIVE_KINDS = set()


def test_arrivals_meet_findings_and_clean_runs():
  """The generated kernels above pass and break in several ways (else they would not
  test the warp form's hand-backs)."""
  test_arrivals_of_a_warp()
  assert {"bytes", "hang", "race", "exit", "arrival-overflow",
          "arrive-nocomplete"} <= _ARRIVE_KINDS, \
      _ARRIVE_KINDS


# Thread 0 of each CTA makes an mbarrier at 256 expecting one arrival, arrives on it
# expecting TX bytes, then (after the cluster barrier) every lane stores its tid into
# the peer CTA's SMEM at its pattern's word with st.async on the peer's mbarrier,
# waits for its own mbarrier's phase 0, reads its own SMEM at another pattern's word
# and writes it to global memory; a cluster barrier before the exit.
_ASYNC = """
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r2, __dynamic_shmem__0;
  add.u32 %r3, %r2, 256;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
  @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd4, [%r3], {TX};
  fence.mbarrier_init.release.cluster;
  barrier.cluster.arrive.release;
  barrier.cluster.wait.acquire;
  mov.u32 %r10, %cluster_ctarank;
  xor.b32 %r11, %r10, 1;
  mapa.shared::cluster.u32 %r12, %r2, %r11;
  mapa.shared::cluster.u32 %r13, %r3, %r11;
{STORE}
  st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r4], %r1, [%r13];
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r3], 0;
  @!%p3 bra WAIT;
{LOAD}
  ld.shared.u32 %r6, [%r5];
  mad.lo.u32 %r7, %r10, 64, %r1;
  shl.b32 %r7, %r7, 2;
  cvt.u64.u32 %rd2, %r7;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r6;
  barrier.cluster.arrive.release;
  barrier.cluster.wait.acquire;
"""


@settings(max_examples=25, deadline=None, derandomize=True)
@given(store=_PATTERN, load=_PATTERN, missing=st.sampled_from([0, 0, 4, 128, -4]))
def test_asynchronous_stores_landing_together(store, load, missing):
  """Two CTAs of 64 threads store into each other with st.async; the mbarrier expects
  all 256 bytes, or ``missing`` fewer (its phase completes while stores are still in
  flight: an early read) or more (a hang)."""
  body = (_ASYNC.replace("{TX}", str(256 - missing))
          .replace("{STORE}", _place("%r4", "%r1", *store, 4, base="%r12"))
          .replace("{LOAD}", _place("%r5", "%r1", *load, 4)))
  _same_verdicts(kernel(body), buffers=[np.zeros(128, np.uint32)], cluster=2,
                 smem_bytes=264, block=64, smem_init=[bytes(264)] * 2)


def test_stores_of_one_width_in_two_shapes_land_alike():
  """Each lane stores 8 bytes twice into the peer, as two 4-byte elements
  (``.v2.b32 {tid, rank}`` at byte 8 * tid) and as one 8-byte element (``.b64``,
  tid + 1 in its high half, at byte 512 + 8 * tid): in schedule 0 the two
  instructions' stores are in flight together, and each keeps its own layout.  Lane t
  copies the high half of its own CTA's 8-byte element t out: t + 1."""
  body = _ASYNC.replace("{TX}", "1024").replace("{STORE}", """
  mul.lo.u32 %r4, %r1, 8;
  add.u32 %r4, %r4, %r12;
  mul.wide.u32 %rd5, %r1, 0x100000001;
  add.u64 %rd5, %rd5, 0x100000000;
  st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32 [%r4], {%r1, %r10}, [%r13];
  add.u32 %r4, %r4, 512;""").replace("{LOAD}", """
  mad.lo.u32 %r5, %r1, 8, 516;
  add.u32 %r5, %r5, %r2;""")
  body = body.replace(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r4], %r1, [%r13];",
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%r4], %rd5, [%r13];"
  ).replace("add.u32 %r3, %r2, 256;", "add.u32 %r3, %r2, 1024;")   # (the mbarrier)
  verdicts = _same_verdicts(kernel(body), buffers=[np.zeros(128, np.uint32)], cluster=2,
                            smem_bytes=1032, block=64, smem_init=[bytes(1032)] * 2)
  for verdict in verdicts:
    assert verdict[0] == "bytes", verdict
    out = np.frombuffer(verdict[1][0], np.uint32)
    assert (out == np.tile(np.arange(1, 65), 2)).all(), out


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_phase_completed_by_part_of_a_batch_splits_it(schedule):
  """The mbarrier expects 128 of the 256 bytes: its phase completes when half of the
  stores have landed, so a waiting thread may read bytes still in flight; every
  schedule reports the kernel (an early read, or a race with the landing store)."""
  body = (_ASYNC.replace("{TX}", "128")
          .replace("{STORE}", _place("%r4", "%r1", 1, 0, 4, base="%r12"))
          .replace("{LOAD}", _place("%r5", "%r1", 1, 0, 4)))
  err = finding(kernel(body), [np.zeros(128, np.uint32)], cluster=2, smem_bytes=264,
                block=64, schedule=schedule, smem_init=[bytes(264)] * 2)
  assert err.rule in ("early-read", "race"), err


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_stores_that_fill_the_expected_bytes_pass(schedule):
  body = (_ASYNC.replace("{TX}", "256")
          .replace("{STORE}", _place("%r4", "%r1", 1, 0, 4, base="%r12"))
          .replace("{LOAD}", _place("%r5", "%r1", 1, 0, 4)))
  [out] = outputs(kernel(body), [np.zeros(128, np.uint32)], cluster=2, smem_bytes=264,
                  block=64, schedule=schedule, smem_init=[bytes(264)] * 2)
  assert (out.view(np.uint32) == np.tile(np.arange(64), 2)).all()
