"""The PTX protocol checker: a kernel's PTX run over every thread of a cluster on the CPU,
under adversarial schedules, checked against the PTX memory model and the ISA's
undefined-behaviour rules (docs/checker.md).

    from mosaic_async_store.check import check_ptx, Memref
    report = check_ptx(ptx, [x, Memref(out)], smem_bytes=..., cluster=(2, 1, 1))
    print(report)            # ok, or each finding: rule, CTA, thread, PTX line (and the
                             # user's source line, where the PTX has line info), schedule

Modules: ``interp`` (parsing and the opcode dispatch), ``run`` (threads and the
scheduler), ``sync`` (mbarriers, barriers, fences), ``access`` (plain and asynchronous
memory accesses), ``memory`` (the model: rules, scopes, the per-byte shadow, schedules),
``ops`` and ``floats`` (values), ``params`` and ``tensor_map`` (the kernel's
parameters: arrays, ``Memref``s and ``TensorMap``s, laid out as the PTX declares
them), ``lineinfo`` (the PTX's ``.file`` / ``.loc``: each instruction's source line),
``findings`` (``Finding``: one broken rule, as data), ``report`` (``check_ptx``,
``Report``), ``parallel`` (a check's runs, a cluster under a schedule each, in worker
processes: ``jobs``).
``check`` (a Pallas or Mosaic kernel lowered, compiled and bound) is
``tools/check_kernel.py``'s: it needs the deviceless toolchain.  ``checking`` (a mode:
every Pallas MGPU kernel called on the CPU meanwhile is checked) is ``tools/checking.py``'s.
"""

from mosaic_async_store.check.budget import Budget
from mosaic_async_store.check.interp import Memref, PtxKernel
from mosaic_async_store.check.findings import Finding
from mosaic_async_store.check.memory import RULES, Access, CheckerError
from mosaic_async_store.check.report import Report, Unfinished, check_ptx
from mosaic_async_store.check.tensor_map import TensorMap
from mosaic_async_store.check import families as _families

_families.loaded()   # (every family's rules in RULES before anyone reads it)

__all__ = ["check", "checking", "check_ptx", "Report", "Finding", "Unfinished", "Budget", "Access",
           "Memref", "TensorMap", "PtxKernel", "CheckerError", "RULES"]


def check(fn, *args, schedules: int = 3, budget: Budget | None = None,
          arch: str | None = None, strict: bool = False, jobs: int | None = None) -> Report:
  """See :func:`mosaic_async_store.tools.check_kernel.check` (loads jax on first use).
  ``arch``: "sm_90a", "sm_100a" or "sm_103a"; None: the kernel's own (sm_100a where it
  uses tcgen05, else sm_90a).  ``strict``: warnings fail the check too.  ``jobs``: runs
  at a time, each in a worker process (``parallel``; None: the machine's cores, or
  ``MAS_CHECK_JOBS``); the report is the same for every ``jobs``."""
  from mosaic_async_store.tools.check_kernel import check as _check
  return _check(fn, *args, schedules=schedules, budget=budget, arch=arch, strict=strict,
                jobs=jobs)


def checking(schedules: int = 3, budget: Budget | None = None, raise_findings: bool = True,
             strict: bool = False):
  """See :func:`mosaic_async_store.tools.checking.checking` (loads jax on first use)."""
  from mosaic_async_store.tools.checking import checking as _checking
  return _checking(schedules=schedules, budget=budget, raise_findings=raise_findings,
                   strict=strict)
