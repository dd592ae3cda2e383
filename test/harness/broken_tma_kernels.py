"""TMA, bulk-copy and asynchronous-proxy kernels that must fail the checker, each next to
its correct neighbour, and jax's interpret-mode race-detection cases rebuilt for it.

``PAIRS``: ``BrokenPair`` s.  Each maker returns ``(fn, args, expected)``: a jitted
Pallas MGPU or Mosaic GPU kernel, its NumPy inputs and the outputs of the *correct*
kernel (a tuple, one array per output).  A pair's broken kernel is either its own maker
or the correct kernel's PTX edited by ``PtxEdit`` (where neither Pallas nor Mosaic GPU
lets the rule be broken: Mosaic always puts a cluster barrier after ``mbarrier.init``).
``rules`` are the rule names (docs/checker.md) the broken kernel may be reported under,
the planned one first; ``why`` says what the hardware would do.

``RACE_CASES``: upstream's tests/pallas/gpu_pallas_interpret_race_detection_test.py
(jax at cec06d1), each parameterisation a ``RaceCase`` with the verdict the upstream
test asserts.  The rebuild differs from upstream in three ways that Mosaic GPU forces
(``NOT_EXPRESSIBLE`` lists the parameterisations it cannot express, with the reason):
scalar refs become 128 int32 (one per thread of the warpgroup: a bulk copy moves a
multiple of 16 bytes, and a scalar store by all 128 threads would itself race);
``plgpu.GMEM`` scratch, which Mosaic GPU does not lower ("Unsupported memory space:
gmem"), becomes an extra input (a copy's source) or an extra output (a copy's
destination); and a copy of one scalar element becomes a copy of one row.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import re
from typing import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402

__all__ = ["BrokenPair", "PtxEdit", "RaceCase", "PAIRS", "RACE_CASES", "NOT_EXPRESSIBLE",
           "lower", "check_broken", "check_maker"]

_TILE = (64, 128)        # f16: 16 KiB, a 4-d tensor TMA under the 128-byte swizzle
_ROW = (256,)            # f32: 1 KiB, a 1-d copy (non-tensor bulk store)
_N = 128                 # int32 per ref of the race cases: one per thread


def _x(shape, dtype=np.float16):
  return np.random.default_rng(0).uniform(-1, 1, shape).astype(dtype)


def _swizzled(dtype=jnp.float16):
  return (plgpu.TilingTransform((8, 128 // jnp.dtype(dtype).itemsize)),
          plgpu.SwizzleTransform(128))


# --- the broken kernels and their neighbours -----------------------------------------

def tensor_round_trip(commit: bool):
  """TMA load of a swizzled 64x128 f16 tile, +1 by generic SMEM stores (``stmatrix``),
  TMA store; ``commit=False`` drops ``plgpu.commit_smem()`` (its ``fence.proxy.async``)."""
  def body(x_ref, o_ref, smem, bar):
    plgpu.copy_gmem_to_smem(x_ref, smem, bar)
    plgpu.barrier_wait(bar)
    smem[...] = smem[...] + jnp.float16(1)
    if commit:
      plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem, o_ref)
    plgpu.wait_smem_to_gmem(0)

  kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(_TILE, jnp.float16),
                        scratch_types=[plgpu.SMEM(_TILE, jnp.float16, transforms=_swizzled()),
                                       plgpu.Barrier()])
  x = _x(_TILE)
  return jax.jit(kernel), (x,), (x + np.float16(1),)


def bulk_round_trip(commit: bool):
  """The same through a 1-d 256 f32 ref: the store is ``cp.async.bulk`` (no tensor map)."""
  def body(x_ref, o_ref, smem, bar):
    plgpu.copy_gmem_to_smem(x_ref, smem, bar)
    plgpu.barrier_wait(bar)
    smem[...] = smem[...] + jnp.float32(1)
    if commit:
      plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem, o_ref)
    plgpu.wait_smem_to_gmem(0)

  kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(_ROW, jnp.float32),
                        scratch_types=[plgpu.SMEM(_ROW, jnp.float32), plgpu.Barrier()])
  x = _x(_ROW, np.float32)
  return jax.jit(kernel), (x,), (x + np.float32(1),)


def read_after_wait(early: bool):
  """TMA load of 256 f32; each thread reads its elements from SMEM and stores them +1
  to the output; ``early=True`` reads before ``barrier_wait`` (and waits after)."""
  def body(x_ref, o_ref, smem, bar):
    plgpu.copy_gmem_to_smem(x_ref, smem, bar)
    if early:
      value = smem[...]
      plgpu.barrier_wait(bar)
    else:
      plgpu.barrier_wait(bar)
      value = smem[...]
    o_ref[...] = value + jnp.float32(1)

  kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(_ROW, jnp.float32),
                        scratch_types=[plgpu.SMEM(_ROW, jnp.float32), plgpu.Barrier()])
  x = _x(_ROW, np.float32)
  return jax.jit(kernel), (x,), (x + np.float32(1),)


def multicast_copy():
  """A 2-CTA cluster: one 128 f32 TMA load multicast to both CTAs (each CTA loads half
  and multicasts it), each CTA storing its copy into its own row of the output."""
  def body(x_ref, y_ref, smem, bar):
    plgpu.copy_gmem_to_smem(x_ref, smem, bar, collective_axes="cluster")
    plgpu.barrier_wait(bar)
    plgpu.copy_smem_to_gmem(smem, y_ref.at[jax.lax.axis_index("cluster")])
    plgpu.wait_smem_to_gmem(0)

  kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((2, 128), jnp.float32),
                        scratch_types=[plgpu.SMEM((128,), jnp.float32), plgpu.Barrier()],
                        cluster=(2,), cluster_names=("cluster",))
  x = _x((128,), np.float32)
  return jax.jit(kernel), (x,), (np.stack([x, x]),)


def store_then_reuse(early: bool):
  """TMA load of a swizzled tile, +1, TMA store to output 0, +1 again in the same SMEM,
  TMA store to output 1.  Correct: ``wait_smem_to_gmem(0, wait_read_only=True)`` before
  the second +1; ``early=True`` does the second +1 before that wait."""
  def body(x_ref, o1_ref, o2_ref, smem, bar):
    plgpu.copy_gmem_to_smem(x_ref, smem, bar)
    plgpu.barrier_wait(bar)
    smem[...] = smem[...] + jnp.float16(1)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem, o1_ref)
    if early:
      smem[...] = smem[...] + jnp.float16(1)
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)
    if not early:
      smem[...] = smem[...] + jnp.float16(1)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem, o2_ref)
    plgpu.wait_smem_to_gmem(0)

  spec = jax.ShapeDtypeStruct(_TILE, jnp.float16)
  kernel = plgpu.kernel(body, out_type=(spec, spec),
                        scratch_types=[plgpu.SMEM(_TILE, jnp.float16, transforms=_swizzled()),
                                       plgpu.Barrier()])
  x = _x(_TILE)
  once = x + np.float16(1)   # (f16 arithmetic: (x + 1) + 1, rounded twice)
  return jax.jit(kernel), (x,), (once, once + np.float16(1))


@dataclasses.dataclass(frozen=True)
class PtxEdit:
  """A substitution of the correct kernel's PTX: each ``(pattern, replacement)`` must
  match exactly once (``re.MULTILINE``), so the edit breaks what it says or fails."""
  what: str
  subs: tuple[tuple[str, str], ...]

  def __call__(self, ptx: str) -> str:
    for pattern, replacement in self.subs:
      ptx, n = re.subn(pattern, replacement, ptx, count=1, flags=re.MULTILINE)
      if n != 1:
        raise AssertionError(f"{self.what}: {pattern!r} not in the PTX")
    return ptx


# Mosaic's prologue: mbarrier.init, fence.mbarrier_init, then a cluster barrier
# (arrive + wait) so that no CTA signals a peer's barrier before the peer initialised
# it.  The edit deletes that one cluster barrier (its first arrive and first wait).
NO_CLUSTER_BARRIER_AFTER_INIT = PtxEdit(
    "delete the cluster barrier after mbarrier.init",
    ((r"^\s*barrier\.cluster\.arrive[\w.]*;\n", ""),
     (r"^\s*barrier\.cluster\.wait[\w.]*;\n", "")))


TX_SHORT = 16   # the bytes the broken expect_tx leaves out

# Pallas arrives on a copy's barrier from all 128 threads (``Barrier()`` counts 128
# arrivals), each announcing bytes / 128 with ``mbarrier.arrive.expect_tx``; Mosaic GPU's
# ``as_gpu_kernel`` would let one thread announce ``bytes - 16``, but ``check`` reaches
# kernels through Pallas's lowering only.  The edit makes thread 0 announce 16 fewer
# bytes, so the barrier expects the copy's bytes - 16 in all.
EXPECT_TX_SHORT = PtxEdit(
    "thread 0 announces 16 bytes fewer than the TMA load completes",
    ((r"^(\s*)(mbarrier\.arrive\.expect_tx[\w.:]*\s+[^,\s]+, \[[^\]]+\], )(%r\d+);",
      r"\1{\n\1.reg .b32 %tx_short;\n\1.reg .pred %tx_first;\n"
      r"\1mov.u32 %tx_short, %tid.x;\n\1setp.eq.u32 %tx_first, %tx_short, 0;\n"
      rf"\1selp.b32 %tx_short, {TX_SHORT}, 0, %tx_first;\n"
      r"\1sub.s32 %tx_short, \3, %tx_short;\n\1\2%tx_short;\n\1}"),))


@dataclasses.dataclass(frozen=True)
class BrokenPair:
  name: str
  correct: Callable[[], tuple]
  broken: Callable[[], tuple] | PtxEdit
  rules: tuple[str, ...]
  why: str


PAIRS = {p.name: p for p in (
    BrokenPair(
        "tensor_store_without_proxy_fence",
        functools.partial(tensor_round_trip, True), functools.partial(tensor_round_trip, False),
        ("proxy-fence",),
        "the stmatrix stores are generic-proxy writes; the TMA store reads the tile "
        "through the async proxy, which without fence.proxy.async need not see them: "
        "stale bytes reach global memory"),
    BrokenPair(
        "bulk_store_without_proxy_fence",
        functools.partial(bulk_round_trip, True), functools.partial(bulk_round_trip, False),
        ("proxy-fence",),
        "as above for cp.async.bulk (non-tensor): its SMEM reads are async-proxy reads"),
    BrokenPair(
        "expect_tx_short_by_16",
        functools.partial(tensor_round_trip, True), EXPECT_TX_SHORT,
        ("tx-count", "hang", "early-read"),
        "the phase completes when the pending arrivals and the tx-count are both zero; "
        "announced 16 bytes short, the tx-count passes through zero 16 bytes before the "
        "copy is done if the copy's complete-tx arrives in parts (phase completes early: "
        "the wait returns with 16 bytes still in flight), or jumps from bytes-16 to -16 "
        "if it arrives whole (the phase never completes: hang); the ISA fixes neither"),
    BrokenPair(
        "smem_read_before_barrier_wait",
        functools.partial(read_after_wait, False), functools.partial(read_after_wait, True),
        ("early-read",),
        "the TMA's bytes become visible only to a thread that observed the mbarrier "
        "phase complete; before it the loads may return the old SMEM contents"),
    BrokenPair(
        "multicast_before_peer_barrier_init",
        multicast_copy, NO_CLUSTER_BARRIER_AFTER_INIT,
        ("barrier-init",),
        "a CTA's multicast signals complete-tx on the peer's mbarrier, which the peer "
        "may not have initialised yet: the init then wipes the tx-count (a hang) or the "
        "signal hits an uninitialised object (undefined)"),
    BrokenPair(
        "store_source_overwritten_before_wait_read",
        functools.partial(store_then_reuse, False), functools.partial(store_then_reuse, True),
        ("race",),
        "the TMA store reads SMEM asynchronously until cp.async.bulk.wait_group.read; "
        "overwriting it earlier sends the new bytes (or a mix) to output 0"),
)}


# --- jax's interpret-mode race-detection cases -----------------------------------------

def _i32(*shape):
  return jax.ShapeDtypeStruct(shape or (_N,), jnp.int32)


def _full(value, n=_N):
  return jnp.full((n,), value, jnp.int32)


def _kernel(body, out_type, scratch, **kw):
  return jax.jit(plgpu.kernel(body, out_type=out_type, scratch_types=scratch, **kw))


def _commit(flag):
  if flag:
    plgpu.commit_smem()


def _maybe_warps(warp_specialize):
  """Upstream's ``WarpSpecializeHelper``: two warpgroups (``num_threads=2``), or two
  warps of one warpgroup (``pl.core_map(plgpu.WarpMesh)``); returns (the decorator
  that opens the region, the axis index, the kernel's keywords)."""
  if warp_specialize:
    return (pl.core_map(plgpu.WarpMesh(axis_name="warp")),
            lambda: jax.lax.axis_index("warp"), {})
  return pl.when(True), lambda: jax.lax.axis_index("t"), dict(num_threads=2, thread_name="t")


def later_gmem_to_smem(a, b, c, d):
  def body(in_ref, out_ref, smem, bar):
    _commit(a); smem[...] = _full(100); _commit(b)
    plgpu.copy_gmem_to_smem(in_ref, smem, bar); _commit(c)
    plgpu.barrier_wait(bar); _commit(d)
    out_ref[...] = smem[...]
  x = np.full(_N, 42, np.int32)
  return _kernel(body, _i32(), [plgpu.SMEM((_N,), jnp.int32), plgpu.Barrier()]), (x,), (x,)


def earlier_gmem_to_smem(wait_barrier):
  def body(src_ref, out_ref, smem, bar):   # src_ref: upstream's GMEM scratch
    plgpu.copy_gmem_to_smem(src_ref, smem, bar)
    if wait_barrier:
      plgpu.barrier_wait(bar)
    smem[...] = _full(42)
    out_ref[...] = smem[...]
  x = np.zeros(_N, np.int32)
  return (_kernel(body, _i32(), [plgpu.SMEM((_N,), jnp.int32), plgpu.Barrier()]), (x,),
          (np.full(_N, 42, np.int32),))


def gmem_ops_synchronized(wait_barrier):
  def body(out_ref, smem, bar):
    plgpu.copy_gmem_to_smem(out_ref, smem, bar)
    if wait_barrier:
      plgpu.barrier_wait(bar)
    plgpu.commit_smem()
    out_ref[...] = _full(42)
  return (_kernel(body, _i32(), [plgpu.SMEM((_N,), jnp.int32), plgpu.Barrier()]), (),
          (np.full(_N, 42, np.int32),))


def two_threads_gmem_to_smem(cross, warp_specialize, a, b, c, d, e, f):
  """``cross=False``: multi_thread (thread 0 writes and copies, thread 1 waits and
  reads); ``cross=True``: cross_thread (thread 0 writes, thread 1 copies and reads)."""
  region, index, kw = _maybe_warps(warp_specialize)

  def body(in_ref, out_ref, smem, thread_bar, copy_bar):
    @region
    def _():
      @pl.when(index() == 0)
      def _():
        _commit(a); smem[...] = _full(100); _commit(b)
        if not cross:
          plgpu.copy_gmem_to_smem(in_ref, smem, copy_bar); _commit(c)
        plgpu.barrier_arrive(thread_bar)

      @pl.when(index() == 1)
      def _():
        if cross:
          _commit(c)
        else:
          _commit(d)
        plgpu.barrier_wait(thread_bar)
        if cross:
          _commit(d); plgpu.copy_gmem_to_smem(in_ref, smem, copy_bar)
        _commit(e); plgpu.barrier_wait(copy_bar); _commit(f)
        out_ref[...] = smem[...]

  x = np.full(_N, 42, np.int32)
  scratch = [plgpu.SMEM((_N,), jnp.int32), plgpu.Barrier(), plgpu.Barrier()]
  return _kernel(body, _i32(), scratch, **kw), (x,), (x,)


def smem_to_gmem(a, b, c):
  def body(out_ref, dst_ref, smem):        # dst_ref: upstream's GMEM scratch
    _commit(a); smem[...] = _full(42); _commit(b)
    plgpu.copy_smem_to_gmem(smem, dst_ref); _commit(c)
    plgpu.wait_smem_to_gmem(0)
    out_ref[...] = dst_ref[...]
  full = np.full(_N, 42, np.int32)
  return (_kernel(body, (_i32(), _i32()), [plgpu.SMEM((_N,), jnp.int32)]), (),
          (full, full))


def not_fully_waited():
  def body(out_ref, g1, g2, smem1, smem2):   # g1, g2: upstream's GMEM scratch
    smem1[...] = _full(1)
    smem2[...] = _full(2)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem1, g1)
    plgpu.copy_smem_to_gmem(smem2, g2)
    plgpu.wait_smem_to_gmem(1)
    out_ref[...] = g1[...] + g2[...]
    plgpu.wait_smem_to_gmem(0)
  smem = plgpu.SMEM((_N,), jnp.int32)
  return _kernel(body, (_i32(),) * 3, [smem, smem]), (), None


