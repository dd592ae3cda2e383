"""What one schedule's run of the PTX checker may spend: thread-instructions and memory.

A run that reaches its budget stops there, as "unfinished: budget": it is not a finding
about the kernel (the kernel may be right and only long) and not a pass either (what did
not run was not checked).  ``check_ptx`` reports it per schedule (``report.Unfinished``),
with what ran.  No user kernel may take the machine down: a run that would exhaust
memory ends the same way, never with a MemoryError of the process or a kill.

    Budget()                                   # the defaults: a laptop holds them
    Budget(max_steps=10**9, max_memory_mb=8192)

``max_steps`` counts thread-instructions (every instruction of every thread, as
``PtxKernel.executed``); ``max_memory_mb`` bounds how much the process's resident memory
may grow during the run, above what it held when the run began (read from
``/proc/self/statm`` where there is one, else the process's peak from ``getrusage``,
which can only overstate the growth).
"""

from __future__ import annotations

import dataclasses
import os
import sys

__all__ = ["Budget", "BudgetExceeded", "DEFAULT", "resident_mb"]

# How often (scheduler steps) the run reads its memory: a read is a few microseconds, a
# scheduler step tens; a run grows by far less than a megabyte per hundred steps.
MEMORY_CHECK_EVERY = 128


@dataclasses.dataclass(frozen=True)
class Budget:
  """The limits of one schedule's run (module doc)."""

  max_steps: int = 200_000_000
  max_memory_mb: int = 2048

  def __post_init__(self):
    from mosaic_async_store.errors import refuse
    for name in ("max_steps", "max_memory_mb"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise refuse(name, value, "an int >= 1", f"pass {name}={getattr(DEFAULT, name)} "
                     "(the default) or more")


DEFAULT = Budget()


class BudgetExceeded(Exception):
  """A run reached its budget (``reason``: "steps" or "memory"); ``executed``: the
  thread-instructions it ran.  Not a finding and not the checker's failure."""

  def __init__(self, reason: str, detail: str, executed: int):
    self.reason, self.detail, self.executed = reason, detail, executed
    super().__init__(f"unfinished: budget ({reason}): {detail}")


def resident_mb() -> float:
  """The process's resident memory in MiB (module doc: where it is read from)."""
  try:
    with open("/proc/self/statm", "rb") as f:
      return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
  except (OSError, ValueError, IndexError):
    import resource   # (POSIX only; where /proc is missing)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # KiB; bytes on macOS
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024
