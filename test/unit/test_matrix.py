"""The configuration matrix: every configuration compiles or is refused cleanly.

For each StoreConfig of the matrix (test/harness/config_matrix.py, run by
bench/matrix.py: layouts x dtypes x shapes x swizzles x optimized x peer/local x
transposed x atomic), the bare store kernel is built and assembled by mlir-opt
and ptxas.  Accepted: ptxas took it and the PTX's stores move exactly
prod(shape) * bits / 8 bytes (counted from the opcodes, times the writer threads).  Refused: an AsyncStoreError that is
not an internal planner defect.  Anything else (another exception, a wrong
byte count, a crash) fails.

  pytest test/unit/test_matrix.py             # CI: a deterministic sample
  pytest -m slow test/unit/test_matrix.py -s  # the full matrix (hours on 2 cores)

``MAS_MATRIX_EVERY=N`` makes the slow test run every Nth configuration,
``MAS_MATRIX_JOBS`` sets its worker processes, ``MAS_MATRIX_JSON`` a report file.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import pathlib
import re

import pytest

import config_matrix as matrix
import mosaic_async_store as mas

SAMPLE = list(matrix.configurations(full=False))

# Known defects of other modules, matched on (config, outcome) -> reason:
# matching configurations xfail with the reason instead of failing.  Add an
# entry with its bug report; remove it when the fix lands.  (Both earlier
# entries, 4-bit SPLAT kernels and numpy#31980 in geometry, are fixed.)
KNOWN_BUGS: tuple = ()


def _known_bug(cfg, outcome) -> str | None:
  return next((why for match, why in KNOWN_BUGS if match(cfg, outcome)), None)


@functools.cache
def _outcome(cfg):
  return matrix.run_config(cfg)


def _check(cfg, outcome):
  """Asserts the matrix's contract for one configuration."""
  what = cfg.describe()
  if outcome.status == "refused":
    assert "internal planner defect" not in outcome.message, (what, outcome.message)
    assert re.search(r"is not supported|Fix:", outcome.message), (what, outcome.message)
    return
  assert outcome.status == "accepted", f"{what}: {outcome.status}: {outcome.message}"
  assert outcome.store_bytes == outcome.expected_bytes > 0, what


@pytest.mark.parametrize("cfg", SAMPLE, ids=[c.describe() for c in SAMPLE])
def test_sample_compiles_or_refuses(cfg):
  outcome = _outcome(cfg)
  if (why := _known_bug(cfg, outcome)) is not None:
    pytest.xfail(why)
  _check(cfg, outcome)


def test_sample_covers_both_outcomes_and_reports_them():
  """The sample exercises accepted and refused configurations alike."""
  outcomes = [_outcome(c) for c in SAMPLE]
  summary = matrix.summarize(SAMPLE, outcomes)
  print("\n" + matrix.format_summary(summary))
  counts = summary["counts"]
  assert counts.get("accepted", 0) >= len(SAMPLE) // 5, counts
  assert counts.get("refused", 0) >= 1, counts
  layouts = {c.layout for c, o in zip(SAMPLE, outcomes) if o.status == "accepted"}
  assert len(layouts) >= 8, layouts


def test_store_width_parsing():
  """The byte count of the check relies on these opcode widths."""
  cases = {
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32": 16,
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b32": 8,
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32": 4,
      "st.shared::cluster.u8": 1, "st.shared::cluster.u16": 2,
      "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u64": 8,
      "red.relaxed.cluster.shared::cluster.add.noftz.bf16x2": 4,
      "red.relaxed.cluster.shared::cluster.add.noftz.f16": 2,
      "red.relaxed.cluster.shared::cluster.add.f32": 4,
  }
  for opcode, width in cases.items():
    assert matrix.store_width(opcode) == width, opcode
  opcodes = {"st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32": 2,
             "mapa.shared::cluster.u32": 2, "shfl.sync.bfly.b32": 4,
             "mbarrier.arrive.expect_tx.shared::cluster.b64": 1,
             "st.global.b32": 3}
  assert matrix.ptx_store_bytes(opcodes, 64) == 64 * 32


