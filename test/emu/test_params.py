"""Kernel parameters of any size (check/params.py), the parameter window
(``cvta.param``, check/addresses.py), tensor-map arguments (``TensorMap``), and the
maps ``tools/host_tma.py`` rebuilds from the host code of test/harness/tma_kernels.py."""

from __future__ import annotations

import re
import types

import numpy as np
import pytest

from mosaic_async_store.check import Memref, TensorMap, check_ptx
from mosaic_async_store.check import addresses, params
from mosaic_async_store.check.findings import Stop
from mosaic_async_store.check.interp import PtxKernel
from mosaic_async_store.errors import AsyncStoreError
from ptx_harness import outputs

# The tests read the machine's parameter words and tensor maps after a launch.
pytestmark = pytest.mark.no_check_cache


def test_parameters_are_laid_out_by_size_and_alignment():
  decls = (".param .u32 a, .param .u64 .ptr .global .align 1 b, "
           ".param .align 64 .b8 c[256], .param .u16 d, .param .b8 e[3], .param .u64 f, "
           ".param .align 16 .b32 g[3]")
  got = [(p.name, p.offset, p.size, p.align, p.maps) for p in params.parse(decls)]
  assert got == [("a", 0, 4, 4, 0), ("b", 8, 8, 8, 0), ("c", 64, 256, 64, 2),
                 ("d", 320, 2, 2, 0), ("e", 322, 3, 1, 0), ("f", 328, 8, 8, 0),
                 ("g", 336, 12, 16, 0)]


HEADER = """.version 8.6
.target sm_90a
.address_size 64
.visible .entry k(
  .param .align 64 .b8 k_param_0[256],
  .param .u64 .ptr .align 1 k_param_1,
  .param .u64 k_param_2
)
{
  .reg .pred %p<4>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<16>;
"""

# Thread 0 writes, into out (k_param_2): k_param_1 by ld.param, k_param_0's generic
# address (cvta.param), k_param_1 read through its generic address (generic ld), and
# through its .param address (mov of the symbol, then ld.param); then 7 into x[0]
# through k_param_1.
WINDOW = HEADER + """
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra END;
  ld.param.u64 %rd1, [k_param_1];
  ld.param.u64 %rd2, [k_param_2];
  mov.b64 %rd3, k_param_0;
  cvta.param.u64 %rd4, %rd3;
  mov.b64 %rd5, k_param_1;
  cvta.param.u64 %rd6, %rd5;
  ld.u64 %rd7, [%rd6];
  ld.param.u64 %rd8, [%rd5];
  cvta.to.param.u64 %rd9, %rd6;
  st.global.u64 [%rd2], %rd1;
  st.global.u64 [%rd2+8], %rd4;
  st.global.u64 [%rd2+16], %rd7;
  st.global.u64 [%rd2+24], %rd8;
  st.global.u64 [%rd2+32], %rd9;
  mov.u32 %r2, 7;
  st.global.u32 [%rd1], %r2;
END:
  ret;
}
"""


def _maps(x, y):
  return TensorMap.of(x, box=(8, 16)), TensorMap.of(y, box=(4, 8))


def test_words_after_a_map_block_and_the_parameter_window():
  x, y, out = np.zeros((8, 16), np.float32), np.ones((4, 8), np.int32), np.zeros(5, np.int64)
  a, b = _maps(x, y)
  kernel = PtxKernel(WINDOW)
  got = outputs(kernel, [a, b, x, out], cluster=1, smem_bytes=0, block=32)
  k = kernel.machine
  assert len(got) == 3   # x is one buffer: the map's array and the pointer alias
  words = got[2].view(np.int64).tolist()
  assert words == [1 << 40, addresses.PARAM_BASE, 1 << 40, 1 << 40, 256]   # k_param_1: 256
  assert k.tensor_maps == {0: a, 128: b}
  assert k.param_buf[:8] == b"ASTMAP01" and k.param_buf[128:136] == b"ASTMAP01"
  assert int.from_bytes(k.param_buf[8:16], "little") == 1 << 40    # a: buffer 0
  assert int.from_bytes(k.param_buf[136:144], "little") == 2 << 40  # b: buffer 1
  th = k.threads[0]
  assert addresses.tensor_map(k, th, addresses.PARAM_BASE) is a
  assert addresses.tensor_map(k, th, addresses.PARAM_BASE + 128) is b
  assert addresses.tensor_map(k, th, 128) is b   # a .param address
  with pytest.raises(Stop, match=r"no tensor map parameter starts at 0x100000040") as fault:
    addresses.tensor_map(k, th, addresses.PARAM_BASE + 64)
  assert fault.value.finding.rule == "fault", fault.value.finding
  with pytest.raises(NotImplementedError, match="global memory"):
    addresses.tensor_map(k, th, 1 << 40)


