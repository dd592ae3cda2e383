"""The GPU runtime kernels, built and lowered for CUDA on the CPU.

test/gpu runs these kernels on an H200; most sessions have none.  This test
takes each of them through the part of the runtime path that needs no GPU:
``gpu_run.build_kernel`` (upstream's ``as_gpu_kernel`` around our store) and
jax's lowering for the ``cuda`` platform, which runs Mosaic GPU's own
lowering rule and serialises the kernel into a ``mosaic_gpu_v2`` custom call.
So an API change between jax 0.10 and 0.11 in that path fails here first, not
in the few minutes a GPU is lent.
"""

import re

import jax.numpy as jnp
import pytest

import gpu_run
from mosaic_async_store.demo.kernel import kernel_io

from configs import RUNTIME_CONFIGS  # test/gpu (pyproject: pytest pythonpath)


@pytest.mark.parametrize("cfg", RUNTIME_CONFIGS, ids=lambda c: c.describe())
def test_runtime_kernel_lowers_for_cuda(cfg):
  _, src, init = gpu_run.make_inputs(cfg, seed=0)
  kernel = gpu_run.build_kernel(cfg)
  text = kernel.trace(jnp.asarray(src), jnp.asarray(init)).lower(
      lowering_platforms=("cuda",)).as_text()
  assert re.findall(r"stablehlo\.custom_call @(\w+)", text) == ["mosaic_gpu_v2"]
  smem = cfg.cluster * kernel_io(cfg).smem_bytes
  # out: every CTA's SMEM bytes; flags: one per thread (the bounded wait's result)
  assert f"-> (tensor<{smem}xui8>" in text, text[:600]
  assert f"tensor<{cfg.cluster * 128}xi32>" in text


def test_debug_mode_kernel_lowers_for_cuda():
  """test/gpu/test_debug.py's kernel: 16 bytes too many announced, printf on timeout."""
  from mosaic_async_store.demo.config import StoreConfig
  cfg = StoreConfig()
  _, src, init = gpu_run.make_inputs(cfg, seed=0)
  kernel = gpu_run.build_kernel(cfg, tx_error=16)
  text = kernel.trace(jnp.asarray(src), jnp.asarray(init)).lower(
      lowering_platforms=("cuda",)).as_text()
  assert re.findall(r"stablehlo\.custom_call @(\w+)", text) == ["mosaic_gpu_v2"]
