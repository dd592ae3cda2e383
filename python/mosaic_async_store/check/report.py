"""``check_ptx``: run a kernel's PTX over every thread of a cluster, under several
schedules, and report what the PTX memory model and the ISA's rules say about it.

    from mosaic_async_store.check import check_ptx, Memref
    report = check_ptx(ptx, [x, Memref(out)], smem_bytes=16392, cluster=(2, 1, 1))
    report.ok, report.findings, report.outputs

Arguments are checked before anything runs; a rule broken in a schedule is a
``Finding`` of that schedule (``findings.py``: after a race or an early read the run goes
on, as the kernel would on hardware; a fault, an undefined mbarrier state or a hang ends
it); a schedule that reaches its budget (``budget.Budget``) is ``Unfinished``; the
arguments' contents after the first schedule that completed without a finding are the
outputs.  The checker's own failure is a
``CheckerError``, raised, never a finding.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from mosaic_async_store.check import families, parallel, subbyte
from mosaic_async_store.check.budget import DEFAULT, Budget, BudgetExceeded
from mosaic_async_store.check.interp import Memref, PtxKernel
from mosaic_async_store.check.findings import Finding, detailed
from mosaic_async_store.check.params import array_of, buffer_slots
from mosaic_async_store.check.tensor_map import TensorMap
from mosaic_async_store.errors import refuse, refuse_limit, refuse_type

__all__ = ["Finding", "Report", "Unfinished", "check_ptx", "MAX_BLOCK", "MAX_CLUSTER",
           "MAX_SMEM_BYTES"]

MAX_BLOCK, MAX_CLUSTER, MAX_SMEM_BYTES = 1024, 16, 227 * 1024


@dataclasses.dataclass(frozen=True)
class Unfinished:
  """A schedule that stopped at its budget (``budget.Budget``) before the kernel ended:
  neither a finding nor a pass.

  Attributes:
    schedule: the schedule's seed.
    reason: "steps" (``max_steps`` thread-instructions ran) or "memory" (the run grew
      past ``max_memory_mb``, or memory ran out).
    executed: the thread-instructions that ran (what was checked, rule by rule).
    message: the budget's words, with the limit and how to raise it.
    cta_base: the first CTA of the cluster it ran (a grid runs cluster by cluster).
  """

  schedule: int
  reason: str
  executed: int
  message: str
  cta_base: int = 0

  def __str__(self) -> str:
    grid = f"cluster from CTA {self.cta_base}, " if self.cta_base else ""
    return (f"[unfinished: budget] {grid}schedule {self.schedule}: stopped after "
            f"{self.executed} thread-instructions (checked, no rule broken): "
            f"{self.message}")


@dataclasses.dataclass(frozen=True)
class Report:
  """What ``check_ptx`` found: ``findings``, one per schedule (and cluster) that broke a
  rule; ``unfinished``, the schedules that stopped at their budget (``Unfinished``);
  ``ok`` when no schedule broke a rule and every one finished (a warning breaks none
  unless ``strict``: ``errors``, ``warnings``); ``outputs``, every
  argument after the grid ran (each cluster's first completed schedule; None if a
  cluster completed none); ``schedules``, the seeds that ran."""

  findings: tuple[Finding, ...]
  outputs: list[np.ndarray] | None
  schedules: tuple[int, ...]
  unfinished: tuple[Unfinished, ...] = ()
  strict: bool = False

  @property
  def errors(self) -> tuple[Finding, ...]:
    """The findings that fail the check: every one of an error rule, and with
    ``strict`` the warnings too."""
    return tuple(f for f in self.findings if self.strict or f.severity == "error")

  @property
  def warnings(self) -> tuple[Finding, ...]:
    """The warnings that do not fail it (none with ``strict``)."""
    return tuple(f for f in self.findings if f not in self.errors)

  @property
  def ok(self) -> bool:
    return not self.errors and not self.unfinished

  def __str__(self) -> str:
    seeds = list(self.schedules)
    warned = f", {len(self.warnings)} warning(s):" if self.warnings else ""
    if self.ok:
      head = f"ok: no rule broken in schedules {seeds}{warned}"
    elif self.errors:
      head = f"{len(self.errors)} finding(s) in schedules {seeds}{warned or ':'}"
    else:
      head = (f"no rule broken, but {len(self.unfinished)} schedule(s) of {seeds} "
              f"unfinished (a larger budget=Budget(...) lets them finish){warned or ':'}")
    errors = _identical(self.errors)
    if len(errors) < len(self.errors):
      head = head.replace(" in schedules ", f" ({len(errors)} distinct: one found in "
                          "several blocks is shown once) in schedules ", 1)
    lines = [head]
    for f, ctaids, clusterids in errors + _identical(self.warnings):
      lines += [f"  {line}" for line in detailed(f, ctaids, clusterids)]
    return "\n".join(lines + [f"  {u}" for u in self.unfinished])


def _identical(findings) -> list[tuple[Finding, list, list]]:
  """``findings`` grouped where they differ only in their block and cluster (a grid's
  blocks that break a rule alike): (the first, the blocks' ``ctaid``s, their
  ``clusterid``s), in order of first appearance (``Report.__str__``)."""
  groups: dict = {}
  for f in findings:
    key = dataclasses.replace(f, ctaid=None, clusterid=None)
    _, ctaids, clusterids = groups.setdefault(key, (f, [], []))
    ctaids += [f.ctaid] if f.ctaid is not None else []
    clusterids += [f.clusterid] if f.clusterid is not None else []
  return [(f, sorted(set(c)), sorted(set(k))) for f, c, k in groups.values()]


def _dim3(param: str, value, limit: int, x_only=False) -> tuple[int, int, int]:
  """``value`` as (x, y, z), each at least 1 and their product at most ``limit``;
  ``x_only``: (x, 1, 1) (the checker's blocks are one-dimensional)."""
  if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
    value = (int(value), 1, 1)
  if not (isinstance(value, tuple) and len(value) == 3 and
          all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value)):
    raise refuse_type(param, value, "a tuple of 3 ints (x, y, z)", f"pass {param}=(128, 1, 1)"
                      if param == "block" else f"pass {param}=(2, 1, 1)")
  x, y, z = (int(v) for v in value)
  if x_only and (y, z) != (1, 1):
    raise refuse_limit(param, value, f"(x, 1, 1) (the checker runs one-dimensional {param}s)",
                 f"flatten the {param} into x, e.g. {param}=({x * y * z}, 1, 1)")
  if min(x, y, z) < 1 or x * y * z > limit:
    raise refuse(param, value, f"(x, y, z), each >= 1, with x * y * z <= {limit}",
                 f"pass a smaller {param}")
  return x, y, z


