"""A user's kernels through the deviceless toolchain, ``check`` and the CLI: TMA, bulk
copies, multicast, WGMMA, pipelines and upstream's production kernels
(test/harness/tma_kernels.py) compile to SASS for sm_90a (and sm_100a, WGMMA aside:
refused by name), ``check`` runs them, and every bad input is one ``error:`` line with
exit status 2."""

import functools
import pathlib
import re
import textwrap

import numpy as np
import pytest

import tma_kernels
from mosaic_async_store import compat
from mosaic_async_store.check import check, check_ptx
from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.tools import cli, toolchain, user_kernel

HARNESS = pathlib.Path(tma_kernels.__file__)


@functools.cache
def _made(name):
  return tma_kernels.ALL[name]()


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("name", list(tma_kernels.ALL))
def test_kernel_compiles_to_sass(name, arch):
  fn, args = _made(name)
  if name in tma_kernels.WGMMA and arch != "sm_90a":
    with pytest.raises(AsyncStoreError, match=r"(?i)wgmma.*arch='sm_90a'"):
      user_kernel.compile_kernel(fn, *args, arch=arch)
    return
  compiled = user_kernel.compile_kernel(fn, *args, arch=arch)
  assert re.search(r"\.param \.align 64 \.b8 \w+_param_0\[\d+\]", compiled.ptx)
  assert "cvta.param.u64" in compiled.ptx
  kinds = compiled.stats.asynchronous
  assert kinds.get("TMA load", 0) + kinds.get("TMA load multicast", 0) >= 1, kinds
  assert re.search(r"UTMALDG\.\dD", compiled.sass)
  if name in tma_kernels.WGMMA:
    assert kinds["WGMMA"] >= 1 and "HGMMA" in compiled.sass
  if name in tma_kernels.SETMAXNREG:
    assert ".minnctapersm 1" in compiled.ptx and kinds["setmaxnreg"] == 2
    assert "USETMAXREG.DEALLOC" in compiled.sass and "USETMAXREG.TRY_ALLOC" in compiled.sass
  else:
    assert ".minnctapersm" not in compiled.ptx   # only setmaxnreg kernels get it
  if name == "multicast_copy":
    assert kinds["TMA load multicast"] == 1


@pytest.mark.long
@pytest.mark.parametrize("name", [n for n in tma_kernels.ALL if n not in tma_kernels.WGMMA])
def test_check_runs_the_tma_kernels(name):
  """Every kernel without WGMMA runs in the checker (TMA loads and stores, bulk groups,
  a pipeline, multicast, warp specialisation) and leaves the values NumPy computes (the
  WGMMA kernels: test/emu/test_wgmma_kernels.py)."""
  fn, args = _made(name)
  report = check(fn, *args)
  assert report.ok, str(report)
  want = tma_kernels.EXPECTED[name](*args)
  assert len(report.outputs) == len(want)
  for got, w in zip(report.outputs, want):
    np.testing.assert_array_equal(got, w)


def test_check_ptx_refuses_a_run_time_case_it_does_not_model():
  """A NaN result is the checker's limit, not the kernel's fault: refused, not filed."""
  from ptx_harness import kernel
  ptx = kernel("""
  ld.param.u64 %rd1, [k_param_0];
  ld.global.b32 %r3, [%rd1];
  add.f32 %r5, %r3, %r3;
  setp.eq.u32 %p1, %r1, 0;
  @%p1 st.global.b32 [%rd1+4], %r5;
""")
  nan = np.array([0x7FC00001, 0], np.uint32)
  with pytest.raises(AsyncStoreError, match=r"ptx=.*NaN.*is not supported"):
    check_ptx(ptx, [nan], smem_bytes=16, block=(32, 1, 1))
  ok = check_ptx(ptx, [np.array([0x3F800000, 0], np.uint32)], smem_bytes=16,
                 block=(32, 1, 1))
  assert ok.ok and ok.outputs[0][1] == 0x40000000   # 1.0 + 1.0


@pytest.mark.skipif(compat.pallas_call_shim() is None,
                    reason="this jax lowers pl.pallas_call for Mosaic GPU itself")
