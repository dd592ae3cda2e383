"""The ``mosaic-async-store`` command line: ``demo``, ``compile`` and ``check``.

    $ mosaic-async-store demo
    $ mosaic-async-store compile --dtype f32 --layout WGMMA --swizzle 64 --emit stats
    $ mosaic-async-store compile my_kernel.py:make --emit stats   # your kernel
    $ mosaic-async-store check my_kernel.py:make [--schedules 3] [--json]

Exit status: 0 on success; 1 when ``demo``'s GPU run receives wrong data or ``check``
finds a broken rule; 2 on misuse, on a configuration the hardware (or the chosen
implementation) cannot do, and on a kernel of yours that cannot be loaded or compiled,
always with exactly one line on stderr; 3 when a tool of the deviceless
toolchain is missing; 4 when ``check`` finds no broken rule but some schedule stopped at
its budget (``--max-steps``, ``--max-memory-mb``) before the kernel ended; 5 when
``check`` cannot check the kernel (a construct or run-time case the checker does not
model: one line naming it, its PTX line and your Python line); 70 when the
checker itself fails (an internal error, one line on stderr naming the PTX line: please
report it).  Anything else is a bug and raises with its traceback.

Heavy imports (jax, jaxlib.mlir, lowering/) happen inside the commands so that
``--help`` and argument errors are instant.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from typing import Sequence

from mosaic_async_store._version import __version__
from mosaic_async_store.demo.config import StoreConfig
from mosaic_async_store.check.memory import CheckerError
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.tools.cli_config import (EXIT_MISUSE, Refusal, add_arch_arg,
                                                 add_config_args, add_target_args,
                                                 config_from_args,
                                                 glue_dash_values)
from mosaic_async_store.tools.cli_kernel import (CONFIG_ONLY, check_command,
                                                 compile_kernel_text)
from mosaic_async_store.tools.cli_terms import in_cli_terms
from mosaic_async_store.tools.ptx_stats import with_launch

__all__ = ["main", "build_parser"]

PROG = "mosaic-async-store"
EMIT_KINDS = ("mlir", "ptx", "sass", "stats", "plan")
EXIT_TOOLCHAIN = 3
EXIT_INTERNAL = 70   # (sysexits' EX_SOFTWARE)
CHECK_EXIT_CODES = """exit status:
  0   no rule broken (warnings are printed; --strict fails on them)
  1   findings: a rule broken (with --strict, a warning too)
  2   a usage error, or a kernel that cannot be loaded, traced or compiled (one line)
  3   a tool of the deviceless toolchain (mlir-opt, ptxas) is missing
  4   no rule broken, but a schedule stopped at its budget (--max-steps, --max-memory-mb)
  5   the checker cannot check the kernel: a construct or run-time case it does not
      model (one line: the case, its PTX line and your Python line)
  70  the checker's own internal error (one line: please report it)"""


def _budget_default(name: str) -> int:
  from mosaic_async_store.check.budget import DEFAULT   # (no jax: --help stays instant)
  return getattr(DEFAULT, name)
_DEFAULT = StoreConfig()

# SASS stores/reductions into shared memory (mirrors ptx_stats' store span).
_SASS_STORE = re.compile(r"^(?:STAS|REDAS|STS|ATOMS)|^(?:ST|RED)(?:\.|$)")


def _one_line(text: str) -> str:
  return " ".join(str(text).split())


class _Parser(argparse.ArgumentParser):
  """argparse with one-line errors: usage text would hide the message."""

  def error(self, message):  # noqa: D102  (argparse's hook)
    raise Refusal(message)


