"""Warp collectives and operand forms of the checker, each on a small kernel that
ptxas assembles for sm_90a, run in every schedule of ``memory.SCHEDULES``.

* negated predicate sources (``!%p``) of the logic operations on ``.pred``, ``selp``,
  ``setp``'s ``{!}c`` (with its boolean combination and ``p|q`` destinations) and
  ``vote.sync``'s ``{!}a``, against a NumPy reference; elsewhere refused by name.
"""

import numpy as np
import pytest

from mosaic_async_store.check.interp import PtxKernel
from mosaic_async_store.check.memory import SCHEDULES, ProtocolError
from mosaic_async_store.tools import toolchain

from test_interp_features import kernel


def _launch(body, schedule, *, block=32, words=64, inputs=None):
  """Runs ``body`` (assembled by ptxas first) on one CTA; returns the u32 output
  (param 0) after a launch whose param 1 holds ``inputs``."""
  ptx = kernel(body, nparams=2)
  toolchain.ptx_to_cubin(ptx, "sm_90a")
  data = np.zeros(words, np.uint32) if inputs is None else np.asarray(inputs, np.uint32)
  out, _ = PtxKernel(ptx).launch([np.zeros(words, np.uint32), data], cluster=1,
                                 smem_bytes=16, block=block, schedule=schedule)
  return out.view(np.uint32)


def _rule(body, schedule, **kw):
  with pytest.raises(ProtocolError) as err:
    _launch(body, schedule, **kw)
  return err.value


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
  assert "global buffer 1" in str(err) and "bytes 20..23" in str(err)


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
  assert err.rule == "nc-written" and "reads with ld.global.nc" in str(err)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_write_next_to_nc_read_bytes_passes(schedule):
  """Word 5 is read with .nc, word 6 written: different bytes."""
  _launch(_NC_WRITTEN.format(first=_NC_LOAD, second=_NC_WRITE.replace("+20", "+24")),
          schedule)
