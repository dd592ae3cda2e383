"""The configuration matrix: every layout x dtype x shape x swizzle x option.

Shared by ``test/unit/test_matrix.py`` (every configuration either compiles
through mlir-opt and ptxas, or is refused with an AsyncStoreError) and by the
static cost report (``static_cost_report``, bench/static_cost.py).  Shapes are
chosen per layout, dtype and swizzle: multiples of the layout's base tile and of the swizzle tile (8 rows x
``swizzle`` bytes), in both orientations for transposed destinations.  1-D
layouts (WGMMA_ROW/COL, TCGEN05_ROW/COL) only go to plain (unswizzled) refs:
Mosaic has no 1-D swizzled tile.

Usage (the full matrix, in worker processes that survive crashes):

  python bench/matrix.py [--full] [--every N] [--jobs J] [--json out.json] [--plan-only]

``--plan-only`` plans and verifies each configuration (no IR, no compiler):
accepted, refused by reason, and which accepted plans carry plain st/red
pieces and why (``plain_reason``); docs/matrix.md records the full run.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import itertools
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from mosaic_async_store.demo.config import StoreConfig
from mosaic_async_store.plan.dtypes import as_dtype

__all__ = ["LAYOUTS", "DTYPES", "SWIZZLES", "ATOMICS", "Outcome", "shapes_for", "fits",
           "configurations", "run_config", "run_matrix", "summarize",
           "format_summary", "refusal_key", "store_width", "ptx_store_bytes",
           "SAMPLE_EVERY", "MAX_ELEMENTS", "plan_config", "plain_reason", "main"]

LAYOUTS = ("WGMMA", "WGMMA_8BIT", "WGMMA_UPCAST_2X", "WGMMA_UPCAST_4X",
           "WGMMA_TRANSPOSED", "WGMMA_ACC_32BIT", "TCGEN05", "TCGEN05_TRANSPOSED",
           "TMEM_NATIVE_V1", "TMEM_NATIVE_V2", "TMEM_NATIVE_V4", "TMEM_NATIVE_V8",
           "WGMMA_ROW", "WGMMA_COL", "TCGEN05_ROW", "TCGEN05_COL", "STRIDED", "SPLAT")
DTYPES = ("f64", "i64", "f32", "i32", "u32", "bf16", "f16", "i16", "f8e4m3fn",
          "f8e5m2", "i8", "u8", "i4", "u4", "f4e2m1fn")
SWIZZLES = (None, 16, 32, 64, 128)
ATOMICS = (None, "add", "min", "max", "and", "inc")
MAX_ELEMENTS = 65536        # keeps every kernel (and its plan) small
SAMPLE_EVERY = 401          # CI sample: every Nth configuration (a prime: no aliasing)
_ONE_D = ("WGMMA_ROW", "WGMMA_COL", "TCGEN05_ROW", "TCGEN05_COL")
_BASE_TILE = {  # the layouts' base tiles (layout.tiling.tiles[0]), without jax
    "WGMMA": (64, 8), "WGMMA_8BIT": (64, 16), "WGMMA_UPCAST_2X": (64, 16),
    "WGMMA_UPCAST_4X": (64, 32), "WGMMA_TRANSPOSED": (64, 8),
    "WGMMA_ACC_32BIT": (64, 8), "TCGEN05": (128, 8), "TCGEN05_TRANSPOSED": (128, 8),
    "TMEM_NATIVE_V1": (128, 1), "TMEM_NATIVE_V2": (128, 2),
    "TMEM_NATIVE_V4": (128, 4), "TMEM_NATIVE_V8": (128, 8),
    "WGMMA_ROW": (64,), "WGMMA_COL": (8,), "TCGEN05_ROW": (128,), "TCGEN05_COL": (8,),
    "STRIDED": (64, 8), "SPLAT": (64, 8),
}


def _min_tile(layout: str, dtype: str, swizzle, transposed: bool) -> tuple[int, int]:
  """The smallest 2-D shape of ``layout``: a multiple of its base tile and of the
  swizzle tile (8 rows x ``swizzle`` bytes, both orientations when transposed)."""
  bits = as_dtype(dtype).bits
  base = _BASE_TILE[layout]
  sw_cols = swizzle * 8 // bits if swizzle else 1
  sw_rows = 8 if swizzle else 1
  rows = math.lcm(base[0], sw_rows, sw_cols if transposed else 1)
  cols = math.lcm(base[1], sw_cols, sw_rows if transposed else 1)
  if layout in ("STRIDED", "SPLAT"):  # 128 threads must hold whole registers
    cols = math.lcm(cols, max(1, 128 * 8 // (rows * 8)))
  return rows, cols


def fits(layout: str, dtype: str, swizzle, transposed: bool, shape: tuple[int, ...]) -> bool:
  """Whether ``shape`` is a valid 2-D shape of the matrix for these options."""
  if layout in _ONE_D or len(shape) != 2 or math.prod(shape) > MAX_ELEMENTS:
    return False
  rows, cols = _min_tile(layout, dtype, swizzle, transposed)
  return shape[0] % rows == 0 and shape[1] % cols == 0


def shapes_for(layout: str, dtype: str, swizzle, transposed: bool) -> list[tuple[int, ...]]:
  """One or two valid shapes: the smallest, and one with >= 128-element rows."""
  base = _BASE_TILE[layout]
  if len(base) == 1:
    small = base[0] * max(1, 16 // base[0])
    return [(small,), (math.lcm(base[0], 256),)]
  rows, cols = _min_tile(layout, dtype, swizzle, transposed)
  second = (rows, math.lcm(cols, 128))
  if second == (rows, cols):
    second = (2 * rows, cols)
  return [s for s in ((rows, cols), second) if math.prod(s) <= MAX_ELEMENTS]


def _all_configurations():
  for layout, dtype in itertools.product(LAYOUTS, DTYPES):
    one_d = layout in _ONE_D
    for swizzle, transposed in itertools.product(
        (None,) if one_d else SWIZZLES, (False,) if one_d else (False, True)):
      for shape in shapes_for(layout, dtype, swizzle, transposed):
        for optimized, target, atomic in itertools.product(
            (True, False), ("peer", "local"), ATOMICS):
          yield StoreConfig(dtype=dtype, shape=shape, layout=layout, swizzle=swizzle,
                            target=target, atomic=atomic, transposed=transposed,
                            optimized=optimized)


def configurations(full: bool, every: int = SAMPLE_EVERY):
  """Yields the matrix's StoreConfigs: all of them, or every ``every``-th one."""
  for i, cfg in enumerate(_all_configurations()):
    if full or i % every == every // 2:
      yield cfg


