"""What one store kernel costs, ours and upstream's, measured the same way (CPU only).

For one ``StoreConfig``, both implementations' cost kernels (register loads from
global memory, a fence, the store, the bounded wait: ``store_kernels.CostKernel``)
are compiled by the deviceless toolchain (mlir-opt -> PTX -> ptxas -> SASS) and
run in the PTX checker (``mosaic_async_store.check``), which checks their bytes and waits and traces
their store instructions.  Per implementation:

  stores          store instructions per thread (st.async / red.async, and plain
                  st / red .shared::cta|cluster pieces), and their widths
  bytes_per_store bytes per store instruction
  sass            SASS instructions of the whole kernel
  registers       registers per thread (ptxas)
  wavefronts      shared-memory wavefronts of CTA 0's store instructions, from the
                  traced run, priced by the planner's bank model
                  (``demo_kernels.traced_wavefronts``)
  span            SASS instructions from the first to the last store (information)
  sass_moves,     SASS register moves (MOV, IMAD.MOV) and selects (SEL) of the whole
  sass_selects    kernel (information: where the SASS column's difference goes;
                  ``sass_core`` is what is left without them)
  order_selects,  ours only: the selects its bank-conflict-free order adds and the
  order_saved     wavefronts it saves (``StorePlan.store_orders``), which explain a
                  larger SASS count where the order staggers

``verdicts`` says, per column, whether ours is better, equal or worse: the graded
columns (``COLUMNS``: store instructions, bytes per store instruction, modelled
wavefronts, and ``sass_core``, SASS instructions less moves and selects: the selects
of a bank-conflict-free order that pays, ``StoreOrder.pays``, are stated in the plan,
and the extra moves are ptxas' (address, barrier) pair allocation,
docs/ptxas_allocation.md) and, as information, ``INFORMATION`` (the whole kernel's
SASS instructions, registers per thread).
"""

from __future__ import annotations

import config_matrix as matrix
from mosaic_async_store.demo.config import StoreConfig

__all__ = ["COLUMNS", "INFORMATION", "measure", "compare", "verdicts", "sass_moves",
           "sass_selects", "sass_core", "sass_counts", "compile_cost_kernel", "core_verdict"]

# The graded columns: none may be worse than upstream on a configuration both compile.
# column -> True where more is better (bytes per store), False where fewer is.
COLUMNS = {"stores": False, "bytes_per_store": True, "wavefronts": False, "sass_core": False}
# Measured and compared too, as information.
INFORMATION = {"sass": False, "registers": False}


def _kind(opcode: str) -> str | None:
  if opcode.startswith(("st.async", "red.async")):
    return "async"
  if opcode.startswith(("st.", "red.")) and ".shared::" in opcode:
    return "plain"
  return None


def sass_moves(opcodes: dict[str, int]) -> int:
  """Register-to-register moves among SASS opcodes: MOV and IMAD.MOV (ptxas issues
  moves on the integer multiply-add pipe too, to balance the pipes)."""
  return sum(n for op, n in opcodes.items()
             if op == "MOV" or op.startswith(("MOV.", "IMAD.MOV")))


def sass_selects(opcodes: dict[str, int]) -> int:
  """SEL instructions among SASS opcodes (a conflict-free order's data choice)."""
  return sum(n for op, n in opcodes.items() if op == "SEL" or op.startswith("SEL."))


def sass_core(m: dict) -> int:
  """A measured kernel's SASS instructions less its moves and selects."""
  return m["sass"] - m["sass_moves"] - m["sass_selects"]


def sass_counts(stats) -> dict:
  """A compiled kernel's SASS instructions, moves, selects and registers
  (from ``ptx_stats.Stats``)."""
  counts = {"sass": stats.sass_instructions, "registers": stats.registers,
            "sass_moves": sass_moves(stats.sass_opcodes),
            "sass_selects": sass_selects(stats.sass_opcodes)}
  return {**counts, "sass_core": sass_core(counts)}


