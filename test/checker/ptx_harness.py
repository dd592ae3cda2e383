"""What the checker's jax-free tests share: a kernel builder, launching with and without
findings, "a rule reported in every CI schedule", and the matrix instructions' operands in
shared memory (the tcgen05 tests).

Every test in test/checker runs hand-written PTX (or the checker's own parts) without
jax (``test_no_jax.py`` fails where one imports it); these helpers are the one copy.

    ptx = kernel('''  st.global.u32 [%rd1], %r1;''')
    out = outputs(ptx, [np.zeros(4, np.uint32)], cluster=1, smem_bytes=16, block=4)
    out = outputs(ptx, buffers, ..., warnings=CLUSTER_BARRIER_WARNINGS)   # exactly these
    f = finding(ptx, buffers, ...)          # the first finding; fails where none
    assert "race" in rules_in_every_schedule(check_ptx(ptx, ...))
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from mosaic_async_store.check.findings import Finding
from mosaic_async_store.check.interp import Launched, PtxKernel
from mosaic_async_store.check.memory import CI_SCHEDULES, SCHEDULES, WARNINGS

__all__ = ["kernel", "assemble", "launch", "outputs", "output", "finding", "findings_of",
           "expect", "rules_in_every_schedule", "SCHEDULES", "CI_SCHEDULES", "swizzled",
           "place_rows", "copy_loop", "CLUSTER_BARRIER_WARNINGS"]


# The warnings (docs/checker.md, "Warnings") that upstream's ClusterBarrier carries: its
# arrive (Mosaic's, behind plgpu.ClusterBarrier's barrier_arrive) is
# ``mbarrier.arrive.shared::cluster.b64 _, [mapped_addr]`` on each peer's barrier, at the
# default .release.cta (``peer-arrive-cta``).  Upstream's store arrives at cluster scope
# and this project's at .relaxed.cluster or .release.cluster: neither carries one.
CLUSTER_BARRIER_WARNINGS = frozenset({"peer-arrive-cta"})


def kernel(body: str, nparams: int = 1, regs: str = "", target: str = "sm_90a") -> str:
  """A one-entry kernel ``k`` for ``target`` around ``body``: ``nparams`` u64 parameters
  (``k_param_0`` ...), registers ``%p<8>``, ``%r<32>``, ``%rd<32>`` and ``regs``, a
  dynamic shared buffer ``__dynamic_shmem__0``, ``%r1`` = tid.x, ``%r2`` = the CTA's
  rank in its cluster."""
  params = ",\n".join(f"  .param .u64 k_param_{i}" for i in range(nparams))
  return f""".version 8.6