@dataclasses.dataclass(frozen=True)
class Outcome:
  """What happened to one configuration.

  status: "accepted" (ptxas assembled it and the bytes add up), "refused"
  (AsyncStoreError), "wrong" (assembled, but the PTX stores the wrong number of
  bytes), "error" (any other exception) or "crash" (the process died).
  """

  status: str
  message: str = ""
  store_bytes: int = 0       # bytes the PTX's store instructions move
  expected_bytes: int = 0
  plain: str = ""            # --plan-only: why an accepted plan has plain st/red pieces


_STORE_OP = re.compile(r"^(?:st|red)\.(?!global|local|param)")
_PTX_TYPE = re.compile(r"\.(?:v([248])\.)?(?:noftz\.)?(?:[bfsu]|bf)(\d+)(x2)?$")


def store_width(opcode: str) -> int:
  """Bytes one store/reduction opcode moves (``st.async...v4.b32`` -> 16)."""
  match = _PTX_TYPE.search(opcode)
  if match is None:
    raise ValueError(f"cannot size {opcode}")
  vec, bits, pair = match.groups()
  return int(vec or 1) * int(bits) // 8 * (2 if pair else 1)


def ptx_store_bytes(opcodes: dict[str, int], writers: int) -> int:
  """Bytes stored by a bare store kernel's PTX (one warpgroup)."""
  return writers * sum(store_width(op) * n for op, n in opcodes.items()
                       if _STORE_OP.match(op))


def _expected(cfg) -> tuple[int, int]:
  """(destination bytes, writer threads) of cfg.

  The bytes come from the shape alone.  The writers are the layout's
  non-replica threads, except where the plan gathers partner lanes' registers
  (threads holding under a word): then only the gathering lanes write.
  """
  from mosaic_async_store.demo.config import resolve_layout
  from mosaic_async_store.plan.geometry import register_map
  from mosaic_async_store.demo.config import config_plan
  bits = as_dtype(cfg.dtype).bits
  if cfg.impl == "mas":
    regs = config_plan(cfg).registers
  else:
    regs = register_map(resolve_layout(cfg.layout, cfg.shape, cfg.dtype), cfg.shape)
  return math.prod(cfg.shape) * bits // 8, int(regs.writer.sum())


