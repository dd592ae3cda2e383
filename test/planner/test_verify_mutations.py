"""Every check of the verifier can fail: each one, broken on a real plan.

Each case builds a plan with ``plan_store``, corrupts one thing in it
(``dataclasses.replace`` on the frozen plan, its instructions, values or
register steps) and asserts that ``verify`` raises a PlanDefect naming the
check that the corruption breaks (``verify.CHECKS`` lists them, in the order
they run).  Several cases corrupt only a register step (a byte regrouping, a
gather, an exchange), which the planner's own register map does not show:
the verifier replays the steps itself, so it must still see them.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib

import numpy as np
import pytest

from mosaic_async_store.plan import verify
from mosaic_async_store.demo.config import resolve_layout
from mosaic_async_store.plan.geometry import RegisterMap
from mosaic_async_store.plan.plan_types import Target
from mosaic_async_store.plan.planner import StorePlan, plan_store
from mosaic_async_store.plan.register_steps import ByteRegroup, Gather


def _plan(layout, shape, dtype, **kwargs):
  plan = plan_store(resolve_layout(layout, shape, dtype), shape, dtype, **kwargs)
  plan.verify()  # the unbroken plan holds
  return plan


def _bf16(**kw):      # 32 st.async.b32, no register steps
  return _plan("WGMMA", (64, 128), "bf16", swizzle=128, **kw)


def _f32():           # 8-byte st.async, staggered against bank conflicts
  return _plan("WGMMA", (64, 128), "f32", swizzle=128)


def _i8():            # byte exchanges between lanes (shfl.bfly) before word stores
  return _plan("WGMMA", (64, 128), "i8", swizzle=128)


def _f32_add_maybe_own():  # red.async into a peer, the local form where it is the own CTA
  where = Target(peer=True, cluster_dim=0, cluster_idx=1, cluster_shape=(2, 1, 1),
                 may_be_own=True)
  return plan_store(resolve_layout("WGMMA", (64, 128), "f32"), (64, 128), "f32",
                    swizzle=128, atomic="add", target=where)


def _i4_two_levels():  # byte exchanges, then exchanges of the 2-byte values they make
  return _plan("WGMMA", (64, 256), "i4", swizzle=128)


def _i4_one_column():  # source gather, in-thread byte regrouping, then two gathers
  return _plan("TMEM_NATIVE_V1", (128, 1), "i4", swizzle=None)


def _i4_in_thread():   # bytes assembled in the thread from two one-nibble registers
  return _plan("TMEM_NATIVE_V1", (128, 256), "i4", swizzle=128)


def _i4_lanes():       # 4-bit halves traded between lanes t and t ^ 4
  return _plan("WGMMA_TRANSPOSED", (64, 256), "i4", swizzle=128)


def _instr(plan, n, **changes):
  instrs = list(plan.instructions)
  instrs[n] = dataclasses.replace(instrs[n], **changes)
  return dataclasses.replace(plan, instructions=tuple(instrs))


def _value(plan, vid, **changes):
  values = tuple(dataclasses.replace(v, **changes) if v.id == vid else v for v in plan.values)
  return dataclasses.replace(plan, values=values)


def _regroup(plan, **changes):
  steps = tuple(dataclasses.replace(s, **changes) if isinstance(s, ByteRegroup) else s
                for s in plan.register_steps)
  return dataclasses.replace(plan, register_steps=steps)


def _the_regroup(plan) -> ByteRegroup:
  [rg] = [s for s in plan.register_steps if isinstance(s, ByteRegroup)]
  return rg


def _gather(plan, which: int, mask: int):
  """The plan with the ``which``-th Gather step's mask changed (0: the first)."""
  at = [i for i, s in enumerate(plan.register_steps) if isinstance(s, Gather)][which]
  steps = list(plan.register_steps)
  steps[at] = Gather(mask)
  return dataclasses.replace(plan, register_steps=tuple(steps))


def _registers(plan, elements=None, writer=None):
  regs = plan.registers
  return dataclasses.replace(plan, registers=RegisterMap(
      regs.elements if elements is None else elements,
      regs.writer if writer is None else writer, regs.splat))


