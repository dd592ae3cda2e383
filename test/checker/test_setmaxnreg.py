"""``setmaxnreg`` (warp specialisation): no memory effect, its count checked at parse, and
``.aligned``: the lanes of a warp execute it together (a lane at another instruction is
``aligned-divergence``, in every schedule)."""

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx
from mosaic_async_store.errors import AsyncStoreError
from ptx_harness import kernel

# Warp 0 gives registers up, warp 1 takes them: a warp-uniform branch on %warpid. The
# divergent variant splits warp 0 itself between the two instructions.
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


@pytest.mark.parametrize("shift, divergent", [(5, False), (4, True)])
def test_setmaxnreg_is_aligned_per_warp(shift, divergent):
  ptx = kernel(_BODY.format(shift=shift))
  report = check_ptx(ptx, [np.zeros(64, np.uint32)], smem_bytes=0, block=(64, 1, 1),
                     schedules=3)
  if divergent:   # lanes 0..15 and 16..31 of warp 0 at two different setmaxnreg
    assert all({f.rule for f in report.findings if f.schedule == s} == {"aligned-divergence"}
               for s in range(3)), str(report)
  else:
    assert report.ok, str(report)
    assert report.outputs[0].view(np.uint32).tolist() == list(range(64))


def test_a_register_count_outside_the_isas_range_is_refused():
  ptx = kernel(_BODY.format(shift=5).replace("232", "236"))   # not a multiple of 8
  with pytest.raises(AsyncStoreError, match="setmaxnreg"):
    check_ptx(ptx, [np.zeros(64, np.uint32)], smem_bytes=0, block=(64, 1, 1))
