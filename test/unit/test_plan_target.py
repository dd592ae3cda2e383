"""The resolved target is part of the plan: peer or local, the caller's cluster
dimension and index, the cluster's shape; the state spaces and the one-CTA rule follow it,
``summary()`` and ``--emit plan`` show it, and the emitter forms the rank from it."""

import dataclasses
import types

import pytest

import mosaic_async_store as mas
from mosaic_async_store.demo.config import StoreConfig, config_plan, resolve_layout
from mosaic_async_store.plan.plan_types import Target
from mosaic_async_store.tools import cli

WGMMA = resolve_layout("WGMMA", (64, 128), "bfloat16")


def _plan(**kwargs):
  return mas.plan_store(WGMMA, (64, 128), "bfloat16", swizzle=128, **kwargs)


def test_the_plan_carries_the_target_it_was_given():
  where = Target(peer=True, cluster_dim=0, cluster_idx=1, cluster_shape=(2, 1, 1))
  plan = _plan(target=where)
  assert plan.target is where and plan.peer and where.cluster_size == 2
  assert "target=peer (cluster x, index 1)" in plan.summary()
  assert {i.space for i in plan.instructions} == {"shared::cluster"}
  plan.verify()


def test_without_a_target_peer_and_cluster_size_make_one():
  plan = _plan(peer=False, cluster_size=4)
  assert not plan.peer and plan.target.cluster_size == 4
  assert plan.target.cluster_dim is None and "target=local " in plan.summary()
  assert _plan().peer  # the default stays a peer


def test_a_one_cta_cluster_target_uses_plain_local_stores():
  """st.async needs %cluster_nctarank > 1: the target's cluster size decides."""
  plan = _plan(target=Target(peer=False, cluster_shape=(1, 1, 1)))
  assert {(i.kind, i.space) for i in plan.instructions} == {("st", "shared::cta")}
  assert plan.async_bytes == 0 and plan.needs_release_arrive
  local = _plan(target=Target(peer=False, cluster_shape=(2, 1, 1)))
  assert {i.kind for i in local.instructions} == {"st.async"}


def test_a_run_time_index_is_described_not_evaluated():
  run_time = types.SimpleNamespace(type="i32", owner=None)  # an ir.Value: opaque to the plan
  where = Target(peer=True, cluster_dim=0, cluster_idx=run_time, cluster_shape=(4, 1, 1))
  assert where.describe() == "peer (cluster x, run-time index)"
  assert _plan(target=where).target.cluster_idx is run_time


@pytest.mark.parametrize("target, words", [
    ("peer", ("peer (cluster x, index (own + 1) % 2)",)),
    ("local", ("target=local ",)),
])
def test_emit_plan_shows_the_kernels_target(target, words):
  cfg = StoreConfig(target=target, cluster=2)
  text = cli._compile_text(cli.build_parser().parse_args(
      ["compile", "--emit", "plan", "--target", target]))
  assert all(w in text for w in words), text
  assert config_plan(cfg).target.describe() in text


def test_cta0_plans_name_cta_0():
  cfg = StoreConfig(dtype="int32", atomic="add", target="cta0", cluster=4)
  peer, local = config_plan(cfg, True), config_plan(cfg, False)
  assert peer.target.describe() == "peer (cluster x, index 0)"
  assert local.target.describe() == "local (cluster x, index 0)"
  assert {i.kind for i in peer.instructions} == {"red.async"}
  assert {i.kind for i in local.instructions} == {"red"}
  assert dataclasses.replace(peer.target, peer=False).state_space("red") == "shared::cta"


# -- entry points that cannot emit what the verifier rejects -------------------------


def test_emit_plan_refuses_a_plan_the_verifier_rejects():
  """A plan with its address steps dropped would emit none of its stores but still
  announce its bytes (a kernel that hangs): emit_plan replays it and refuses."""
  from mosaic_async_store.lowering.store import emit_plan
  where = Target(peer=True, cluster_dim=0, cluster_idx=1, cluster_shape=(2, 1, 1))
  plan = _plan(target=where)
  plan.verify()
  broken = dataclasses.replace(plan, address_steps=())
  with pytest.raises(mas.AsyncStoreError):
    broken.verify()
  with pytest.raises(mas.AsyncStoreError):
    emit_plan(broken, registers=None, ref=None, barrier=None)


def test_emit_plan_refuses_a_peer_plan_without_its_index():
  from mosaic_async_store.lowering.store import emit_plan
  plan = config_plan(StoreConfig(target="peer", cluster=2))   # the CLI's: no cluster_idx
  with pytest.raises(mas.AsyncStoreError) as err:
    emit_plan(plan, registers=None, ref=None, barrier=None)
  assert err.value.param == "plan.target" and "cluster_idx" in str(err.value)


@pytest.mark.parametrize("field, value", [("cluster_idx", "(own + 1) % 2"),
                                          ("cluster_idx", True), ("cluster_dim", 3),
                                          ("cluster_dim", "x")])
def test_target_fields_are_typed(field, value):
  with pytest.raises(mas.AsyncStoreError) as err:
    Target(peer=True, **{field: value})
  assert err.value.param == field and "Fix:" in str(err.value)


def test_emit_either_refuses_plans_in_the_wrong_order_or_of_other_bytes():
  from mosaic_async_store.lowering.store import emit_either
  peer = _plan(target=Target(peer=True, cluster_dim=0, cluster_idx=1, cluster_shape=(2, 1, 1)))
  local = _plan(target=Target(peer=False, cluster_shape=(2, 1, 1)))
  with pytest.raises(mas.AsyncStoreError) as err:
    emit_either(peer, local, registers=None, ref=None, barrier=None)
  assert "a local plan, then a peer plan" in str(err.value)
  smaller = mas.plan_store(resolve_layout("WGMMA", (64, 64), "bfloat16"), (64, 64), "bfloat16",
                           swizzle=128, target=peer.target)
  with pytest.raises(mas.AsyncStoreError) as err:
    emit_either(local, smaller, registers=None, ref=None, barrier=None)
  assert err.value.param == "peer_plan"