def run_config(cfg: StoreConfig) -> Outcome:
  """Builds cfg's bare store kernel and assembles it (mlir-opt, ptxas)."""
  from jaxlib.mlir import ir
  from mosaic_async_store import compat
  from mosaic_async_store.tools import toolchain
  from mosaic_async_store.errors import AsyncStoreError
  from mosaic_async_store.demo.kernel import build_store_module
  from mosaic_async_store.tools.ptx_stats import ptx_opcodes
  try:
    with compat.make_ir_context(), ir.Location.unknown():
      module, _ = build_store_module(cfg, bare=True)
      ptx = toolchain.mlir_to_ptx(module)
    toolchain.ptx_to_cubin(ptx)
    expected, writers = _expected(cfg)
  except AsyncStoreError as e:
    return Outcome("refused", str(e))
  except Exception as e:  # noqa: BLE001  (any other type is a finding)
    tb = traceback.format_exception(e, limit=-3)
    return Outcome("error", f"{type(e).__name__}: {e}\n{''.join(tb)[-1500:]}")
  got = ptx_store_bytes(ptx_opcodes(ptx), writers)
  status = "accepted" if got == expected and got > 0 else "wrong"
  return Outcome(status, "" if status == "accepted" else
                 f"PTX stores {got} bytes, expected {expected}", got, expected)


def plain_reason(plan) -> str:
  """Why an accepted plan carries plain ``st``/``red`` pieces ("" when it has none)."""
  plain = [i for i in plan.instructions if not i.is_async]
  if not plain:
    return ""
  if plan.atomic is not None:
    if not plan.peer:
      return "reduction into the executing CTA (red.async is undefined there)"
    return f"no red.async form for {plan.atomic} on {plan.dtype.bits}-bit {plan.dtype.kind}"
  from mosaic_async_store.plan.ptx_forms import ST_ASYNC_TYPES
  widths = sorted({i.width for i in plain})
  if set(widths) <= set(ST_ASYNC_TYPES):
    return "plain stores asked for (strategy=\"plain\") or a one-CTA cluster"
  return f"pieces of {'/'.join(map(str, widths))} bytes that no st.async width carries"


def plan_config(cfg: StoreConfig) -> Outcome:
  """Plans and verifies cfg (no IR): accepted (with ``plain``), refused, or error."""
  from mosaic_async_store.demo.config import config_plan
  from mosaic_async_store.errors import AsyncStoreError
  try:
    plan = config_plan(cfg)
    report = plan.verify()
  except AsyncStoreError as e:
    return Outcome("refused", str(e))
  except Exception as e:  # noqa: BLE001  (any other type is a finding)
    tb = traceback.format_exception(e, limit=-3)
    return Outcome("error", f"{type(e).__name__}: {e}\n{''.join(tb)[-1500:]}")
  expected = math.prod(cfg.shape) * as_dtype(cfg.dtype).bits // 8
  status = "accepted" if report.total_bytes == expected else "wrong"
  return Outcome(status, "" if status == "accepted" else
                 f"plan stores {report.total_bytes} bytes, expected {expected}",
                 report.total_bytes, expected, plain_reason(plan))


def refusal_key(message: str, words: int = 6) -> str:
  """The first words of a refusal, with numbers and values blurred; a refused atomic
  also names the element type it was refused for."""
  head = message.split(": allowed")[0]
  head = re.sub(r"\(.*?\)|\[.*?\]|[0-9]+", "#", head)
  key = " ".join(head.split()[:words])
  dtype = re.match(r"atomic=\S+ is not supported: allowed for (\w+)", message)
  return f"{key} for {dtype.group(1)}" if dtype else key


def summarize(configs, outcomes) -> dict:
  """Counts per status, refusal histogram, and the non-clean outcomes."""
  counts = collections.Counter(o.status for o in outcomes)
  refusals = collections.Counter(refusal_key(o.message) for o in outcomes
                                 if o.status == "refused")
  bad = [(c.describe(), o.status, o.message) for c, o in zip(configs, outcomes)
         if o.status not in ("accepted", "refused")]
  plain = collections.Counter(o.plain for o in outcomes if o.status == "accepted" and o.plain)
  return {"total": len(outcomes), "counts": dict(counts),
          "refusals": dict(refusals.most_common()), "plain": dict(plain.most_common()),
          "bad": bad}


