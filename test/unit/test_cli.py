"""Tests of the ``mosaic-async-store`` command line.

Most run ``cli.main([...])`` in-process (fast, capsys); two go through the
installed console script to prove the entry point and the real process's
stderr.  Each compile costs about a second, so the compiled outputs are shared
by module-scoped fixtures.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import types

import numpy as np
import pytest

from mosaic_async_store.tools import cli, toolchain
from mosaic_async_store.demo.config import StoreConfig, resolve_layout
from mosaic_async_store.plan.planner import plan_store

ST_ASYNC = "st.async.shared::cluster.mbarrier::complete_tx::bytes"
ERROR_PREFIX = "mosaic-async-store: error: "


def _run(argv) -> tuple[int, str]:
  """main(argv) with stdout captured (usable from module-scoped fixtures)."""
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    status = cli.main(argv)
  return status, out.getvalue()


def _script() -> pathlib.Path:
  script = pathlib.Path(sys.executable).with_name("mosaic-async-store")
  assert script.exists(), f"console script not installed next to {sys.executable}"
  return script


def _env() -> dict[str, str]:
  # No JAX_PLATFORMS: the CLI must find out by itself that there is no GPU.
  return {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}


@pytest.fixture(scope="module")
def demo_output() -> str:
  status, out = _run(["demo"])
  assert status == 0
  return out


@pytest.fixture(scope="module")
def stats_json() -> dict:
  status, out = _run(["compile", "--emit", "stats", "--json"])
  assert status == 0
  return json.loads(out)


@pytest.fixture(scope="module")
def ptx() -> str:
  status, out = _run(["compile", "--dtype", "bfloat16", "--emit", "ptx"])
  assert status == 0
  return out


# --- demo ---------------------------------------------------------------------


def test_demo_prints_plan_summary_and_verification(demo_output):
  cfg = StoreConfig()
  plan = plan_store(resolve_layout(cfg.layout, cfg.shape, cfg.dtype), cfg.shape,
                    cfg.dtype, swizzle=cfg.swizzle)
  # The demo's plan names its kernel's target (the cluster index it stores to).
  shown = plan.summary().replace("target=peer ", "target=peer (cluster x, index (own + 1) % 2) ")
  assert shown in demo_output
  report = plan.verify()
  assert f"bank conflicts {report.bank_conflicts}" in demo_output
  assert f"{plan.total_bytes} bytes" in demo_output


def test_demo_prints_store_instructions(demo_output, stats_json):
  n = stats_json["stores"][f"{ST_ASYNC}.b32"]
  assert re.search(rf"^\s+{n} x {re.escape(ST_ASYNC)}\.b32$", demo_output, re.M)
  # At least one verbatim st.async line with its operands.
  assert re.search(rf"^\s+{re.escape(ST_ASYNC)}\S* \[%r\d+.*\], .*\[%r\d+\];$",
                   demo_output, re.M)
  assert "mapa.shared::cluster.u32" in demo_output
  assert "mbarrier.arrive.expect_tx" in demo_output


def test_demo_ptxas_report_matches_compile_stats(demo_output, stats_json):
  # The demo and `compile` (defaults) compile the same store-only kernel.
  assert f"registers {stats_json['registers']}," in demo_output
  assert f"spill stores {stats_json['spill_stores']} bytes" in demo_output
  assert f"STAS x{stats_json['sass_opcodes']['STAS']}" in demo_output
  assert f"store span {stats_json['sass_store_span']} of" in demo_output


def test_demo_through_console_script_skips_runtime_check_without_gpu():
  proc = subprocess.run([str(_script()), "demo"], capture_output=True, text=True,
                        env=_env(), timeout=300)
  assert proc.returncode == 0, proc.stderr
  assert ST_ASYNC in proc.stdout and "registers " in proc.stdout
  assert "no GPU here: runtime check skipped (see docs/gpu.md)" in proc.stdout
  assert "Traceback" not in proc.stderr


def _fake_check(monkeypatch, ok: bool, sm90: bool = True):
  """demo.check as on a GPU machine: an sm_90 GPU (or not) and a run that passes or not."""
  from mosaic_async_store.demo import check
  monkeypatch.setattr(check, "has_sm90_gpu", lambda: sm90)
  monkeypatch.setattr(check, "check_plain_store", lambda cfg: check.CheckResult(
      cfg.describe(), ok, 0 if ok else 3, 0, 0.5, "" if ok else "first mismatches at bytes [0]"))


def test_runtime_check_runs_the_demo_check_when_a_gpu_is_visible(monkeypatch):
  import jax
  gpu = types.SimpleNamespace(device_kind="NVIDIA H100")
  monkeypatch.setattr(jax, "devices", lambda backend=None: [gpu])
  _fake_check(monkeypatch, ok=True)
  passed, what = cli._runtime_check(StoreConfig())
  assert passed and what.startswith("NVIDIA H100: OK")
  _fake_check(monkeypatch, ok=False)
  passed, what = cli._runtime_check(StoreConfig())
  assert not passed and "FAILED (3 mismatched bytes" in what
  assert "first mismatches at bytes [0]" in what
  _fake_check(monkeypatch, ok=True, sm90=False)
  assert "not an sm_90 GPU" in cli._runtime_check(StoreConfig())[1]


def test_demo_check_refuses_reductions_and_its_reference_is_the_executor():
  """check_plain_store compares with execute_config; a reduction needs valid operands
  (test/harness/gpu_run.py), so the demo's check refuses it by name."""
  from mosaic_async_store.demo import check
  with pytest.raises(ValueError, match="checks plain stores"):
    check.check_plain_store(StoreConfig(dtype="int32", atomic="add"))