class _AnnouncesMore(StorePlan):
  """A plan whose thread 5 announces 4 bytes more than its stores complete."""

  def bytes_for_thread(self, thread):
    return super().bytes_for_thread(thread) + 4 * (thread == 5)


def _with_tx_off_by_four(plan):
  return _AnnouncesMore(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)})


def _swapped_nibbles(plan):
  own = _the_regroup(plan).own
  return _regroup(plan, own=own[:, :, ::-1].copy())       # high half stored low


def _swapped_sends(plan):
  send = _the_regroup(plan).send
  return _regroup(plan, send=np.roll(send, 1, axis=1))    # each slot gets another element


def _flipped_keep_low(plan):
  step = plan.exchanges[0]
  ex = step.exchanges[0]
  broken = dataclasses.replace(ex, keep_low=tuple(not k for k in ex.keep_low))
  values = tuple(dataclasses.replace(v, exchange=broken) if v.exchange is ex else v
                 for v in plan.values)
  step = dataclasses.replace(step, exchanges=(broken,) + step.exchanges[1:])
  return dataclasses.replace(plan, values=values, exchanges=(step,) + plan.exchanges[1:])


def _exchange_before_its_input(plan):   # a step that reads what a later step makes
  later = next(n for n, s in enumerate(plan.exchanges)
               if any(x.exchange is not None for e in s.exchanges for x in (e.a, e.b)))
  steps = list(plan.exchanges)
  steps.insert(0, steps.pop(later))
  return dataclasses.replace(plan, exchanges=tuple(steps))


def _exchanges_of_two_masks_in_one_shuffle(plan):
  a, b = (s.exchanges[0] for s in plan.exchanges[:2])
  b = dataclasses.replace(b, lane_mask=a.lane_mask ^ 3)
  return dataclasses.replace(plan, exchanges=(type(plan.exchanges[0])((a, b)),)
                             + plan.exchanges[2:])


def _other_value(plan):
  ins = plan.instructions[0]
  others = [v.id for v in plan.values if v.size == ins.parts[0].size
            and v.id != ins.parts[0].value]
  part = dataclasses.replace(ins.parts[0], value=others[0])
  return _instr(plan, 0, parts=(part,) + ins.parts[1:])


def _swapped_destinations(plan):
  a, b = plan.instructions[:2]
  return _instr(_instr(plan, 0, dst=b.dst), 1, dst=a.dst)


