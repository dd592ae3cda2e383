"""``mosaic_async_store.check.check_ptx``: the checker's public face, on a shipped
kernel's PTX (test_ptx_execution's full store kernel) and on bad arguments."""

import re

import numpy as np
import pytest

from mosaic_async_store.check import Memref, Report, check_ptx
from mosaic_async_store.errors import AsyncStoreError
from demo_kernels import _smem_bytes, full_kernel_args
from test_ptx_execution import S, _ptx


def test_a_correct_kernel_is_ok_with_its_outputs():
  cfg = S(dtype="float32", atomic="add")
  args, want = full_kernel_args(cfg)
  report = check_ptx(_ptx(cfg), args, smem_bytes=_smem_bytes(cfg), cluster=(2, 1, 1))
  assert isinstance(report, Report) and report.ok and report.schedules == (0, 1, 2)
  init, _, flags, out = report.outputs
  assert out.dtype == np.uint8 and np.array_equal(out, want)
  assert flags.dtype == np.int32 and (flags == 1).all()
  assert "ok" in str(report)


@pytest.mark.long
def test_a_broken_kernel_has_a_finding_per_schedule_with_where():
  cfg = S(dtype="float32", atomic="add")
  ptx = _ptx(cfg).replace("mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64",
                          "mbarrier.try_wait.parity.shared::cta.b64")
  args, _ = full_kernel_args(cfg)
  report = check_ptx(ptx, args, smem_bytes=_smem_bytes(cfg), cluster=(2, 1, 1))
  # every schedule reports the races (the unrolled loads of the acquiring thread, one
  # finding each) and then the exit the CTAs make unordered with the peer's reductions
  assert not report.ok and sorted({f.schedule for f in report.findings}) == [0, 1, 2]
  lines = ptx.splitlines()
  races = [f for f in report.findings if f.rule == "race"]
  assert {f.schedule for f in races} == {0, 1, 2}
  assert {f.rule for f in report.findings} == {"race", "exit"}
  for f in races:
    assert "morally strong" in f.message
    assert f.cta in (0, 1) and 0 <= f.thread < 128
    assert re.search(r"\bld\.shared|\bld\.", lines[f.ptx_line - 1]), lines[f.ptx_line - 1]
  assert report.outputs is None
  assert "[race]" in str(report)


@pytest.mark.parametrize("kwargs, param", [
    (dict(args=[np.zeros(4)]), "args"),                       # count
    (dict(args=[1, 2, 3, 4]), "args[0]"),                     # kind
    (dict(block=(64, 2, 1)), "block"),
    (dict(cluster=(4, 4, 2)), "cluster"),       # 32 CTAs: more than a cluster holds
    (dict(grid=(3, 1, 1)), "grid"),             # not whole clusters of 2
    (dict(schedules=0), "schedules"),
    (dict(smem_bytes=-1), "smem_bytes"),
    (dict(ptx="add.s32 %r1, %r2, %r3;"), "ptx"),
])
def test_wrong_arguments_are_refused_before_anything_runs(kwargs, param):
  cfg = S()
  args, _ = full_kernel_args(cfg)
  call = dict(ptx=_ptx(cfg), args=args, smem_bytes=_smem_bytes(cfg), cluster=(2, 1, 1))
  call.update(kwargs)
  with pytest.raises((AsyncStoreError, TypeError)) as err:
    check_ptx(call.pop("ptx"), call.pop("args"), **call)
  assert f"{param}=" in str(err.value) and "Fix:" in str(err.value)


def test_an_opcode_the_checker_does_not_run_is_refused_naming_it():
  cfg = S()
  ptx = _ptx(cfg).replace("ret;", "popc.b32 %r1, %r1;\n\tret;", 1)
  args, _ = full_kernel_args(cfg)
  with pytest.raises(AsyncStoreError, match=r"popc\.b32.*PTX line \d+|PTX line \d+.*popc"):
    check_ptx(ptx, args, smem_bytes=_smem_bytes(cfg), cluster=(2, 1, 1))


def test_memref_arguments_are_descriptors():
  """A Memref is 3 + 2 * ndim parameters: four of them are not the 4 pointers."""
  cfg = S()
  args, _ = full_kernel_args(cfg)
  with pytest.raises(AsyncStoreError, match="args="):
    check_ptx(_ptx(cfg), [Memref(a) for a in args], smem_bytes=_smem_bytes(cfg),
              cluster=(2, 1, 1))
