"""Pallas MGPU integration, compiled on the CPU to PTX that ptxas accepts."""

import jax
import pytest

from mosaic_async_store import pallas as mas_pallas
from mosaic_async_store import compat
from mosaic_async_store.tools import toolchain
from kernel_text import pallas_module
from mosaic_async_store.tools.pallas_capture import lower_pallas_to_mosaic_modules

ST = "st.async.shared::cluster.mbarrier::complete_tx::bytes."
RED = "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes."


def _stores(**kwargs):
  return toolchain.compile_module(pallas_module(**kwargs)).stats.stores


@pytest.fixture(autouse=True)
def _restore():
  yield
  mas_pallas.uninstall()


@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
@pytest.mark.parametrize("dtype,form,count", [
    ("bfloat16", ST + "b32", 32), ("float32", ST + "v2.b32", 32),
    ("int8", ST + "b32", 16), ("float8_e4m3fn", ST + "b32", 16),
])
def test_store_forms(semantics, dtype, form, count):
  stores = _stores(dtype=dtype, semantics=semantics)
  assert stores.get(form) == count, stores
  assert stores["mapa.shared::cluster.u32"] == 2


@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
def test_signed_min_uses_signed_reduction(semantics):
  stores = _stores(dtype="int32", atomic="min", semantics=semantics)
  assert stores.get(RED + "min.s32") == 64, stores
  assert not any("min.u32" in k for k in stores)


def test_unsigned_max_stays_unsigned():
  stores = _stores(dtype="uint32", atomic="max", semantics="warpgroup")
  assert stores.get(RED + "max.u32") == 64, stores


@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
def test_float_add_goes_through_plain_red_and_release_arrive(semantics):
  mas_pallas.install()  # without it the store is refused (test_pallas_runtime_lowers.py)
  jax.clear_caches()
  compiled = toolchain.compile_module(pallas_module(dtype="float32", atomic="add",
                                                    semantics=semantics))
  stores = compiled.stats.stores
  assert stores.get("red.relaxed.cluster.shared::cluster.add.f32") == 64, stores
  assert stores.get("mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64") == 1
  # the wait that acquires what that release publishes
  assert compiled.ptx.count("mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64") == 1
  assert "mbarrier.try_wait.parity.shared.b64" not in compiled.ptx


def test_install_reroutes_barrier_wait_everywhere_upstream_registers_it():
  """Lane, Warpgroup and the Warp-primitive combinations; uninstall() restores."""
  prim = compat.pallas_internals().primitives.barrier_wait_p
  before = {k: t[prim] for k, t in compat.rule_tables_with(prim).items()}
  assert len(before) >= 2
  mas_pallas.install()
  mas_pallas.install()
  during = {k: t[prim] for k, t in compat.rule_tables_with(prim).items()}
  assert during.keys() == before.keys()
  assert all(during[k] is not before[k] for k in before)
  mas_pallas.uninstall()
  assert {k: t[prim] for k, t in compat.rule_tables_with(prim).items()} == before


def test_upstream_warpgroup_signed_min_bug_is_real():
  """Without install(), upstream emits min.u32 for int32 (wrong for negatives)."""
  stores = _stores(dtype="int32", atomic="min", semantics="warpgroup", api="upstream")
  assert any(k.endswith("min.u32") for k in stores), stores


@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
def test_install_reroutes_upstream_primitive(semantics):
  kwargs = dict(dtype="int8", semantics=semantics, api="upstream")
  with pytest.raises(Exception, match="bitwidth|Unsupported|NotImplemented|layout"):
    _stores(**kwargs)  # upstream cannot store 8-bit WGMMA registers
  mas_pallas.install()
  mas_pallas.install()  # idempotent
  assert mas_pallas.is_installed()
  jax.clear_caches()
  assert _stores(**kwargs).get(ST + "b32") == 16
  mas_pallas.uninstall()
  assert not mas_pallas.is_installed()
  jax.clear_caches()
  with pytest.raises(Exception, match="bitwidth|Unsupported|NotImplemented|layout"):
    _stores(**kwargs)


def test_abstract_eval_refuses_shape_mismatch():
  import jax.numpy as jnp
  from jax.experimental.pallas import mosaic_gpu as plgpu

  def body(x_ref, o_ref, smem, bar):
    del o_ref
    x = compat.pallas_load(x_ref, layout=plgpu.Layout.WGMMA, optimized=False)
    mas_pallas.async_store_smem(x, smem.at[:64, :64], bar.at[0], cluster_idx=0,
                                cluster_dim="cluster")
  k = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((64, 128), jnp.bfloat16), grid=(2,),
                   grid_names=("g",), cluster=(2,), cluster_names=("cluster",),
                   scratch_types=[plgpu.SMEM((64, 128), jnp.bfloat16),
                                  plgpu.Barrier(num_barriers=1)])
  with pytest.raises(TypeError, match=r"shape \(64, 128\).*shape \(64, 64\).*Fix"):
    lower_pallas_to_mosaic_modules(k, jax.ShapeDtypeStruct((64, 128), jnp.bfloat16))


def test_transposed_ref_lane():
  stores = _stores(dtype="bfloat16", semantics="lane", transposed=True, swizzle=None,
                   optimized=False)
  assert stores.get(ST + "b32") == 32, stores
  assert stores.get("shfl.sync.bfly.b32", 0) > 0  # column-major needs lane exchanges
