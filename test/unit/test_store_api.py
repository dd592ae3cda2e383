"""The store's public API as a user meets it: ``swizzle`` is required where the ref's tile
is laid out for one (left out, the bytes would land unswizzled), and ``help()`` of
``mas.async_store`` and ``mas_pallas.async_store_smem`` shows every parameter, what is
refused and an example, while ``import mosaic_async_store`` stays light."""

import inspect
import os
import re
import textwrap

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jaxlib.mlir import ir  # noqa: E402
from jaxlib.mlir.dialects import arith, gpu  # noqa: E402

import mosaic_async_store as mas  # noqa: E402
from mosaic_async_store import compat  # noqa: E402
from mosaic_async_store import pallas as mas_pallas  # noqa: E402
from mosaic_async_store.plan.ref_swizzle import tile_swizzle  # noqa: E402

_BF16 = jnp.bfloat16
TILED_128 = (8, 2, 8, 64)    # (64, 128) bf16 in (8, 64) tiles: 128-byte rows
TILED_64 = (8, 4, 8, 32)     # (64, 128) bf16 in (8, 32) tiles: 64-byte rows


def _store_in_kernel(smem, **kwargs):
  """Builds a 2-CTA kernel whose body loads a (64, 128) bf16 WGMMA tile from global
  memory and stores it into the peer's ``smem`` scratch ref with ``kwargs``; returns
  (the store's result, the module's text)."""
  mgpu, fa = compat.mosaic_gpu(), compat.fragmented_array()
  scratch = (jax.ShapeDtypeStruct(smem, _BF16), mgpu.Barrier(arrival_count=128, num_barriers=1))
  out = {}

  def body(ctx, x, o, s):
    del ctx, o
    ref, bar = s
    tile = fa.FragmentedArray.load_untiled(x, layout=fa.WGMMA_LAYOUT, optimized=False)
    peer = arith.subi(arith.constant(ir.IndexType.get(), 1),
                      gpu.cluster_block_id(gpu.Dimension.x))
    out["result"] = mas.async_store(tile, ref, bar[0], cluster_dim=gpu.Dimension.x,
                                    cluster_idx=peer, **kwargs)

  spec = jax.ShapeDtypeStruct((64, 128), _BF16)
  with compat.make_ir_context(), ir.Location.unknown():
    module, *_ = compat.kernel_to_module(body, (2, 1, 1), (128, 1, 1), (spec,), spec, scratch,
                                         cluster=(2, 1, 1))
    return out["result"], module.operation.get_asm(enable_debug_info=False)


def test_swizzle_left_out_on_a_ref_tiled_for_128_bytes_is_refused_naming_it():
  with pytest.raises(mas.AsyncStoreError) as err:
    _store_in_kernel(TILED_128)
  message = str(err.value)
  assert err.value.param == "swizzle" and "\n" not in message
  assert message.startswith("swizzle=(left out) is not supported: allowed swizzle=128, "
                            "the swizzle this ref is tiled for (its tile (8, 64) of 16-bit "
                            "elements has 128-byte rows)"), message
  assert "Fix: pass swizzle=128 if the ref is written and read with the 128-byte swizzle" in message


def test_a_swizzle_other_than_the_tiles_is_refused_naming_the_tiles():
  with pytest.raises(mas.AsyncStoreError) as err:
    _store_in_kernel(TILED_128, swizzle=64)
  assert err.value.param == "swizzle"
  assert re.search(r"^swizzle=64 is not supported: .*this ref's tile \(8, 64\) of 16-bit "
                   r"elements has 128 contiguous bytes.*Fix: pass swizzle=128 if the ref was "
                   r"written that way", str(err.value)), str(err.value)
  with pytest.raises(mas.AsyncStoreError, match=r"swizzle=\(left out\).*allowed swizzle=64,"):
    _store_in_kernel(TILED_64)


def test_the_tiles_swizzle_stores_the_swizzled_bytes():
  """The right swizzle is accepted, and it is what the store emits: its addresses differ
  from those of the same tiled ref declared unswizzled (swizzle=None, explicit)."""
  nbytes, swizzled = _store_in_kernel(TILED_128, swizzle=128)
  assert nbytes == 64 * 128 * 2 and "st.async" in swizzled
  nbytes_plain, unswizzled = _store_in_kernel(TILED_128, swizzle=None)
  assert nbytes_plain == nbytes and swizzled != unswizzled
  nbytes_64, _ = _store_in_kernel(TILED_64, swizzle=64)
  assert nbytes_64 == nbytes


def test_a_plain_ref_needs_no_swizzle():
  nbytes, text = _store_in_kernel((64, 128))
  assert nbytes == 64 * 128 * 2 and "st.async" in text


@pytest.mark.parametrize("ref_shape, strides, bits, want", [
    ((8, 2, 8, 64), (1024, 512, 64, 1), 16, 128), ((8, 4, 8, 32), (1024, 256, 32, 1), 16, 64),
    ((8, 8, 8, 16), (1024, 128, 16, 1), 16, 32),
    ((8, 16, 8, 8), (1024, 64, 8, 1), 16, None),    # 16-byte rows: no swizzle moves a byte
    ((64, 128), (128, 1), 16, None),                 # plain
    ((64, 1, 1, 128), (128, 128, 128, 1), 16, None),  # 256-byte rows: no swizzle fits
    ((8, 1, 8, 256), (2048, 2048, 256, 1), 4, 128),  # int4: 256 nibbles = 128 bytes
])
def test_tile_swizzle(ref_shape, strides, bits, want):
  shape = (64, 128) if len(ref_shape) == 4 else ref_shape
  if ref_shape[-1] == 256:
    shape = (64, 256)
  assert tile_swizzle(shape, ref_shape, strides, bits) == want