@pytest.mark.parametrize("stray", [False, True])
def test_demo_check_compares_every_byte(monkeypatch, stray):
  """With the GPU run replaced by the CPU executor, the check passes; one flipped
  byte fails it and is reported."""
  from mosaic_async_store.demo import check

  def run_on_cpu(cfg, src, init, **kwargs):
    out = check.execute_config(cfg, src, init)
    if stray:
      out = out.copy()
      out[-1] ^= 0xFF
    return out, np.ones(128 * cfg.cluster, np.int32)

  monkeypatch.setattr(check, "run_kernel", run_on_cpu)
  res = check.check_plain_store(StoreConfig(shape=(64, 136), swizzle=None))
  assert res.ok is not stray and res.mismatched_bytes == int(stray)
  assert ("first mismatches" in res.detail) is stray


# --- compile ------------------------------------------------------------------


def test_compile_ptx_is_sm90a_with_st_async_and_ptxas_accepts_it(ptx):
  assert ".target sm_90a" in ptx
  assert re.search(rf"^\s*{re.escape(ST_ASYNC)}\.b32 \[%r\d+", ptx, re.M)
  cubin, report = toolchain.ptx_to_cubin(ptx, "sm_90a")
  assert cubin and "Used" in report


def test_compile_stats_json(stats_json):
  assert stats_json["registers"] > 0
  assert stats_json["config"]["dtype"] == "bfloat16"
  assert stats_json["config"]["shape"] == [64, 128]
  assert stats_json["kernel"] == "store-only"
  assert sum(stats_json["st_async_by_width"].values()) == sum(
      n for op, n in stats_json["stores"].items() if op.startswith("st.async"))


def test_compile_stats_table_and_output_file(tmp_path, capsys):
  target = tmp_path / "stats.txt"
  assert cli.main(["compile", "--shape", "64,128", "--emit", "stats",
                   "--output", str(target)]) == 0
  assert capsys.readouterr().out == ""
  table = target.read_text()
  assert re.search(r"^registers\s+\d+$", table, re.M)
  assert re.search(r"^SASS STAS\s+\d+$", table, re.M)


