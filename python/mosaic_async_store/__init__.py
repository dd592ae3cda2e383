"""mosaic-async-store: asynchronous register -> (cluster) shared-memory stores for Mosaic GPU.

    import mosaic_async_store as mas
    plan = mas.plan_store(layout, shape, dtype, swizzle=128)    # pure data
    nbytes = mas.async_store(value, ref, barrier, cluster_dim=gpu.Dimension.x,
                             cluster_idx=peer, swizzle=128)     # inside a kernel

The planner (``plan_store``, in ``mosaic_async_store.plan``) needs no MLIR;
``async_store`` lives in ``mosaic_async_store.lowering`` and is imported on
first use.  The layers and their import direction: docs/architecture.md.
"""

from mosaic_async_store._version import __version__
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.plan.planner import StorePlan, plan_store
from mosaic_async_store.plan.ref_swizzle import SWIZZLE_UNSET as _SWIZZLE_UNSET

__all__ = ["AsyncStoreError", "StorePlan", "plan_store", "async_store", "simulate_store",
           "wait"]


def async_store(value, ref, barrier, *, cluster_dim=None, cluster_idx=None,
                swizzle=_SWIZZLE_UNSET, tiling_rank=None, optimized=True, atomic=None,
                expect_tx=True, strategy="st.async", remote_plain_ok=True,
                arrival="thread") -> int:
  """Stores ``value`` asynchronously into ``ref``: this CTA's shared memory or a peer's.

  Call it while a Mosaic GPU kernel body is built (Lane semantics: inside the body
  given to ``mgpu.as_gpu_kernel``).  Every argument is checked, the store planned and
  the plan verified before any IR is built.  Each thread of the warpgroup then arrives
  once on the target CTA's copy of ``barrier``, announcing exactly the bytes its own
  asynchronous stores complete (``expect_tx``), so a barrier counting 128 arrivals per
  store completes once the data has landed, whatever the size.

  Args:
    value: an ``mgpu.FragmentedArray`` held by the warpgroup, in any layout
      (``TiledLayout``, ``WGStridedFragLayout``, ``WGSplatFragLayout``) and any dtype
      from 64 bits down to 4.
    ref: an SMEM memref of the executing CTA (``#gpu.address_space<workgroup>``) of the
      value's element type: plain, of the value's shape, or tiled (the value's shape
      tiled by its trailing ``tiling_rank`` dims, upstream's convention), with any
      static strides (transposed views).  For a peer target the peer's copy at the same
      offset is written.  A sliced ref (``mgpu.memref_slice``) must start at a multiple
      of the swizzle atom (8 rows of ``swizzle`` bytes) or, unswizzled, of the widest
      store; a dynamic offset only where its slicing proves that.
    barrier: an ``mgpu.BarrierRef`` of the executing CTA holding one barrier
      (``bar[0]``); the target CTA's copy receives the arrivals and the tx count.
    cluster_dim: a ``gpu.Dimension`` (or 0, 1, 2) along which ``cluster_idx`` counts;
      with ``cluster_idx``, the target CTA.  Both None: the executing CTA.
    cluster_idx: the target CTA's index along ``cluster_dim``: a Python int or a scalar
      index / integer ``ir.Value`` (e.g. ``1 - gpu.cluster_block_id(dim)``).  A target
      that is the executing CTA takes the local form; one that is in some CTAs makes
      a reduction choose its form at run time.
    swizzle: 16, 32, 64 or 128 (bytes): the swizzle the ref is written and read with;
      None: a plain ref, or a tiled ref that is not swizzled.  Required where the ref's
      tile is laid out for a swizzle (its contiguous dim spans 32, 64 or 128 bytes):
      leaving it out there is refused, naming that swizzle.  It must match the tile:
      the contiguous dim spans ``swizzle`` bytes.
    tiling_rank: the ref's trailing dims that form the tile; default (None): the
      ref's rank minus the value's.
    optimized: True refuses a store with shared-memory bank conflicts (where no
      conflict-free order exists); False accepts one.
    atomic: None (a store) or a reduction: "add", "min", "max", "and", "or", "xor",
      "inc", "dec", as the dtype allows (floats: add; min/max follow the signedness).
    expect_tx: True: each thread arrives once, announcing its bytes.  False: nothing
      is announced and the caller accounts for the returned byte count.
    strategy: "st.async" (pieces an asynchronous store can carry complete on the tx
      count) or "plain" (every piece a plain ``st.shared::cluster``, ordered by a
      ``.release.cluster`` arrive: the benchmark's comparison point, and what a store
      into the executing CTA of a one-CTA cluster gets anyway).  With
      ``expect_tx=False`` the caller orders plain stores itself.
    remote_plain_ok: False refuses a store into a peer that has plain pieces (ordered
      only by a ``.release.cluster`` arrive), for a consumer that waits at CTA scope.
    arrival: with ``expect_tx``, who arrives: "thread" (every thread, once, with its
      own bytes), "warpgroup" (thread 0 once with the warpgroup's bytes, after a
      warpgroup barrier: a barrier counting one arrival per store) or "tensor_core"
      ("warpgroup" after ``tcgen05.fence::before_thread_sync``; sm_100a and newer).

  Returns:
    The bytes the warpgroup writes (a Python int).

  Raises:
    AsyncStoreError (a ``ValueError``; ``.param`` and ``.value`` name the argument) or
    TypeError (a value of the wrong kind), each naming the parameter, the value, what is
    allowed and the fix, before any IR is built: a call outside a kernel body (no MLIR
    context, location or insertion point); a ``value`` that is no FragmentedArray; a
    ``ref`` outside shared memory, of another element type or untiled shape, at an
    offset that breaks the swizzle phase or alignment, with dynamic strides; a barrier
    group; ``cluster_dim`` without ``cluster_idx`` (or the reverse), an index outside
    the cluster; ``swizzle`` left out on a ref tiled for one, or one that does not match
    the tile; an ``atomic`` the dtype has no reduction for; with ``optimized``, a store
    that no order makes free of bank conflicts; ``expect_tx=False`` where plain pieces
    need the release arrive.  docs/errors.md lists each message.

  Example (a kernel body for ``mgpu.as_gpu_kernel`` with a two-CTA cluster: each CTA
  stores its (64, 128) bf16 input tile into the other's SMEM scratch ``smem``, allocated
  as ``jax.ShapeDtypeStruct((8, 2, 8, 64), jnp.bfloat16)``: the tile tiled for the
  128-byte swizzle, hence ``swizzle=128``; the barrier as
  ``mgpu.Barrier(arrival_count=128)``, one arrival per thread)::

    def body(ctx, x, out, scratch):
      smem, barrier = scratch
      peer = arith.subi(arith.constant(ir.IndexType.get(), 1),
                        gpu.cluster_block_id(gpu.Dimension.x))
      tile = mgpu.FragmentedArray.load_untiled(x, layout=mgpu.WGMMA_LAYOUT,
                                               optimized=False)
      nbytes = mas.async_store(tile, smem, barrier[0], cluster_dim=gpu.Dimension.x,
                               cluster_idx=peer, swizzle=128)    # 16384
      mas.wait(barrier[0])                 # the peer's tile has landed in this CTA

  Emits ``mapa.shared::cluster.u32`` (peer form only), ``st.async`` (``v4.b32``,
  ``v2.b32``, ``b32``) or ``red.async``, plain ``st`` / ``red`` ``.shared::cluster`` for
  pieces no asynchronous form carries, ``shfl.sync.bfly`` for sub-word packing, and
  ``mbarrier.arrive.expect_tx{.release.cluster}.shared::cluster.b64``; docs/api.md
  describes each parameter and the emitted PTX at more length.
  """
  from mosaic_async_store.lowering.store import async_store as _impl
  return _impl(value, ref, barrier, cluster_dim=cluster_dim, cluster_idx=cluster_idx,
               swizzle=swizzle, tiling_rank=tiling_rank, optimized=optimized, atomic=atomic,
               expect_tx=expect_tx, strategy=strategy, remote_plain_ok=remote_plain_ok,
               arrival=arrival)


