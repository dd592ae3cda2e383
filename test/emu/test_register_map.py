"""Our register map agrees with upstream's layout semantics, for every shipped layout.

``geometry.register_map`` says which logical element each thread's register
holds.  Every store plan rests on it, and the store tests load their registers
through it, so a wrong map would be self-consistent there.  Here upstream is
the reference: a kernel evaluates upstream's ``TiledLayout.thread_idxs`` (the
index of each register's first element, as Mosaic computes it on the GPU) and
writes it to global memory; the PTX interpreter runs it for all 128 threads,
and the result must equal our map.
"""


import numpy as np
import pytest

from mosaic_async_store import compat
from mosaic_async_store.tools import toolchain
from mosaic_async_store.demo.config import resolve_layout
from mosaic_async_store.plan.geometry import register_map

from ptx_harness import output

# (layout name, shape): each shipped TiledLayout at a shape that is a small
# multiple of its base tile; replicated layouts included.
CASES = [("WGMMA", (64, 16)), ("WGMMA_8BIT", (64, 32)), ("WGMMA_UPCAST_2X", (64, 32)),
         ("WGMMA_UPCAST_4X", (64, 64)), ("WGMMA_TRANSPOSED", (64, 16)),
         ("WGMMA_ACC_32BIT", (64, 16)), ("TCGEN05", (128, 16)),
         ("TCGEN05_TRANSPOSED", (128, 16)), ("TMEM_NATIVE_V1", (128, 2)),
         ("TMEM_NATIVE_V2", (128, 4)), ("TMEM_NATIVE_V4", (128, 8)),
         ("TMEM_NATIVE_V8", (128, 16)), ("WGMMA_ROW", (64,)), ("WGMMA_COL", (16,)),
         ("TCGEN05_ROW", (128,)), ("TCGEN05_COL", (16,))]


def _thread_idxs_ptx(layout, shape, num_regs):
  """PTX of a kernel: out[tid * num_regs + r] = linear index of register r's element 0."""
  import jax
  import jax.numpy as jnp
  from jaxlib.mlir import ir
  from jaxlib.mlir.dialects import arith, gpu, llvm
  utils = compat.mosaic_utils()
  strides = [int(np.prod(shape[k + 1:])) for k in range(len(shape))]

  def body(ctx, src_ref, out_ref, scratch):
    del ctx, src_ref, scratch
    i32 = ir.IntegerType.get_signless(32)
    tid = arith.index_cast(i32, gpu.thread_id(gpu.Dimension.x))
    base = arith.muli(tid, arith.constant(i32, num_regs))
    for r, idx in enumerate(layout.thread_idxs(tuple(shape))):
      linear = arith.constant(i32, 0)
      for i, s in zip(idx, strides):
        linear = arith.addi(linear, arith.muli(arith.index_cast(i32, i),
                                               arith.constant(i32, s)))
      off = arith.muli(arith.addi(base, arith.constant(i32, r)), arith.constant(i32, 4))
      llvm.store(linear, utils.getelementptr(utils.memref_ptr(out_ref), [off],
                                             ir.IntegerType.get_signless(8)))

  src = jax.ShapeDtypeStruct((4,), jnp.int32)
  out = jax.ShapeDtypeStruct((128 * num_regs,), jnp.int32)
  with compat.make_ir_context(), ir.Location.unknown():
    module, *_ = compat.kernel_to_module(body, (1, 1, 1), (128, 1, 1), (src,), out, ())
    return toolchain.compile_module(module).ptx


def upstream_first_elements(layout, shape, num_regs) -> np.ndarray:
  """[thread, register] -> upstream's linear index of the register's first element."""
  ptx = _thread_idxs_ptx(layout, shape, num_regs)
  out0 = np.full(128 * num_regs, -1, np.int32)
  out = output(ptx, [out0], np.int32, cluster=1, smem_bytes=0)  # src is unused: no param
  return out.reshape(128, num_regs)


@pytest.mark.parametrize("name,shape", CASES, ids=[f"{n}{list(s)}" for n, s in CASES])
def test_register_map_matches_upstream_thread_idxs(name, shape):
  layout = resolve_layout(name, shape, "float32")
  regs = register_map(layout, shape)
  got = upstream_first_elements(layout, shape, regs.num_registers)
  want = regs.elements[:, :, 0]
  bad = np.argwhere(got != want)
  assert bad.size == 0, (f"{len(bad)} registers differ; first (thread, register) "
                         f"{bad[:4].tolist()}: upstream {got[tuple(bad[0])]}, "
                         f"ours {want[tuple(bad[0])]}")


def _hand_built():
  from test_custom_layouts import LAYOUTS  # test/unit: permuted warp/lane dims
  return LAYOUTS[::3]


@pytest.mark.parametrize("base,layout", _hand_built(), ids=lambda v: str(v)[:60])
def test_register_map_matches_upstream_for_hand_built_layouts(base, layout):
  shape = (base[0], base[1] * 2)
  regs = register_map(layout, shape)
  got = upstream_first_elements(layout, shape, regs.num_registers)
  assert np.array_equal(got, regs.elements[:, :, 0])


def test_a_wrong_map_is_caught():
  layout = resolve_layout("WGMMA", (64, 16), "float32")
  regs = register_map(layout, (64, 16))
  got = upstream_first_elements(layout, (64, 16), regs.num_registers)
  swapped = regs.elements[np.arange(128) ^ 1, :, 0]   # lanes 2k and 2k+1 exchanged
  assert not np.array_equal(got, swapped)
