"""Warp collectives and operand forms of the checker, each on a small kernel that
ptxas assembles for sm_90a, run in every schedule of ``memory.SCHEDULES``.

* negated predicate sources (``!%p``) of the logic operations on ``.pred``, ``selp``,
  ``setp``'s ``{!}c`` (with its boolean combination and ``p|q`` destinations) and
  ``vote.sync``'s ``{!}a``, against a NumPy reference; elsewhere refused by name.
"""

import numpy as np
import pytest

from mosaic_async_store.check.interp import PtxKernel
from mosaic_async_store.tools import toolchain
from ptx_harness import SCHEDULES, assemble, finding, kernel, output


def _launch(body, schedule, *, block=32, words=64, inputs=None, of=output):
  """Runs ``body`` (assembled by ptxas first) on one CTA; returns the u32 output
  (param 0) after a launch whose param 1 holds ``inputs`` (``of`` the harness's
  ``output``: fails on any finding), or its first finding (``finding``)."""
  data = np.zeros(words, np.uint32) if inputs is None else np.asarray(inputs, np.uint32)
  return of(assemble(kernel(body, nparams=2)), [np.zeros(words, np.uint32), data],
            cluster=1, smem_bytes=16, block=block, schedule=schedule)


def _rule(body, schedule, **kw):
  """The run's first finding; fails the test where there is none."""
  return _launch(body, schedule, of=finding, **kw)


# -- negated predicate sources ------------------------------------------------------

_NEGATED = """
  ld.param.u64 %rd1, [k_param_0];
  and.b32 %r3, %r1, 1;
  setp.ne.u32 %p1, %r3, 0;
  and.b32 %r3, %r1, 2;
  setp.ne.u32 %p2, %r3, 0;
  and.pred %p3, %p1, !%p2;
  or.pred %p4, !%p1, %p2;
  xor.pred %p5, !%p1, !%p2;
  not.pred %p6, !%p2;
  selp.u32 %r4, 1, 0, %p3;
  selp.u32 %r5, 2, 0, %p4;
  add.u32 %r4, %r4, %r5;
  selp.u32 %r5, 4, 0, %p5;
  add.u32 %r4, %r4, %r5;
  selp.u32 %r5, 8, 0, %p6;
  add.u32 %r4, %r4, %r5;
  selp.u32 %r5, 16, 0, !%p1;
  add.u32 %r4, %r4, %r5;
  setp.lt.and.u32 %p3|%p4, %r1, 20, !%p2;
  selp.u32 %r5, 32, 0, %p3;
  add.u32 %r4, %r4, %r5;
  selp.u32 %r5, 64, 0, %p4;
  add.u32 %r4, %r4, %r5;
  setp.ge.xor.s32 %p3, %r1, 9, !%p1;
  selp.u32 %r5, 128, 0, %p3;
  add.u32 %r4, %r4, %r5;
  mov.pred %p6, !%p1;
  selp.u32 %r5, 256, 0, %p6;
  add.u32 %r4, %r4, %r5;
  vote.sync.ballot.b32 %r6, !%p2, -1;
  setp.ne.u32 %p7, %r1, %r1;
  @!%p1 vote.sync.any.pred %p7, !%p1, 0x55555555;
  selp.u32 %r5, 512, 0, %p7;
  add.u32 %r4, %r4, %r5;
  mul.wide.u32 %rd2, %r1, 8;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v2.u32 [%rd3], {%r4, %r6};
"""


def _negated_reference():
  tid = np.arange(32)
  p1, p2 = (tid & 1) != 0, (tid & 2) != 0
  lt = tid < 20
  bits = [p1 & ~p2, ~p1 | p2, (~p1) ^ (~p2), p2, ~p1, lt & ~p2, ~lt & ~p2,
          (tid >= 9) ^ ~p1, ~p1, ~p1]   # the vote: the even lanes, where p1 is false
  word = sum(b.astype(np.uint32) << i for i, b in enumerate(bits))
  ballot = int(sum(1 << int(i) for i in tid[~p2]))
  return np.stack([word, np.full(32, ballot)], 1).astype(np.uint32).ravel()


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_negated_predicate_sources_match_a_reference(schedule):
  out = _launch(_NEGATED, schedule)
  assert out.tolist() == _negated_reference().tolist()


