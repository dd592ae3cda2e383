"""Every CTA reducing into CTA 0: the run-time branch is what keeps CTA 0 defined.

The configurations themselves run in ``test_ptx_execution.py`` (they are in the
GPU matrix); here the branch is defeated in the real PTX, so that CTA 0 takes
the peer form too, and the interpreter must catch its red.async into the
executing CTA (undefined behaviour, PTX ISA 9.1, red.async).
"""

import re

import numpy as np
import pytest

from mosaic_async_store.demo.config import StoreConfig

from mosaic_async_store.check.memory import SCHEDULES
from test_ptx_execution import _ptx, ptx_finding, run_ptx

CFG = StoreConfig(dtype="int32", atomic="add", target="cta0", cluster=2)


def test_cta0_without_the_branch_is_caught():
  ptx = _ptx(CFG)
  m = re.search(r"mov\.u32 (%r\d+), %cluster_ctarank;", ptx)
  assert m, "no %cluster_ctarank read: the store did not branch on the target"
  mutated = ptx[:m.start()] + f"mov.u32 {m.group(1)}, 7;" + ptx[m.end():]  # never CTA 0
  ptx_finding(CFG, mutated, rule="red.async-self")


def test_cta0_local_arm_completes_no_tx_bytes():
  """CTA 0's own arm announces 0 bytes with a release arrive (its plain reductions need
  it); the peers' 256 each with a relaxed one (their red.async complete on the tx count)."""
  ptx = _ptx(CFG)
  announced = {}
  for m in re.finditer(r"mbarrier\.arrive\.expect_tx\.(release|relaxed)\.cluster"
                       r"\.shared::cluster\.b64 _, \[%r\d+\], (%r\d+);", ptx):
    movs = re.findall(rf"mov\.b32\s+{re.escape(m.group(2))}, (\d+);", ptx[:m.start()])
    announced[m.group(1)] = int(movs[-1])
  assert announced == {"release": 0, "relaxed": 64 * 128 * 4 // 128}


# -- reductions with a plain form: the run-time local arm -------------------------
#
# Float adds and 64-bit min/max have no red.async; 64-bit and/or/xor go as 32-bit
# halves.  Where the target is the executing CTA at run time (CTA 0 reducing into
# itself), each takes the local form, red.relaxed.cluster.shared::cta, behind the
# %cluster_ctarank branch: ptxas makes a .shared::cluster reduction into a generic
# ATOM with state-space queries and compare-and-swap fallbacks.

PLAIN_FORMS = {
    StoreConfig(dtype="float32", atomic="add", target="cta0", shape=(64, 64)): "add.f32",
    StoreConfig(dtype="bfloat16", atomic="add", target="cta0", shape=(64, 64)):
        "add.noftz.bf16x2",
    StoreConfig(dtype="float16", atomic="add", target="cta0", shape=(64, 64)):
        "add.noftz.f16x2",
    StoreConfig(dtype="int64", atomic="min", target="cta0", shape=(64, 64)): "min.s64",
    StoreConfig(dtype="uint64", atomic="max", target="cta0", shape=(64, 64)): "max.u64",
    StoreConfig(dtype="int64", atomic="xor", target="cta0", shape=(64, 64)): "xor.b32",
}


@pytest.mark.parametrize("cfg", PLAIN_FORMS, ids=lambda c: c.describe())
def test_cta0_plain_reductions_take_the_local_form_behind_the_branch(cfg):
  ptx = _ptx(cfg)
  m = re.search(r"mov\.u32 %r\d+, %cluster_ctarank;", ptx)
  assert m, "no %cluster_ctarank read: the store did not branch on the target"
  local = f"red.relaxed.cluster.shared::cta.{PLAIN_FORMS[cfg]} "
  assert local in ptx[m.end():], f"no {local.strip()} after the rank read"
  assert local not in ptx[:m.start()]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: f"schedule{s}")
@pytest.mark.parametrize("cfg", PLAIN_FORMS, ids=lambda c: c.describe())
def test_cta0_plain_reductions_run_clean(cfg, schedule):
  out, flags, want, kernel = run_ptx(cfg, _ptx(cfg), schedule)
  bad = np.flatnonzero(out != want)
  assert bad.size == 0, f"{bad.size} bytes differ, first at {bad[:8].tolist()}"
  assert (flags == 1).all() and kernel.timeouts == 0