def build_parser() -> argparse.ArgumentParser:
  """The parser of ``mosaic-async-store`` and its subcommands."""
  parser = _Parser(prog=PROG, description=(
      "Plan, emit and check asynchronous register -> (cluster) shared-memory "
      "stores for JAX Mosaic GPU, without a GPU (mlir-opt, ptxas, cuobjdump)."))
  parser.add_argument("--version", action="version",
                      version=f"{PROG} {__version__}")
  sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
  demo = sub.add_parser("demo", help="the main job on the embedded default configuration",
                        description=(
                            "Plans, verifies, compiles (PTX, SASS) and, where a GPU is "
                            "present, runs a 64x128 bf16 WGMMA tile stored with a "
                            "128-byte swizzle into the peer CTA of a 2-CTA cluster."))
  add_arch_arg(demo)
  comp = sub.add_parser("compile", help="compile any configuration, or your kernel, to "
                        "mlir|ptx|sass|stats|plan",
                        description="Builds one store kernel (the options below) or your "
                        "kernel (FILE.py:FUNCTION, where FUNCTION() returns (kernel, "
                        "arrays), as for check) and prints what is asked.")
  comp.add_argument("kernel", metavar="FILE.py:FUNCTION", nargs="?",
                    help="your kernel instead of the store kernel: a Python file and a "
                    "function in it returning (kernel, (arrays...))")
  first = len(comp._actions)
  add_config_args(comp)
  comp.set_defaults(**{CONFIG_ONLY: {a.dest: (a.option_strings[0], a.default)
                                     for a in comp._actions[first:]}})
  add_arch_arg(comp)
  add_target_args(comp)
  comp.add_argument("--emit", choices=EMIT_KINDS, default="ptx",
                    help="mlir (Mosaic GPU IR as built), ptx, sass, stats (table), "
                    "or plan (this project's store plan + verification, no compiler; "
                    "ignores --impl) (default ptx); with FILE.py:FUNCTION, stats counts "
                    "every asynchronous instruction (TMA, bulk groups, WGMMA, st.async, "
                    "barriers, setmaxnreg)")
  comp.add_argument("--json", action="store_true", help="with --emit stats: JSON")
  chk = sub.add_parser("check", help="run your kernel in the PTX protocol checker",
                       description="Runs FUNCTION() of FILE.py, which returns (kernel, "
                       "arrays), in the PTX checker: every thread of every cluster under "
                       "several schedules.", epilog=CHECK_EXIT_CODES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
  chk.add_argument("target", metavar="FILE.py:FUNCTION",
                   help="a Python file and a function in it returning (kernel, (arrays...))")
  chk.add_argument("--schedules", type=int, default=3, metavar="N",
                   help="schedules to run, seeds 0..N-1 (default 3, as CI)")
  chk.add_argument("--max-steps", type=int, default=None, metavar="N",
                   help="thread-instructions each schedule may run before it stops as "
                   "unfinished (default %d)" % _budget_default("max_steps"))
  chk.add_argument("--max-memory-mb", type=int, default=None, metavar="MB",
                   help="MiB the process may grow by during a schedule's run before it "
                   "stops as unfinished (default %d)" % _budget_default("max_memory_mb"))
  chk.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="runs (a cluster under a schedule) at a time, each in a worker "
                   "process; the report is the same for every N (default: the cores, "
                   "or $MAS_CHECK_JOBS)")
  chk.add_argument("--json", action="store_true", help="the report as JSON")
  chk.add_argument("--strict", action="store_true",
                   help="warnings (the ISA's letter broken where widely used code relies "
                   "on it: docs/checker.md, Warnings) fail the check too")
  from mosaic_async_store.tools.toolchain import ARCHS
  chk.add_argument("--arch", choices=tuple(ARCHS), default=None,
                   help="the GPU to check for: sm_90a (Hopper), sm_100a, sm_103a "
                   "(Blackwell) (default: the kernel's own: sm_100a where it uses "
                   "tcgen05, else sm_90a)")
  add_target_args(chk)
  comp.add_argument("--output", "-o", metavar="FILE", help="write here instead of stdout")
  return parser


# --- the work: plan, build, compile -------------------------------------------


def _plan(cfg: StoreConfig):
  """This project's plan for ``cfg`` (as its test kernel makes it) and its report."""
  from mosaic_async_store.demo.config import config_plan
  plan = config_plan(cfg)
  return plan, plan.verify()


def _build(cfg: StoreConfig, *, bare: bool, compile_it: bool, arch: str):
  """(module asm, Compiled or None) for ``cfg``'s kernel."""
  from jaxlib.mlir import ir
  from mosaic_async_store import compat
  from mosaic_async_store.tools import toolchain
  from mosaic_async_store.demo.kernel import build_store_module
  upstream_refusals = compat.upstream_store_errors()
  with compat.make_ir_context(), ir.Location.unknown():
    try:
      module, _ = build_store_module(cfg, bare=bare)
    except upstream_refusals as e:
      if cfg.impl != "upstream" or isinstance(e, AsyncStoreError):
        raise
      # Upstream's own refusals (e.g. "Unsupported register bitwidth") are
      # the baseline's limits, not bugs of this tool.
      raise Refusal(f"upstream store_tiled_async refused {cfg.describe()}: "
                     f"{type(e).__name__}: {_one_line(e)}") from None
    asm = module.operation.get_asm(enable_debug_info=False)
    if not compile_it:
      return asm, None
    compiled = toolchain.compile_module(module, arch)
    return asm, dataclasses.replace(compiled, stats=with_launch(compiled.stats, asm))


