"""Upstream JAX's own cluster-store GPU tests, rebuilt on the CPU for the PTX interpreter.

Source: jax-ml/jax at tag jax-v0.10.2 (commit 990e6a0b84138346e6a38785412f36356e0e5dc3),
tests/mosaic/gpu_test.py: ``test_cluster_ref_write`` and ``test_cluster_red_async``
(all seven parameterisations).  Both pass on sm_90 hardware, so they calibrate the
interpreter and its protocol checker against known behaviour.  The kernels are built
here the way those tests build them (the same mgpu calls, shapes, dtypes, WGMMA layout,
swizzle 128, 2-CTA cluster, barriers and waits), through upstream's module builder
(``compat.kernel_to_module``, what ``mgpu.as_gpu_kernel`` calls), and compiled to PTX
by the deviceless toolchain.  Each comes with upstream's host inputs and the outputs
upstream's test asserts.

How the launch geometry is read from the module rather than assumed:
  * SMEM bytes: the ``dynamicSharedMemorySize`` operand of the ``gpu.launch`` op, a
    constant (Mosaic's own total of the scratch buffers and barriers, e.g. 8200 =
    the 8 KiB tile + one 8-byte mbarrier for test_cluster_ref_write).
  * parameter order: Mosaic passes each buffer into the launch body as a memref
    (tagged ``mosaic_gpu.from_kernel_arg_idx``: 0 = src, 1 = dst); the outliner
    (``gpu-kernel-outlining``) makes the captured values kernel parameters in the
    order in which a post-order walk of the launch body first uses them (MLIR's
    ``getUsedValuesDefinedAbove``).  Each memref becomes a descriptor of
    3 + 2 * rank 8-byte parameters (allocated and aligned pointers, offset, sizes,
    strides); ``_check_params`` checks that the PTX's ``.entry`` says exactly that.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jaxlib.mlir import ir  # noqa: E402
from jaxlib.mlir.dialects import arith, gpu  # noqa: E402

from mosaic_async_store import compat
from mosaic_async_store.tools import toolchain  # noqa: E402

__all__ = ["UpstreamKernel", "REDUCTIONS", "cluster_ref_write", "cluster_red_async",
           "all_kernels"]

GRID = CLUSTER = (2, 1, 1)   # one cluster of two CTAs is the whole grid
BLOCK = (128, 1, 1)          # one warpgroup
SWIZZLE = 128
# test_cluster_red_async's parameters: (op, is_signed); every one compiles on 0.10.2.
REDUCTIONS = (("add", False), ("add", True), ("min", False), ("max", False),
              ("and", False), ("or", False), ("xor", False))


@dataclasses.dataclass(frozen=True)
class UpstreamKernel:
  """One calibration kernel, ready for ``PtxKernel(ptx).launch``.

  Attributes:
    name: the upstream test (and parameters) it reproduces.
    ptx: its PTX from the deviceless toolchain.
    args: host buffers in kernel-parameter order, each passed as a memref descriptor
      (wrap each in ``mosaic_async_store.check.Memref``); ``dst`` is poisoned with 0xA5 bytes.
    arg_names: "src" / "dst" for each entry of ``args``.
    expected: name -> the contents upstream's test asserts after the kernel.
    cluster, block, smem_bytes: the launch, from the module (module docstring).
    waits: every ``mbarrier.try_wait`` instruction of the PTX, as emitted.
  """

  name: str
  ptx: str
  args: tuple[np.ndarray, ...]
  arg_names: tuple[str, ...]
  expected: dict
  cluster: int
  block: int
  smem_bytes: int
  waits: tuple[str, ...]

  def result(self, outputs, name="dst"):
    """The buffer ``name`` out of ``launch``'s uint8 outputs, with its dtype and shape."""
    i = self.arg_names.index(name)
    return outputs[i].view(self.args[i].dtype).reshape(self.args[i].shape)


# -- the two upstream test kernels ------------------------------------------------


def _load_own_tile(src, cta, **kwargs):
  """This CTA's (8, 1, 8, 32) slice of ``src`` in registers, WGMMA layout, read through
  swizzle 128: upstream's test loads with ``optimized=False``."""
  mgpu, utils = compat.mosaic_gpu(), compat.mosaic_utils()
  return mgpu.FragmentedArray.load_tiled(utils.memref_slice(src, cta), layout=mgpu.WGMMA_LAYOUT,
                                         swizzle=SWIZZLE, optimized=False, **kwargs)


