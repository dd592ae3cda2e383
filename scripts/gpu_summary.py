"""Prints the short table that ends scripts/gpu_check.sh (reads $OUT)."""

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
  return 0 if passed == want_runtime and pallas_ok == want_pallas else 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1]))