def test_compile_mlir_and_plan_need_no_compiler(capsys, monkeypatch):
  monkeypatch.setenv("MAS_MLIR_OPT", "/nonexistent/mlir-opt")
  toolchain.find_tool.cache_clear()
  try:
    assert cli.main(["compile", "--layout", "wgmma", "--emit", "mlir"]) == 0
    assert "st.async" in capsys.readouterr().out
    assert cli.main(["compile", "--swizzle", "none", "--emit", "plan"]) == 0
    assert "bank conflicts 0" in capsys.readouterr().out
  finally:
    toolchain.find_tool.cache_clear()


def test_missing_tool_exits_3_with_one_line(capsys, monkeypatch):
  monkeypatch.setenv("MAS_PTXAS", "/nonexistent/ptxas")
  toolchain.find_tool.cache_clear()
  try:
    assert cli.main(["compile", "--emit", "sass"]) == 3
  finally:
    toolchain.find_tool.cache_clear()
  err = capsys.readouterr().err
  assert err.startswith(ERROR_PREFIX) and "MAS_PTXAS" in err
  assert len(err.splitlines()) == 1


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"],
                                  ["compile", "--help"], ["--version"]])
def test_help_and_version(argv, capsys):
  assert cli.main(argv) == 0
  out = capsys.readouterr().out
  assert out.startswith("usage: mosaic-async-store") or out.startswith(
      "mosaic-async-store 0.")


# --- misuse: status 2, one line on stderr, no traceback -----------------------

MISUSE = {
    "unknown dtype": ["compile", "--dtype", "float128"],
    "malformed shape": ["compile", "--shape", "64by128"],
    "zero dim": ["compile", "--shape", "64x0"],
    "bad swizzle": ["compile", "--swizzle", "48"],
    "unknown emit kind": ["compile", "--emit", "cubin"],
    "unknown subcommand": ["frobnicate"],
    "no subcommand": [],
    "unknown layout": ["compile", "--layout", "WGMMA_9BIT"],
    "unknown atomic": ["compile", "--atomic", "mul"],
    "bad cluster": ["compile", "--cluster", "two"],
    "peer needs a cluster": ["compile", "--cluster", "1"],
    "float atomic min": ["compile", "--dtype", "f32", "--atomic", "min"],
    "tile does not divide": ["compile", "--shape", "64x100"],
    "json without stats": ["compile", "--emit", "ptx", "--json"],
    "unknown flag": ["demo", "--fast"],
    "upstream refusal": ["compile", "--dtype", "int8", "--impl", "upstream",
                         "--emit", "mlir"],
    "arch without suffix": ["compile", "--arch", "sm_100"],
    "tcgen05 on Hopper": ["compile", "--arrival", "tensor_core"],
    "elected upstream": ["compile", "--arrival", "warpgroup", "--impl", "upstream"],
    "ref shape of another array": ["compile", "--ref-shape", "64x64", "--emit", "plan"],
    "ref shape with a zero": ["compile", "--ref-shape", "8x0x8x64"],
    "ref shape too deep": ["compile", "--ref-shape", "1x2x3x4x5", "--emit", "plan"],
    "plain ref shape, swizzled": ["compile", "--ref-shape", "64x128", "--emit", "plan"],
    "ref shape of a transposed view": ["compile", "--ref-shape", "8x2x8x64", "--transposed",
                                       "--emit", "plan"],
    "3-D shape vs tile": ["compile", "--shape", "2x4x128", "--layout", "STRIDED",
                          "--emit", "plan"],
}


@pytest.mark.parametrize("argv", MISUSE.values(), ids=MISUSE.keys())
def test_misuse_exits_2_with_one_line(argv, capsys):
  assert cli.main(argv) == 2
  captured = capsys.readouterr()
  assert captured.out == ""
  lines = captured.err.splitlines()
  assert len(lines) == 1, captured.err
  assert lines[0].startswith(ERROR_PREFIX) and "Traceback" not in captured.err


