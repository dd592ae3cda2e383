"""The PTX checker on real Pallas TMA kernels, next to jax's interpret mode with race
detection on the same kernels.

Kernels (test/harness/tma_kernels.py): the 64x128 f16 TMA round trip (Lane semantics),
the ``emit_pipeline`` x + y over 256x128 f32 (two blocks in flight), upstream's
warp-specialised pipelined copy (512x512 f16, ``emit_pipeline_warp_specialized``) and
upstream's Hopper matmul (256x128x256 f16 on 4 SMs: WGMMA, warp-specialised).

For each: ``check(fn, *args, schedules=s)`` for s = 1 and 3 (wall seconds of the whole
call: lowering and compiling on the CPU, then the schedules; ``schedules_s``: the
schedules alone), its verdict and whether its outputs equal NumPy's (a WGMMA kernel's:
as close as ``tma_kernels.CLOSE_TO`` says); then the same kernel
built with ``interpret=InterpretGPUParams(detect_races=True)`` (jax >= 0.12), called
``reps + 1`` times (the first call's wall seconds, tracing and compiling included, and
the best later one's: compiled), its outputs compared the same way, or
the first line of the error it stops with.  Writes nothing unless ``--json PATH``.

  python bench/checker_real_kernels.py [--reps 3] [--kernels NAME ...] [--json out.json]

docs/benchmarks.md ("The checker on real TMA kernels") has the method, machine and numbers.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time

import harness_path  # noqa: F401  (test/harness on sys.path)
import numpy as np

__all__ = ["KERNELS", "time_check", "time_interpret", "main"]

# The kernels (test/harness/tma_kernels.py: their makers and ``EXPECTED`` values).
KERNELS = ("tma_round_trip_lane", "pipelined_add", "warp_specialized_copy", "hopper_matmul")


def _equal(outs, want) -> bool:
  return len(outs) == len(want) and all(np.array_equal(np.asarray(o), w)
                                        for o, w in zip(outs, want))


def _values_right(name, outs, args) -> bool:
  """The outputs equal NumPy's (``tma_kernels.EXPECTED``), or for a WGMMA kernel are as
  close as ``tma_kernels.CLOSE_TO`` says."""
  import tma_kernels
  if name in tma_kernels.EXPECTED:
    return _equal(outs, tma_kernels.EXPECTED[name](*args))
  reference, rtol, atol = tma_kernels.CLOSE_TO[name]
  want = reference(*args)
  return len(outs) == len(want) and all(
      np.allclose(np.asarray(o, np.float64), w, rtol=rtol, atol=atol)
      for o, w in zip(outs, want))


def time_check(name: str, reps: int) -> dict:
  """The checker's wall seconds (best of ``reps``) for 1 and 3 schedules, and verdicts."""
  import tma_kernels
  from mosaic_async_store.check import check
  from mosaic_async_store.tools import check_kernel
  fn, args = tma_kernels.ALL[name]()
  out, spent = {}, []
  run_schedules = check_kernel.check_parsed

  def timed(*a, **kw):   # (the schedules alone: check's part after lowering)
    start = time.perf_counter()
    try:
      return run_schedules(*a, **kw)
    finally:
      spent.append(time.perf_counter() - start)
  check_kernel.check_parsed = timed
  try:
    for schedules in (1, 3):
      best = best_runs = None
      for _ in range(reps):
        start = time.perf_counter()
        report = check(fn, *args, schedules=schedules)
        took = time.perf_counter() - start
        best = took if best is None else min(best, took)
        best_runs = spent[-1] if best_runs is None else min(best_runs, spent[-1])
      out[f"check_s{schedules}"] = round(best, 3)
      out[f"schedules_s{schedules}"] = round(best_runs, 3)
      out["check_ok"] = bool(report.ok)
      out["check_values"] = report.outputs is not None and _values_right(name, report.outputs,
                                                                          args)
  finally:
    check_kernel.check_parsed = run_schedules
  return out


def time_interpret(name: str, reps: int) -> dict:
  """jax's interpret mode with race detection on the same kernel: the best compiled
  call's wall seconds and its verdict, or the error it stops with."""
  import tma_kernels
  try:
    from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call as mosaic_interpret
    from jax.experimental.pallas.mosaic_gpu import InterpretGPUParams
  except ImportError as e:   # (jax < 0.12)
    return {"interpret_error": f"no GPU interpret mode in this jax ({e})"}
  fn, args = getattr(tma_kernels, name)(interpret=InterpretGPUParams(detect_races=True))
  try:
    start = time.perf_counter()
    outs = fn(*args)   # compiles
    first = time.perf_counter() - start
    best = None
    for _ in range(reps):
      mosaic_interpret.gpu_callbacks.reset_gpu_interpret_mode_state()
      start = time.perf_counter()
      outs = fn(*args)
      outs = [np.asarray(o) for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
      took = time.perf_counter() - start
      best = took if best is None else min(best, took)
  except Exception as e:   # the mode's own refusal or race report, as it words it
    said = [l.strip() for l in str(e).splitlines()
            if re.match(r"\s*\w+(Error|Exception): \S", l)]   # each raised error's line
    return {"interpret_error": " / ".join(dict.fromkeys(said))[:300] or type(e).__name__}
  races = mosaic_interpret.get_races().races_found
  return {"interpret_first_s": round(first, 3), "interpret_s": round(best, 3),
          "interpret_races": bool(races),
          "interpret_values": _values_right(name, outs, args)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--reps", type=int, default=3, help="runs per cell, best kept "
                      "(default 3)")
  parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS,
                      metavar="NAME", help=f"which kernels (default: all of {', '.join(KERNELS)})")
  parser.add_argument("--json", help="also write the numbers to this file")
  args = parser.parse_args(argv)
  if args.reps < 1:
    parser.error(f"--reps {args.reps}: must be at least 1")
  rows = []
  for name in args.kernels:
    row = {"kernel": name, **time_check(name, args.reps), **time_interpret(name, args.reps)}
    rows.append(row)
    print(json.dumps(row))
  if args.json:
    import jax
    meta = {"python": sys.version.split()[0], "jax": jax.__version__, "numpy": np.__version__,
            "machine": platform.machine(), "reps": args.reps}
    with open(args.json, "w") as f:
      json.dump({"meta": meta, "rows": rows}, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
