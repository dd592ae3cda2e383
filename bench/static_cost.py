"""Static cost of the asynchronous store, ours vs upstream's store_tiled_async (CPU only).

For every configuration that upstream also handles, both bare store kernels
are compiled with the deviceless toolchain (mlir-opt -> PTX -> ptxas -> SASS)
and compared: asynchronous stores (st.async / red.async) and their bytes per
instruction, plain st/red pieces, the SASS store span (instructions from the
first to the last store, both included) and registers per thread.  Writes a
markdown report and a JSON file with every number.

  python bench/static_cost.py [--full] [--every N] [--out docs/static_cost.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import sys
import time

from mosaic_async_store.tools import ptx_stats
from mosaic_async_store.demo.config import StoreConfig

_HERE = pathlib.Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
  sys.path.insert(0, str(_HERE))
import matrix  # noqa: E402  (bench/matrix.py: the configuration matrix)

__all__ = ["default_configs", "measure", "compare", "main"]


def default_configs() -> list[StoreConfig]:
  """A moderate set (~70) covering the cases upstream-baseline.md measures."""
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


def _kind(opcode: str) -> str | None:
  if opcode.startswith(("st.async", "red.async")):
    return "async"
  if opcode.startswith(("st.", "red.")) and not opcode.startswith(("st.global", "st.local",
                                                                    "st.param")):
    return "plain"
  return None


_SASS_STORE = re.compile(r"^(?:STAS|REDAS|STS|ATOMS)|^(?:ST|RED)(?:\.|$)")


def _span_without_loads(sass: str) -> int:
  """The store span minus the register loads (LDG) that ptxas schedules into it.

  The bare kernels load their registers from global memory; ptxas interleaves
  those loads with the stores differently for each impl, which moves the
  plain span by a few instructions that are not store code.
  """
  ops = ptx_stats.sass_instructions(sass)
  pos = [i for i, op in enumerate(ops) if _SASS_STORE.match(op)]
  if not pos:
    return 0
  return sum(not op.startswith("LDG") for op in ops[pos[0]:pos[-1] + 1])


def measure(cfg: StoreConfig) -> dict:
  """Compiles cfg's bare kernel; returns its costs (raises what the build raises)."""
  from jaxlib.mlir import ir
  from mosaic_async_store import compat
  from mosaic_async_store.tools import toolchain
  from mosaic_async_store.demo.kernel import build_store_module
  with compat.make_ir_context(), ir.Location.unknown():
    module, _ = build_store_module(cfg, bare=True)
    compiled = toolchain.compile_module(module)
  stats = compiled.stats
  counts = {"async": 0, "plain": 0}
  nbytes = {"async": 0, "plain": 0}
  widths: dict[int, int] = {}
  for opcode, n in stats.stores.items():
    kind = _kind(opcode)
    if kind is None:
      continue
    w = matrix.store_width(opcode)
    counts[kind] += n
    nbytes[kind] += w * n
    if kind == "async":
      widths[w] = widths.get(w, 0) + n
  return {"async": counts["async"], "plain": counts["plain"],
          "async_widths": dict(sorted(widths.items())),
          "bytes_per_async": round(nbytes["async"] / counts["async"], 2) if counts["async"] else 0,
          "bytes_per_store": round(sum(nbytes.values()) / max(1, sum(counts.values())), 2),
          "span": stats.sass_store_span, "span_no_loads": _span_without_loads(compiled.sass),
          "registers": stats.registers,
          "sass_instructions": stats.sass_instructions}


def compare(cfg: StoreConfig) -> dict:
  """Both impls for one config; ``upstream`` / ``ours`` hold a cost dict or an error."""
  row = {"config": cfg.describe().replace(" impl=mas", ""),
         "params": {k: v for k, v in vars(cfg).items() if k != "impl"}}
  for impl, key in (("upstream", "upstream"), ("mas", "ours")):
    try:
      row[key] = measure(StoreConfig(**{**vars(cfg), "impl": impl}))
    except Exception as e:  # noqa: BLE001  (upstream refuses with many types)
      row[key] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
    if impl == "upstream" and "error" in row[key]:
      return row  # upstream refuses: not compared
  return row


def _sign(a, b) -> str:
  return "fewer" if a < b else "equal" if a == b else "more"


def verdicts(row) -> dict | None:
  """How ours compares on one config both impls compiled (None otherwise)."""
  up, ours = row["upstream"], row.get("ours", {"error": "not compiled"})
  if "error" in up or "error" in ours:
    return None
  return {
      "instructions": _sign(ours["async"] + ours["plain"], up["async"] + up["plain"]),
      "span": {"fewer": "shorter", "equal": "equal", "more": "longer"}[
          _sign(ours["span"], up["span"])],
      "span_no_loads": {"fewer": "shorter", "equal": "equal", "more": "longer"}[
          _sign(ours["span_no_loads"], up["span_no_loads"])],
      "total": _sign(ours["sass_instructions"], up["sass_instructions"]),
      "worse": ours["span"] > up["span"] or ours["bytes_per_store"] < up["bytes_per_store"]
               or ours["bytes_per_async"] < up["bytes_per_async"],
  }


def summarize(rows) -> dict:
  """Counts of fewer/equal/more instructions and shorter/equal/longer spans."""
  compared = [(r, verdicts(r)) for r in rows if verdicts(r) is not None]
  count = lambda key, value: sum(v[key] == value for _, v in compared)
  return {
      "configs": len(rows),
      "upstream_refuses": sum("error" in r["upstream"] for r in rows),
      "ours_refuses_upstream_accepts": [
          r["config"] for r in rows
          if "error" not in r["upstream"] and "error" in r.get("ours", {})],
      "compared": len(compared),
      "instructions": {k: count("instructions", k) for k in ("fewer", "equal", "more")},
      "span": {k: count("span", k) for k in ("shorter", "equal", "longer")},
      "span_no_loads": {k: count("span_no_loads", k) for k in ("shorter", "equal", "longer")},
      "total": {k: count("total", k) for k in ("fewer", "equal", "more")},
      "worse": [r["config"] for r, v in compared if v["worse"]],
  }


