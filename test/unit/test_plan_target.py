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


def _either(dtype="float32", atomic="add"):
  where = Target(peer=True, cluster_dim=0, cluster_idx=1, cluster_shape=(2, 1, 1),
                 may_be_own=True)
  return mas.plan_store(resolve_layout("WGMMA", (64, 128), dtype), (64, 128), dtype,
                        swizzle=128, atomic=atomic, target=where)


@pytest.mark.parametrize("dtype, atomic", [("float32", "add"), ("int32", "min"),
                                           ("int64", "xor")])
def test_a_reduction_into_a_target_that_may_be_own_carries_its_local_form(dtype, atomic):
  """The run-time choice is in the plan: the local form runs where the target is the
  executing CTA (no red.async there), the plan itself elsewhere."""
  plan = _either(dtype, atomic)
  local = plan.local_form
  assert local is not None and not local.peer and local.local_form is None
  assert local.total_bytes == plan.total_bytes
  assert not any(i.kind == "red.async" for i in local.instructions)
  assert {i.space for i in local.instructions} == {"shared::cta"}
  assert "the local form:" in plan.summary() and "peer or own (run time)" in plan.summary()
  plan.verify()


def test_a_store_into_a_target_that_may_be_own_keeps_one_form():
  """st.async may target the executing CTA: no run-time choice."""
  plan = _either("bfloat16", None)
  assert plan.local_form is None and plan.target.may_be_own
  plan.verify()


def test_may_be_own_needs_a_peer_target():
  with pytest.raises(mas.AsyncStoreError) as err:
    Target(peer=False, may_be_own=True)
  assert err.value.param == "may_be_own"


def test_emit_plan_refuses_a_local_form_of_other_bytes():
  from mosaic_async_store.lowering.store import emit_plan
  plan = _either()
  smaller = mas.plan_store(resolve_layout("WGMMA", (64, 64), "float32"), (64, 64), "float32",
                           swizzle=128, atomic="add", target=plan.local_form.target)
  with pytest.raises(mas.AsyncStoreError) as err:
    emit_plan(dataclasses.replace(plan, local_form=smaller), registers=None, ref=None,
              barrier=None)
  assert err.value.value == "local form"