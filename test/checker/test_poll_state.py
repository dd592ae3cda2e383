"""poll_state: the strongly connected components of a branch graph, and the register
columns a poll's state compares at each program counter (its component's registers,
every WGMMA instruction's where the component holds one)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mosaic_async_store.check import poll_state
from mosaic_async_store.check.ops import UNDEFINED


def _reach(successors):
  """reach[i]: every node a path of one step or more from ``i`` reaches."""
  n = len(successors)
  reach = [set(successors[i]) for i in range(n)]
  changed = True
  while changed:
    changed = False
    for i in range(n):
      more = set().union(*(reach[j] for j in reach[i])) - reach[i] if reach[i] else set()
      if more:
        reach[i] |= more
        changed = True
  return reach


@st.composite
def _graphs(draw):
  n = draw(st.integers(1, 12))
  return [draw(st.lists(st.integers(0, n - 1), max_size=3)) for _ in range(n)]


@settings(max_examples=300, deadline=None)
@given(_graphs())
def test_two_nodes_share_a_component_exactly_when_each_reaches_the_other(successors):
  comp = poll_state.components(successors)
  reach = _reach(successors)
  for i in range(len(successors)):
    for j in range(len(successors)):
      mutual = i == j or (j in reach[i] and i in reach[j])
      assert (comp[i] == comp[j]) == mutual, (successors, comp, i, j)


def test_a_long_chain_does_not_recurse():
  n = 20_000
  comp = poll_state.components([[i + 1] for i in range(n - 1)] + [[0]])
  assert len(set(comp)) == 1


# pc: 0 mov %a (before the loop); 1 ld %f (the poll); 2 add %c; 3 @%p bra 1;
# 4 mov %d (after the loop); 5 wgmma.wait_group (its own loop: 6 bra 5)
_TEXTS = ["mov.u32 %a, 1;", "ld.relaxed.gpu.u32 %f, [%rd1];", "add.u32 %c, %c, 1;",
          "@%p bra L;", "mov.u32 %d, %f;", "wgmma.wait_group.sync.aligned 0;", "bra W;",
          "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%x0, %x1}, %rd2, %rd3, %q, 1, 1, 0, 1;"]
_NAMED = [{"%a"}, {"%f", "%rd1"}, {"%c"}, {"%p"}, {"%d", "%f"}, set(), set(),
          {"%x0", "%x1", "%rd2", "%rd3", "%q"}]
_TARGETS = {3: 1, 6: 5}


def test_a_loop_compares_the_registers_its_instructions_name_and_no_others():
  cols = poll_state.columns_by_pc(_TEXTS, _NAMED, _TARGETS, lambda name: name)
  loop = ("%c", "%f", "%p", "%rd1")
  assert cols[1] == cols[2] == cols[3] == loop
  assert cols[0] == ("%a",) and cols[4] == ("%d", "%f")


def test_a_loop_that_holds_a_wgmma_instruction_compares_every_wgmma_register():
  # wgmma.wait_group writes back accumulators its statement does not name
  cols = poll_state.columns_by_pc(_TEXTS, _NAMED, _TARGETS, lambda name: name)
  assert cols[5] == cols[6] == ("%q", "%rd2", "%rd3", "%x0", "%x1")


class _Registers:
  def __init__(self, written):
    self.written = written


class _Thread:
  row = 1


def test_a_state_holds_the_written_values_and_how_many_columns_the_launch_wrote():
  a, b, empty = [0, 5], [0, 7], []
  regs = _Registers([a, b])
  assert poll_state.state(regs, _Thread(), (a, empty)) == (2, 5)
  empty.extend([UNDEFINED, UNDEFINED])   # (its first write: the launch writes one more column)
  regs.written.append(empty)
  assert poll_state.state(regs, _Thread(), (a, empty)) == (3, 5, UNDEFINED)
