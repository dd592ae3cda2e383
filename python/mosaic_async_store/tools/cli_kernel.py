"""The CLI's commands on a user's kernel: ``compile FILE.py:FUNCTION`` and ``check
FILE.py:FUNCTION`` (FUNCTION() returns ``(fn, arrays)``).

    $ mosaic-async-store compile my_kernel.py:make --emit stats [--arch sm_100a] [--json]
    $ mosaic-async-store check my_kernel.py:make [--schedules 3] [--json]

Every refusal (a bad FILE or FUNCTION, an exception in the user's code, a kernel the
toolchain cannot take) reaches ``cli.main`` as a ``Refusal`` or an ``AsyncStoreError``:
one ``error:`` line and exit status 2.  A kernel the checker cannot check (a construct
or run-time case it does not model, ``errors.CheckerLimit``) is exit status 5, its line naming
the user's Python line of the instruction where the PTX has one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re

from mosaic_async_store.errors import AsyncStoreError, CheckerLimit
from mosaic_async_store.tools.cli_config import Refusal

__all__ = ["CONFIG_ONLY", "EXIT_UNFINISHED", "EXIT_CHECKER_LIMIT",
           "compile_kernel_text", "check_command", "stats_rows"]

EXIT_UNFINISHED = 4   # check: no rule broken, but a schedule stopped at its budget
EXIT_CHECKER_LIMIT = 5   # check: the checker cannot check this kernel (its limit)
_PTX_LINE = re.compile(r"PTX line (\d+)")
_BUDGET_TERMS = (("budget=Budget(...)", "--max-steps / --max-memory-mb"),
                 ("max_steps=", "--max-steps "), ("max_memory_mb=", "--max-memory-mb "))

# compile's options that describe the project's store kernel, not a user's kernel.
CONFIG_ONLY = "config_only"


def _library_call(fn, *args, **kwargs):
  """Runs a library call; the project's TypeError refusals (a value of the wrong kind,
  in errors.refuse_type's format) become one-line Refusals like its AsyncStoreErrors.
  Any other TypeError is a bug and keeps its traceback."""
  try:
    return fn(*args, **kwargs)
  except TypeError as e:
    if " is not supported: allowed " in str(e):
      raise Refusal(str(e)) from None
    raise


def _target_kwargs(args: argparse.Namespace) -> dict:
  """``sm_count`` / ``cuda_version`` of ``compile_kernel`` and ``check`` from --sm-count
  and --cuda-version (only those given)."""
  from mosaic_async_store.tools.device_target import parse_cuda_version
  out = {}
  if args.sm_count is not None:
    if args.sm_count < 1:
      raise Refusal(f"--sm-count {args.sm_count}: must be >= 1 (e.g. --sm-count 132)")
    out["sm_count"] = args.sm_count
  if args.cuda_version is not None:
    try:
      out["cuda_version"] = parse_cuda_version(args.cuda_version)
    except ValueError as e:
      raise Refusal(str(e)) from None
  return out


def _load(target: str, arch: str = "sm_90a", kwargs: dict | None = None):
  """FUNCTION() of FILE, run while the device queries are answered for the target (a
  FUNCTION may size its problem by the SM count)."""
  from mosaic_async_store import compat
  from mosaic_async_store.tools.device_target import device_target
  from mosaic_async_store.tools.user_kernel import load_target
  try:
    with compat.answer_device_queries(device_target(arch, **(kwargs or {}))):
      return load_target(target)
  except ValueError as e:
    raise Refusal(str(e)) from None


def _refuse_store_flags(args: argparse.Namespace) -> None:
  given = [flag for dest, (flag, default) in getattr(args, CONFIG_ONLY).items()
           if getattr(args, dest) != default]
  if given:
    many = len(given) > 1
    raise Refusal(f"{', '.join(given)} {'describe' if many else 'describes'} the project's "
                  f"store kernel; with {args.kernel} the kernel is yours: drop "
                  f"{'them' if many else 'it'}")
  if args.emit == "plan":
    raise Refusal(f"--emit plan is the project's store plan; for {args.kernel} use "
                  "--emit mlir, ptx, sass or stats")


def stats_rows(stats) -> list[tuple[str, int]]:
  """(name, value) rows of a user kernel's stats: resources, sizes, then each kind of
  asynchronous instruction and each of their opcodes."""
  rows = [("registers", stats.registers),
          ("spill stores (bytes)", stats.spill_stores),
          ("spill loads (bytes)", stats.spill_loads),
          ("static shared memory (bytes)", stats.shared_memory),
          *([("dynamic shared memory (bytes)", stats.dynamic_shared_memory)]
            if stats.dynamic_shared_memory is not None else []),
          ("PTX instructions", stats.ptx_instructions),
          ("SASS instructions", stats.sass_instructions)]
  rows += list(stats.asynchronous.items())
  rows += [(f"PTX {op}", n) for op, n in stats.async_opcodes.items()]
  return rows


def compile_kernel_text(args: argparse.Namespace) -> str:
  """What ``compile FILE.py:FUNCTION --emit E`` prints."""
  from mosaic_async_store.tools import user_kernel
  _refuse_store_flags(args)
  from mosaic_async_store import compat
  from mosaic_async_store.tools.device_target import device_target
  target = _target_kwargs(args)
  fn, arrays = _load(args.kernel, args.arch, target)
  if args.emit == "mlir":
    with compat.answer_device_queries(device_target(args.arch, **target)):
      specs, _ = _library_call(user_kernel.kernel_specs, fn, arrays)
      module = _library_call(user_kernel.lower_kernel, fn, specs)
    return module.operation.get_asm(enable_debug_info=False)
  compiled = _library_call(user_kernel.compile_kernel, fn, *arrays, arch=args.arch,
                           **target)
  if args.emit != "stats":
    return {"ptx": compiled.ptx, "sass": compiled.sass}[args.emit]
  if args.json:
    out = dataclasses.asdict(compiled.stats)
    out.update(asynchronous=compiled.stats.asynchronous, kernel=args.kernel, arch=args.arch)
    return json.dumps(out, indent=2) + "\n"
  rows = stats_rows(compiled.stats)
  width = max(len(name) for name, _ in rows)
  table = "\n".join(f"{name:<{width}}  {value:>6}" for name, value in rows)
  return f"# {args.kernel} ({args.arch})\n{table}\n"


def _at_python_line(message: str, fn, arrays, args, target) -> str:
  """A checker's refusal naming a PTX line, with the user's Python line of it added
  (the kernel is lowered again for its PTX's line info; the refusal is unchanged where
  the PTX line has no source line)."""
  found = _PTX_LINE.search(message)
  if found is None:
    return message
  from mosaic_async_store.check import lineinfo
  from mosaic_async_store.check.memory import shown_source
  from mosaic_async_store.tools import check_kernel
  try:
    ptx = check_kernel._lowered(fn, arrays, args.arch, target.get("sm_count"),
                                target.get("cuda_version"))[3]
  except AsyncStoreError:   # (it lowered once: kept as it was, should it not again)
    return message
  files, source = lineinfo.file_table(ptx), None
  for text in ptx.splitlines()[:int(found.group(1))]:
    loc = lineinfo.DIRECTIVE.search(text)
    if loc is not None and loc.group(1):
      source = lineinfo.source(files, loc.group(1), loc.group(2))
  if source is None:
    return message
  return message.replace(found.group(0), f"{found.group(0)}, {shown_source(source)}", 1)


def check_command(args: argparse.Namespace, out) -> int:
  """``check FILE.py:FUNCTION``: 0 when no rule broke, 1 on findings, 4 when none broke
  but a schedule stopped at its budget; a ``Refusal`` of status 5 where the checker
  cannot check the kernel."""
  from mosaic_async_store.check.budget import DEFAULT, Budget
  from mosaic_async_store.tools import check_kernel
  if args.schedules < 1:
    raise Refusal(f"--schedules {args.schedules}: must be >= 1 (e.g. --schedules 3)")
  limits = {}
  for flag, name in (("--max-steps", "max_steps"), ("--max-memory-mb", "max_memory_mb")):
    value = getattr(args, name, None)
    if value is not None and value < 1:
      raise Refusal(f"{flag} {value}: must be >= 1 (default {getattr(DEFAULT, name)})")
    if value is not None:
      limits[name] = value
  target = _target_kwargs(args)
  fn, arrays = _load(args.target, args.arch or "sm_90a", target)
  try:
    report = _library_call(check_kernel.check, fn, *arrays, schedules=args.schedules,
                           budget=Budget(**limits), arch=args.arch, strict=args.strict,
                           jobs=args.jobs, **target)
  except CheckerLimit as e:   # (errors.CheckerLimit: the checker's limit, not the kernel's)
    said = _at_python_line(str(e), fn, arrays, args, target)
    raise Refusal(f"cannot check {args.target}: {said}", EXIT_CHECKER_LIMIT) from None
  if args.json:
    out.write(json.dumps(check_kernel.report_json(report), indent=2) + "\n")
  else:
    text = str(report)
    for api, flag in _BUDGET_TERMS:   # the budget in the CLI's terms
      text = text.replace(api, flag)
    out.write(f"{args.target}: {text}\n")
  return 0 if report.ok else 1 if report.errors else EXIT_UNFINISHED
