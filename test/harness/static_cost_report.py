"""Static cost of the asynchronous store, ours vs upstream's store_tiled_async (CPU only):
the report that bench/static_cost.py writes.

For every configuration of a documented slice of the matrix (``slice_configs``)
that upstream also compiles, both implementations' kernels are built, compiled
with the deviceless toolchain and run in the PTX checker (``cost_measure``), and
compared column by column (better / equal / worse each).  Graded
(``cost_measure.COLUMNS``): store instructions, bytes per store instruction,
modelled shared-memory wavefronts, SASS instructions less register moves and
selects.  Information (``cost_measure.INFORMATION``, and the SASS store span):
SASS instructions of the whole kernel, registers per thread.  Writes a markdown
report and a JSON file with every number.

  python bench/static_cost.py [--quick | --full [--every N]] [--jobs J] [--out docs/static_cost.md]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import itertools
import json
import multiprocessing
import os
import pathlib
import platform
import sys
import time

import config_matrix as matrix
from cost_measure import COLUMNS, INFORMATION, compare, core_verdict, sass_core, verdicts
from mosaic_async_store.demo.config import StoreConfig

__all__ = ["slice_configs", "quick_configs", "summarize", "order_explained", "markdown",
           "main"]

SLICE_SHAPES = ((64, 128), (128, 128))
SLICE_SWIZZLES = (32, 128)
# Upstream's atomics (32-bit integers only: "f32 not supported for async atomics", README
# "What it adds over upstream").  uint32's and/or/xor
# are the same .b32 instructions as int32's, so the slice has them on int32 only.
UPSTREAM_ATOMICS = {"i32": ("add", "min", "max", "and", "or", "xor"),
                    "u32": ("add", "min", "max")}


def slice_configs() -> list[StoreConfig]:
  """The documented slice of the matrix (docs/benchmarks.md says it in words).

  Every 2-D layout and dtype of the configuration matrix (``config_matrix``), swizzles 32 and 128, row- and
  column-major destinations, each in the first of 64x128 and 128x128 that fits
  (``matrix.fits``), optimized or not, peer and local targets; plain stores, and
  upstream's atomics (add, min, max, and, or, xor) on the dtypes it has them for
  (32-bit integers; ``UPSTREAM_ATOMICS``).  Upstream refuses most of it; what it
  compiles is compared.
  """
  out = []
  for layout, dtype, swizzle, transposed in itertools.product(
      matrix.LAYOUTS, matrix.DTYPES, SLICE_SWIZZLES, (False, True)):
    shape = next((s for s in SLICE_SHAPES
                  if matrix.fits(layout, dtype, swizzle, transposed, s)), None)
    if shape is None:
      continue
    atomics = (None, *UPSTREAM_ATOMICS.get(dtype, ()))
    for optimized, target, atomic in itertools.product((True, False), ("peer", "local"),
                                                       atomics):
      out.append(StoreConfig(dtype=dtype, shape=shape, layout=layout, swizzle=swizzle,
                             transposed=transposed, optimized=optimized, target=target,
                             atomic=atomic))
  return out


def quick_configs() -> list[StoreConfig]:
  """A small set (~70, --quick): the 64x128 tile with a 128-byte swizzle (unless said
  otherwise) in each WGMMA, WGMMA_8BIT, upcast, TMEM-native, TCGEN05 and transposed
  layout upstream stores, a few swizzles and unoptimized orders, and upstream's
  32-bit integer reductions."""
  out = []
  def add(**kw):  # a 64x128 tile with a 128-byte swizzle unless said otherwise
    out.append(StoreConfig(**{"shape": (64, 128), "swizzle": 128, **kw}))
  for dtype in ("f32", "bf16", "f16", "i32"):
    for swizzle in (32, 64, 128):
      for optimized in (True, False):
        add(dtype=dtype, swizzle=swizzle, optimized=optimized)
  for dtype in ("f8e4m3fn", "i8", "u8"):
    for swizzle in (32, 64, 128):
      add(dtype=dtype, layout="WGMMA_8BIT", swizzle=swizzle)
  add(dtype="f8e4m3fn", layout="WGMMA_8BIT", optimized=False)
  for layout in ("WGMMA_UPCAST_2X", "WGMMA_UPCAST_4X"):
    for dtype in ("f8e4m3fn", "i8", "bf16"):
      add(dtype=dtype, layout=layout)
    add(dtype="i4", layout=layout, shape=(64, 256))
  for layout in ("TMEM_NATIVE_V1", "TMEM_NATIVE_V2", "TMEM_NATIVE_V4", "TMEM_NATIVE_V8"):
    for dtype in ("f32", "bf16"):
      add(dtype=dtype, layout=layout, shape=(128, 64))
  add(dtype="f32", layout="TMEM_NATIVE_V4", shape=(128, 128))
  for dtype in ("f32", "bf16", "i32"):
    add(dtype=dtype, layout="TCGEN05", shape=(128, 128))
  add(dtype="f32", layout="TCGEN05", shape=(128, 128), swizzle=64)
  for dtype in ("f32", "bf16"):
    add(dtype=dtype, layout="WGMMA_TRANSPOSED")
    add(dtype=dtype, layout="WGMMA", transposed=True)
  add(dtype="f32", layout="WGMMA_ACC_32BIT")
  add(dtype="bf16", swizzle=None, optimized=False)
  add(dtype="f32", swizzle=16, optimized=False)
  for swizzle in (64, 128):
    for optimized in (True, False):
      add(dtype="i32", atomic="add", swizzle=swizzle, optimized=optimized)
  for op in ("min", "max", "and"):
    add(dtype="i32", atomic=op)
  add(dtype="u32", atomic="add")
  add(dtype="i32", atomic="add", layout="TMEM_NATIVE_V4", shape=(128, 64))
  return out


def summarize(rows) -> dict:
  """Per column: how many configurations ours is better, equal, worse (or n/a) on."""
  compared = [(r, verdicts(r)) for r in rows if verdicts(r) is not None]

  def tally(cols):
    out = {}
    for col in cols:
      counts = {k: sum(v[col] == k for _, v in compared)
                for k in ("better", "equal", "worse", "n/a")}
      out[col] = {**counts, "worse_configs": [r["config"] for r, v in compared
                                              if v[col] == "worse"]}
    return out
  columns = tally(COLUMNS)
  return {
      "configs": len(rows),
      "upstream_refuses": sum("error" in r["upstream"] for r in rows),
      "ours_refuses_upstream_accepts": [
          r["config"] for r in rows
          if "error" not in r["upstream"] and "error" in r.get("ours", {})],
      "compared": len(compared),
      "columns": columns,
      "information": tally(INFORMATION),
      "sass_worse_within_order_selects": sum(
          v["sass"] == "worse" and order_explained(r) for r, v in compared),
      "sass_less_moves_selects": _core_summary([r for r, _ in compared]),
  }


def _core_summary(compared) -> dict:
  """Information: better / equal / worse in SASS less moves and selects, over all
  compared configurations and over those where ours has more SASS."""
  def counts(rows):
    got = [core_verdict(r) for r in rows]
    return {k: got.count(k) for k in ("better", "equal", "worse")}
  sass_worse = [r for r in compared if verdicts(r)["sass"] == "worse"]
  return {"all": counts(compared), "sass_worse": counts(sass_worse),
          "worse_configs": [r["config"] for r in compared if core_verdict(r) == "worse"]}


_TITLES = {"stores": "store instructions", "bytes_per_store": "bytes per store instruction",
           "sass": "SASS instructions (whole kernel)", "registers": "registers per thread",
           "wavefronts": "modelled wavefronts (CTA 0's stores)",
           "sass_core": "SASS instructions less moves and selects"}


def _cell(m: dict, key: str) -> str:
  if "error" in m:
    return "-"
  value = sass_core(m) if key == "sass_core" else m[key]
  return "n/a" if value is None else str(value)


def _moves_selects(m: dict) -> str:
  return f"{m['sass_moves']}/{m['sass_selects']}" if "sass_moves" in m else "-"


def _widths(m: dict) -> str:
  if "error" in m:
    return "refused"
  return " ".join(f"{n}x{w}B" for w, n in m["widths"].items()) or "0"


def _worse_note(row, col: str) -> str:
  """Ours against upstream in ``col``, and the plan's order where it explains SASS."""
  ours, up = row["ours"], row["upstream"]
  note = f"{ours[col]} against {up[col]}"
  if col == "sass_core":
    note = (f"{ours['sass_core']} against {up['sass_core']} ({ours['sass']} against "
            f"{up['sass']} SASS instructions in all)")
  if col == "sass" and ours.get("order_selects"):
    note += (f"; the conflict-free order adds {ours['order_selects']} selects per thread "
             f"(before LLVM folds shared ones) and saves {ours['order_saved']} wavefronts")
  return note