def _misaligned(plan):
  ins = plan.instructions[0]          # 8 bytes: moved to byte 4 of its 16-byte chunk
  return _instr(plan, 0, dst=ins.dst // 16 * 16 + 4)


def _beyond_the_array(plan):
  ins = plan.instructions[0]          # a whole swizzle period further: same phase
  return _instr(plan, 0, dst=ins.dst + 1024 * (-(-plan.geometry.footprint_bytes // 1024)))


def _short_part(plan):
  ins = plan.instructions[0]
  part = dataclasses.replace(ins.parts[0], size=ins.parts[0].size - 2)
  return _instr(plan, 0, parts=(part,) + ins.parts[1:])


def _copied_first_instruction(plan):
  instrs = list(plan.instructions)
  instrs[1] = instrs[0]
  return dataclasses.replace(plan, instructions=tuple(instrs))


def _replicas_write(plan):
  return _registers(plan, writer=np.ones(128, bool))


def _one_writer_silent(plan):
  writer = plan.registers.writer.copy()
  writer[7] = False
  return _registers(plan, writer=writer)


def _value_past_register(plan):
  v = next(v for v in plan.values if v.exchange is None)
  return _value(plan, v.id, byte=plan.registers.vector_length * plan.dtype.bits // 8)


def _step(plan, n, **changes):
  steps = list(plan.address_steps)
  steps[n] = dataclasses.replace(steps[n], **changes)
  return dataclasses.replace(plan, address_steps=tuple(steps))


def _first_step(plan, kind):
  return next(n for n, s in enumerate(plan.address_steps) if s.kind == kind)


def _wrong_immediate(plan):       # an earlier base plus 16 bytes too many
  n = _first_step(plan, "offset")
  return _step(plan, n, constant=plan.address_steps[n].constant + 16)


def _wrong_xor(plan):             # the right base, XORed into the wrong chunk
  n = _first_step(plan, "xor")
  return _step(plan, n, constant=plan.address_steps[n].constant ^ 32)


def _wrong_base(plan):            # the right immediate on another base
  n = next(n for n, s in enumerate(plan.address_steps) if s.kind == "offset" and s.base > 0)
  return _step(plan, n, base=plan.address_steps[n].base - 1)


def _base_not_formed_yet(plan):
  return _step(plan, _first_step(plan, "xor"), base=len(plan.address_steps))


def _tmem_add_into_peer():   # 31 xor bases split into shared high and low parts
  return _plan("TMEM_NATIVE_V4", (128, 128), "i32", swizzle=128, atomic="add", peer=True)


def _xor_from_split_base(plan):   # a split base keeps no offset to xor
  first = _first_step(plan, "xor")
  n = next(n for n, s in enumerate(plan.address_steps) if s.kind == "xor" and n > first)
  split_base = sum(s.kind != "offset" for s in plan.address_steps[:first])
  return _step(plan, n, base=split_base, low_mask=0)


def _split_high_part_off(plan):   # the high part xored into the wrong chunk
  n = next(n for n, s in enumerate(plan.address_steps) if s.low_mask)
  return _step(plan, n, constant=plan.address_steps[n].constant ^ 128)


def _wrong_affine(plan):          # the computed base one 16-byte chunk off
  linear = plan.address_steps[0].linear
  return _step(plan, 0, linear=dataclasses.replace(linear, offset=linear.offset + 16))


def _conflicting_but_optimized():
  plan = _plan("WGMMA", (64, 64), "f32", swizzle=None, optimized=False)
  assert plan.verify().bank_conflicts > 0
  return dataclasses.replace(plan, optimized=True)


# (check, what is corrupted, plan builder, corruption)
MUTATIONS = [
    ("form", "type of the wrong width", _bf16, lambda p: _instr(p, 0, ptx_type="v2.b32")),
    ("form", "st.async in a reduction plan",
     lambda: _plan("WGMMA", (64, 64), "i32", swizzle=128, atomic="add"),
     lambda p: _instr(p, 0, kind="st.async", op="")),
    ("form", "unsigned min of int32",
     lambda: _plan("WGMMA", (64, 64), "i32", swizzle=128, atomic="min"),
     lambda p: _instr(p, 0, ptx_type="u32")),
    ("form", "red.async into the executing CTA",
     lambda: _plan("WGMMA", (64, 64), "i32", swizzle=128, atomic="add"),
     lambda p: dataclasses.replace(p, target=dataclasses.replace(p.target, peer=False))),
    ("steps", "gather lane mask outside the warp", _i4_one_column,
     lambda p: _gather(p, 1, 32)),
    ("steps", "registers the steps do not make", _bf16,
     lambda p: _registers(p, elements=p.registers.elements[:, :-1])),
    ("steps", "two byte regroupings", _i4_in_thread,
     lambda p: dataclasses.replace(p, register_steps=p.register_steps * 2)),
    ("steps", "regrouping reads a register that does not exist", _i4_in_thread,
     lambda p: _regroup(p, own=_the_regroup(p).own + [1000, 0])),
    ("values", "slice past the end of its register", _bf16, _value_past_register),
    ("values", "an exchange step before the step making its input", _i4_two_levels,
     _exchange_before_its_input),
    ("values", "an exchange step left out", _i8,
     lambda p: dataclasses.replace(p, exchanges=p.exchanges[:-1])),
    ("values", "one shuffle for two lane masks", _i8, _exchanges_of_two_masks_in_one_shuffle),
    ("data width", "an instruction two bytes short", _bf16, _short_part),
    ("swizzle chunk", "store across a 16-byte chunk", _bf16,
     lambda p: _instr(p, 0, dst=p.instructions[0].dst // 16 * 16 + 14)),
    ("alignment", "8-byte store at byte 4", _f32, _misaligned),
    ("stray", "store beyond the array", _bf16, _beyond_the_array),
    ("contents", "wrong destination offsets", _bf16, _swapped_destinations),
    ("contents", "wrong source value", _bf16, _other_value),
    ("contents", "nibbles assembled high first", _i4_in_thread, _swapped_nibbles),
    ("contents", "lanes trade the wrong halves", _i4_lanes, _swapped_sends),
    ("contents", "gather from the wrong partner", _i4_one_column,
     lambda p: _gather(p, 1, 1)),
    ("contents", "source gather from the wrong partner", _i4_one_column,
     lambda p: _gather(p, 0, 2)),
    ("contents", "exchange keeps the wrong half low", _i8, _flipped_keep_low),
    ("duplicate", "one store issued twice", _bf16, _copied_first_instruction),
    ("duplicate", "replicas write too", lambda: _plan("WGMMA_ROW", (64,), "f32", swizzle=None),
     _replicas_write),
    ("missing", "a store dropped", _bf16,
     lambda p: dataclasses.replace(p, instructions=p.instructions[:-1])),
    ("missing", "a writer thread silent", _bf16, _one_writer_silent),
    ("tx bytes", "a thread announces more than it stores", _bf16, _with_tx_off_by_four),
    ("address steps", "immediate reuse with the wrong constant", _bf16, _wrong_immediate),
    ("address steps", "xor with the wrong constant", _f32, _wrong_xor),
    ("address steps", "immediate reuse of the wrong base", _f32, _wrong_base),
    ("address steps", "base index not formed yet", _i8, _base_not_formed_yet),
    ("address steps", "computed base off by a chunk", _bf16, _wrong_affine),
    ("address steps", "immediate beyond [reg+imm]", _bf16,
     lambda p: _step(p, _first_step(p, "offset"), constant=1 << 24)),
    ("address steps", "an xor from a split base", _tmem_add_into_peer, _xor_from_split_base),
    ("address steps", "a split xor's high part off", _tmem_add_into_peer, _split_high_part_off),
    ("address steps", "a step missing", _bf16,
     lambda p: dataclasses.replace(p, address_steps=p.address_steps[:-1])),
    ("local form", "a reduction into a maybe-own target without its local form",
     _f32_add_maybe_own, lambda p: dataclasses.replace(p, local_form=None)),
    ("local form", "the peer form as the local form", _f32_add_maybe_own,
     lambda p: dataclasses.replace(p, local_form=dataclasses.replace(p, local_form=None))),
    ("local form", "a local form for a target never the executing CTA", _f32_add_maybe_own,
     lambda p: dataclasses.replace(p, target=dataclasses.replace(p.target,
                                                                 may_be_own=False))),
    ("bank conflicts", "conflicting stores claimed optimized", _conflicting_but_optimized,
     lambda p: p),
]


@pytest.mark.parametrize("check,what,build,corrupt", MUTATIONS,
                         ids=[f"{m[0]}: {m[1]}" for m in MUTATIONS])
def test_corruption_is_caught_by_its_check(check, what, build, corrupt):
  broken = corrupt(build())
  with pytest.raises(verify.PlanDefect) as info:
    broken.verify()
  assert info.value.check == check, (what, str(info.value))
  assert f"internal planner defect ({check}:" in str(info.value)
  assert info.value.param == "plan"


def test_every_check_has_a_mutation():
  assert {m[0] for m in MUTATIONS} == set(verify.CHECKS)


def test_the_planners_register_map_is_not_consulted():
  """``plan.registers.elements`` is the planner's account of the register steps;
  the verifier replays the steps instead, so scrambling it changes nothing."""
  for plan in (_i4_one_column(), _i4_lanes(), _i8()):
    scrambled = _registers(plan, elements=np.zeros_like(plan.registers.elements))
    assert scrambled.verify() == plan.verify()


def test_the_verifier_imports_no_planner_code():
  """verify and its landing model may use plan types (address steps among them),
  geometry, dtypes, errors."""
  allowed = {"mosaic_async_store.errors", "mosaic_async_store.plan.geometry",
             "mosaic_async_store.plan.plan_types", "mosaic_async_store.plan.dtypes",
             "mosaic_async_store.plan.address_steps",
             "mosaic_async_store.plan.landing", "mosaic_async_store.plan.register_steps"}
  package = pathlib.Path(verify.__file__).parent
  for name in ("verify.py", "landing.py"):
    tree = ast.parse((package / name).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {m for m in imported if m and m.startswith("mosaic_async_store")}
    assert ours <= allowed, (name, ours - allowed)
