"""Debug mode on the GPU: a deliberately wrong byte count is reported, not hung on."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from configs import harness_script
from mosaic_async_store.demo.config import StoreConfig


@pytest.mark.gpu
def test_wrong_byte_count_is_reported(tmp_path):
  cfg = StoreConfig()
  batch, out = tmp_path / "c.json", tmp_path / "r.jsonl"
  batch.write_text(json.dumps([dataclasses.asdict(cfg)]))
  proc = subprocess.run([sys.executable, harness_script("gpu_run"),
                         "--batch", str(batch), "--out", str(out), "--tx-error", "16"],
                        capture_output=True, text=True,
                        timeout=int(os.environ.get("MAS_DEBUG_TIMEOUT", "180")))
  [res] = [json.loads(l) for l in out.read_text().splitlines()]
  assert res["barrier_timeouts"] == 128 * cfg.cluster  # every CTA is some CTA's target
  assert not res["ok"]
  assert "did not complete phase" in proc.stdout + proc.stderr
