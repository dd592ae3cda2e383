"""Pallas MGPU face of the project (``from mosaic_async_store import pallas as mas_pallas``).

    mas_pallas.async_store_smem(src, ref, barrier, cluster_idx=..., cluster_dim="x")
    mas_pallas.install()     # upstream's plgpu.async_store_smem now uses this project,
    mas_pallas.uninstall()   # and plgpu.barrier_wait acquires at cluster scope

Barriers follow Pallas' conventions: allocate ``plgpu.Barrier(num_arrivals=n)``
with ``n`` = the number of warpgroup stores that land per phase, under either
lowering semantics: Pallas initialises it with ``n * 128`` arrivals, and every
thread of the storing warpgroup arrives once, announcing its own bytes.

Everything lives in ``mosaic_async_store.lowering.pallas`` (the layer that
builds IR: the primitive, its checks, its rules, install()); this module
re-exports it on first use, so that importing it loads no jax.
"""

from __future__ import annotations

__all__ = ["async_store_smem", "install", "uninstall", "is_installed"]


def __getattr__(name: str):
  if name in __all__:
    from mosaic_async_store.lowering import pallas as _impl
    return getattr(_impl, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(__all__))