# Python spellings that have a flag, or no CLI counterpart: never in the CLI's messages.
_PYTHON_ONLY = re.compile(r"\b(optimized|atomic|swizzle|dtype|layout|arrival|cluster|offset_rows|"
                          r"transposed|ref|tiling_rank)=|\bref_shape\b|\bshape=\(|plgpu\.")


@pytest.mark.parametrize("argv", MISUSE.values(), ids=MISUSE.keys())
def test_misuse_messages_are_in_the_clis_terms(argv, capsys):
  cli.main(argv)
  err = capsys.readouterr().err
  if "upstream store_tiled_async refused" in err:   # upstream's words, about a named config
    return
  assert not _PYTHON_ONLY.search(err), err


def test_int4_on_the_defaults_says_which_flag_to_change_and_the_fix_works(capsys):
  assert cli.main(["compile", "--dtype", "int4", "--emit", "plan"]) == 2
  err = capsys.readouterr().err
  assert "--shape 64x128 is not supported" in err and "Fix: pass --shape 64x256" in err
  assert "--swizzle" in err and not _PYTHON_ONLY.search(err)
  assert cli.main(["compile", "--dtype", "int4", "--shape", "64x256", "--emit", "plan"]) == 0
  assert "verified" in capsys.readouterr().out


def _plan_summary(argv) -> str:
  status, out = _run(["compile", "--emit", "plan", *argv])
  assert status == 0, argv
  return out


def test_ref_shape_plans_the_store_into_that_ref():
  """--ref-shape is plan_store's ref_shape: (16, 64) tiles instead of the canonical
  (8, 64) ones of a 128-byte swizzle; the canonical ref spelled out is the default."""
  cfg = StoreConfig()
  plan = plan_store(resolve_layout(cfg.layout, cfg.shape, cfg.dtype), cfg.shape, cfg.dtype,
                    swizzle=128, ref_shape=(4, 2, 16, 64))
  out = _plan_summary(["--ref-shape", "4x2x16x64"])
  assert "ref_shape=(4, 2, 16, 64)" in out and f"{plan.total_bytes} bytes" in out
  assert _plan_summary(["--ref-shape", "8x2x8x64"]) == _plan_summary([])


_3D = ["--shape", "2x4x128", "--layout", "STRIDED"]


@pytest.mark.parametrize("argv, fix, fixed", [
    # the library's "pass ref_shape": a tile over more of the array's dims
    (_3D, r"--ref-shape (\S+)$", lambda ref: [*_3D, "--ref-shape", ref]),
    # the library's "allocate the ref with a (8, 64) tile"
    (["--ref-shape", "64x128"], r"pass a --ref-shape in (\d+)x(\d+) tiles",
     lambda r, c: ["--ref-shape", f"{64 // int(r)}x{128 // int(c)}x{r}x{c}"]),
])
def test_ref_shape_fixes_name_the_flag_and_work(argv, fix, fixed, capsys):
  """The fix the refusal names plans, and compiles to PTX whose full kernel stores the
  right bytes into that ref (run in the PTX checker)."""
  from demo_kernels import run_ptx   # test/harness
  from mosaic_async_store.tools.cli_config import config_from_args
  assert cli.main(["compile", "--emit", "plan", *argv]) == 2
  err = capsys.readouterr().err.strip()
  assert not _PYTHON_ONLY.search(err), err
  argv = fixed(*re.search(fix, err).groups())
  assert "verified" in _plan_summary(argv)
  status, ptx = _run(["compile", "--emit", "ptx", "--full", *argv])
  assert status == 0 and ST_ASYNC in ptx
  cfg = config_from_args(cli.build_parser().parse_args(["compile", *argv]))
  assert cfg.ref_shape is not None
  out, flags, want, _ = run_ptx(cfg, ptx)
  assert np.array_equal(out, want) and (flags == 1).all()