def rewaiting():
  def body(in_ref, out_ref, g, smem):        # g: upstream's GMEM scratch; rows for elements
    smem[...] = in_ref[...]
    plgpu.commit_smem()
    for i in range(3):
      plgpu.copy_smem_to_gmem(smem.at[i], g.at[i])
    plgpu.wait_smem_to_gmem(1)
    plgpu.wait_smem_to_gmem(2)
    out_ref[...] = g[0] + g[1]
    plgpu.wait_smem_to_gmem(0)
    out_ref[...] = g[0] + g[1] + g[2]
  x = np.arange(3 * _N, dtype=np.int32).reshape(3, _N)
  return (_kernel(body, (_i32(), _i32(3, _N)), [plgpu.SMEM((3, _N), jnp.int32)]), (x,),
          (x.sum(axis=0), x))


def waits_read_only(wait_only_once, check_location):
  def body(in_ref, out_ref, smem):
    smem[...] = in_ref[...]
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem.at[0], out_ref.at[0])
    plgpu.copy_smem_to_gmem(smem.at[1], out_ref.at[1])
    where = (smem.at[0], out_ref.at[0], smem.at[1], out_ref.at[1])[check_location]
    plgpu.wait_smem_to_gmem(1, wait_read_only=True)
    if not wait_only_once:
      plgpu.wait_smem_to_gmem(1)
    where[...] = _full(3)
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)
  x = np.arange(2 * _N, dtype=np.int32).reshape(2, _N)
  return _kernel(body, _i32(2, _N), [plgpu.SMEM((2, _N), jnp.int32)]), (x,), None


