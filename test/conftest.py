"""The test suite's environment, set once here (the package itself changes none).

Test folders import each other's helpers plainly (``from configs import ...``,
``from mosaic_async_store.check.interp import ...``): pyproject's ``[tool.pytest.ini_options] pythonpath``
puts test/emu, test/gpu and test/unit on ``sys.path``. The lit suites
(test/lit) get their environment from test/lit/lit.cfg.py.
"""

import importlib.metadata
import os


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
