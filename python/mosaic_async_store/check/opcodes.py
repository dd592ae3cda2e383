"""The PTX checker's opcode table: every opcode it runs, the family module whose
handler compiles it, and examples of the forms it runs and of those it refuses.

Each family (``families.REGISTERED``) declares its own table, ``{base:
Opcode(handler, examples, refused)}``, in its ``FAMILY`` (``family.Family``);
``OPCODES`` here is their union, made on first use (``families.opcode_table``).  An
instruction's base opcode (the text before the first ``.``) selects its
``Opcode``; the handler, ``handler(k, ins)`` with the machine ``k``
(``machine.Machine``) and the decoded instruction ``ins`` (``Instr``), checks the
qualifiers and operands and returns the function that executes the instruction
(``fn(th)``, see ``run``), or raises NotImplementedError naming the opcode.  A base
opcode missing from the table is refused the same way.  Everything happens when
the kernel is parsed, so no instruction is ever run with semantics the checker
does not implement.  Adding a family is one new folder (or module) with its
``FAMILY`` and its line in ``families.REGISTERED`` (docs/architecture.md, "Adding an
opcode family").

``examples`` and ``refused`` are whole PTX statements over the registers of
``EXAMPLE_REGISTERS``; test/checker/test_opcode_table.py compiles every one of them
(and runs the register-to-register ones against a reference computed another
way), so the tables cannot drift from what the handlers accept.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from mosaic_async_store.check.ops import TYPE, bits_of

__all__ = ["Opcode", "Instr", "OPCODES", "EXAMPLE_REGISTERS", "REFUSED", "decode",
           "check_qualifiers"]

# The registers the examples name (test/checker/test_opcode_table.py declares them).
EXAMPLE_REGISTERS = (".reg .pred %p<8>;", ".reg .b16 %h<8>;", ".reg .b32 %r<32>;",
                     ".reg .b64 %rd<32>;", ".reg .f32 %f<8>;", ".reg .b128 %q<4>;")


@dataclasses.dataclass(frozen=True)
class Opcode:
  """One base opcode: ``handler(k, ins)``, the function of a family module that
  compiles it (None for ``bra``, which the parser resolves), statements it runs and
  statements it refuses."""

  handler: Callable | None
  examples: tuple[str, ...]
  refused: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Instr:
  """A decoded instruction, as handlers receive it.

  ``mods``: the qualifiers after the base opcode; ``types``: those that are
  types, ``t`` the last of them (``"b0"`` when none), ``bits`` / ``signed`` its
  width and signedness; ``space``: the state-space qualifier (None: generic);
  ``ops``: parsed operands (``program.Program.operand``); ``src``: a getter per
  operand that has a value (None for the others); ``vals``: the getters of the
  stored values (the vector of a store, or its one value)."""

  opcode: str
  base: str
  mods: list
  types: list
  t: str
  bits: int
  signed: bool
  space: str | None
  ops: list
  src: list
  vals: list


def decode(opcode: str, ops: list, getter) -> Instr:
  """An ``Instr`` for ``opcode`` with parsed ``ops``; ``getter(op)`` makes a source
  operand's getter."""
  base, *mods = opcode.split(".")
  types = [p for p in mods if TYPE.match(p)]
  t = types[-1] if types else "b0"
  space = next((p for p in mods if p.split("::")[0] in ("global", "shared", "local",
                                                         "param", "const")), None)
  src = [getter(o) if o[0] in ("reg", "imm", "sym", "addr", "npred") else None for o in ops]
  vals = [getter(o) for o in ops[1][1]] if len(ops) > 1 and ops[1][0] == "vec" else src[1:2]
  return Instr(opcode, base, mods, types, t, bits_of(t), t[0] == "s", space, ops, src, vals)


def check_qualifiers(ins: Instr, groups: dict, form: str = "") -> dict:
  """The qualifiers of ``ins``, each checked against ``groups`` (group name -> the
  qualifiers of that group the checker runs exactly): every qualifier must be in one
  group, and no group may be named twice.  Returns {group: qualifier}; anything else
  is refused by name (NotImplementedError), so no qualifier is ever dropped.
  ``form`` names the grammar in the message (e.g. "ld")."""
  seen = {}
  for m in ins.mods:
    group = next((g for g, allowed in groups.items() if m in allowed), None)
    if group is None:
      raise NotImplementedError(f"opcode {ins.opcode} (qualifier .{m}: not one the checker "
                                f"runs for {form or ins.base})")
    if group in seen:
      raise NotImplementedError(f"opcode {ins.opcode} (.{seen[group]} and .{m}: two "
                                f"{group} qualifiers)")
    seen[group] = m
  return seen


# Opcodes refused by name although Mosaic GPU kernels may contain them (the table
# walk checks that each is refused).
REFUSED = ("activemask.b32 %r1", "popc.b32 %r1, %r2", "sqrt.approx.f32 %f1, %f2",
           "tcgen05.shift.cta_group::1.down [%r1]")


def __getattr__(name):
  """``OPCODES``: every family's table, merged on first use (``families.opcode_table``:
  the families import this module, so it cannot import them when it is loaded)."""
  if name != "OPCODES":
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  from mosaic_async_store.check import families
  return families.opcode_table()
