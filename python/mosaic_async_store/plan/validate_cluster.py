"""Checks of the store's target: the cluster dimension and index, the cluster size,
and plan_store's ``Target``; with the two scalar checks they and ``validate`` use
(``is_int``, ``check_flag``).  ``validate`` re-exports all of them, and callers
import them from there.

Each check raises an AsyncStoreError (or TypeError) that names the parameter,
the value, what is allowed and a fix (see errors.refuse).
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.errors import refuse, refuse_type
from mosaic_async_store.plan.plan_types import Target

__all__ = ["is_int", "check_flag", "check_cluster_size", "check_cluster_args",
           "check_cluster_idx", "check_target", "CLUSTER_IDX_ALLOWED"]


def is_int(x) -> bool:
  """A Python or NumPy integer, not a bool."""
  return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_flag(param: str, value) -> bool:
  """A bool parameter (``optimized``, ``expect_tx``, ...): True or False only."""
  if not isinstance(value, (bool, np.bool_)):
    raise refuse_type(param, value, "True or False",
                      f"pass {param}=True or {param}=False (a bool)")
  return bool(value)


def check_cluster_size(cluster_size) -> int | None:
  """The CTAs in the cluster, when known: None or an int >= 1."""
  if cluster_size is not None and not (is_int(cluster_size) and cluster_size >= 1):
    raise (refuse if is_int(cluster_size) else refuse_type)(
        "cluster_size", cluster_size, "None or an int >= 1 (the CTAs in the cluster)",
        "omit cluster_size, or pass the kernel's cluster size")
  return None if cluster_size is None else int(cluster_size)


_DIMS = "gpu.Dimension.x, .y or .z (or 0, 1, 2)"
CLUSTER_IDX_ALLOWED = "a Python int or a scalar ir.Value of integer or index type"


def check_cluster_args(cluster_dim, cluster_idx, cluster_shape=None, *, dynamic=False):
  """async_store's target: both of cluster_dim and cluster_idx or neither, a dimension
  0..2 (``gpu.Dimension`` is an int), an int index inside a static ``cluster_shape``.
  ``dynamic``: cluster_idx is an ir.Value, whose type lowering/target.py checks."""
  if (cluster_dim is None) != (cluster_idx is None):
    given = "cluster_dim" if cluster_idx is None else "cluster_idx"
    missing = "cluster_idx" if cluster_idx is None else "cluster_dim"
    raise refuse(missing, None, f"a value whenever {given} is given",
                 "pass both (a peer CTA) or neither (this CTA's own SMEM)")
  if cluster_dim is None:
    return
  if not is_int(cluster_dim):
    raise refuse_type("cluster_dim", cluster_dim, _DIMS,
                      "pass a gpu.Dimension, e.g. cluster_dim=gpu.Dimension.x")
  dim = int(cluster_dim)
  if dim not in (0, 1, 2):
    raise refuse("cluster_dim", cluster_dim, _DIMS, "pass a gpu.Dimension")
  if dynamic:
    return
  check_cluster_idx(cluster_idx)
  # A dimension of one CTA is fine: its only CTA is the executing one (the local form).
  if cluster_shape is not None and not 0 <= cluster_idx < cluster_shape[dim]:
    raise refuse("cluster_idx", cluster_idx, f"0 <= cluster_idx < {cluster_shape[dim]}",
                 "pass the index of a CTA inside the cluster")


def check_cluster_idx(cluster_idx, *, traced: bool = False) -> None:
  """The target CTA's index as a plain value.  async_store: a Python int (an
  ir.Value is the lowering's to check).  Pallas (``traced``): an int, or an integer
  array of shape () (a traced index: only its dtype and shape are looked at)."""
  if not traced:
    if not isinstance(cluster_idx, int) or isinstance(cluster_idx, bool):
      fix = (f"pass int(cluster_idx) = {int(cluster_idx)}" if is_int(cluster_idx)
             else "pass the target CTA's index as an int or an index ir.Value")
      raise refuse_type("cluster_idx", cluster_idx, CLUSTER_IDX_ALLOWED, fix)
    return
  if isinstance(cluster_idx, (bool, np.bool_, float, str, bytes)) or cluster_idx is None:
    raise refuse_type("cluster_idx", cluster_idx, "an integer scalar (int or int32 array)",
                      'pass e.g. 1 - jax.lax.axis_index("cluster")')
  dtype, shape = getattr(cluster_idx, "dtype", None), tuple(getattr(cluster_idx, "shape", ()))
  if dtype is not None and (not np.issubdtype(dtype, np.integer) or shape):
    raise TypeError(str(refuse(
        "cluster_idx", f"<array> of dtype {dtype} and shape {shape}",
        "an integer scalar (int, or an integer array of shape ())",
        "pass a scalar index, e.g. idx.astype(jnp.int32) or idx[0]")))


def check_target(target, peer, cluster_size):
  """plan_store's destination as one ``plan_types.Target``: the one given, or one made
  from ``peer`` (default True) and ``cluster_size``; both forms at once must agree."""
  peer = None if peer is None else check_flag("peer", peer)
  cluster_size = check_cluster_size(cluster_size)
  if target is None:
    return Target(peer=True if peer is None else peer, cluster_size=cluster_size)
  if not isinstance(target, Target):
    raise refuse_type("target", target, "None or a plan_types.Target",
                      "omit target and pass peer= (and cluster_size=)")
  if peer is not None and peer != target.peer:
    raise refuse("peer", peer, f"{target.peer}, as target={target.describe()} says, "
                 "or None", "pass either peer or target")
  if cluster_size is not None and cluster_size != target.cluster_size:
    raise refuse("cluster_size", cluster_size,
                 f"{target.cluster_size}, as the target's cluster has, or None",
                 "pass either cluster_size or target")
  return target
