"""Races in global memory (check/global_memory.py), on small hand-written kernels
that ptxas accepts for sm_90a.

The PTX ISA's data races are independent of the state space (Memory Consistency
Model, "State spaces": "causality order closes over all memory operations across
all the state spaces"), so two warps writing one output word, or one reading what
another writes, without ordering, race in global memory as in shared memory.
Each wrong kernel is reported under every CI schedule, next to a correct neighbour
that passes under every one.
"""

import numpy as np
import pytest

from mosaic_async_store.check import Finding, check_ptx
from ptx_harness import SCHEDULES, assemble, kernel, launch

# Thread 0 (warp 0) and thread 32 (warp 1) of each CTA; rank 0 / 1 of the cluster.
_WHO = """
  ld.param.u64 %rd1, [k_param_0];
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 32;
  setp.eq.u32 %p3, %r2, 0;
  setp.eq.u32 %p4, %r2, 1;
"""

# Warp 0 writes word 0; after ORDER, warp 1 writes word 0 (or its own word).
_WRITE_WRITE = _WHO + """
  @%p1 st.global.u32 [%rd1], 1;
  {ORDER}
  @%p2 st.global.u32 [%rd1+{AT}], 2;
"""

# Warp 0 writes word 0; after ORDER, warp 1 copies it to word 1.
_WRITE_READ = _WHO + """
  @%p1 st.global.u32 [%rd1], 42;
  {ORDER}
  @!%p2 bra END;
  ld.global.u32 %r5, [%rd1];
  st.global.u32 [%rd1+4], %r5;
END:
"""

# A flag in word 0, data in word 1: warp 0 writes the data and raises the flag
# (PUBLISH); warp 1 polls the flag (POLL), then copies the data to word 2.
_FLAG = _WHO + """
  @%p1 bra PRODUCER;
  @!%p2 bra END;
POLL:
  {POLL}
  setp.eq.u32 %p5, %r4, 0;
  @%p5 bra POLL;
  ld.global.u32 %r5, [%rd1+4];
  st.global.u32 [%rd1+8], %r5;
  bra END;
PRODUCER:
  st.global.u32 [%rd1+4], 42;
  {PUBLISH}
END:
"""
_RELEASE, _ACQUIRE = ("st.release.gpu.global.u32 [%rd1], 1;",
                      "ld.acquire.gpu.global.u32 %r4, [%rd1];")

# Thread 0 of CTA 0 writes word 0; after ORDER (every thread of the cluster),
# thread 0 of CTA 1 writes it.
_CROSS_CTA = _WHO + """
  and.pred %p6, %p1, %p3;
  and.pred %p7, %p1, %p4;
  @%p6 st.global.u32 [%rd1], 1;
  {ORDER}
  @%p7 st.global.u32 [%rd1], 2;
"""
_CLUSTER_BARRIER = "barrier.cluster.arrive.aligned;\n  barrier.cluster.wait.aligned;"


def _ptx(template, **subs):
  for key, value in subs.items():
    template = template.replace("{" + key + "}", value)
  return kernel(template)


def _run(ptx, schedule, *, cluster=1, block=64, words=4):
  """The kernel's one output (int32 words), or the first finding of its run."""
  out, found = launch(ptx, [np.zeros(words, np.int32)], cluster=cluster, smem_bytes=16,
                      block=block, schedule=schedule)
  if found:
    return found[0]
  return out[0].view(np.int32).tolist()


def _race(ptx, schedule, **kw):
  err = _run(ptx, schedule, **kw)
  assert isinstance(err, Finding), f"schedule {schedule}: no finding, output {err}"
  assert err.rule == "race", err
  assert "global buffer 0 (argument 0, parameter k_param_0) bytes" in err.explained, err
  return err


def _passes(ptx, schedule, **kw):
  out = _run(ptx, schedule, **kw)
  assert not isinstance(out, Finding), out
  return out


# Every kernel below, by name (test_the_kernels_assemble_for_sm_90a assembles each).
KERNELS = {}


def _named(name, ptx):
  KERNELS[name] = ptx
  return ptx


# -- (1) two warps write one word ---------------------------------------------------

