"""Every GPU runtime configuration is ready on the CPU: it compiles (full kernel,
ptxas-accepted), and the CPU plan executor produces exactly the bytes the GPU
test will demand.  A session with a GPU then only measures."""


import numpy as np
import pytest
from jaxlib.mlir import ir

from mosaic_async_store import compat
import hostdata
from mosaic_async_store.tools import toolchain
from gpu_run import make_inputs
from kernel_text import retargeted_ptx
from mosaic_async_store.demo.kernel import build_store_module
from mosaic_async_store.demo.check import execute_config

from configs import RUNTIME_CONFIGS  # test/gpu (pyproject: pytest pythonpath)


def _cpu_result(cfg):
  codes, src, init = make_inputs(cfg, seed=0)
  return execute_config(cfg, src, init), hostdata.expected_smem(cfg, codes, init)


@pytest.mark.parametrize("cfg", [c for c in RUNTIME_CONFIGS if c.impl == "mas"],
                         ids=lambda c: c.describe())
def test_runtime_config_ready(cfg):
  """The CPU execution of the configuration gives the geometry-only expectation (its
  kernel is compiled, and its stores counted, in the test below)."""
  got, want = _cpu_result(cfg)
  assert np.array_equal(got, want)


_OTHER_ARCHS = [a for a in toolchain.ARCHS if a != toolchain.DEFAULT_ARCH]


@pytest.mark.parametrize("cfg", RUNTIME_CONFIGS, ids=lambda c: c.describe())
def test_runtime_kernel_assembles_for_every_arch(cfg):
  """Every GPU runtime kernel (ours and upstream's store) through ptxas for each target:
  st.async, red.async, mapa and the cluster barriers exist on all three.  Our kernels'
  stores are the cluster forms (counted from the sm_90a compile's stats)."""
  with compat.make_ir_context(), ir.Location.unknown():
    module, _ = build_store_module(cfg)
    compiled = toolchain.compile_module(module)   # mlir-opt, ptxas and cuobjdump for sm_90a
  assert compiled.cubin[:4] == b"\x7fELF"
  if cfg.impl == "mas":
    assert any(k.startswith(("st.async", "red.async", "st.shared::cluster", "red.relaxed"))
               for k in compiled.stats.stores), compiled.stats.stores
  for arch in _OTHER_ARCHS:
    cubin, _ = toolchain.ptx_to_cubin(retargeted_ptx(compiled.ptx, arch), arch)
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("cfg", [RUNTIME_CONFIGS[0], next(
    c for c in RUNTIME_CONFIGS if c.target == "cta0")], ids=lambda c: c.describe())
def test_mlir_opt_emits_the_same_ptx_for_every_arch(cfg):
  """mlir-opt's PTX for sm_100a and sm_103a is the sm_90a text under another header,
  which is why the test above assembles the retargeted text."""
  with compat.make_ir_context(), ir.Location.unknown():
    module, _ = build_store_module(cfg)
    ptx = {arch: toolchain.mlir_to_ptx(module, arch) for arch in toolchain.ARCHS}
  for arch in _OTHER_ARCHS:
    assert ptx[arch] == retargeted_ptx(ptx["sm_90a"], arch)


def test_tiny_buffer_kernel_builds():
  """A 4-byte SMEM buffer: the barrier after it must stay 8-byte aligned (padded)."""
  from mosaic_async_store.demo.config import StoreConfig
  from kernel_text import kernel_text
  ptx = kernel_text(StoreConfig(dtype="uint4", shape=(8,), layout="TCGEN05_COL", swizzle=None),
                    "ptx", bare=False)
  assert "mbarrier.arrive.expect_tx" in ptx
