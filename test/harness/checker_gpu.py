"""The checker against the GPU (issue 63): every kernel ``check`` passes on the CPU, run
on the GPU on the same inputs, and the broken variants it reports, run N times there.

  python test/harness/checker_gpu.py cpu --out DIR [--kernels PATTERN ...]
  python test/harness/checker_gpu.py gpu --check DIR --out GPU_DIR --results F.jsonl [--resume]
  python test/harness/checker_gpu.py broken --runs N --results F.jsonl
  python test/harness/checker_gpu.py list [--kernels PATTERN ...]

``cpu`` (no GPU needed): ``check(fn, *args, schedules=1)`` on each case of ``CASES``
(``--kernels``: fnmatch patterns over the names; default every case), writing its inputs
and outputs to ``DIR/<case>.npz`` and ``DIR/manifest.json`` (``gpu_compare``'s format).
``gpu``: each case of DIR's manifest built again and run on the GPU on DIR's inputs, its
outputs written to ``GPU_DIR`` for ``gpu_compare.py DIR GPU_DIR``; one JSON line per case
(a "started" line first, so that a case that hangs or kills the process shows, and
``--resume`` goes on after it).  ``broken``: each of ``BROKEN``'s kernels run ``--runs``
times on the GPU, each run's outputs compared bit for bit with its reference (the correct
neighbour's outputs on the GPU, or the values upstream's test asserts): how many runs
differed.  That is information (which races the hardware shows), not a pass or fail.

The cases: test/harness/tma_kernels.py's ``ALL`` (TMA round trips, the WGMMA matmuls, the
multicast copy, upstream's Hopper matmul (and with K = 256 and a cluster), flash
attention, the warp-specialised pipelined copy, the realistic pipelined matmul, the
mixed-type matmul), upstream_tma_kernels.py's entries that the checker passes, and the
store demo (``StoreConfig()`` and an integer reduction: ``demo_kernels.run_ptx`` on the
CPU, ``gpu_run.build_kernel`` on the GPU, the same poisoned inputs).
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import os
import pathlib
import re
import sys
import time
import traceback
from typing import Callable

import numpy as np

import gpu_compare
from gpu_compare import EXACT, Tolerance

__all__ = ["Case", "Broken", "cases", "broken_cases", "selected", "main"]

# Tolerances of the floating-point reductions, GPU against check.  Both sum in f32 (the
# checker rounds a WGMMA's sum once; a GPU's tensor core adds in its own order and
# precision), so the f32 sums differ by a few of their ulps, which can move the rounding
# to the output type by one of its ulps: 2^-10 of the value for f16 (2^-7 for bf16), or,
# near zero, the f32 error itself (about K * 2^-24 of the operands' products).
F16_SUM = Tolerance(rtol=2e-3, atol=1e-3)
BF16_SUM = Tolerance(rtol=1.6e-2, atol=1e-2)
# Attention: two products and a softmax whose exp2 the GPU approximates (ex2.approx).
ATTENTION = Tolerance(rtol=4e-3, atol=2e-3)
# f32 sums of a few terms (upstream's rtol=1e-6 entries): ptxas may fuse or reorder.
F32_SUM = Tolerance(rtol=1e-5, atol=1e-6)
_HARNESS_TOL = {"mixed_type_matmul": BF16_SUM, "flash_attention": ATTENTION}


@dataclasses.dataclass(frozen=True)
class Case:
  """One kernel: ``make()`` -> (fn, args, masks); ``fn`` a jitted kernel (``demo``: a
  ``StoreConfig``), ``masks`` one per output (True: not compared) or None."""
  name: str
  make: Callable[[], tuple]
  tol: Tolerance = EXACT
  demo: bool = False


def _harness(name):
  def make():
    import tma_kernels
    fn, args = tma_kernels.ALL[name]()
    return fn, args, None
  return make


def _upstream(entry):
  def make():
    fn, args, expected = entry.make()
    return fn, args, [np.ma.getmaskarray(e) if np.ma.isMaskedArray(e) else None
                      for e in expected]
  return make


def _demo(cfg):
  def make():
    from demo_kernels import full_kernel_args
    args, _ = full_kernel_args(cfg)
    init, src = args[0], args[1]
    return cfg, (src, init), None   # the GPU kernel's parameter order
  return make


def cases() -> list[Case]:
  """Every case (the module docstring); upstream's entries whose API this jax lacks, or
  that break a rule of the ISA (``finding``: in ``BROKEN``), are left out."""
  import tma_kernels
  import upstream_tma_kernels as upstream
  from mosaic_async_store import compat
  from mosaic_async_store.demo.config import StoreConfig
  out = [Case(f"harness:{n}", _harness(n),
              EXACT if n in tma_kernels.EXPECTED else _HARNESS_TOL.get(n, F16_SUM))
         for n in tma_kernels.ALL]
  out += [Case(f"upstream:{e.name}", _upstream(e), F32_SUM if e.rtol else EXACT)
          for e in upstream.KERNELS if not e.finding and compat.jax_version()[:2] >= e.since]
  for cfg in (StoreConfig(), StoreConfig(dtype="int32", atomic="add")):
    out.append(Case(f"demo:{cfg.describe()}", _demo(cfg), EXACT, demo=True))
  return out


def selected(patterns) -> list[Case]:
  """The cases whose names match any of ``patterns`` (all where there are none)."""
  every = cases()
  if not patterns:
    return every
  chosen = [c for c in every if any(fnmatch.fnmatchcase(c.name, p) for p in patterns)]
  if not chosen:
    raise SystemExit(f"no case matches {patterns}; `list` names them")
  return chosen


def file_name(name: str) -> str:
  return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") + ".npz"


def _leaves(outs) -> list[np.ndarray]:
  import jax
  return [np.asarray(o) for o in jax.tree_util.tree_leaves(outs)]


# -- the CPU half -------------------------------------------------------------------


def check_outputs(case: Case):
  """(outputs, inputs, masks) of ``case`` as the checker leaves them (one schedule);
  raises AssertionError naming the findings where the check does not pass."""
  fn, args, masks = case.make()
  if case.demo:
    from demo_kernels import run_ptx
    from kernel_text import kernel_text
    out, flags, _, _ = run_ptx(fn, kernel_text(fn, "ptx", bare=False))
    return [np.asarray(out).reshape(-1), np.asarray(flags).view(np.int32).reshape(-1)], args, None
  from mosaic_async_store.check import check
  report = check(fn, *args, schedules=1)
  if not report.ok or report.outputs is None:
    raise AssertionError(" ".join(str(report).split())[:400])
  return [np.asarray(o) for o in report.outputs], args, masks


def run_cpu(out_dir: pathlib.Path, patterns) -> int:
  """The CPU half: writes every selected case's check outputs; returns how many failed."""
  import jax
  out_dir.mkdir(parents=True, exist_ok=True)
  manifest, failed = {}, 0
  for case in selected(patterns):
    start = time.perf_counter()
    entry = {"file": file_name(case.name), "rtol": case.tol.rtol, "atol": case.tol.atol,
             "jax": jax.__version__}
    try:
      outs, args, masks = check_outputs(case)
      gpu_compare.save(out_dir / entry["file"], outs, args, masks)
    except Exception as e:  # noqa: BLE001  (recorded: that kernel has no check output)
      entry["error"] = f"{type(e).__name__}: {e}"[:500]
      failed += 1
    entry["seconds"] = round(time.perf_counter() - start, 2)
    manifest[case.name] = entry
    gpu_compare.write_manifest(out_dir, manifest)   # each case: a timeout keeps the rest
    print(f"{'ok  ' if 'error' not in entry else 'FAIL'} {entry['seconds']:6.1f}s "
          f"{case.name} {entry.get('error', '')}"[:300], flush=True)
  return failed


