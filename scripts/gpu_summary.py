"""Prints the short table that ends scripts/gpu_check.sh (reads $OUT)."""

import json
import pathlib
import sys


def main(out: str) -> int:
  out_dir = pathlib.Path(out)
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
  print(f"{passed} passed, {len(rows) - passed} failed")
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
  print(f"{pallas_ok} passed, {len(pallas) - pallas_ok} failed")
  bench = out_dir / "bench.json"
  if bench.exists():
    print("\n== bandwidth (GB/s, median) ==")
    for r in json.loads(bench.read_text()).get("rows", []):
      print(" ".join(f"{k}={v}" for k, v in r.items()))
  all_ok = rows and passed == len(rows) and pallas and pallas_ok == len(pallas)
  return 0 if all_ok else 1


if __name__ == "__main__":
  sys.exit(main(sys.argv[1]))
