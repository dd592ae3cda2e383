"""Prints the short table that ends scripts/gpu_check.sh (reads $OUT).

  python scripts/gpu_summary.py OUT             the GPU run's table
  python scripts/gpu_summary.py --skipped OUT   on a CPU: the device checks skipped
"""

import json
import pathlib
import sys


def _expected_counts() -> tuple[int, int]:
  """(runtime configurations, Pallas checks) that a complete run reports."""
  root = pathlib.Path(__file__).resolve().parents[1]
  sys.path[:0] = [str(root / "test" / "gpu"), str(root / "test" / "harness")]
  from configs import RUNTIME_CONFIGS
  from pallas_run import PALLAS_CASES
  return len(RUNTIME_CONFIGS), len(PALLAS_CASES)


def _section(title: str, path: pathlib.Path, want: int, line) -> int:
  """Prints one batch's results; returns how many passed."""
  from configs import read_results  # test/gpu, on the path from _expected_counts
  rows = list(read_results(path).values())
  print(f"\n== {title} ==")
  if not rows:
    print("no results (no GPU, or the batch did not start)")
  for r in rows:
    print(f"{'PASS' if r['ok'] else 'FAIL'} {r.get('seconds', 0.0):6.2f}s "
          f"mism={r['mismatched_bytes']:<6} {line(r)}")
  passed = sum(r["ok"] for r in rows)
  print(f"{passed} passed, {len(rows) - passed} failed, "
        f"{want - len(rows)} without a result (hung, crashed or not reached)")
  return passed


def _device_checks(out_dir: pathlib.Path) -> dict[str, list[str]]:
  """Every check a GPU run makes, by group (the checker's cases: $OUT/checker-list.txt,
  written by ``checker_gpu.py list``)."""
  from configs import RUNTIME_CONFIGS
  from pallas_run import PALLAS_CASES
  groups = {"runtime configs (test/gpu)": [c.describe() for c in RUNTIME_CONFIGS],
            "Pallas checks (test/gpu)": [c.describe() for c in PALLAS_CASES],
            "debug mode (test/gpu)": ["wrong_byte_count_is_reported"],
            "checker vs GPU (checker_gpu.py gpu)": [],
            "broken kernels on the GPU (checker_gpu.py broken)": [],
            "benchmark": ["bench/dsmem_bandwidth.py"]}
  listing = out_dir / "checker-list.txt"
  for line in (listing.read_text().splitlines() if listing.exists() else []):
    kind, _, name = line.partition(" ")
    if kind == "check":
      groups["checker vs GPU (checker_gpu.py gpu)"].append(name)
    elif kind == "broken":
      groups["broken kernels on the GPU (checker_gpu.py broken)"].append(name)
  return groups


def skipped(out: str) -> int:
  """On a machine without an sm_90 GPU: names every device check skipped."""
  _expected_counts()   # (puts test/gpu and test/harness on the path)
  groups = _device_checks(pathlib.Path(out))
  print(f"no GPU: {sum(map(len, groups.values()))} device checks skipped:")
  for title, names in groups.items():
    print(f"  {title} ({len(names)}): {', '.join(names)}")
  return 0


def _checker(out_dir: pathlib.Path) -> int:
  """The checker-vs-GPU comparison and the broken kernels' runs; returns how many
  comparisons failed."""
  compare = out_dir / "compare.json"
  rows = json.loads(compare.read_text()) if compare.exists() else []
  print("\n== the checker's outputs against the GPU's (test/harness/gpu_compare.py) ==")
  if not rows:
    print("no comparison (no check outputs carried, or the step did not run)")
  for r in rows:
    print(f"{'SAME' if r['ok'] else 'DIFF'} {r['mismatched']}/{r['compared']:<8} "
          f"{r['tolerance']:<22} {r['kernel']} {r['detail']}"[:240])
  broken = out_dir / "broken.jsonl"
  if broken.exists():
    print("\n== broken kernels on the GPU (information: runs whose outputs differ) ==")
    for line in broken.read_text().splitlines():
      r = json.loads(line)
      said = (r["detail"] if not r.get("ok") else
              f"{r['differing_runs']} of {r['runs']} runs differ (at most "
              f"{r['max_mismatched']} of {r.get('compared', '?')} elements) {r['detail']}")
      print(f"{r['kernel']}: {said}"[:240])
  return sum(not r["ok"] for r in rows)


def main(out: str) -> int:
  out_dir = pathlib.Path(out)
  want_runtime, want_pallas = _expected_counts()
  passed = _section("runtime checks", out_dir / "runtime.jsonl", want_runtime,
                    lambda r: f"timeouts={r['barrier_timeouts']:<4} {r['config']} "
                              f"{r.get('detail', '')}")
  pallas_ok = _section("Pallas checks (Lane and Warpgroup)", out_dir / "pallas.jsonl",
                       want_pallas, lambda r: f"{r['config']} {r.get('detail', '')}")
  bench = out_dir / "bench.json"
  if bench.exists():
    print("\n== bandwidth (GB/s, median) ==")
    for r in json.loads(bench.read_text()).get("rows", []):
      print(" ".join(f"{k}={v}" for k, v in r.items()))
  differing = _checker(out_dir)
  return 0 if passed == want_runtime and pallas_ok == want_pallas and not differing else 1


if __name__ == "__main__":
  if sys.argv[1] == "--skipped":
    sys.exit(skipped(sys.argv[2]))
  sys.exit(main(sys.argv[1]))
