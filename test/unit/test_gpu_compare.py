"""The comparison of a GPU's outputs with the checker's (test/harness/gpu_compare.py), on
outputs these tests make: bit for bit for exact kernels, within the stated tolerance for
floating-point ones, masked elements left out, a missing output reported; and the CPU
half of scripts/gpu_check.sh (checker_gpu.py) on one small kernel."""

import json

import ml_dtypes
import numpy as np
import pytest

import checker_gpu
import gpu_compare
from gpu_compare import EXACT, Tolerance, compare_dirs, compare_outputs


def _outputs():
  rng = np.random.default_rng(0)
  return [rng.uniform(-4, 4, (8, 16)).astype(np.float16),
          rng.integers(-2**31, 2**31, (5,), dtype=np.int64).astype(np.int32),
          rng.uniform(-1, 1, (4, 4)).astype(ml_dtypes.bfloat16)]


def _flip_bit(a, index, bit=0):
  out = a.copy()
  raw = out.view(f"u{a.dtype.itemsize}")
  raw[index] ^= raw.dtype.type(1 << bit)
  return out


def test_save_and_load_keep_every_dtype_and_mask(tmp_path):
  outs = _outputs()
  masks = [None, np.array([True, False, False, False, True]), None]
  gpu_compare.save(tmp_path / "k.npz", outs, inputs=[outs[0]], masks=masks)
  got, inputs, got_masks = gpu_compare.load(tmp_path / "k.npz")
  assert [g.dtype for g in got] == [o.dtype for o in outs]
  for g, o in zip(got + inputs, outs + [outs[0]]):
    assert g.tobytes() == o.tobytes()
  assert got_masks[0] is None and got_masks[1].tolist() == masks[1].tolist()


def test_identical_outputs_pass():
  outs = _outputs()
  c = compare_outputs("k", outs, [o.copy() for o in outs], EXACT)
  assert c.ok and c.mismatched == 0 and c.compared == 8 * 16 + 5 + 16


@pytest.mark.parametrize("which, index", [(0, (3, 7)), (1, (2,)), (2, (1, 1))])
def test_one_flipped_bit_fails_an_exact_kernel(which, index):
  outs = _outputs()
  got = [o.copy() for o in outs]
  got[which] = _flip_bit(outs[which], index)
  c = compare_outputs("k", outs, got, EXACT)
  assert not c.ok and c.mismatched == 1
  assert f"output {which}: 1 differ, first at {list(index)}" in c.detail


def test_exact_means_bits_not_values():
  want = [np.array([0.0, np.nan], np.float32)]
  assert not compare_outputs("k", want, [np.array([-0.0, np.nan], np.float32)], EXACT).ok
  assert compare_outputs("k", want, [want[0].copy()], EXACT).ok


def test_tolerance_is_respected_for_float_kernels():
  tol = Tolerance(rtol=2e-3, atol=1e-3)
  want = [np.array([1.0, 100.0, 0.0, np.nan, np.inf], np.float32)]
  inside = [np.array([1.0015, 100.15, 0.0009, np.nan, np.inf], np.float32)]
  assert compare_outputs("k", want, inside, tol).ok
  # one ulp of f16 at 1.0 (2^-10) is within; the same kernel is not exact
  assert not compare_outputs("k", want, inside, EXACT).ok
  for i, value in enumerate([1.0035, 100.35, 0.0011, 0.0, -np.inf]):
    outside = [inside[0].copy()]
    outside[0][i] = value
    c = compare_outputs("k", want, outside, tol)
    assert not c.ok and c.mismatched == 1, (i, c)


def test_masked_elements_are_not_compared():
  want = [np.arange(6, dtype=np.int32)]
  got = [np.array([0, 1, 2, 99, 4, 99], np.int32)]
  mask = np.array([False, False, False, True, False, True])
  c = compare_outputs("k", want, got, EXACT, [mask])
  assert c.ok and c.compared == 4
  assert not compare_outputs("k", want, got, EXACT, [mask & (np.arange(6) == 5)]).ok