@pytest.mark.parametrize("stmt", ["add.u32 %r3, %r1, !%p1", "selp.u32 %r3, !%p1, 0, %p2",
                                  "setp.eq.u32 %p3, %r1, !%p1"])
def test_a_negated_predicate_where_the_isa_has_none_is_refused(stmt):
  ptx = kernel(f"  setp.eq.u32 %p1, %r1, 0;\n  setp.eq.u32 %p2, %r1, 1;\n  {stmt};\n")
  with pytest.raises(Exception):   # ptxas rejects it too
    toolchain.ptx_to_cubin(ptx, "sm_90a")
  with pytest.raises(NotImplementedError, match="negated predicate"):
    PtxKernel(ptx)


# -- ld.global.nc: read-only data --------------------------------------------------

_NC_READ = """
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd4, [k_param_1];
  cvta.to.global.u64 %rd4, %rd4;
  mul.wide.u32 %rd2, %r1, 16;
  add.s64 %rd5, %rd4, %rd2;
  ld.global.nc.v4.u32 {%r3, %r4, %r5, %r6}, [%rd5];
  ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%r7, %r8}, [%rd5+8];
  ld.global.cs.nc.u32 %r9, [%rd4];
  add.u32 %r3, %r3, %r4;
  add.u32 %r3, %r3, %r5;
  add.u32 %r3, %r3, %r6;
  add.u32 %r3, %r3, %r7;
  add.u32 %r3, %r3, %r8;
  add.u32 %r3, %r3, %r9;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r3;
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_nc_loads_of_a_buffer_only_read_pass(schedule):
  data = np.arange(128, dtype=np.uint32) * 7 + 3
  out = _launch(_NC_READ, schedule, words=128, inputs=data)
  rows = data.reshape(32, 4)
  want = rows.sum(1) + rows[:, 2] + rows[:, 3] + data[0]
  assert out[:32].tolist() == want.astype(np.uint32).tolist()


# Thread 0 writes word 5 of the input buffer; thread 1 reads it with ld.global.nc
# (``{first}``: which of the two comes before the bar.sync).
_NC_WRITTEN = """
  ld.param.u64 %rd4, [k_param_1];
  cvta.to.global.u64 %rd4, %rd4;
  setp.eq.u32 %p1, %r1, 0;
  setp.eq.u32 %p2, %r1, 1;
  {first}
  bar.sync 0;
  {second}
"""
_NC_WRITE = "@%p1 st.global.u32 [%rd4+20], %r1;"
_NC_LOAD = "@%p2 ld.global.nc.u32 %r3, [%rd4+20];"


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("write_first", [True, False])
def test_a_write_to_bytes_read_with_ld_global_nc_is_reported(schedule, write_first):
  """Ordered by bar.sync either way (no race): the data still is not read-only."""
  first, second = (_NC_WRITE, _NC_LOAD) if write_first else (_NC_LOAD, _NC_WRITE)
  err = _rule(_NC_WRITTEN.format(first=first, second=second), schedule)
  assert err.rule == "nc-written"
  assert "global buffer 1" in err.explained and "bytes 20..23" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_thread_writing_what_it_read_with_nc_is_reported(schedule):
  err = _rule("""
  ld.param.u64 %rd4, [k_param_1];
  cvta.to.global.u64 %rd4, %rd4;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd5, %rd4, %rd2;
  ld.global.nc.u32 %r3, [%rd5];
  add.u32 %r3, %r3, 1;
  st.global.u32 [%rd5], %r3;
