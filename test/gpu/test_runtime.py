"""Runtime checks on Hopper: random data, poisoned SMEM, exact comparison with NumPy.

All configurations run in one subprocess (kernels compile once each) that
writes a JSON line per finished configuration; a barrier that never completes
makes the kernel's bounded wait give up (flag), and a hang or crash is caught
by the subprocess timeout, failing the configurations that have no line.
"""

import dataclasses
import json
import os
import pathlib

import pytest

from configs import RUNTIME_CONFIGS, run_batch

TIMEOUT_S = int(os.environ.get("MAS_GPU_TIMEOUT", "360"))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("gpu")
  batch = tmp / "configs.json"
  # Written line by line by the subprocess itself (MAS_GPU_RESULTS: straight into
  # gpu_check.sh's $OUT), so whatever finished survives an outer timeout.
  out = pathlib.Path(os.environ.get("MAS_GPU_RESULTS") or tmp / "results.jsonl")
  batch.write_text(json.dumps([dataclasses.asdict(c) for c in RUNTIME_CONFIGS]))
  return run_batch(["gpu_run", "--batch", str(batch)], out,
                   TIMEOUT_S)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", RUNTIME_CONFIGS, ids=lambda c: c.describe())
def test_store_lands_exactly(cfg, results):
  res = results.get(cfg.describe())
  assert res is not None, "no result: the batch hung or crashed at or before this config"
  assert res["barrier_timeouts"] == 0, f"barrier never completed: {res}"
  assert res["mismatched_bytes"] == 0, res["detail"]
  assert res["ok"], res
