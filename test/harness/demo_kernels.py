"""The demo's store kernels (``StoreConfig``) run in the PTX checker, and what their
store instructions cost in shared-memory wavefronts.

``run_ptx`` launches a configuration's full kernel (SMEM init, cluster sync,
register loads, the store, bounded wait, copy-out) with the inputs of
``gpu_run.make_inputs`` (``full_kernel_args``), for a run that must break no rule; a
test that wants a kernel's findings launches it with ``full_kernel_args`` and
``launch_options``.  ``traced_wavefronts`` prices the store instructions that
a traced run executed with the planner's bank model (``verify.bank_wavefronts``),
so that any kernel, upstream's included, is measured by the same model as our
plans are (``cost_measure`` uses it for both implementations).
"""

from __future__ import annotations

import numpy as np

import hostdata
from gpu_run import make_inputs
from mosaic_async_store.demo.config import StoreConfig, resolve_layout
from mosaic_async_store.demo.kernel import kernel_io
from mosaic_async_store.plan.dtypes import as_dtype
from mosaic_async_store.plan.geometry import WARP_SIZE, register_map
from mosaic_async_store.plan.verify import bank_wavefronts

from mosaic_async_store.check.interp import PtxKernel

__all__ = ["full_kernel_args", "launch_options", "run_ptx", "run_cost_kernel",
           "traced_wavefronts"]


def _poison_spare_bits(cfg, src):
  """A register narrower than a byte sits in the low bits of its byte and the
  kernel must ignore the rest (demo/kernel.py's _load_value truncates): fill the spare
  bits with random ones, so that a kernel that does not mask them shows."""
  regs = register_map(resolve_layout(cfg.layout, cfg.shape, cfg.dtype), cfg.shape)
  reg_bits = regs.vector_length * as_dtype(cfg.dtype).bits
  if regs.splat or reg_bits >= 8:
    return src
  noise = np.random.default_rng(1).integers(0, 256, src.size, dtype=np.uint8)
  return src | (noise & np.uint8(0xFF ^ ((1 << reg_bits) - 1)))


def _smem_bytes(cfg: StoreConfig) -> int:
  """Dynamic SMEM as ``StoreKernel.parts`` lays it out: the buffer, a pad to 8 bytes, the
  8-byte barrier.  Anything the kernel touches beyond it is an error."""
  alloc = int(np.prod(kernel_io(cfg).smem_shape)) * as_dtype(cfg.dtype).bits // 8
  return alloc + (-alloc % 8) + 8


def full_kernel_args(cfg: StoreConfig) -> tuple[list[np.ndarray], np.ndarray]:
  """``cfg``'s full kernel's arguments in its parameter order (init, src, flags, out:
  bytes and flags the kernel never writes show) and the SMEM bytes it must leave in
  ``out`` (``hostdata.expected_smem``)."""
  codes, src, init = make_inputs(cfg, seed=0)
  src = _poison_spare_bits(cfg, src)
  io = kernel_io(cfg)
  out0 = np.full(cfg.cluster * io.smem_bytes, 0xA5, np.uint8)   # unwritten bytes show
  flags0 = np.full(cfg.cluster * 128, -1, np.int32)             # unwritten flags show
  return [init, src, flags0, out0], hostdata.expected_smem(cfg, codes, init)


def launch_options(cfg: StoreConfig, schedule=0, cluster=None, **kwargs) -> dict:
  """``PtxKernel.launch``'s keywords for ``cfg``'s kernel under ``schedule`` (on
  ``cluster`` CTAs, default cfg's; its SMEM: ``_smem_bytes``), and ``kwargs``."""
  return dict(cluster=cluster or cfg.cluster, smem_bytes=_smem_bytes(cfg),
              schedule=schedule, **kwargs)


def _no_findings(cfg: StoreConfig, found) -> None:
  """Raises AssertionError naming ``found`` (a run's findings) where there is one."""
  if found:
    raise AssertionError(f"{cfg.describe()}: the run broke a rule: "
                         + "; ".join(f.explained for f in found))


def run_ptx(cfg: StoreConfig, ptx: str, schedule=0, cluster=None, *, trace_stores=False):
  """Runs ``ptx`` as ``cfg``'s kernel under ``schedule`` (on ``cluster`` CTAs,
  default cfg's); returns (out, flags, want, interpreter).  Raises AssertionError where
  the run broke a rule (its findings: ``full_kernel_args`` and ``launch_options``
  launch a kernel that must break one)."""
  args, want = full_kernel_args(cfg)
  kernel = PtxKernel(ptx)
  outputs, found = kernel.launch(args, **launch_options(cfg, schedule, cluster,
                                                        trace_stores=trace_stores))
  _no_findings(cfg, found)
  _, _, flags, out = outputs
  return out, flags.view(np.int32), want, kernel


def traced_wavefronts(trace: dict, cta: int = 0) -> int:
  """Shared-memory wavefronts of CTA ``cta``'s store instructions in ``trace``
  (``PtxKernel.store_trace``).

  A warp's k-th traced store of each thread is one SIMT instruction (the store
  code of both implementations is straight-line: no thread skips a store that its
  warp-mates execute, so the k-th stores line up); it is priced by
  ``verify.bank_wavefronts`` on the byte offsets in the destination CTA, as the
  planner prices its own plan.  Raises if a warp's k-th stores differ in width.
  """
  tids = sorted(t for c, t in trace if c == cta)
  total = 0
  for w in range(0, len(tids), WARP_SIZE):
    lanes = [trace[(cta, t)] for t in tids[w:w + WARP_SIZE]]
    for k in range(max(map(len, lanes))):
      step = [lane[k] for lane in lanes if k < len(lane)]
      widths = {n for _, _, n in step}
      if len(widths) != 1:
        raise ValueError(f"warp {w // WARP_SIZE} store {k}: widths {sorted(widths)} differ")
      total += bank_wavefronts(np.array([off for _, off, _ in step]), widths.pop())
  return total


def run_cost_kernel(cfg: StoreConfig, ptx: str, schedule=0, *, findings_ok=False):
  """Runs ``ptx``, ``cfg``'s cost kernel (``store_kernels.CostKernel``: register
  loads, the store, the bounded wait; parameters ``src`` and ``flags``), with each
  CTA's SMEM starting as the full kernel's ``init`` would leave it and its store
  instructions traced; raises AssertionError unless the run broke no rule and the bytes
  in every CTA's SMEM and every wait flag are right.  Returns the interpreter.
  ``findings_ok``: a run that broke a rule returns the interpreter instead, unchecked
  (its ``findings`` say which)."""
  codes, src, init = make_inputs(cfg, seed=0)
  io = kernel_io(cfg)
  per_cta = init.reshape(cfg.cluster, -1)
  kernel = PtxKernel(ptx)
  outputs, found = kernel.launch(
      [_poison_spare_bits(cfg, src), np.full(cfg.cluster * 128, -1, np.int32)],
      cluster=cfg.cluster, smem_bytes=_smem_bytes(cfg), schedule=schedule,
      trace_stores=True, smem_init=list(per_cta))
  if found and findings_ok:
    return kernel
  _no_findings(cfg, found)
  _, flags = outputs
  got = np.concatenate([np.frombuffer(bytes(b[:io.smem_bytes]), np.uint8) for b in kernel.machine.smem])
  if (got != hostdata.expected_smem(cfg, codes, init)).any():
    raise AssertionError(f"{cfg.describe()}: the kernel's bytes are wrong")
  if not (flags.view(np.int32) == 1).all():
    raise AssertionError(f"{cfg.describe()}: a wait did not complete")
  return kernel
