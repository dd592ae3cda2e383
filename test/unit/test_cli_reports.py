"""What ``mosaic-async-store check`` and ``compile`` tell a user about their kernel
(FILE.py:FUNCTION): a grid's findings once with their blocks, findings in a short first
line with indented details, the other access's Python line, exit status 5 for what the
checker cannot check, the user's source quoted as written, jax's own refusal of a
kernel's statement, a Pallas-level hint, and the dynamic shared memory in ``--emit
stats``.  The kernels are written to a temporary file; the lines the reports must name
are found from ``# <marker>`` comments, never written as numbers.
"""

from __future__ import annotations

import json
import re

import pytest

from mosaic_async_store import compat
from mosaic_async_store.check.findings import MAX_LISTED, Finding, detailed, elided
from mosaic_async_store.check.memory import Access
from mosaic_async_store.check.report import Report
from mosaic_async_store.tools import check_kernel, cli

_HEAD = '''
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from mosaic_async_store import pallas as mas_pallas
'''

# Each cluster of two: CTA 1 reduces into CTA 0's tile while CTA 0 may still zero it (no
# cluster barrier); three clusters in the grid, every one racing alike.
_GRID = _HEAD + '''
SHAPE = (64, 64)

def grid_race():
  def body(x_ref, o_ref, smem, bar):
    cta = jax.lax.axis_index("cluster")
    smem[...] = jnp.zeros(SHAPE, jnp.int32)  # <zero>
    mas_pallas.async_store_smem(x_ref[cta], smem, bar.at[0], cluster_idx=0,  # <reduce>
                                cluster_dim="cluster", atomic="add")
    @pl.when(cta == 0)
    def _():
      plgpu.barrier_wait(bar.at[0])
      o_ref[...] = smem[...]
  kernel = plgpu.kernel(
      body, out_type=jax.ShapeDtypeStruct(SHAPE, jnp.int32), grid=(3,), grid_names=("g",),
      cluster=(2,), cluster_names=("cluster",),
      scratch_types=[plgpu.SMEM(SHAPE, jnp.int32),
                     plgpu.Barrier(num_arrivals=2, num_barriers=1)],
      compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane))
  return kernel, (np.ones((2, *SHAPE), np.int32),)

def _lane_kernel(body, *scratch):
  return plgpu.kernel(
      body, out_type=jax.ShapeDtypeStruct((128,), jnp.float32), grid=(1,),
      grid_names=("g",), scratch_types=list(scratch),
      compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane))

def nan_result():   # a NaN result of float arithmetic: a case the checker refuses
  def body(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0  # <double>
  return _lane_kernel(body), (np.full((128,), np.nan, np.float32),)

def keyword_error():   # the user's own error, on a line with the library's keywords
  def body(x_ref, o_ref):
    o_ref[...] = dict(layout='WGMMA', optimized=False, swizzle=16)["atomic"]  # <keywords>
  return _lane_kernel(body), (np.zeros((128,), np.float32),)

def single_barrier_indexed():   # bar.at[0] on one barrier (no num_barriers)
  def body(x_ref, o_ref, bar):
    plgpu.barrier_arrive(bar.at[0])  # <at>
    o_ref[...] = x_ref[...]
  return _lane_kernel(body, plgpu.Barrier(num_arrivals=1)), (np.zeros((128,), np.float32),)
'''


@pytest.fixture
def kernels(tmp_path):
  path = tmp_path / "user_kernels.py"
  path.write_text(_GRID)
  return path


def _line(path, marker: str) -> str:
  """"path:N" of the line of ``path`` that ends with ``# <marker>``."""
  lines = path.read_text().splitlines()
  [n] = [i for i, text in enumerate(lines, 1) if text.rstrip().endswith(f"# <{marker}>")]
  return f"{path}:{n}"


def _check(capsys, *argv) -> tuple[int, str, str]:
  status = cli.main(["check", *argv])
  out, err = capsys.readouterr()
  return status, out, err


# --- 3, 5: a grid's findings once, with their blocks; the other access's line ------


def test_a_grid_finding_is_printed_once_with_its_blocks_and_clusters(kernels, capsys):
  status, out, _ = _check(capsys, f"{kernels}:grid_race", "--schedules", "1")
  assert status == 1, out
  head, *rest = out.splitlines()
  assert re.search(r"3 finding\(s\) \(1 distinct: .*\) in schedules \[0\]"
                   r"(, \d+ warning\(s\))?:$", head), head
  firsts = [line for line in rest if line.startswith("  [race]")]
  assert len(firsts) == 1, out   # the race of each of the three clusters, once
  assert firsts[0].startswith(f"  [race] {_line(kernels, 'reduce')} (PTX line "), firsts[0]
  assert ("CTA 1 thread 0, in 3 blocks: (1, 0, 0), (3, 0, 0), (5, 0, 0) of 3 cluster(s), "
          "schedule 0") in firsts[0]
  # the other access, in text as in JSON: its Python line next to its PTX line
  details = rest[rest.index(firsts[0]) + 1:]
  details = details[:next((i for i, d in enumerate(details) if d.startswith("  [")),
                          len(details))]
  other = [line for line in details if line.startswith("      other access: ")]
  zero = re.escape(f"CTA 0 thread 0, write, at {_line(kernels, 'zero')}")
  assert len(other) == 1 and re.search(zero + r" \(PTX line \d+\)", other[0]), out


