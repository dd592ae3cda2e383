"""The checker's registers as columns (registers.Registers): a piece's lanes read and
write one slice where their rows are consecutive, lane by lane where not, and the
same values either way; a never-written predicate is refused by name; a poll loop
whose thread holds an undefined shfl result runs to its end."""

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx, poll_state
from mosaic_async_store.check.ops import UNDEFINED
from mosaic_async_store.check.registers import Registers, read, write
from mosaic_async_store.check.undefined import Undefined
from mosaic_async_store.errors import AsyncStoreError
from ptx_harness import SCHEDULES, assemble, kernel, output
from test_warp_rules import _shfl


class _Lane:
  def __init__(self, row):
    self.row = row


def _lanes(rows):
  return [_Lane(r) for r in rows]


@pytest.mark.parametrize("rows", [[0, 1, 2, 3], [4, 5, 6], [0, 2, 5], [1, 3, 4, 7]],
                         ids=["consecutive-from-0", "consecutive", "gaps", "mixed"])
def test_read_and_write_match_a_lane_by_lane_dict(rows):
  regs = Registers()
  regs.reset(8, {"%tid.x": list(range(8))})
  col, lanes = regs.column("%r1"), _lanes(rows)
  assert read(col, lanes) == [UNDEFINED] * len(rows)   # never written
  assert col == []   # (a read allocates nothing)
  want = {r: UNDEFINED for r in range(8)}
  values = [100 + r for r in rows]
  write(regs, col, lanes, values)
  want.update(zip(rows, values))
  assert col == [want[r] for r in range(8)]
  assert read(col, lanes) == values
  assert read(regs.column("%tid.x"), lanes) == rows
  assert [regs.get("%r1", th) for th in _lanes(range(8))] == [want[r] for r in range(8)]


def test_a_write_of_too_few_values_is_an_error_not_a_shorter_column():
  regs = Registers()
  regs.reset(4, {})
  col = regs.column("%r1")
  with pytest.raises(ValueError, match="3 values for 4 lanes"):
    write(regs, col, _lanes(range(4)), [1, 2, 3])
  assert len(col) == 4


def test_a_launch_empties_the_columns_in_place():
  regs = Registers()
  regs.reset(4, {})
  col = regs.column("%r1")
  regs.put("%r1", _Lane(2), 9)
  assert col == [UNDEFINED, UNDEFINED, 9, UNDEFINED]
  regs.reset(2, {"%r1": [5, 6]})   # (compiled code keeps the list: same object)
  assert regs.column("%r1") is col and col == [5, 6]
  regs.reset(3, {})
  assert col == [] and regs.get("%r1", _Lane(1)) == UNDEFINED


def test_a_poll_state_holds_its_written_registers_and_describes_undefined_values():
  regs = Registers()
  regs.reset(2, {})
  lane = _Lane(1)
  cols = tuple(regs.column(name) for name in ("%r1", "%r2", "%r3"))   # (its loop's)
  assert poll_state.state(regs, lane, cols) == (0,)   # (none written: left out)
  regs.put("%r1", _Lane(0), 3)   # (another lane's write: lane 1's %r1 stays unwritten)
  assert poll_state.state(regs, lane, cols) == (1, UNDEFINED)
  regs.put("%r2", lane, 7)
  assert poll_state.state(regs, lane, cols) == (2, UNDEFINED, 7)
  regs.put("%r3", lane, Undefined("shfl.sync from lane 20"))
  state = poll_state.state(regs, lane, cols)
  assert state[:3] == (3, UNDEFINED, 7) and "lane 20" in state[3]
  assert hash(state) == hash(poll_state.state(regs, lane, cols))


_UNWRITTEN = """
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  mov.u32 %r3, 1;
  PRED
  USE
  st.global.u32 [%rd3], %r3;
"""


@pytest.mark.parametrize("use", ["@%p3 bra SKIP;\n  mov.u32 %r3, 2;\nSKIP:",
                                 "@!%p3 mov.u32 %r3, 2;",
                                 "@%p3 st.global.u32 [%rd3], %r3;"],
                         ids=["branch", "guarded-move", "guarded-store"])
def test_a_never_written_predicate_is_refused_by_name(use):
  """Its value is LLVM's undef: no truth value to branch or guard on."""
  ptx = kernel(_UNWRITTEN.replace("PRED", "").replace("USE", use))
  with pytest.raises(AsyncStoreError, match=r"predicate %p3 read before any write"):
    check_ptx(ptx, [np.zeros(64, np.uint32)], smem_bytes=16, block=(64, 1, 1))


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("use", ["@%p3 bra SKIP;\n  mov.u32 %r3, 2;\nSKIP:",
                                 "@!%p3 mov.u32 %r3, 2;"], ids=["branch", "guarded-move"])
def test_a_written_predicate_guards_each_lane(schedule, use):
  """The neighbour: the same kernel with the predicate set (odd lanes true)."""
  body = _UNWRITTEN.replace("PRED", "and.b32 %r4, %r1, 1;\n  setp.ne.u32 %p3, %r4, 0;")
  ptx = assemble(kernel(body.replace("USE", use)))
  out = output(ptx, [np.zeros(64, np.uint32)], cluster=1, smem_bytes=16, block=64,
               schedule=schedule)
  assert out.tolist() == [2, 1] * 32


# Lanes 0..15 shuffle from lane 20, outside membermask 0xffff (test_warp_rules' kernel):
# %r3 is undefined and never used; they then count 200 times round a loop (a poll-like
# yield every 64 backward jumps, whose state holds %r3) before overwriting it.
_POLL_WITH_UNDEFINED = _shfl(20, """mov.u32 %r6, 0;
LOOP:
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p2, %r6, 200;
  @%p2 bra LOOP;
  mov.u32 %r3, %r6;""")


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_loop_holding_an_undefined_value_it_never_uses_passes(schedule):
  ptx = assemble(kernel(_POLL_WITH_UNDEFINED))
  out = output(ptx, [np.zeros(32, np.uint32)], cluster=1, smem_bytes=16, block=32,
               schedule=schedule)
  assert out.tolist() == [200] * 16 + [7] * 16
