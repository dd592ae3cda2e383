"""WGMMA operands that differ between the threads of one warpgroup (rule
``wgmma-operands``, check/families/wgmma/mma.py): a-desc, b-desc or the scale-d
predicate of one ``wgmma.mma_async`` must be one value for the whole warpgroup (PTX ISA,
wgmma.mma_async: "The contents of a matrix descriptor must be same across all the warps
in the warpgroup"; the instruction is one operation of the warpgroup, ".aligned": "all
threads in the warpgroup must execute the same wgmma.mma_async instruction").  The
undefined operation is reported, in every CI schedule, and the run stops there (as
``wgmma-aligned`` does).  Each wrong kernel changes the operand in some threads just
before the ``wgmma.mma_async`` of test_wgmma.py's kernel; its neighbour runs the same
code with a change that leaves the value equal (passes, with NumPy's product)."""

import numpy as np
import pytest

import test_wgmma
from ptx_harness import rules_in_every_schedule

# (what changes, the threads that change it: warp 0, or lane 5 of each warp) ->
# the instructions put before wgmma.mma_async; {delta} 0 keeps the value.
_CHANGES = {
    ("b-desc", "warp 0"): "setp.lt.u32 %p5, %r1, 32;\n  @%p5 add.s64 %rd11, %rd11, {delta};",
    ("a-desc", "lane 5"): ("and.b32 %r20, %r1, 31;\n  setp.eq.u32 %p5, %r20, 5;\n"
                           "  @%p5 add.s64 %rd10, %rd10, {delta};"),
    ("a-desc", "warp 3"): "setp.ge.u32 %p5, %r1, 96;\n  @%p5 add.s64 %rd10, %rd10, {delta};",
    ("scale-d", "warp 0"): "setp.lt.u32 %p5, %r1, 32;\n  @%p5 setp.eq.u32 %p2, {delta}, 0;",
    ("scale-d", "lane 5"): ("and.b32 %r20, %r1, 31;\n  setp.eq.u32 %p5, %r20, 5;\n"
                            "  @%p5 setp.eq.u32 %p2, {delta}, 0;"),
}
# The delta that changes each operand (a descriptor: its start address, in 16-byte
# units, moves by 64 bytes; scale-d: the predicate becomes false) and the one that
# keeps it (scale-d stays true: 0 == 0).
_CHANGE, _KEEP = {"b-desc": 4, "a-desc": 4, "scale-d": 1}, {"b-desc": 0, "a-desc": 0,
                                                         "scale-d": 0}


def _run(operand, where, delta):
  before = _CHANGES[(operand, where)].format(delta=delta)
  return test_wgmma._run(edits={"before_mma": before})


@pytest.mark.parametrize("operand, where", list(_CHANGES))
def test_an_operand_that_differs_in_the_warpgroup_is_reported(operand, where):
  report, _, _ = _run(operand, where, _CHANGE[operand])
  assert "wgmma-operands" in rules_in_every_schedule(report), str(report)
  found = next(f for f in report.findings if f.rule == "wgmma-operands")
  assert operand in found.explained and "warpgroup" in found.explained, found.explained
  assert found.severity == "error"
  assert not report.ok


@pytest.mark.parametrize("operand, where", list(_CHANGES))
def test_the_same_code_keeping_the_operand_uniform_passes(operand, where):
  report, got, want = _run(operand, where, _KEEP[operand])
  assert report.ok, str(report)
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_wgmma_in_a_warpgroup_missing_warps_is_reported(monkeypatch):
  """The same kernel launched with 64 threads: its warpgroup has two warps, so the four
  warps cannot all execute its wgmma instructions (``wgmma-aligned``; the neighbour, 128
  threads, is every test of test_wgmma.py)."""
  real = test_wgmma.check_ptx
  monkeypatch.setattr(test_wgmma, "check_ptx",
                      lambda ptx, args, **kw: real(ptx, args, **{**kw, "block": (64, 1, 1)}))
  report, _, _ = test_wgmma._run()
  assert "wgmma-aligned" in rules_in_every_schedule(report), str(report)
  found = next(f for f in report.findings if f.rule == "wgmma-aligned")
  assert "64 threads" in found.explained and "multiple of 128" in found.explained
