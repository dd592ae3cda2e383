"""``shadow_runs.record_disjoint`` against ``shadow.Shadow`` itself: on a shadow with a
generated history (weak and strong writes and reads by several slots, writes in
flight, an mbarrier), a batch of accesses at distinct aligned offsets is either
recorded exactly as ``Shadow.conflict`` / ``Shadow.record`` would record it access by
access, with no conflict among them, or left untouched."""

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mosaic_async_store.check.shadow import Shadow, byte_index, disjoint_runs
from mosaic_async_store.check.shadow_runs import read_at_once, record_disjoint, runs

NBYTES, SLOTS = 64, 6


def _state(sh):
  return (sh.w_slot.tolist(), sh.w_clk.tolist(), sh.w_insn.tolist(), sh.atomics, sh.readers,
          sh.inflight.tolist(), sh.inflight_red.tolist(), bytes(sh.mbar_bytes))


def _shadow_after(history):
  """A shadow of NBYTES after ``history`` (``_EVENT``s)."""
  sh = Shadow(NBYTES)
  for kind, off, size, slot, clk in history:
    off -= off % size
    if kind == "in flight":
      sh.mark_inflight(off, size, 1, atomic=False)
    elif kind == "block write":   # (every byte one last writer: the one-writer check)
      sh.record(0, NBYTES, write=True, atomic=False, stamp=(slot, clk, 7))
    elif kind == "mbarrier":
      sh.mbar_bytes[off - off % 8:off - off % 8 + 8] = b"\x01" * 8
    else:
      tag = (0, 1, off, size) if kind.startswith("strong") else None
      sh.record(off, size, write=kind.endswith("write"), atomic=tag is not None,
                stamp=(slot, clk, 7), tag=tag)
  return sh


_EVENT = st.tuples(st.sampled_from(["write", "read", "strong write", "strong read",
                                    "in flight", "mbarrier", "block write"]),
                   st.integers(0, NBYTES - 1), st.sampled_from([1, 2, 4]),
                   st.integers(1, SLOTS - 1), st.integers(1, 4))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(history=st.lists(_EVENT, max_size=12), n=st.sampled_from([1, 2, 4, 8]),
       words=st.sets(st.integers(0, 7), min_size=1, max_size=8), write=st.booleans(),
       clocks=st.lists(st.lists(st.integers(0, 5), min_size=SLOTS, max_size=SLOTS),
                       min_size=8, max_size=8),
       same_stamp=st.booleans(), packed=st.booleans(), given_spans=st.booleans())
def test_a_batch_is_recorded_as_one_by_one_or_not_at_all(history, n, words, write, clocks,
                                                         same_stamp, packed, given_spans):
  sh = _shadow_after(history)
  # distinct multiples of n (n divides 8); packed: adjacent, one run of bytes
  offs = sorted(n * w if packed else 8 * w for w in words)
  vcs = np.array(clocks[:len(offs)], np.int64)
  if same_stamp:   # (asynchronous stores landing: one slot and clock for all)
    slots, stamp_clocks = SLOTS - 1, 3
    stamps = [(slots, stamp_clocks, 9)] * len(offs)
  else:
    slots = [1 + i % (SLOTS - 1) for i in range(len(offs))]
    stamp_clocks = [int(vcs[i, slot]) for i, slot in enumerate(slots)]
    stamps = [(slot, clock, 9) for slot, clock in zip(slots, stamp_clocks)]
  before, one_by_one = copy.deepcopy(_state(sh)), copy.deepcopy(sh)
  rows = np.arange(len(offs))[::-1]   # (access i's clock: row rows[i], in reverse)
  done = record_disjoint(sh, offs, n, write=write, slots=slots, clocks=stamp_clocks, insn=9,
                         matrix=vcs[::-1], rows=rows,
                         spans=runs(offs, n) if given_spans else None)
  if not done:
    assert _state(sh) == before
    return
  for i, off in enumerate(offs):
    assert one_by_one.conflict(vcs[i], off, n, write=write, atomic=False) is None
    assert not any(one_by_one.mbar_bytes[off:off + n])
    one_by_one.record(off, n, write=write, atomic=False, stamp=stamps[i])
  assert _state(sh) == _state(one_by_one)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(history=st.lists(_EVENT, max_size=12), n=st.sampled_from([1, 2, 4, 8]),
       words=st.sets(st.integers(0, 7), min_size=1, max_size=8), packed=st.booleans(),
       clock=st.lists(st.integers(0, 5), min_size=SLOTS, max_size=SLOTS))
