"""How fast the PTX checker runs real kernels: the demo store kernel on 2 and 4 CTAs, and
a 384-thread pipeline with a loop.

For each cluster size the demo configuration's full kernel (SMEM initialisation,
cluster barrier, register loads, the asynchronous store into the peer, the wait,
the copy-out; ``StoreConfig(cluster=N)``) is compiled to PTX once, then run by
``mosaic_async_store.check.PtxKernel`` under each schedule ``--reps`` times.  Every
run's SMEM bytes are compared with ``demo.check.execute_config`` (so a fast wrong
checker fails here, it does not score).  Reported per cluster size: the median
wall time of one schedule's run, the thread-instructions it executed (every
instruction of every thread, counted by the interpreter) and thread-instructions
per second.  The pipeline (``pipeline_kernel``): one CTA of three warpgroups,
warpgroup 0 producing into a two-slot SMEM ring and warpgroups 1 and 2 consuming, with
a full and an empty mbarrier per slot and ``--iters`` iterations of a loop with
``try_wait`` polls, as a Pallas pipeline is built; its output is checked against
NumPy the same way.  Writes nothing unless ``--json PATH`` is given.

  python bench/checker_speed.py [--reps 5] [--best] [--schedules 0 1 2] [--json out.json]
  python bench/checker_speed.py --by-opcode [--clusters 2] [--schedules 0] [--iters 8]
  python bench/checker_speed.py --hopper-matmul [--reps 3] [--json out.json]

docs/benchmarks.md ("Checker speed") has the method, the machine and the numbers.  Real
Pallas TMA kernels (``emit_pipeline``, the warp-specialised pipelined copy) next to jax's
interpret mode: bench/checker_real_kernels.py.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time

import numpy as np

__all__ = ["demo_kernel", "run_once", "pipeline_kernel", "run_pipeline", "by_opcode",
           "hopper_matmul", "main"]

# The pipeline: 384 threads; ring of 2 slots x 128 words at SMEM 0, full[2] at 1024
# (count 128: the producers), empty[2] at 1040 (count 256: the consumers).
_PIPELINE = """.version 8.6
.target sm_90a
.address_size 64
.visible .entry pipeline(
  .param .u64 pipeline_param_0
)
{
  .reg .pred %p<4>;
  .reg .b32 %r<32>;
  .reg .b64 %rd<8>;
  .shared .align 16 .b8 __dynamic_shmem__0;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, __dynamic_shmem__0;
  add.u32 %r3, %r2, 1024;
  add.u32 %r4, %r2, 1040;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra INIT_DONE;
  mbarrier.init.shared::cta.b64 [%r3], 128;
  add.u32 %r5, %r3, 8;
  mbarrier.init.shared::cta.b64 [%r5], 128;
  mbarrier.init.shared::cta.b64 [%r4], 256;
  add.u32 %r5, %r4, 8;
  mbarrier.init.shared::cta.b64 [%r5], 256;
INIT_DONE:
  bar.sync 0;
  mov.u32 %r10, 0;
  mov.u32 %r11, 0;
  setp.ge.u32 %p3, %r1, 128;
  and.b32 %r12, %r1, 127;
  shl.b32 %r13, %r12, 2;
LOOP:
  and.b32 %r14, %r10, 1;
  shr.u32 %r15, %r10, 1;
  and.b32 %r15, %r15, 1;
  shl.b32 %r16, %r14, 3;
  add.u32 %r17, %r3, %r16;
  add.u32 %r18, %r4, %r16;
  shl.b32 %r19, %r14, 9;
  add.u32 %r19, %r19, %r13;
  add.u32 %r19, %r19, %r2;
  @%p3 bra CONSUME;
  xor.b32 %r20, %r15, 1;
WAIT_EMPTY:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r18], %r20;
  @!%p2 bra WAIT_EMPTY;
  mul.lo.u32 %r21, %r10, 1000;
  add.u32 %r21, %r21, %r12;
  st.shared.u32 [%r19], %r21;
  mbarrier.arrive.shared::cta.b64 %rd1, [%r17];
  bra NEXT;
CONSUME:
  mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r17], %r15;
  @!%p2 bra CONSUME;
  ld.shared.u32 %r22, [%r19];
  add.u32 %r11, %r11, %r22;
  mbarrier.arrive.shared::cta.b64 %rd1, [%r18];
NEXT:
  add.u32 %r10, %r10, 1;
  setp.lt.u32 %p2, %r10, {iters};
  @%p2 bra LOOP;
  @!%p3 bra DONE;
  ld.param.u64 %rd2, [pipeline_param_0];
  cvta.to.global.u64 %rd2, %rd2;
  sub.u32 %r23, %r1, 128;
  mul.wide.u32 %rd3, %r23, 4;
  add.s64 %rd4, %rd2, %rd3;
  st.global.u32 [%rd4], %r11;
