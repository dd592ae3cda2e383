"""The checker's at-once paths against what they stand for: each gives the result of
the plain NumPy or lane-by-lane code it replaces (docs/benchmarks.md, "eighth pass"),
and declines (returns False, changes nothing) where it cannot."""

import numpy as np
import pytest

from mosaic_async_store.check.families.tma.bulk_groups import _waited_lanes
from mosaic_async_store.check.families.tma.bulk_op import _written_at_once
from mosaic_async_store.check.interp import PtxKernel
from mosaic_async_store.check.machine import Machine
from mosaic_async_store.check.ops import UNDEFINED, ints_array
from mosaic_async_store.check.shadow import AccessSet, Shadow, _pairs, distinct

from ptx_harness import kernel, outputs


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


def _moved(mem, dsts, sizes, data):
  """The move-by-move writes ``bulk_op._write`` makes without the at-once path."""
  at = 0
  for d, n in zip(dsts, sizes):
    mem[d:d + n] = data[at:at + n].tobytes()
    at += n


@pytest.mark.parametrize("case", ["disjoint", "overlap", "sizes", "sizes_adjacent",
                                  "sizes_overlap", "past_end", "short_data", "not_bytearray"])
def test_a_copy_lands_at_once_only_where_move_by_move_gives_the_same(case):
  rng = np.random.default_rng(1)
  dsts = [48, 0, 16, 96]
  sizes = [16, 16, 16, 16]
  if case == "overlap":
    dsts[1] = 40
  if case == "sizes":   # (moves of several sizes: a tile's runs split at its swizzle)
    sizes[2] = 8
  if case == "sizes_adjacent":   # (each move ends where another begins)
    sizes[1], sizes[2], dsts[3] = 16, 32, 64
  if case == "sizes_overlap":   # (16..56 runs into the move at 48)
    sizes[2] = 40
  if case == "past_end":
    dsts[3] = 120
  data = rng.integers(0, 256, sum(sizes) - (case == "short_data"), np.uint8)
  dsts, sizes = np.array(dsts, np.int64), np.array(sizes, np.int64)
  mem, want = bytearray(b"\xcd" * 128), bytearray(b"\xcd" * 128)
  if case != "short_data":
    _moved(want, dsts.tolist(), sizes.tolist(), data)
  if case == "not_bytearray":
    assert not _written_at_once(memoryview(mem), dsts, sizes, data)
    return
  done = _written_at_once(mem, dsts, sizes, data)
  assert done == (case in ("disjoint", "sizes", "sizes_adjacent"))
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


_FENCES = """
  mov.u32 %r3, __dynamic_shmem__0;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 mbarrier.init.shared::cta.b64 [%r3], 1;
  fence.mbarrier_init.release.cluster;
  fence.proxy.async.shared::cta;
  add.u32 %r4, %r1, 1;
  fence.proxy.async;
  bar.sync 0;
"""


def _fence_state(warp_forms):
  """The machine after a launch of ``_FENCES`` (two warps), its fences' warp forms
  used or not (lane by lane)."""
  kern = PtxKernel(kernel(_FENCES))
  if not warp_forms:
    for i, text in enumerate(kern.texts):
      if text.startswith("fence."):
        kern.program.vcode[i] = None
  outputs(kern, [np.zeros(4, np.uint32)], cluster=1, smem_bytes=16, block=64)
  return kern.machine


def test_fences_at_once_leave_the_state_lane_by_lane_leaves():
  at_once, lane_by_lane = _fence_state(True), _fence_state(False)
  assert (at_once.clocks == lane_by_lane.clocks).all()
  for a, b in zip(at_once.threads, lane_by_lane.threads):
    assert a.fence_rel[1] == b.fence_rel[1] and (a.fence_rel[0] == b.fence_rel[0]).all()
  assert at_once.proxy_fences.keys() == lane_by_lane.proxy_fences.keys()
  assert len(at_once.proxy_fences) == 2 * 64   # (shared: two fences; global: one)
  for key, (clks, vcs) in at_once.proxy_fences.items():
    want_clks, want_vcs = lane_by_lane.proxy_fences[key]
    assert clks == want_clks and all((v == w).all() for v, w in zip(vcs, want_vcs))


class _Groups:   # what _waited reads of a thread's bulk groups
  def __init__(self, reads_slot, writes_slot, committed):
    self.reads_slot, self.writes_slot, self.committed = reads_slot, writes_slot, committed


class _Lane:
  def __init__(self, row):
    self.row, self.slot = row, row + 1


