"""PTX instructions that only tests and benchmarks emit, as LLVM inline asm in the
manner of ``mosaic_async_store.lowering.ptx`` (32-bit shared addresses, ``r``
constraints): a deliberately wrong tx count, the device clock, and the copy
engine's route into a peer's SMEM (the "bulk" benchmark strategy).
"""

from __future__ import annotations

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import llvm

__all__ = ["emit_expect_tx", "emit_globaltimer", "emit_fence_proxy_async_shared",
           "emit_cp_async_bulk_to_cluster"]


def _void():
  return ir.Type.parse("!llvm.void")


def emit_expect_tx(barrier: ir.Value, tx: ir.Value) -> None:
  """``mbarrier.expect_tx.relaxed.cluster.shared::cluster.b64 [$0], $1;``: adds
  ``tx`` expected bytes without an arrival (the debug-mode tests announce a
  deliberately wrong byte count with it)."""
  asm = "mbarrier.expect_tx.relaxed.cluster.shared::cluster.b64 [$0], $1;"
  llvm.inline_asm(_void(), [barrier, tx], asm, "r,r", has_side_effects=True)


def emit_globaltimer() -> ir.Value:
  """``mov.u64 $0, %globaltimer;``: the GPU's nanosecond clock, as an i64.

  The benchmark reads it on the device around the timed loop: JAX has no CUDA
  events, and a host clock would also count launch overhead.
  """
  return llvm.inline_asm(ir.IntegerType.get_signless(64), [], "mov.u64 $0, %globaltimer;",
                         "=l", has_side_effects=True)


def emit_fence_proxy_async_shared() -> None:
  """``fence.proxy.async.shared::cta;``: generic-proxy SMEM writes become visible to
  the async proxy (needed before cp.async.bulk reads what st.shared wrote)."""
  llvm.inline_asm(_void(), [], "fence.proxy.async.shared::cta;", "", has_side_effects=True)


def emit_cp_async_bulk_to_cluster(dst: ir.Value, src: ir.Value, size: int,
                                  barrier: ir.Value) -> None:
  """``cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [$0], [$1], size, [$2];``

  The copy engine moves ``size`` bytes (multiple of 16, 16-byte aligned) from
  this CTA's SMEM to a peer's, completing on the peer's barrier.
  """
  asm = ("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes "
         f"[$0], [$1], {size}, [$2];")
  llvm.inline_asm(_void(), [dst, src, barrier], asm, "r,r,r", has_side_effects=True)
