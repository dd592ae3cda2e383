"""Runs store kernels on a GPU and compares the received bytes with the
geometry-only model (``hostdata.expected_smem``).

Used by test/gpu and scripts/gpu_check.sh.  As a script it runs a batch of
configurations and writes one JSON line per finished configuration, so that a
hang or crash (killed by the caller's timeout) still leaves the results of
everything before it:

    python test/harness/gpu_run.py --batch configs.json --out results.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import numpy as np

import hostdata
from mosaic_async_store import compat
from mosaic_async_store.demo.check import CheckResult, compare, has_sm90_gpu
from mosaic_async_store.demo.config import StoreConfig
from mosaic_async_store.demo.kernel import kernel_io, pack_registers
from store_kernels import VariantKernel

__all__ = ["CheckResult", "has_sm90_gpu", "run_and_check", "make_inputs", "build_kernel",
           "announce_extra_bytes"]


def make_inputs(cfg: StoreConfig, seed: int):
  """Random register codes per CTA, packed src, and the poisoned/initial SMEM."""
  rng = np.random.default_rng(seed)
  io = kernel_io(cfg)
  codes = [hostdata.random_codes(cfg, rng) for _ in range(cfg.cluster)]
  src = pack_registers(cfg, codes)
  init = rng.integers(0, 256, cfg.cluster * io.smem_bytes, dtype=np.uint8)  # poison
  if cfg.atomic:  # reductions need valid starting values inside the array
    plain = dataclasses.replace(cfg, atomic=None, target="local")  # each CTA its own array
    init = hostdata.expected_smem(plain, [hostdata.random_codes(cfg, rng)] * cfg.cluster, init)
  return codes, src, init


def announce_extra_bytes(cfg: StoreConfig, nbytes: int):
  """An ``after_store`` step for ``store_kernels.kernel_parts``: thread 0 announces ``nbytes``
  that never arrive on the target barrier (a deliberately wrong count, which the
  debug-mode wait must report instead of hanging)."""
  from jaxlib.mlir import ir
  from jaxlib.mlir.dialects import arith, gpu, scf
  from extra_ptx import emit_expect_tx
  from mosaic_async_store.lowering import ptx
  from mosaic_async_store.lowering.target import smem_address, target_rank

  def hook(bar, peer):
    utils = compat.mosaic_utils()
    addr = smem_address(bar.get_ptr())
    if cfg.target == "peer":
      addr = ptx.emit_mapa(addr, target_rank(gpu.Dimension.x, peer, (cfg.cluster, 1, 1)))
    if_op = scf.IfOp(utils.single_thread_predicate(utils.ThreadSubset.WARPGROUP))
    with ir.InsertionPoint(if_op.then_block):
      emit_expect_tx(addr, arith.constant(ir.IntegerType.get_signless(32), nbytes))
      scf.yield_([])
  return hook


def build_kernel(cfg: StoreConfig, tx_error: int = 0):
  """``cfg``'s kernel as a jax callable, announcing ``tx_error`` extra bytes if nonzero."""
  hook = announce_extra_bytes(cfg, tx_error) if tx_error else None
  return VariantKernel(cfg, after_store=hook).gpu_kernel()


def run_and_check(cfg: StoreConfig, seed: int = 0, tx_error: int = 0) -> CheckResult:
  """Builds, runs and checks one configuration (needs an sm_90 GPU) against
  ``hostdata.expected_smem`` (the geometry-only model).

  ``tx_error`` announces extra bytes that never arrive: the result then must
  show barrier timeouts (the debug-mode wait gave up) rather than hang.
  """
  start = time.perf_counter()
  codes, src, init = make_inputs(cfg, seed)
  import jax.numpy as jnp
  out, flags = build_kernel(cfg, tx_error)(jnp.asarray(src), jnp.asarray(init))
  return compare(cfg, np.asarray(out), np.asarray(flags),
                 hostdata.expected_smem(cfg, codes, init), start)


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