""", schedule)
  assert err.rule == "nc-written" and "reads with ld.global.nc" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_write_next_to_nc_read_bytes_passes(schedule):
  """Word 5 is read with .nc, word 6 written: different bytes."""
  _launch(_NC_WRITTEN.format(first=_NC_LOAD, second=_NC_WRITE.replace("+20", "+24")),
          schedule)


# -- redux.sync and match.sync ------------------------------------------------------

_COLLECTIVES = """
  ld.param.u64 %rd1, [k_param_0];
  ld.param.u64 %rd4, [k_param_1];
  cvta.to.global.u64 %rd4, %rd4;
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd5, %rd4, %rd2;
  ld.global.u32 %r3, [%rd5];
  shr.u32 %r4, %r3, 29;
  mov.b32 %r6, MASK;
  shr.u32 %r5, %r6, %r1;
  and.b32 %r5, %r5, 1;
  setp.ne.u32 %p1, %r5, 0;
  setp.ne.u32 %p2, %r1, %r1;
  setp.ne.u32 %p3, %r1, %r1;
  mov.u32 %r10, 0; mov.u32 %r11, 0; mov.u32 %r12, 0; mov.u32 %r13, 0;
  mov.u32 %r14, 0; mov.u32 %r15, 0; mov.u32 %r16, 0; mov.u32 %r17, 0;
  mov.u32 %r18, 0; mov.u32 %r19, 0; mov.u32 %r21, 0; mov.u32 %r22, 0;
  cvt.u64.u32 %rd6, %r4;
  shl.b64 %rd6, %rd6, 33;
  or.b64 %rd6, %rd6, 5;
  mov.u64 %rd7, 0x70000000000;
  @%p1 redux.sync.add.u32 %r10, %r3, MASK;
  @%p1 redux.sync.min.s32 %r11, %r3, MASK;
  @%p1 redux.sync.max.u32 %r12, %r3, MASK;
  @%p1 redux.sync.min.u32 %r13, %r3, MASK;
  @%p1 redux.sync.max.s32 %r14, %r3, MASK;
  @%p1 redux.sync.and.b32 %r15, %r3, MASK;
  @%p1 redux.sync.or.b32 %r16, %r3, MASK;
  @%p1 redux.sync.xor.b32 %r17, %r3, MASK;
  @%p1 match.any.sync.b32 %r18, %r4, MASK;
  @%p1 match.all.sync.b32 %r19|%p2, %r4, MASK;
  selp.u32 %r20, 1, 0, %p2;
  @%p1 match.any.sync.b64 %r21, %rd6, MASK;
  @%p1 match.all.sync.b64 %r22|%p3, %rd7, MASK;
  selp.u32 %r23, 1, 0, %p3;
  mul.wide.u32 %rd2, %r1, 64;
  add.s64 %rd3, %rd1, %rd2;
  st.global.v4.u32 [%rd3], {%r10, %r11, %r12, %r13};
  st.global.v4.u32 [%rd3+16], {%r14, %r15, %r16, %r17};
  st.global.v4.u32 [%rd3+32], {%r18, %r19, %r20, %r21};
  st.global.v2.u32 [%rd3+48], {%r22, %r23};