def test_a_missing_or_misshapen_output_is_reported():
  outs = _outputs()
  assert compare_outputs("k", outs, None).detail == "no GPU output"
  assert "2 outputs, the checker's has 3" in compare_outputs("k", outs, outs[:2]).detail
  c = compare_outputs("k", outs[:1], [outs[0].astype(np.float32)])
  assert not c.ok and "float32[8, 16], the checker's float16[8, 16]" in c.detail


def test_folders_report_every_kernel(tmp_path):
  check, gpu = tmp_path / "check", tmp_path / "gpu"
  check.mkdir(), gpu.mkdir()
  outs = _outputs()
  for name in ("same", "flipped", "missing"):
    gpu_compare.save(check / f"{name}.npz", outs)
  gpu_compare.save(gpu / "same.npz", outs)
  gpu_compare.save(gpu / "flipped.npz", [outs[0], _flip_bit(outs[1], (0,), 31), outs[2]])
  manifest = {n: {"file": f"{n}.npz"} for n in ("same", "flipped", "missing")}
  manifest["refused"] = {"file": "refused.npz", "error": "AssertionError: race"}
  gpu_compare.write_manifest(check, manifest)
  rows = {r.kernel: r for r in compare_dirs(check, gpu)}
  assert rows["same"].ok
  assert not rows["flipped"].ok and rows["flipped"].mismatched == 1
  assert rows["missing"].detail == "no GPU output"
  assert rows["refused"].detail == "no check output: AssertionError: race"
  assert gpu_compare.main([str(check), str(gpu), "--json", str(tmp_path / "c.json")]) == 1
  assert len(json.loads((tmp_path / "c.json").read_text())) == 4


def test_the_issues_kernels_are_cases():
  names = {c.name for c in checker_gpu.cases()}
  for kernel in ("hopper_matmul", "realistic_matmul", "flash_attention",
                 "warp_specialized_copy", "mixed_type_matmul", "tma_round_trip_lane",
                 "wgmma_matmul"):
    assert f"harness:{kernel}" in names
  assert any(n.startswith("upstream:") for n in names)
  assert any(n.startswith("demo:") for n in names)
  runnable, not_runnable = checker_gpu.broken_cases()
  broken = {b.name for b in runnable}
  for pair in ("smem_read_before_barrier_wait", "tensor_store_without_proxy_fence",
               "store_source_overwritten_before_wait_read"):
    assert f"pair:{pair}" in broken
  assert "slot_refilled_early:realistic_matmul[delay_release=0]" in broken
  assert all("PTX edit" in why for why in not_runnable.values())


def test_cpu_half_writes_what_the_gpu_half_reads(tmp_path):
  """check's outputs of one kernel, written and read back; a copy of them passes, a
  flipped bit in the copy fails."""
  assert checker_gpu.main(["cpu", "--out", str(tmp_path / "check"),
                           "--kernels", "harness:tma_round_trip_lane"]) == 0
  manifest = gpu_compare.read_manifest(tmp_path / "check")
  [(name, entry)] = manifest.items()
  outs, inputs, _ = gpu_compare.load(tmp_path / "check" / entry["file"])
  assert outs[0].tobytes() == (inputs[0] + np.float16(1)).tobytes()
  (tmp_path / "gpu").mkdir()
  gpu_compare.save(tmp_path / "gpu" / entry["file"], outs)
  assert [r.ok for r in compare_dirs(tmp_path / "check", tmp_path / "gpu")] == [True]
  gpu_compare.save(tmp_path / "gpu" / entry["file"], [_flip_bit(outs[0], (0, 0))])
  assert [r.ok for r in compare_dirs(tmp_path / "check", tmp_path / "gpu")] == [False]