_WW_RACE = _named("write-write race", _ptx(_WRITE_WRITE, ORDER="", AT="0"))
_WW_PASS = {"bar.sync between": (_ptx(_WRITE_WRITE, ORDER="bar.sync 0;", AT="0"), [2, 0, 0, 0]),
            "each warp its own word": (_ptx(_WRITE_WRITE, ORDER="", AT="4"), [1, 2, 0, 0])}


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_two_warps_writing_one_word_race(schedule):
  err = _race(_WW_RACE, schedule)
  # both accesses named: who, where (PTX line and instruction), which bytes, how
  text = err.explained
  assert "writes global buffer 0 (argument 0, parameter k_param_0) bytes 0..3, written by " \
      "CTA 0 thread " in text
  assert text.count("st.global.u32 [%rd1") == 2 and text.count("PTX line") == 2, text
  assert err.thread in (0, 32) and err.cta == 0 and "st.global.u32" in err.instruction


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", _WW_PASS)
def test_ordered_or_disjoint_writes_pass(name, schedule):
  ptx, want = _WW_PASS[name]
  assert _passes(_named(name, ptx), schedule) == want


# -- (2) one warp writes, another reads ------------------------------------------------

_WR_RACE = _named("write-read race", _ptx(_WRITE_READ, ORDER=""))
_WR_PASS = _named("write, bar.sync, read", _ptx(_WRITE_READ, ORDER="bar.sync 0;"))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_read_of_another_warps_write_races(schedule):
  """Whichever comes first in the run: a read not ordered after the write, or a
  write not ordered after the read (the shadow keeps every reader)."""
  err = _race(_WR_RACE, schedule)
  assert "bytes 0..3" in err.explained
  assert "read by CTA 0 thread 32" in err.explained or \
      "written by CTA 0 thread 0" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_read_after_bar_sync_passes(schedule):
  assert _passes(_WR_PASS, schedule)[:2] == [42, 42]


# -- (3) a flag protocol through global memory -----------------------------------------

_RELAXED_ST, _RELAXED_LD = ("st.relaxed.gpu.global.u32 [%rd1], 1;",
                            "ld.relaxed.gpu.global.u32 %r4, [%rd1];")
_FLAG_PASS = {
    "st.release+ld.acquire": (_RELEASE, _ACQUIRE),
    "fences+relaxed": ("fence.acq_rel.gpu;\n  " + _RELAXED_ST,
                       _RELAXED_LD + "\n  fence.acq_rel.gpu;"),
    "red.release+atom.acquire": ("red.release.gpu.global.add.u32 [%rd1], 1;",
                                 "atom.acquire.gpu.global.or.b32 %r4, [%rd1], 0;"),
}
_FLAG_RACE = {
    "relaxed both": (_RELAXED_ST, _RELAXED_LD),
    "relaxed poll": (_RELEASE, _RELAXED_LD),
    "relaxed flag": (_RELAXED_ST, _ACQUIRE),
    "volatile both": ("st.volatile.global.u32 [%rd1], 1;", "ld.volatile.global.u32 %r4, [%rd1];"),
}


def _flag(name, publish, poll):
  return _named(f"flag: {name}", _ptx(_FLAG, PUBLISH=publish, POLL=poll))


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", _FLAG_PASS)
def test_a_release_acquire_flag_protocol_passes(name, schedule):
  """The flag's strong accesses are morally strong (no race on the flag); the
  acquire reads from the release, which orders the data (PTX ISA, Memory
  Consistency Model, release and acquire patterns)."""
  assert _passes(_flag(name, *_FLAG_PASS[name]), schedule)[:3] == [1, 42, 42]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", _FLAG_RACE)
def test_a_flag_without_release_and_acquire_races_on_the_data(name, schedule):
  """The consumer reads the data only after it saw the flag, so both data accesses
  happen in every schedule; the flag's accesses are strong and do not race, the
  data's are unordered."""
  err = _race(_flag(name, *_FLAG_RACE[name]), schedule)
  assert "bytes 4..7" in err.explained and err.instruction == "ld.global.u32 %r5, [%rd1+4]", err


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_weak_flag_races(schedule):
  """A plain store of the flag, polled by a strong load: not morally strong."""
  err = _race(_flag("weak st", "st.global.u32 [%rd1], 1;", _ACQUIRE), schedule)
  assert "bytes 0..3" in err.explained


