"""Proof without a GPU: run the real PTX of the full store kernels on the CPU.

Each configuration's complete test kernel (SMEM init, cluster sync, register
loads, the store into the target CTA, bounded barrier wait, copy-out) is
compiled to PTX by the deviceless toolchain and executed over every thread of
the cluster by the small interpreter in ``mosaic_async_store.check``, under each schedule
of ``check.memory.SCHEDULES`` (asynchronous stores landing late and out of order,
threads interleaved; every memory-ordering rule checked).  The bytes it leaves
in ``out`` must equal the geometry-only expectation of
``hostdata.expected_smem`` exactly, and every thread's wait flag must be 1.

Kernel parameters: Mosaic outlines the kernel body, and the outlined function
takes the captured buffers in order of first use in the body: ``init`` (read by
the SMEM initialisation), ``src`` (the register loads), ``flags`` (the flag
store), ``out`` (the copy-out).  The PTX shows this (param_0 is read by the
first copy loop into SMEM); a wrong order would fault on bounds or mismatch.
"""

import functools
import re

import numpy as np
import pytest

from mosaic_async_store.demo.config import StoreConfig
from mosaic_async_store.demo.kernel import WAIT_POLLS
from kernel_text import kernel_text

from demo_kernels import full_kernel_args, launch_options
from demo_kernels import run_ptx  # noqa: F401  (other test modules import it from here)
from configs import RUNTIME_CONFIGS  # test/gpu (pyproject: pytest pythonpath)
from mosaic_async_store.check.interp import PtxKernel
from mosaic_async_store.check.memory import SCHEDULES
from ptx_harness import finding

S = StoreConfig
# The configurations named in the task first, then the rest of the GPU matrix.
REQUIRED = [
    S(), S(impl="upstream"), S(dtype="float32"), S(dtype="int8"),
    S(dtype="int4", shape=(64, 256)),
    S(dtype="int4", layout="TMEM_NATIVE_V1", shape=(128, 256)),
    S(dtype="float4_e2m1fn", layout="TMEM_NATIVE_V1", shape=(128, 64), swizzle=32),
    S(transposed=True), S(dtype="float32", layout="TMEM_NATIVE_V4", shape=(128, 64)),
    S(layout="WGMMA_ROW", shape=(64,), swizzle=None),
    S(layout="SPLAT", shape=(32, 64), swizzle=None), S(target="local"), S(cluster=4),
    S(dtype="int32", atomic="add"), S(dtype="int32", atomic="min"),
    S(dtype="float32", atomic="add"), S(dtype="bfloat16", atomic="add", swizzle=64),
    S(dtype="float32", optimized=False),
    # One elected arrival per warpgroup (a barrier of count 1): plain, plain pieces
    # (f32 add), the run-time local/peer branch, local, and the tensor-core form.
    S(arrival="warpgroup"), S(dtype="float32", atomic="add", arrival="warpgroup"),
    S(dtype="int32", atomic="add", target="cta0", cluster=4, arrival="warpgroup"),
    S(target="local", arrival="warpgroup"), S(dtype="int8", arrival="tensor_core"),
    S(dtype="float32", atomic="add", shape=(64, 64), arrival="tensor_core"),
    # Split address steps (shared high and low parts) into a peer, and behind the
    # run-time branch where CTA 0 takes the local form (plain xors) and the others the
    # split peer form.
    S(dtype="int32", atomic="add", shape=(128, 128), layout="TMEM_NATIVE_V4"),
    S(dtype="int32", atomic="add", shape=(128, 128), layout="TMEM_NATIVE_V4", target="cta0",
      cluster=4),
]
CONFIGS = REQUIRED + [c for c in RUNTIME_CONFIGS if c not in REQUIRED]


@functools.lru_cache(maxsize=None)
def _ptx(cfg):
  return kernel_text(cfg, "ptx", bare=False)


def ptx_finding(cfg, ptx, schedule=0, cluster=None, *, rule=None, match=None):
  """The first finding (of ``rule``) of ``ptx`` run as ``cfg``'s kernel (``run_ptx``'s
  run); fails the test where there is none, or where ``match`` is not in it
  (``ptx_harness.finding``)."""
  args, _ = full_kernel_args(cfg)
  return finding(ptx, args, rule=rule, match=match, **launch_options(cfg, schedule, cluster))


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"schedule{s}")
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.describe())
def test_ptx_stores_exact_bytes(cfg, schedule):
  out, flags, want, kernel = run_ptx(cfg, _ptx(cfg), schedule)
  bad = np.flatnonzero(out != want)
  assert bad.size == 0, (f"{bad.size} bytes differ, first at {bad[:8].tolist()}: "
                         f"got {out[bad[:8]].tolist()} want {want[bad[:8]].tolist()}")
  assert (flags == 1).all(), f"{(flags != 1).sum()} threads' waits did not complete"
  assert kernel.timeouts == 0 and not kernel.calls   # no poll gave up, no report printed


# -- the check must be able to fail --------------------------------------------