def _bytes_per_thread(value):
  """What each of the 128 threads announces: the whole tile's bytes / 128."""
  return math.prod(value.shape) * compat.mosaic_gpu().bitwidth(value.mlir_dtype) // 8 // 128


def _peer_of_this_cta():
  """(this CTA's index along x, the other CTA's: 1 - index)."""
  index = ir.IndexType.get()
  cta = gpu.cluster_block_id(gpu.Dimension.x)
  return cta, arith.subi(arith.constant(index, 1), cta)


def _ref_write_body(ctx, src, dst, scratch):
  """Each CTA stores its tile into the peer's SMEM with st.async; every thread
  arrives on the *peer's* barrier announcing its bytes, then waits on its own."""
  del ctx
  mgpu, utils = compat.mosaic_gpu(), compat.mosaic_utils()
  tile, barrier = scratch
  cta, peer = _peer_of_this_cta()
  value = _load_own_tile(src, cta)
  barrier.remap_to_cluster(gpu.Dimension.x, peer).arrive_expect_tx(_bytes_per_thread(value))
  value.store_tiled_async(tile, barrier, cluster_dim=gpu.Dimension.x, cluster_idx=peer,
                          swizzle=SWIZZLE)
  barrier.wait()
  mgpu.FragmentedArray.load_strided(tile).store_untiled(utils.memref_slice(dst, cta))


def _identity(op, dtype):
  """The value upstream's kernel fills the SMEM tile with before reducing into it
  (for "and" it writes -1, i.e. all ones, into the unsigned tile)."""
  info = np.iinfo(dtype)
  return {"add": 0, "or": 0, "xor": 0, "min": info.max, "max": info.min, "and": -1}[op]


def _red_async_body(op, signed, dtype):
  def body(ctx, src, dst, scratch):
    """Each CTA fills its tile with the identity, syncs the cluster, arrives on its
    *own* barrier announcing the bytes the peer will reduce into it, reduces its
    registers into the peer's tile with red.async, waits, syncs the cluster again."""
    del ctx
    mgpu, utils = compat.mosaic_gpu(), compat.mosaic_utils()
    tile, barrier, cluster_barrier = scratch
    cta, peer = _peer_of_this_cta()
    value = _load_own_tile(src, cta, is_signed=signed)
    fill = utils.c(_identity(op, dtype), utils.dtype_to_ir_type(dtype))
    mgpu.FragmentedArray.splat(fill, value.shape, is_signed=signed,
                               layout=value.layout).store_tiled(tile, swizzle=SWIZZLE)
    cluster_barrier.arrive()
    cluster_barrier.wait()
    barrier.arrive_expect_tx(_bytes_per_thread(value))
    value.store_tiled_async(tile, barrier, cluster_dim=gpu.Dimension.x, cluster_idx=peer,
                            swizzle=SWIZZLE, atomic=op)
    barrier.wait()
    cluster_barrier.arrive()
    cluster_barrier.wait()
    mgpu.FragmentedArray.load_strided(tile, is_signed=signed).store_untiled(
        utils.memref_slice(dst, cta))
  return body


# -- building, and reading the launch off the module --------------------------------


def _walk(op):
  """Post-order over the operations nested in ``op`` (MLIR's default walk order)."""
  for region in op.regions:
    for block in region.blocks:
      for inner in block.operations:
        yield from _walk(inner.operation)
  yield op


def _launch_geometry(module):
  """(dynamic SMEM bytes, [kernel argument index of each captured memref, in
  parameter order], [their ranks]) of the module's one ``gpu.launch``."""
  ops = list(_walk(module.operation))
  launches = [op for op in ops if op.name == "gpu.launch"]
  assert len(launches) == 1, f"{len(launches)} gpu.launch ops"
  launch = launches[0]
  smem = launch.opview.dynamicSharedMemorySize.owner.attributes["value"].value
  buffers = {}   # the memref value (ir.Values hash as the MLIR value) -> (index, rank)
  for op in ops:
    if "mosaic_gpu.from_kernel_arg_idx" in op.attributes:
      buffers[hash(op.results[0])] = (op.attributes["mosaic_gpu.from_kernel_arg_idx"].value,
                                      ir.MemRefType(op.results[0].type).rank)
  order = []
  for op in _walk(launch):   # (the launch's own operands are sizes, not memrefs)
    for operand in op.operands:
      found = buffers.get(hash(operand))
      if found is not None and found not in order:
        order.append(found)
  return smem, [i for i, _ in order], [r for _, r in order]