def test_the_json_report_names_each_findings_block_and_cluster(kernels, capsys):
  status, out, _ = _check(capsys, f"{kernels}:grid_race", "--schedules", "1", "--json")
  assert status == 1
  findings = [f for f in json.loads(out)["findings"] if f["severity"] == "error"]
  assert len(findings) == 3 and {f["rule"] for f in findings} == {"race"}
  assert sorted(tuple(f["ctaid"]) for f in findings) == [(1, 0, 0), (3, 0, 0), (5, 0, 0)]
  assert sorted(tuple(f["clusterid"]) for f in findings) == [(0, 0, 0), (1, 0, 0),
                                                             (2, 0, 0)]
  for f in findings:   # the keys the JSON had before stay
    assert {"rule", "message", "cta", "thread", "ptx_line", "schedule", "source",
            "other_source", "access", "other", "missing", "instruction",
            "severity"} <= set(f)
    zero = _line(kernels, "zero").rpartition(":")[2]
    assert f["cta"] == 1 and f["other_source"].endswith(f"user_kernels.py:{zero}")


# --- 6: a short first line, details indented, long operand lists elided -------------


_REGISTERS = ", ".join(f"%f{i}" for i in range(1, 65))
_WGMMA = (f"wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{{_REGISTERS}}}, %rd4, "
          "%rd5, p, 1, 1, 0, 1")


def _wgmma_race(**changes) -> Finding:
  other = Access("the wgmma.mma_async operations of group 1 of CTA 0 warpgroup 0 (reads)",
                 0, None, "asynchronous read", "CTA 0 SMEM bytes 0..16383", 302, _WGMMA,
                 "kernel.py:24")
  tma = ("cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes [%r4], "
         "[%rd1, {%r5, %r6}], [%r7]")
  fields = dict(rule="race", message=f"CTA 0 thread 0: a TMA load into CTA 0 writes CTA 0 "
                f"SMEM bytes 0..16383, read by {other.who} (one issued at PTX line 302: "
                f"`{_WGMMA}`) (issued at PTX line 368: `{tma}`)", cta=0, thread=0,
                ptx_line=368, schedule=0, other_source="kernel.py:24", other=other,
                instruction=tma, ctaid=(0, 0, 0), clusterid=(0, 0, 0))
  return Finding(**{**fields, **changes})


def test_a_long_finding_has_a_short_first_line_and_elided_operand_lists():
  f = _wgmma_race()
  assert len(f.message) > 500
  text = str(Report((f,), None, (0,)))
  head, first, *details = text.splitlines()
  assert first == "  [race] PTX line 368, CTA 0 thread 0, schedule 0", first
  assert details and all(line.startswith("      ") for line in details), text
  assert max(len(line) for line in text.splitlines()) < 400, text
  assert "{%f1, %f2, %f3, ... 60 more ..., %f64}" in text and "%f33" not in text
  assert any(d.startswith("      issued by: `cp.async.bulk.tensor") for d in details), text
  whole = check_kernel.report_json(Report((f,), None, (0,)))["findings"][0]
  assert whole["message"] == f.message and "%f33" in whole["message"]   # JSON: whole


def test_only_lists_longer_than_the_limit_are_elided():
  short = "{" + ", ".join(f"%r{i}" for i in range(MAX_LISTED)) + "}"
  long = "{" + ", ".join(f"%r{i}" for i in range(MAX_LISTED + 1)) + "}"
  assert elided(f"mov {short};") == f"mov {short};"
  assert elided(f"mov {long};") == f"mov {{%r0, %r1, %r2, ... {MAX_LISTED - 3} more ..., " \
      f"%r{MAX_LISTED}}};"


# --- 4: a Pallas-level hint where one fits -----------------------------------------


def test_a_tma_refill_under_an_inflight_wgmma_hints_at_delay_release():
  hints = [line for line in detailed(_wgmma_race()) if line.startswith("    hint: ")]
  assert len(hints) == 1 and "delay_release=1" in hints[0], hints
  plain = _wgmma_race(other=Access("CTA 0 thread 3", 0, 3, "read", None, 80,
                                   "ld.shared.b32 %r1, [%r2]"))
  assert not [line for line in detailed(plain) if "hint:" in line]


