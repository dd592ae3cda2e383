"""Pallas MGPU face of the project (``from mosaic_async_store import pallas as mas_pallas``).

    mas_pallas.async_store_smem(src, ref, barrier, cluster_idx=..., cluster_dim="x")
    mas_pallas.install()     # upstream's plgpu.async_store_smem now uses this project,
    mas_pallas.uninstall()   # and plgpu.barrier_wait acquires at cluster scope

Barriers follow Pallas' conventions: allocate ``plgpu.Barrier(num_arrivals=n)``
with ``n`` = the number of warpgroup stores that land per phase, under either
lowering semantics: Pallas initialises it with ``n * 128`` arrivals, and every
thread of the storing warpgroup arrives once, announcing its own bytes.
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
  _check_args(p, src, ref, barrier, cluster_idx, cluster_dim, optimized, atomic)
  prim = _rules().async_store_smem_p
  ref, ref_t = p.state_primitives.get_ref_and_transforms(ref, None, "async_store_smem")
  barrier, bar_t = p.state_primitives.get_ref_and_transforms(barrier, None, "async_store_smem")
  flat_ref_t, ref_treedef = p.tree_util.tree_flatten(ref_t)
  flat_bar_t, bar_treedef = p.tree_util.tree_flatten(bar_t)
  prim.bind(src, ref, barrier, cluster_idx, *flat_ref_t, *flat_bar_t,
            ref_transforms_treedef=ref_treedef, barrier_transforms_treedef=bar_treedef,
            cluster_dim=cluster_dim, optimized=optimized, atomic=atomic)


def _typeof(p):
  return getattr(p.jax_core, "typeof", None) or p.jax_core.get_aval  # jax 0.10 / older


def _check_args(p, src, ref, barrier, cluster_idx, cluster_dim, optimized, atomic) -> None:
  """Refuses ill-typed arguments while tracing, before anything is lowered."""
  import numpy as np

  from mosaic_async_store import validate
  from mosaic_async_store.errors import refuse, refuse_type
  validate.check_atomic_name(atomic)
  validate.check_flag("optimized", optimized)
  for param, x, example in (("ref", ref, "smem or smem.at[...]"),
                            ("barrier", barrier, "bar.at[0]")):
    try:
      is_ref = isinstance(x, p.state_types.TransformedRef) or isinstance(
          _typeof(p)(x), p.state_types.AbstractRef)
    except TypeError:
      is_ref = False
    if not is_ref:
      raise refuse_type(param, x, "a Pallas Ref (a scratch buffer of the kernel)",
                        f"pass the kernel's scratch ref, e.g. {example}")
  if not hasattr(src, "dtype") and not isinstance(src, (int, float)):
    raise refuse_type("src", src, "an array (the registers of the warpgroup)",
                      "pass a jax array, e.g. plgpu.load(x_ref, ())")
  if isinstance(cluster_dim, (bool, np.bool_, float)) or not isinstance(cluster_dim, (str, int)):
    raise refuse_type("cluster_dim", cluster_dim, "a cluster axis name (str) or int",
                      'pass a name from plgpu.kernel(cluster_names=...), e.g. "cluster"')
  env = p.jax_core.get_axis_env()
  names = env.axis_names() if hasattr(env, "axis_names") else ()
  if isinstance(cluster_dim, str) and names:
    if cluster_dim not in names:
      raise refuse("cluster_dim", repr(cluster_dim),
                   "a cluster axis name of the enclosing kernel (axes in scope: "
                   + ", ".join(map(repr, names)) + ")",
                   "pass one of the cluster_names given to plgpu.kernel")
    # An axis of one CTA is fine: the target is then the executing CTA, which
    # the lowering stores into with the local form (no st.async where the
    # whole cluster is one CTA, no red.async into the executing CTA).
  if isinstance(cluster_idx, (bool, np.bool_, float, str, bytes)) or cluster_idx is None:
    raise refuse_type("cluster_idx", cluster_idx, "an integer scalar (int or int32 array)",
                      'pass e.g. 1 - jax.lax.axis_index("cluster")')
  dtype = getattr(cluster_idx, "dtype", None)
  if dtype is not None and (not np.issubdtype(dtype, np.integer)
                            or tuple(getattr(cluster_idx, "shape", ())) != ()):
    shape = tuple(getattr(cluster_idx, "shape", ()))
    raise TypeError(str(refuse(
        "cluster_idx", f"<array> of dtype {dtype} and shape {shape}",
        "an integer scalar (int, or an integer array of shape ())",
        "pass a scalar index, e.g. idx.astype(jnp.int32) or idx[0]")))


def install() -> None:
  """Routes ``plgpu.async_store_smem`` (Lane and Warpgroup) through this project. Idempotent.

  Also routes ``plgpu.barrier_wait`` (every semantics) through a wait with
  ``.acquire.cluster`` (upstream's is ``.acquire.cta``), so stores with plain
  pieces into a peer (e.g. float reductions), which are refused without
  install(), become visible to the waiting CTA (docs/pallas.md).
  """
  _rules().install()


def uninstall() -> None:
  """Restores upstream's lowering of ``plgpu.async_store_smem`` and ``plgpu.barrier_wait``."""
  _rules().uninstall()


def is_installed() -> bool:
  return _rules().is_installed()