def test_ref_shape_is_the_compiled_kernels_smem_ref():
  """Every --emit kind builds the kernel with the SMEM ref of --ref-shape: (16, 64) tiles
  give another allocation and other store addresses than the canonical (8, 64) ones, and
  the stats count the stores of that ref's plan."""
  ref = ["--ref-shape", "4x2x16x64"]
  status, mlir = _run(["compile", "--emit", "mlir", *ref])
  assert status == 0 and "memref<4x2x16x64xbf16" in mlir and "memref<8x2x8x64xbf16" not in mlir
  for emit in ("ptx", "sass"):
    status, text = _run(["compile", "--emit", emit, *ref])
    assert status == 0 and text != _run(["compile", "--emit", emit])[1], emit
  status, out = _run(["compile", "--emit", "stats", "--json", *ref])
  stats = json.loads(out)
  plan = plan_store(resolve_layout("WGMMA", (64, 128), "bfloat16"), (64, 128), "bfloat16",
                    swizzle=128, ref_shape=(4, 2, 16, 64))
  widths = {}
  for ins in plan.instructions:
    widths[str(ins.width)] = widths.get(str(ins.width), 0) + 1
  assert status == 0 and stats["config"]["ref_shape"] == [4, 2, 16, 64]
  assert stats["st_async_by_width"] == widths


def test_negative_ref_shape_reaches_the_shape_check(capsys):
  assert cli.main(["compile", "--ref-shape", "-8x2x8x64"]) == 2
  err = capsys.readouterr().err
  assert "malformed shape '-8x2x8x64'" in err and "expected one argument" not in err


@pytest.mark.parametrize("library, cli_text", [
    ("Fix: pass optimized=False, or give the ref a layout", "Fix: pass --unoptimized, or"),
    ("atomic=add is not supported: allowed ... or store without atomic=",
     "--atomic add is not supported: allowed ... or drop --atomic"),
    ("swizzle=16 is not supported: allowed 32, 64, 128.", "--swizzle 16 is not supported"),
    ("dtype='float128' is not supported", "--dtype float128 is not supported"),
    ("ref_shape=(1, 2, 3) is not supported", "--ref-shape 1x2x3 is not supported"),
    ("ref=shape (64, 64) is not supported", "--ref-shape 64x64 is not supported"),
    ("Fix: pad the array, or pass ref_shape", "or pass a --ref-shape whose tile divides it"),
])
def test_library_spellings_become_flags(library, cli_text):
  from mosaic_async_store.tools.cli_terms import in_cli_terms
  assert cli_text in in_cli_terms(library)


@pytest.mark.parametrize("arch", toolchain.ARCHS)
def test_compile_sass_for_every_arch(arch):
  """`compile --arch A --emit sass` for every target, and the stats that name it."""
  status, sass = _run(["compile", "--arch", arch, "--emit", "sass"])
  assert status == 0
  assert f"code for {arch}" in sass and len(re.findall(r"\bSTAS\b", sass)) == 32
  status, out = _run(["compile", "--arch", arch, "--emit", "stats", "--json"])
  assert status == 0 and json.loads(out)["arch"] == arch


def test_tensor_core_arrival_on_blackwell(capsys):
  status, ptx = _run(["compile", "--arrival", "tensor_core", "--arch", "sm_100a",
                      "--emit", "ptx"])
  assert status == 0 and ".target sm_100a" in ptx
  assert ptx.count("tcgen05.fence::before_thread_sync;") == 1
  assert len(re.findall(r"mbarrier\.arrive\.expect_tx", ptx)) == 1
  assert cli.main(["compile", "--arrival", "tensor_core"]) == 2
  assert "--arch sm_100a" in capsys.readouterr().err


def test_negative_shape_reaches_the_shape_check(capsys):
  # argparse alone would read "-64x128" as an option ("expected one argument").
  assert cli.main(["compile", "--shape", "-64x128"]) == 2
  err = capsys.readouterr().err
  assert "malformed shape '-64x128'" in err and "expected one argument" not in err


