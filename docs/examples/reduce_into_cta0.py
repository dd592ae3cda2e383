"""A user's two-CTA Pallas MGPU kernel: each CTA reduces its partial (64, 64) int32 tile
into CTA 0's shared memory, CTA 0 waits and writes the sum out.  ``make`` is correct;
the other functions are the classic mistakes.  Run them in the checker without a GPU:

    mosaic-async-store check docs/examples/reduce_into_cta0.py:make
    mosaic-async-store check docs/examples/reduce_into_cta0.py:no_cluster_barrier
    mosaic-async-store check docs/examples/reduce_into_cta0.py:wrong_arrival_count

(docs/check-your-kernel.md shows what each prints.)  It uses only public API (jax's
Pallas MGPU and ``mosaic_async_store.pallas``), the same on every supported jax.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
from jaxlib.mlir.dialects import nvvm

from mosaic_async_store import pallas as mas_pallas

SHAPE = (64, 64)


def _cluster_barrier():
  """Every thread of the cluster: its SMEM writes done before any peer reduces into them
  (fence for the asynchronous proxy, then barrier.cluster.arrive / wait)."""
  @plgpu.inline_mgpu()
  def sync(_):
    nvvm.fence_proxy(nvvm.ProxyKind.async_shared, space=nvvm.SharedSpace.shared_cta)
    nvvm.cluster_arrive(aligned=True)
    nvvm.cluster_wait(aligned=True)
  sync()


def _kernel(*, cluster_barrier=True, arrivals=2):
  def body(x_ref, o_ref, smem, bar):
    cta = jax.lax.axis_index("cluster")
    smem[...] = jnp.zeros(SHAPE, jnp.int32)                 # CTA 0 sums into zeros
    if cluster_barrier:
      _cluster_barrier()
    x = x_ref[cta]                                          # this CTA's partial tile
    mas_pallas.async_store_smem(x, smem, bar.at[0], cluster_idx=0, cluster_dim="cluster",
                                atomic="add")
    @pl.when(cta == 0)
    def _():
      plgpu.barrier_wait(bar.at[0])                         # both CTAs' stores landed
      o_ref[...] = smem[...]
  return plgpu.kernel(
      body, out_type=jax.ShapeDtypeStruct(SHAPE, jnp.int32), grid=(1,), grid_names=("g",),
      cluster=(2,), cluster_names=("cluster",),
      scratch_types=[plgpu.SMEM(SHAPE, jnp.int32),
                     plgpu.Barrier(num_arrivals=arrivals, num_barriers=1)],
      compiler_params=plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane))


def _inputs():
  return (np.random.default_rng(0).integers(-1000, 1000, (2, *SHAPE)).astype(np.int32),)


def make():
  return _kernel(), _inputs()


def no_cluster_barrier():
  """Mistake 1: CTA 1 reduces into CTA 0's SMEM while CTA 0 may still be zeroing it."""
  return _kernel(cluster_barrier=False), _inputs()


def wrong_arrival_count():
  """Mistake 3: the barrier counts one store per phase, but two CTAs store into CTA 0."""
  return _kernel(arrivals=1), _inputs()