def _cell(m: dict, key: str) -> str:
  return "-" if "error" in m else str(m[key])


def _widths(m: dict) -> str:
  if "error" in m:
    return "refused"
  text = " ".join(f"{n}x{w}B" for w, n in m["async_widths"].items()) or "0"
  return text + (f" +{m['plain']} plain" if m["plain"] else "")


def markdown(rows, summary, command: str, meta: dict) -> str:
  """The report: how it was made, the summary, the table, upstream's refusals."""
  s = summary
  lines = [
      "# Static cost: mosaic-async-store vs upstream store_tiled_async", "",
      f"Generated by `{command}` on {meta['date']} (jax {meta['jax']}, jaxlib "
      f"{meta['jaxlib']}, {meta['machine']}, ptxas/cuobjdump from the deviceless "
      f"toolchain, sm_90a, bare kernels, peer target, cluster of 2). {meta['seconds']} s.",
      "",
      "Per configuration: asynchronous stores per thread (count x bytes; `plain`: "
      "st/red .shared::cluster pieces), bytes per store instruction, SASS store span "
      "(first to last store, both included; `span-LDG`: the same without the register "
      "loads from global memory that ptxas interleaves), SASS instructions of the "
      "whole bare kernel, and registers per thread.",
      "", "## Summary", "",
      f"- configurations: {s['configs']}; upstream refuses {s['upstream_refuses']} "
      f"(not compared); compared: {s['compared']}",
      f"- store instructions: ours fewer on {s['instructions']['fewer']}, equal on "
      f"{s['instructions']['equal']}, more on {s['instructions']['more']}",
      f"- SASS store span: ours shorter on {s['span']['shorter']}, equal on "
      f"{s['span']['equal']}, longer on {s['span']['longer']}; without the "
      f"interleaved register loads (LDG): shorter on {s['span_no_loads']['shorter']}, "
      f"equal on {s['span_no_loads']['equal']}, longer on {s['span_no_loads']['longer']}",
      f"- SASS instructions of the whole kernel (prologue and register loads are the "
      f"same code for both, so the difference is the store's own code, wherever "
      f"ptxas scheduled it): ours fewer on {s['total']['fewer']}, equal on "
      f"{s['total']['equal']}, more on {s['total']['more']}",
      f"- ours worse (longer span or fewer bytes per instruction): {len(s['worse'])}"
      + "".join(f"\n  - {c}" for c in s["worse"]),
      f"- upstream compiles but ours refuses: {len(s['ours_refuses_upstream_accepts'])}"
      + "".join(f"\n  - {c}" for c in s["ours_refuses_upstream_accepts"]),
      "", "## Table", "",
      "| config | stores ours | stores upstream | B/store ours | B/store up | span ours "
      "| span up | span-LDG ours | span-LDG up | SASS total ours | SASS total up "
      "| regs ours | regs up |",
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  ]
  for r in rows:
    if "error" in r["upstream"]:
      continue
    up, ours = r["upstream"], r["ours"]
    lines.append(
        f"| {r['config']} | {_widths(ours)} | {_widths(up)} | "
        f"{_cell(ours, 'bytes_per_store')} | {_cell(up, 'bytes_per_store')} | "
        f"{_cell(ours, 'span')} | {_cell(up, 'span')} | "
        f"{_cell(ours, 'span_no_loads')} | {_cell(up, 'span_no_loads')} | "
        f"{_cell(ours, 'sass_instructions')} | {_cell(up, 'sass_instructions')} | "
        f"{_cell(ours, 'registers')} | {_cell(up, 'registers')} |")
  refused = [r for r in rows if "error" in r["upstream"]]
  if refused:
    lines += ["", "## Upstream refuses (not compared)", ""]
    lines += [f"- {r['config']}: {r['upstream']['error']}" for r in refused]
  return "\n".join(lines) + "\n"


def _meta(seconds: float) -> dict:
  import jax
  import jaxlib
  return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
          "jax": jax.__version__, "jaxlib": jaxlib.__version__,
          "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
                     f"Python {platform.python_version()}",
          "seconds": round(seconds)}


def main(argv=None) -> int:
  """Compares the configurations, writes the markdown and JSON reports."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--full", action="store_true",
                      help="every peer configuration of bench/matrix.py (hours)")
  parser.add_argument("--every", type=int, default=1, help="with --full: every Nth")
  parser.add_argument("--out", default="docs/static_cost.md",
                      help="markdown report; the JSON goes next to it")
  args = parser.parse_args(argv)
  if args.full:
    configs = [c for c in matrix.configurations(args.every == 1, args.every)
               if c.target == "peer"]
  else:
    configs = default_configs()
  start = time.time()
  rows = []
  for i, cfg in enumerate(configs):
    rows.append(compare(cfg))
    print(f"[{i + 1}/{len(configs)}] {rows[-1]['config']}", file=sys.stderr, flush=True)
  summary = summarize(rows)
  meta = _meta(time.time() - start)
  command = "python bench/static_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
  out = pathlib.Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.with_suffix(".json").write_text(json.dumps(
      {"command": command.strip(), **meta, "summary": summary, "rows": rows}, indent=1))
  out.write_text(markdown(rows, summary, command.strip(), meta))
  print(json.dumps(summary, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
