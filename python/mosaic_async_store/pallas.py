"""Pallas MGPU face of the project (``from mosaic_async_store import pallas as mas_pallas``).

    mas_pallas.async_store_smem(src, ref, barrier, cluster_idx=..., cluster_dim="x")
    mas_pallas.install()     # upstream's plgpu.async_store_smem now uses this project
    mas_pallas.uninstall()

Barriers follow Pallas' conventions: allocate ``plgpu.Barrier(num_arrivals=n)``
with ``n`` = the number of warpgroup stores that land per phase, under either
lowering semantics (Lane: each thread arrives once and Pallas multiplies the
count by 128; Warpgroup: one arrival per warpgroup).
"""

from __future__ import annotations

from typing import Hashable

__all__ = ["async_store_smem", "install", "uninstall", "is_installed"]


def _rules():
  from mosaic_async_store.lowering import pallas_rules
  return pallas_rules


def async_store_smem(src, ref, barrier, *, cluster_idx, cluster_dim: Hashable | int,
                     optimized: bool = True, atomic: str | None = None) -> None:
  """Asynchronously stores ``src`` into ``ref`` of the CTA ``cluster_idx`` along ``cluster_dim``.

  Same signature and semantics as ``plgpu.async_store_smem``, with every dtype
  (down to 4-bit), layout and swizzle, exact tx accounting for any size, and
  the atomics "add", "min", "max", "and", "or", "xor", "inc", "dec"
  (signedness from ``src.dtype``).

  Args:
    src: the array to store (registers of the warpgroup).
    ref: the SMEM ref to store to (same shape and dtype; transforms allowed).
    barrier: a single barrier; the destination CTA's copy gets the arrival.
    cluster_idx: index of the target CTA along ``cluster_dim``.
    cluster_dim: the cluster axis name (or index).
    optimized: require a bank-conflict-free store.
    atomic: None or a reduction.
  """
  from mosaic_async_store import compat
  p = compat.pallas_internals()
  prim = _rules().async_store_smem_p
  ref, ref_t = p.state_primitives.get_ref_and_transforms(ref, None, "async_store_smem")
  barrier, bar_t = p.state_primitives.get_ref_and_transforms(barrier, None, "async_store_smem")
  flat_ref_t, ref_treedef = p.tree_util.tree_flatten(ref_t)
  flat_bar_t, bar_treedef = p.tree_util.tree_flatten(bar_t)
  prim.bind(src, ref, barrier, cluster_idx, *flat_ref_t, *flat_bar_t,
            ref_transforms_treedef=ref_treedef, barrier_transforms_treedef=bar_treedef,
            cluster_dim=cluster_dim, optimized=optimized, atomic=atomic)


def install() -> None:
  """Routes ``plgpu.async_store_smem`` (Lane and Warpgroup) through this project. Idempotent."""
  _rules().install()


def uninstall() -> None:
  """Restores upstream's lowering of ``plgpu.async_store_smem``."""
  _rules().uninstall()


def is_installed() -> bool:
  return _rules().is_installed()
