"""The checker's structure (docs/architecture.md, "The checker's machine"): opcode
families as modules with their own tables, one machine whose state is declared in one
place, no mixins, and asynchronous operations whose completion is an object."""

import ast
import importlib
import pathlib
import re

import numpy as np

from mosaic_async_store.check import asyncops, families, opcodes
from mosaic_async_store.check.interp import PtxKernel
from mosaic_async_store.check.machine import Machine
from ptx_harness import kernel, outputs

CHECK = pathlib.Path(opcodes.__file__).parent


def test_each_family_owns_its_table_and_its_handlers():
  seen = {}
  for name in families.REGISTERED:
    module = importlib.import_module(f"mosaic_async_store.check.{name}")
    fam = module.FAMILY
    assert fam.opcodes, name
    for base, entry in fam.opcodes.items():
      assert base not in seen, f"{base}: claimed by {seen.get(base)} and {name}"
      seen[base] = name
      if entry.handler is not None:   # (bra: resolved by the parser), in the family's
        owner = entry.handler.__module__   # own module or folder
        assert owner == module.__name__ or owner.startswith(module.__name__ + "."), \
            (base, entry.handler)
  assert seen.keys() == opcodes.OPCODES.keys()


def test_no_class_in_the_checker_is_a_mixin():
  # Every class stands alone (an exception, or a container such as shadow.AccessSet,
  # derives from its Python base only; a record such as interp.Launched is a NamedTuple;
  # a kind of wait implements the protocol waits.Wait, whose defaults are its only code).
  for path in sorted(CHECK.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.ClassDef):
        bases = [ast.unparse(b) for b in node.bases]
        assert bases in ([], ["RuntimeError"], ["Exception"], ["ValueError"], ["dict"],
                         ["NamedTuple"], ["Wait"], ["NotImplementedError"]), \
            f"{path.name}: class {node.name}{bases}"


def test_every_piece_of_state_the_families_use_is_declared_by_the_machine():
  declared = set(vars(Machine()))
  used = set()
  for path in CHECK.rglob("*.py"):
    used |= set(re.findall(r"\bk\.([a-z_]+)\b(?!\()", path.read_text()))
  used -= {"cluster_"}   # (a docstring's "k.cluster_*")
  assert used <= declared, sorted(used - declared)


class _Recorder:
  """A completion other than an mbarrier's: it records what the machine asks of it."""

  mbarrier = None   # it signals on no mbarrier

  def __init__(self, cta):
    self.cta, self.calls = cta, []

  def issue(self, k, op):
    self.calls.append(("issue", op.th.tid))

  def stamp(self, k, op):
    self.calls.append(("stamp",))
    return op.th.slot, int(op.vc[op.th.slot])

  def complete(self, k, op):
    self.calls.append(("complete", bytes(k.smem[1][:8])))


def test_an_asynchronous_operation_lands_through_any_completion():
  kern = PtxKernel(kernel(""))
  outputs(kern, [np.zeros(4, np.int32)], cluster=2, smem_bytes=16, block=32)
  k = kern.machine
  th, done = k.threads[0], _Recorder(cta=1)
  op = asyncops.AsyncOp(th, 0, "test.async",
                        [asyncops.Write(1, 0, 4, [0x04030201, 0x08070605], None)], done)
  asyncops.issue(k, th, op)
  assert k.inflight == [op] and op.ctas == {1}
  assert "test.async into CTA 1" in op.text
  asyncops.land(k, op)
  assert k.inflight == []
  assert done.calls == [("issue", 0), ("stamp",), ("complete", bytes(range(1, 9)))]