def _check_ptx_text(ptx):
  if not isinstance(ptx, str) or ".entry" not in ptx:
    raise refuse_type("ptx", ptx if not isinstance(ptx, str) else ptx[:60],
                      "the PTX text of a kernel (with a .entry)",
                      "pass compiled.ptx (mosaic_async_store.toolchain.compile_module)")


def _check_args(args, smem_bytes, block, cluster, grid, schedules):
  if not isinstance(args, (list, tuple)):
    raise refuse_type("args", args, "a list of NumPy arrays, Memref(array) or TensorMap, "
                      "in the kernel's parameter order", "pass [x, out] (or [Memref(x), "
                      "...])")
  for i, a in enumerate(args):
    if not isinstance(a, (np.ndarray, Memref, TensorMap)):
      raise refuse_type(f"args[{i}]", a, "a NumPy array (one pointer parameter), "
                        "Memref(array) (a memref descriptor) or a TensorMap (128 bytes of "
                        "a tensor-map parameter)", "wrap it: np.asarray(...)")
    if (refused := subbyte.refusal(f"args[{i}]", array_of(a).dtype)) is not None:
      raise refused
  if not (isinstance(smem_bytes, (int, np.integer)) and not isinstance(smem_bytes, bool)
          and 0 <= smem_bytes <= MAX_SMEM_BYTES):
    raise refuse("smem_bytes", smem_bytes, f"an int in 0..{MAX_SMEM_BYTES} (the kernel's "
                 "dynamic shared memory per CTA)", "pass the launch's dynamic SMEM size")
  bx = _dim3("block", block, MAX_BLOCK, x_only=True)[0]
  cs = _dim3("cluster", cluster, MAX_CLUSTER)
  gs = cs if grid is None else _dim3("grid", grid, 1 << 24)
  if any(g % c for g, c in zip(gs, cs)):
    raise refuse("grid", grid, f"a whole number of clusters of {cs} CTAs in each "
                 "dimension (None: one)", f"pass grid={tuple(c * max(1, g // c) for g, c in zip(gs, cs))}")
  if not (isinstance(schedules, (int, np.integer)) and not isinstance(schedules, bool)
          and schedules >= 1):
    raise refuse("schedules", schedules, "an int >= 1 (seeds 0 .. schedules - 1)",
                 "pass schedules=3 (what the project's CI runs)")
  return bx, cs, gs


