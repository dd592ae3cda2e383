"""Broken TMA / bulk-copy / async-proxy kernels next to their correct neighbours, and
jax's interpret-mode race-detection cases (test/harness/broken_tma_kernels.py).

Two kinds of test:

* the PTX shows each defect (runs now): every kernel lowers on the CPU, and each broken
  kernel's PTX differs from its neighbour's by exactly the defect it claims;
* the checker's verdicts: the correct kernels pass with their expected outputs, the
  broken ones are reported under their rule in every CI schedule, the race-detection
  cases get upstream's verdict (a case the checker does not get right yet would be named
  in ``KNOWN_GAPS``, strictly xfailed; none is).
"""

import functools
import dataclasses
import re

import numpy as np
import pytest

import broken_tma_kernels as btk
from mosaic_async_store.check.memory import CI_SCHEDULES

SCHEDULES = max(CI_SCHEDULES) + 1         # check() runs seeds 0 .. SCHEDULES - 1
# The rules a race-detection case's race may be reported under.
# (exit-async-read: a warning, the CTA's own bulk store unread at its exit; upstream's
# interpret mode asserts an error there, jax's Blackwell matmul relies on it: strict
# makes it the error, test_the_race_case_gets_upstreams_verdict checks)
RACE_RULES = {"race", "early-read", "proxy-fence", "exit", "exit-async-read"}
_TMA = re.compile(r"cp\.async\.bulk|prefetch\.tensormap")


def _lines(ptx):
  """The PTX's instructions, stripped, without line info or comments."""
  return [s for line in ptx.splitlines()
          if (s := line.strip()) and not s.startswith((".loc", "//"))]


@functools.cache
def _ptx(name):
  """(correct PTX, broken PTX) of the pair ``name``."""
  pair = btk.PAIRS[name]
  correct = btk.lower(pair.correct)[1]
  if isinstance(pair.broken, btk.PtxEdit):
    return correct, pair.broken(correct)
  return correct, btk.lower(pair.broken)[1]


def _index(lines, pattern, start=0):
  """The first line at or after ``start`` that matches ``pattern``."""
  return next(i for i in range(start, len(lines)) if re.search(pattern, lines[i]))


def _before_store_copy(ptx, copy):
  """The instructions between the last generic SMEM store before the first ``copy``
  (a store from SMEM to global memory) and that copy."""
  lines = _lines(ptx)
  end = _index(lines, copy)
  start = max(i for i in range(end) if re.match(r"(stmatrix|st\.shared)", lines[i]))
  return lines[start + 1:end]


_TENSOR_STORE = r"cp\.async\.bulk\.tensor\.\dd\.global\.shared::cta"
_BULK_STORE = r"cp\.async\.bulk\.global\.shared::cta"


def _no_proxy_fence(copy):
  def shows(correct, broken):
    fixed, broke = _before_store_copy(correct, copy), _before_store_copy(broken, copy)
    assert any(l.startswith("fence.proxy.async") for l in fixed), fixed
    assert not any(l.startswith("fence.proxy.async") for l in broke), broke
    assert any(l.startswith("bar.sync") for l in broke)   # only the fence is missing
  return shows


def _expect_tx_short(correct, broken):
  lines = _lines(correct)
  copy = _index(lines, r"cp\.async\.bulk\.tensor\.4d\.shared::\w+\.global")
  arrive = [l for l in lines[:copy] if "mbarrier.arrive.expect_tx" in l]
  assert len(arrive) == 1
  operand = re.search(r"(%r\d+);$", arrive[0])[1]
  [value] = [int(m[1]) for l in lines if (m := re.match(rf"mov\.b32\s+{operand}, (\d+);", l))]
  box = int(np.prod(btk._TILE)) * 2      # f16
  assert 128 * value == box              # 128 arrivals, each bytes / 128
  [edited] = [l for l in _lines(broken) if l.startswith("mbarrier.arrive.expect_tx")]
  assert edited.endswith("%tx_short;")
  assert f"selp.b32 %tx_short, {btk.TX_SHORT}, 0, %tx_first;" in broken
  assert f"sub.s32 %tx_short, {operand}, %tx_short;" in broken


def _read_before_wait(correct, broken):
  for ptx, early in ((correct, False), (broken, True)):
    lines = _lines(ptx)
    load = _index(lines, r"cp\.async\.bulk\.tensor\.1d\.shared::\w+\.global")
    read, wait = _index(lines, r"^ld\.shared", load), _index(lines, r"mbarrier\.try_wait", load)
    assert (read < wait) == early, lines[load:max(read, wait) + 1]


def _cluster_barrier_after_init(correct, broken):
  for ptx, has in ((correct, True), (broken, False)):
    lines = _lines(ptx)
    init = _index(lines, r"mbarrier\.init")
    copy = _index(lines, r"\.multicast::cluster", init)
    between = lines[init:copy]
    assert any(l.startswith("barrier.cluster.arrive") for l in between) == has
    assert any(l.startswith("barrier.cluster.wait") for l in between) == has