def isolated_per_thread(warp_specialize, check_read):
  region, index, kw = _maybe_warps(warp_specialize)

  def body(out_ref, smem, bar, cleanup_bar):
    @region
    def _():
      @pl.when(index() == 0)
      def _():
        plgpu.copy_smem_to_gmem(smem, out_ref)
        plgpu.barrier_arrive(bar)
        plgpu.barrier_wait(cleanup_bar)
        plgpu.wait_smem_to_gmem(0)

      @pl.when(index() == 1)
      def _():
        plgpu.barrier_wait(bar)
        plgpu.wait_smem_to_gmem(0)          # this thread's groups: none
        if check_read:
          smem[...] = _full(43)
        else:
          out_ref[...] = _full(43)
        plgpu.barrier_arrive(cleanup_bar)

  scratch = [plgpu.SMEM((_N,), jnp.int32), plgpu.Barrier(), plgpu.Barrier()]
  return _kernel(body, _i32(), scratch, **kw), (), None


def waited_visible_across_threads(warp_specialize):
  region, index, kw = _maybe_warps(warp_specialize)

  def body(out_ref, g, smem, bar):            # g: upstream's GMEM scratch
    @region
    def _():
      @pl.when(index() == 0)
      def _():
        smem[...] = _full(42)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(smem, g)
        plgpu.wait_smem_to_gmem(0)
        plgpu.barrier_arrive(bar)

      @pl.when(index() == 1)
      def _():
        plgpu.barrier_wait(bar)
        out_ref[...] = g[...]

  full = np.full(_N, 42, np.int32)
  return (_kernel(body, (_i32(), _i32()), [plgpu.SMEM((_N,), jnp.int32), plgpu.Barrier()],
                  **kw), (), (full, full))