# --- help() ---------------------------------------------------------------------

_STORE_PARAMS = ["value", "ref", "barrier", "cluster_dim", "cluster_idx", "swizzle",
                 "tiling_rank", "optimized", "atomic", "expect_tx", "strategy",
                 "remote_plain_ok", "arrival"]
_PALLAS_PARAMS = ["src", "ref", "barrier", "cluster_idx", "cluster_dim", "optimized", "atomic"]


def _documented(doc: str) -> list[str]:
  """The parameter names the Args section of a Google-style docstring documents."""
  args = doc.split("Args:", 1)[1].split("\n\n", 1)[0]
  return re.findall(r"^  (\w+):", args, re.M)


@pytest.mark.parametrize("fn, params", [(mas.async_store, _STORE_PARAMS),
                                        (mas_pallas.async_store_smem, _PALLAS_PARAMS)],
                         ids=["async_store", "async_store_smem"])
def test_help_shows_every_parameter_what_is_refused_and_an_example(fn, params):
  signature = inspect.signature(fn)
  assert list(signature.parameters) == params, signature
  kw_only = [p for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY]
  assert [p.name for p in kw_only] == params[3:], signature
  doc = inspect.getdoc(fn)
  assert _documented(doc) == params, _documented(doc)
  assert "Raises:" in doc and "AsyncStoreError" in doc and "Example" in doc
  assert "See :func:" not in doc


def test_the_signatures_match_the_implementations():
  """The faces forward every parameter, with the implementations' defaults."""
  from mosaic_async_store.lowering import debug
  from mosaic_async_store.lowering import pallas as lowering_pallas
  from mosaic_async_store.lowering import store
  for face, impl in ((mas.async_store, store.async_store),
                     (mas_pallas.async_store_smem, lowering_pallas.async_store_smem),
                     (mas.wait, debug.wait)):
    assert inspect.signature(face).parameters.keys() == inspect.signature(impl).parameters.keys()
    for name, p in inspect.signature(face).parameters.items():
      assert p.default == inspect.signature(impl).parameters[name].default, name
  assert "left out" not in repr(inspect.signature(mas.async_store).parameters["swizzle"])
  assert "required where the ref is tiled for a swizzle" in str(inspect.signature(mas.async_store))


def _example(doc: str) -> str:
  """The code block after the docstring's "Example" paragraph."""
  block = doc.split("Example", 1)[1].split("::\n", 1)[1]
  lines = []
  for line in block.splitlines():
    if line and not line.startswith("  "):
      break
    lines.append(line)
  return textwrap.dedent("\n".join(lines))


def test_the_async_store_example_builds():
  """The Mosaic example of ``help(mas.async_store)``, in a kernel with the scratch it
  names: it stores 16384 bytes into the peer."""
  mgpu = compat.mosaic_gpu()
  ns = dict(mas=mas, mgpu=mgpu, gpu=gpu, arith=arith, ir=ir)
  exec(_example(inspect.getdoc(mas.async_store)), ns)  # noqa: S102
  spec = jax.ShapeDtypeStruct((64, 128), _BF16)
  scratch = (jax.ShapeDtypeStruct(TILED_128, _BF16), mgpu.Barrier(arrival_count=128))
  with compat.make_ir_context(), ir.Location.unknown():
    module, *_ = compat.kernel_to_module(ns["body"], (2, 1, 1), (128, 1, 1), (spec,), spec,
                                         scratch, cluster=(2, 1, 1))
    text = module.operation.get_asm(enable_debug_info=False)
  assert text.count("st.async") >= 1 and "mbarrier.try_wait.parity.acquire.cluster" in text


def test_the_async_store_smem_example_swaps_the_tiles_in_the_checker():
  from jax.experimental.pallas import mosaic_gpu as plgpu

  from mosaic_async_store.check import check
  ns = dict(jax=jax, jnp=jnp, plgpu=plgpu, mas_pallas=mas_pallas)
  exec(_example(inspect.getdoc(mas_pallas.async_store_smem)), ns)  # noqa: S102
  x = np.arange(2 * 64 * 128, dtype=np.int32).reshape(2, 64, 128)
  report = check(ns["kernel"], x)
  assert report.ok, str(report)
  np.testing.assert_array_equal(report.outputs[0], x[::-1])


# --- the shipped example: public API only -------------------------------------------

_PUBLIC = {"mosaic_async_store", "mosaic_async_store.pallas", "mosaic_async_store.check",
           "mosaic_async_store.toolchain"}


def test_the_reduce_example_imports_only_public_api():
  """docs/examples/reduce_into_cta0.py is what a user copies: no private module of this
  package (compat's version helpers would hide what differs between jax versions) and
  none of jax's (test/emu/test_check_kernel.py runs it on every jax)."""
  import ast
  import pathlib
  path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "examples" / "reduce_into_cta0.py"
  modules = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      modules |= {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom):
      modules |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
  ours = {m for m in modules if m.startswith("mosaic_async_store")}
  assert ours and all(m in _PUBLIC for m in ours), ours
  assert not any("._src" in m or m.startswith("jax._") for m in modules), modules


def test_help_of_wait_documents_every_parameter():
  doc = inspect.getdoc(mas.wait)
  assert _documented(doc) == list(inspect.signature(mas.wait).parameters)
  assert "Returns:" in doc and "See :func:" not in doc