def test_misuse_through_console_script_prints_one_line():
  # A refusal found after jax has started: its logging must not reach stderr.
  proc = subprocess.run([str(_script()), "compile", "--dtype", "f32", "--atomic", "inc"],
                        capture_output=True, text=True, env=_env(), timeout=300)
  assert proc.returncode == 2
  assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(ERROR_PREFIX)
  assert "--atomic inc" in proc.stderr


_USER_KERNEL = '''
import pallas_run

def make():
  case = pallas_run.PallasCase("int32", "lane", atomic="add", shape=(64, 64), cta0=True)
  kernel, _ = pallas_run.roundtrip_kernel(case)
  return kernel, pallas_run.make_inputs(case)

def broken():   # the cluster barrier before the peer reduces, left out
  pallas_run._cluster_sync = lambda: None
  return make()

def not_a_pair():
  return 3
'''


@pytest.fixture
def user_kernel(tmp_path, monkeypatch):
  import pallas_run
  monkeypatch.setattr(pallas_run, "_cluster_sync", pallas_run._cluster_sync)  # restored
  path = tmp_path / "reduce_kernel.py"
  path.write_text(_USER_KERNEL)
  return path


def test_check_command_exit_status_and_json(user_kernel, capsys):
  assert cli.main(["check", f"{user_kernel}:make", "--schedules", "1"]) == 0
  assert "ok: no rule broken in schedules [0]" in capsys.readouterr().out
  assert cli.main(["check", f"{user_kernel}:broken", "--json"]) == 1
  report = json.loads(capsys.readouterr().out)
  assert not report["ok"] and {f["schedule"] for f in report["findings"]} == {0, 1, 2}
  assert all(f["ptx_line"] and f["cta"] is not None for f in report["findings"])


@pytest.mark.parametrize("target, words", [
    ("{path}:nope", "has no function 'nope'"), ("{path}", "expected FILE.py:FUNCTION"),
    ("missing.py:make", "no such file"), ("{path}:not_a_pair", "must return (kernel, ")])
def test_check_command_usage_errors_exit_2_with_one_line(user_kernel, capsys, target, words):
  assert cli.main(["check", target.format(path=user_kernel)]) == 2
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 1 and words in err[0]


def test_check_command_budget_flags_exit_4_and_json(user_kernel, capsys):
  """A schedule stopped at --max-steps is unfinished, not a finding and not a pass."""
  assert cli.main(["check", f"{user_kernel}:make", "--schedules", "2", "--max-steps", "500"]) == 4
  out = capsys.readouterr().out
  assert "2 schedule(s) of [0, 1] unfinished" in out and "over --max-steps 500" in out
  assert "max_steps=" not in out   # in the CLI's terms
  assert cli.main(["check", f"{user_kernel}:make", "--schedules", "1", "--max-steps", "500",
                   "--json"]) == 4
  report = json.loads(capsys.readouterr().out)
  assert not report["ok"] and report["findings"] == []
  assert [(u["schedule"], u["reason"]) for u in report["unfinished"]] == [(0, "steps")]
  assert report["unfinished"][0]["executed"] > 500


@pytest.mark.parametrize("flag", ["--max-steps", "--max-memory-mb"])
def test_check_command_refuses_a_budget_below_one(user_kernel, capsys, flag):
  assert cli.main(["check", f"{user_kernel}:make", flag, "0"]) == 2
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 1 and f"{flag} 0: must be >= 1" in err[0]


def test_check_command_reports_an_internal_error_as_such(user_kernel, capsys, monkeypatch):
  """The checker's own exception is exit 70 with one line naming the PTX line, never a
  finding about the kernel (exit 1)."""
  from mosaic_async_store.check import run
  def broken_resolve(k):
    raise KeyError("injected")
  monkeypatch.setattr(run, "_resolve", broken_resolve)
  assert cli.main(["check", f"{user_kernel}:make", "--schedules", "1"]) == 70
  captured = capsys.readouterr()
  err = captured.err.splitlines()
  assert len(err) == 1 and "internal error of the checker" in err[0] and "injected" in err[0]
  assert "finding" not in captured.out