def gmem_to_smem_twice(do_wait):
  def body(src_ref, _out_ref, smem, bar):     # src_ref: upstream's GMEM scratch
    plgpu.commit_smem()
    plgpu.copy_gmem_to_smem(src_ref, smem, bar)
    if do_wait:
      plgpu.barrier_wait(bar)
    plgpu.copy_gmem_to_smem(src_ref, smem, bar)
    plgpu.barrier_wait(bar)
  scratch = [plgpu.SMEM((_N,), jnp.int32), plgpu.Barrier(num_arrivals=1 if do_wait else 2)]
  return _kernel(body, _i32(), scratch), (np.zeros(_N, np.int32),), None


def smem_to_gmem_twice():
  def body(_out_ref, g, smem):                # g: upstream's GMEM scratch
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(smem, g)
    plgpu.copy_smem_to_gmem(smem, g)
    plgpu.wait_smem_to_gmem(0)
  return _kernel(body, (_i32(), _i32()), [plgpu.SMEM((_N,), jnp.int32)]), (), None


def unawaited_smem_to_gmem(wait_read_only):
  def body(out_ref, smem):
    plgpu.copy_smem_to_gmem(smem, out_ref)
    if wait_read_only:
      plgpu.wait_smem_to_gmem(0, wait_read_only=True)
  return _kernel(body, _i32(), [plgpu.SMEM((_N,), jnp.int32)]), (), None