# -- the GPU half -------------------------------------------------------------------


def gpu_outputs(case: Case, args) -> list[np.ndarray]:
  """``case``'s kernel run on the GPU on ``args``."""
  import jax.numpy as jnp
  fn, made_args, _ = case.make()
  if case.demo:
    from gpu_run import build_kernel
    out, flags = build_kernel(fn)(*(jnp.asarray(a) for a in args))
    return [np.asarray(out).reshape(-1), np.asarray(flags).view(np.int32).reshape(-1)]
  for i, (a, b) in enumerate(zip(args, made_args)):
    if a.shape != b.shape or a.dtype != b.dtype:
      raise ValueError(f"input {i}: carried {a.dtype}{list(a.shape)}, the kernel takes "
                       f"{b.dtype}{list(b.shape)} (check outputs from another version)")
  from mosaic_async_store import compat
  with compat.mosaic_gpu_pallas_call():
    return _leaves(fn(*(jnp.asarray(a) for a in args)))


def _append(path: pathlib.Path, row: dict) -> None:
  with open(path, "a") as f:
    f.write(json.dumps(row) + "\n")


def _done(results: pathlib.Path) -> tuple[set, set]:
  """(cases with a result, cases started without one) in ``results``."""
  started, done = set(), set()
  if results.exists():
    for line in results.read_text().splitlines():
      row = json.loads(line)
      (started if row.get("status") == "started" else done).add(row["kernel"])
  return done, started - done