def test_an_operations_reads_at_once_as_record_disjoint(history, n, words, packed, clock):
  """``read_at_once`` (a WGMMA operand's reads under one stamp and one clock) decides
  and records exactly what ``record_disjoint`` does for the same reads."""
  sh = _shadow_after(history)
  offs = sorted(n * w if packed else 8 * w for w in words)
  vc = np.array(clock, np.int64)
  batched, at_once = copy.deepcopy(sh), copy.deepcopy(sh)
  done = record_disjoint(batched, offs, n, write=False, matrix=vc[None, :],
                         rows=np.zeros(len(offs), np.intp), slots=SLOTS - 1, clocks=3, insn=9)
  ranges = [(lo, lo + n * count) for lo, count in runs(offs, n)]
  assert read_at_once(at_once, ranges, vc, (SLOTS - 1, 3, 9),
                      at_once.last_writes(ranges)) == done
  assert _state(at_once) == _state(batched)


def test_runs_of_adjacent_accesses():
  assert runs([0, 4, 8, 16, 20, 32], 4) == [(0, 3), (16, 2), (32, 1)]
  assert runs([8], 8) == [(8, 1)]


@settings(max_examples=100, deadline=None, derandomize=True)
@given(chunks=st.sets(st.integers(0, 400), min_size=1, max_size=300))
def test_runs_of_many_accesses_as_of_few(chunks):
  """Past 64 accesses ``runs`` takes NumPy's loops (a WGMMA operand's chunks): the same
  runs as walking the accesses one by one."""
  offs = sorted(16 * c for c in chunks)
  want = []
  for off in offs:
    if want and off == want[-1][0] + 16 * want[-1][1]:
      want[-1][1] += 1
    else:
      want.append([off, 1])
  assert runs(offs, 16) == [tuple(r) for r in want]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(history=st.lists(_EVENT, max_size=12), span=st.tuples(st.integers(0, 7),
       st.integers(9, 16)), write=st.booleans(),
       clock=st.lists(st.integers(0, 5), min_size=SLOTS, max_size=SLOTS))
def test_a_long_access_finds_the_first_conflict_byte_by_byte(history, span, write, clock):
  """``Shadow.conflict`` of an access longer than 64 bytes (judged first by its bytes'
  distinct last writers and reader sets) finds what the bytes, one by one in address
  order, find first."""
  sh = Shadow(4 * NBYTES)
  for kind, off, size, slot, clk in history:
    off = 3 * (off - off % size)   # (spread over the larger shadow)
    if kind == "in flight":
      sh.mark_inflight(off, size, 1, atomic=False)
    elif kind == "block write":
      sh.record(0, 4 * NBYTES, write=True, atomic=False, stamp=(slot, clk, 7))
    elif kind == "mbarrier":
      continue
    else:
      tag = (0, 1, off, size) if kind.startswith("strong") else None
      sh.record(off, size, write=kind.endswith("write"), atomic=tag is not None,
                stamp=(slot, clk, 7), tag=tag)
  vc = np.array(clock, np.int64)
  lo, hi = 16 * span[0], 16 * span[1]
  want = next((hit for b in range(lo, hi)
               if (hit := sh.conflict(vc, b, 1, write=write, atomic=False)) is not None), None)
  assert sh.conflict(vc, lo, hi - lo, write=write, atomic=False) == want


@settings(max_examples=200, deadline=None, derandomize=True)
@given(spans=st.lists(st.tuples(st.integers(0, 600), st.sampled_from([0, 1, 2, 16, 48])),
                      max_size=80))
def test_disjoint_runs_merge_adjacent_spans_and_refuse_overlaps(spans):
  """``disjoint_runs`` (NumPy's loops, for a copy's moves): the bytes of the spans as
  sorted maximal runs (an empty span holds none), or None exactly where two spans share
  a byte."""
  covered = [b for off, n in spans for b in range(off, off + n)]
  got = disjoint_runs(spans)
  if len(set(covered)) != len(covered):
    assert got is None
    return
  want, run = [], None
  for b in sorted(covered):
    if run and b == run[0] + run[1]:
      run[1] += 1
    else:
      run = [b, 1]
      want.append(run)
  assert got == [tuple(r) for r in want]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(history=st.lists(_EVENT, max_size=12),
       ranges=st.sets(st.integers(0, 7), min_size=1, max_size=8))
def test_last_writes_are_the_bytes_distinct_writers(history, ranges):
  """``Shadow.last_writes`` (one writer's distinct clocks at once, else pairs): the
  distinct (slot, clock) of the bytes' last plain writes."""
  sh = _shadow_after(history)
  ranges = [(8 * r, 8 * r + 8) for r in sorted(ranges)]
  want = {(int(sh.w_slot[b]), int(sh.w_clk[b])) for lo, hi in ranges for b in range(lo, hi)}
  assert sh.last_writes(ranges) == want
  # (one writer at several clocks: the one-slot path's distinct clocks)
  sh.record(0, NBYTES, write=True, atomic=False, stamp=(2, 5, 7))
  sh.record(ranges[-1][0] + 3, 2, write=True, atomic=False, stamp=(2, 6, 7))
  assert sh.last_writes(ranges) == {(2, 5), (2, 6)}


