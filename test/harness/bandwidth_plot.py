"""CSV and PNG of a bandwidth run (the JSON that bench/dsmem_bandwidth.py --out writes):
what bench/plot_bandwidth.py does.

Run on the CPU after a GPU session brought its ``bench.json`` back:

    python bench/plot_bandwidth.py bench.json --csv docs/bandwidth.csv --png docs/bandwidth.png

The plot has one group of bars per configuration (dtype, tile, cluster size),
one bar per strategy, in GB/s from the device clock.  A dashed line marks the
published distributed-shared-memory figure for clusters of 2 (about 3.3 TB/s,
Luo et al. 2024), the reference the measured bars are compared against.
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib

__all__ = ["COLUMNS", "write_csv", "plot", "main"]

COLUMNS = ("strategy", "dtype", "shape", "layout", "cluster", "ctas", "iters", "status",
           "bytes", "median_s", "gbps", "wall_s", "gbps_wall", "error")
PUBLISHED_DSMEM_GBPS = 3300  # clusters of 2, Luo et al. 2024 (about 3.3 TB/s)


def write_csv(rows: list[dict], path: pathlib.Path) -> None:
  """One line per (configuration, strategy), the columns of COLUMNS."""
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
      writer.writerow({k: row.get(k, "") for k in COLUMNS})


def _config(row: dict) -> str:
  return f"{row['dtype']} {row['shape']}\n{row['layout']} x{row['cluster']}"


def plot(rows: list[dict], path: pathlib.Path, title: str = "") -> int:
  """Grouped bars of the measured rows; returns how many bars were drawn."""
  import matplotlib
  matplotlib.use("Agg")  # no display: write the file only
  import matplotlib.pyplot as plt
  measured = [r for r in rows if r.get("status") == "ok" and r.get("gbps")]
  configs = list(dict.fromkeys(_config(r) for r in measured))
  strategies = list(dict.fromkeys(r["strategy"] for r in measured))
  width = 0.8 / max(1, len(strategies))
  fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(configs)), 4.5))
  for i, strategy in enumerate(strategies):
    xs, ys = [], []
    for j, config in enumerate(configs):
      for r in measured:
        if r["strategy"] == strategy and _config(r) == config:
          xs.append(j + (i - (len(strategies) - 1) / 2) * width)
          ys.append(r["gbps"])
    ax.bar(xs, ys, width, label=strategy)
  ax.axhline(PUBLISHED_DSMEM_GBPS, color="grey", linestyle="--", linewidth=1,
             label="published DSMEM, cluster 2 (3.3 TB/s)")
  ax.set_xticks(range(len(configs)), configs, fontsize=8)
  ax.set_ylabel("GB/s (device clock, median)")
  ax.set_title(title or "Stores into a peer CTA's shared memory, all SMs busy")
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return len(measured)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("bench_json", type=pathlib.Path)
  parser.add_argument("--csv", type=pathlib.Path, required=True)
  parser.add_argument("--png", type=pathlib.Path, required=True)
  args = parser.parse_args(argv)
  data = json.loads(args.bench_json.read_text())
  rows = data.get("rows", [])
  meta = data.get("meta", {})
  write_csv(rows, args.csv)
  title = f"DSMEM store bandwidth, {meta.get('devices', ['?'])[0]}, jax {meta.get('jax', '?')}"
  bars = plot(rows, args.png, title)
  print(f"{len(rows)} rows -> {args.csv}; {bars} bars -> {args.png}")
  return 0 if bars else 1