DONE:
  ret;
}
"""


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


def run_once(cfg, ptx, inputs, schedule: int, prepare=None) -> tuple[float, int]:
  """(seconds, thread-instructions) of one checked run; raises if it broke a rule or a
  byte is wrong.
  ``prepare(kernel)``, if given, runs on the parsed kernel before the launch."""
  from mosaic_async_store.check.interp import PtxKernel
  from mosaic_async_store.demo.check import execute_config
  from mosaic_async_store.demo.kernel import kernel_io
  src, init, smem_bytes = inputs
  io = kernel_io(cfg)
  out = np.full(cfg.cluster * io.smem_bytes, 0xA5, np.uint8)
  flags = np.full(cfg.cluster * 128, -1, np.int32)
  kernel = PtxKernel(ptx)
  if prepare is not None:
    prepare(kernel)
  seconds, (_, _, flags, out) = _timed_launch(
      kernel, [init, src, flags, out], f"cluster {cfg.cluster} schedule {schedule}",
      cluster=cfg.cluster, smem_bytes=smem_bytes, schedule=schedule)
  if not (out == execute_config(cfg, src, init)).all() or not (flags.view(np.int32) == 1).all():
    raise SystemExit(f"cluster {cfg.cluster} schedule {schedule}: wrong bytes or flags")
  return seconds, getattr(kernel, "executed", 0)   # (absent before the counter existed)


def _timed_launch(kernel, buffers, what: str, **kwargs):
  """(seconds, outputs) of one launch of ``kernel`` (``PtxKernel.launch``'s keywords);
  exits naming ``what`` and the first finding where the run broke a rule."""
  start = time.perf_counter()
  outputs, found = kernel.launch(buffers, **kwargs)
  seconds = time.perf_counter() - start
  if found:
    raise SystemExit(f"{what}: {found[0].explained}")
  return seconds, outputs


def pipeline_kernel(iters: int) -> str:
  """The PTX of the 384-thread pipeline (module doc) with ``iters`` iterations."""
  return _PIPELINE.replace("{iters}", str(iters))


def run_pipeline(ptx, iters: int, schedule: int, prepare=None) -> tuple[float, int]:
  """(seconds, thread-instructions) of one checked run of the pipeline; raises if it
  broke a rule or a consumer's sum is wrong.  ``prepare``: as ``run_once``'s."""
  from mosaic_async_store.check.interp import PtxKernel
  kernel = PtxKernel(ptx)
  if prepare is not None:
    prepare(kernel)
  seconds, [out] = _timed_launch(kernel, [np.zeros(256, np.uint32)],
                                 f"pipeline schedule {schedule}", cluster=1, smem_bytes=1056,
                                 block=384, schedule=schedule)
  column = np.arange(256) % 128
  want = sum(i * 1000 + column for i in range(iters)).astype(np.uint32)
  if not (out.view(np.uint32) == want).all():
    raise SystemExit(f"pipeline schedule {schedule}: wrong sums")
  return seconds, kernel.executed


def _timed_opcodes(totals):
  """A ``prepare`` for ``run_once`` that wraps each instruction's function and warp form
  (``Program.code`` / ``vcode``) to add its wall time to ``totals[opcode]``."""
  clock = time.perf_counter
  def timed(fn, opcode):
    def wrapper(arg):
      start = clock()
      result = fn(arg)
      totals[opcode] += clock() - start
      return result
    return wrapper
  def prepare(kernel):
    program = kernel.program
    for i, text in enumerate(program.texts):
      words = text.split()
      opcode = words[1] if words[0].startswith("@") else words[0]
      program.code[i] = timed(program.code[i], opcode)
      if program.vcode[i] is not None:
        program.vcode[i] = timed(program.vcode[i], opcode)
  return prepare


def by_opcode(cluster: int, schedules, iters: int) -> None:
  """Prints where one run of the demo kernel on ``cluster`` CTAs (and, with ``iters``,
  of the pipeline) spends its time, per schedule: each opcode's wall time (every run
  of its function or warp form, the timing calls included) and the landing of
  asynchronous operations (``LAND``)."""
  from collections import Counter
  from mosaic_async_store.check import asyncops
  cfg, ptx, inputs = demo_kernel(cluster)
  runs = [(f"demo cluster {cluster}", lambda s, prep: run_once(cfg, ptx, inputs, s, prep))]
  if iters:
    pipeline = pipeline_kernel(iters)
    runs.append((f"pipeline384x{iters}", lambda s, prep: run_pipeline(pipeline, iters, s, prep)))
  landings = {name: getattr(asyncops, name) for name in ("land", "land_many")}
  for name, run in runs:
    for schedule in schedules:
      totals, busy = Counter(), []
      def timed(fn):   # (land_many calls land: the outermost call is timed)
        def landing(*args):
          if busy:
            return fn(*args)
          busy.append(time.perf_counter())
          try:
            return fn(*args)
          finally:
            totals["LAND"] += time.perf_counter() - busy.pop()
        return landing
      for attr, fn in landings.items():
        setattr(asyncops, attr, timed(fn))
      try:
        seconds, _ = run(schedule, _timed_opcodes(totals))
      finally:
        for attr, fn in landings.items():
          setattr(asyncops, attr, fn)
      print(f"{name} schedule {schedule}: {seconds:.3f} s in all")
      for opcode, spent in totals.most_common(10):
        print(f"  {spent * 1e3:7.1f} ms  {100 * spent / seconds:4.1f}%  {opcode}")


def _row(kernel, cluster, schedule, runs, pick=statistics.median):
  """One result row from ``runs`` ((seconds, thread-instructions) each), printed;
  ``pick`` chooses the seconds reported (the median, or ``min`` with ``--best``)."""
  seconds = pick([s for s, _ in runs])
  instructions = runs[0][1]
  print(f"{kernel} cluster {cluster} schedule {schedule}: {seconds:.3f} s, "
        f"{instructions} thread-instructions, {instructions / seconds:,.0f}/s")
  return {"kernel": kernel, "cluster": cluster, "schedule": schedule, "seconds": seconds,
          "thread_instructions": instructions, "per_second": instructions / seconds}


def hopper_matmul(reps: int, json_path=None) -> int:
  """``--hopper-matmul``: one row, printed (and written to ``json_path``)."""
  import checker_real_kernels as real   # (bench/: beside this file)
  row = {"kernel": "hopper_matmul", **real.time_check("hopper_matmul", reps),
         **real.time_interpret("hopper_matmul", reps)}
  print(json.dumps(row))
  if json_path:
    import jax
    meta = {"python": sys.version.split()[0], "jax": jax.__version__,
            "numpy": np.__version__, "machine": platform.machine(), "reps": reps}
    with open(json_path, "w") as f:
      json.dump({"meta": meta, "rows": [row]}, f, indent=1)
  return 0


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--reps", type=int, default=5, help="runs per schedule (default 5)")
  parser.add_argument("--schedules", type=int, nargs="+", default=[0, 1, 2],
                      help="schedule seeds (default: 0 1 2, the CI schedules)")
  parser.add_argument("--clusters", type=int, nargs="+", default=[2, 4],
                      help="cluster sizes (default: 2 4)")
  parser.add_argument("--iters", type=int, default=8,
                      help="loop iterations of the 384-thread pipeline (default 8; 0: skip it)")
  parser.add_argument("--best", action="store_true",
                      help="report each cell's fastest run instead of the median (on a "
                           "machine shared with other work, the least disturbed run)")
  parser.add_argument("--by-opcode", action="store_true",
                      help="instead: where one run of the demo kernel (the first of "
                           "--clusters) and of the pipeline spends its time, per opcode")
  parser.add_argument("--hopper-matmul", action="store_true",
                      help="instead: upstream's Hopper matmul (WGMMA, warp-specialised; "
                           "256x128x256 f16 on 4 SMs) through check with 1 and 3 "
                           "schedules (best of --reps) and through jax's interpret mode "
                           "(bench/checker_real_kernels.py's measurement)")
  parser.add_argument("--json", help="also write the numbers to this file")
  args = parser.parse_args(argv)
  if args.reps < 1:
    parser.error(f"--reps {args.reps}: must be at least 1")
  if args.iters < 0:
    parser.error(f"--iters {args.iters}: must be 0 (no pipeline) or more")
  if args.by_opcode:
    by_opcode(args.clusters[0], args.schedules, args.iters)
    return 0
  if args.hopper_matmul:
    return hopper_matmul(args.reps, args.json)
  rows, pick = [], min if args.best else statistics.median
  for cluster in args.clusters:
    cfg, ptx, inputs = demo_kernel(cluster)
    for schedule in args.schedules:
      runs = [run_once(cfg, ptx, inputs, schedule) for _ in range(args.reps)]
      rows.append(_row("demo", cluster, schedule, runs, pick))
  if args.iters:
    ptx = pipeline_kernel(args.iters)
    for schedule in args.schedules:
      runs = [run_pipeline(ptx, args.iters, schedule) for _ in range(args.reps)]
      rows.append(_row(f"pipeline384x{args.iters}", 1, schedule, runs, pick))
  if args.json:
    import jax
    meta = {"python": sys.version.split()[0], "jax": jax.__version__,
            "machine": platform.machine(), "processor": platform.processor(),
            "reps": args.reps, "iters": args.iters,
            "statistic": "min" if args.best else "median"}
    with open(args.json, "w") as f:
      json.dump({"meta": meta, "rows": rows}, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