# -- (4) two CTAs of a cluster --------------------------------------------------------

_CROSS_RACE = _named("two CTAs", _ptx(_CROSS_CTA, ORDER=""))
_CROSS_PASS = _named("two CTAs, cluster barrier", _ptx(_CROSS_CTA, ORDER=_CLUSTER_BARRIER))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_two_ctas_writing_one_word_race(schedule):
  err = _race(_CROSS_RACE, schedule, cluster=2)
  assert "CTA 0 thread 0" in err.explained and "CTA 1 thread 0" in err.explained
  assert "at a scope that includes both CTAs" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_two_ctas_ordered_by_the_cluster_barrier_pass(schedule):
  assert _passes(_CROSS_PASS, schedule, cluster=2)[0] == 2


# -- every access path -------------------------------------------------------------------

# Every thread adds 1 to word 0 (red: .relaxed.gpu by default), then THEN.
_ALL_ADD = _WHO + """
  red.global.add.u32 [%rd1], 1;
  {THEN}
"""
_ATOMICS_PASS = _named("atomics, barrier, read", _ptx(
    _ALL_ADD, THEN="atom.global.add.u32 %r5, [%rd1], 1;\n  " + _CLUSTER_BARRIER
    + "\n  ld.global.u32 %r6, [%rd1];"))
_ATOMICS_RACE = {
    "plain read": "@%p1 ld.global.u32 %r6, [%rd1];",
    "plain write": "@%p1 st.global.u32 [%rd1], 7;",
    "cta-scope red across CTAs": "@%p1 red.cta.global.add.u32 [%rd1], 1;",
}


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_atomics_do_not_race_each_other(schedule):
  """Every thread of two CTAs adds to one word with red and atom (morally strong
  with each other), then reads it after the cluster barrier."""
  assert _passes(_ATOMICS_PASS, schedule, cluster=2)[0] == 2 * 2 * 64


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", _ATOMICS_RACE)
def test_an_access_that_is_not_morally_strong_races_the_atomics(name, schedule):
  """A plain access, or a .cta-scope atomic in another CTA, against the other
  threads' .gpu reductions, with no barrier."""
  _race(_named(name, _ptx(_ALL_ADD, THEN=_ATOMICS_RACE[name])), schedule, cluster=2)


# Thread 0 writes (WRITE), thread 32 reads (READ), unordered.
_UNORDERED = _WHO + """
  {WRITE}
  @!%p2 bra END;
  {READ}
END:
"""
_VECTOR_RACE = {
    "vector store": ("@%p1 st.global.v2.u32 [%rd1], {%r1, %r2};",
                     "ld.global.u32 %r5, [%rd1+4];", ("bytes 0..7", "bytes 4..7")),
    "vector load": ("@%p1 st.global.u32 [%rd1+4], 9;",
                    "ld.global.v4.u32 {%r5, %r6, %r7, %r8}, [%rd1];",
                    ("bytes 0..15", "bytes 4..7")),
    "generic addresses": ("@%p1 st.u32 [%rd1+4], 9;", "ld.u32 %r5, [%rd1+4];",
                          ("bytes 4..7",)),
}


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("name", _VECTOR_RACE)
def test_vector_and_generic_accesses_race(name, schedule):
  """Named by the bytes of the access that found the race (the store's or the load's,
  whichever came second)."""
  write, read, where = _VECTOR_RACE[name]
  text = _race(_named(name, _ptx(_UNORDERED, WRITE=write, READ=read)), schedule).explained
  assert any(f"{w}, " in text for w in where), text


_INPUTS = _named("inputs", _ptx(_WHO + """
  ld.global.v4.u32 {%r5, %r6, %r7, %r8}, [%rd1];
  ld.param.u64 %rd2, [k_param_0];
  ld.global.u32 %r9, [%rd2+4];
"""))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_reading_inputs_never_races(schedule):
  """The host's bytes are the initial write (slot 0): every thread reads them, and
  reads the kernel's parameters (ld.param, not global memory)."""
  assert _passes(_INPUTS, schedule, cluster=2) == [0, 0, 0, 0]


