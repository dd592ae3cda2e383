"""A pytest plugin (entry point ``pytest11``, name ``mgpu_check``): a GPU test suite
checked on a CPU, unchanged.

    pytest --mgpu-check tests/          # every test runs under check.checking()
    def test_one(mgpu_check):           # or one test: the fixture is the active mode
      y = my_kernel(x)
      assert not mgpu_check.findings

``--mgpu-check`` runs the whole session under ``checking(schedules=...)``
(``--mgpu-check-schedules``, default 3): each Pallas MGPU kernel a test calls runs
through the checker and returns its outputs, so the test's own assertions hold or fail
on them; a kernel that breaks a rule fails its test with the finding.  The fixture
``mgpu_check`` runs one test under the mode and gives it the ``Checking`` (``kernels``,
``findings``).  The terminal summary lists each kernel checked, with its call site,
schedules and findings.

This module imports nothing of jax until the mode is entered: pytest loads it in every
session of an environment where the package is installed.
"""

from __future__ import annotations

import pytest

_RUNS: list = []      # the fixtures' KernelRuns, in order (without a session mode)
_SESSION: dict = {}   # the session's mode while --mgpu-check is active


def pytest_addoption(parser):
  group = parser.getgroup("mgpu-check", "Mosaic GPU kernels checked on the CPU")
  group.addoption("--mgpu-check", action="store_true", default=False,
                  help="run the session under mosaic_async_store.check.checking(): every "
                       "Pallas MGPU kernel runs through the PTX checker")
  group.addoption("--mgpu-check-schedules", type=int, default=3, metavar="N",
                  help="schedules per kernel under --mgpu-check (default 3)")
  group.addoption("--mgpu-check-strict", action="store_true", default=False,
                  help="under --mgpu-check, warnings fail a kernel too (checking(strict=True))")


def pytest_configure(config):
  if not config.getoption("--mgpu-check", default=False):
    return
  from mosaic_async_store.tools.checking import checking
  context = checking(schedules=config.getoption("--mgpu-check-schedules"),
                     strict=config.getoption("--mgpu-check-strict"))
  _SESSION["context"], _SESSION["mode"] = context, context.__enter__()


def pytest_unconfigure(config):
  context = _SESSION.pop("context", None)
  if context is not None:
    _SESSION.pop("mode")
    context.__exit__(None, None, None)


@pytest.fixture
def mgpu_check(request):
  """One test under ``check.checking()`` (``--mgpu-check-schedules`` schedules): the
  fixture's value is the ``Checking``, whose ``kernels`` and ``findings`` the test may
  inspect."""
  from mosaic_async_store.tools.checking import checking
  with checking(schedules=request.config.getoption("--mgpu-check-schedules"),
                strict=request.config.getoption("--mgpu-check-strict")) as mode:
    yield mode
  if "mode" not in _SESSION:   # a session mode records these runs itself
    _RUNS.extend(mode.kernels)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
  # under a session mode, its record holds every run (a mode records in all active ones)
  runs = _SESSION["mode"].kernels if "mode" in _SESSION else _RUNS
  if not runs:
    return
  terminalreporter.section("mgpu-check: kernels checked")
  for run in runs:
    terminalreporter.write_line(str(run))
  bad = sum(1 for r in runs if r.findings)
  terminalreporter.write_line(f"{len(runs)} kernel call(s) checked, {bad} with findings")