@pytest.mark.parametrize("read_only", [True, False])
def test_bulk_waits_at_once_equal_lane_by_lane(read_only):
  rng = np.random.default_rng(3)
  k = Machine()
  k.clocks = rng.integers(0, 6, (8, 40)).astype(np.int64)
  lanes = [_Lane(r) for r in range(8)]
  k.threads = lanes
  held = [(th, _Groups(None if r == 2 else 20 + 2 * r, 21 + 2 * r, int(rng.integers(0, 9))))
          for r, th in enumerate(lanes)]
  want = k.clocks.copy()
  for th, groups in held:   # (as _waited, with the thread's clock a row of ``want``)
    limit = groups.committed - 1
    if groups.reads_slot is not None and limit >= 1:
      want[th.row, groups.reads_slot] = max(want[th.row, groups.reads_slot], limit)
      if not read_only:
        want[th.row, groups.writes_slot] = max(want[th.row, groups.writes_slot], limit)
  _waited_lanes(k, held, 1, read_only)
  assert (k.clocks == want).all()


def _joined_by_hand(before, ranges, slot, entry):
  """What each byte of ``ranges`` holds after one access joins ``slot: entry``: its set
  before, with the entry where it is newer (``Shadow.record``)."""
  want = {}
  for lo, hi in ranges:
    for b in range(lo, hi):
      held = dict(before[b] or {})
      if held.get(slot, (-1,))[0] <= entry[0]:
        held[slot] = entry
      want[b] = held
  return want


def _access_set(contents, owners):
  made = AccessSet(contents)
  made.owners = owners
  return made


@pytest.mark.parametrize("case", ["none-yet", "one-set-in-place", "one-set-seen-outside",
                                  "equal-but-distinct", "mixed"])
def test_a_join_gives_each_byte_its_set_plus_the_access(case):
  ranges, slot, entry = [(0, 16), (32, 48)], 5, (7, 3, None)
  sh = Shadow(64)
  if case != "none-yet":
    shared = _access_set({2: (1, 0, None)}, 32 if case != "one-set-seen-outside" else 33)
    for lo, hi in ranges:
      sh.readers[lo:hi] = [shared] * (hi - lo)
    if case == "one-set-seen-outside":
      sh.readers[60] = shared   # (a byte outside the access holds it too)
    if case == "equal-but-distinct":   # (same contents, another object: not one set)
      sh.readers[40:48] = [_access_set({2: (1, 0, None)}, 8)] * 8
      shared.owners = 32
    if case == "mixed":
      sh.readers[8:16] = [None] * 8
  before = list(sh.readers)
  outside = {id(s): dict(s) for b, s in enumerate(before)
             if s is not None and not any(lo <= b < hi for lo, hi in ranges)}
  sh._join(sh.readers, ranges, slot, entry)
  want = _joined_by_hand(before, ranges, slot, entry)
  assert {b: dict(sh.readers[b]) for b in want} == want
  for b, s in enumerate(sh.readers):   # (a set other bytes still hold is not changed)
    if id(s) in outside:
      assert dict(s) == outside[id(s)]
  if case in ("none-yet", "one-set-in-place"):   # one set for the access's bytes
    assert len({id(sh.readers[b]) for b in want}) == 1


def test_a_join_of_no_bytes_changes_nothing():
  sh = Shadow(16)
  sh._join(sh.readers, [(16, 16)], 5, (7, 3, None))
  sh._join(sh.readers, [], 5, (7, 3, None))
  assert sh.readers == [None] * 16


@pytest.mark.parametrize("case", ["one-set", "one-set-and-none", "equal-but-distinct",
                                  "several", "first-and-last-one-set", "ends-and-middle-one-set",
                                  "none", "empty"])
def test_distinct_gives_every_entry_of_the_bytes_sets_from_sets_they_hold(case):
  a, b = {2: (1, 0, None)}, {3: (4, 1, None), 2: (2, 5, None)}
  sets = {"one-set": [a] * 6, "one-set-and-none": [None, a, a, None, a, None],
          "equal-but-distinct": [a, a, dict(a), a], "several": [a, b, None, b, a],
          "first-and-last-one-set": [a, b, a], "ends-and-middle-one-set": [a, b, a, a, a],
          "none": [None] * 4, "empty": []}[case]
  got = list(distinct(sets))
  entries = lambda many: {(r, e) for s in many if s for r, e in s.items()}
  assert entries(got) == entries(sets)
  assert all(any(g is s for s in sets) for g in got)   # (sets the bytes hold)
  if case in ("several", "first-and-last-one-set", "ends-and-middle-one-set"):
    assert len(got) == 2   # (each once)
