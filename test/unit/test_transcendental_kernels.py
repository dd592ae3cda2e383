"""Pallas kernels whose math lowers to the PTX approximations (``ex2.approx``,
``rcp.approx``, ``rsqrt.approx``), ``cvt.sat.f32.f32``, float ``setp`` and
``cvt.rn.f32.s32``, checked end to end with ``check(fn, *args)``: the checker runs
every instruction and leaves values NumPy agrees with, within the ISA's bound where one
instruction computes the result (ex2.approx: 2 ulp; rcp.rn: exact), and within a few
f32 units where libdevice-style sequences around the approximations do (exp, tanh,
log, sigmoid).  ``sin`` / ``cos`` lower to a range reduction through
``cvt.rni.s32.f32`` with an f64 slow path (``cvt.rn.f32.f64``): refused by name, so not
here.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402

from mosaic_async_store.check import check  # noqa: E402
from mosaic_async_store.errors import AsyncStoreError  # noqa: E402
from mosaic_async_store.tools import user_kernel  # noqa: E402

_N = 512   # 4 elements per thread of one warpgroup


def _elementwise(f):
  def body(x_ref, o_ref):
    o_ref[...] = f(x_ref[...])
  return jax.jit(plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((_N,), jnp.float32)))


def _inputs(lo, hi, extra=(), seed=0, log=False):
  rng = np.random.default_rng(seed)
  x = np.exp(rng.uniform(np.log(lo), np.log(hi), _N)) if log else rng.uniform(lo, hi, _N)
  x = x.astype(np.float32)
  x[:len(extra)] = extra
  return x


def _f32_ulps(got, want):
  """|got - want| in f32 units in the last place of want (want: float64)."""
  spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
  return np.abs(got.astype(np.float64) - want) / spacing


# name -> (function, inputs, the instructions its PTX must hold, NumPy in float64,
#          the largest error allowed in f32 ulps (0: bit-exact))
_KERNELS = {
    "exp": (jnp.exp, _inputs(-80, 80, (0.0, -0.0, 1.0, -1.0, 1e-30)),
            ("ex2.approx.ftz.f32", "cvt.sat.f32.f32", "fma.rm.f32"), np.exp, 4),
    "tanh": (jnp.tanh, _inputs(-10, 10, (0.0, -0.0, 0.5, -0.59, 0.61, 9.0, -20.0, 1e-30)),
             ("ex2.approx.ftz.f32", "rcp.approx.ftz.f32", "setp.ge.f32"), np.tanh, 4),
    "exp2": (jnp.exp2, _inputs(-120, 120, (0.0, -0.0, 0.5, -126.5)),
             ("ex2.approx.f32",), np.exp2, 2),
    "reciprocal": (lambda x: 1 / x, _inputs(-1e6, 1e6, (1.0, -3.0, 1e-30, 7.0)),
                   ("rcp.rn.f32",), lambda x: 1 / x, 0),
    "rsqrt": (jax.lax.rsqrt, _inputs(1e-30, 1e30, (1.0, 4.0, 2.0), log=True),
              ("rsqrt.approx.f32",), lambda x: 1 / np.sqrt(x), 2),
    "log": (jnp.log, _inputs(1e-30, 1e30, (1.0, 2.0, 0.5, 1e-37), log=True),
            ("cvt.rn.f32.s32", "setp.lt.f32"), np.log, 4),
    "sigmoid": (jax.nn.sigmoid, _inputs(-30, 30, (0.0, 2.0, -2.0)),
                ("ex2.approx.ftz.f32", "cvt.sat.f32.f32"),   # (then rcp.rn or div.rn: by jax)
                lambda x: 1 / (1 + np.exp(-x)), 4),
}


@pytest.mark.parametrize("name", list(_KERNELS))
def test_check_runs_a_transcendental_kernel_and_numpy_agrees(name):
  f, x, instructions, reference, max_ulps = _KERNELS[name]
  fn = _elementwise(f)
  ptx = user_kernel.compile_kernel(fn, x, arch="sm_90a").ptx
  for instruction in instructions:   # (what the test is about: the kernel must use them)
    assert instruction in ptx, (name, instruction)
  report = check(fn, x)
  assert report.ok, str(report)
  (got,) = report.outputs
  got = np.asarray(got).view(np.float32).reshape(_N)
  want = reference(x.astype(np.float64))
  if max_ulps == 0:
    np.testing.assert_array_equal(got, want.astype(np.float32))
  else:
    ulps = _f32_ulps(got, want)
    assert ulps.max() <= max_ulps, (name, x[ulps.argmax()], got[ulps.argmax()], ulps.max())
  zeros = [i for i in range(8) if x[i] == 0]   # the sign of a zero result is the function's
  assert all(np.signbit(got[i]) == np.signbit(want[i]) for i in zeros if want[i] == 0)


def test_a_kernel_whose_approximation_meets_a_nan_is_refused_by_name():
  """rsqrt of a negative value is NaN, whose bit pattern the ISA does not fix: refused,
  naming the instruction and the value, not run with a made-up NaN."""
  x = _inputs(1, 2)
  x[5] = -4.0
  with pytest.raises(AsyncStoreError, match=r"rsqrt\.approx\.f32 of a negative value \(-4\.0\)"):
    check(_elementwise(jax.lax.rsqrt), x)


def test_sin_is_refused_by_the_instruction_it_reaches():
  """jnp.sin's range reduction converts to an integer (``cvt.rni.s32.f32``) and has an
  f64 slow path: not run, so the kernel is refused naming the instruction, not run
  with a guess."""
  with pytest.raises(AsyncStoreError, match=r"cvt\.rni\.s32\.f32|cvt\.rn\.f32\.f64"):
    check(_elementwise(jnp.sin), _inputs(-3, 3))