def run_gpu(check_dir: pathlib.Path, out_dir: pathlib.Path, results: pathlib.Path,
            resume: bool) -> int:
  """The GPU half (module docstring); returns how many cases raised."""
  manifest = gpu_compare.read_manifest(check_dir)
  by_name = {c.name: c for c in cases()}
  out_dir.mkdir(parents=True, exist_ok=True)
  done, lost = _done(results) if resume else (set(), set())
  for name in lost:   # the process died inside it: a hang or a crash
    _append(results, {"kernel": name, "ok": False, "detail": "hung or crashed the process"})
  failed = 0
  for name, entry in sorted(manifest.items()):
    if name in done or name in lost or entry.get("error"):
      continue
    _append(results, {"kernel": name, "status": "started"})
    start = time.perf_counter()
    row = {"kernel": name}
    try:
      if name not in by_name:
        raise KeyError(f"{name}: not a case of this checkout")
      _, args, _ = gpu_compare.load(check_dir / entry["file"])
      outs = gpu_outputs(by_name[name], args)
      gpu_compare.save(out_dir / entry["file"], outs)
      row["ok"] = True
    except Exception as e:  # noqa: BLE001  (recorded; the batch goes on)
      row.update(ok=False, detail=f"{type(e).__name__}: {e}"[:500])
      traceback.print_exc()
      failed += 1
    row["seconds"] = round(time.perf_counter() - start, 2)
    _append(results, row)
    print(f"{'ran ' if row['ok'] else 'FAIL'} {row['seconds']:6.2f}s {name} "
          f"{row.get('detail', '')}"[:300], flush=True)
  return failed


# -- the broken variants on the GPU ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Broken:
  """A kernel the checker reports: ``make()`` -> (fn, args, expected); its runs are
  compared with ``reference()``'s outputs on the GPU, or (None) with ``expected``."""
  name: str
  make: Callable[[], tuple]
  reference: Callable[[], tuple] | None
  rules: tuple[str, ...]
  tol: Tolerance = EXACT


def broken_cases() -> tuple[list[Broken], dict[str, str]]:
  """(the broken kernels that jax can run, {name: why not} for the others): each pair of
  broken_tma_kernels.py whose broken kernel is Pallas code (a read before the wait, a
  store without ``commit_smem``, a store's source overwritten before its read finished),
  the realistic matmul whose pipeline refills a slot while a WGMMA still reads it, and
  upstream's test kernels that break a rule (upstream_tma_kernels' ``finding``)."""
  import broken_tma_kernels as btk
  import tma_kernels
  import upstream_tma_kernels as upstream
  from mosaic_async_store import compat
  runnable, not_runnable = [], {}
  for p in btk.PAIRS.values():
    if isinstance(p.broken, btk.PtxEdit):
      not_runnable[f"pair:{p.name}"] = (f"a PTX edit ({p.broken.what}): jax runs only the "
                                        "PTX it compiles")
    else:
      runnable.append(Broken(f"pair:{p.name}", p.broken, p.correct, p.rules))
  runnable.append(Broken("slot_refilled_early:realistic_matmul[delay_release=0]",
                         lambda: (*tma_kernels.realistic_matmul(delay_release=0), None),
                         lambda: (*tma_kernels.realistic_matmul(), None), ("race",)))
  for e in upstream.KERNELS:
    if e.finding and compat.jax_version()[:2] >= e.since:
      runnable.append(Broken(f"upstream:{e.name}", e.make, None, e.finding,
                             F32_SUM if e.rtol else EXACT))
  return runnable, not_runnable


def _run(fn, args) -> list[np.ndarray]:
  import jax.numpy as jnp
  from mosaic_async_store import compat
  with compat.mosaic_gpu_pallas_call():
    return _leaves(fn(*(jnp.asarray(a) for a in args)))


