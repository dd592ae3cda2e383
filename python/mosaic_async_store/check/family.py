"""An opcode family of the PTX checker as one declaration: everything the core reads of it.

The core (the machine, the program, the scheduler, the shadow and the memory model)
names no family.  What a family adds, it declares in one ``Family`` value, the
``FAMILY`` of its module (or of its folder's ``__init__``), and the registry
(``families.REGISTERED``) lists the families by module: adding one is a new folder plus
one line there (docs/architecture.md, "Adding an opcode family").

The core reads, per family:

  * ``opcodes``: its table (``opcodes.Opcode`` per base opcode: the handler that
    compiles an instruction, statements it runs, statements it refuses);
  * ``rules``: the rules its handlers report (rule name -> the sentence of the PTX ISA
    or the CUDA guide it rests on), merged into the findings' table;
  * ``warnings``: those of its rules whose findings are warnings (rule -> the evidence
    that widely used code relies on what they report: ``memory.WARNINGS``);
  * ``state``: the machine attributes it keeps per launch (attribute -> a function
    making a fresh value), set by ``Machine.reset``;
  * ``at_cta_exit``: ``f(k, cta)``, run when the last thread of CTA ``cta`` exits, after
    the core's exit rule: what the family requires to be complete by then;
  * ``known_at_exit``: ``f(k, cta, known, phases)``, run by the core's exit rule before
    it checks: what the CTA's threads know of the family's asynchronous accesses beyond
    happens-before (``known``: the clock it checks with, raised in place; ``phases``:
    the mbarrier phases the CTA's threads observed complete, per barrier slot);
  * ``unnamed_writes``: statement prefixes of instructions that write registers they
    do not name (``wgmma.wait_group`` writes back accumulators the ``wgmma.mma_async``
    named): a poll's state (``poll_state``) then counts every register named by any
    instruction of the prefix;
  * ``memory_spaces``: the memories it adds beyond the core's shared and global
    memory (their state lives in ``state``); declared, read by no core module yet;
  * ``arch``: the oldest target that has it (``"sm_90a"``, ``"sm_100a"``): PTX whose
    ``.target`` is older and that uses any of its opcodes is refused naming the target
    (``report.check_ptx``; ``check`` compiles a tcgen05 kernel for sm_100a itself);
  * ``completion_groups``: the names of the completion groups it keeps (a bulk group, a
    WGMMA group, a tcgen05 commit); declared, read by no core module yet: each family
    still keeps its groups its own way (one completion-group mechanism is still to
    build).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

__all__ = ["Family"]


@dataclasses.dataclass(frozen=True)
class Family:
  """One opcode family's declaration (the module doc says what the core does with each
  field)."""

  name: str
  opcodes: Mapping
  rules: Mapping[str, str] = dataclasses.field(default_factory=dict)
  warnings: Mapping[str, str] = dataclasses.field(default_factory=dict)
  state: Mapping[str, Callable[[], object]] = dataclasses.field(default_factory=dict)
  at_cta_exit: Callable | None = None
  known_at_exit: Callable | None = None
  unnamed_writes: tuple[str, ...] = ()
  memory_spaces: tuple[str, ...] = ()
  arch: str = "sm_90a"
  completion_groups: tuple[str, ...] = ()
