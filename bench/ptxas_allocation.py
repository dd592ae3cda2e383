"""How much of a SASS count is ptxas' register allocation (CPU only).

The static comparison (bench/static_cost.py) counts SASS instructions of the
whole kernel.  Where ours has more on a register-order store, the extra
instructions are register moves (its ``sass_moves`` column): every STAS/REDAS
takes its address and its mbarrier in one even/odd register pair, and ptxas
copies the barrier address into each pair it allocates, unless it reuses a pair
that still holds it.

This script measures how much that depends on the form of the PTX rather than on
what it computes.  Upstream's own cost kernel is rewritten so that each 64-bit
register load (``ld.global.b64 %rd``) becomes two 32-bit halves packed again
(``ld.global.v2.b32`` + ``mov.b64``), which changes no value: the PTX checker
runs the rewritten kernel and checks every CTA's bytes and waits.  Both forms,
and ours, are assembled by the same ptxas, and their SASS instructions, moves and
registers are printed.

  python bench/ptxas_allocation.py [--out docs/ptxas_allocation.md]
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import re
import sys

from mosaic_async_store.demo.config import StoreConfig

_ROOT = pathlib.Path(__file__).resolve().parent.parent
for _p in ("bench", "test/harness"):   # cost_measure; the checker kernels
  if str(_ROOT / _p) not in sys.path:
    sys.path.insert(0, str(_ROOT / _p))
import cost_measure  # noqa: E402

__all__ = ["CASES", "split_wide_loads", "assemble", "measure_case", "main"]

# Register-order configurations where ours has more SASS than upstream in
# docs/static_cost.md, all with 8-byte register loads in upstream's kernel.
CASES = (
    StoreConfig(dtype="u32", shape=(128, 128), layout="TCGEN05", swizzle=32, optimized=False),
    StoreConfig(dtype="u32", shape=(128, 128), layout="TCGEN05_TRANSPOSED", swizzle=128,
                transposed=True, optimized=False),
    StoreConfig(dtype="i64", shape=(64, 128), layout="WGMMA_ACC_32BIT", swizzle=128,
                transposed=True, optimized=False),
)

_WIDE_LOAD = re.compile(r"^(\s*)ld\.global\.b64\s+(%rd\d+),\s*(\[[^\]]+\]);\s*$")


def split_wide_loads(ptx: str) -> tuple[str, int]:
  """``ptx`` with every ``ld.global.b64 %rdN, [a];`` written as
  ``ld.global.v2.b32 {%lo, %hi}, [a]; mov.b64 %rdN, {%lo, %hi};`` (the same value,
  little-endian halves); returns the text and the number of loads rewritten.
  The halves are declared before the first ``.reg`` line, so ``ptx`` must hold
  one function (a cost kernel does)."""
  lines, n = [], 0
  for line in ptx.splitlines():
    m = _WIDE_LOAD.match(line)
    if m is None:
      lines.append(line)
      continue
    indent, reg, addr = m.groups()
    lo, hi = f"%mas_half{2 * n}", f"%mas_half{2 * n + 1}"
    lines += [f"{indent}ld.global.v2.b32 {{{lo}, {hi}}}, {addr};",
              f"{indent}mov.b64 {reg}, {{{lo}, {hi}}};"]
    n += 1
  if n:  # declare the halves with the function's first register declaration
    first = next(i for i, line in enumerate(lines) if line.strip().startswith(".reg"))
    lines.insert(first, f"\t.reg .b32 %mas_half<{2 * n}>;")
  return "\n".join(lines) + "\n", n


def assemble(ptx: str) -> dict:
  """ptxas + cuobjdump of ``ptx``: SASS instructions, moves, selects, registers."""
  from mosaic_async_store.tools import toolchain
  from mosaic_async_store.tools.ptx_stats import Stats
  cubin, report = toolchain.ptx_to_cubin(ptx)
  return cost_measure.sass_counts(Stats.from_outputs(ptx, report, toolchain.cubin_to_sass(cubin)))


def measure_case(cfg: StoreConfig) -> dict:
  """Upstream's kernel, the same kernel with its 64-bit loads split (checked in the
  PTX checker: bytes and waits), and ours; each ``assemble``d."""
  import demo_kernels
  upstream_cfg = StoreConfig(**{**vars(cfg), "impl": "upstream"})
  upstream = cost_measure.compile_cost_kernel(upstream_cfg).ptx
  split, loads = split_wide_loads(upstream)
  if not loads:
    raise ValueError(f"{cfg.describe()}: upstream's kernel has no 64-bit register loads")
  demo_kernels.run_cost_kernel(upstream_cfg, split)   # raises unless bytes and waits are right
  return {"config": cfg.describe().replace(" impl=mas", ""), "loads_split": loads,
          "upstream": assemble(upstream), "upstream_split": assemble(split),
          "ours": assemble(cost_measure.compile_cost_kernel(cfg).ptx)}


def _versions() -> str:
  import subprocess
  import jax
  from mosaic_async_store.tools import toolchain
  out = subprocess.run([str(toolchain.find_tool("ptxas")), "--version"], capture_output=True,
                       text=True).stdout.strip().splitlines()
  release = next((line for line in out if "release" in line), "?")
  when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
  return f"{when}, jax {jax.__version__}, ptxas: {release}"


def markdown(rows: list[dict], command: str, versions: str = "") -> str:
  """The report: one table row per kernel form."""
  lines = ["# ptxas' register allocation and the SASS count", "",
           f"Generated by `{command}` ({versions or 'versions not recorded'}; "
           "bench/ptxas_allocation.py says the method). Upstream's kernel with its "
           "64-bit loads split computes the same values (the PTX checker ran it and "
           "checked every CTA's bytes and waits).", "",
           "| configuration | kernel | SASS | moves | SASS less moves | registers |",
           "| --- | --- | --- | --- | --- | --- |"]
  names = {"upstream": "upstream", "upstream_split": "upstream, 64-bit loads split",
           "ours": "ours"}
  for r in rows:
    for key, name in names.items():
      m = r[key]
      lines.append(f"| {r['config']} | {name} | {m['sass']} | {m['sass_moves']} | "
                   f"{m['sass'] - m['sass_moves']} | {m['registers']} |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> int:
  """Measures CASES; prints (or writes) the markdown report."""
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", type=pathlib.Path, help="write the report here")
  args = parser.parse_args(argv)
  command = "python bench/ptxas_allocation.py" + (f" --out {args.out}" if args.out else "")
  text = markdown([measure_case(cfg) for cfg in CASES], command, _versions())
  if args.out:
    args.out.write_text(text)
  else:
    print(text, end="")
  return 0


if __name__ == "__main__":
  sys.exit(main())
