"""``check`` end to end against jax's interpret mode with race detection, on upstream's
Hopper kernels, side by side in one process.

Kernels (test/harness/tma_kernels.py, upstream's kernels at their test sizes): the Hopper
matmul (256x128x256 f16 on 4 SMs: WGMMA, warp-specialised), the realistic pipelined
matmul (``emit_pipeline`` with WGMMA, a 2x2 grid), the warp-specialised pipelined copy
(512x512 f16) and flash attention (``setmaxnreg``, two compute warpgroups); any other
maker of that module by ``--kernels``.

For each, first ``check(fn, *args)`` as a user calls it: its default schedules (3) and
``jobs`` (the cores, or ``--jobs``), on a kernel this process has not lowered: wall
seconds of the whole call (``check_s``; ``lower_s`` of it: lowering and compiling on the
CPU), then the same call again (``check_again_s``: the lowering kept, best of
``--reps``) and once more with ``jobs=1`` (``check_jobs1_s``: the runs one after another,
best of ``--reps``), with its verdict and whether the outputs are NumPy's (a WGMMA
kernel's: as close as ``tma_kernels.CLOSE_TO`` says).  Then the same kernel under
``interpret=InterpretGPUParams(detect_races=True)`` (jax >= 0.12: ``plgpu.kernel`` and
``pl.pallas_call`` given it while the kernel is built and traced): the first call's wall
seconds, tracing and compiling included (``interpret_first_s``), whether it found a race,
its outputs compared the same way and with check's (``same_outputs``), or the first line
of the error it stops with.  ``peak_mb`` / ``children_peak_mb``: the largest resident
memory so far of this process and of any one worker (``getrusage``'s ``ru_maxrss``).
Writes nothing unless ``--json PATH``.  (``time_check`` and ``time_interpret``: the
per-schedule measurement bench/checker_speed.py ``--hopper-matmul`` takes from here.)

  python bench/checker_real_kernels.py [--reps 3] [--jobs N] [--kernels NAME ...] [--json out.json]

docs/benchmarks.md ("check against interpret mode, end to end") has the method, machine
and numbers.  Numbers mean something on a quiet machine only.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import json
import os
import platform
import re
import resource
import sys
import time
import traceback

import harness_path  # noqa: F401  (test/harness on sys.path)
import numpy as np

__all__ = ["KERNELS", "check_end_to_end", "interpret_first_call", "time_check",
           "time_interpret", "main"]

KERNELS = ("hopper_matmul", "realistic_matmul", "warp_specialized_copy", "flash_attention")


def _values_right(name, outs, args) -> bool:
  """The outputs equal NumPy's (``tma_kernels.EXPECTED``), or for a WGMMA kernel are as
  close as ``tma_kernels.CLOSE_TO`` says."""
  import tma_kernels
  outs = [np.asarray(o) for o in outs]
  if name in tma_kernels.EXPECTED:
    want = tma_kernels.EXPECTED[name](*args)
    return len(outs) == len(want) and all(np.array_equal(o, w) for o, w in zip(outs, want))
  reference, rtol, atol = tma_kernels.CLOSE_TO[name]
  want = reference(*args)
  return len(outs) == len(want) and all(
      np.allclose(np.asarray(o, np.float64), w, rtol=rtol, atol=atol)
      for o, w in zip(outs, want))


def _peaks() -> dict:
  """The peak resident memory so far, MiB, of this process and of its largest child."""
  scale = 1 / (1 << 20) if sys.platform == "darwin" else 1 / 1024   # (bytes / KiB)
  own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
  return {"peak_mb": round(own * scale), "children_peak_mb": round(children * scale)}


def _best(call, reps: int) -> float:
  best = None
  for _ in range(reps):
    start = time.perf_counter()
    call()
    took = time.perf_counter() - start
    best = took if best is None else min(best, took)
  return best


def check_end_to_end(name: str, reps: int, jobs: int | None) -> tuple[dict, list | None]:
  """``check``'s wall seconds end to end (first call, then again, then with jobs=1), its
  verdict; and its outputs (None where it gave none)."""
  import tma_kernels
  from mosaic_async_store.check import check, parallel
  from mosaic_async_store.tools import check_kernel
  fn, args = tma_kernels.ALL[name]()
  afresh, lowering = check_kernel._lowered_afresh, []

  def timed(*a, **kw):   # (the lowering and compiling of the first call)
    start = time.perf_counter()
    try:
      return afresh(*a, **kw)
    finally:
      lowering.append(time.perf_counter() - start)
  check_kernel._lowered_afresh = timed
  try:
    start = time.perf_counter()
    report = check(fn, *args, jobs=jobs)
    first = time.perf_counter() - start
    again = _best(lambda: check(fn, *args, jobs=jobs), reps)
    sequential = _best(lambda: check(fn, *args, jobs=1), reps)
  finally:
    check_kernel._lowered_afresh = afresh
  return {"jobs": parallel.resolve_jobs(jobs), "check_s": round(first, 3),
          "lower_s": round(sum(lowering), 3), "check_again_s": round(again, 3),
          "check_jobs1_s": round(sequential, 3), "check_ok": bool(report.ok),
          "check_values": report.outputs is not None and _values_right(
              name, report.outputs, args)}, report.outputs


@contextlib.contextmanager
def _interpreted(params):
  """``plgpu.kernel`` and ``pl.pallas_call`` given ``interpret=params`` meanwhile (the
  makers and upstream's modules look them up when the kernel is built and traced)."""
  from jax.experimental import pallas as pl
  from jax.experimental.pallas import mosaic_gpu as plgpu
  kernel, pallas_call = plgpu.kernel, pl.pallas_call
  plgpu.kernel = functools.partial(kernel, interpret=params)
  pl.pallas_call = functools.partial(pallas_call, interpret=params)
  try:
    yield
  finally:
    plgpu.kernel, pl.pallas_call = kernel, pallas_call


def interpret_first_call(name: str, checked) -> dict:
  """jax's interpret mode with race detection on the same kernel: the first call's wall
  seconds and verdict, or the error it stops with."""
  import tma_kernels
  try:
    from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call as mosaic_interpret
    from jax.experimental.pallas.mosaic_gpu import InterpretGPUParams
  except ImportError as e:   # (jax < 0.12)
    return {"interpret_error": f"no GPU interpret mode in this jax ({e})"}
  try:
    params = InterpretGPUParams(detect_races=True)
    with _interpreted(params):
      maker = tma_kernels.ALL[name]   # (some build their kernel here; some take it)
      takes = "interpret" in inspect.signature(maker).parameters
      fn, args = maker(interpret=params) if takes else maker()
      start = time.perf_counter()
      outs = fn(*args)
      outs = [np.asarray(o) for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
      first = time.perf_counter() - start
  except Exception as e:   # the mode's own refusal or race report, as it words it
    said = [l.strip() for l in str(e).splitlines()
            if re.match(r"\s*\w+(Error|Exception): \S", l)]   # each raised error's line
    where = traceback.extract_tb(e.__traceback__)[-1]
    return {"interpret_error": (" / ".join(dict.fromkeys(said))[:300] or
                                f"{type(e).__name__}: {str(e)[:200]} (at "
                                f"{os.path.basename(where.filename)}:{where.lineno}, "
                                f"{where.name})")}
  races = mosaic_interpret.get_races().races_found
  same = checked is not None and len(checked) == len(outs) and all(
      np.allclose(np.asarray(c, np.float64), np.asarray(o, np.float64), rtol=2e-3,
                  atol=8e-3) for c, o in zip(checked, outs))
  return {"interpret_first_s": round(first, 3), "interpret_races": bool(races),
          "interpret_values": _values_right(name, outs, args), "same_outputs": same}


# bench/checker_speed.py --hopper-matmul's measurement (docs/benchmarks.md, "Upstream's
# Hopper matmul"): check with 1 and 3 schedules, the schedules alone, and interpret
# mode's first and compiled calls.

def time_check(name: str, reps: int) -> dict:
  """The checker's wall seconds (best of ``reps``) for 1 and 3 schedules (``jobs``: its
  default), and verdicts."""
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
  import tma_kernels
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--reps", type=int, default=3, help="runs of the repeated check "
                      "calls, best kept (default 3)")
  parser.add_argument("--jobs", type=int, default=None, help="check's jobs (default: its "
                      "own, the cores)")
  parser.add_argument("--kernels", nargs="+", default=list(KERNELS),
                      choices=tuple(tma_kernels.ALL), metavar="NAME",
                      help=f"which kernels (default: {', '.join(KERNELS)})")
  parser.add_argument("--json", help="also write the numbers to this file")
  args = parser.parse_args(argv)
  if args.reps < 1:
    parser.error(f"--reps {args.reps}: must be at least 1")
  if args.jobs is not None and args.jobs < 1:
    parser.error(f"--jobs {args.jobs}: must be at least 1 (or left out: the cores)")
  import jax
  import jax.numpy as jnp
  jnp.zeros(1).block_until_ready()   # (jax's backend started before either side's clock)
  rows = []
  for name in args.kernels:
    checked, outputs = check_end_to_end(name, args.reps, args.jobs)
    row = {"kernel": name, **checked, **interpret_first_call(name, outputs), **_peaks()}
    rows.append(row)
    print(json.dumps(row), flush=True)
  if args.json:
    meta = {"python": sys.version.split()[0], "jax": jax.__version__, "numpy": np.__version__,
            "machine": platform.machine(), "cores": os.cpu_count(), "reps": args.reps,
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None}
    with open(args.json, "w") as f:
      json.dump({"meta": meta, "rows": rows}, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
