"""``.aligned`` over a warpgroup for every WGMMA instruction (check/wgmma_guard.py,
``aligned``): "The mandatory .aligned qualifier indicates that all threads in the
warpgroup must execute the same wgmma.fence / commit_group / wait_group / mma_async
instruction" (PTX ISA, each of the four).  test_wgmma.py's kernel, assembled by ptxas,
with one of the instructions reached through a branch: warp 0 takes the other side
(wrong: reported in every CI schedule) or the whole warpgroup does (a uniform branch:
passes, with the product NumPy computes).  ``wgmma.mma_async`` itself:
test_wgmma.py's ``test_warps_issuing_different_instructions_break_aligned``."""

import numpy as np
import pytest

import test_wgmma
from ptx_harness import assemble, rules_in_every_schedule

# The instruction at two sites; threads below ``split`` take the second.
_TWO_SITES = """setp.lt.u32 %p3, %r1, {split};
  @%p3 bra OTHER;
  {insn}
  bra JOINED;
OTHER:
  {insn}
JOINED:"""
# (the placeholder of test_wgmma's kernel, the instruction put there); a commit or a
# wait added after the kernel's own adds an empty group or a second wait, nothing else
_SITES = {
    "wgmma.fence": ("wgmma_fence", "wgmma.fence.sync.aligned;"),
    "wgmma.commit_group": ("after_mma", "wgmma.commit_group.sync.aligned;"),
    "wgmma.wait_group": ("after_commit", "wgmma.wait_group.sync.aligned 0;"),
}


def _run(monkeypatch, which, split):
  real = test_wgmma.check_ptx
  monkeypatch.setattr(test_wgmma, "check_ptx",
                      lambda ptx, *args, **kw: real(assemble(ptx), *args, **kw))
  slot, insn = _SITES[which]
  return test_wgmma._run(edits={slot: _TWO_SITES.format(split=split, insn=insn)})


@pytest.mark.parametrize("which", _SITES)
def test_a_wgmma_instruction_at_two_instructions_of_a_warpgroup_is_reported(
    monkeypatch, which):
  """Warp 0 runs it at the second site, warps 1 to 3 at the first."""
  report, _, _ = _run(monkeypatch, which, 32)
  assert "wgmma-aligned" in rules_in_every_schedule(report), str(report)
  found = next(f for f in report.findings if f.rule == "wgmma-aligned")
  assert which in found.explained and "PTX line" in found.explained


@pytest.mark.parametrize("which", _SITES)
def test_a_wgmma_instruction_reached_by_a_uniform_branch_passes(monkeypatch, which):
  """Every thread of the warpgroup takes the second site."""
  report, got, want = _run(monkeypatch, which, 128)
  assert report.ok, str(report)
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
