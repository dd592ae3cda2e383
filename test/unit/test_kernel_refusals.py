"""A refusal raised inside a user's kernel, as ``check``, ``compile_kernel`` and the CLI
report it: once, in one line, with the innermost message and the user's line (this
file's), never a project file; and in the user's Python terms, not the CLI's flags.

The kernels below are the user's: each marked line (``# <name>``) is where the test
expects the report to point."""

import os
import pathlib
import re

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402

from mosaic_async_store import pallas as mas_pallas  # noqa: E402
from mosaic_async_store.check import check  # noqa: E402
from mosaic_async_store.errors import AsyncStoreError  # noqa: E402
from mosaic_async_store.tools import cli, user_kernel  # noqa: E402

HERE = pathlib.Path(__file__).resolve()
SHAPE = (64, 128)


def _line(marker: str, path: pathlib.Path = HERE) -> str:
  """``FILE:LINE`` of the line of ``path`` that carries ``# <marker>``."""
  lines = path.read_text().splitlines()
  [n] = [i + 1 for i, text in enumerate(lines) if text.rstrip().endswith(f"# <{marker}>")]
  return f"{path}:{n}"


def _kernel(dtype=jnp.int32, transforms=(), **store):
  """Two CTAs: each stores its tile into the other's SMEM with ``store``'s overrides."""
  def body(x_ref, o_ref, smem, bar):  # <body>
    cta = jax.lax.axis_index("cluster")
    kwargs = dict(dict(cluster_idx=1 - cta, cluster_dim="cluster"), **store)
    mas_pallas.async_store_smem(x_ref[cta], smem, bar.at[0], **kwargs)  # <store>
    plgpu.barrier_wait(bar.at[0])
    o_ref[cta] = smem[...]
  return plgpu.kernel(
      body, out_type=jax.ShapeDtypeStruct((2, *SHAPE), dtype), grid=(1,), grid_names=("g",),
      cluster=(2,), cluster_names=("cluster",),
      scratch_types=[plgpu.SMEM(SHAPE, dtype, transforms=transforms),
                     plgpu.Barrier(num_arrivals=1, num_barriers=1)])


def _x(dtype=np.int32):
  return np.arange(2 * np.prod(SHAPE)).reshape(2, *SHAPE).astype(dtype)


def _refusal(entry, fn, x):
  with pytest.raises((AsyncStoreError, TypeError)) as err:
    if entry == "check":
      check(fn, x, schedules=1)
    else:
      user_kernel.compile_kernel(fn, x)
  message = str(err.value)
  assert "\n" not in message and "Traceback" not in message, message
  assert "/mosaic_async_store/" not in message and "/lowering/" not in message, message
  return err.value, message


ENTRIES = ["check", "compile_kernel"]


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_bad_cluster_dim_is_reported_once_at_the_users_line(entry):
  error, message = _refusal(entry, _kernel(cluster_dim="nope"), _x())
  assert isinstance(error, AsyncStoreError) and error.param == "cluster_dim"
  assert message.startswith("cluster_dim='nope' is not supported: allowed a cluster axis "
                            "name of the enclosing kernel"), message
  assert message.count(" is not supported: ") == 1 and "code that runs" not in message
  assert message.endswith(f"(at {_line('store')}: `mas_pallas.async_store_smem("
                          "x_ref[cta], smem, bar.at[0], **kwargs) # <store>`)"), message


@pytest.mark.parametrize("entry", ENTRIES)
def test_an_unknown_atomic_is_blamed_on_atomic_at_the_users_line(entry):
  error, message = _refusal(entry, _kernel(atomic="mul"), _x())
  assert isinstance(error, AsyncStoreError) and error.param == "atomic"
  assert re.match(r"atomic='mul' is not supported: allowed None or one of add, min, max, "
                  r"and, or, xor, inc, dec\. Fix: .* \(at " + re.escape(_line("store")), message)
  assert "args=" not in message and message.count(" is not supported: ") == 1


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_refusal_while_lowering_names_the_users_line(entry):
  """A float add into a peer without install(): refused by the Lane rule, after tracing;
  the line comes from the trace jax recorded for the store's equation."""
  error, message = _refusal(entry, _kernel(jnp.float32, atomic="add"), _x(np.float32))
  assert error.param == "atomic" and message.startswith("atomic=add is not supported: ")
  assert "install() first" in message and f"(at {_line('store')}: `mas_pallas" in message


@pytest.mark.parametrize("entry", ENTRIES)
def test_an_upstream_assertion_from_the_users_tiling_names_the_kernel(entry):
  """A TilingTransform that does not divide the scratch: upstream asserts (no message)
  while it builds the kernel's refs, before any line of the body runs; the report says
  which statement failed and points at the kernel's body."""
  error, message = _refusal(entry, _kernel(transforms=(plgpu.TilingTransform((8, 100)),)),
                            _x())
  assert message.startswith("fn=code that raised AssertionError: (no message) at `assert "), message
  assert re.search(r"` in \w+ \(jax/_src/[\w/]+\.py:\d+\) is not supported", message), message
  assert message.endswith(f"Fix: fix the kernel defined at {_line('body')} (body)"), message


def test_a_correct_kernel_still_checks():
  report = check(_kernel(), _x(), schedules=1)
  assert report.ok, str(report)
  np.testing.assert_array_equal(report.outputs[0], _x()[::-1])


# --- the CLI: the user's kernel in its own terms ----------------------------------

_USER_FILE = '''
import sys
sys.path.insert(0, {here!r})
import jax.numpy as jnp
import numpy as np
import test_kernel_refusals as t

def float_add():
    return t._kernel(jnp.float32, atomic="add"), (t._x(np.float32),)

def mul():
    return t._kernel(atomic="mul"), (t._x(),)
'''


@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("user") / "kernels.py"
  path.write_text(_USER_FILE.format(here=str(HERE.parent)))
  return path


@pytest.mark.parametrize("command", ["compile", "check"])
@pytest.mark.parametrize("function, words", [
    ("float_add", "atomic=add is not supported: "), ("mul", "atomic='mul' is not supported: ")])
def test_the_cli_reports_a_users_kernel_in_python_terms(user_file, capsys, command, function,
                                                        words):
  status = cli.main([command, f"{user_file}:{function}"])
  out, err = capsys.readouterr()
  assert status == 2 and not out and len(err.splitlines()) == 1, err
  assert err.startswith(f"mosaic-async-store: error: {words}"), err
  assert "--atomic" not in err and "--" not in err.split("(at ")[0], err
  assert f"(at {_line('store')}: `mas_pallas" in err


def test_the_cli_keeps_its_flags_for_its_own_store_kernel(capsys):
  assert cli.main(["compile", "--dtype", "f32", "--atomic", "min", "--emit", "plan"]) == 2
  err = capsys.readouterr().err
  assert "--atomic min is not supported" in err and "atomic=" not in err