_CLUSTER = dict(cluster=(2,), cluster_names=("c0",))


def cluster_case(kind):
  """The five cluster cases: two CTAs of one cluster and one output."""
  smem = plgpu.SMEM((_N,), jnp.int32)
  if kind == "async_smem_to_gmem":             # both CTAs TMA-store into one output
    def body(out_ref, smem):
      plgpu.copy_smem_to_gmem(smem, out_ref)
      plgpu.wait_smem_to_gmem(0)
    return _kernel(body, _i32(), [smem], **_CLUSTER), (), None
  if kind == "async_gmem_to_smem":             # each loads the output into its own SMEM
    def body(out_ref, smem, bar):
      plgpu.copy_gmem_to_smem(out_ref, smem, bar)
      plgpu.barrier_wait(bar)
    return _kernel(body, _i32(), [smem, plgpu.Barrier()], **_CLUSTER), (), None
  if kind == "sync_smem_to_gmem":              # both store into one output
    def body(in_ref, out_ref, smem):
      smem[...] = in_ref[...]   # upstream stores uninitialised SMEM: LLVM drops that store
      out_ref[...] = smem[...]
    return _kernel(body, _i32(), [smem], **_CLUSTER), (np.full(_N, 42, np.int32),), None
  # The two no-race cases store SMEM into the CTA's own row of the output as well:
  # upstream's SMEM writes are never read, and LLVM drops them.
  row = lambda out_ref: out_ref.at[jax.lax.axis_index("c0")]
  if kind == "sync_gmem_to_smem":              # each writes its own SMEM
    def body(in_ref, out_ref, smem):
      smem[...] = in_ref[...]
      row(out_ref)[...] = smem[...]
    x = np.full(_N, 42, np.int32)
    return _kernel(body, _i32(2, _N), [smem], **_CLUSTER), (x,), (np.stack([x, x]),)
  assert kind == "smem_across_clusters"        # CTA 0's thread 0, CTA 1's thread 1

  def body(out_ref, smem):
    for cta, value in ((0, 42), (1, 43)):
      @pl.when((jax.lax.axis_index("c0") == cta) & (jax.lax.axis_index("t") == cta))
      def _():
        smem[...] = _full(value)
        row(out_ref)[...] = smem[...]
  return (_kernel(body, _i32(2, _N), [smem], num_threads=2, thread_name="t", **_CLUSTER), (),
          (np.full((2, _N), [[42], [43]], np.int32),))


