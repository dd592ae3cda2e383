"""Every rule the PTX ISA states for ``setmaxnreg`` (check/control.py quotes each
sentence), each broken by a kernel that is reported in every CI schedule, beside a
correct neighbour that passes:

  * ``setmaxnreg-aligned``: the warps of a warpgroup at different setmaxnreg (another
    count, or .inc beside .dec);
  * ``setmaxnreg-warpgroup``: a warp of the warpgroup that exits or branches around the
    setmaxnreg the others execute; a setmaxnreg in a block of fewer than 128 threads;
  * ``setmaxnreg-sync``: a second setmaxnreg with no synchronisation of the warpgroup
    after the first;
  * ``setmaxnreg-count``: a count outside 24..256 or not a multiple of 8;
  * ``setmaxnreg-direction``: .dec above the warp's count or .inc below it, the count
    being the kernel's ``.maxnreg`` at launch, then the warp's last setmaxnreg's;
  * the CTA's register pool (with ``.maxnreg``): an .inc waits for the registers other
    warps' .dec release, and one that never gets them is a ``hang``."""

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx
from ptx_harness import CI_SCHEDULES, kernel, rules_in_every_schedule

SCHEDULES = len(CI_SCHEDULES)

# {before}, then every thread stores its tid at out[tid].
_STORE = """
  ld.param.u64 %rd1, [k_param_0];
  shr.u32 %r3, %r1, 5;
{before}
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r1;
"""


def _check(before, *, block=128, maxnreg=None):
  ptx = kernel(_STORE.format(before=before))
  if maxnreg is not None:   # (the performance-tuning directive, before the body)
    ptx = ptx.replace("\n)\n{", f"\n)\n.maxnreg {maxnreg}\n{{", 1)
    assert f".maxnreg {maxnreg}" in ptx
  return check_ptx(ptx, [np.zeros(block, np.uint32)], smem_bytes=0, block=(block, 1, 1),
                   schedules=SCHEDULES)


def _passes(report, block=128):
  assert report.ok, str(report)
  assert report.outputs[0].view(np.uint32).tolist() == list(range(block))


def _reported(report, rule):
  assert rule in rules_in_every_schedule(report), str(report)
  return next(f for f in report.findings if f.rule == rule).explained


# Warp 3 (%r3 == 3) runs {other}, warps 0..2 run {mine}.
_WARP_3_ELSEWHERE = """  setp.eq.u32 %p1, %r3, 3;
  @%p1 bra OTHER;
  {mine}
  bra JOINED;
OTHER:
  {other}
JOINED:"""


@pytest.mark.parametrize("mine, other", [
    ("setmaxnreg.dec.sync.aligned.u32 40;", "setmaxnreg.dec.sync.aligned.u32 48;"),
    ("setmaxnreg.dec.sync.aligned.u32 40;", "setmaxnreg.inc.sync.aligned.u32 40;"),
    ("setmaxnreg.inc.sync.aligned.u32 232;", "setmaxnreg.dec.sync.aligned.u32 40;")])
def test_warps_of_a_warpgroup_at_different_setmaxnreg_are_reported(mine, other):
  text = _reported(_check(_WARP_3_ELSEWHERE.format(mine=mine, other=other)),
                   "setmaxnreg-aligned")
  assert "PTX line" in text and "warpgroup" in text


def test_the_same_setmaxnreg_at_two_sites_of_a_warpgroup_passes():
  """Two sites, one instruction text: each warp's first setmaxnreg is a different
  instruction, which the ISA's "the same setmaxnreg instruction" forbids as well."""
  same = "setmaxnreg.dec.sync.aligned.u32 40;"
  _reported(_check(_WARP_3_ELSEWHERE.format(mine=same, other=same)), "setmaxnreg-aligned")
  _passes(_check(same))   # (one site: every warp of the warpgroup there)


@pytest.mark.parametrize("other", ["ret;", ""])
def test_a_warp_that_skips_its_warpgroups_setmaxnreg_is_reported(other):
  """Warp 3 exits first, or goes on without it."""
  text = _reported(_check(_WARP_3_ELSEWHERE.format(
      mine="setmaxnreg.dec.sync.aligned.u32 40;", other=other)), "setmaxnreg-warpgroup")
  assert "[3]" in text


def test_setmaxnreg_in_a_block_of_fewer_than_four_warps_is_reported():
  text = _reported(_check("  setmaxnreg.dec.sync.aligned.u32 40;", block=64),
                   "setmaxnreg-warpgroup")
  assert "64 threads" in text
  _passes(_check("  setmaxnreg.dec.sync.aligned.u32 40;", block=256), block=256)


