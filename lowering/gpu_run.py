"""Runs store kernels on a GPU and compares the received bytes with NumPy.

Used by ``mosaic-async-store demo`` (when a GPU is present), by test/gpu and by
scripts/gpu_check.sh.  As a module it runs a batch of configurations and writes
one JSON line per finished configuration, so that a hang or crash (killed by
the caller's timeout) still leaves the results of everything before it:

    python -m mosaic_async_store.lowering.gpu_run --batch configs.json --out results.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import numpy as np

from mosaic_async_store import compat, hostdata
from mosaic_async_store.config import StoreConfig

__all__ = ["CheckResult", "has_sm90_gpu", "run_and_check", "make_inputs"]


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


def make_inputs(cfg: StoreConfig, seed: int):
  """Random register codes per CTA, packed src, and the poisoned/initial SMEM."""
  from mosaic_async_store.lowering.kernels import kernel_io
  rng = np.random.default_rng(seed)
  io = kernel_io(cfg)
  codes = [hostdata.random_codes(cfg, rng) for _ in range(cfg.cluster)]
  src = hostdata.pack_registers(cfg, codes)
  init = rng.integers(0, 256, cfg.cluster * io.smem_bytes, dtype=np.uint8)  # poison
  if cfg.atomic:  # reductions need valid starting values inside the array
    plain = dataclasses.replace(cfg, atomic=None, target="local")  # each CTA its own array
    init = hostdata.expected_smem(plain, [hostdata.random_codes(cfg, rng)] * cfg.cluster, init)
  return codes, src, init


def build_kernel(cfg: StoreConfig, tx_error: int = 0):
  from jaxlib.mlir import ir
  from mosaic_async_store.lowering.kernels import kernel_parts
  mgpu = compat.mosaic_gpu()
  with compat.enable_x64(), compat.make_ir_context(), ir.Location.unknown():
    p = kernel_parts(cfg, tx_error=tx_error)
    return mgpu.as_gpu_kernel(p.body, p.grid, p.block, p.in_shape, p.out_shape, p.scratch,
                              cluster=p.cluster)


def run_and_check(cfg: StoreConfig, seed: int = 0, tx_error: int = 0) -> CheckResult:
  """Builds, runs and checks one configuration (needs an sm_90 GPU).

  ``tx_error`` announces extra bytes that never arrive: the result then must
  show barrier timeouts (the debug-mode wait gave up) rather than hang.
  """
  import jax.numpy as jnp
  start = time.perf_counter()
  codes, src, init = make_inputs(cfg, seed)
  kernel = build_kernel(cfg, tx_error)
  out, flags = kernel(jnp.asarray(src), jnp.asarray(init))
  out, flags = np.asarray(out), np.asarray(flags)
  want = hostdata.expected_smem(cfg, codes, init)
  bad = np.flatnonzero(out != want)
  detail = "" if not bad.size else (
      f"first mismatches at bytes {bad[:8].tolist()}: got {out[bad[:8]].tolist()} "
      f"want {want[bad[:8]].tolist()}")
  return CheckResult(cfg.describe(), bool(bad.size == 0 and flags.all()), int(bad.size),
                     int((flags == 0).sum()), time.perf_counter() - start, detail)


def _config_from_json(d: dict) -> StoreConfig:
  d = dict(d)
  d["shape"] = tuple(d["shape"])
  return StoreConfig(**d)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", required=True, help="JSON list of StoreConfig dicts")
  parser.add_argument("--out", required=True, help="JSON-lines results file (appended)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--tx-error", type=int, default=0,
                      help="announce this many extra bytes (debug-mode test)")
  args = parser.parse_args(argv)
  with open(args.batch) as f:
    configs = [_config_from_json(d) for d in json.load(f)]
  failures = 0
  for cfg in configs:
    try:
      res = run_and_check(cfg, args.seed, args.tx_error)
    except Exception as e:  # noqa: BLE001  (record and go on with the batch)
      res = CheckResult(cfg.describe(), False, -1, -1, 0.0, f"{type(e).__name__}: {e}"[:500])
    failures += not res.ok
    with open(args.out, "a") as f:
      f.write(json.dumps(dataclasses.asdict(res)) + "\n")
    print(("PASS " if res.ok else "FAIL ") + res.config + (" " + res.detail if res.detail else ""),
          flush=True)
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main())
