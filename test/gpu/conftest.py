"""GPU tests are collected everywhere and skipped, visibly, without an sm_90 GPU."""

import pytest

from gpu_run import has_sm90_gpu


def pytest_collection_modifyitems(config, items):
  if has_sm90_gpu():
    return
  skip = pytest.mark.skip(reason="needs an NVIDIA sm_90 GPU (Hopper); none visible to jax")
  for item in items:
    if "test/gpu" in str(item.fspath).replace("\\", "/"):
      item.add_marker(skip)