@dataclasses.dataclass(frozen=True)
class RaceCase:
  """One parameterisation of an upstream test: ``race`` is what it asserts of
  ``get_races().races_found`` (or, ``note`` says, what it would assert)."""
  name: str
  maker: Callable[[], tuple]
  race: bool
  note: str = ""


def _flags(names, on):
  return {n: n in on for n in names}


def _race_cases():
  P = functools.partial
  cases = [RaceCase("async_gmem_ops_not_visible_unless_synchronized[wait]",
                    P(gmem_ops_synchronized, True), False),
           RaceCase("async_gmem_ops_not_visible_unless_synchronized[no wait]",
                    P(gmem_ops_synchronized, False), True,
                    "upstream skips it before asserting a race (no gmem_commit_clock)")]
  for a, b, c, d in itertools.product((False, True), repeat=4):
    cases.append(RaceCase(f"single_thread_later_gmem_to_smem_copy[{a:d}{b:d}{c:d}{d:d}]",
                          P(later_gmem_to_smem, a, b, c, d), not b))
  for w in (False, True):
    cases.append(RaceCase(f"single_thread_earlier_gmem_to_smem_copy[wait={w:d}]",
                          P(earlier_gmem_to_smem, w), not w))
  # 2 x 64 flag settings upstream; here each setting that decides the verdict alone,
  # and all or none of the others around it.
  abc = "abcdef"
  for cross, ws in itertools.product((False, True), (False,)):
    decisive = ("b", "d") if cross else ("b",)
    settings = [(), tuple(abc), *((x,) for x in decisive),
                tuple(x for x in abc if x not in decisive)]
    for on in settings:
      flags = _flags(abc, on)
      race = not (flags["b"] or (cross and flags["d"]))
      test = "cross_thread" if cross else "multi_thread"
      cases.append(RaceCase(
          f"{test}_gmem_to_smem_copy[{'warps' if ws else 'warpgroups'},{''.join(on) or '-'}]",
          P(two_threads_gmem_to_smem, cross, ws, *flags.values()), race))
  for a, b, c in itertools.product((False, True), repeat=3):
    cases.append(RaceCase(f"single_thread_smem_to_gmem_copy[{a:d}{b:d}{c:d}]",
                          P(smem_to_gmem, a, b, c), not b))
  cases += [RaceCase("non_fully_waited_smem_to_gmem_copy", not_fully_waited, True),
            RaceCase("allows_rewaiting_smem_to_gmem_copies", rewaiting, False)]
  for once, loc in itertools.product((False, True), range(4)):
    correct = (once and loc == 0) or (not once and loc in (0, 1))
    cases.append(RaceCase(
        f"smem_to_gmem_copy_waits_read_only[once={once:d},loc={loc}]",
        P(waits_read_only, once, loc), not correct,
        "upstream skips it (no gmem_commit_clock)" if once and loc == 1 else ""))
  for ws, check_read in itertools.product((False,), (False, True)):
    cases.append(RaceCase(
        f"wait_smem_to_gmem_isolated_per_thread[{'warps' if ws else 'warpgroups'},"
        f"{'smem' if check_read else 'gmem'}]", P(isolated_per_thread, ws, check_read), True))
  for ws in (False,):
    cases.append(RaceCase(
        f"properly_waited_smem_to_gmem_visible_across_threads[{'warps' if ws else 'warpgroups'}]",
        P(waited_visible_across_threads, ws), False,
        "upstream's method lacks the test_ prefix: never collected"))
  for w in (False, True):
    cases.append(RaceCase(f"gmem_to_smem_visible_in_async_if_awaited[wait={w:d}]",
                          P(gmem_to_smem_twice, w), not w))
  cases += [
      RaceCase("race_in_double_smem_to_gmem", smem_to_gmem_twice, True),
      RaceCase("exception_in_unawaited_smem_to_gmem", P(unawaited_smem_to_gmem, False), True,
               "upstream asserts an error (read side not complete at exit), not a race"),
      RaceCase("unawaited_smem_to_gmem_write_side_ok", P(unawaited_smem_to_gmem, True), False),
      RaceCase("race_in_async_copy_smem_to_gmem_in_cluster",
               P(cluster_case, "async_smem_to_gmem"), True),
      RaceCase("no_race_in_async_copy_gmem_to_smem_in_cluster",
               P(cluster_case, "async_gmem_to_smem"), False),
      RaceCase("race_in_sync_copy_smem_to_gmem_in_cluster",
               P(cluster_case, "sync_smem_to_gmem"), True),
      RaceCase("no_race_in_sync_copy_gmem_to_smem_in_cluster",
               P(cluster_case, "sync_gmem_to_smem"), False),
      RaceCase("no_race_in_smem_across_clusters", P(cluster_case, "smem_across_clusters"),
               False)]
  return {c.name: c for c in cases}


