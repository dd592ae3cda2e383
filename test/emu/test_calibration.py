"""Calibration of the PTX interpreter and its protocol checker on known kernels.

Upstream JAX's cluster-store GPU tests (``upstream_kernels``: test_cluster_ref_write,
test_cluster_red_async, jax-v0.10.2) pass on sm_90 hardware.  Their real PTX runs here
under every schedule, and the checker's verdict is compared with what the PTX ISA and
the hardware say:

  * test_cluster_ref_write is clean: st.async into the peer, the peer's barrier
    announced with ``arrive.expect_tx.release.cluster``, data made visible by
    complete-tx.  The interpreter must leave exactly upstream's expected bytes and
    find nothing.
  * test_cluster_red_async passes on hardware but is racy by the ISA: the identity
    fill (plain ``st.shared`` by all 128 threads) is published to the peer only by
    the ClusterBarrier's arrive, which (a) one thread per warpgroup performs with no
    CTA barrier before it (upstream: "each warpgroup arrives once"), and (b) is
    ``mbarrier.arrive.shared::cluster.b64`` (default .release.cta) paired with
    ``mbarrier.try_wait.parity.shared.b64`` (default .acquire.cta) in another CTA,
    which is not morally strong.  So the peer's red.async may land before, and be
    overwritten by, the fill.  Hardware gets away with it because the fill is issued
    long before a cross-CTA arrive/wait round trip completes.  The checker must say
    "race" (or "early-read" where the schedule lets the race happen); with both
    causes repaired in the PTX it must pass and leave upstream's expected bytes.
  * mutations of known kernels must get the verdict the hardware would give.
"""

import functools
import re

import numpy as np
import pytest

from mosaic_async_store.demo.config import StoreConfig
from kernel_text import kernel_text

import upstream_kernels as upstream
from mosaic_async_store.check.interp import Memref
from mosaic_async_store.check.memory import SCHEDULES
from demo_kernels import full_kernel_args, launch_options
from ptx_harness import CLUSTER_BARRIER_WARNINGS, launch, outputs
from test_ptx_execution import run_ptx

schedules = pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"sched{s}")
RED_IDS = [f"{op}-{'signed' if s else 'unsigned'}" for op, s in upstream.REDUCTIONS]
# Upstream's wait loops never give up; a few timed-out polls with nothing else able to
# move are enough to know that a barrier can never complete.
HANG_POLLS = 8


def _upstream_launch(kernel, schedule, **kwargs):
  """An upstream kernel's arguments and ``PtxKernel.launch``'s keywords for it."""
  return [Memref(a) for a in kernel.args], dict(
      cluster=kernel.cluster, smem_bytes=kernel.smem_bytes, block=kernel.block,
      schedule=schedule, **kwargs)


def run_upstream(kernel, ptx=None, schedule=None, **kwargs):
  """Runs an upstream kernel (or a mutated ``ptx`` of it); returns its dst array.  Fails
  the test where the run broke a rule (``upstream_findings``)."""
  args, options = _upstream_launch(kernel, schedule, **kwargs)
  return kernel.result(outputs(ptx or kernel.ptx, args, **options))


def upstream_findings(kernel, ptx=None, schedule=None, **kwargs):
  """The findings of a run of an upstream kernel (or of a mutated ``ptx`` of it)."""
  args, options = _upstream_launch(kernel, schedule, **kwargs)
  return launch(ptx or kernel.ptx, args, **options).findings


def replace(ptx, pattern, repl, count=1):
  """``re.sub`` that first asserts ``pattern`` occurs exactly ``count`` times."""
  found = len(re.findall(pattern, ptx))
  assert found == count, f"{pattern!r} occurs {found} times, not {count}"
  return re.sub(pattern, repl, ptx)


def verdict(found):
  """What a run with the findings ``found`` ends with: "pass" (no error), "deadlock"
  (its first error a barrier that can never complete: a hang, "deadlock ..."), or its
  first error's rule; and the message.  A warning decides no verdict (upstream's
  ClusterBarrier arrive, ``CLUSTER_BARRIER_WARNINGS``, comes before the race in
  red_async; ``test_red_async_with_one_fix_only_still_races`` asserts it exactly)."""
  errors = [f for f in found if f.severity == "error"]
  if not errors:
    return "pass", ""
  first = errors[0]
  if first.message.startswith("deadlock"):
    return "deadlock", first.explained
  return first.rule, first.explained


def expect_verdict(verdicts, found):
  got, detail = verdict(found)
  assert got in verdicts, f"{got} (wanted one of {sorted(verdicts)}): {detail}"


# -- the kernels as upstream builds them --------------------------------------------


