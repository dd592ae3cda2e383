"""How fast the PTX checker runs a real kernel: the demo store kernel on 2 and 4 CTAs.

For each cluster size the demo configuration's full kernel (SMEM initialisation,
cluster barrier, register loads, the asynchronous store into the peer, the wait,
the copy-out; ``StoreConfig(cluster=N)``) is compiled to PTX once, then run by
``mosaic_async_store.check.PtxKernel`` under each schedule ``--reps`` times.  Every
run's SMEM bytes are compared with ``demo.check.execute_config`` (so a fast wrong
checker fails here, it does not score).  Reported per cluster size: the median
wall time of one schedule's run, the thread-instructions it executed (every
instruction of every thread, counted by the interpreter) and thread-instructions
per second.  Writes nothing unless ``--json PATH`` is given.

  python bench/checker_speed.py [--reps 5] [--schedules 0 1 2] [--json out.json]

docs/benchmarks.md ("Checker speed") has the method, the machine and the numbers.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np

__all__ = ["demo_kernel", "run_once", "main"]


def demo_kernel(cluster: int):
  """(StoreConfig, PTX, inputs) of the demo store kernel on ``cluster`` CTAs."""
  from jaxlib.mlir import ir
  from mosaic_async_store import compat
  from mosaic_async_store.demo.config import StoreConfig
  from mosaic_async_store.demo.kernel import build_store_module, kernel_io
  from mosaic_async_store.plan.dtypes import as_dtype
  from mosaic_async_store.tools import toolchain
  cfg = StoreConfig(cluster=cluster)
  with compat.make_ir_context(), ir.Location.unknown():
    module, io = build_store_module(cfg)
    ptx = toolchain.mlir_to_ptx(module)
  rng = np.random.default_rng(0)
  src = rng.integers(0, 256, cluster * io.src_bytes, dtype=np.uint8)
  init = rng.integers(0, 256, cluster * io.smem_bytes, dtype=np.uint8)
  alloc = int(np.prod(io.smem_shape)) * as_dtype(cfg.dtype).bits // 8
  smem_bytes = alloc + (-alloc % 8) + 8   # the tile, a pad to 8 bytes, the mbarrier
  return cfg, ptx, (src, init, smem_bytes)


def run_once(cfg, ptx, inputs, schedule: int) -> tuple[float, int]:
  """(seconds, thread-instructions) of one checked run; raises if a byte is wrong."""
  from mosaic_async_store.check.interp import PtxKernel
  from mosaic_async_store.demo.check import execute_config
  from mosaic_async_store.demo.kernel import kernel_io
  src, init, smem_bytes = inputs
  io = kernel_io(cfg)
  out = np.full(cfg.cluster * io.smem_bytes, 0xA5, np.uint8)
  flags = np.full(cfg.cluster * 128, -1, np.int32)
  kernel = PtxKernel(ptx)
  start = time.perf_counter()
  _, _, flags, out = kernel.launch([init, src, flags, out], cluster=cfg.cluster,
                                   smem_bytes=smem_bytes, schedule=schedule)
  seconds = time.perf_counter() - start
  if not (out == execute_config(cfg, src, init)).all() or not (flags.view(np.int32) == 1).all():
    raise SystemExit(f"cluster {cfg.cluster} schedule {schedule}: wrong bytes or flags")
  return seconds, getattr(kernel, "executed", 0)   # (absent before the counter existed)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--reps", type=int, default=5, help="runs per schedule (default 5)")
  parser.add_argument("--schedules", type=int, nargs="+", default=[0, 1, 2],
                      help="schedule seeds (default: 0 1 2, the CI schedules)")
  parser.add_argument("--clusters", type=int, nargs="+", default=[2, 4],
                      help="cluster sizes (default: 2 4)")
  parser.add_argument("--json", help="also write the numbers to this file")
  args = parser.parse_args(argv)
  if args.reps < 1:
    parser.error(f"--reps {args.reps}: must be at least 1")
  rows = []
  for cluster in args.clusters:
    cfg, ptx, inputs = demo_kernel(cluster)
    for schedule in args.schedules:
      runs = [run_once(cfg, ptx, inputs, schedule) for _ in range(args.reps)]
      seconds = statistics.median(s for s, _ in runs)
      instructions = runs[0][1]
      rows.append({"cluster": cluster, "schedule": schedule, "seconds": seconds,
                   "thread_instructions": instructions,
                   "per_second": instructions / seconds})
      print(f"cluster {cluster} schedule {schedule}: {seconds:.3f} s, "
            f"{instructions} thread-instructions, {instructions / seconds:,.0f}/s")
  if args.json:
    import jax
    meta = {"python": sys.version.split()[0], "jax": jax.__version__,
            "machine": platform.machine(), "processor": platform.processor(),
            "reps": args.reps}
    with open(args.json, "w") as f:
      json.dump({"meta": meta, "rows": rows}, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