def compile_cost_kernel(cfg: StoreConfig):
  """cfg's cost kernel (``store_kernels.CostKernel``) through the deviceless
  toolchain; returns its ``toolchain.Compiled``."""
  from jaxlib.mlir import ir
  from mosaic_async_store import compat
  from mosaic_async_store.tools import toolchain
  from store_kernels import build_cost_module
  with compat.make_ir_context(), ir.Location.unknown():
    module, _ = build_cost_module(cfg)
    return toolchain.compile_module(module)


def measure(cfg: StoreConfig) -> dict:
  """Compiles and runs cfg's kernel; returns its costs (raises what the build raises).

  ``wavefronts`` is None, with ``checker`` saying why, when the PTX checker
  rejects the kernel (upstream's red.async into the executing CTA is undefined).
  """
  import demo_kernels
  compiled = compile_cost_kernel(cfg)
  stats = compiled.stats
  counts, nbytes, widths = {"async": 0, "plain": 0}, 0, {}
  for opcode, n in stats.stores.items():
    kind = _kind(opcode)
    if kind is None:
      continue
    w = matrix.store_width(opcode)
    counts[kind] += n
    nbytes += w * n
    widths[w] = widths.get(w, 0) + n
  stores = counts["async"] + counts["plain"]
  row = {"stores": stores, "async": counts["async"], "plain": counts["plain"],
         "widths": dict(sorted(widths.items())),
         "bytes_per_store": round(nbytes / stores, 2) if stores else 0,
         **sass_counts(stats), "span": stats.sass_store_span}
  if cfg.impl == "mas":  # what the plan says its conflict-free order costs and saves
    from mosaic_async_store.demo.config import config_plan
    orders = config_plan(cfg).store_orders
    row["order_selects"] = sum(o.selects for o in orders)
    row["order_saved"] = sum(o.wavefronts_saved for o in orders)
  kernel = demo_kernels.run_cost_kernel(cfg, compiled.ptx, findings_ok=True)
  if kernel.findings:
    f = kernel.findings[0]
    row["wavefronts"], row["checker"] = None, f"{f.rule}: {f.explained[:160]}"
  else:
    row["wavefronts"] = demo_kernels.traced_wavefronts(kernel.store_trace)
  return row


def compare(cfg: StoreConfig) -> dict:
  """Both impls for one config; ``upstream`` / ``ours`` hold a cost dict or an error."""
  row = {"config": cfg.describe().replace(" impl=mas", ""),
         "params": {k: v for k, v in vars(cfg).items() if k != "impl"}}
  for impl, key in (("upstream", "upstream"), ("mas", "ours")):
    try:
      row[key] = measure(StoreConfig(**{**vars(cfg), "impl": impl}))
    except Exception as e:  # noqa: BLE001  (upstream refuses with many types)
      row[key] = {"error": f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"}
    if impl == "upstream" and "error" in row[key]:
      return row  # upstream refuses: not compared
  return row


def _verdict(ours, up, more_is_better: bool) -> str:
  if ours is None or up is None:
    return "n/a"
  if ours == up:
    return "equal"
  return "better" if (ours > up) == more_is_better else "worse"


def _value(m: dict, col: str):
  """A measured column (``sass_core`` from its parts, for rows measured without it)."""
  return sass_core(m) if col == "sass_core" else m[col]


def verdicts(row) -> dict | None:
  """Column -> better / equal / worse (n/a: not measurable), graded and information
  columns alike, for a config both impls compiled; None otherwise."""
  up, ours = row["upstream"], row.get("ours", {"error": "not compiled"})
  if "error" in up or "error" in ours:
    return None
  return {col: _verdict(_value(ours, col), _value(up, col), more)
          for col, more in {**COLUMNS, **INFORMATION}.items()}


def core_verdict(row) -> str | None:
  """Ours against upstream in SASS instructions less moves and selects (the graded
  ``sass_core`` column); None where the two were not both compiled."""
  got = verdicts(row)
  return None if got is None else got["sass_core"]