_LAST = 4 * 1024 * 1024 - 4
_LARGE = _named("4 MiB", _ptx(_WRITE_WRITE, ORDER="", AT=str(_LAST)).replace(
    "[%rd1], 1", f"[%rd1+{_LAST}], 1"))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_race_far_into_a_large_buffer(schedule):
  """A 4 MiB buffer (its shadow is made a page at a time, where it is touched):
  the race at its last word is named by its offset."""
  err = _race(_LARGE, schedule, words=(_LAST + 4) // 4)
  assert f"bytes {_LAST}..{_LAST + 3}" in err.explained


_GRID = _named("grid", _ptx(_WHO + "@%p1 st.global.u32 [%rd1], %r2;"))


def test_races_between_clusters_are_not_looked_for():
  """A grid of two one-CTA clusters both writing word 0: the checker runs them one
  after another, each with a fresh shadow (docs/checker.md)."""
  report = check_ptx(_GRID, [np.zeros(4, np.int32)], smem_bytes=16, block=64, cluster=1,
                     grid=2, schedules=len(SCHEDULES))
  assert report.ok, report.findings


# (the parametrized tables' kernels, for the test below)
for _name, (_ptx_text, _) in _WW_PASS.items():
  _named(_name, _ptx_text)
for _table in (_FLAG_PASS, _FLAG_RACE):
  for _name, (_publish, _poll) in _table.items():
    _flag(_name, _publish, _poll)
_flag("weak st", "st.global.u32 [%rd1], 1;", _ACQUIRE)
for _name, _then in _ATOMICS_RACE.items():
  _named(_name, _ptx(_ALL_ADD, THEN=_then))
for _name, (_write, _read, _) in _VECTOR_RACE.items():
  _named(_name, _ptx(_UNORDERED, WRITE=_write, READ=_read))


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_kernels_assemble_for_sm_90a(name):
  """Every kernel of this file is PTX that ptxas accepts (it raises otherwise)."""
  assemble(KERNELS[name])


class _Thread:
  """What the shadows read of a thread: its slot and vector clock."""

  def __init__(self, slot, nslots):
    self.slot, self.vc = slot, np.zeros(nslots, np.int64)
    self.vc[slot] = 1


@pytest.mark.parametrize("seed", range(20))
def test_the_global_shadow_agrees_with_the_smem_shadow(seed):
  """Random accesses (1 to 16 bytes, naturally aligned, weak or strong, reads and
  writes) by threads that now and then synchronise: the global shadow, which shares
  one record among bytes accessed together, finds exactly the conflicts that
  ``shadow.Shadow`` (one history per byte) finds, and the same first one; both record
  every access, conflicting or not."""
  from mosaic_async_store.check.global_memory import GlobalShadow
  from mosaic_async_store.check.shadow import Shadow
  rng = np.random.default_rng(seed)
  buf = bytearray(64)
  smem, glob = Shadow(len(buf)), GlobalShadow([buf], ["argument 0"])
  threads = [_Thread(s, 5) for s in range(1, 5)]
  found = 0
  for insn in range(400):
    th = threads[rng.integers(len(threads))]
    if rng.random() < 0.2:   # a synchronisation: th acquires another's clock
      np.maximum(th.vc, threads[rng.integers(len(threads))].vc, out=th.vc)
    n = int(rng.choice([1, 2, 4, 8, 16]))
    off = int(rng.integers(len(buf) // n)) * n
    write, strong = bool(rng.random() < 0.5), bool(rng.random() < 0.4)
    tag = (th.slot % 2, int(rng.integers(4)), off, n) if strong else None
    want = smem.conflict(th.vc, off, n, write=write, atomic=strong and write, tag=tag)
    got = glob.access(th, buf, off, n, write, strong and write, insn, tag)
    assert got == want, (insn, off, n, write, strong)
    # (recorded after a conflict too: a run goes on after a race, findings.py)
    smem.record(off, n, write=write, atomic=strong and write,
                stamp=(th.slot, th.vc[th.slot], insn), tag=tag)
    found += want is not None
    th.vc[th.slot] += 1
  assert found > 10   # (the walk meets conflicts, not only ordered accesses)