def test_a_pipelined_matmul_refilling_a_slot_early_names_its_blocks_and_the_fix(capsys,
                                                                                 tmp_path):
  """Upstream's realistic matmul (emit_pipeline on a 2x2 grid) with delay_release=0:
  one race, found in each of the four blocks, printed once, with the hint."""
  path = tmp_path / "matmul.py"
  path.write_text("import tma_kernels\n\ndef broken():\n"
                  "  return tma_kernels.realistic_matmul(delay_release=0)\n")
  status, out, _ = _check(capsys, f"{path}:broken", "--schedules", "1")
  assert status == 1, out
  firsts = [line for line in out.splitlines() if line.startswith("  [race]")]
  assert len(firsts) == 1, out
  assert "in 4 blocks: (0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)" in firsts[0], out
  assert "hint: " in out and "delay_release=1" in out, out


# --- 7: exit status 5 for what the checker cannot check, with the Python line --------


def test_a_case_the_checker_does_not_model_exits_5_naming_the_python_line(kernels, capsys):
  status, out, err = _check(capsys, f"{kernels}:nan_result", "--schedules", "1")
  assert status == 5 and out == "", (out, err)
  [line] = err.splitlines()
  assert line.startswith(f"mosaic-async-store: error: cannot check {kernels}:nan_result: ")
  double = re.escape(_line(kernels, "double"))
  assert re.search(r"\(PTX line \d+, " + double + r"\)", line), line
  assert "NaN result" in line and "docs/checker.md" in line


def test_check_help_lists_every_exit_status(capsys):
  assert cli.main(["check", "--help"]) == 0
  out = capsys.readouterr().out
  listed = re.findall(r"^  (\d+) ", out.split("exit status:", 1)[1], re.M)
  assert listed == ["0", "1", "2", "3", "4", "5", "70"], out
  assert "--arch {sm_90a,sm_100a,sm_103a}" in out


# --- 1, 2: the user's source as written; jax's refusal of a statement ---------------


@pytest.mark.parametrize("command", [["check"], ["compile", "--emit", "ptx"]])
def test_a_quoted_source_line_keeps_its_keywords(kernels, capsys, command):
  status = cli.main([*command[:1], f"{kernels}:keyword_error", *command[1:]])
  err = capsys.readouterr().err
  assert status == 2, err
  assert "dict(layout='WGMMA', optimized=False, swizzle=16)" in err, err
  assert "--unoptimized" not in err and "--swizzle" not in err and "--layout" not in err
  assert _line(kernels, "keywords") in err


def test_the_cli_terms_leave_quoted_code_as_written():
  from mosaic_async_store.tools.cli_terms import in_cli_terms
  said = in_cli_terms("swizzle=16 is not supported: allowed 32. Fix: pass optimized=False "
                      "(at k.py:3: `store(x, swizzle=16, optimized=False)`)")
  assert said == ("--swizzle 16 is not supported: allowed 32. Fix: pass --unoptimized "
                  "(at k.py:3: `store(x, swizzle=16, optimized=False)`)")


def test_a_statement_jax_refuses_is_the_kernels_error_at_its_line(kernels, capsys):
  status, out, err = _check(capsys, f"{kernels}:single_barrier_indexed", "--schedules", "1")
  if compat.jax_version()[:2] < (0, 11):   # jax 0.10 indexes a single barrier
    assert status == 0, (out, err)
    return
  assert status == 2, (out, err)
  [line] = err.splitlines()
  assert "args=" not in line and line.startswith("mosaic-async-store: error: fn="), line
  assert f"fix the kernel at {_line(kernels, 'at')}" in line, line
  assert "plgpu.barrier_arrive(bar.at[0])" in line and "indices" in line, line


# --- 8: compile --emit stats shows the dynamic shared memory ------------------------


def test_stats_show_the_dynamic_shared_memory_the_kernel_is_launched_with(capsys):
  target = "docs/examples/reduce_into_cta0.py:make"
  assert cli.main(["compile", target, "--emit", "mlir"]) == 0
  smem = check_kernel.launch_shape(capsys.readouterr().out)["smem_bytes"]
  assert smem >= 64 * 64 * 4   # (the kernel's int32 tile, and its barrier)
  assert cli.main(["compile", target, "--emit", "stats"]) == 0
  assert re.search(rf"^dynamic shared memory \(bytes\)\s+{smem}$", capsys.readouterr().out,
                   re.M)
  assert cli.main(["compile", target, "--emit", "stats", "--json"]) == 0
  assert json.loads(capsys.readouterr().out)["dynamic_shared_memory"] == smem


def test_the_store_kernels_stats_show_its_dynamic_shared_memory(capsys):
  assert cli.main(["compile", "--emit", "mlir"]) == 0
  smem = check_kernel.launch_shape(capsys.readouterr().out)["smem_bytes"]
  assert cli.main(["compile", "--emit", "stats", "--json"]) == 0
  assert json.loads(capsys.readouterr().out)["dynamic_shared_memory"] == smem > 0
