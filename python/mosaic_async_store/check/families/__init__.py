"""The registry of the PTX checker's opcode families: one line per family.

``REGISTERED`` lists each family's module (relative to ``mosaic_async_store.check``);
each module defines ``FAMILY`` (``family.Family``).  The thread's own instruction
families (values, memory operations, synchronisation, ...) are single modules of
check/; the asynchronous units (TMA and bulk copies, WGMMA, tcgen05) are folders of
this package, each holding its grammar, rules, state and execution.  Everything the
core reads of a family it reads through the functions here, which load the families
on first use (they import the core, so the core cannot import them when it is
loaded).
"""

from __future__ import annotations

import functools
import importlib

__all__ = ["REGISTERED", "loaded", "opcode_table", "family_of_opcode", "state", "exit_checks", "exit_knowledge",
           "unnamed_writes", "arch_of"]

REGISTERED = (
    "values", "memops", "strong", "access", "sync", "fences", "barriers", "collectives",
    "control",
    "families.tma",
    "families.wgmma",
    "families.clc",
    "families.tcgen05",
)

# The targets in the order of their features (a later one runs what an earlier one
# does, except WGMMA, which sm_100a and later do not have).
ARCH_ORDER = ("sm_90a", "sm_100a", "sm_103a")


@functools.cache
def loaded() -> tuple:
  """Every registered family's ``Family``, in ``REGISTERED`` order.  Loading them adds
  their rules to the findings' table (``memory.RULES``, one table for every rule) and
  their warnings to ``memory.WARNINGS``; a rule named by two families, or by a family
  and the core, is an error of the registry."""
  from mosaic_async_store.check import memory   # (the core: loaded by now)
  fams = tuple(importlib.import_module(f"mosaic_async_store.check.{name}").FAMILY
               for name in REGISTERED)
  for fam in fams:
    clash = memory.RULES.keys() & fam.rules.keys()
    if clash:
      raise RuntimeError(f"rules {sorted(clash)} of the family {fam.name} are declared "
                         "twice")
    memory.RULES.update(fam.rules)
    unknown = fam.warnings.keys() - memory.RULES.keys()
    if unknown:
      raise RuntimeError(f"warnings {sorted(unknown)} of the family {fam.name} are no rules")
    memory.WARNINGS.update(fam.warnings)
  return fams


@functools.cache
def opcode_table() -> dict:
  """Base opcode -> ``opcodes.Opcode``, over every family; a base claimed twice is an
  error of the registry."""
  table, owner = {}, {}
  for fam in loaded():
    for base, entry in fam.opcodes.items():
      if base in table:
        raise RuntimeError(f"opcode {base} is claimed by the families {owner[base]} and "
                           f"{fam.name}")
      table[base], owner[base] = entry, fam.name
  return table


def family_of_opcode(base: str):
  """The ``Family`` whose table holds ``base``, or None."""
  return next((fam for fam in loaded() if base in fam.opcodes), None)


@functools.cache
def state() -> dict:
  """Machine attribute -> the function making its fresh value, over every family."""
  merged = {}
  for fam in loaded():
    clash = merged.keys() & fam.state.keys()
    if clash:
      raise RuntimeError(f"machine state {sorted(clash)} is declared twice ({fam.name})")
    merged.update(fam.state)
  return merged


@functools.cache
def exit_checks() -> tuple:
  """The families' checks run when a CTA exits (``f(k, cta)``)."""
  return tuple(fam.at_cta_exit for fam in loaded() if fam.at_cta_exit is not None)


@functools.cache
def exit_knowledge() -> tuple:
  """The families' ``known_at_exit`` hooks (``f(k, cta, known, phases)``)."""
  return tuple(fam.known_at_exit for fam in loaded() if fam.known_at_exit is not None)


@functools.cache
def unnamed_writes() -> tuple:
  """The statement prefixes whose instructions write registers they do not name."""
  return tuple(p for fam in loaded() for p in fam.unnamed_writes)


def arch_of(bases) -> str:
  """The oldest target that runs every family that the base opcodes ``bases`` use."""
  need = {fam.arch for fam in loaded() if fam.opcodes.keys() & set(bases)}
  return max(need, default=ARCH_ORDER[0], key=ARCH_ORDER.index)