def test_arrays_that_are_one_object_are_one_buffer_in_the_outputs():
  x, y, out = np.zeros((8, 16), np.float32), np.ones((4, 8), np.int32), np.zeros(5, np.int64)
  a, b = _maps(x, y)
  report = check_ptx(WINDOW, [a, b, x, out], smem_bytes=0, block=(32, 1, 1))
  assert report.ok, str(report)
  map_out, _, x_out, _ = report.outputs
  assert map_out is x_out and x_out.view(np.int32).flat[0] == 7   # the store through x
  assert np.array_equal(report.outputs[1], y)
  assert x[0, 0] == 0   # the caller's array is not written
  assert params.buffer_slots([a, b, x, Memref(y), out]) == [0, 1, 0, 1, 2]


def test_a_mismatch_names_what_each_argument_makes():
  x, y, out = np.zeros((8, 16), np.float32), np.ones((4, 8), np.int32), np.zeros(5, np.int64)
  a, _ = _maps(x, y)
  with pytest.raises(AsyncStoreError, match=r"args=.*the arguments make 3 \(TensorMap: 128 "
                     r"bytes, array: 1, array: 1\).*k_param_0 \(\.b8\[256\].*needs 2 "
                     r"TensorMaps, argument 1 makes a word"):
    check_ptx(WINDOW, [a, x, out], smem_bytes=0, block=(32, 1, 1))
  with pytest.raises(AsyncStoreError, match=r"k_param_1 .*needs 1 8-byte word, argument 2 "
                     r"makes a TensorMap"):
    check_ptx(WINDOW, [a, a, a, out], smem_bytes=0, block=(32, 1, 1))
  with pytest.raises(TypeError, match=r"args\[0\]=.*TensorMap"):
    check_ptx(WINDOW, [[1], x, out], smem_bytes=0, block=(32, 1, 1))


@pytest.mark.parametrize("load", ["ld.u32 %r3, [%rd4+4];", "ld.param.u64 %rd5, [k_param_0+128];",
                                  "ld.param.v2.u32 {%r3, %r4}, [k_param_0+120];"])
def test_a_load_of_a_maps_bytes_is_refused(load):
  body = HEADER + f"""
  mov.b64 %rd3, k_param_0;
  cvta.param.u64 %rd4, %rd3;
  {load}
  ret;
}}
"""
  x, y, out = np.zeros((8, 16), np.float32), np.ones((4, 8), np.int32), np.zeros(5, np.int64)
  with pytest.raises(AsyncStoreError, match=r"reads the bytes of a tensor map parameter: "
                     r"the checker does not model the descriptor's encoding"):
    check_ptx(body, [*_maps(x, y), x, out], smem_bytes=0, block=(32, 1, 1))


# -- host_tma on test/harness/tma_kernels.py -----------------------------------------


def _lowered(maker):
  import tma_kernels
  from mosaic_async_store import compat
  from mosaic_async_store.tools import check_kernel
  from mosaic_async_store.tools.device_target import device_target
  from mosaic_async_store.tools.user_kernel import kernel_specs
  fn, args = getattr(tma_kernels, maker)()
  with compat.answer_device_queries(device_target("sm_90a")):
    specs, outs = kernel_specs(fn, args)
    mlir, ptx = check_kernel._lower(fn, specs)
  buffers = [np.array(a) for a in args] + [check_kernel._poisoned(o) for o in outs]
  return mlir, ptx, buffers


def _fields(tmap, buffers):
  return (next(i for i, b in enumerate(buffers) if b is tmap.array), tmap.offset,
          tmap.dtype, tmap.dims, tmap.strides, tmap.box, tmap.swizzle)


def _packs(ptx, arguments):
  """The PTX's own parameter list packs the arguments (no ParamMismatch)."""
  decls = re.search(r"\.entry\s+\w+\s*\((.*?)\)", re.sub(r"//[^\n]*", "", ptx), re.S)[1]
  program = types.SimpleNamespace(param_specs=params.parse(decls))
  return program.param_specs, params.pack(program, arguments)


@pytest.mark.parametrize("maker", ["tma_round_trip_lane", "tma_round_trip_warpgroup"])
def test_the_round_trips_map_is_the_input_tile(maker):
  from mosaic_async_store.tools import host_tma
  mlir, ptx, buffers = _lowered(maker)
  [tmap] = host_tma.tensor_maps(mlir, buffers)
  # x: (64, 128) f16, row-major: rows of 256 bytes; the box is the whole tile, unswizzled
  assert _fields(tmap, buffers) == (0, 0, "float16", (64, 128), (256, 2), (64, 128), 0)
  order = host_tma.launch_parameters(mlir, buffers)   # the block first, then out's memref
  assert [_fields(order[0], buffers), order[1:]] == [_fields(tmap, buffers), [1]]
  specs, packed = _packs(ptx, [tmap, Memref(buffers[1])])
  assert [(p.shown, p.offset) for p in specs[:2]] == [(".b8[128]", 0), (".u64", 128)]
  assert packed.tensor_maps == {0: tmap} and len(packed.gbufs) == 2


