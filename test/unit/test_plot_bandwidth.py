"""bench/plot_bandwidth.py (test/harness/bandwidth_plot.py) turns a bandwidth run's JSON
into the CSV and the PNG."""

import csv
import json

import bandwidth_plot as plot_bandwidth


def _row(strategy, gbps, status="ok", **extra):
  return dict(strategy=strategy, dtype="bfloat16", shape="64x128", layout="WGMMA",
              cluster=2, ctas=132, iters=200, status=status, gbps=gbps, **extra)


def test_csv_and_png_from_a_run(tmp_path):
  rows = [_row("mas", 2500.0), _row("upstream", 1800.0), _row("local", 9000.0),
          _row("bulk", None, status="refused", error="NotImplementedError: x")]
  src = tmp_path / "bench.json"
  src.write_text(json.dumps({"meta": {"jax": "0.11.2", "devices": ["cuda:0"]}, "rows": rows}))
  out_csv, out_png = tmp_path / "b.csv", tmp_path / "b.png"
  assert plot_bandwidth.main([str(src), "--csv", str(out_csv), "--png", str(out_png)]) == 0
  with open(out_csv) as f:
    got = list(csv.DictReader(f))
  assert [r["strategy"] for r in got] == ["mas", "upstream", "local", "bulk"]
  assert got[0]["gbps"] == "2500.0" and got[3]["error"] == "NotImplementedError: x"
  assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert plot_bandwidth.plot(rows, tmp_path / "c.png") == 3   # refused rows draw no bar


def test_a_run_without_measurements_is_an_error(tmp_path):
  src = tmp_path / "bench.json"
  src.write_text(json.dumps({"rows": [_row("mas", None, status="refused")]}))
  assert plot_bandwidth.main([str(src), "--csv", str(tmp_path / "a.csv"),
                              "--png", str(tmp_path / "a.png")]) == 1
