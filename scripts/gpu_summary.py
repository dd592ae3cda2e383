"""Prints the short table that ends scripts/gpu_check.sh (reads $OUT)."""

import json
import pathlib
import sys


def _expected_counts() -> tuple[int, int]:
  """(runtime configurations, Pallas checks) that a complete run reports."""
  root = pathlib.Path(__file__).resolve().parents[1]
  sys.path.insert(0, str(root / "test" / "gpu"))
  from configs import RUNTIME_CONFIGS
  from mosaic_async_store.lowering.pallas_run import PALLAS_CASES
  return len(RUNTIME_CONFIGS), len(PALLAS_CASES)


def main(out: str) -> int:
  out_dir = pathlib.Path(out)
  want_runtime, want_pallas = _expected_counts()
  runtime = out_dir / "runtime.jsonl"
  rows = [json.loads(l) for l in runtime.read_text().splitlines() if l.strip()] \
      if runtime.exists() else []
  print("\n== runtime checks ==")
  if not rows:
    print("no runtime results (no GPU, or the batch did not start)")
  for r in rows:
    status = "PASS" if r["ok"] else "FAIL"
    print(f"{status} {r['seconds']:6.2f}s mism={r['mismatched_bytes']:<6} "
          f"timeouts={r['barrier_timeouts']:<4} {r['config']}")
  passed = sum(r["ok"] for r in rows)
  print(f"{passed} passed, {len(rows) - passed} failed, "
        f"{want_runtime - len(rows)} without a result (hung, crashed or not reached)")
  pallas_file = out_dir / "pallas.jsonl"
  pallas = [json.loads(l) for l in pallas_file.read_text().splitlines() if l.strip()] \
      if pallas_file.exists() else []
  print("\n== Pallas checks (Lane and Warpgroup) ==")
  if not pallas:
    print("no Pallas results (no GPU, or the batch did not start)")
  for r in pallas:
    print(f"{'PASS' if r['ok'] else 'FAIL'} {r.get('seconds', 0.0):6.2f}s "
          f"mism={r['mismatched_bytes']:<6} {r['config']} {r.get('detail', '')}")
  pallas_ok = sum(r["ok"] for r in pallas)
  print(f"{pallas_ok} passed, {len(pallas) - pallas_ok} failed, "
        f"{want_pallas - len(pallas)} without a result (hung, crashed or not reached)")
  bench = out_dir / "bench.json"
  if bench.exists():
    print("\n== bandwidth (GB/s, median) ==")
    for r in json.loads(bench.read_text()).get("rows", []):
      print(" ".join(f"{k}={v}" for k, v in r.items()))
  all_ok = passed == want_runtime and pallas_ok == want_pallas
  return 0 if all_ok else 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1]))