# --- presentation -------------------------------------------------------------


def _plan_text(plan, report) -> str:
  return (f"{plan.summary()}\nverified: every destination byte written exactly once; "
          f"{report.total_bytes} bytes, {report.async_bytes} tx bytes, "
          f"bank conflicts {report.bank_conflicts} (wavefronts {report.wavefronts})")


def _sass_stores(stats) -> dict[str, int]:
  return {op: n for op, n in stats.sass_opcodes.items() if _SASS_STORE.match(op)}


def stats_dict(cfg: StoreConfig, stats, *, bare: bool, arch: str) -> dict:
  """Stats as plain JSON-able data, with the configuration they belong to."""
  out = dataclasses.asdict(stats)
  out["st_async_by_width"] = {str(k): v for k, v in stats.st_async_by_width.items()}
  out["red_async"] = stats.red_async
  out["sass_stores"] = _sass_stores(stats)
  out["config"] = dict(dataclasses.asdict(cfg), shape=list(cfg.shape))
  out["kernel"] = "store-only" if bare else "full"
  out["arch"] = arch
  return out


def _dynamic_smem_row(stats) -> list[tuple[str, int]]:
  """The dynamic shared memory row, where known: a Mosaic kernel's scratch and SMEM refs
  live there, its static shared memory is a byte or so."""
  if stats.dynamic_shared_memory is None:
    return []
  return [("dynamic shared memory (bytes)", stats.dynamic_shared_memory)]


def stats_table(stats) -> str:
  """A readable table of a kernel's static costs."""
  rows = [("registers", stats.registers),
          ("spill stores (bytes)", stats.spill_stores),
          ("spill loads (bytes)", stats.spill_loads),
          ("static shared memory (bytes)", stats.shared_memory),
          *_dynamic_smem_row(stats),
          ("PTX instructions", stats.ptx_instructions),
          ("SASS instructions", stats.sass_instructions),
          ("SASS store span", stats.sass_store_span),
          ("red.async", stats.red_async)]
  rows += [(f"st.async {w} bytes", n) for w, n in stats.st_async_by_width.items()]
  rows += [(f"PTX {op}", n) for op, n in stats.stores.items()]
  rows += [(f"SASS {op}", n) for op, n in _sass_stores(stats).items()]
  width = max(len(name) for name, _ in rows)
  return "\n".join(f"{name:<{width}}  {value:>6}" for name, value in rows)


def store_lines(ptx: str, stores: dict[str, int], examples: int = 6) -> str:
  """The PTX's store/barrier/mapa/shfl opcodes with counts, then a few lines."""
  out = [f"  {n:4d} x {op}" for op, n in stores.items()]
  seen, shown = set(), []
  for line in ptx.splitlines():
    text = line.strip()
    op = text.split(" ", 1)[0].split("\t", 1)[0]
    if op in stores and op not in seen and len(shown) < examples:
      seen.add(op)
      shown.append(f"    {' '.join(text.split())}")
  return "\n".join(out + ["  for example:"] + shown)


# --- commands -----------------------------------------------------------------


def _runtime_check(cfg: StoreConfig) -> tuple[bool, str]:
  """Runs the kernel where jax sees an sm_90 GPU; (passed, what happened)."""
  import jax
  from mosaic_async_store.demo import check
  try:
    gpus = jax.devices("gpu")
  except RuntimeError:
    return True, "no GPU here: runtime check skipped (see docs/gpu.md)"
  kind = getattr(gpus[0], "device_kind", "GPU")
  if not check.has_sm90_gpu():
    return True, f"{kind} is not an sm_90 GPU: runtime check skipped (see docs/gpu.md)"
  r = check.check_plain_store(cfg)
  verdict = "OK, received data matches the plan run on the CPU" if r.ok else "FAILED"
  detail = f"; {r.detail}" if r.detail else ""
  return r.ok, (f"{kind}: {verdict} ({r.mismatched_bytes} mismatched bytes, "
                f"{r.barrier_timeouts} barrier timeouts, {r.seconds:.2f} s){detail}")


