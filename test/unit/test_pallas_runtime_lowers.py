"""The Pallas runtime checks (test/harness/pallas_run.py), lowered for CUDA on the CPU.

test/gpu/test_pallas_runtime.py runs them on an H200.  Here each kernel is
traced and lowered for the ``cuda`` platform (Pallas, layout inference, this
project's lowering rules, Mosaic GPU's lowering into a ``mosaic_gpu_v2``
custom call), so a kernel that cannot be built fails without a GPU.
"""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mosaic_async_store as mas
from mosaic_async_store import pallas as mas_pallas
import pallas_run


def _lower(case):
  if case.installs:
    mas_pallas.install()
  try:
    kernel, out = pallas_run.roundtrip_kernel(case)
    x, init = pallas_run.make_inputs(case)
    text = jax.jit(kernel).trace(jnp.asarray(x), jnp.asarray(init)).lower(
        lowering_platforms=("cuda",)).as_text()
  finally:
    if case.installs:
      mas_pallas.uninstall()
  return text, out


@pytest.mark.parametrize("case", pallas_run.PALLAS_CASES, ids=lambda c: c.describe())
def test_pallas_runtime_kernel_lowers_for_cuda(case):
  text, out = _lower(case)
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


@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
def test_float_add_into_peer_is_refused_without_install(semantics):
  """The f32 add case without install(): its plain red.shared::cluster is ordered
  by a .release.cluster arrive that Pallas' .acquire.cta wait does not acquire."""
  case = pallas_run.PallasCase("float32", semantics, atomic="add", shape=(64, 64))
  assert not case.installs
  with pytest.raises(mas.AsyncStoreError) as err:
    _lower(case)
  assert err.value.param == "atomic" and err.value.value == "add"
  message = str(err.value)
  assert "float32" in message and ".acquire.cta" in message and "morally strong" in message
  assert ("call mosaic_async_store.pallas.install() first: its barrier_wait waits at "
          "cluster scope") in message
  assert not mas_pallas.is_installed()
  text, _ = _lower(dataclasses.replace(case, install=True))   # and install() lowers it
  assert "mosaic_gpu_v2" in text


def test_installs_follows_the_case():
  assert pallas_run.PallasCase("bfloat16", "lane", api="upstream").installs
  assert pallas_run.PallasCase("float32", "lane", install=True).installs
  assert not pallas_run.PallasCase("float32", "lane").installs
  adds = [c for c in pallas_run.PALLAS_CASES   # float adds: plain red into the peer
          if c.atomic == "add" and c.dtype.startswith("float")]
  assert adds and all(c.installs for c in adds)
