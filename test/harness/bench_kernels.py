"""Bandwidth benchmark kernels (bench/dsmem_bandwidth.py runs them on a GPU): a
warpgroup per CTA stores a register tile into its peer's SMEM ``iters`` times,
one barrier phase per iteration.

Strategies (same data, same barrier protocol, same grid):

* ``mas``: this project's st.async store.
* ``plain``: this project's plan with plain ``st.shared::cluster`` + release arrive.
* ``upstream``: ``FragmentedArray.store_tiled_async`` + upstream Pallas' arrive.
* ``bulk``: the copy engine: local st.shared (this project's plan into its own
  SMEM) + ``fence.proxy.async`` + one ``cp.async.bulk`` to the peer.
* ``local``: local SMEM stores only (no peer, no barrier): the ceiling.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, gpu, nvvm, scf

from extra_ptx import emit_cp_async_bulk_to_cluster, emit_fence_proxy_async_shared, emit_globaltimer
from mosaic_async_store import compat
from mosaic_async_store.demo.config import StoreConfig, resolve_layout
from mosaic_async_store.plan.dtypes import as_dtype
from mosaic_async_store.lowering import debug, ptx
from mosaic_async_store.demo.kernel import (KernelParts, _i32, _load_value, _tid,
                                                 kernel_io, upstream_store)
from mosaic_async_store.lowering.store import async_store
from mosaic_async_store.lowering.target import smem_address, target_rank

__all__ = ["STRATEGIES", "BenchKernel", "bench_kernel_parts", "device_seconds"]

STRATEGIES = ("mas", "plain", "upstream", "bulk", "local")


@dataclasses.dataclass(frozen=True)
class BenchKernel(KernelParts):
  """A benchmark kernel: KernelParts plus the bytes one launch moves.

  The kernel returns ``(flags, times)``: ``flags[c * 128 + t]`` is 1 once thread
  ``t`` of CTA ``c`` finished; ``times`` holds, per CTA, the device clock
  (``%globaltimer``, ns, as two uint64 in an int32 array) read by thread 0
  right after the cluster syncs before and after the timed loop.
  """

  bytes_per_launch: int = 0


def _store_once(strategy, cfg, value, smem, bar, peer):
  if strategy in ("mas", "plain"):
    async_store(value, smem, bar, cluster_dim=gpu.Dimension.x, cluster_idx=peer,
                swizzle=cfg.swizzle, optimized=cfg.optimized,
                strategy="st.async" if strategy == "mas" else "plain")
  elif strategy == "upstream":
    upstream_store(value, smem, bar, peer, cfg)
  else:  # local: the SMEM store ceiling
    async_store(value, smem, bar, swizzle=cfg.swizzle, optimized=cfg.optimized,
                strategy="plain", expect_tx=False)


def bench_kernel_parts(cfg: StoreConfig, strategy: str, *, ctas: int, iters: int) -> BenchKernel:
  """A benchmark kernel of ``ctas`` CTAs in clusters of ``cfg.cluster``."""
  if strategy not in STRATEGIES:
    raise ValueError(f"strategy={strategy!r}: allowed {STRATEGIES}")
  mgpu, utils = compat.mosaic_gpu(), compat.mosaic_utils()
  dt = as_dtype(cfg.dtype)
  layout = resolve_layout(cfg.layout, cfg.shape, cfg.dtype)
  io = kernel_io(cfg)
  tile_bytes = int(jnp.prod(jnp.array(cfg.shape))) * dt.bits // 8
  src = jax.ShapeDtypeStruct((io.src_bytes,), jnp.uint8)
  out = (jax.ShapeDtypeStruct((ctas * 128,), jnp.int32),
         jax.ShapeDtypeStruct((ctas * 4,), jnp.int32))   # per CTA: start, end (u64)
  smem = jax.ShapeDtypeStruct(io.smem_shape, dt.numpy)
  # "bulk" stages locally and copies; "local" needs no arrivals at all, but a
  # barrier of 128 arrivals keeps every strategy's phase logic identical.
  scratch = (smem, smem, mgpu.Barrier(arrival_count=128 if strategy != "bulk" else 1,
                                      num_barriers=1))

  def body(ctx, src_ref, out_ref, times_ref, scratch_refs):
    del ctx
    smem_ref, stage_ref, bar = scratch_refs
    cta = arith.index_cast(ir.IntegerType.get_signless(32), gpu.block_id(gpu.Dimension.x))
    value = _load_value(cfg, utils.memref_ptr(src_ref), layout, io, _i32(0))
    index = ir.IndexType.get()
    peer = arith.remui(arith.addi(gpu.cluster_block_id(gpu.Dimension.x),
                                  arith.constant(index, 1)),
                       arith.constant(index, cfg.cluster))
    nvvm.cluster_arrive(aligned=True)
    nvvm.cluster_wait(aligned=True)
    _record_time(times_ref, cta, 0)
    loop = scf.ForOp(arith.constant(index, 0), arith.constant(index, iters),
                     arith.constant(index, 1))
    with ir.InsertionPoint(loop.body):
      if strategy == "bulk":
        _bulk_iteration(cfg, value, smem_ref, stage_ref, bar[0], peer, tile_bytes)
      else:
        _store_once(strategy, cfg, value, smem_ref, bar[0], peer)
      if strategy != "local":  # cluster scope: the "plain" strategy's stores need it
        debug.wait(bar[0], debug=False)
      scf.yield_([])
    nvvm.cluster_arrive(aligned=True)
    nvvm.cluster_wait(aligned=True)
    _record_time(times_ref, cta, 1)
    off = arith.muli(arith.addi(arith.muli(cta, _i32(128)), arith.andi(_tid(), _i32(127))),
                     _i32(4))
    from jaxlib.mlir.dialects import llvm
    llvm.store(_i32(1), utils.getelementptr(utils.memref_ptr(out_ref), [off],
                                             ir.IntegerType.get_signless(8)))

  return BenchKernel(body, (ctas, 1, 1), (128, 1, 1), (src,), out, scratch,
                     (cfg.cluster, 1, 1), io, bytes_per_launch=ctas * iters * tile_bytes)


def device_seconds(times) -> float:
  """A launch's duration from the kernel's per-CTA ``%globaltimer`` stamps (ns): the
  earliest start to the latest end."""
  stamps = np.asarray(times).view(np.uint64).reshape(-1, 2)
  return float(stamps[:, 1].max() - stamps[:, 0].min()) * 1e-9


def _record_time(times_ref, cta, which: int) -> None:
  """Thread 0 stores the device clock into ``times[cta * 2 + which]`` (u64)."""
  from jaxlib.mlir.dialects import llvm
  utils = compat.mosaic_utils()
  if_op = scf.IfOp(arith.cmpi(arith.CmpIPredicate.eq, _tid(), _i32(0)))
  with ir.InsertionPoint(if_op.then_block):
    off = arith.muli(arith.addi(arith.muli(cta, _i32(2)), _i32(which)), _i32(8))
    llvm.store(emit_globaltimer(), utils.getelementptr(
        utils.memref_ptr(times_ref), [off], ir.IntegerType.get_signless(8)))
    scf.yield_([])


def _bulk_iteration(cfg, value, smem_ref, stage_ref, bar, peer, tile_bytes):
  """Local plain stores into ``stage``, then one thread copies it to the peer."""
  utils = compat.mosaic_utils()
  async_store(value, stage_ref, bar, swizzle=cfg.swizzle, optimized=cfg.optimized,
              strategy="plain", expect_tx=False)
  emit_fence_proxy_async_shared()
  utils.warpgroup_barrier()
  rank = target_rank(gpu.Dimension.x, peer, (cfg.cluster, 1, 1))
  dst = ptx.emit_mapa(smem_address(utils.memref_ptr(smem_ref)), rank)
  peer_bar = ptx.emit_mapa(smem_address(bar.get_ptr()), rank)
  elected = utils.single_thread_predicate(utils.ThreadSubset.WARPGROUP)
  if_op = scf.IfOp(elected)
  with ir.InsertionPoint(if_op.then_block):
    ptx.emit_arrive_expect_tx(peer_bar, _i32(tile_bytes), release_cluster=False, peer=True)
    emit_cp_async_bulk_to_cluster(dst, smem_address(utils.memref_ptr(stage_ref)),
                                      tile_bytes, peer_bar)
    scf.yield_([])