.target {target}
.address_size 64
.visible .entry k(
{params}
)
{{
  .reg .pred %p<8>;
  .reg .b32 %r<32>;
  .reg .b64 %rd<32>;
  {regs}
  .shared .align 16 .b8 __dynamic_shmem__0;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %cluster_ctarank;
{body}
  ret;
}}
"""


def assemble(ptx: str) -> str:
  """Assembles ``ptx`` with ptxas for sm_90a (a test kernel must be valid PTX); returns it."""
  from mosaic_async_store.tools import toolchain
  toolchain.ptx_to_cubin(ptx, "sm_90a")
  return ptx


def launch(ptx: str | PtxKernel, buffers, **kwargs) -> Launched:
  """Runs one cluster of ``ptx`` (text or a ``PtxKernel``) over ``buffers``
  (``PtxKernel.launch``'s keywords); its outputs and findings."""
  k = ptx if isinstance(ptx, PtxKernel) else PtxKernel(ptx)
  return k.launch(buffers, **kwargs)


def outputs(ptx: str | PtxKernel, buffers, *, warnings=(), **kwargs) -> list[np.ndarray]:
  """``launch``'s outputs (uint8 arrays); fails the test on any error, and unless the
  rules of its warnings are exactly ``warnings`` (rules of ``memory.WARNINGS``; none
  by default): a kernel that must be clean has no finding at all."""
  out, found = launch(ptx, buffers, **kwargs)
  unknown = set(warnings) - set(WARNINGS)   # (complete once the families loaded)
  assert not unknown, f"warnings={sorted(unknown)} are not rules of memory.WARNINGS"
  assert all(f.severity == "warning" for f in found) and \
      {f.rule for f in found} == set(warnings), \
      f"expected the warnings {sorted(warnings)} and no error, found:\n" + \
      "\n".join(f.explained for f in found)
  return out


def output(ptx: str | PtxKernel, buffers, dtype=np.uint32, **kwargs) -> np.ndarray:
  """The first buffer's contents as ``dtype`` (``outputs``: fails on any error, and on
  warnings other than ``warnings=``)."""
  return outputs(ptx, buffers, **kwargs)[0].view(dtype)


def findings_of(ptx: str | PtxKernel, buffers, **kwargs) -> tuple[Finding, ...]:
  """``launch``'s findings; fails the test where there is none."""
  _, found = launch(ptx, buffers, **kwargs)
  assert found, "the run found no broken rule"
  return found


def finding(ptx: str | PtxKernel, buffers, *, rule: str | None = None,
            match: str | None = None, **kwargs) -> Finding:
  """The first finding of a run (of ``rule`` where given); fails the test where there is
  none.  ``match``: a regular expression searched in its message with the rule
  (``Finding.explained``), as ``pytest.raises(match=...)`` did."""
  found = findings_of(ptx, buffers, **kwargs)
  return expect(found, rule=rule, match=match)


def expect(found, *, rule: str | None = None, match: str | None = None) -> Finding:
  """The first of ``found`` of ``rule`` (any rule where None); fails the test where there
  is none, or where ``match`` is not in its explained message."""
  of_rule = [f for f in found if rule is None or f.rule == rule]
  if not of_rule:
    pytest.fail(f"no {rule} finding among: " + "; ".join(f.explained for f in found))
  f = of_rule[0]
  if match is not None and not re.search(match, f.explained):
    pytest.fail(f"{match!r} not in {f.explained!r}")
  return f


def rules_in_every_schedule(report, schedules=len(CI_SCHEDULES)) -> set[str]:
  """The rules a ``check_ptx`` report found in each of its first ``schedules`` schedules
  (the CI's): empty unless every one found something."""
  by = {s: {f.rule for f in report.findings if f.schedule == s} for s in range(schedules)}
  return set.intersection(*by.values()) if all(by.values()) else set()


# -- operands of the matrix instructions (the tcgen05 tests) -------------------------
# The 128-byte swizzled canonical layouts, placed by this harness's own arithmetic (the
# core-matrix rows with the 16-byte chunk XOR), not the checker's.

def swizzled(off):
  """128-byte swizzle of byte offsets from a 1024-aligned base: chunk ^= row % 8."""
  return off ^ (((off >> 7) & 7) << 4)


def place_rows(image, base, mat):
  """``mat`` (rows x 128 bytes of K) K-major, 128-byte swizzled from a 1024-aligned
  ``base`` of the byte array ``image``: row r at (r // 8) 1024 + (r % 8) 128."""
  size = mat.dtype.itemsize
  rows = np.arange(mat.shape[0])[:, None, None]
  byte = size * np.arange(mat.shape[1])[None, :, None] + np.arange(size)
  off = swizzled((rows // 8) * 1024 + (rows % 8) * 128 + byte)
  image[base + off] = np.ascontiguousarray(mat).view(np.uint8).reshape(off.shape)


def copy_loop(pred: str) -> str:
  """PTX (a ``str.format`` template: its ``{chunks}`` is the image's 16-byte chunks) in
  which each of 128 threads copies every 128th chunk of the image at ``%rd1`` (global)
  into the CTA's shared memory at ``%r3``, then fences the generic writes for the
  asynchronous proxy; ``pred`` is a free predicate register."""
  return f"""
  mov.u32 %r6, %r1;
COPY:
  setp.ge.u32 {pred}, %r6, {{chunks}};
  @{pred} bra COPIED;
  mul.wide.u32 %rd5, %r6, 16;
  add.s64 %rd6, %rd1, %rd5;
  ld.global.v4.u32 {{{{%r7, %r8, %r9, %r10}}}}, [%rd6];
  shl.b32 %r11, %r6, 4;
  add.u32 %r12, %r3, %r11;
  st.shared.v4.u32 [%r12], {{{{%r7, %r8, %r9, %r10}}}};
  add.u32 %r6, %r6, 128;
  bra COPY;
COPIED:
  fence.proxy.async.shared::cta;"""