def test_shapes_fit_layout_and_swizzle_tiles():
  for layout in ("WGMMA", "WGMMA_8BIT", "TMEM_NATIVE_V1", "TCGEN05"):
    for dtype in ("f64", "bf16", "i4"):
      for swizzle in (None, 32, 128):
        for transposed in (False, True):
          shapes = matrix.shapes_for(layout, dtype, swizzle, transposed)
          assert shapes, (layout, dtype, swizzle)
          cols = (swizzle or 0) * 8 // {"f64": 64, "bf16": 16, "i4": 4}[dtype] or 1
          for rows_, cols_ in shapes:
            assert cols_ % cols == 0 and (not transposed or rows_ % cols == 0)
            assert math.prod((rows_, cols_)) <= matrix.MAX_ELEMENTS


def _slow_selected(config) -> bool:
  expr = config.getoption("markexpr") or ""
  return "slow" in expr and "not slow" not in expr


@pytest.mark.slow
def test_full_matrix(request):
  """Every configuration of the full matrix (only with ``-m slow``)."""
  if not _slow_selected(request.config):
    pytest.skip("the full matrix runs with: pytest -m slow test/unit/test_matrix.py")
  every = int(os.environ.get("MAS_MATRIX_EVERY", "1"))
  configs = list(matrix.configurations(full=every == 1, every=every))
  jobs = int(os.environ.get("MAS_MATRIX_JOBS", os.cpu_count() or 1))
  outcomes = matrix.run_matrix(configs, jobs)
  summary = matrix.summarize(configs, outcomes)
  print("\n" + matrix.format_summary(summary))
  if path := os.environ.get("MAS_MATRIX_JSON"):
    rows = [{**dataclasses.asdict(c), **dataclasses.asdict(o)}
            for c, o in zip(configs, outcomes)]
    pathlib.Path(path).write_text(json.dumps({**summary, "outcomes": rows}, indent=1))
  failures = []
  for cfg, outcome in zip(configs, outcomes):
    if _known_bug(cfg, outcome) is None:
      try:
        _check(cfg, outcome)
      except AssertionError as e:
        failures.append(str(e)[:400])
  assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:50])


# --- plan-only mode (bench/matrix.py --plan-only; the full run is docs/matrix.md) ----


def matrix_layout(name, shape=(64, 128), dtype="bf16"):
  from mosaic_async_store.demo.config import resolve_layout
  return resolve_layout(name, shape, dtype)


def test_plan_only_accepts_verified_plans_and_names_their_plain_pieces():
  from mosaic_async_store.demo.config import StoreConfig
  plain = matrix.plan_config(StoreConfig())
  assert (plain.status, plain.plain) == ("accepted", "")
  assert plain.store_bytes == plain.expected_bytes == 64 * 128 * 2
  fadd = matrix.plan_config(StoreConfig(dtype="f32", atomic="add"))
  assert fadd.status == "accepted" and fadd.plain == "no red.async form for add on 32-bit float"
  local = matrix.plan_config(StoreConfig(dtype="i32", atomic="add", target="local"))
  assert local.plain.startswith("reduction into the executing CTA")
  gathered = matrix.plan_config(StoreConfig(dtype="i8", layout="WGMMA_ROW", shape=(64,),
                                            swizzle=None))
  assert (gathered.status, gathered.plain) == ("accepted", "")  # gathers, no plain piece
  asked = mas.plan_store(matrix_layout("WGMMA"), (64, 128), "bf16", swizzle=128,
                         plain_stores=True)
  assert matrix.plain_reason(asked).startswith("plain stores asked for")


def test_plan_only_refusals_are_grouped_by_reason_and_element_type():
  from mosaic_async_store.demo.config import StoreConfig
  out = matrix.plan_config(StoreConfig(dtype="f32", atomic="and"))
  assert out.status == "refused"
  assert matrix.refusal_key(out.message) == "atomic=and is not supported for float32"
  summary = matrix.summarize([StoreConfig()] * 2, [out, matrix.plan_config(
      StoreConfig(dtype="f32", atomic="add"))])
  assert summary["refusals"] == {"atomic=and is not supported for float32": 1}
  assert summary["plain"] == {"no red.async form for add on 32-bit float": 1}
