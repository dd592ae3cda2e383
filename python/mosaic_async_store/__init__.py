"""mosaic-async-store: asynchronous register -> (cluster) shared-memory stores for Mosaic GPU.

    import mosaic_async_store as mas
    plan = mas.plan_store(layout, shape, dtype, swizzle=128)    # pure data
    nbytes = mas.async_store(value, ref, barrier, cluster_dim=gpu.Dimension.x,
                             cluster_idx=peer, swizzle=128)     # inside a kernel

The planner (``plan_store``, in ``mosaic_async_store.plan``) needs no MLIR;
``async_store`` lives in ``mosaic_async_store.lowering`` and is imported on
first use.  The layers and their import direction: docs/architecture.md.
"""

from mosaic_async_store._version import __version__
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.plan.planner import StorePlan, plan_store

__all__ = ["AsyncStoreError", "StorePlan", "plan_store", "async_store", "simulate_store",
           "wait"]


def async_store(value, ref, barrier, **kwargs) -> int:
  """See :func:`mosaic_async_store.lowering.store.async_store`."""
  from mosaic_async_store.lowering.store import async_store as _impl
  return _impl(value, ref, barrier, **kwargs)


def wait(barrier, **kwargs):
  """See :func:`mosaic_async_store.lowering.debug.wait` (bounded in debug mode)."""
  from mosaic_async_store.lowering.debug import wait as _impl
  return _impl(barrier, **kwargs)


def __getattr__(name: str):
  # ``simulate_store`` is public; the executor (and NumPy's ml_dtypes) load on
  # first access, so that a bare import stays light (test/unit/test_import_hygiene.py).
  if name == "simulate_store":
    from mosaic_async_store.plan.executor import simulate_store
    return simulate_store
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(__all__))