"""
_MASKS = [0xFFFFFFFF, 0x0000FFFF, 0x55555555, 0xF0F0F00F, 0x00000080]


def _collectives_reference(mask, data):
  """Per lane the 14 words _COLLECTIVES stores (NumPy's fixed-width integers)."""
  lanes = [i for i in range(32) if mask >> i & 1]
  v = data[lanes].astype(np.uint32)
  s = v.view(np.int32)
  small = v >> 29
  allsame = int(len(set(small.tolist())) == 1)
  out = np.zeros((32, 16), np.uint32)
  for i, lane in enumerate(lanes):
    same = sum(1 << l for l, w in zip(lanes, small) if w == small[i])
    out[lane, :14] = [np.uint32(v.sum(dtype=np.uint64) & 0xFFFFFFFF), np.uint32(s.min()),
                      v.max(), v.min(), np.uint32(s.max()),
                      np.bitwise_and.reduce(v), np.bitwise_or.reduce(v),
                      np.bitwise_xor.reduce(v), same, mask if allsame else 0, allsame,
                      same, mask, 1]
  return out


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("mask", _MASKS, ids=hex)
def test_redux_and_match_match_a_numpy_reference(schedule, mask):
  rng = np.random.default_rng(mask % 1000)
  data = rng.integers(0, 1 << 32, 32, dtype=np.uint64).astype(np.uint32)
  data[3] = 0x80000000   # the most negative s32, beside large unsigned words
  out = _launch(_COLLECTIVES.replace("MASK", f"{mask:#x}"), schedule, words=512,
                inputs=np.resize(data, 512))
  want = _collectives_reference(mask, data)
  assert out.reshape(32, 16)[:, :14].tolist() == want[:, :14].tolist()


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_match_all_over_equal_values_sets_the_mask_and_predicate(schedule):
  data = np.full(512, 0x40000001, np.uint32)   # every lane's value alike
  out = _launch(_COLLECTIVES.replace("MASK", "0xffffffff"), schedule, words=512, inputs=data)
  rows = out.reshape(32, 16)
  assert (rows[:, 9] == 0xFFFFFFFF).all() and (rows[:, 10] == 1).all()
  assert (rows[:, 8] == 0xFFFFFFFF).all()


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("stmt", ["redux.sync.add.u32 %r3, %r1, 0xffff;",
                                  "match.any.sync.b32 %r3, %r1, 0xffff;",
                                  "match.all.sync.b64 %r3|%p2, %rd1, 0xffff;"])
def test_redux_or_match_by_a_lane_outside_its_membermask_is_reported(schedule, stmt):
  """Every lane runs it with the mask of lanes 0..15: lanes 16..31 are outside it."""
  err = _rule(f"  mov.u64 %rd1, 9;\n  {stmt}\n", schedule)
  assert err.rule == "collective-mask" and "which does not name it" in err.explained
  assert err.thread is not None and err.thread % 32 >= 16


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_redux_waits_for_its_member_lanes_at_any_call_site(schedule):
  """Lanes 0..15 and 16..31 reach redux.sync at two call sites: they meet (sm_70+)."""
  out = _launch("""
  ld.param.u64 %rd1, [k_param_0];
  setp.lt.u32 %p1, %r1, 16;
  @%p1 bra LOW;
  redux.sync.add.u32 %r3, %r1, -1;
  bra.uni DONE;
LOW:
  redux.sync.add.u32 %r3, %r1, -1;
DONE:
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r3;
""", schedule)
  assert out[:32].tolist() == [sum(range(32))] * 32


# -- shfl.sync from a lane outside membermask: an undefined value -------------------

# Lanes 0..15 shuffle with membermask 0x0000ffff; each reads lane SRC (idx mode).
_SHFL = """
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  setp.lt.u32 %p1, %r1, 16;
  mov.u32 %r3, 7;
  @!%p1 bra DONE;
  add.u32 %r4, %r1, 100;
  shfl.sync.idx.b32 %r3, %r4, SRC, 31, 0xffff;
  USE
DONE:
  st.global.u32 [%rd3], %r3;
"""


def _shfl(src, use):
  return _SHFL.replace("SRC", str(src)).replace("USE", use)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("use", ["", "add.u32 %r3, %r3, 1;",
                                 "setp.eq.u32 %p2, %r3, 3;\n  @%p2 mov.u32 %r3, 0;",
                                 "and.b32 %r5, %r3, 1;\n  setp.ne.u32 %p2, %r5, 0;\n"
                                 "  @%p2 bra DONE;"],
                         ids=["store", "computed-store", "guard", "branch"])
def test_a_shfl_from_a_lane_outside_membermask_is_undefined_where_used(schedule, use):
  """Lane 20 is outside the mask: the value is undefined, its use is the finding (no
  hang, no made-up value stored)."""
  err = _rule(_shfl(20, use), schedule)
  assert err.rule == "undefined-value"
  assert "reads lane 20, which is not in membermask 0x0000ffff" in err.explained


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_shfl_from_a_member_lane_passes(schedule):
  """The neighbour: lane 9 is in the mask, every lane of 0..15 gets its value."""
  out = _launch(_shfl(9, "add.u32 %r3, %r3, 1;"), schedule)
  assert out[:32].tolist() == [110] * 16 + [7] * 16


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_an_undefined_shfl_result_that_is_never_used_passes(schedule):
  """The undefined value is overwritten (and masked to zero) before any use."""
  out = _launch(_shfl(20, "and.b32 %r5, %r3, 0;\n  add.u32 %r3, %r5, 5;"), schedule)
  assert out[:32].tolist() == [5] * 16 + [7] * 16
