"""The demo's runtime check: runs a StoreConfig's kernel where jax sees an sm_90 GPU
and compares every CTA's SMEM bytes with the plan executed on the CPU.

``mosaic-async-store demo`` calls ``check_plain_store``.  The GPU tests
(test/harness/gpu_run.py) reuse ``CheckResult`` and ``compare`` and compare with a
model built from the geometry alone instead.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from mosaic_async_store.demo.config import StoreConfig, config_plan, view_offset_bytes
from mosaic_async_store.demo.kernel import build_kernel, kernel_io
from mosaic_async_store.plan.executor import code_bits, execute_plan

__all__ = ["CheckResult", "has_sm90_gpu", "run_kernel", "execute_config",
           "check_plain_store", "compare"]


@dataclasses.dataclass(frozen=True)
class CheckResult:
  """Outcome of one runtime check."""

  config: str
  ok: bool
  mismatched_bytes: int
  barrier_timeouts: int     # threads whose bounded wait gave up
  seconds: float
  detail: str = ""


def has_sm90_gpu() -> bool:
  """True when jax sees a CUDA device of compute capability 9.x."""
  try:
    import jax
    devs = jax.devices("gpu")
  except Exception:  # noqa: BLE001  (no CUDA backend at all)
    return False
  return any(str(getattr(d, "compute_capability", "")).startswith("9") for d in devs)


def run_kernel(cfg: StoreConfig, src: np.ndarray, init: np.ndarray):
  """Runs ``cfg``'s kernel on the GPU: (SMEM bytes of every CTA, every thread's wait
  flag: 0 where its bounded wait gave up)."""
  import jax.numpy as jnp
  kernel = build_kernel(cfg)
  out, flags = kernel(jnp.asarray(src), jnp.asarray(init))
  return np.asarray(out), np.asarray(flags)


def compare(cfg: StoreConfig, out, flags, want, start: float) -> CheckResult:
  """A CheckResult from what the kernel left (``out``, ``flags``) and ``want``."""
  bad = np.flatnonzero(out != want)
  detail = "" if not bad.size else (
      f"first mismatches at bytes {bad[:8].tolist()}: got {out[bad[:8]].tolist()} "
      f"want {want[bad[:8]].tolist()}")
  return CheckResult(cfg.describe(), bool(bad.size == 0 and flags.all()), int(bad.size),
                     int((flags == 0).sum()), time.perf_counter() - start, detail)


def check_plain_store(cfg: StoreConfig, seed: int = 0) -> CheckResult:
  """Runs ``cfg`` (a plain store, no ``atomic``) on random register bytes into
  poisoned SMEM and compares with ``execute_config``: bytes outside the array
  must keep their poison, so a stray write shows."""
  if cfg.atomic is not None:
    raise ValueError(f"check_plain_store checks plain stores; {cfg.describe()} reduces "
                     "(test/harness/gpu_run.py checks reductions with valid operands)")
  start = time.perf_counter()
  rng = np.random.default_rng(seed)
  io = kernel_io(cfg)
  src = rng.integers(0, 256, cfg.cluster * io.src_bytes, dtype=np.uint8)
  init = rng.integers(0, 256, cfg.cluster * io.smem_bytes, dtype=np.uint8)
  out, flags = run_kernel(cfg, src, init)
  return compare(cfg, out, flags, execute_config(cfg, src, init), start)


def execute_config(cfg, src: np.ndarray, init: np.ndarray) -> np.ndarray:
  """Every CTA's SMEM bytes after ``cfg``'s kernel ran, executed on the CPU.

  ``src`` and ``init`` are the kernel's inputs (``kernel.pack_registers`` and
  the initial SMEM, CTA-major); CTA ``c`` stores into ``(c + 1) % cluster``
  (or itself for a local target, CTA 0 for "cta0"), as the kernel does.
  """
  plans = {peer: config_plan(cfg, peer) for peer in (
      (True, False) if cfg.target == "cta0" else (cfg.target == "peer",))}
  first_plan = next(iter(plans.values()))
  regs = first_plan.source_registers
  src = src.reshape(cfg.cluster, -1)
  out = np.array(init, dtype=np.uint8).reshape(cfg.cluster, -1)
  start = view_offset_bytes(cfg)
  for c in range(cfg.cluster):
    if regs.splat:  # the kernel broadcasts the first element into every register
      nbits = first_plan.dtype.bits
      first = np.unpackbits(src[c][:max(1, nbits // 8)], bitorder="little")[:nbits]
      code = (first.astype(np.uint64) << np.arange(nbits, dtype=np.uint64)).sum()
      bits = code_bits(np.full(regs.elements.shape, code, np.uint64), nbits)
      register_bytes = np.packbits(bits, axis=-1, bitorder="little")
    else:
      register_bytes = src[c].reshape(128, regs.num_registers, -1)
    dest = {"local": c, "cta0": 0}.get(cfg.target, (c + 1) % cfg.cluster)
    plan = plans.get(dest != c, first_plan)
    out[dest, start:] = execute_plan(plan, register_bytes, out[dest, start:])
  return out.reshape(-1)
