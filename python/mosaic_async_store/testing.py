"""Helpers for the lit/FileCheck tests: print a labelled kernel as IR or PTX.

Each lit test file calls ``print_ir`` / ``print_ptx`` under a ``TEST: name``
label, following MLIR's Python test habit (``# CHECK-LABEL: TEST: name``).
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from mosaic_async_store.config import StoreConfig  # noqa: E402

__all__ = ["kernel_text", "print_ir", "print_ptx", "print_stats"]


def kernel_text(cfg: StoreConfig, what: str, *, bare: bool = True) -> str:
  """The store kernel of ``cfg`` as "mlir" (generic IR), "ptx" or "sass"."""
  from jaxlib.mlir import ir
  from mosaic_async_store import compat, toolchain
  from mosaic_async_store.lowering.kernels import build_store_module
  with compat.make_ir_context(), ir.Location.unknown():
    module, _ = build_store_module(cfg, bare=bare)
    if what == "mlir":
      return module.operation.get_asm(enable_debug_info=False)
    compiled = toolchain.compile_module(module)
  return {"ptx": compiled.ptx, "sass": compiled.sass}[what]


def print_ir(name: str, **cfg) -> None:
  print(f"TEST: {name}")
  print(kernel_text(StoreConfig(**cfg), "mlir"))


def print_ptx(name: str, **cfg) -> None:
  print(f"TEST: {name}")
  print(kernel_text(StoreConfig(**cfg), "ptx"))


def print_stats(name: str, **cfg) -> None:
  from jaxlib.mlir import ir
  from mosaic_async_store import compat, toolchain
  from mosaic_async_store.lowering.kernels import build_store_module
  print(f"TEST: {name}")
  with compat.make_ir_context(), ir.Location.unknown():
    module, _ = build_store_module(StoreConfig(**cfg), bare=True)
    stats = toolchain.compile_module(module).stats
  for opcode, n in sorted(stats.stores.items()):
    print(f"store {opcode} x{n}")