@pytest.mark.parametrize("between, ok", [
    ("", False),
    ("bar.sync 0;", True),
    ("bar.sync 1, 128;", True),
    # (the warps meet only in pairs: warp 0 need not know warp 3's first setmaxnreg)
    ("setp.lt.u32 %p2, %r3, 2;\n  @%p2 bar.sync 1, 64;\n  @!%p2 bar.sync 2, 64;", False)])
def test_two_setmaxnreg_need_the_warpgroup_synchronised_between(between, ok):
  report = _check(f"  setmaxnreg.dec.sync.aligned.u32 40;\n  {between}\n"
                  "  setmaxnreg.inc.sync.aligned.u32 232;")
  if ok:
    _passes(report)
  else:
    assert "synchronize" in _reported(report, "setmaxnreg-sync")


@pytest.mark.parametrize("count, ok", [(20, False), (264, False), (100, False), (16, False),
                                       (24, True), (256, True), (104, True)])
@pytest.mark.parametrize("maxnreg", [None, 24])
def test_the_count_must_be_a_multiple_of_8_from_24_to_256(count, ok, maxnreg):
  """(With ``.maxnreg 24`` every .inc here asks the empty pool: a valid count waits for
  it, as below; one outside the range is reported first.)"""
  report = _check(f"  setmaxnreg.inc.sync.aligned.u32 {count};", maxnreg=maxnreg)
  if maxnreg is not None and ok:
    ok = count == 24   # (asks for nothing: goes on)
    if not ok:
      assert "register pool" in _reported(report, "hang")
      return
  if ok:
    _passes(report)
  else:
    assert str(count) in _reported(report, "setmaxnreg-count")


@pytest.mark.parametrize("before, maxnreg, ok", [
    ("setmaxnreg.dec.sync.aligned.u32 160;", 128, False),   # .dec above the launch's
    ("setmaxnreg.inc.sync.aligned.u32 96;", 128, False),    # .inc below it
    ("setmaxnreg.dec.sync.aligned.u32 128;", 128, True),    # (equal: allowed both ways)
    ("setmaxnreg.inc.sync.aligned.u32 128;", 128, True),
    ("setmaxnreg.dec.sync.aligned.u32 40;\n  bar.sync 0;\n"   # (the pool: its own 88)
     "  setmaxnreg.inc.sync.aligned.u32 128;", 128, True),
    ("setmaxnreg.dec.sync.aligned.u32 40;", 128, True),
    ("setmaxnreg.dec.sync.aligned.u32 160;", None, True),   # (launch count not known)
    # then against the warp's last setmaxnreg
    ("setmaxnreg.dec.sync.aligned.u32 40;\n  bar.sync 0;\n"
     "  setmaxnreg.dec.sync.aligned.u32 80;", None, False),
    ("setmaxnreg.inc.sync.aligned.u32 232;\n  bar.sync 0;\n"
     "  setmaxnreg.inc.sync.aligned.u32 200;", None, False),
    ("setmaxnreg.dec.sync.aligned.u32 40;\n  bar.sync 0;\n"
     "  setmaxnreg.inc.sync.aligned.u32 80;", None, True)])
def test_dec_must_not_raise_and_inc_must_not_lower_the_count(before, maxnreg, ok):
  report = _check("  " + before, maxnreg=maxnreg)
  if ok:
    _passes(report)
  else:
    assert "must not" in _reported(report, "setmaxnreg-direction")


# Warpgroup 0 (the producer) gives registers back with {dec}, warpgroup 1 asks for 232
# (Mosaic's and CUTLASS's split); with ``.maxnreg 128`` the CTA's pool starts empty and
# each warp of warpgroup 1 needs 32 threads x (232 - 128) registers from it.
_SPLIT = """  shr.u32 %r4, %r1, 7;
  setp.eq.u32 %p1, %r4, 0;
  @%p1 bra PRODUCER;
  setmaxnreg.inc.sync.aligned.u32 232;
  bra DONE;
PRODUCER:
  {dec}
DONE:"""


@pytest.mark.parametrize("dec, ok", [
    ("setmaxnreg.dec.sync.aligned.u32 24;", True),    # releases 128 x 104: exactly enough
    ("setmaxnreg.dec.sync.aligned.u32 40;", False),   # 128 x 88: never enough
    ("", False)])                                     # nothing released
def test_an_inc_waits_for_registers_the_pool_gets_from_a_dec(dec, ok):
  report = _check(_SPLIT.format(dec=dec), block=256, maxnreg=128)
  if ok:
    _passes(report, block=256)
    return
  text = _reported(report, "hang")
  assert "3328 registers" in text and "register pool" in text, text   # (32 x 104 a warp)


def test_without_maxnreg_the_pool_is_not_known_and_an_inc_goes_on():
  _passes(_check(_SPLIT.format(dec="setmaxnreg.dec.sync.aligned.u32 40;"), block=256),
          block=256)