RACE_CASES = _race_cases()
_WARP_LEVEL = ("warp-level Pallas MGPU code (pl.core_map over plgpu.WarpMesh) lowers "
               "neither array values (broadcast_in_dim: 'Unimplemented primitive ... for "
               "user thread semantics PrimitiveSemantics.Warp') nor commit_smem")
# Upstream cases Mosaic GPU cannot express, with the reason (what jax 0.10.2, 0.11.2
# and 0.12.0.1 said when asked to lower them).
NOT_EXPRESSIBLE = {
    f"{test}[warps,...]": _WARP_LEVEL
    for test in ("multi_thread_gmem_to_smem_copy", "cross_thread_gmem_to_smem_copy",
                 "wait_smem_to_gmem_isolated_per_thread",
                 "properly_waited_smem_to_gmem_visible_across_threads")}


# --- lowering and checking -----------------------------------------------------------

@functools.cache
def lower(maker) -> tuple[str, str]:
  """The (MLIR, PTX with line info) of the kernel ``maker`` builds, as ``check`` lowers
  it (sm_90a, device queries answered for an H100); cached per maker object."""
  from mosaic_async_store import compat
  from mosaic_async_store.tools import check_kernel as ck
  from mosaic_async_store.tools.device_target import device_target
  from mosaic_async_store.tools.user_kernel import kernel_specs
  fn, args, _ = maker()
  with compat.answer_device_queries(device_target("sm_90a")):
    specs, _ = kernel_specs(fn, args)
    return ck._lower(fn, specs)


def check_maker(maker, edit: PtxEdit | None = None, schedules: int = 3):
  """``check`` on the kernel ``maker`` builds, its PTX edited by ``edit`` first (``check``
  binds the arguments as for the unedited kernel: the edit changes no parameter).
  Returns (report, expected outputs of the maker)."""
  from mosaic_async_store.tools import check_kernel as ck
  fn, args, expected = maker()
  if edit is None:
    return ck.check(fn, *args, schedules=schedules), expected
  lower_unedited = ck._lower

  def lower_edited(fn, specs):
    mlir, ptx = lower_unedited(fn, specs)
    return mlir, edit(ptx)

  ck._lower = lower_edited      # check() looks _lower up in its module at each call
  try:
    return ck.check(fn, *args, schedules=schedules), expected
  finally:
    ck._lower = lower_unedited


def check_broken(pair: BrokenPair, schedules: int = 3):
  """The report of ``pair``'s broken kernel."""
  if isinstance(pair.broken, PtxEdit):
    return check_maker(pair.correct, pair.broken, schedules)[0]
  return check_maker(pair.broken, None, schedules)[0]