def _short_wait(ptx):
  """Bound the kernel's poll loop at 8 polls, so a barrier that never completes
  ends in flag 0 quickly instead of 2**20 interpreted polls."""
  assert f"%n, {WAIT_POLLS};" in ptx
  return ptx.replace(f"%n, {WAIT_POLLS};", "%n, 8;")


def test_wrong_store_offset_is_caught():
  cfg = S()
  ptx = _ptx(cfg)
  m = re.search(r"(st\.async\.[^\[]*\[%\w+\+)(\d+)\]", ptx)
  assert m, "no st.async with an immediate offset"
  mutated = ptx[:m.start(2)] + str(int(m.group(2)) + 16) + ptx[m.end(2):]
  # The store now overlaps another one in flight: two unordered writes.
  ptx_finding(cfg, mutated, rule="early-read",
              match="while an asynchronous store into them is in flight")


def test_wrong_store_data_is_caught():
  """One st.async stores its address register instead of its data: the count is
  right, the protocol holds, and only the bytes show it."""
  cfg = S()
  ptx = _ptx(cfg)
  m = re.search(r"st\.async\.[^\[]*\[(%r\d+)[^\]]*\], (%r\d+), ", ptx)
  assert m, "no scalar st.async"
  mutated = ptx[:m.start(2)] + m.group(1) + ptx[m.end(2):]
  out, flags, want, _ = run_ptx(cfg, mutated)
  assert (flags == 1).all()                    # the byte count is still right...
  assert np.count_nonzero(out != want) > 0      # ...but the bytes are not


def test_wrong_expect_tx_count_is_caught():
  cfg = S()
  ptx = _short_wait(_ptx(cfg))
  arrive = re.search(r"mbarrier\.arrive\.expect_tx\S*\s+_, \[%\w+\], (%r\d+);", ptx)
  movs = list(re.finditer(rf"mov\.b32\s+{re.escape(arrive.group(1))}, (\d+);",
                          ptx[:arrive.start()]))
  m = movs[-1]  # the count each thread announces
  mutated = ptx[:m.start(1)] + str(int(m.group(1)) + 4) + ptx[m.end(1):]
  # No phase ever completes: the bounded wait gives up (flag 0).  Then either the
  # copy-out reads bytes whose phase it never observed, or the elected lane's report
  # reads the mbarrier's own bytes with ld.shared (undefined while it is initialised):
  # which comes first depends on how the warps interleave after the timeout.
  f = ptx_finding(cfg, mutated)
  assert (f.rule, "which it has not observed" in f.explained) in (
      ("early-read", True), ("barrier-memory", False))


def test_missing_mapa_is_caught():
  """Storing through the CTA-local address instead of the mapped one: the data
  lands in the wrong CTA while complete_tx names the peer's barrier."""
  cfg = S()
  ptx = _ptx(cfg)
  m = re.search(r"mapa\.shared::cluster\.u32 (%r\d+), (%r\d+), %r\d+;", ptx)
  mutated = ptx[:m.start()] + f"mov.b32 {m.group(1)}, {m.group(2)};" + ptx[m.end():]
  ptx_finding(cfg, mutated, rule="barrier-elsewhere", match="completing on CTA 1's mbarrier")


def test_unknown_opcode_is_refused():
  ptx = _ptx(S()).replace("bar.sync \t0;", "bar.sync \t0;\n\tpopc.b32 %r1, %r1;", 1)
  with pytest.raises(NotImplementedError, match="popc"):
    PtxKernel(ptx)


def test_wrong_nibble_exchange_partner_is_caught():
  """4-bit halves traded with the wrong lane (shfl mask 4 -> 1): bytes go wrong."""
  cfg = S(dtype="int4", layout="WGMMA_TRANSPOSED", shape=(64, 256))
  ptx = _ptx(cfg)
  assert ", 4, 31, -1;" in ptx
  out, flags, want, _ = run_ptx(cfg, ptx.replace(", 4, 31, -1;", ", 1, 31, -1;", 1))
  assert (flags == 1).all()
  assert np.count_nonzero(out != want) > 0


def test_wrong_gather_partner_is_caught():
  """Registers gathered from the wrong lane (first shfl mask 1 -> 4): bytes go wrong."""
  cfg = S(dtype="int8", layout="TMEM_NATIVE_V1", shape=(128, 1), swizzle=None)
  ptx = _ptx(cfg)
  assert ", 1, 31, -1;" in ptx
  out, flags, want, _ = run_ptx(cfg, ptx.replace(", 1, 31, -1;", ", 4, 31, -1;", 1))
  assert (flags == 1).all()
  assert np.count_nonzero(out != want) > 0


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"schedule{s}")
def test_elected_arrival_without_the_warpgroup_barrier_is_caught(schedule):
  """Thread 0's .release.cluster arrive releases only what happened before it: without
  the warpgroup barrier, the other threads' plain reductions (f32 add) into the peer are
  not ordered before the barrier's phase, and the peer's read of them races."""
  cfg = S(dtype="float32", atomic="add", arrival="warpgroup")
  ptx = _ptx(cfg)
  bar = re.findall(r"\tbar\.sync %r\d+, 128;\n", ptx)
  assert len(bar) == 1, bar
  ptx_finding(cfg, ptx.replace(bar[0], "\n"), schedule, rule="race")