def _read_batch(sh, offs, slots, n=8):
  vcs = np.full((len(offs), SLOTS), 5, np.int64)
  return record_disjoint(sh, offs, n, write=False, matrix=vcs, rows=np.arange(len(offs)),
                         slots=slots, clocks=[4] * len(offs), insn=9)


@pytest.mark.parametrize("earlier", ["one read over both", "a batch", "each alone",
                                     "two reads in one access", "a weak write"])
def test_reads_joining_earlier_reads_as_one_by_one(earlier):
  """A warp's reads of bytes earlier reads hold (one set over more bytes than one
  access, a batch's per-access sets, a set only one access's bytes hold, two sets in
  one access's bytes): recorded as ``Shadow.record`` one by one records them."""
  sh = Shadow(NBYTES)
  if earlier == "one read over both":
    sh.record(0, 16, write=False, atomic=False, stamp=(1, 2, 7))
  elif earlier == "a batch":
    assert _read_batch(sh, [0, 8], [1, 2])
  elif earlier == "each alone":
    sh.record(0, 8, write=False, atomic=False, stamp=(1, 2, 7))
    sh.record(8, 8, write=False, atomic=False, stamp=(1, 3, 7))
  elif earlier == "two reads in one access":
    sh.record(0, 4, write=False, atomic=False, stamp=(1, 2, 7))
    sh.record(4, 12, write=False, atomic=False, stamp=(2, 2, 7))
  else:
    sh.record(0, 16, write=True, atomic=False, stamp=(1, 2, 7))
  one_by_one = copy.deepcopy(sh)
  assert _read_batch(sh, [0, 8], [3, 4])
  one_by_one.record(0, 8, write=False, atomic=False, stamp=(3, 4, 9))
  one_by_one.record(8, 8, write=False, atomic=False, stamp=(4, 4, 9))
  assert _state(sh) == _state(one_by_one)
  assert sh.readers[0][3] == (4, 9, None) and 4 not in sh.readers[0]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(chunks=st.lists(st.tuples(st.sampled_from([1, 2, 4, 8, 16, 32]), st.integers(1, 3),
                                 st.integers(1, 4)), min_size=1, max_size=24),
       odd=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(1, 3), st.integers(1, 4)),
                    max_size=3),
       cut=st.integers(0, 40))
def test_last_writes_of_bytes_written_in_chunks(chunks, odd, cut):
  """``Shadow.last_writes`` where bytes were written a chunk at a time: the distinct
  (slot, clock) of every byte, also where one byte inside a chunk differs or a range
  starts inside a chunk or is empty, through the ranges or their ``byte_index``."""
  slots = [s for n, s, _ in chunks for _ in range(n)]
  clocks = [c for n, _, c in chunks for _ in range(n)]
  for at, s, c in odd:
    slots[at % len(slots)], clocks[at % len(clocks)] = s, c
  sh = Shadow(len(slots))
  sh.w_slot[:], sh.w_clk[:] = slots, clocks
  lo = min(cut, len(slots) - 1)
  ranges = [(lo, len(slots))] if lo % 2 else [(0, lo), (lo, len(slots))]
  want = {(slots[b], clocks[b]) for r0, r1 in ranges for b in range(r0, r1)}
  assert sh.last_writes(ranges) == want
  assert sh.last_writes(ranges, byte_index(ranges)) == want
  assert byte_index(ranges).tolist() == [b for r0, r1 in ranges for b in range(r0, r1)]


@pytest.mark.parametrize("n", [1, 8, 100])
def test_conflict_names_the_first_unordered_byte_as_python_ints(n):
  """``Shadow.conflict``'s column form (no history but last writes): the first byte
  whose last write the access is not ordered after, named with Python ints (they go
  into messages and dict keys), and None where every write is ordered before."""
  sh = Shadow(NBYTES * 4)
  sh.record(0, 4, write=True, atomic=False, stamp=(1, 2, 5))
  sh.record(4, 200, write=True, atomic=False, stamp=(2, 3, 6))
  vc = np.array([0, 2, 0, 0, 0, 0], np.int32)
  bad = sh.conflict(vc, 0 if n > 1 else 4, n, write=True, atomic=False)
  assert bad == ("written by", 2, 3, 6, None)
  assert all(type(v) is int for v in bad[1:4])
  vc[2] = 3
  assert sh.conflict(vc, 0, n, write=True, atomic=False) is None
  assert sh.conflict(np.zeros(6, np.int32), 0, n, write=False, atomic=False)[1:3] == (1, 2)
