"""mosaic-async-store: asynchronous register -> (cluster) shared-memory stores for Mosaic GPU.

    import mosaic_async_store as mas
    plan = mas.plan_store(layout, shape, dtype, swizzle=128)    # pure data
    nbytes = mas.async_store(value, ref, barrier, cluster_dim=gpu.Dimension.x,
                             cluster_idx=peer, swizzle=128)     # inside a kernel

The planner (``plan_store``) needs no MLIR; ``async_store`` lives in
``mosaic_async_store.lowering`` and is imported on first use.
"""

from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.planner import StorePlan, plan_store

__all__ = ["AsyncStoreError", "StorePlan", "plan_store", "async_store", "simulate_store",
           "wait"]
__version__ = "0.1.0"


def async_store(value, ref, barrier, **kwargs) -> int:
  """See :func:`mosaic_async_store.lowering.store.async_store`."""
  from mosaic_async_store.lowering.store import async_store as _impl
  return _impl(value, ref, barrier, **kwargs)


def wait(barrier, **kwargs):
  """See :func:`mosaic_async_store.lowering.debug.wait` (bounded in debug mode)."""
  from mosaic_async_store.lowering.debug import wait as _impl
  return _impl(barrier, **kwargs)


def __getattr__(name: str):
  # ``simulate_store`` is public, but its module also holds the runtime checks'
  # helpers (hostdata, config): loaded on first access, so that importing the
  # package loads no test code (test/unit/test_import_hygiene.py).
  if name == "simulate_store":
    from mosaic_async_store.simulate import simulate_store
    return simulate_store
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(__all__))
