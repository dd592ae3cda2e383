"""``check(fn, *args)`` hands the kernel its operands in the kernel's order, not ``fn``'s
(tools/kernel_binding.py): a small array beside a TMA'd one, passed in another order
(upstream's ragged_dot launches ``kernel(group_sizes, lhs, rhs)``), computed by ``fn``
before the launch, or a result ``fn`` computes on or reorders.

The kernel: a 64x128 f32 tile in by TMA, plus ``shift[1]`` (``shift``: an 8-byte f32
array the threads read from global memory), out by TMA; with ``twice``, a second output
holding the tile plus ``2 * shift[1]``.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402

from mosaic_async_store import compat  # noqa: E402
from mosaic_async_store.errors import AsyncStoreError  # noqa: E402
from mosaic_async_store.tools import kernel_binding, user_kernel  # noqa: E402
from mosaic_async_store.tools.check_kernel import check  # noqa: E402
from mosaic_async_store.tools.device_target import device_target  # noqa: E402

_TILE = (64, 128)
_X = np.random.default_rng(0).integers(-3, 4, _TILE).astype(np.float32)
_SHIFT = np.array([5, 7], np.float32)


def _shift_kernel(twice: bool = False):
  def body(shift_ref, x_ref, *refs):
    *outs, smem, bar = refs
    plgpu.copy_gmem_to_smem(x_ref, smem, bar)
    plgpu.barrier_wait(bar)
    for o_ref in outs:
      smem[...] = smem[...] + shift_ref[1]
      plgpu.commit_smem()
      plgpu.copy_smem_to_gmem(smem, o_ref)
      plgpu.wait_smem_to_gmem(0, wait_read_only=True)   # (before smem is written again)
    plgpu.wait_smem_to_gmem(0)

  tile = jax.ShapeDtypeStruct(_TILE, jnp.float32)
  return plgpu.kernel(body, out_type=(tile, tile) if twice else tile,
                      scratch_types=[plgpu.SMEM(_TILE, jnp.float32), plgpu.Barrier()])


def _binding(fn, *arrays):
  with compat.answer_device_queries(device_target("sm_90a")):
    specs, _ = user_kernel.kernel_specs(fn, arrays)
    return kernel_binding.binding(str(user_kernel.lower_kernel(fn, specs)))


def test_check_hands_the_kernel_its_operands_in_its_own_order():
  """fn(x, shift) launches kernel(shift, x): before, the TMA descriptor of the kernel's
  operand 1 (x) was built over fn's argument 1 (the 8-byte shift) and refused ("a
  tensor inside the array's 8 bytes")."""
  kernel = _shift_kernel()
  fn = lambda x, shift: kernel(shift, x)
  assert _binding(fn, _X, _SHIFT) == kernel_binding.Binding((1, 0), (0,), 1)
  report = check(fn, _X, _SHIFT)
  assert report.ok, str(report)
  np.testing.assert_array_equal(report.outputs[0], _X + 7)


def test_check_returns_fns_outputs_in_fns_order():
  kernel = _shift_kernel(twice=True)
  fn = lambda shift, x: kernel(shift, x)[::-1]
  assert _binding(fn, _SHIFT, _X) == kernel_binding.Binding((0, 1), (1, 0), 2)
  report = check(fn, _SHIFT, _X)
  assert report.ok, str(report)
  assert len(report.outputs) == 2
  np.testing.assert_array_equal(report.outputs[0], _X + 14)
  np.testing.assert_array_equal(report.outputs[1], _X + 7)


@pytest.mark.parametrize("around, want, inputs, outputs", [
    (lambda k, x, s: k(s + 1, x), _X + 8, (-1, 0), (0,)),       # an operand computed
    (lambda k, x, s: k(s, x) * 2, (_X + 7) * 2, (1, 0), (-1,)),  # an output computed
], ids=["operand-computed", "output-computed"])
def test_check_runs_what_fn_computes_around_its_kernel_on_the_cpu(around, want, inputs,
                                                                  outputs):
  kernel = _shift_kernel()
  fn = lambda x, shift: around(kernel, x, shift)
  bound = _binding(fn, _X, _SHIFT)
  assert (bound.inputs, bound.outputs, bound.direct) == (inputs, outputs, False)
  report = check(fn, _X, _SHIFT)
  assert report.ok, str(report)
  np.testing.assert_array_equal(report.outputs[0], want)


def test_a_module_without_the_record_binds_in_order():
  assert kernel_binding.binding("module {\n}") is None
  assert kernel_binding.binding(
      "module attributes {mosaic_async_store.kernel_inputs = array<i64: 2, 0, 1>, "
      "mosaic_async_store.kernel_outputs = array<i64: 0>, "
      "mosaic_async_store.kernel_results = 1 : i64} {") == kernel_binding.Binding(
          (2, 0, 1), (0,), 1)


def test_a_descriptor_over_the_wrong_array_names_the_buffer():
  """The arrays in fn's order where the kernel takes another (what check did before):
  the refusal names the kernel's buffer and the array it was handed."""
  from mosaic_async_store.tools import host_tma
  kernel = _shift_kernel()
  fn = lambda x, shift: kernel(shift, x)
  with compat.answer_device_queries(device_target("sm_90a")):
    specs, _ = user_kernel.kernel_specs(fn, (_X, _SHIFT))
    mlir = str(user_kernel.lower_kernel(fn, specs))
  out = np.zeros(_TILE, np.float32)
  with pytest.raises(AsyncStoreError, match=r"over buffer 1 of the kernel .*float32 array "
                     r"of shape \(2,\)\): .*inside the array's 8 bytes"):
    host_tma.tensor_maps(mlir, [_X, _SHIFT, out])
  maps = host_tma.tensor_maps(mlir, [_SHIFT, _X, out])   # (the kernel's order: right)
  assert any(m.array is _X for m in maps), maps
  assert all(m.array is _X or m.array is out for m in maps), maps
