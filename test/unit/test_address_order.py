"""Addresses derive from the most recent base, and each base's stores issue together
(addressing.base_order), so few bases are live at once: ptxas keeps every base in a
register until its last use.  Each address step has one definition
(``AddressStep.run``), run on NumPy by ``apply`` and on IR by ``emit``."""

import numpy as np
import pytest

from mosaic_async_store.demo.config import StoreConfig, config_plan
from mosaic_async_store.plan.addressing import AddressStep, base_order
from mosaic_async_store.plan.plan_types import U32

S = StoreConfig


def _max_live_bases(steps) -> int:
  """The most bases whose [creation, last use] spans overlap."""
  spans, n = [], 0
  for i, step in enumerate(steps):
    if step.kind == "offset":
      spans[step.base][1] = i
    else:
      if step.kind == "xor":
        spans[step.base][1] = i
      spans.append([i, i])
      n += 1
  return max(sum(a <= i <= b for a, b in spans) for i in range(len(steps)))


@pytest.mark.parametrize("cfg", [
    S(), S(dtype="float32"), S(dtype="float32", swizzle=32, optimized=False),
    S(dtype="int32", atomic="add", shape=(128, 128), layout="TMEM_NATIVE_V4"),
    S(dtype="int8", layout="WGMMA_8BIT", swizzle=64), S(transposed=True),
], ids=lambda c: c.describe())
def test_at_most_two_bases_are_live(cfg):
  plan = config_plan(cfg)
  plan.verify()   # replays the reordered steps against the geometry, every byte
  assert _max_live_bases(plan.address_steps) <= 2


def test_bf16_wgmma_stores_each_base_then_the_next():
  """Eight swizzle chunks (xor bases), each stored at 4 row tiles (+1024 bytes)."""
  steps = config_plan(S()).address_steps
  kinds = [s.kind for s in steps]
  assert kinds == (["compute"] + ["offset"] * 3 + (["xor"] + ["offset"] * 3) * 7)
  assert all(s.base == k // 4 for k, s in enumerate(steps) if s.kind == "offset")


def test_base_order_groups_by_base_and_keeps_order_inside():
  steps = [AddressStep("compute"), AddressStep("xor", base=0, constant=16),
           AddressStep("offset", base=0, constant=1024),
           AddressStep("offset", base=1, constant=1024),
           AddressStep("offset", base=0, constant=2048)]
  assert base_order(steps) == [0, 2, 4, 1, 3]


# --- one definition of each address step: apply (NumPy) and emit (IR) ---------

_STEP_CONFIGS = [S(), S(dtype="float32", swizzle=32, optimized=False),
                 S(dtype="int8", layout="WGMMA_8BIT", swizzle=64), S(transposed=True),
                 S(dtype="int32", atomic="add", shape=(128, 128), layout="TMEM_NATIVE_V4")]


@pytest.mark.parametrize("cfg", _STEP_CONFIGS, ids=lambda c: c.describe())
def test_apply_gives_every_writers_swizzled_destination(cfg):
  plan = config_plan(cfg)
  writer, bases = plan.registers.writer, []
  for step, ins in zip(plan.address_steps, plan.instructions, strict=True):
    got = step.apply(bases, plan.geometry.swizzle)
    np.testing.assert_array_equal(got[writer], plan.geometry.byte_address(ins.dst)[writer])
  assert len(bases) == sum(s.kind != "offset" for s in plan.address_steps)


@pytest.mark.parametrize("cfg", _STEP_CONFIGS, ids=lambda c: c.describe())
def test_emitted_addresses_compute_what_apply_computes(cfg):
  """The IR ``emit`` builds, evaluated op by op for sample threads (the thread index
  a constant), equals ``apply``'s NumPy result: both run ``AddressStep.run``."""
  from jaxlib.mlir import ir
  from jaxlib.mlir.dialects import arith, func
  from mosaic_async_store import compat
  from mosaic_async_store.lowering import target
  plan = config_plan(cfg)
  bases, want = [], []
  for step in plan.address_steps:
    want.append(step.apply(bases, plan.geometry.swizzle))
  with compat.make_ir_context(), ir.Location.unknown():
    module = ir.Module.create()
    i32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint(module.body):
      fn = func.FuncOp("f", ([], []))
    with ir.InsertionPoint(fn.add_entry_block()):
      for t in (0, 5, 31, 32, 77, 127):
        zero, tid = arith.constant(i32, 0), arith.constant(i32, t)
        for n, (addr, imm) in enumerate(target.emit_addresses(plan, zero, tid)):
          assert (target._evaluate(addr, -1, 0) + imm) & 0xFFFFFFFF == want[n][t], (n, t)
      func.ReturnOp([])


def test_a_broken_step_is_refused_by_apply():
  from mosaic_async_store.plan.register_steps import StepDefect
  with pytest.raises(StepDefect, match="reads base 3, but 1 base"):
    AddressStep("offset", base=3).apply([U32(np.zeros(128))], 128)
  with pytest.raises(StepDefect, match="beyond ptxas"):
    AddressStep("offset", base=0, constant=1 << 24).apply([U32(np.zeros(128))], 128)


def test_the_swizzle_formula_is_written_once():
  """geometry.swizzle_bytes is the only place that spells the swizzle: the verifier
  and the emitter run it through AddressStep.run (U32, I32)."""
  import pathlib
  root = pathlib.Path(__file__).resolve().parents[2]
  sources = [*root.joinpath("python", "mosaic_async_store", "plan").glob("*.py"),
             *root.joinpath("lowering").glob("*.py")]
  spelled = [p.name for p in sources if ">> 7" in p.read_text() or "c(7)" in p.read_text()]
  assert spelled == ["geometry.py"]
