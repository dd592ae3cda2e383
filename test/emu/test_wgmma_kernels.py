"""WGMMA kernels as Mosaic GPU emits them, through ``check`` (check/wgmma.py): upstream's
Hopper matmul (with and without a cluster), its realistic pipelined matmul, flash
attention (warp-specialised, A from registers in its second product) and the
mixed-type matmul (int8 A converted in registers) leave NumPy's values in every CI
schedule; their broken variants are reported with the right rule in every schedule.

A broken variant is either written in Pallas as a user would get it wrong, or is the
correct kernel's PTX with one instruction taken out or changed (``_edited``): the
instruction the rule is about, in the kernel Mosaic really emits.
"""

import re
from unittest import mock

import numpy as np
import pytest

import tma_kernels
from mosaic_async_store.check import check
from mosaic_async_store.check.memory import SCHEDULES
from mosaic_async_store.tools import check_kernel
from ptx_harness import rules_in_every_schedule


@pytest.mark.long
@pytest.mark.parametrize("name", tma_kernels.WGMMA)
def test_wgmma_kernels_leave_numpys_values(name):
  fn, args = tma_kernels.ALL[name]()
  report = check(fn, *args, schedules=len(SCHEDULES))
  assert report.ok, str(report)
  reference, rtol, atol = tma_kernels.CLOSE_TO[name]
  for got, want in zip(report.outputs, reference(*args)):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("swizzle, dtype", [(32, "float16"), (64, "float16"),
                                            (64, "bfloat16"), (128, "bfloat16")])
def test_mosaics_descriptors_in_every_swizzle(swizzle, dtype):
  """WGMMA's descriptors as Mosaic encodes them for the 32-, 64- and 128-byte swizzles
  (A K-major, B N-major), f16 and bf16: the checker's decoding leaves NumPy's product."""
  import jax.numpy as jnp
  fn, args = tma_kernels.wgmma_matmul(swizzle, getattr(jnp, dtype))
  report = check(fn, *args, schedules=1)
  assert report.ok, str(report)
  tol = 2e-3 if dtype == "float16" else 1e-2
  np.testing.assert_allclose(np.asarray(report.outputs[0], np.float64),
                             tma_kernels.CLOSE_TO["wgmma_matmul"][0](*args)[0],
                             rtol=tol, atol=tol)


def _edited(name, pattern, replacement):
  """``check`` of kernel ``name`` whose PTX has ``pattern`` replaced (it must occur)."""
  fn, args = tma_kernels.ALL[name]()
  lower = check_kernel._lower

  def edited_lower(fn_, specs, *arch):
    mlir, ptx = lower(fn_, specs, *arch)
    new, count = re.subn(pattern, replacement, ptx)
    assert count, f"{pattern!r} is not in {name}'s PTX"
    return mlir, new
  with mock.patch.object(check_kernel, "_lower", edited_lower):
    return check(fn, *args, schedules=len(SCHEDULES))


@pytest.mark.parametrize("name, pattern, replacement, rule", [
    # no wgmma_wait: the accumulator is read while the operation has it in flight
    ("wgmma_matmul", r"wgmma\.wait_group\.sync\.aligned\s+\d+;", "", "wgmma-registers"),
    # no wgmma.fence before the first wgmma.mma_async (after the accumulator's zeros)
    ("wgmma_matmul", r"wgmma\.fence\.sync\.aligned;", "", "wgmma-fence"),
    # the pipeline's wait_group 1 made 2: a step's TMA load overwrites the slot that the
    # previous step's WGMMA may still read
    ("realistic_matmul", r"wgmma\.wait_group\.sync\.aligned\s+1;",
     "wgmma.wait_group.sync.aligned 2;", "race"),
    # the warp-specialised matmul's consumers release a slot (the arrive after the wait in
    # the loop) without waiting for the WGMMA that reads it: the next TMA load races
    ("hopper_matmul_k256", r"wgmma\.wait_group\.sync\.aligned\s+0;"
     r"(?=(?:[^;]*;){0,2}[^;]*mbarrier\.arrive\.release)", "", "race"),
    # commit_smem without its fence: the threads' stores, then WGMMA's async-proxy reads
    ("wgmma_after_generic_write", r"fence\.proxy\.async\.shared::cta;", "", "proxy-fence"),
])
def test_broken_ptx_variants_break_their_rule_in_every_schedule(name, pattern, replacement,
                                                                rule):
  report = _edited(name, pattern, replacement)
  assert rule in rules_in_every_schedule(report, len(SCHEDULES)), str(report)


def test_an_operand_overwritten_before_the_wait_is_a_race():
  """In Pallas: the threads overwrite the WGMMA's A buffer after issuing it, before
  ``wgmma_wait`` (the buffer reused before the WGMMA that reads it completed)."""
  fn, args = tma_kernels.wgmma_after_generic_write(overwrite_before_wait=True)
  report = check(fn, *args, schedules=len(SCHEDULES))
  assert "race" in rules_in_every_schedule(report, len(SCHEDULES)), str(report)
  assert any("wgmma.mma_async operations of group 1" in f.message for f in report.findings)
