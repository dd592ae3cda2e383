"""Debug mode: waits that give up and say why, instead of hanging the GPU.

``wait(barrier, debug=True)`` (or ``MAS_DEBUG=1`` in the environment) polls the
barrier a bounded number of times; if the phase never completes, one thread
per warpgroup prints which barrier (its SMEM address and phase), how many bytes
this CTA expected, and the raw 64-bit mbarrier word (which holds the pending
arrival and transaction counts), in the spirit of Triton's ConSan tx checks.
It returns an i32 flag (1: completed, 0: gave up) the kernel can branch on.
Without debug it is upstream's ``barrier.wait()`` (same parity bookkeeping,
same polling loop) with a cluster-scope acquire.

Both waits are ``mbarrier.try_wait.parity.acquire.cluster``: a store may
carry pieces as plain ``st``/``red .shared::cluster`` from another CTA ordered
by a ``.release.cluster`` arrive, and only an acquire whose scope includes
that CTA synchronizes with it (PTX ISA, Memory Consistency Model: morally
strong operations; upstream's wait is the default ``.acquire.cta``).
"""

from __future__ import annotations

import os

from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, llvm, memref, scf

from mosaic_async_store import compat
from mosaic_async_store.lowering import ptx
from mosaic_async_store.lowering.target import smem_address

__all__ = ["wait", "debug_enabled", "DEFAULT_POLLS"]

DEFAULT_POLLS = 1 << 20
_SUSPEND_TICKS = 10_000_000   # try_wait's suspend-time hint, as upstream's wait passes


def debug_enabled(debug: bool | None = None) -> bool:
  """``debug`` if given, else the MAS_DEBUG environment variable."""
  if debug is not None:
    return bool(debug)
  return os.environ.get("MAS_DEBUG", "") not in ("", "0", "false", "False")


def wait(barrier, *, debug: bool | None = None, expected_bytes: int | None = None,
         max_polls: int = DEFAULT_POLLS) -> ir.Value | None:
  """Waits for ``barrier``'s next phase with a cluster-scope acquire; bounded
  and reporting in debug mode (returns the i32 flag), else unbounded (None)."""
  utils = compat.mosaic_utils()
  i32 = ir.IntegerType.get_signless(32)
  parities = memref.load(barrier.phases, [])
  parity, new_parities = barrier.update_parities(parities)
  memref.store(new_parities, barrier.phases, [])
  parity32 = arith.extui(i32, parity)
  bar = smem_address(barrier.get_ptr())
  if not debug_enabled(debug):
    ptx.emit_wait_parity_cluster(bar, parity32, arith.constant(i32, _SUSPEND_TICKS))
    return None
  done = ptx.emit_bounded_wait(bar, parity32, max_polls)
  failed = arith.cmpi(arith.CmpIPredicate.eq, done, arith.constant(i32, 0))
  first = utils.single_thread_predicate(utils.ThreadSubset.WARPGROUP)
  report = scf.IfOp(arith.andi(failed, first))
  with ir.InsertionPoint(report.then_block):
    raw = llvm.load(ir.IntegerType.get_signless(64), barrier.get_ptr())
    expected = arith.constant(i32, -1 if expected_bytes is None else expected_bytes)
    compat.gpu_printf("mosaic-async-store: barrier at smem 0x%x did not complete phase %u "
               f"within {max_polls} polls; this CTA expected %d bytes (-1: unknown); "
               "raw mbarrier word 0x%llx\n", bar, parity32, expected, raw)
    scf.yield_([])
  return done
