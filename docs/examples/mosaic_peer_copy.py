"""A Mosaic GPU kernel (``mgpu.as_gpu_kernel``, Lane semantics) that stores with
``mas.async_store``: two CTAs of a cluster swap their (64, 128) f32 tiles.  Each CTA
loads its tile into registers, stores it into the other CTA's shared memory, waits on
its own barrier for the other's tile, and writes it out: out[c] == x[1 - c].

Building the kernel needs an MLIR context with jax's dialects and a location (upstream
builds the module when ``as_gpu_kernel`` is called); checking and compiling it need
neither, nor a GPU:

    python docs/examples/mosaic_peer_copy.py
    mosaic-async-store check docs/examples/mosaic_peer_copy.py:make
    mosaic-async-store compile docs/examples/mosaic_peer_copy.py:make --emit stats
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.mosaic import gpu as mgpu
from jax.interpreters import mlir
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, gpu

import mosaic_async_store as mas

TILE = (64, 128)


def body(ctx, x, out, scratch):
  smem, barrier = scratch
  cta = gpu.cluster_block_id(gpu.Dimension.x)              # 0 or 1 (an index)
  peer = arith.subi(arith.constant(ir.IndexType.get(), 1), cta)
  tile = mgpu.FragmentedArray.load_strided(mgpu.memref_slice(x, cta))
  mas.async_store(tile, smem, barrier[0], cluster_dim=gpu.Dimension.x, cluster_idx=peer)
  mas.wait(barrier[0])                                       # the peer's tile has landed
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


def make():
  """For the command line: the kernel and its inputs."""
  x = np.arange(2 * np.prod(TILE), dtype=np.float32).reshape(2, *TILE)
  return build(), (x,)


if __name__ == "__main__":
  from mosaic_async_store.check import check
  from mosaic_async_store.tools.user_kernel import compile_kernel

  kernel, (x,) = make()
  report = check(kernel, x)                          # runs both CTAs on the CPU
  print(report)                                      # ok: no rule broken ...
  assert np.array_equal(report.outputs[0], x[::-1])  # each CTA got the other's tile
  compiled = compile_kernel(kernel, x, arch="sm_90a")
  print(compiled.stats.asynchronous)                 # st.async, mbarrier arrive/wait, ...