def _overwritten_before_wait_read(correct, broken):
  for ptx, waits in ((correct, True), (broken, False)):
    lines = _lines(ptx)
    store = _index(lines, _TENSOR_STORE)
    rewrite = _index(lines, r"^(stmatrix|st\.shared)", store)
    assert any(l.startswith("cp.async.bulk.wait_group.read")
               for l in lines[store:rewrite]) == waits


DEFECTS = {
    "tensor_store_without_proxy_fence": _no_proxy_fence(_TENSOR_STORE),
    "bulk_store_without_proxy_fence": _no_proxy_fence(_BULK_STORE),
    "expect_tx_short_by_16": _expect_tx_short,
    "smem_read_before_barrier_wait": _read_before_wait,
    "multicast_before_peer_barrier_init": _cluster_barrier_after_init,
    "store_source_overwritten_before_wait_read": _overwritten_before_wait_read,
}


def test_every_pair_has_its_defect_check():
  assert set(DEFECTS) == set(btk.PAIRS)


@pytest.mark.parametrize("name", sorted(btk.PAIRS))
def test_the_broken_kernels_ptx_shows_its_defect(name):
  correct, broken = _ptx(name)
  assert correct != broken
  DEFECTS[name](correct, broken)


@pytest.mark.parametrize("name", sorted(btk.RACE_CASES))
def test_every_race_case_lowers(name):
  ptx = btk.lower(btk.RACE_CASES[name].maker)[1]
  assert ".entry" in ptx


@pytest.mark.parametrize("name", [n for n in btk.RACE_CASES if "[" in n and "=" not in n
                                  and re.search(r"\[[01]+\]$", n)])
def test_commit_flags_are_proxy_fences(name):
  """A case whose flags place ``commit_smem`` calls has one ``fence.proxy.async`` per
  flag set (so the verdicts below rest on where the fences are)."""
  flags = re.search(r"\[([01]+)\]$", name)[1]
  ptx = btk.lower(btk.RACE_CASES[name].maker)[1]
  fences = [l for l in _lines(ptx) if l.startswith("fence.proxy.async")]
  assert len(fences) == flags.count("1")


def _xfail_if_tma(request, ptx):
  # (each kernel's known gap is named in KNOWN_GAPS)
  name = request.node.callspec.params["name"]
  if name in KNOWN_GAPS:
    request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[name]))


# Cases the checker does not yet get right, each with why (docs/checker.md).
KNOWN_GAPS = {}


def _reported_in_every_schedule(report, rules):
  by_schedule = {s: {f.rule for f in report.findings if f.schedule == s}
                 for s in CI_SCHEDULES}
  assert all(by_schedule[s] & set(rules) for s in CI_SCHEDULES), (rules, str(report))


def _outputs_equal(report, expected):
  assert report.ok, str(report)
  if expected is not None:
    assert len(report.outputs) == len(expected)
    for got, want in zip(report.outputs, expected):
      np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", sorted(btk.PAIRS))
def test_the_correct_kernel_passes(request, name):
  _xfail_if_tma(request, _ptx(name)[0])
  report, expected = btk.check_maker(btk.PAIRS[name].correct, schedules=SCHEDULES)
  _outputs_equal(report, expected)


@pytest.mark.parametrize("name", sorted(btk.PAIRS))
def test_the_broken_kernel_is_reported_under_its_rule(request, name):
  _xfail_if_tma(request, _ptx(name)[1])
  report = btk.check_broken(btk.PAIRS[name], schedules=SCHEDULES)
  _reported_in_every_schedule(report, btk.PAIRS[name].rules)


@pytest.mark.parametrize("name", sorted(btk.RACE_CASES))
def test_the_race_case_gets_upstreams_verdict(request, name):
  case = btk.RACE_CASES[name]
  _xfail_if_tma(request, btk.lower(case.maker)[1])
  report, expected = btk.check_maker(case.maker, schedules=SCHEDULES)
  if case.race:
    _reported_in_every_schedule(report, RACE_RULES)
    assert not dataclasses.replace(report, strict=True).ok, str(report)
  else:
    _outputs_equal(report, expected)


@pytest.mark.parametrize("name", [n for n in btk.RACE_CASES if "_sync_copy" in n
                                  or "across_clusters" in n])
def test_the_plain_copies_survive_llvm(name):
  """The cluster cases without TMA keep their SMEM and global stores (upstream's
  kernels store SMEM nobody reads, which LLVM deletes: the rebuild reads it)."""
  lines = _lines(btk.lower(btk.RACE_CASES[name].maker)[1])
  assert any(re.match(r"(@%p\d+ )?st\.shared", l) for l in lines)
  assert any(re.match(r"(@%p\d+ )?st\.global", l) for l in lines)
