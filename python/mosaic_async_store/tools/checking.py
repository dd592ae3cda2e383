"""``checking()``: a mode under which every Pallas MGPU kernel called on a CPU runs
through the checker, as jax's interpret mode runs them through its interpreter.

    from mosaic_async_store.check import checking
    with checking(schedules=3) as mode:
      y = my_kernel(x)                 # plgpu.kernel or pl.pallas_call, eager or under jit
    mode.kernels                       # one KernelRun per kernel call: name, call site,
    mode.findings                      # schedules, findings

How: while the mode is active, the CPU lowering of Pallas's kernel primitives
(``pallas_call_p``; ``mpmd_map_p``, which ``plgpu.kernel`` binds) is replaced
(``compat.kernel_lowering_on_cpu``).  A Mosaic GPU kernel then lowers to a host callback
(``jax.pure_callback``) that receives the kernel's concrete inputs, binds the same
primitive with the same parameters in a function of its own, and runs ``check`` on it
(``tools/check_kernel.py``: lowered for sm_90a, compiled to PTX with line info, run over
the whole grid under the schedules).  The callback returns the checker's outputs.  Other
Pallas kernels (interpret mode, Triton, TPU) lower as before.  The kernels' device queries
are answered for an H100 meanwhile (``compat.answer_device_queries``), and on jax 0.11 and
newer ``pl.pallas_call`` with ``plgpu.CompilerParams`` goes through upstream's current
path (``compat.mosaic_gpu_pallas_call``).  jax's caches are cleared on entry and exit, so
that no executable compiled under the mode outlives it (and none from before it is used).

A kernel whose outputs nothing uses is not checked: jax drops its callback, as it would
drop the kernel.  Kernels with ``input_output_aliases`` are refused (the checker starts
each output as 0xA5 bytes).
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from mosaic_async_store.check.findings import Finding
from mosaic_async_store.check.report import Unfinished

__all__ = ["checking", "Checking", "KernelRun", "KernelFindings"]

_ACTIVE: list["Checking"] = []   # the modes entered, innermost last


@dataclasses.dataclass(frozen=True)
class KernelRun:
  """One kernel call the mode checked: the kernel's ``name``, the user's line that called
  it (``call_site``, ``file:line``, or None), the schedules that ran, the ``findings``
  (``check.Finding``) and the schedules that stopped at their budget (``unfinished``)."""

  name: str
  call_site: str | None
  schedules: tuple[int, ...]
  findings: tuple[Finding, ...]
  unfinished: tuple[Unfinished, ...] = ()
  strict: bool = False

  @property
  def errors(self) -> tuple[Finding, ...]:
    """The findings that fail the kernel: errors, and with ``strict`` warnings too."""
    return tuple(f for f in self.findings if self.strict or f.severity == "error")

  @property
  def ok(self) -> bool:
    return not self.errors and not self.unfinished

  def __str__(self) -> str:
    site = f" (called at {self.call_site})" if self.call_site else ""
    warned = len(self.findings) - len(self.errors)
    if self.ok:
      verdict = f"ok, {warned} warning(s)" if warned else "ok"
    elif self.errors:
      verdict = f"{len(self.errors)} finding(s)" + (f", {warned} warning(s)" if warned else "")
    else:
      verdict = f"no rule broken, {len(self.unfinished)} schedule(s) unfinished"
    lines = [f"kernel {self.name}{site}: schedules {list(self.schedules)}: {verdict}"]
    return "\n".join(lines + [f"  {f}" for f in (*self.findings, *self.unfinished)])


class KernelFindings(AssertionError):
  """A kernel the mode checked broke a rule (or completed no schedule): the message names
  the kernel, the user's line that called it, and each finding (its rule, PTX line and the
  user's line in the kernel).  ``run`` is the ``KernelRun``.  Raised in the host callback,
  it reaches the caller inside jax's runtime error for the callback, with this message."""

  def __init__(self, run: KernelRun):
    self.run = run
    rules = sorted({f.rule for f in run.errors})
    why = (f"broke {', '.join(rules)}" if rules else
           "completed no schedule within its budget (raise budget=Budget(...))")
    super().__init__(f"mosaic_async_store checking: {why}\n{run}")


class Checking:
  """The value of ``with checking(...)``: ``kernels``, a ``KernelRun`` per kernel call
  checked while it was active, and ``findings``, all their findings in order."""

  def __init__(self, schedules: int, budget, raise_findings: bool, strict: bool = False):
    self.schedules, self.budget, self.raise_findings = schedules, budget, raise_findings
    self.strict = strict
    self.kernels: list[KernelRun] = []

  @property
  def findings(self) -> tuple[Finding, ...]:
    return tuple(f for run in self.kernels for f in run.findings)

  def __repr__(self) -> str:
    return (f"Checking(schedules={self.schedules}, kernels={len(self.kernels)}, "
            f"findings={len(self.findings)})")


