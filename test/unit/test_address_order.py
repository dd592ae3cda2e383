"""Addresses derive from the most recent base, and each base's stores issue together
(addressing.base_order), so few bases are live at once: ptxas keeps every base in a
register until its last use.  Each address step has one definition
(``AddressStep.run``), run on NumPy by ``apply`` and on IR by ``emit``."""

import dataclasses

import numpy as np
import pytest

from mosaic_async_store.demo.config import StoreConfig, config_plan
from mosaic_async_store.plan.address_steps import U32, AddressState
from mosaic_async_store.plan.addressing import (AddressStep, base_order, instruction_cost,
                                                plan_addresses)

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
  writer, state = plan.registers.writer, AddressState.numpy(plan.geometry.swizzle)
  for step, ins in zip(plan.address_steps, plan.instructions, strict=True):
    got = step.apply(state)
    np.testing.assert_array_equal(got[writer], plan.geometry.byte_address(ins.dst)[writer])
  assert len(state.addresses) == sum(s.kind != "offset" for s in plan.address_steps)


@pytest.mark.parametrize("cfg", _STEP_CONFIGS, ids=lambda c: c.describe())
def test_emitted_addresses_compute_what_apply_computes(cfg):
  """The IR ``emit`` builds, evaluated op by op for sample threads (the thread index
  a constant), equals ``apply``'s NumPy result: both run ``AddressStep.run``."""
  from jaxlib.mlir import ir
  from jaxlib.mlir.dialects import arith, func
  from mosaic_async_store import compat
  from mosaic_async_store.lowering import target
  plan = config_plan(cfg)
  state = AddressState.numpy(plan.geometry.swizzle)
  want = [step.apply(state) for step in plan.address_steps]
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
  def one_base():
    state = AddressState.numpy(128)
    state.new_base(U32(np.zeros(128)), U32(np.zeros(128)))
    return state
  with pytest.raises(StepDefect, match="reads base 3, but 1 base"):
    AddressStep("offset", base=3).apply(one_base())
  with pytest.raises(StepDefect, match="beyond ptxas"):
    AddressStep("offset", base=0, constant=1 << 24).apply(one_base())


def test_the_swizzle_formula_is_written_once():
  """geometry.swizzle_bytes is the only place that spells the swizzle: the verifier
  and the emitter run it through AddressStep.run (U32, I32)."""
  import pathlib
  root = pathlib.Path(__file__).resolve().parents[2]
  sources = [*root.joinpath("python", "mosaic_async_store", "plan").glob("*.py"),
             *root.joinpath("lowering").glob("*.py")]
  spelled = [p.name for p in sources if ">> 7" in p.read_text() or "c(7)" in p.read_text()]
  assert spelled == ["geometry.py"]


# --- split xor steps: a grid of addresses from shared high and low parts -------

TMEM_ADD = S(dtype="int32", atomic="add", shape=(128, 128), layout="TMEM_NATIVE_V4")


def _plain(steps):
  """The same stores' steps with every xor unsplit (what the planner chose before
  split steps; the addresses are the same)."""
  return [dataclasses.replace(s, low_mask=0) for s in steps]


def test_a_staggered_grid_of_xor_bases_is_split():
  """TMEM_NATIVE_V4 int32 add: the conflict-free order gives 32 xor-formed bases
  (8 swizzle chunks x 4 staggered words); split, they are 8 high parts, 4 low parts
  and an add each, where plain xors cost two instructions each."""
  plan = config_plan(TMEM_ADD)
  plan.verify()
  xors = [s for s in plan.address_steps if s.kind == "xor"]
  assert len(xors) == 31 and {s.low_mask for s in xors} != {0}
  state = AddressState.numpy(plan.geometry.swizzle)
  for step in plan.address_steps:
    step.apply(state)
  highs = sum(k[0] == "high" for k in state.parts)
  lows = sum(k[0] == "low" for k in state.parts)
  assert highs * lows >= len(xors) and highs + lows < len(xors)
  assert instruction_cost(plan.address_steps) < instruction_cost(_plain(plan.address_steps))