def check_ptx(ptx: str, args, *, smem_bytes: int, block=(128, 1, 1), cluster=(1, 1, 1),
              grid=None, schedules: int = 3, budget: Budget | None = None,
              strict: bool = False, jobs: int | None = None) -> Report:
  """Runs ``ptx`` (one ``.entry``) over every thread of one cluster under schedules
  ``0 .. schedules - 1`` (docs/checker.md: 0 runs each thread until it blocks, 1 lands
  asynchronous stores as late as possible, others interleave at random).

  Args:
    ptx: the kernel's PTX text.
    args: the kernel's arguments in its parameter order: a NumPy array for a pointer
      parameter, ``Memref(array)`` for a memref descriptor (3 + 2 * ndim parameters),
      a ``TensorMap`` for 128 bytes of a tensor-map parameter (``params``: layout;
      the same array object in several arguments is one global buffer; a map's
      output is its array's final contents).  Arrays of 2- and 4-bit elements
      (ml_dtypes ``int4``, ``uint4``, ``float4_e2m1fn``, ``int2``, ``uint2``) are laid
      out packed, as the kernel reads them, and come back unpacked in their dtype and
      shape (``subbyte``: the layout; 1- and 6-bit types are refused).
    smem_bytes: dynamic shared memory per CTA.
    block: threads per CTA, (x, 1, 1).
    cluster: CTAs per cluster, (x, y, z) (at most 16 in all; rank x fastest).
    grid: CTAs in the grid, (x, y, z), a whole number of clusters in each dimension;
      None: one cluster.
      The clusters run one after another, each under every schedule, the first
      completed schedule's memory carried into the next (races between clusters are
      not looked for).
    schedules: how many schedules to run.
    strict: warnings (``memory.WARNINGS``: the ISA's letter broken where widely used
      code relies on it) fail the check too.
    budget: what each schedule's run may spend (``budget.Budget``: thread-instructions
      and memory; None: ``budget.DEFAULT``, which a laptop holds).  A schedule that
      reaches it stops and is reported in ``Report.unfinished``, never a crash.
    jobs: runs (a cluster under a schedule) at a time, each in a worker process
      (``parallel``: Linux only); None: ``MAS_CHECK_JOBS`` where set, else the machine's
      cores.  The report is the same for every ``jobs``; 1 runs them in this process.

  Raises:
    AsyncStoreError / TypeError: an argument the checker cannot take, or PTX with an
      opcode it does not run exactly (named, with its line), before anything runs.
      An instruction whose run-time case the checker does not model (e.g. a float NaN
      result) is refused the same way when a schedule reaches it: a limit of the
      checker is never a finding.
  """
  _check_ptx_text(ptx)
  dims = _check_args(args, smem_bytes, block, cluster, grid, schedules)
  try:
    kernel = PtxKernel(ptx)
  except NotImplementedError as e:
    raise refuse_limit("ptx", str(e), "the opcodes docs/checker.md lists as run exactly",
                 "check that instruction's kernel another way, or report it") from None
  _check_target(ptx, kernel)
  return _checked(kernel, args, dims, smem_bytes, schedules, budget, strict, jobs)


_BASE = re.compile(r"\s*(?:@!?%\w+\s+)?([a-z_]\w*)")   # a statement's base opcode


def _check_target(ptx, kernel) -> None:
  """Refuses PTX whose ``.target`` is older than an opcode family it uses needs
  (``family.Family.arch``: tcgen05 is sm_100a's): ptxas would refuse it, and no GPU of
  that target runs it."""
  found = re.search(r"^\s*\.target\s+(sm_\w+)", ptx, re.M)
  target = found.group(1) if found else None
  if target not in families.ARCH_ORDER:
    return
  bases = {base.group(1) for text in kernel.texts
           if (base := _BASE.match(text)) is not None}
  need = families.arch_of(bases)
  if families.ARCH_ORDER.index(need) > families.ARCH_ORDER.index(target):
    used = sorted(b for b in bases if families.family_of_opcode(b) is not None
                  and families.family_of_opcode(b).arch == need)
    raise refuse("ptx", f".target {target}", f"{need} or newer for a kernel with "
                 f"{', '.join(used)} instructions (none of them exists on {target})",
                 f"compile the kernel for {need} (.target {need})")


def check_parsed(kernel: PtxKernel, args, *, smem_bytes: int, block=(128, 1, 1),
                 cluster=(1, 1, 1), grid=None, schedules: int = 3,
                 budget: Budget | None = None, strict: bool = False,
                 jobs: int | None = None) -> Report:
  """``check_ptx`` of a kernel already parsed (``PtxKernel(ptx)``, by a caller that
  words a refusal of its PTX in its own terms: ``tools.check_kernel``), with the same
  arguments and checks."""
  return _checked(kernel, args, _check_args(args, smem_bytes, block, cluster, grid,
                                            schedules), smem_bytes, schedules, budget, strict,
                  jobs)