def order_explained(row) -> bool:
  """Whether ours' extra SASS is no more than its conflict-free order's selects."""
  ours, up = row["ours"], row["upstream"]
  return 0 < ours["sass"] - up["sass"] <= ours.get("order_selects", 0)


def markdown(rows, summary, command: str, meta: dict) -> str:
  """The report: how it was made, the summary per column, the table, the refusals."""
  s = summary
  lines = [
      "# Static cost: mosaic-async-store vs upstream store_tiled_async", "",
      f"Generated by `{command}` on {meta['date']} (jax {meta['jax']}, jaxlib "
      f"{meta['jaxlib']}, {meta['machine']}, deviceless toolchain, sm_90a, cluster of 2). "
      f"{meta['seconds']} s with {meta['jobs']} worker processes.", "",
      "Each configuration's cost kernel (register loads from global memory, a fence, "
      "the store, the bounded wait: test/harness/store_kernels.py's `CostKernel`, the same code for "
      "both but the store) is compiled for each implementation and run in the PTX "
      "checker, which checks its bytes and waits and traces its store instructions "
      "(test/harness/cost_measure.py). Graded columns, none of which may be worse than "
      "upstream's: store instructions per thread and their widths, bytes per store "
      "instruction, the shared-memory wavefronts of CTA 0's store instructions priced by "
      "the planner's bank model (`verify.bank_wavefronts`: per warp instruction, per "
      "128-byte phase, the busiest bank), and SASS instructions of the whole kernel less "
      "register moves (`MOV`, `IMAD.MOV`) and selects (`SEL`): the selects are those of a "
      "bank-conflict-free order that pays (`StoreOrder.pays`, stated in the plan's "
      "`store_orders`), the extra moves ptxas' (address, barrier) register pairs "
      "(docs/ptxas_allocation.md). Information only: SASS instructions of the whole "
      "kernel, registers per thread, the SASS store span (first to last store) and the "
      "moves/SEL counts. n/a: the checker rejects the "
      "kernel (upstream's red.async into the executing CTA is undefined behaviour), "
      "so its wavefronts are not measured.", "",
      "## Summary", "",
      f"- configurations: {s['configs']}; upstream refuses {s['upstream_refuses']} "
      f"(not compared); compared: {s['compared']}",
      f"- upstream compiles but ours refuses: {len(s['ours_refuses_upstream_accepts'])}"
      + "".join(f"\n  - {c}" for c in s["ours_refuses_upstream_accepts"]), "",
      "| column | ours better | equal | ours worse | n/a |", "| --- | --- | --- | --- | --- |",
  ]
  for col, c in s["columns"].items():
    lines.append(f"| {_TITLES[col]} | {c['better']} | {c['equal']} | {c['worse']} | {c['n/a']} |")
  lines += ["", "Information, not graded:", "",
            "| column | ours better | equal | ours worse | n/a |", "| --- | --- | --- | --- | --- |"]
  for col, c in s.get("information", {}).items():
    lines.append(f"| {_TITLES[col]} | {c['better']} | {c['equal']} | {c['worse']} | {c['n/a']} |")
  lines += ["", f"Of the configurations where ours has more SASS instructions, "
            f"{s['sass_worse_within_order_selects']} have no more extra instructions than the "
            "selects of their bank-conflict-free order (`StorePlan.store_orders`); the "
            "wavefronts column shows what those selects buy."]
  core = s.get("sass_less_moves_selects")
  if core:  # information: where the SASS difference goes
    a, w = core["all"], core["sass_worse"]
    lines += ["", "Where the SASS difference goes: SASS instructions less register moves "
              f"and selects, ours better / equal / worse: {a['better']} / {a['equal']} / "
              f"{a['worse']} over all compared configurations; {w['better']} / {w['equal']} "
              f"/ {w['worse']} over those where ours has more SASS instructions."]
  by_name = {r["config"]: r for r in rows}
  for col, c in s["columns"].items():  # the graded columns' worse configurations
    if c["worse_configs"]:
      lines += ["", f"Ours worse in {_TITLES[col]} ({len(c['worse_configs'])}):"]
      lines += [f"- {name}: {_worse_note(by_name[name], col)}" for name in c["worse_configs"]]
  lines += ["", "## Table", "",
            "| config | stores ours | stores up | B/store ours | B/store up | wavefronts ours "
            "| wavefronts up | SASS-moves-SEL ours | SASS-moves-SEL up | SASS ours | SASS up "
            "| regs ours | regs up | span ours | span up | moves/SEL ours | moves/SEL up |",
            "| --- " * 17 + "|"]
  for r in rows:
    if "error" in r["upstream"]:
      continue
    up, ours = r["upstream"], r["ours"]
    cells = [_widths(ours), _widths(up)]
    for key in ("bytes_per_store", "wavefronts", "sass_core", "sass", "registers", "span"):
      cells += [_cell(ours, key), _cell(up, key)]
    cells += [_moves_selects(ours), _moves_selects(up)]
    lines.append(f"| {r['config']} | " + " | ".join(cells) + " |")
  refused = [r for r in rows if "error" in r["upstream"]]
  if refused:
    reasons = {}
    for r in refused:
      reasons[r["upstream"]["error"][:90]] = reasons.get(r["upstream"]["error"][:90], 0) + 1
    lines += ["", "## Upstream refuses (not compared), by message", ""]
    lines += [f"- {n}: {msg}" for msg, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
  return "\n".join(lines) + "\n"


def _meta(seconds: float, jobs: int) -> dict:
  import jax
  import jaxlib
  return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
          "jax": jax.__version__, "jaxlib": jaxlib.__version__,
          "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
                     f"Python {platform.python_version()}",
          "seconds": round(seconds), "jobs": jobs}