def test_upstream_kernels_wait_as_upstream_does():
  """What the calibration rests on: upstream's waits are the default-scope
  ``mbarrier.try_wait.parity.shared.b64`` (.acquire.cta), in an unbounded loop."""
  for kernel in upstream.all_kernels():
    loops = re.findall(r"@P1 bra\.uni DONE;\s*bra\.uni\s+LAB_WAIT;", kernel.ptx)
    assert len(loops) == len(kernel.waits), "a wait that is not a retry-forever loop"
    assert kernel.waits and all(
        re.fullmatch(r"mbarrier\.try_wait\.parity\.shared\.b64 P1, \[%r\d+\], %r\d+, %r\d+;",
                     w) for w in kernel.waits), (kernel.name, kernel.waits)
    assert kernel.arg_names == ("src", "dst")
    assert kernel.smem_bytes == 8192 + 8 * (1 if kernel.name == "cluster_ref_write" else 2)


@schedules
def test_ref_write_lands_upstream_expected_bytes(schedule):
  kernel = upstream.cluster_ref_write()
  np.testing.assert_array_equal(run_upstream(kernel, schedule=schedule),
                                kernel.expected["dst"])


@schedules
@pytest.mark.parametrize("op,signed", upstream.REDUCTIONS, ids=RED_IDS)
def test_red_async_as_upstream_builds_it_is_racy(op, signed, schedule):
  kernel = upstream.cluster_red_async(op, signed)
  found = upstream_findings(kernel, schedule=schedule)
  expect_verdict({"race", "early-read"}, found)
  assert {f.rule for f in found if f.severity == "warning"} == CLUSTER_BARRIER_WARNINGS


def with_cluster_sync_fixed(ptx, *, cta_barrier=True, cluster_scope=True):
  """Repairs red_async's ClusterBarrier in the PTX: a ``bar.sync 0`` before the first
  collective arrive (every thread's fill is then ordered before it), and cluster
  scope on the arrives (.release.cluster) and the waits (.acquire.cluster)."""
  if cta_barrier:
    arrives = [m.start() for m in re.finditer(r"\{\s*\.reg \.b32 mapped_addr;", ptx)]
    assert len(arrives) == 2, arrives   # after the fill, and before the read-back
    ptx = ptx[:arrives[0]] + "bar.sync 0;\n\t" + ptx[arrives[0]:]
  if cluster_scope:
    ptx = replace(ptx, r"mbarrier\.arrive\.shared::cluster\.b64",
                  "mbarrier.arrive.release.cluster.shared::cluster.b64", count=2)
    ptx = replace(ptx, r"mbarrier\.try_wait\.parity\.shared\.b64",
                  "mbarrier.try_wait.parity.acquire.cluster.shared.b64", count=3)
  return ptx


@schedules
@pytest.mark.parametrize("op,signed", upstream.REDUCTIONS, ids=RED_IDS)
def test_red_async_with_cluster_sync_fixed_lands_upstream_expected_bytes(op, signed, schedule):
  kernel = upstream.cluster_red_async(op, signed)
  got = run_upstream(kernel, with_cluster_sync_fixed(kernel.ptx), schedule=schedule)
  np.testing.assert_array_equal(got, kernel.expected["dst"])


@schedules
@pytest.mark.parametrize("fix", [dict(cta_barrier=True, cluster_scope=False),
                                 dict(cta_barrier=False, cluster_scope=True)],
                         ids=["cta_barrier_only", "cluster_scope_only"])
def test_red_async_with_one_fix_only_still_races(fix, schedule):
  """Each cause alone is reported: without the CTA barrier the fill races; with it, the
  ClusterBarrier's arrives at .release.cta on the peer are the warning peer-arrive-cta
  (by the letter not morally strong with the peer's waits; an error with strict)."""
  kernel = upstream.cluster_red_async("add", True)
  ptx = with_cluster_sync_fixed(kernel.ptx, **fix)
  found = upstream_findings(kernel, ptx, schedule=schedule)
  if fix["cluster_scope"]:
    expect_verdict({"race", "early-read"}, found)
  else:
    assert all(f.severity == "warning" for f in found) and \
        {f.rule for f in found} == CLUSTER_BARRIER_WARNINGS, [f.explained for f in found]


# -- mutations of test_cluster_ref_write -------------------------------------------
#
# Every thread of each CTA announces 64 bytes (8192 / 128) on the peer's barrier and
# delivers them as eight 8-byte st.async.  Thread 0 of each CTA is the one that
# initialised the barrier (predicate: elected lane of warp 0); the mutations make it
# announce differently, so each barrier is off by exactly the stated amount.


def _ref_write_sites(ptx):
  """(init predicate, init count register, announce register) of ref_write's PTX."""
  (pred, count), = re.findall(r"@(%p\d+) mbarrier\.init\.shared\.b64 \[%r\d+\], (%r\d+);", ptx)
  (tx,) = re.findall(r"mbarrier\.arrive\.expect_tx\.release\.cluster\.shared::cluster\.b64"
                     r" _, \[%rd?\d+\], (%r\d+);", ptx)
  writes = re.findall(rf"^\s*[\w.]+\s+{re.escape(pred)},", ptx, re.M)
  assert len(writes) == 1, f"{pred} is written {len(writes)} times: not one thread"
  return pred, count, tx


def thread0_announces(ptx, nbytes):
  pred, _, tx = _ref_write_sites(ptx)
  return replace(ptx, rf"mov\.b32\s+{re.escape(tx)}, 64;",
                 f"selp.b32 {tx}, {nbytes}, 64, {pred};")


