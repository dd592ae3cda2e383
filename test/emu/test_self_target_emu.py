"""Every CTA reducing into CTA 0: the run-time branch is what keeps CTA 0 defined.

The configurations themselves run in ``test_ptx_execution.py`` (they are in the
GPU matrix); here the branch is defeated in the real PTX, so that CTA 0 takes
the peer form too, and the interpreter must catch its red.async into the
executing CTA (undefined behaviour, PTX ISA 9.1, red.async).
"""

import re

import pytest

from mosaic_async_store.demo.config import StoreConfig

from mosaic_async_store.check.memory import ProtocolError
from test_ptx_execution import _ptx, run_ptx

CFG = StoreConfig(dtype="int32", atomic="add", target="cta0", cluster=2)


def test_cta0_without_the_branch_is_caught():
  ptx = _ptx(CFG)
  m = re.search(r"mov\.u32 (%r\d+), %cluster_ctarank;", ptx)
  assert m, "no %cluster_ctarank read: the store did not branch on the target"
  mutated = ptx[:m.start()] + f"mov.u32 {m.group(1)}, 7;" + ptx[m.end():]  # never CTA 0
  with pytest.raises(ProtocolError) as err:
    run_ptx(CFG, mutated)
  assert err.value.rule == "red.async-self"


def test_cta0_local_arm_completes_no_tx_bytes():
  """CTA 0's own arm announces 0 bytes with a release arrive; the peers' 256 each."""
  ptx = _ptx(CFG)
  announced = {}
  for m in re.finditer(r"mbarrier\.arrive\.expect_tx(\.release\.cluster)?\.shared::cluster"
                       r"\.b64 _, \[%r\d+\], (%r\d+);", ptx):
    movs = re.findall(rf"mov\.b32\s+{re.escape(m.group(2))}, (\d+);", ptx[:m.start()])
    announced[bool(m.group(1))] = int(movs[-1])
  assert announced == {True: 0, False: 64 * 128 * 4 // 128}
