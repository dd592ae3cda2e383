"""``setmaxnreg`` (warp specialisation, check/control.py): no memory effect, and
``.sync.aligned``: the lanes of a warp execute it together (a lane at another instruction
is ``aligned-divergence``) and so do the four warps of a warpgroup (a warp at another
setmaxnreg is ``setmaxnreg-aligned``), in every schedule.  The rules' other cases:
test_setmaxnreg_rules.py."""

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx
from ptx_harness import kernel, rules_in_every_schedule

# Warpgroup 0 gives registers up, warpgroup 1 takes them: a branch on %r1 >> {shift}
# (7: the warpgroup, uniform; 5: the warp, which splits warpgroup 0; 4: half a warp,
# which splits warp 0 itself).
_BODY = """
  ld.param.u64 %rd1, [k_param_0];
  shr.u32 %r3, %r1, {shift};
  setp.eq.u32 %p1, %r3, 0;
  @%p1 bra PRODUCER;
  setmaxnreg.inc.sync.aligned.u32 232;
  bra DONE;
PRODUCER:
  setmaxnreg.dec.sync.aligned.u32 40;
DONE:
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r1;
"""


@pytest.mark.parametrize("shift, rule", [(7, None), (5, "setmaxnreg-aligned"),
                                         (4, "aligned-divergence")])
def test_setmaxnreg_is_aligned_per_warpgroup(shift, rule):
  report = check_ptx(kernel(_BODY.format(shift=shift)), [np.zeros(256, np.uint32)],
                     smem_bytes=0, block=(256, 1, 1), schedules=3)
  if rule is None:
    assert report.ok, str(report)
    assert report.outputs[0].view(np.uint32).tolist() == list(range(256))
  else:
    assert rules_in_every_schedule(report) == {rule}, str(report)


def test_a_register_count_outside_the_isas_range_is_reported():
  ptx = kernel(_BODY.format(shift=7).replace("232", "236"))   # not a multiple of 8
  report = check_ptx(ptx, [np.zeros(256, np.uint32)], smem_bytes=0, block=(256, 1, 1),
                     schedules=3)
  assert rules_in_every_schedule(report) == {"setmaxnreg-count"}, str(report)
  assert "236" in str(report) and "232" in str(report)   # (the value, and the nearest)