def test_the_slot_refilled_too_early_is_reported_in_every_schedule():
  """The broken kernel gpu_check.sh runs for "a slot refilled too early": the realistic
  matmul with ``delay_release=0`` (its pipeline's next TMA load overwrites the slot the
  WGMMA left in flight by ``wgmma_wait(1)`` reads) is a race in every CI schedule."""
  import tma_kernels
  from mosaic_async_store.check import check
  from mosaic_async_store.check.memory import SCHEDULES
  fn, args = tma_kernels.realistic_matmul(delay_release=0)
  report = check(fn, *args, schedules=len(SCHEDULES))
  assert {f.schedule for f in report.findings if f.rule == "race"} == set(range(len(SCHEDULES)))
  assert {f.rule for f in report.findings} == {"race"}


@pytest.fixture(scope="module")
def check_dir(tmp_path_factory):
  """check's outputs of two small kernels (the CPU half)."""
  out = tmp_path_factory.mktemp("check")
  assert checker_gpu.main(["cpu", "--out", str(out), "--kernels", "harness:tma_round_trip_*"]) == 0
  return out


def test_gpu_half_writes_what_the_comparison_reads_and_resumes(check_dir, tmp_path, monkeypatch):
  """The GPU half's bookkeeping, with a GPU that returns check's outputs (lane) or a bit
  off (warpgroup): each kernel's outputs written, a "started" line without a result
  (the process died in that kernel) reported on --resume and not run again."""
  manifest = gpu_compare.read_manifest(check_dir)
  ran = []

  def fake_gpu(case, args):
    ran.append(case.name)
    outs = gpu_compare.load(check_dir / manifest[case.name]["file"])[0]
    return [_flip_bit(outs[0], (5, 5))] if case.name.endswith("warpgroup") else outs

  monkeypatch.setattr(checker_gpu, "gpu_outputs", fake_gpu)
  results, gpu = tmp_path / "r.jsonl", tmp_path / "gpu"
  assert checker_gpu.run_gpu(check_dir, gpu, results, resume=False) == 0
  rows = {r.kernel: r for r in compare_dirs(check_dir, gpu)}
  assert rows["harness:tma_round_trip_lane"].ok
  assert not rows["harness:tma_round_trip_warpgroup"].ok
  assert rows["harness:tma_round_trip_warpgroup"].mismatched == 1
  results.write_text(json.dumps({"kernel": "harness:tma_round_trip_lane", "status": "started"})
                     + "\n")
  ran.clear()
  assert checker_gpu.run_gpu(check_dir, gpu, results, resume=True) == 0
  assert ran == ["harness:tma_round_trip_warpgroup"]
  lines = [json.loads(l) for l in results.read_text().splitlines()]
  assert {"kernel": "harness:tma_round_trip_lane", "ok": False,
          "detail": "hung or crashed the process"} in lines


def test_broken_runs_count_the_runs_that_differ(tmp_path, monkeypatch):
  """``broken``: the correct kernel's outputs are the reference; a run whose outputs
  differ from them by a bit is counted."""
  import broken_tma_kernels as btk
  _, args, (want,) = btk.read_after_wait(False)
  calls = []

  def fake_run(fn, args):
    calls.append(fn)
    return [_flip_bit(want, (7,))] if len(calls) % 3 == 0 else [want.copy()]

  monkeypatch.setattr(checker_gpu, "_run", fake_run)
  results = tmp_path / "b.jsonl"
  assert checker_gpu.run_broken(6, results, ["pair:smem_read_before_barrier_wait"]) == 0
  rows = {r["kernel"]: r for r in map(json.loads, results.read_text().splitlines())}
  row = rows["pair:smem_read_before_barrier_wait"]
  assert len(calls) == 7   # the reference once, the broken kernel six times
  assert row["differing_runs"] == 2 and row["max_mismatched"] == 1
  assert row["reference_as_expected"] and row["compared"] == want.size
  assert rows["pair:expect_tx_short_by_16"]["ok"] is None   # a PTX edit: not run
