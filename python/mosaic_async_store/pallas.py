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
forwards to it on first use, so that importing it loads no jax.
"""

from __future__ import annotations

__all__ = ["async_store_smem", "install", "uninstall", "is_installed"]


def async_store_smem(src, ref, barrier, *, cluster_idx, cluster_dim, optimized=True,
                     atomic=None) -> None:
  """Asynchronously stores ``src`` into ``ref`` of the CTA ``cluster_idx`` along ``cluster_dim``.

  ``plgpu.async_store_smem``'s signature and semantics, with every dtype (down to
  4-bit), layout and swizzle, exact tx accounting for any size, and more reductions.
  Call it in the body of a Pallas Mosaic GPU kernel (``plgpu.kernel``, or
  ``pl.pallas_call`` with the Mosaic GPU backend), under Lane or Warpgroup semantics.
  Every thread of the warpgroup arrives once on the target CTA's copy of ``barrier``,
  announcing exactly its own bytes: allocate ``plgpu.Barrier(num_arrivals=n)`` with
  ``n`` the stores that land per phase (Pallas counts 128 arrivals per
  ``num_arrivals``).  On a barrier allocated with ``orders_tensor_core=True`` one
  thread arrives with the whole transfer, after ``tcgen05.fence::before_thread_sync``
  and a warpgroup barrier, as upstream's store does (sm_100a and newer).

  Args:
    src: the array to store: the warpgroup's registers (e.g. ``plgpu.load(x_ref)``),
      of ``ref``'s shape and dtype; not a scalar.
    ref: the destination, a Pallas SMEM ref of the kernel (a scratch buffer) or a view
      of one (``smem.at[...]``); it may carry ``plgpu.TilingTransform``,
      ``plgpu.SwizzleTransform`` (the swizzle comes from it), slices and (unswizzled)
      transposes.  The target CTA's copy is written.
    barrier: one barrier (``bar.at[0]``) of the kernel's scratch; the target CTA's copy
      receives the arrivals and the tx count.
    cluster_idx: the target CTA's index along ``cluster_dim``: an integer scalar (a
      Python int or a traced one, e.g. ``1 - jax.lax.axis_index("cluster")``).  The
      executing CTA itself is allowed (its own SMEM, stored with the local form).
    cluster_dim: a cluster axis name of the kernel (``plgpu.kernel(cluster_names=...)``)
      or its index.
    optimized: True refuses a store with shared-memory bank conflicts (where no
      conflict-free order exists); False accepts one.
    atomic: None (a store) or a reduction into the destination: "add", "min", "max",
      "and", "or", "xor", "inc", "dec", as the dtype allows (floats: add; min and max
      follow ``src.dtype``'s signedness).

  Raises:
    AsyncStoreError (a ``ValueError``) or TypeError, each naming the parameter, the value,
    what is allowed and the fix, while the kernel is traced or lowered: a call outside a
    kernel; a ``ref`` or ``barrier`` that is not a Pallas ref, a barrier group; a ``src``
    of another shape or dtype than ``ref``, a scalar, a dtype the store cannot carry; a
    ``cluster_dim`` that is not a cluster axis of the kernel; a ``cluster_idx`` that is
    not an integer scalar or lies outside the cluster; an ``optimized`` that is not a
    bool; an ``atomic`` that PTX has no reduction of for the dtype; with ``optimized``, a
    store no order makes free of bank conflicts; before ``install()``, a store into a
    peer with plain pieces (float add), which Pallas' CTA-scoped ``barrier_wait`` would
    not see (docs/pallas.md, "Which waits are correct").  docs/errors.md lists each.

  Example (the two CTAs of a cluster swap their (64, 128) tiles: each stores its own
  into the other's SMEM; ``check(kernel, x)`` runs it on the CPU, x of shape
  (2, 64, 128), and its output is ``x[::-1]``)::

    def body(x_ref, o_ref, smem, bar):
      cta = jax.lax.axis_index("cluster")
      mas_pallas.async_store_smem(x_ref[cta], smem, bar.at[0], cluster_idx=1 - cta,
                                  cluster_dim="cluster")
      plgpu.barrier_wait(bar.at[0])          # the peer's tile has landed here
      o_ref[cta] = smem[...]

    kernel = plgpu.kernel(
        body, out_type=jax.ShapeDtypeStruct((2, 64, 128), jnp.int32), grid=(1,),
        grid_names=("g",), cluster=(2,), cluster_names=("cluster",),
        scratch_types=[plgpu.SMEM((64, 128), jnp.int32),
                       plgpu.Barrier(num_arrivals=1, num_barriers=1)])
  """
  from mosaic_async_store.lowering import pallas as _impl
  return _impl.async_store_smem(src, ref, barrier, cluster_idx=cluster_idx,
                                cluster_dim=cluster_dim, optimized=optimized,
                                atomic=atomic)


def __getattr__(name: str):
  if name in __all__:
    from mosaic_async_store.lowering import pallas as _impl
    return getattr(_impl, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(__all__))