@schedules
def test_tx_one_byte_short_hangs(schedule):
  """The barrier expects 8193 bytes, 8192 arrive: the tx-count never returns to zero,
  the phase never completes.  Hardware: the consumer's try_wait loop spins forever."""
  kernel = upstream.cluster_ref_write()
  expect_verdict({"deadlock"}, upstream_findings(kernel, thread0_announces(kernel.ptx, 65),
                                                 schedule=schedule, max_timeouts=HANG_POLLS))


@schedules
def test_tx_one_byte_too_many_delivered_hangs(schedule):
  """The barrier expects 8191 bytes, 8192 arrive.  The tx-count goes negative (legal:
  complete-tx may precede expect-tx) and ends at -1; since every complete-tx is 8
  bytes the count is odd whenever no arrival is pending, so it never passes through
  zero and the phase never completes.  Hardware: a hang, as for one byte short."""
  kernel = upstream.cluster_ref_write()
  expect_verdict({"deadlock"}, upstream_findings(kernel, thread0_announces(kernel.ptx, 63),
                                                 schedule=schedule, max_timeouts=HANG_POLLS))


@schedules
def test_tx_one_piece_too_many_delivered_completes_early(schedule):
  """The barrier expects 8184 bytes, one 8-byte piece more arrives.  The count can
  reach zero with that piece still in flight: the phase completes early and the
  consumer reads bytes that have not landed (their complete-tx then hits the next
  phase).  Hardware: stale bytes, or a hang when every piece lands before the last
  arrival (the count then sits at -8).  The checker: early-read, or the hang."""
  kernel = upstream.cluster_ref_write()
  ptx = thread0_announces(kernel.ptx, 56)
  expect_verdict({"early-read", "race", "deadlock"},
                 upstream_findings(kernel, ptx, schedule=schedule, max_timeouts=HANG_POLLS))


def one_arrival_fewer_expected(ptx):
  _, count, _ = _ref_write_sites(ptx)
  return replace(ptx, rf"mov\.b32\s+{re.escape(count)}, 128;", f"mov.b32 {count}, 127;")


def thread0_arrives_twice(ptx):
  pred, _, _ = _ref_write_sites(ptx)
  return replace(ptx, r"(mbarrier\.arrive\.expect_tx\.release\.cluster\.shared::cluster\.b64"
                      r" _, \[(%rd?\d+)\], %r\d+;)",
                 rf"\1\n\t@{pred} mbarrier.arrive.release.cluster.shared::cluster.b64 _, [\2];")


@schedules
@pytest.mark.parametrize("mutate", [one_arrival_fewer_expected, thread0_arrives_twice],
                         ids=lambda f: f.__name__)
def test_extra_arrival_is_caught(mutate, schedule):
  """One arrival more than the phase expects: the phase completes as soon as the
  tx-count allows, before the last thread's stores are tracked by it (their bytes
  then count towards the next phase).  Hardware: the consumer may read the last
  thread's bytes before they land.  The checker: early-read, a race, or (where the
  extra arrival finds no pending arrival left) arrival-overflow."""
  kernel = upstream.cluster_ref_write()
  expect_verdict({"early-read", "race", "arrival-overflow"},
                 upstream_findings(kernel, mutate(kernel.ptx), schedule=schedule))


# -- (c) this project's float add kernel: plain red.shared::cluster + .release.cluster --


F32_ADD = StoreConfig(dtype="float32", atomic="add")
CLUSTER_WAIT = r"mbarrier\.try_wait\.parity\.acquire\.cluster\.shared::cta\.b64"


@functools.lru_cache(maxsize=None)
def f32_add_ptx():
  return kernel_text(F32_ADD, "ptx", bare=False)


def run_store_kernel(cfg, ptx, schedule):
  """(SMEM bytes left, wait flags, expected SMEM bytes) of one of this project's
  store kernels, run as test_ptx_execution runs them."""
  out, flags, want, _ = run_ptx(cfg, ptx, schedule)
  return out, flags, want


@schedules
def test_project_f32_add_kernel_passes(schedule):
  """Positive control: its consumer waits with .acquire.cluster."""
  ptx = f32_add_ptx()
  assert len(re.findall(CLUSTER_WAIT, ptx)) == 1
  out, flags, want = run_store_kernel(F32_ADD, ptx, schedule)
  np.testing.assert_array_equal(out, want)
  assert (flags == 1).all()


@schedules
def test_cta_scope_wait_after_remote_plain_stores_races(schedule):
  """The default wait (.acquire.cta) does not synchronise with the peer's
  .release.cluster arrive (not morally strong), so the plain red.shared::cluster
  data it orders are not guaranteed visible: a race, whatever the bytes say."""
  ptx = replace(f32_add_ptx(), CLUSTER_WAIT,
                "mbarrier.try_wait.parity.shared::cta.b64")
  args, _ = full_kernel_args(F32_ADD)
  expect_verdict({"race"}, launch(ptx, args, **launch_options(F32_ADD, schedule)).findings)