def _check_params(ptx, ranks):
  """The ``.entry`` must take exactly one descriptor per captured memref, each
  starting with its two pointer parameters (``.ptr``)."""
  entry = re.search(r"\.entry\s+\w+\s*\((.*?)\)", ptx, re.S).group(1)
  params = [p.strip() for p in entry.split(",")]
  want = sum(3 + 2 * r for r in ranks)
  assert len(params) == want, f"{len(params)} kernel parameters, descriptors make {want}"
  start = 0
  for r in ranks:
    assert all(".ptr" in p for p in params[start:start + 2]), params[start:start + 2]
    assert not any(".ptr" in p for p in params[start + 2:start + 3 + 2 * r])
    start += 3 + 2 * r


def _build(name, body, x, scratch_of, expected):
  """Builds ``body`` like upstream's ``as_gpu_kernel(body, GRID, BLOCK, x, x, scratch,
  cluster=CLUSTER)`` and returns the UpstreamKernel."""
  mgpu = compat.mosaic_gpu()
  with compat.make_ir_context(), ir.Location.unknown():
    module, *_ = compat.kernel_to_module(body, GRID, BLOCK, x, x, scratch_of(mgpu),
                                         cluster=CLUSTER)
    smem_bytes, order, ranks = _launch_geometry(module)
    assert sorted(order) == [0, 1], f"the launch body uses buffers {order}, not src and dst"
    ptx = toolchain.compile_module(module).ptx
  _check_params(ptx, ranks)
  poisoned_dst = np.full(x.nbytes, 0xA5, np.uint8).view(x.dtype).reshape(x.shape)
  host = {0: ("src", x), 1: ("dst", poisoned_dst)}   # unwritten elements show
  waits = tuple(" ".join(w.split()) for w in re.findall(r"mbarrier\.try_wait[^;]*;", ptx))
  return UpstreamKernel(name, ptx, tuple(host[i][1] for i in order),
                        tuple(host[i][0] for i in order), expected, math.prod(CLUSTER),
                        math.prod(BLOCK), smem_bytes, waits)


@functools.lru_cache(maxsize=None)
def cluster_ref_write() -> UpstreamKernel:
  """test_cluster_ref_write: f32 (2, 8, 1, 8, 32); CTA c ends up with the peer's tile."""
  x = np.arange(2 * 64 * 32, dtype=np.float32).reshape(2, 8, 1, 8, 32)
  tile = jax.ShapeDtypeStruct(shape=x.shape[1:], dtype=jnp.float32)
  return _build("cluster_ref_write", _ref_write_body, x,
                lambda mgpu: (tile, mgpu.Barrier(arrival_count=128)),
                {"dst": np.flip(x, axis=0)})


@functools.lru_cache(maxsize=None)
def cluster_red_async(op: str, signed: bool) -> UpstreamKernel:
  """test_cluster_red_async(op, is_signed): (u)int32 1..4096; CTA c ends up with
  op(identity, the peer's tile), checked per CTA as upstream does."""
  dtype = np.int32 if signed else np.uint32
  x = np.arange(1, 2 * 64 * 32 + 1, dtype=dtype).reshape(2, 8, 1, 8, 32)
  tile = jax.ShapeDtypeStruct(shape=x.shape[1:], dtype=dtype)
  np_op = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and,
           "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
  # Upstream's host-side identity for "and" is iinfo.max (all ones only when unsigned,
  # which is the only "and" case it runs).
  identity = np.iinfo(dtype).max if op == "and" else _identity(op, dtype)
  ident = np.full_like(x[0], identity, dtype=dtype)
  want = np.stack([np_op(ident, x[1]), np_op(ident, x[0])])

  def scratch(mgpu):
    return (tile, mgpu.Barrier(arrival_count=128),
            mgpu.ClusterBarrier(collective_dims=(gpu.Dimension.x,)))
  return _build(f"cluster_red_async[{op}-{'signed' if signed else 'unsigned'}]",
                _red_async_body(op, signed, dtype), x, scratch, {"dst": want})


def all_kernels() -> list[UpstreamKernel]:
  return [cluster_ref_write()] + [cluster_red_async(op, s) for op, s in REDUCTIONS]