def _demo(args: argparse.Namespace, out) -> int:
  cfg, arch = _DEFAULT, args.arch
  print(f"{PROG} {__version__} demo", file=out)
  print(f"configuration: {cfg.describe()}\n  a {'x'.join(map(str, cfg.shape))} "
        f"{cfg.dtype} tile in the {cfg.layout} layout, {cfg.swizzle}-byte swizzle, "
        f"stored into the peer CTA of a {cfg.cluster}-CTA cluster", file=out)
  plan, report = _plan(cfg)
  print(f"\n== store plan ==\n{_plan_text(plan, report)}", file=out)
  _, compiled = _build(cfg, bare=True, compile_it=True, arch=arch)
  stats = compiled.stats
  print("\n== emitted store instructions (PTX; kernel = register loads + store) ==",
        file=out)
  print(store_lines(compiled.ptx, stats.stores), file=out)
  print(f"\n== ptxas ({arch}) ==\nregisters {stats.registers}, spill stores "
        f"{stats.spill_stores} bytes, spill loads {stats.spill_loads} bytes, "
        f"static shared memory {stats.shared_memory} bytes, dynamic shared memory "
        f"{stats.dynamic_shared_memory} bytes", file=out)
  sass = ", ".join(f"{op} x{n}" for op, n in _sass_stores(stats).items()) or "none"
  print(f"\n== SASS ==\nstores: {sass}\nstore span {stats.sass_store_span} of "
        f"{stats.sass_instructions} instructions", file=out)
  passed, what = _runtime_check(cfg)
  print(f"\n== runtime check ==\n{what}", file=out)
  return 0 if passed else 1  # wrong data on a GPU must not look like success


def _compile_text(args: argparse.Namespace) -> str:
  cfg = config_from_args(args)
  if cfg.arch != "sm_90a" and args.arch == "sm_90a" and args.emit not in ("plan", "mlir"):
    raise Refusal(f"--arrival {cfg.arrival} emits tcgen05 fences, which sm_90a does not "
                   "have: pass --arch sm_100a (or sm_103a)")
  if args.emit == "plan":
    return _plan_text(*_plan(cfg)) + "\n"
  bare = not args.full
  asm, compiled = _build(cfg, bare=bare, compile_it=args.emit != "mlir", arch=args.arch)
  if args.emit == "mlir":
    return asm
  if args.emit == "stats":
    if args.json:
      return json.dumps(stats_dict(cfg, compiled.stats, bare=bare, arch=args.arch),
                        indent=2) + "\n"
    kernel = "store-only kernel" if bare else "full kernel"
    return f"# {cfg.describe()} ({kernel}, {args.arch})\n{stats_table(compiled.stats)}\n"
  return {"ptx": compiled.ptx, "sass": compiled.sass}[args.emit]


def _compile(args: argparse.Namespace, out) -> int:
  if args.json and args.emit != "stats":
    raise Refusal(f"--json goes with --emit stats, not --emit {args.emit}")
  if not args.kernel and (args.sm_count is not None or args.cuda_version is not None):
    raise Refusal("--sm-count and --cuda-version answer a kernel's device queries; the "
                  "project's store kernel makes none: drop them, or pass FILE.py:FUNCTION")
  text = compile_kernel_text(args) if args.kernel else _compile_text(args)
  if args.output is None:
    out.write(text)
    return 0
  try:
    with open(args.output, "w") as f:
      f.write(text)
  except OSError as e:
    raise Refusal(f"cannot write --output {args.output}: {e.strerror}") from None
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  """Runs the CLI; returns the exit status (the console script exits with it)."""
  # XLA's C++ INFO lines (PjRt device counts) would break the one-line
  # error contract on stderr; must be set before jax initialises a backend.
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  from mosaic_async_store.tools import toolchain
  # The library's parameter names become the CLI's flags only in messages about the
  # project's store kernel, which the flags describe; a user's kernel (FILE.py:FUNCTION)
  # is refused in the terms of its own Python code (its Refusals about the CLI's own
  # arguments are written with the flags already).
  terms = in_cli_terms
  try:
    try:
      args = build_parser().parse_args(glue_dash_values(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:  # --help / --version: printed, status 0
      return int(e.code or 0)
    if args.command == "demo":
      return _demo(args, sys.stdout)
    if args.command == "check" or args.kernel:
      terms = str
    if args.command == "check":
      return check_command(args, sys.stdout)
    return _compile(args, sys.stdout)
  except Refusal as e:
    status, message = e.status, terms(str(e))
  except AsyncStoreError as e:  # the hardware (or the planner) cannot do it
    status, message = EXIT_MISUSE, terms(str(e))
  except toolchain.ToolchainError as e:
    status, message = EXIT_TOOLCHAIN, str(e)
  except CheckerError as e:   # the checker's own failure: not the user's kernel
    status, message = EXIT_INTERNAL, str(e)
  print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr)
  return status


if __name__ == "__main__":
  sys.exit(main())