def wait(barrier, *, debug: bool | None = None, expected_bytes: int | None = None,
         max_polls: int = 1 << 20):
  """Waits for ``barrier``'s next phase, with a cluster-scope acquire, so that the
  stores ``async_store`` announced on it (this CTA's or a peer's) are visible.

  Call it in a Mosaic GPU kernel body, as ``async_store``.

  Args:
    barrier: an ``mgpu.BarrierRef`` (one barrier) of the executing CTA, the one the
      stores into this CTA complete on.
    debug: bound the wait and report a barrier that does not complete (None: the
      debug mode's setting, ``MAS_DEBUG=1``).  Without it the wait is unbounded, as on
      hardware.
    expected_bytes: in debug mode, the bytes this CTA expects (printed in the report).
    max_polls: in debug mode, the polls before the wait gives up and reports.

  Returns:
    In debug mode an i32 ``ir.Value``, 1 where the phase completed and 0 where the
    wait gave up (the first thread of the warpgroup has printed the mbarrier's state);
    else None.
  """
  from mosaic_async_store.lowering.debug import wait as _impl
  return _impl(barrier, debug=debug, expected_bytes=expected_bytes, max_polls=max_polls)


def __getattr__(name: str):
  # ``simulate_store`` is public; the executor (and NumPy's ml_dtypes) load on
  # first access, so that a bare import stays light (test/unit/test_import_hygiene.py).
  if name == "simulate_store":
    from mosaic_async_store.plan.executor import simulate_store
    return simulate_store
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(__all__))
