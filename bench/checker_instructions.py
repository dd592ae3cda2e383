"""Machine instructions one schedule of the PTX checker executes on a real kernel,
counted by valgrind's cachegrind: a steadier measure than wall time on a shared VM,
where the same code's one-schedule time moves by a third between runs.

The kernel (test/harness/tma_kernels.py, ``ALL``) is lowered once and its first
schedule run ``--runs`` times (``check(fn, *args, schedules=1)``, the schedule's
``check_parsed`` repeated); with ``--count`` the script runs itself under
``valgrind --tool=cachegrind --cache-sim=no`` with 1 and with 3 runs (side by side,
``PYTHONHASHSEED=0``) and prints one schedule's count: the difference over 2, which
takes the lowering out.  Without ``--count`` it only runs (what valgrind runs), and
prints the verdict.

  python bench/checker_instructions.py hopper_matmul --count
  python bench/checker_instructions.py flash_attention --runs 1

docs/benchmarks.md ("eighth pass" to "tenth pass") has the method, the machine and the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import harness_path  # noqa: F401  (test/harness on sys.path)

__all__ = ["run", "count", "main"]


def run(name: str, runs: int) -> bool:
  """Lowers kernel ``name`` once and runs its first schedule ``runs`` times; whether
  the last run checked clean."""
  import tma_kernels
  from mosaic_async_store.check import check
  from mosaic_async_store.check import report
  fn, args = tma_kernels.ALL[name]()
  once = report._checked

  def repeated(*a, **kw):
    for _ in range(runs - 1):
      once(*a, **kw)
    return once(*a, **kw)
  report._checked = repeated
  try:
    return bool(check(fn, *args, schedules=1).ok)
  finally:
    report._checked = once


def count(name: str) -> dict:
  """Cachegrind's instruction counts of 1 and 3 runs, and one schedule's."""
  valgrind = shutil.which("valgrind")
  if valgrind is None:
    raise SystemExit("--count needs valgrind on PATH (Debian: apt install valgrind)")
  env = {**os.environ, "PYTHONHASHSEED": "0"}
  procs = {runs: subprocess.Popen(
      [valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
       sys.executable, __file__, name, "--runs", str(runs)],
      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
      for runs in (1, 3)}
  refs = {}
  for runs, proc in procs.items():
    out, err = proc.communicate()
    found = re.search(r"I\s+refs:\s+([\d,]+)", err)
    if proc.returncode or found is None or "ok True" not in out:
      raise SystemExit(f"{name} with --runs {runs} under valgrind failed "
                       f"(exit {proc.returncode}): {(out + err)[-800:]}")
    refs[runs] = int(found.group(1).replace(",", ""))
  return {"kernel": name, "refs_1": refs[1], "refs_3": refs[3],
          "per_schedule": (refs[3] - refs[1]) // 2}


def main(argv=None) -> int:
  import tma_kernels
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("kernel", choices=sorted(tma_kernels.ALL),
                      help="a kernel of test/harness/tma_kernels.py")
  parser.add_argument("--runs", type=int, default=1,
                      help="runs of the first schedule after one lowering (default 1)")
  parser.add_argument("--count", action="store_true",
                      help="instead: count 1 and 3 runs under cachegrind and print one "
                           "schedule's instructions (JSON)")
  args = parser.parse_args(argv)
  if args.runs < 1:
    parser.error(f"--runs {args.runs}: must be at least 1")
  if args.count:
    print(json.dumps(count(args.kernel)))
    return 0
  print(args.kernel, "ok", run(args.kernel, args.runs))
  return 0


if __name__ == "__main__":
  sys.exit(main())