def _rows(configs, jobs: int) -> list[dict]:
  """compare() of every config, in ``jobs`` worker processes (spawned: a fork of
  a process that has loaded jaxlib is not safe), in the configs' order."""
  if jobs <= 1:
    return [compare(c) for c in configs]
  ctx = multiprocessing.get_context("spawn")
  with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
    rows = []
    for i, row in enumerate(pool.map(compare, configs, chunksize=4)):
      rows.append(row)
      print(f"[{i + 1}/{len(configs)}] {row['config']}", file=sys.stderr, flush=True)
    return rows


def write_json(path: pathlib.Path, head: dict, rows: list[dict]) -> None:
  """The JSON report: ``head``'s keys, then ``rows``, one compact row per line (a
  few MB for the slice; a line per configuration keeps reruns diffable)."""
  lines = [json.dumps(head)[:-1] + ', "rows": [']
  lines += [json.dumps(r, separators=(",", ":")) + ("," if i + 1 < len(rows) else "")
            for i, r in enumerate(rows)]
  path.write_text("\n".join(lines) + "\n]}\n")


def main(argv=None) -> int:
  """Compares the configurations, writes the markdown and JSON reports."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  which = parser.add_mutually_exclusive_group()
  which.add_argument("--quick", action="store_true", help="a small set of ~70 instead of the slice")
  which.add_argument("--full", action="store_true",
                     help="every configuration of the matrix (bench/matrix.py; days)")
  parser.add_argument("--every", type=int, default=1, help="only every Nth configuration")
  parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
  parser.add_argument("--out", default="docs/static_cost.md",
                      help="markdown report; the JSON goes next to it")
  args = parser.parse_args(argv)
  if args.every < 1 or args.jobs < 1:
    parser.error("--every and --jobs take a positive number")
  configs = (list(matrix.configurations(True)) if args.full else
             quick_configs() if args.quick else slice_configs())[args.every // 2::args.every]
  start = time.time()
  rows = _rows(configs, args.jobs)
  summary = summarize(rows)
  meta = _meta(time.time() - start, args.jobs)
  command = "python bench/static_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
  out = pathlib.Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  write_json(out.with_suffix(".json"),
             {"command": command.strip(), **meta, "summary": summary}, rows)
  out.write_text(markdown(rows, summary, command.strip(), meta))
  print(json.dumps({k: v for k, v in summary.items() if k != "columns"}, indent=1))
  for col, c in summary["columns"].items():
    print(f"{col}: better {c['better']} equal {c['equal']} worse {c['worse']} n/a {c['n/a']}")
  return 0

