"""An exception jax raises on a user's kernel's behalf, with no frame of the user's in its
traceback, as ``check`` and ``compile_kernel`` report it: in one line, naming ``fn`` when
the kernel's declaration is wrong (jax building the refs it declares: a
``SwizzleTransform(64)`` on an (8, 32) f32 ``TilingTransform`` spans 128 bytes, not 64),
``args`` when the arrays do not fit the kernel, and in both the user's line that led there:
the line that called jax, else the definition of the kernel's body.

The kernels below are the user's: each marked line (``# <name>``) is where the test
expects the report to point."""

import os
import pathlib

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402

from mosaic_async_store.check import check  # noqa: E402
from mosaic_async_store.errors import AsyncStoreError  # noqa: E402
from mosaic_async_store.tools import user_kernel  # noqa: E402

HERE = pathlib.Path(__file__).resolve()
SHAPE = (64, 64)
# 32 f32 elements are 128 bytes: SwizzleTransform(64) needs a trailing dim of 16.
BAD = (plgpu.TilingTransform((8, 32)), plgpu.SwizzleTransform(64))
GOOD = (plgpu.TilingTransform((8, 32)), plgpu.SwizzleTransform(128))
LANE = plgpu.CompilerParams(lowering_semantics=plgpu.LoweringSemantics.Lane)


def _line(marker: str) -> str:
  """``FILE:LINE`` of this file's line that carries ``# <marker>``."""
  lines = HERE.read_text().splitlines()
  [n] = [i + 1 for i, text in enumerate(lines) if text.rstrip().endswith(f"# <{marker}>")]
  return f"{HERE}:{n}"


def _scratch_kernel(transforms):
  """A plgpu.kernel whose SMEM scratch carries ``transforms``."""
  def body(x_ref, o_ref, smem):  # <body>
    o_ref[...] = x_ref[...]
  return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(SHAPE, jnp.float32), grid=(1,),
                      grid_names=("g",), compiler_params=LANE,
                      scratch_types=[plgpu.SMEM(SHAPE, jnp.float32, transforms=transforms)])


def _block_spec_kernel(x):
  """A function calling pl.pallas_call whose input BlockSpec carries ``BAD``."""
  def body(x_ref, o_ref):
    o_ref[...] = x_ref[...]
  return pl.pallas_call(  # <call>
      body, out_shape=jax.ShapeDtypeStruct(SHAPE, jnp.float32), compiler_params=LANE,
      in_specs=[plgpu.BlockSpec(SHAPE, lambda: (0, 0), transforms=BAD)])(x)


def _x():
  return np.ones(SHAPE, np.float32)


def _refusal(entry, fn, *args):
  with pytest.raises(AsyncStoreError) as err:
    if entry == "check":
      check(fn, *args, schedules=1)
    else:
      user_kernel.compile_kernel(fn, *args)
  message = str(err.value)
  assert "\n" not in message and "Traceback" not in message, message
  assert "/mosaic_async_store/" not in message, message
  return err.value, message


ENTRIES = ["check", "compile_kernel"]
JAX_SAYS = ("ValueError: Swizzle 64 requires the trailing dimension to be of size 16, but "
            "got shape: ")


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_swizzle_that_does_not_fit_the_scratch_tiling_is_fns_at_the_body(entry):
  """No frame of the user's runs: jax raises while it allocates the scratch, before the
  body; the report names ``fn`` (not the arrays, which fit) and the body's definition."""
  error, message = _refusal(entry, _scratch_kernel(BAD), _x())
  assert error.param == "fn"
  assert message.startswith(f"fn=code that raised {JAX_SAYS}("), message
  assert message.endswith(") is not supported: allowed code that runs. Fix: fix the kernel "
                          f"defined at {_line('body')} (body)"), message


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_block_spec_transform_that_does_not_fit_is_fns_at_the_pallas_call(entry):
  """The user's line that called jax is in the traceback: the report names it."""
  error, message = _refusal(entry, _block_spec_kernel, _x())
  assert error.param == "fn", message
  assert message.startswith(f"fn=code that raised {JAX_SAYS}("), message
  assert message.endswith(f"Fix: fix the kernel at {_line('call')} (in _block_spec_kernel: "
                          "return pl.pallas_call(  # <call>)"), message


def test_an_array_the_kernel_does_not_take_is_still_args_at_the_body():
  """An array too many: jax passes the body a ref it does not take (a TypeError with no
  frame of the user's); the arrays are refused, naming the body's definition."""
  error, message = _refusal("check", _scratch_kernel(GOOD), _x(), _x())
  assert error.param == "args", message
  assert message.startswith("args=['float32[64, 64]', 'float32[64, 64]'] is not supported: "
                            "allowed the shapes and dtypes the kernel takes. Fix: jax says "
                            f"(of the kernel defined at {_line('body')} (body)): "), message


def test_a_lowering_error_with_no_user_frame_names_the_body():
  """jax's lowering raising where no frame of the user's is known (a traceback of jax's
  alone): the refusal of ``fn`` still names the kernel's body."""
  from mosaic_async_store.tools import kernel_errors
  error = NotImplementedError("a layout jax does not lower").with_traceback(None)
  refusal = kernel_errors.from_lowering(error, _scratch_kernel(GOOD), "<kernel wrapper>")
  assert str(refusal) == ("fn=<kernel wrapper> is not supported: allowed a kernel that jax "
                          "lowers for a GPU. Fix: jax's lowering says: NotImplementedError: a "
                          "layout jax does not lower (in the kernel defined at "
                          f"{_line('body')} (body))")