@pytest.mark.parametrize("cfg", [
    S(), S(dtype="float32", swizzle=32, optimized=False), S(transposed=True),
    # The same grid into the executing CTA: ptxas folds the own shared base into the
    # address operand, so a plain xor is one instruction and splitting cannot pay.
    S(dtype="int32", atomic="add", shape=(128, 128), layout="TMEM_NATIVE_V4", target="local"),
], ids=lambda c: c.describe())
def test_xors_with_no_grid_stay_plain(cfg):
  """Where splitting saves nothing (one xor base per swizzle chunk, or a free base
  add), every xor is a plain one, as before."""
  assert {s.low_mask for s in config_plan(cfg).address_steps} == {0}


def test_a_free_base_add_prices_splits_out():
  """instruction_cost with base_add_free: a plain xor costs one instruction, so the
  split steps of the peer grid cost more than the plain ones, where into a peer they
  cost less."""
  steps = config_plan(TMEM_ADD).address_steps
  assert instruction_cost(steps) < instruction_cost(_plain(steps))
  assert instruction_cost(steps, True) > instruction_cost(_plain(steps), True)


def test_the_planner_splits_only_where_it_is_cheaper():
  """A synthetic grid: 4 high (bits 4, 5) by 4 low (bits 2, 3) variants of a
  thread-dependent base are split; a line of 4 high variants is not."""
  tid = np.arange(128)
  writer = np.ones(128, bool)
  base = (tid % 8) * 16 + (tid // 8 % 4) * 4   # both parts vary by thread
  grid = [base ^ (h << 4) ^ (w << 2) for h in range(4) for w in range(4)]
  steps = plan_addresses(grid, lambda a: a, writer)
  assert {s.low_mask for s in steps if s.kind == "xor"} - {0}
  line = plan_addresses([base ^ (h << 4) for h in range(4)], lambda a: a, writer)
  assert {s.low_mask for s in line} == {0}
  for steps_, addrs in ((steps, grid), (line, grid[::4])):
    state = AddressState.numpy(None)
    for step, want in zip(steps_, addrs, strict=True):
      np.testing.assert_array_equal(step.apply(state), want)


def test_a_split_base_cannot_be_xored_again():
  """A split base keeps no offset of its own: an xor from it is refused by name."""
  from mosaic_async_store.plan.register_steps import StepDefect
  state = AddressState.numpy(None)
  state.new_base(U32(np.arange(128) * 16), U32(np.arange(128) * 16))
  AddressStep("xor", base=0, constant=4, low_mask=15).apply(state)
  with pytest.raises(StepDefect, match="formed from parts and keeps no offset"):
    AddressStep("xor", base=1, constant=8).apply(state)
  with pytest.raises(StepDefect, match="only xor steps split"):
    AddressStep("offset", base=0, constant=16, low_mask=15).apply(state)


def test_emitted_split_steps_form_each_part_once():
  """The IR of the split plan has fewer arith ops than the same plan unsplit, and
  the high and low parts are each emitted once however many steps share them."""
  from jaxlib.mlir import ir
  from jaxlib.mlir.dialects import arith, func
  from mosaic_async_store import compat
  from mosaic_async_store.lowering import target
  plan = config_plan(TMEM_ADD)
  counts = []
  for steps in (plan.address_steps, _plain(plan.address_steps)):
    variant = dataclasses.replace(plan, address_steps=tuple(steps))
    with compat.make_ir_context(), ir.Location.unknown():
      module = ir.Module.create()
      i32 = ir.IntegerType.get_signless(32)
      with ir.InsertionPoint(module.body):
        fn = func.FuncOp("f", ([i32, i32], []))
      block = fn.add_entry_block()
      with ir.InsertionPoint(block):
        list(target.emit_addresses(variant, *block.arguments))
        func.ReturnOp([])
      counts.append(sum(op.name in ("arith.addi", "arith.xori", "arith.andi")
                        for op in block.operations))
  split, plain = counts
  assert split < plain
