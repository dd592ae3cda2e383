"""Debug mode: bounded, reporting waits (the GPU half is test/gpu/test_debug.py)."""

import pytest
from jaxlib.mlir import ir

from mosaic_async_store import compat
from mosaic_async_store.tools import toolchain
from mosaic_async_store.demo.config import StoreConfig
from mosaic_async_store.lowering import debug
from store_kernels import kernel_parts
from gpu_run import announce_extra_bytes


def _ptx(**kwargs):
  with compat.enable_x64(), compat.make_ir_context(), ir.Location.unknown():
    p = kernel_parts(StoreConfig(), **kwargs)
    module, *_ = compat.kernel_to_module(p.body, p.grid, p.block, p.in_shape, p.out_shape,
                                         p.scratch, cluster=p.cluster)
    return toolchain.compile_module(module).ptx


def test_wrong_byte_count_kernel_has_bounded_reporting_wait():
  ptx = _ptx(after_store=announce_extra_bytes(StoreConfig(), 16))
  assert "mbarrier.expect_tx.relaxed.cluster.shared::cluster.b64" in ptx
  assert "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64" in ptx
  assert "vprintf" in ptx  # the report
  assert "did not complete phase" in bytes.fromhex(
      "".join(f"{int(x):02x}" for x in _global_bytes(ptx))).decode(errors="ignore")


def _global_bytes(ptx):
  """The initialiser bytes of the PTX's global string constants."""
  import re
  out = []
  for m in re.finditer(r"\.global \.align \d+ \.b8 \S+\[\d+\] = \{([^}]*)\}", ptx):
    out += [v.strip() for v in m.group(1).split(",")]
  return out


@pytest.mark.parametrize("env,arg,want", [
    ("", None, False), ("1", None, True), ("0", None, False), ("", True, True),
    ("1", False, False),
])
def test_debug_switch(monkeypatch, env, arg, want):
  monkeypatch.setenv("MAS_DEBUG", env)
  assert debug.debug_enabled(arg) is want
