"""Pallas on Hopper: Lane and Warpgroup kernels store into the peer CTA, exactly.

The checks (test/harness/pallas_run.py) run in one subprocess that writes a JSON
line per finished check; a Pallas barrier wait has no time limit, so a store
whose bytes never arrive is caught by the subprocess timeout and fails the
checks that have no line.
"""

import os
import pathlib

import pytest

from pallas_run import PALLAS_CASES

from configs import run_batch

TIMEOUT_S = int(os.environ.get("MAS_PALLAS_TIMEOUT", "90"))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  # Written line by line by the subprocess (MAS_PALLAS_RESULTS: straight into
  # gpu_check.sh's $OUT), so whatever finished survives an outer timeout.
  out = pathlib.Path(os.environ.get("MAS_PALLAS_RESULTS")
                     or tmp_path_factory.mktemp("pallas") / "results.jsonl")
  return run_batch(["pallas_run"], out, TIMEOUT_S)


@pytest.mark.gpu
@pytest.mark.parametrize("case", PALLAS_CASES, ids=lambda c: c.describe())
def test_pallas_store_lands_exactly(case, results):
  res = results.get(case.describe())
  assert res is not None, "no result: the batch hung or crashed at or before this check"
  assert res["mismatched_bytes"] == 0, res
  assert res["ok"], res
