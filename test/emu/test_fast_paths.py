"""The checker's at-once paths against what they stand for: each gives the result of
the plain NumPy or lane-by-lane code it replaces (docs/benchmarks.md, "eighth pass"),
and declines (returns False, changes nothing) where it cannot."""

import numpy as np
import pytest

from mosaic_async_store.check.bulk_op import _written_at_once
from mosaic_async_store.check.machine import Machine
from mosaic_async_store.check.ops import UNDEFINED, ints_array
from mosaic_async_store.check.shadow import _pairs


@pytest.mark.parametrize("rows", [np.arange(3, 35), np.array([0, 2, 5]), np.arange(0, 1),
                                  np.array([], np.intp), np.arange(90, 96),
                                  np.array([7, 8, 9, 11])])
def test_tick_and_acquire_rows_equal_the_fancy_index_forms(rows):
  k, rng = Machine(), np.random.default_rng(len(rows))
  k.clocks = rng.integers(0, 9, (96, 100)).astype(np.int64)
  want = k.clocks.copy()
  want[rows, rows + 1] += 1
  k.tick(rows)
  assert (k.clocks == want).all()
  vc = rng.integers(0, 12, 100)
  want[rows] = np.maximum(want[rows], vc)
  k.acquire_rows(rows, vc)
  assert (k.clocks == want).all()


def test_pairs_are_the_distinct_slot_clock_pairs():
  rng = np.random.default_rng(0)
  for slots, clocks in [(rng.integers(0, 3, 4096), rng.integers(0, 5, 4096)),
                        (np.full(4096, 7), rng.integers(0, 5, 4096)),
                        (np.full(10, 7), np.full(10, 9)), (np.array([4]), np.array([2])),
                        (np.array([], np.intp), np.array([], np.int64))]:
    assert _pairs(slots, clocks) == set(zip(slots.tolist(), clocks.tolist()))


def test_ints_array_is_np_array_of_the_rows():
  rows = [(1, 2, UNDEFINED), (3, 2**64 - 1, 5)]
  got = ints_array(rows)
  assert got.dtype == np.uint64 and (got == np.array(rows, np.uint64)).all()
  with pytest.raises(OverflowError):
    ints_array([(-1, 2)])


def _moved(mem, landing):
  """The move-by-move writes ``bulk_op._write`` makes without the at-once path."""
  for (d, _, n), data in landing:
    mem[d:d + n] = data or bytes(n)


@pytest.mark.parametrize("case", ["disjoint", "zeros", "overlap", "sizes", "past_end",
                                  "not_bytearray"])
def test_a_copy_lands_at_once_only_where_move_by_move_gives_the_same(case):
  rng = np.random.default_rng(1)
  dsts = [48, 0, 16, 96]
  sizes = [16, 16, 16, 16]
  if case == "overlap":
    dsts[1] = 40
  if case == "sizes":
    sizes[2] = 8
  if case == "past_end":
    dsts[3] = 120
  landing = [((d, None, n), bytes(rng.integers(0, 256, n, np.uint8)))
             for d, n in zip(dsts, sizes)]
  if case == "zeros":
    landing[2] = ((16, None, 16), None)
  mem, want = bytearray(b"\xcd" * 128), bytearray(b"\xcd" * 128)
  _moved(want, landing)
  if case == "not_bytearray":
    assert not _written_at_once(memoryview(mem), landing)
    return
  done = _written_at_once(mem, landing)
  assert done == (case in ("disjoint", "zeros"))
  if done:
    assert mem == want
  else:
    assert mem == bytearray(b"\xcd" * 128)   # (declined: nothing written)


@pytest.mark.parametrize("taken", [[3, 4, 5], [5, 4], [0], [2, 6, 7], [7]])
def test_dequeue_takes_the_threads_out_and_keeps_the_others_order(taken):
  k = Machine()
  queue = [object() for _ in range(8)]
  k.runnable = list(queue)
  k.dequeue([queue[i] for i in taken])
  assert k.runnable == [t for i, t in enumerate(queue) if i not in taken]