def test_pallas_call_built_before_the_check_is_refused_with_the_fix():
  import jax
  from jax.experimental import pallas as pl
  from jax.experimental.pallas import mosaic_gpu as plgpu

  def body(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0

  prebuilt = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((128,), np.float32),
                            compiler_params=plgpu.CompilerParams())
  x = np.zeros(128, np.float32)
  with pytest.raises(AsyncStoreError, match="call pl.pallas_call inside fn"):
    user_kernel.compile_kernel(prebuilt, x)
  built_inside = jax.jit(lambda a: pl.pallas_call(
      body, out_shape=jax.ShapeDtypeStruct((128,), np.float32),
      compiler_params=plgpu.CompilerParams())(a))
  assert user_kernel.compile_kernel(built_inside, x).stats.ptx_instructions > 0
  aliased = jax.jit(lambda a: pl.pallas_call(
      body, out_shape=jax.ShapeDtypeStruct((128,), np.float32), input_output_aliases={0: 0},
      compiler_params=plgpu.CompilerParams())(a))
  with pytest.raises(AsyncStoreError, match=r"input_output_aliases"):
    user_kernel.compile_kernel(aliased, x)
  assert pl.pallas_call is not None and compat.pallas_call_shim() is not None


# --- the CLI -------------------------------------------------------------------

_USER_FILE = '''
import sys
sys.path.insert(0, {harness!r})
import beside                      # a module in this file's folder
import numpy as np

def make():
    import tma_kernels
    return tma_kernels.tma_round_trip_lane()

def body_raises():
    import jax, jax.numpy as jnp
    from jax.experimental.pallas import mosaic_gpu as plgpu
    def body(x_ref, o_ref):
        raise ZeroDivisionError("the body divides by zero")
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((128,), jnp.float32)), (
        np.zeros(128, np.float32),)

def not_callable():
    return 3, (np.zeros(4),)

def jax_array():
    import jax.numpy as jnp
    import tma_kernels
    fn, args = tma_kernels.tma_round_trip_lane()
    return fn, (jnp.asarray(args[0]),)

def raises():
    raise RuntimeError("FUNCTION itself fails")

def matmul():
    import tma_kernels
    return tma_kernels.wgmma_matmul()
'''


@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
  folder = tmp_path_factory.mktemp("user")
  (folder / "beside.py").write_text("VALUE = 1\n")
  path = folder / "kernels.py"
  path.write_text(_USER_FILE.format(harness=str(HARNESS.parent)))
  return path


def _cli(capsys, *argv):
  status = cli.main(list(argv))
  out, err = capsys.readouterr()
  return status, out, err


def test_cli_compiles_a_kernel_that_imports_a_module_beside_it(user_file, capsys):
  status, out, err = _cli(capsys, "compile", f"{user_file}:make", "--emit", "stats")
  assert status == 0, err
  assert re.search(r"^TMA load\s+1$", out, re.M) and re.search(r"^registers\s+\d+$", out, re.M)
  status, out, _ = _cli(capsys, "compile", f"{user_file}:make", "--emit", "stats", "--json")
  import json
  data = json.loads(out)
  assert status == 0 and data["asynchronous"]["TMA load"] == 1 and data["arch"] == "sm_90a"


@pytest.mark.parametrize("command", ["compile", "check"])
@pytest.mark.parametrize("function, message", [
    ("body_raises", r"ZeroDivisionError: the body divides by zero .*kernels\.py:\d+ \(in body"),
    ("not_callable", r"fn=<int> 3 is not supported"),
    ("jax_array", r"args\[0\]=<ArrayImpl of shape \(64, 128\).* allowed a NumPy array"),
    ("raises", r"raises\(\) raised RuntimeError: FUNCTION itself fails at .*kernels\.py:\d+"),
    ("missing", r"has no function 'missing'"),
])
def test_cli_bad_inputs_are_one_line_and_exit_2(user_file, capsys, command, function, message):
  status, out, err = _cli(capsys, command, f"{user_file}:{function}")
  assert status == 2 and not out
  assert len(err.splitlines()) == 1 and err.startswith("mosaic-async-store: error: ")
  assert re.search(message, err), err


def test_cli_refuses_what_does_not_fit_a_user_kernel(user_file, capsys):
  cases = [(["--dtype", "f32"], "--dtype describes the project's store kernel"),
           (["--emit", "plan"], "--emit plan is the project's store plan"),
           (["--emit", "ptx", "--json"], "--json goes with --emit stats")]
  for extra, message in cases:
    status, _, err = _cli(capsys, "compile", f"{user_file}:make", *extra)
    assert status == 2 and message in err, err
  status, _, err = _cli(capsys, "compile", f"{user_file}:matmul", "--arch", "sm_100a")
  assert status == 2 and "wgmma" in err.lower() and "sm_90a" in err


def test_cli_checks_a_tma_kernel_and_a_wgmma_kernel(user_file, capsys):
  for function in ("make", "matmul"):
    status, out, err = _cli(capsys, "check", f"{user_file}:{function}")
    assert status == 0 and "ok: no rule broken in schedules [0, 1, 2]" in out, (out, err)