def format_summary(summary: dict) -> str:
  """Counts, refusal histogram and non-clean outcomes as text."""
  total, counts = summary["total"], summary["counts"]
  lines = [f"configurations: {total}"]
  for status in ("accepted", "refused", "wrong", "error", "crash"):
    n = counts.get(status, 0)
    lines.append(f"  {status:9s} {n:6d} ({100 * n / max(total, 1):5.1f} %)")
  lines.append("refusals by first words:")
  lines += [f"  {n:6d}  {key}" for key, n in summary["refusals"].items()]
  if summary.get("plain"):
    lines.append("accepted plans with plain st/red pieces, by reason:")
    lines += [f"  {n:6d}  {key}" for key, n in summary["plain"].items()]
  lines += [f"  BAD {status}: {what}: {msg[:300]}" for what, status, msg in summary["bad"]]
  return "\n".join(lines)


def _worker(path: str, plan_only: bool = False) -> None:
  """Worker mode: runs the configs in ``path``, one JSON line per event."""
  with open(path) as f:
    configs = [_config_from_json(d) for d in json.load(f)]
  run = plan_config if plan_only else run_config
  for i, cfg in enumerate(configs):
    print(json.dumps({"i": i, "start": True}), flush=True)
    print(json.dumps({"i": i, **dataclasses.asdict(run(cfg))}), flush=True)


def _run_queue(configs, indices, outcomes, tmpdir, log, plan_only=False):
  """Runs ``indices`` in one worker at a time, restarting it after a crash."""
  while indices:
    path = os.path.join(tmpdir, f"q{indices[0]}.json")
    with open(path, "w") as f:
      json.dump([_config_to_json(configs[i]) for i in indices], f)
    err = open(path + ".err", "w+")
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", path,
                             *(["--plan-only"] if plan_only else [])],
                            stdout=subprocess.PIPE, stderr=err, text=True)
    done, current = 0, None
    for line in proc.stdout:
      event = json.loads(line)
      if event.pop("start", False):
        current = event["i"]
        continue
      k = indices[event.pop("i")]
      outcomes[k] = Outcome(**event)
      done, current = done + 1, None
      if log and sum(o is not None for o in outcomes) % 500 == 0:
        print(f"matrix: {sum(o is not None for o in outcomes)}/{len(outcomes)}",
              file=log, flush=True)
    rc = proc.wait()
    if current is not None or (rc and done < len(indices)):
      err.seek(0)
      outcomes[indices[done]] = Outcome("crash", f"exit {rc}: {err.read()[-800:]}")
      done += 1
    err.close()
    indices = indices[done:]


def run_matrix(configs, jobs: int | None = None, log=None,
               plan_only: bool = False) -> list[Outcome]:
  """Runs configs in ``jobs`` worker processes (interleaved); a worker that
  dies is restarted after recording a "crash" for the config it was on."""
  configs = list(configs)
  jobs = max(1, min(jobs or os.cpu_count() or 1, len(configs)))
  outcomes: list[Outcome | None] = [None] * len(configs)
  with tempfile.TemporaryDirectory(prefix="mas-matrix-") as tmpdir:
    threads = [threading.Thread(target=_run_queue, args=(
        configs, list(range(j, len(configs), jobs)), outcomes, tmpdir, log, plan_only))
               for j in range(jobs)]
    for t in threads:
      t.start()
    for t in threads:
      t.join()
  return outcomes


def _config_to_json(cfg: StoreConfig) -> dict:
  return dataclasses.asdict(cfg)


def _config_from_json(d: dict) -> StoreConfig:
  return StoreConfig(**{**d, "shape": tuple(d["shape"])})


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--full", action="store_true", help="the whole matrix")
  parser.add_argument("--every", type=int, default=SAMPLE_EVERY,
                      help="without --full: every Nth configuration")
  parser.add_argument("--jobs", type=int, default=os.cpu_count())
  parser.add_argument("--json", help="write counts, histogram and outcomes here")
  parser.add_argument("--plan-only", action="store_true",
                      help="plan and verify only (no IR, no compiler)")
  parser.add_argument("--worker", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    return _worker(args.worker, args.plan_only)
  configs = list(configurations(args.full, args.every))
  start = time.time()
  outcomes = run_matrix(configs, args.jobs, log=sys.stderr, plan_only=args.plan_only)
  summary = summarize(configs, outcomes)
  summary["seconds"] = round(time.time() - start, 1)
  print(format_summary(summary))
  if args.json:
    with open(args.json, "w") as f:
      json.dump({**summary, "outcomes": [
          {**_config_to_json(c), **dataclasses.asdict(o)}
          for c, o in zip(configs, outcomes)]}, f, indent=1)
  return 0 if not summary["bad"] else 1


if __name__ == "__main__":
  sys.exit(main())
