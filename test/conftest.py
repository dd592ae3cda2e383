"""The test suite's environment, set once here (the package itself changes none).

Test folders import each other's helpers plainly (``from configs import ...``,
``from demo_kernels import ...``): pyproject's ``[tool.pytest.ini_options] pythonpath``
puts test/checker, test/planner, test/emu, test/gpu, test/unit and test/harness on ``sys.path``
(test/checker/ptx_harness.py: what the checker's tests share); nothing here imports
bench/ (the benchmark scripts reach test/harness through bench/harness_path.py). The lit
suites (test/lit) get their environment from test/lit/lit.cfg.py.
"""

import importlib.metadata
import os
import sys

import pytest

import jax_free   # (test/harness, on pyproject's pythonpath)


def _has_cuda_plugin() -> bool:
  """True when a jax CUDA plugin is installed (jax-cuda12-plugin, jax-cuda13-pjrt, ...)."""
  for dist in importlib.metadata.distributions():
    name = (dist.metadata["Name"] or "").lower().replace("_", "-")
    if name.startswith("jax-cuda"):
      return True
  return False


# XLA's C++ INFO lines; must be set before jax initialises a backend.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# CPU machines run everything on the CPU backend; where a CUDA plugin is installed, jax
# keeps its default so that test/gpu sees the GPU (test/gpu/conftest.py skips without one).
if not _has_cuda_plugin():
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The checker runs one check's schedules and clusters one after another here: the suite
# runs its own pytest-xdist workers, and worker processes per check would multiply them
# (check/parallel.py; test/checker/test_parallel_runs.py passes jobs itself).
os.environ.setdefault("MAS_CHECK_JOBS", "1")


# One cache of mlir-opt / ptxas / cuobjdump results per test session, shared by the
# pytest-xdist workers (test/harness/tool_cache.py): the same kernels are compiled by
# many tests.  The controller makes the directory and removes it at the end; the
# workers inherit its path.  MAS_TEST_TOOL_CACHE=0 turns it off.
_made_cache = None


# Where the jax-free tests live (test/harness/jax_free.py; test/checker/test_no_jax.py
# keeps jax out of them).
JAX_FREE_FOLDERS = jax_free.FOLDERS


def pytest_addoption(parser):
  parser.addoption(
      "--jax-versioned", action="store_true", default=False,
      help="run only what can differ between jax versions (.ci/run's later stages): the "
           f"jax-free tests ({', '.join(JAX_FREE_FOLDERS)}) are left out, and a test "
           "parametrised over `schedule` runs schedule 0 only (the kernel a jax version "
           "lowers is checked on it; the schedules themselves are jax-free).")


def _versioned(item, root: str) -> bool:
  """Whether ``--jax-versioned`` runs ``item``: outside the jax-free folders, and at
  schedule 0 where it is parametrised over schedules."""
  path = str(item.path).replace("\\", "/")
  if (path[len(root):] if path.startswith(root) else path).startswith(JAX_FREE_FOLDERS):
    return False
  callspec = getattr(item, "callspec", None)
  return callspec is None or callspec.params.get("schedule", 0) == 0


def pytest_collection_modifyitems(config, items):
  # Tests marked ``long`` (tens of seconds each) first: pytest-xdist hands them out before
  # the short ones, so no worker is left running one alone at the end of the session
  # while the others wait (the order is otherwise the collection's: a stable sort).
  items.sort(key=lambda item: item.get_closest_marker("long") is None)
  if not config.getoption("--jax-versioned"):
    return
  root = str(config.rootpath).replace("\\", "/").rstrip("/") + "/"
  keep, drop = [], []
  for item in items:
    (keep if _versioned(item, root) else drop).append(item)
  if drop:
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_configure(config):
  global _made_cache
  # pytest-xdist's work-stealing scheduler where -n gave its default (load): an idle
  # worker takes half of another's remaining tests, so the workers end together (the
  # ``long`` tests go first: pytest_collection_modifyitems).  An explicit --dist stays.
  if getattr(config.option, "dist", "no") == "load" and not any(
      str(a).startswith(("--dist", "-d")) for a in config.invocation_params.args):
    config.option.dist = "worksteal"
  # .ci/run's stages share one cache of the checker's runs (test/harness/check_cache.py):
  # the first records, the later ones check only PTX that their jax lowered differently.
  if os.environ.get("MAS_TEST_CHECK_CACHE"):
    import check_cache
    check_cache.install(os.environ["MAS_TEST_CHECK_CACHE"],
                        os.environ.get("MAS_TEST_CHECK_CACHE_MODE", "record"))
  import tempfile
  where = os.environ.get("MAS_TEST_TOOL_CACHE")
  if where == "0":
    return
  if not where:
    where = _made_cache = tempfile.mkdtemp(prefix="mas-tool-cache-")
    os.environ["MAS_TEST_TOOL_CACHE"] = where
  import tool_cache
  tool_cache.install(where)


@pytest.fixture(autouse=True)
def _patched_tests_bypass_the_check_cache(request):
  """A test that patches (asks for ``monkeypatch``) runs the checker itself: the check
  cache's key names the unpatched checker.  So does one marked ``no_check_cache`` (it
  reads more of the machine than the cache restores), and one the later stages do not
  run (nothing would read what it recorded)."""
  root = str(request.config.rootpath).replace("\\", "/").rstrip("/") + "/"
  uncached = ("monkeypatch" in request.fixturenames
              or request.node.get_closest_marker("no_check_cache") is not None
              or not _versioned(request.node, root))   # (later stages never run it)
  if not uncached or not os.environ.get("MAS_TEST_CHECK_CACHE"):
    yield
    return
  import check_cache
  with check_cache.bypassed():
    yield


@pytest.fixture(autouse=True)
def _patched_tests_lower_afresh(request):
  """A test that patches (asks for ``monkeypatch``) may patch what a kernel calls, which
  the key of ``check``'s kept lowerings does not see (tools/kernel_cache.py): it starts
  and ends with none kept."""
  name = "mosaic_async_store.tools.check_kernel"   # (not imported here: it imports jax)
  if "monkeypatch" not in request.fixturenames:
    yield
    return
  def forget():
    if name in sys.modules:
      sys.modules[name].forget_lowerings()
  forget()
  yield
  forget()


def pytest_unconfigure(config):
  if _made_cache is not None:
    import shutil
    shutil.rmtree(_made_cache, ignore_errors=True)
    os.environ.pop("MAS_TEST_TOOL_CACHE", None)