def run_broken(runs: int, results: pathlib.Path, patterns) -> int:
  """Each broken kernel ``runs`` times (module docstring); returns how many raised."""
  runnable, not_runnable = broken_cases()
  if patterns:
    runnable = [b for b in runnable if any(fnmatch.fnmatchcase(b.name, p) for p in patterns)]
  for name, why in sorted(not_runnable.items()):
    _append(results, {"kernel": name, "ok": None, "detail": why})
  failed = 0
  for b in runnable:
    start = time.perf_counter()
    row = {"kernel": b.name, "rules": list(b.rules), "runs": runs}
    try:
      fn, args, expected = b.make()
      if b.reference is None:   # upstream's asserted values, where it asserts them
        first = _run(fn, args)
        want = [np.asarray(np.ma.getdata(e)).astype(o.dtype) for e, o in zip(expected, first)]
        masks = [np.ma.getmaskarray(e) for e in expected]
        row["reference"] = "the values upstream's test asserts"
      else:
        ref_fn, ref_args, ref_expected = b.reference()
        want, masks = _run(ref_fn, ref_args), None
        row["reference"] = "the correct kernel on the GPU"
        if ref_expected is not None:   # (the pairs' NumPy values: copies, exact)
          row["reference_as_expected"] = gpu_compare.compare_outputs(
              b.name, [np.asarray(e).astype(w.dtype) for e, w in zip(ref_expected, want)],
              want, b.tol).ok
      differing, worst, detail = 0, 0, ""
      for _ in range(runs):
        c = gpu_compare.compare_outputs(b.name, want, _run(fn, args), b.tol, masks)
        if not c.ok:
          differing += 1
          worst = max(worst, c.mismatched)
          detail = detail or c.detail
        row["compared"] = c.compared
      row.update(ok=True, differing_runs=differing, max_mismatched=worst, detail=detail)
    except Exception as e:  # noqa: BLE001  (recorded; the batch goes on)
      row.update(ok=False, detail=f"{type(e).__name__}: {e}"[:500])
      traceback.print_exc()
      failed += 1
    row["seconds"] = round(time.perf_counter() - start, 2)
    _append(results, row)
    print(f"{b.name}: " + (f"{row['differing_runs']} of {runs} runs differ"
                           if row["ok"] else f"FAIL {row['detail']}")[:300], flush=True)
  return failed


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  sub = parser.add_subparsers(dest="cmd", required=True)
  cpu = sub.add_parser("cpu", help="write check's outputs (no GPU needed)")
  cpu.add_argument("--out", required=True, type=pathlib.Path)
  gpu = sub.add_parser("gpu", help="run the cases of --check on the GPU")
  gpu.add_argument("--check", required=True, type=pathlib.Path)
  gpu.add_argument("--out", required=True, type=pathlib.Path)
  gpu.add_argument("--results", required=True, type=pathlib.Path)
  gpu.add_argument("--resume", action="store_true", help="go on after the last case run")
  broken = sub.add_parser("broken", help="run the broken kernels N times on the GPU")
  broken.add_argument("--runs", type=int, default=20)
  broken.add_argument("--results", required=True, type=pathlib.Path)
  listing = sub.add_parser("list", help="name the cases and broken kernels")
  for p in (cpu, broken, listing):
    p.add_argument("--kernels", nargs="*", default=(), metavar="PATTERN",
                   help="fnmatch patterns over the names (default: every one)")
  args = parser.parse_args(argv)
  if args.cmd in ("gpu", "broken"):   # (the harness modules default to the CPU backend)
    os.environ["JAX_PLATFORMS"] = os.environ.get("MAS_GPU_PLATFORMS", "cuda")
  else:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
  if args.cmd == "cpu":
    return 1 if run_cpu(args.out, args.kernels) else 0
  if args.cmd == "gpu":
    return 1 if run_gpu(args.check, args.out, args.results, args.resume) else 0
  if args.cmd == "broken":
    return 1 if run_broken(args.runs, args.results, args.kernels) else 0
  runnable, not_runnable = broken_cases()
  for c in selected(args.kernels):
    print(f"check {c.name}")
  for b in runnable:
    print(f"broken {b.name}")
  for name in sorted(not_runnable):
    print(f"not-runnable {name}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