def test_the_multicast_copys_map_is_half_the_input_per_cta():
  from mosaic_async_store.tools import host_tma
  mlir, ptx, buffers = _lowered("multicast_copy")
  [tmap] = host_tma.tensor_maps(mlir, buffers)
  # x: 128 f32; each of the 2 CTAs loads 64 of them and multicasts them to both
  assert _fields(tmap, buffers) == (0, 0, "float32", (128,), (4,), (64,), 0)
  order = host_tma.launch_parameters(mlir, buffers)
  assert [_fields(order[0], buffers), order[1:]] == [_fields(tmap, buffers), [1]]
  _packs(ptx, [tmap, Memref(buffers[1])])


def test_the_pipelines_maps_are_one_block_of_two():
  from mosaic_async_store.tools import host_tma
  mlir, ptx, buffers = _lowered("pipelined_add")
  maps = host_tma.tensor_maps(mlir, buffers)
  # x, y: (256, 128) f32, read in (64, 128) blocks; the output is stored by a bulk copy
  assert [_fields(m, buffers) for m in maps] == [
      (i, 0, "float32", (256, 128), (512, 4), (64, 128), 0) for i in (0, 1)]
  order = host_tma.launch_parameters(mlir, buffers)
  assert [_fields(m, buffers) for m in order[:2]] == [_fields(m, buffers) for m in maps]
  assert order[2:] == [2]
  specs, packed = _packs(ptx, [*maps, Memref(buffers[2])])
  assert specs[0].shown == ".b8[256]" and packed.tensor_maps == {0: maps[0], 128: maps[1]}


def test_the_matmuls_maps_are_tiled_and_swizzled():
  from mosaic_async_store.tools import host_tma
  mlir, ptx, buffers = _lowered("wgmma_matmul")
  maps = host_tma.tensor_maps(mlir, buffers)
  # tiles of (8, 64) f16 (128 bytes: the 128-byte swizzle); a (rows, cols) array is
  # (rows / 8 tiles, cols / 64 tiles, 8, 64), unit dimensions dropped:
  # A (128, 64): (16, 8, 64), strides (8 * 64, 64, 1) elements
  # B (64, 128) and the output (128, 128): (rows / 8, 2, 8, 64), strides
  # (8 * 128, 64, 128, 1) elements
  want = [(0, (16, 8, 64), (1024, 128, 2)), (1, (8, 2, 8, 64), (2048, 128, 256, 2)),
          (2, (16, 2, 8, 64), (2048, 128, 256, 2))]
  assert [_fields(m, buffers) for m in maps] == [
      (i, 0, "float16", dims, strides, dims, 128) for i, dims, strides in want]
  order = host_tma.launch_parameters(mlir, buffers)
  assert [_fields(m, buffers) for m in order] == [_fields(m, buffers) for m in maps]
  specs, packed = _packs(ptx, maps)
  assert [p.shown for p in specs] == [".b8[384]"] and sorted(packed.tensor_maps) == [0, 128, 256]


def test_check_runs_a_kernel_on_the_tensor_maps_its_host_code_builds():
  """The maps rebuilt from the host code address the real buffers: the TMA round trip
  (load, +1, store) leaves x + 1 in its output."""
  import tma_kernels
  from mosaic_async_store.check import check
  fn, args = tma_kernels.tma_round_trip_lane()
  report = check(fn, *args, schedules=1)
  assert report.ok, str(report)
  np.testing.assert_array_equal(report.outputs[0], args[0] + np.float16(1))


def test_im2col_and_unknown_host_code_are_refused_by_name():
  from mosaic_async_store.tools import host_tma
  mlir, _, buffers = _lowered("tma_round_trip_lane")
  im2col = mlir.replace("call @mosaic_gpu_init_tma_desc(", "call @mosaic_gpu_init_tma_im2col_desc(")
  with pytest.raises(AsyncStoreError, match="mosaic_gpu_init_tma_im2col_desc"):
    host_tma.tensor_maps(im2col, buffers)
  first = re.search(r"\n(\s*)(%\w+ = )?llvm\.alloca", mlir)
  weird = mlir[:first.start()] + "\n" + first[1] + "some.op %arg1 : !llvm.ptr" + mlir[first.start():]
  with pytest.raises(AsyncStoreError, match=r"some\.op %arg1"):
    host_tma.tensor_maps(weird, buffers)