def _checked(kernel, args, dims, smem_bytes, schedules, budget, strict=False,
             jobs=1) -> Report:
  """The runs of ``check_ptx`` on a parsed kernel whose arguments ``_check_args`` took
  (``dims``: its block, cluster and grid), ``jobs`` at a time (``parallel.grid_runs``)."""
  bx, cs, gs = dims
  jobs = parallel.resolve_jobs(jobs)
  try:
    kernel.machine.pack_params(list(args))
  except ValueError as e:
    raise refuse("args", f"{len(args)} arguments", str(e),
                 "pass one argument per kernel parameter, in order") from None
  if budget is None:
    budget = DEFAULT
  elif not isinstance(budget, Budget):
    raise refuse_type("budget", budget, "a mosaic_async_store.check.Budget, or None",
                      "pass budget=Budget(max_steps=..., max_memory_mb=...)")
  firsts = _clusters(cs, gs)   # cluster by cluster; its writes carry into the next

  def launch(current, first, seed):   # one run: Launched, or Unfinished at its budget
    try:
      return kernel.launch(current, cluster=cs, smem_bytes=int(smem_bytes), block=bx,
                           schedule=seed, first_cta=first, grid_ctas=gs, budget=budget)
    except BudgetExceeded as e:
      return Unfinished(seed, e.reason, e.executed, e.detail, _base(first, gs))

  def carried(current, outcomes):   # one array per buffer: arguments that alias still do
    done = _first_completed(outcomes)
    if done is None or done < 0:
      return None if done is None else current
    return [_rewrapped(a, o) for o, a in zip(_per_argument(outcomes[done].outputs, args),
                                             args)]
  try:
    grid, current = parallel.grid_runs(launch, firsts, int(schedules), list(args), carried,
                                       jobs)
  except NotImplementedError as e:   # the checker's limit, not the kernel's fault
    raise refuse_limit("ptx", " ".join(str(e).split()), "instructions and run-time cases "
                 "docs/checker.md lists as run exactly", "check that kernel another "
                 "way, or report the case") from None
  findings = [_finding(kernel, f, seed) for outcomes in grid
              for seed, o in enumerate(outcomes) if not isinstance(o, Unfinished)
              for f in o.findings]
  unfinished = [o for outcomes in grid for o in outcomes if isinstance(o, Unfinished)]
  complete = all(_first_completed(outcomes) >= 0 for outcomes in grid)
  result = [np.asarray(array_of(a)) for a in current]
  return Report(tuple(findings), result if complete else None, tuple(range(int(schedules))),
                tuple(unfinished), bool(strict))


def _first_completed(outcomes):
  """The seed of the first run in ``outcomes`` (seed order) that completed (no
  budget stop, no finding of an error rule: a warning's run completed right); -1 when
  none did; None while a run before it has not ended (None in ``outcomes``)."""
  for seed, outcome in enumerate(outcomes):
    if outcome is None:
      return None
    if not isinstance(outcome, Unfinished) and not any(
        f.severity == "error" for f in outcome.findings):
      return seed
  return -1


def _base(first, gs) -> int:
  """The index of a cluster's first CTA ``first`` (x, y, z) in the grid ``gs``."""
  return first[0] + gs[0] * (first[1] + gs[1] * first[2])


def _clusters(cs, gs):
  """The first CTA (x, y, z) of each cluster of shape ``cs`` in a grid ``gs``, x fastest."""
  return [(x, y, z) for z in range(0, gs[2], cs[2]) for y in range(0, gs[1], cs[1])
          for x in range(0, gs[0], cs[0])]


def _finding(kernel, f: Finding, seed: int) -> Finding:
  """The machine's finding ``f`` as ``check_ptx`` reports it: of schedule ``seed``, with
  the user's source line read off its PTX line where it has none."""
  return dataclasses.replace(f, schedule=seed, source=f.source or kernel.source_at(f.ptx_line))


def _like(raw: np.ndarray, arg) -> np.ndarray:
  """The bytes ``raw`` as an array of ``arg``'s dtype and shape (2- and 4-bit elements
  unpacked: ``subbyte``)."""
  like = np.asarray(array_of(arg))
  return subbyte.unpack(raw, like.dtype, like.shape)


def _per_argument(out, args) -> list[np.ndarray]:
  """A launch's buffers' bytes ``out`` (one per distinct array, ``params.buffer_slots``)
  as one array per argument, the same object where the arguments' arrays were."""
  arrays = {}
  for j, a in zip(buffer_slots(args), args):
    arrays.setdefault(j, _like(out[j], a))
  return [arrays[j] for j in buffer_slots(args)]


def _rewrapped(arg, array):
  """``arg`` (an array, a ``Memref``, a ``TensorMap``) over ``array`` instead."""
  if isinstance(arg, Memref):
    return Memref(array)
  if isinstance(arg, TensorMap):
    return dataclasses.replace(arg, array=array)
  return array
