"""A pytest plugin that installs .ci/run's check cache (test/harness/check_cache.py) in
a pytest run started by a test, as test/conftest.py installs it in the suite's own.

test/unit/test_checking_mode.py runs a GPU suite under ``--mgpu-check`` in a pytest
subprocess: every stage of .ci/run would otherwise run the checker over its kernels
anew, even where the jax version lowered them to the PTX an earlier stage checked.
The subprocess gets ``-p check_cache_plugin`` only where the test's own launches go
through the cache (``check_cache.active()``); the cache's directory and mode come from
``MAS_TEST_CHECK_CACHE`` and ``MAS_TEST_CHECK_CACHE_MODE``, which it inherits.
"""

import os


def pytest_configure(config):
  del config
  if os.environ.get("MAS_TEST_CHECK_CACHE"):
    import check_cache
    check_cache.install(os.environ["MAS_TEST_CHECK_CACHE"],
                        os.environ.get("MAS_TEST_CHECK_CACHE_MODE", "record"))