@contextlib.contextmanager
def checking(schedules: int = 3, budget=None, raise_findings: bool = True,
             strict: bool = False):
  """While active, every Pallas MGPU kernel (``plgpu.kernel``, ``pl.pallas_call`` with the
  Mosaic GPU backend) called on the CPU, eagerly or inside ``jax.jit``, runs through the
  checker on its concrete inputs under ``schedules`` schedules (``budget``: each
  schedule's ``check.Budget``, None for its defaults) and returns the checker's outputs.

  A kernel with findings raises ``KernelFindings`` (naming the kernel, the rule and the
  user's lines); with ``raise_findings=False`` its findings are only collected and its
  outputs returned.  Warnings (the ISA's letter broken where widely used code relies on
  it: docs/checker.md, "Warnings") are collected, not raised, unless ``strict``.  A kernel that completed no schedule (a finding that stops the run
  ends its schedule) always raises.  A kernel the checker cannot run raises its refusal
  (``AsyncStoreError``: what it cannot run and why).  Both are raised in the host
  callback and reach the caller, eagerly or under ``jax.jit``, inside jax's runtime error
  for the callback, with the same message (``input_output_aliases``, refused while the
  call lowers, is raised as it is).

  Yields a ``Checking`` whose ``kernels`` and ``findings`` fill as kernels run.
  Modes nest: a kernel run is recorded in every active mode, under the innermost's
  settings.
  """
  import jax
  from mosaic_async_store import compat
  from mosaic_async_store.tools.device_target import device_target
  if not isinstance(schedules, int) or isinstance(schedules, bool) or schedules < 1:
    from mosaic_async_store.errors import refuse_type
    raise refuse_type("schedules", schedules, "a positive int", "pass schedules=3")
  mode = Checking(schedules, budget, raise_findings, bool(strict))
  with contextlib.ExitStack() as stack:
    stack.enter_context(compat.answer_device_queries(device_target("sm_90a")))
    stack.enter_context(compat.mosaic_gpu_pallas_call())
    stack.enter_context(compat.kernel_lowering_on_cpu(_checked_rule))
    _ACTIVE.append(mode)
    jax.clear_caches()
    try:
      yield mode
    finally:
      _ACTIVE.remove(mode)
      jax.clear_caches()


def _checked_rule(prim, own_rule):
  """The CPU lowering of ``prim`` under the mode: a Mosaic GPU kernel becomes a host
  callback that checks it; anything else lowers by ``own_rule``."""

  def rule(ctx, *operands, **params):
    from mosaic_async_store import compat
    if not _ACTIVE or not compat.is_mosaic_gpu_kernel(params):
      return own_rule(ctx, *operands, **params)
    import jax
    name = _kernel_name(params)
    if params.get("input_output_aliases"):
      from mosaic_async_store.errors import refuse
      raise refuse("input_output_aliases", params["input_output_aliases"],
                   f"kernel {name} without aliased outputs under checking() (the checker "
                   "starts each output as 0xA5 bytes)", "check the kernel without aliases")
    mode, site = _ACTIVE[-1], compat.lowering_call_site(ctx)
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in ctx.avals_out]

    def host(*arrays):
      return _run(mode, prim, params, name, site, arrays, shapes)

    def body(*xs):
      return jax.pure_callback(host, shapes, *xs)

    return compat.lower_as(ctx, body, operands)

  return rule


def _kernel_name(params) -> str:
  """The kernel's ``name``, else its body's function name (from the jaxpr's debug info:
  ``pl.pallas_call`` leaves ``name`` None unless given)."""
  if params.get("name"):
    return str(params["name"])
  jaxprs = list(params.get("jaxprs") or ()) + [params.get("jaxpr")]
  for jaxpr in jaxprs:
    info = getattr(jaxpr, "debug_info", None)
    if getattr(info, "func_name", None):
      return str(info.func_name)
  return "anonymous"


def _run(mode, prim, params, name, site, arrays, shapes) -> list:
  """The host callback: ``check`` of the kernel on ``arrays``; its outputs."""
  from mosaic_async_store.tools.check_kernel import check

  def kernel(*args):
    return prim.bind(*args, **params)

  kernel.__name__ = kernel.__qualname__ = name
  report = check(kernel, *[np.array(a) for a in arrays], schedules=mode.schedules,
                 budget=mode.budget, strict=mode.strict)
  run = KernelRun(name, site, tuple(report.schedules), tuple(report.findings),
                  tuple(report.unfinished), mode.strict)
  for active in {id(m): m for m in (*_ACTIVE, mode)}.values():
    active.kernels.append(run)
  if report.outputs is None or (report.errors and mode.raise_findings):
    raise KernelFindings(run)
  return [np.asarray(o, dtype=s.dtype).reshape(s.shape)
          for o, s in zip(report.outputs, shapes)]
