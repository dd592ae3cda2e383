"""Pallas on Hopper: Lane and Warpgroup kernels store into the peer CTA, exactly.

The checks (lowering/pallas_run.py) run in one subprocess that writes a JSON
line per finished check; a Pallas barrier wait has no time limit, so a store
whose bytes never arrive is caught by the subprocess timeout and fails the
checks that have no line.
"""

import json
import os
import subprocess
import sys

import pytest

from mosaic_async_store.lowering.pallas_run import PALLAS_CASES

TIMEOUT_S = int(os.environ.get("MAS_PALLAS_TIMEOUT", "90"))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  out = tmp_path_factory.mktemp("pallas") / "results.jsonl"
  try:
    subprocess.run([sys.executable, "-m", "mosaic_async_store.lowering.pallas_run",
                    "--out", str(out)], timeout=TIMEOUT_S, check=False)
  except subprocess.TimeoutExpired:
    pass  # checks without a result line fail below
  lines = out.read_text().splitlines() if out.exists() else []
  if os.environ.get("MAS_PALLAS_RESULTS"):
    with open(os.environ["MAS_PALLAS_RESULTS"], "w") as f:
      f.write("\n".join(lines) + "\n")
  return {json.loads(l)["config"]: json.loads(l) for l in lines}


@pytest.mark.gpu
@pytest.mark.parametrize("case", PALLAS_CASES, ids=lambda c: c.describe())
def test_pallas_store_lands_exactly(case, results):
  res = results.get(case.describe())
  assert res is not None, "no result: the batch hung or crashed at or before this check"
  assert res["mismatched_bytes"] == 0, res
  assert res["ok"], res
