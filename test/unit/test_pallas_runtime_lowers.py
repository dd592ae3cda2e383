"""The Pallas runtime checks (lowering/pallas_run.py), lowered for CUDA on the CPU.

test/gpu/test_pallas_runtime.py runs them on an H200.  Here each kernel is
traced and lowered for the ``cuda`` platform (Pallas, layout inference, this
project's lowering rules, Mosaic GPU's lowering into a ``mosaic_gpu_v2``
custom call), so a kernel that cannot be built fails without a GPU.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mosaic_async_store import pallas as mas_pallas
from mosaic_async_store.lowering import pallas_run


@pytest.mark.parametrize("case", pallas_run.PALLAS_CASES, ids=lambda c: c.describe())
def test_pallas_runtime_kernel_lowers_for_cuda(case):
  if case.api == "upstream":
    mas_pallas.install()
  try:
    kernel, out = pallas_run.roundtrip_kernel(case)
    x, init = pallas_run.make_inputs(case)
    text = jax.jit(kernel).trace(jnp.asarray(x), jnp.asarray(init)).lower(
        lowering_platforms=("cuda",)).as_text()
  finally:
    if case.api == "upstream":
      mas_pallas.uninstall()
  assert re.findall(r"stablehlo\.custom_call @(\w+)", text) == ["mosaic_gpu_v2"]
  # the kernel returns both CTAs' SMEM in its allocated (possibly transposed) shape
  rows, cols = case.shape[::-1] if case.transposed else case.shape
  element = {"bfloat16": "bf16", "float32": "f32", "int8": "i8", "int32": "i32",
             "uint32": "ui32"}[case.dtype]
  assert f"-> (tensor<2x{rows}x{cols}x{element}>" in text, text[:400]
  assert out.shape == (2, rows, cols)


def test_inputs_are_never_zero_and_expectations_follow_the_op():
  case = pallas_run.PallasCase("int32", "warpgroup", atomic="min", shape=(64, 64))
  x, init = pallas_run.make_inputs(case, seed=3)
  assert np.all(x != 0) and np.all(init != 0) and (x < 0).any()  # signed min matters
  want = pallas_run.expected(case, x, init)
  assert np.array_equal(want[0], np.minimum(init[0], x[1]))
  plain = pallas_run.PallasCase("bfloat16", "lane", swizzle=None, transposed=True,
                                shape=(64, 64), optimized=False)
  x, init = pallas_run.make_inputs(plain)
  assert np.array_equal(pallas_run.expected(plain, x, init)[1].view(np.uint16),
                        x[0].T.view(np.uint16))
