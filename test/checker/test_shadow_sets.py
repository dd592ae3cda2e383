"""``shadow.Shadow`` shares the reader and strong-writer sets of bytes accessed
together (one set for the bytes of an access, changed in place only while no other
bytes hold it: ``AccessSet``): after any history of accesses, each byte's sets hold what a
shadow with a set of its own per byte would hold, and ``remote_accesses`` finds
every slot's latest access (overwritten ones too: the exit rule confirms a late one
against the surviving history)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from mosaic_async_store.check.shadow import Shadow

NBYTES = 32

_ACCESS = st.tuples(st.sampled_from(["read", "write", "strong write"]),
                    st.integers(0, NBYTES - 1), st.sampled_from([1, 2, 4, 8]),
                    st.integers(1, 5))


def _reference(history):
  """Per byte: (last weak writer slot, readers {slot: clock}, strong writers
  {slot: clock}), each byte with sets of its own."""
  last = [0] * NBYTES
  readers = [{} for _ in range(NBYTES)]
  strong = [{} for _ in range(NBYTES)]
  for clock, (kind, off, n, slot) in enumerate(history, 1):
    for b in range(off, min(off + n, NBYTES)):
      if kind == "write":
        last[b], readers[b], strong[b] = slot, {}, {}
      else:
        (readers if kind == "read" else strong)[b][slot] = clock
  return last, readers, strong


@settings(max_examples=300, deadline=None, derandomize=True)
@given(history=st.lists(_ACCESS, max_size=20))
def test_shared_sets_hold_what_sets_of_their_own_would(history):
  sh = Shadow(NBYTES)
  for clock, (kind, off, n, slot) in enumerate(history, 1):
    n = min(n, NBYTES - off)
    strong = kind == "strong write"
    sh.record(off, n, write=kind != "read", atomic=strong, stamp=(slot, clock, clock),
              tag=(0, 1, off, n) if strong else None)
  last, readers, strong = _reference(history)
  for b in range(NBYTES):
    assert sh.w_slot[b] == last[b], b
    assert {s: e[0] for s, e in (sh.readers[b] or {}).items()} == readers[b], b
    assert {s: e[0] for s, e in (sh.atomics[b] or {}).items()} == strong[b], b
  want = {}   # slot -> its latest clock in any access, overwritten ones included
  for clock, (kind, off, n, slot) in enumerate(history, 1):
    want[slot] = max(want.get(slot, 0), clock)
  assert sh.remote_accesses(lambda slot: 1, 0) == want
  assert sh.remote_accesses(lambda slot: 0 if slot % 2 else 1, 0) == \
      {slot: clk for slot, clk in want.items() if slot % 2 == 0}


def test_a_word_many_threads_read_keeps_one_set():
  """Every reader of one word joins the word's one set in place (after the second
  reader: the first's set is a plain dict, whose holders are not counted), with no
  copy per read: a broadcast read by every thread of a cluster stays linear."""
  sh = Shadow(NBYTES)
  sh.record(8, 4, write=False, atomic=False, stamp=(1, 1, 0))
  sh.record(8, 4, write=False, atomic=False, stamp=(2, 1, 0))
  first = sh.readers[8]
  for slot in range(3, 300):
    sh.record(8, 4, write=False, atomic=False, stamp=(slot, 1, 0))
  assert all(sh.readers[b] is first for b in range(8, 12)) and len(first) == 299
  sh.record(9, 1, write=False, atomic=False, stamp=(300, 1, 0))   # part of it: a successor
  assert sh.readers[9] is not first and len(sh.readers[9]) == 300 and len(first) == 299
