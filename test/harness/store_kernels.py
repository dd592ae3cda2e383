"""The demo's store kernel (``mosaic_async_store.demo.kernel.StoreKernel``) with one of
its steps replaced, for tests and benchmarks.

* ``kernel_parts(cfg, store=...)``: another store in place of the kernel's (upstream's
  local ``store_tiled``, plain stores of a given strategy), in the full or the
  bare kernel; the replacement must complete the barrier's phase.
* ``kernel_parts(cfg, after_store=...)``: something between the store and the wait
  (``gpu_run.announce_extra_bytes``: a tx count that never completes).
* ``CostKernel`` / ``build_cost_module``: the cost kernel that ``cost_measure``
  compiles and ``demo_kernels.run_cost_kernel`` runs: the register loads, a fence,
  the store and the bounded wait (with its flag store); no SMEM initialisation and
  no copy-out.

The shipped kernel builds its ops in the same order whichever steps run, so a
variant differs from the CLI's kernel only in the steps it replaces.
"""

from __future__ import annotations

from mosaic_async_store.demo.config import StoreConfig
from mosaic_async_store.demo.kernel import KernelParts, Launch, StoreKernel

__all__ = ["VariantKernel", "CostKernel", "kernel_parts", "build_cost_module"]


class VariantKernel(StoreKernel):
  """``StoreKernel`` with ``store(value, view, barrier)`` in place of its store and
  ``after_store(barrier, peer)`` run before its wait (each if given)."""

  def __init__(self, cfg: StoreConfig, *, bare: bool = False, store=None, after_store=None):
    super().__init__(cfg, bare=bare)
    self._store, self._after_store = store, after_store

  def store(self, value, k: Launch) -> None:
    if self._store is None:
      super().store(value, k)
    else:
      self._store(value, k.view, k.barrier)

  def finish(self, k: Launch) -> None:
    if self._after_store is not None:
      self._after_store(k.barrier, k.peer)
    super().finish(k)


class CostKernel(StoreKernel):
  """The bare kernel (loads, fence, store) with the bounded wait kept: a kernel that
  loads its registers, stores and waits (parameters used: ``src`` and ``flags``)."""

  def __init__(self, cfg: StoreConfig):
    super().__init__(cfg, bare=True)
    self.finishes = True

  def finish(self, k: Launch) -> None:
    self.wait(k)


def kernel_parts(cfg: StoreConfig, *, bare: bool = False, store=None,
                 after_store=None) -> KernelParts:
  """``VariantKernel(cfg, ...).parts()``: the body, launch shape and buffers."""
  return VariantKernel(cfg, bare=bare, store=store, after_store=after_store).parts()


def build_cost_module(cfg: StoreConfig):
  """``cfg``'s cost kernel (``CostKernel``) as a Mosaic GPU module: (module, KernelIO).
  Must be called inside an MLIR context from ``compat.make_ir_context()`` with a
  location."""
  return CostKernel(cfg).module()
