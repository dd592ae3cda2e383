"""``plgpu.barrier_arrive`` under install() (lowering/pallas_barriers.py): registered
wherever upstream registers it and restored by uninstall(); a ClusterBarrier's arrive
gets the warpgroup barrier and ``.release.cluster``, any other barrier's arrive is
upstream's, unchanged.  The checker runs the kernels that need it in
test/emu/test_pallas_execution.py."""

import re

import jax
import jax.numpy as jnp
import pytest
from jax.experimental.pallas import mosaic_gpu as plgpu

from mosaic_async_store import compat
from mosaic_async_store import pallas as mas_pallas
from mosaic_async_store.lowering import pallas_barriers
from mosaic_async_store.tools.pallas_capture import (lower_pallas_to_mosaic_modules,
                                                     lower_warpgroup_dialect)


@pytest.fixture(autouse=True)
def _restore():
  yield
  mas_pallas.uninstall()


def _arrive_module(barrier, semantics: str, cluster: int = 2) -> str:
  """The text of a kernel (clusters of ``cluster`` CTAs) that only arrives on
  ``barrier`` (a scratch type),
  its kernel's name without jax's serial number."""
  sem = {"lane": plgpu.LoweringSemantics.Lane,
         "warpgroup": plgpu.LoweringSemantics.Warpgroup}[semantics]

  def body(o_ref, b):
    plgpu.barrier_arrive(b)
  kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((128,), jnp.int32), grid=(1,),
                        grid_names=("g",), cluster=(cluster,), cluster_names=("cluster",),
                        scratch_types=[barrier],
                        compiler_params=plgpu.CompilerParams(lowering_semantics=sem))
  [module] = lower_pallas_to_mosaic_modules(kernel)
  if semantics == "warpgroup":
    module = lower_warpgroup_dialect(module)
  # jax 0.12 numbers each kernel it lowers (body_4, body_5): the rest is the same
  return re.sub(r"\bbody_\d+\b", "body", str(module))


def test_install_reroutes_barrier_arrive_everywhere_upstream_registers_it():
  """Lane, Warpgroup and the Warp-primitive combinations; uninstall() restores."""
  prim = compat.pallas_internals().primitives.barrier_arrive_p
  before = {k: t[prim] for k, t in compat.rule_tables_with(prim).items()}
  assert len(before) >= 2
  mas_pallas.install()
  mas_pallas.install()   # idempotent: the rules it keeps are upstream's, not its own
  during = {k: t[prim] for k, t in compat.rule_tables_with(prim).items()}
  assert during.keys() == before.keys()
  assert all(during[k] is not before[k] for k in before)
  mas_pallas.uninstall()
  assert {k: t[prim] for k, t in compat.rule_tables_with(prim).items()} == before


@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
def test_a_cluster_barrier_arrive_releases_at_cluster_scope_after_a_warpgroup_barrier(
    semantics):
  barrier = plgpu.ClusterBarrier(collective_axes=("cluster",))
  upstream = _arrive_module(barrier, semantics)
  assert "mbarrier.arrive.shared::cluster.b64" in upstream
  assert pallas_barriers.CLUSTER_ARRIVE not in upstream
  mas_pallas.install()
  ours = _arrive_module(barrier, semantics)
  assert ours.count(pallas_barriers.CLUSTER_ARRIVE) == 1
  assert "mbarrier.arrive.shared::cluster.b64" not in ours
  # upstream's warpgroup_barrier: bar.sync (1 + warpgroup), 128, before the arrive
  between = ours[:ours.index(pallas_barriers.CLUSTER_ARRIVE)]
  assert between.count("bar.sync $0, 128;") == upstream.count("bar.sync $0, 128;") + 1


@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
def test_a_plain_barrier_arrive_is_upstreams_under_install(semantics):
  barrier = plgpu.Barrier(num_arrivals=1)
  upstream = _arrive_module(barrier, semantics)
  mas_pallas.install()
  assert _arrive_module(barrier, semantics) == upstream


@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
def test_a_cluster_barrier_over_one_cta_arrives_locally_after_a_warpgroup_barrier(semantics):
  """A collective axis of one CTA: upstream's CollectiveBarrierRef has no cluster mask
  and thread 0 arrives on the CTA's own barrier (.release.cta reaches every waiter,
  all in this CTA); the warpgroup barrier still comes first."""
  barrier = plgpu.ClusterBarrier(collective_axes=("cluster",))
  upstream = _arrive_module(barrier, semantics, cluster=1)
  mas_pallas.install()
  ours = _arrive_module(barrier, semantics, cluster=1)
  assert pallas_barriers.CLUSTER_ARRIVE not in ours
  local = "mbarrier.arrive.release.cta.shared::cta.b64"
  assert ours.count(local) == upstream.count(local) == 1
  between = ours[:ours.index(local)]
  assert between.count("bar.sync $0, 128;") == upstream.count("bar.sync $0, 128;") + 1
