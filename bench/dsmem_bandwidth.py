"""Bandwidth of stores into a peer CTA's shared memory, all SMs busy.

For each configuration (dtype, tile, cluster size) and strategy (this
project's st.async, plain st.shared::cluster, upstream's store_tiled_async,
the copy engine via cp.async.bulk, and local SMEM stores as the ceiling), one
kernel runs ``--iters`` store+wait rounds per CTA on ``--ctas-per-sm`` CTAs per
SM.  Timing: on the device (JAX has no CUDA events): thread 0 of every CTA reads
``%globaltimer`` after a cluster sync before and after the loop; a launch takes
from the earliest start to the latest end.  One warm-up launch, then the median
of ``--repeats`` launches; the host wall clock around ``block_until_ready`` is
kept beside it.  Bytes counted = CTAs x iterations x tile bytes.  The kernels are
test/harness/bench_kernels.py's (``harness_path`` puts test/harness on sys.path).

    python bench/dsmem_bandwidth.py --out bench.json          # on an sm_90 GPU
    python bench/dsmem_bandwidth.py --dry-run                 # CPU: compile only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

import harness_path  # noqa: F401  (test/harness on sys.path)
from bench_kernels import STRATEGIES, bench_kernel_parts, device_seconds
from mosaic_async_store import compat
from mosaic_async_store.demo.config import StoreConfig

CONFIGS = [
    StoreConfig(dtype="bfloat16", shape=(64, 128)),
    StoreConfig(dtype="bfloat16", shape=(128, 256)),
    StoreConfig(dtype="float32", shape=(64, 256), optimized=False),
    StoreConfig(dtype="float32", layout="TMEM_NATIVE_V4", shape=(128, 128)),
    StoreConfig(dtype="int8", shape=(128, 256)),
    StoreConfig(dtype="bfloat16", shape=(64, 128), cluster=4),
    StoreConfig(dtype="bfloat16", shape=(128, 256), cluster=4),
]


def _build(cfg, strategy, ctas, iters):
  from jaxlib.mlir import ir
  with compat.enable_x64(), compat.make_ir_context(), ir.Location.unknown():
    k = bench_kernel_parts(cfg, strategy, ctas=ctas, iters=iters)
    return k.gpu_kernel(), k


def _compile_only(cfg, strategy, ctas, iters):
  from jaxlib.mlir import ir
  from mosaic_async_store.tools import toolchain
  with compat.enable_x64(), compat.make_ir_context(), ir.Location.unknown():
    k = bench_kernel_parts(cfg, strategy, ctas=ctas, iters=iters)
    return toolchain.compile_module(k.module()).stats


def _time(fn, src, repeats):
  """(median device seconds, median wall seconds, flags of the last launch)."""
  flags, times = fn(src)
  flags.block_until_ready()  # warm-up (and compile)
  device, wall = [], []
  for _ in range(repeats):
    t = time.perf_counter()
    flags, times = fn(src)
    flags.block_until_ready()
    wall.append(time.perf_counter() - t)
    device.append(device_seconds(times))
  return statistics.median(device), statistics.median(wall), np.asarray(flags)


def run(args) -> list[dict]:
  import jax.numpy as jnp
  rows = []
  sms = args.sms
  for cfg in CONFIGS:
    ctas = sms * args.ctas_per_sm // cfg.cluster * cfg.cluster
    for strategy in args.strategies:
      row = dict(strategy=strategy, dtype=cfg.dtype, shape="x".join(map(str, cfg.shape)),
                 layout=cfg.layout, cluster=cfg.cluster, ctas=ctas, iters=args.iters)
      try:
        if args.dry_run:
          stats = _compile_only(cfg, strategy, ctas, args.iters)
          row.update(status="compiled", registers=stats.registers)
        else:
          fn, k = _build(cfg, strategy, ctas, args.iters)
          src = jnp.asarray(np.random.default_rng(0).integers(
              1, 256, k.in_shape[0].shape, dtype=np.uint8))
          median, wall, flags = _time(fn, src, args.repeats)
          row.update(status="ok" if flags.all() else "incomplete", median_s=median,
                     wall_s=wall, bytes=k.bytes_per_launch,
                     gbps=round(k.bytes_per_launch / median / 1e9, 1),
                     gbps_wall=round(k.bytes_per_launch / wall / 1e9, 1))
      except Exception as e:  # noqa: BLE001  (upstream refuses some configs)
        row.update(status="refused", error=f"{type(e).__name__}: {e}"[:200])
      rows.append(row)
      print(json.dumps(row), flush=True)
  return rows


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", help="write {'rows': [...]} JSON here")
  parser.add_argument("--dry-run", action="store_true", help="compile only (no GPU)")
  parser.add_argument("--iters", type=int, default=200)
  parser.add_argument("--repeats", type=int, default=10)
  parser.add_argument("--sms", type=int, default=132, help="SMs on the GPU (H100/H200: 132)")
  parser.add_argument("--ctas-per-sm", type=int, default=1)
  parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
  args = parser.parse_args(argv)
  rows = run(args)
  if args.out:
    import jax
    meta = dict(jax=jax.__version__, devices=[str(d) for d in jax.devices()],
                date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                method=__doc__.split("\n\n")[1].replace("\n", " "), argv=sys.argv)
    with open(args.out, "w") as f:
      json.dump(dict(meta=meta, rows=rows), f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
