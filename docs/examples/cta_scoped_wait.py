"""Mistake 2 of docs/check-your-kernel.md: a `.cta` wait after plain remote reductions.

A Mosaic GPU kernel (``mgpu.as_gpu_kernel``, Lane semantics) of two CTAs: each CTA puts
its (64, 128) f32 tile into its own shared memory, then adds it into the other CTA's
with ``mas.async_store(..., atomic="add")``, waits for the peer's sum and writes it out:
out[c] == x[0] + x[1].  An f32 add has no ``red.async`` form, so the store goes as plain
``red.relaxed.cluster.shared::cluster.add.f32`` into the peer, ordered by a
``.release.cluster`` arrive.  The mistake: the consumer waits with upstream's
``barrier.wait()``, which acquires at the default ``.cta`` scope, where ``mas.wait``
acquires at ``.cluster``.  A release at .cluster and an acquire at .cta across two CTAs
do not synchronise (the pair is not morally strong), so ``check`` finds each CTA reading
the sum while the peer's reductions are unordered with it.  Run:

    python docs/examples/cta_scoped_wait.py

It uses only public API (``mosaic_async_store``, ``mosaic_async_store.check``, jax's
Mosaic GPU and jaxlib's MLIR dialects), and runs the check when imported, as the
command does.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.mosaic import gpu as mgpu
from jax.interpreters import mlir
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, gpu, nvvm

import mosaic_async_store as mas
from mosaic_async_store.check import check

TILE = (64, 128)


def body(ctx, x, out, scratch):
  smem, barrier = scratch
  cta = gpu.cluster_block_id(gpu.Dimension.x)              # 0 or 1 (an index)
  peer = arith.subi(arith.constant(ir.IndexType.get(), 1), cta)
  tile = mgpu.FragmentedArray.load_strided(mgpu.memref_slice(x, cta))
  tile.store_untiled(smem)                                   # the sum starts at our tile
  # Every thread of the cluster has written its tile before the peer adds into it.
  nvvm.fence_proxy(nvvm.ProxyKind.async_shared, space=nvvm.SharedSpace.shared_cta)
  nvvm.cluster_arrive(aligned=True)
  nvvm.cluster_wait(aligned=True)
  mas.async_store(tile, smem, barrier[0], cluster_dim=gpu.Dimension.x, cluster_idx=peer,
                  atomic="add")                              # plain red.shared::cluster
  barrier[0].wait()           # Mistake 2: .acquire.cta; mas.wait(barrier[0]) is correct
  mgpu.FragmentedArray.load_strided(smem).store_untiled(mgpu.memref_slice(out, cta))


def build():
  """The kernel: built inside an MLIR context and location, used anywhere after."""
  spec = jax.ShapeDtypeStruct((2, *TILE), jnp.float32)
  scratch = (jax.ShapeDtypeStruct(TILE, jnp.float32),
             mgpu.Barrier(arrival_count=128, num_barriers=1))   # every thread arrives
  with mlir.make_ir_context(), ir.Location.unknown():
    return mgpu.as_gpu_kernel(body, grid=(2, 1, 1), block=(128, 1, 1), in_shape=spec,
                              out_shape=spec, smem_scratch_shape=scratch,
                              cluster=(2, 1, 1))


x = np.arange(2 * np.prod(TILE), dtype=np.float32).reshape(2, *TILE) % 61
report = check(build(), x)                                  # runs both CTAs on the CPU
print(report)
