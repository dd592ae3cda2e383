"""Reductions into the executing CTA use the CTA window (``red...shared::cta``).

red.async cannot target the executing CTA, so these go as plain ``red`` plus a
release arrive.  Spelled with a ``.shared::cluster`` address, ptxas emits a
generic ``ATOM.E`` with a state-space query and fallbacks (f32 add: 1514 SASS
instructions for a 64x128 tile); with ``.shared::cta`` it emits native shared
atomics (``ATOMS``, or an ``ATOMS.CAST`` loop for float adds: 562).
"""

import contextlib
import io
import json

import numpy as np
import pytest

import mosaic_async_store as mas
from mosaic_async_store.tools import cli


def _stats(**cfg) -> dict:
  argv = ["compile", "--emit", "stats", "--json"]
  for k, v in cfg.items():
    argv += [f"--{k}", str(v)]
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    assert cli.main(argv) == 0
  return json.loads(out.getvalue())


@pytest.mark.parametrize("dtype,op,native", [("i32", "add", "ATOMS.ADD.S32"),
                                             ("u32", "inc", "ATOMS.INC"),
                                             ("f32", "add", "ATOMS.CAST.SPIN")])
def test_local_reductions_are_native_shared_atomics(dtype, op, native):
  stats = _stats(dtype=dtype, atomic=op, target="local")
  opcodes = stats["sass_opcodes"]
  assert opcodes.get(native) == 64, opcodes
  assert not [o for o in opcodes if o.startswith("ATOM.") or o.startswith("QSPC")], opcodes
  assert stats["stores"].get(f"red.relaxed.cluster.shared::cta.{op}." +
                             {"i32": "s32", "u32": "u32", "f32": "f32"}[dtype]) == 64


def test_peer_reductions_keep_the_cluster_window():
  stats = _stats(dtype="f32", atomic="add", target="peer")
  assert stats["stores"].get("red.relaxed.cluster.shared::cluster.add.f32") == 64
  assert not any("shared::cta" in op for op in stats["stores"] if op.startswith("red"))


@pytest.mark.parametrize("target,form,native", [
    ("peer", "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.xor.b32",
     "REDAS.XOR"),
    ("local", "red.relaxed.cluster.shared::cta.xor.b32", "ATOMS.XOR")])
def test_64_bit_bitwise_reductions_go_as_32_bit_halves(target, form, native):
  """A 64-bit xor.b64 is a generic ATOM with a state-space query and a CAS fallback
  (875 SASS instructions for this kernel into a peer); its two 32-bit halves end
  the same, bit by bit, as native REDAS/ATOMS (docs/benchmarks.md)."""
  stats = _stats(dtype="i64", atomic="xor", target=target, shape="64x64")
  assert stats["stores"].get(form) == 64, stats["stores"]
  assert stats["sass_opcodes"].get(native) == 64, stats["sass_opcodes"]
  assert not [o for o in stats["sass_opcodes"] if o.startswith(("ATOM.", "QSPC"))]
  if target == "peer":   # all of it completes on the tx count: no release arrive
    arrive = "mbarrier.arrive.expect_tx.relaxed.cluster.shared::cluster.b64"   # counts only
    assert stats["stores"].get(arrive) == 1, stats["stores"]
    assert not [op for op in stats["stores"] if ".release." in op]


def test_run_time_local_float_add_takes_shared_atomics():
  """Every CTA adding f32 into CTA 0: CTA 0's arm uses red.shared::cta (ATOMS CAS
  loops), only the peers' arm the generic .shared::cluster form (QSPC queries)."""
  stats = _stats(dtype="f32", atomic="add", target="cta0", shape="64x64")
  assert stats["stores"].get("red.relaxed.cluster.shared::cta.add.f32") == 32
  assert stats["stores"].get("red.relaxed.cluster.shared::cluster.add.f32") == 32
  assert stats["sass_opcodes"].get("QSPC.E.S") == 32, stats["sass_opcodes"]


@pytest.mark.parametrize("op", ["and", "or", "xor"])
@pytest.mark.parametrize("peer", [True, False])
def test_64_bit_halves_reduce_exactly(op, peer):
  """The plan of 32-bit halves, executed on bytes, is the 64-bit reduction."""
  from mosaic_async_store.compat import fragmented_array
  from mosaic_async_store.plan.executor import simulate_store
  rng = np.random.default_rng(0)
  array, initial = (rng.integers(-2**63, 2**63, (64, 64), dtype=np.int64) for _ in range(2))
  got = simulate_store(array, fragmented_array().WGMMA_LAYOUT, swizzle=128, atomic=op,
                       initial=initial, peer=peer)
  want = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op](initial, array)
  np.testing.assert_array_equal(got, want)


def test_halves_of_a_64_bit_min_are_refused_by_the_verifier():
  """Only bitwise ops may be split: a min of two halves is not the 64-bit min."""
  import dataclasses
  from mosaic_async_store.compat import fragmented_array
  from mosaic_async_store.plan.planner import plan_store
  plan = plan_store(fragmented_array().WGMMA_LAYOUT, (64, 64), "int64", swizzle=128,
                    atomic="min")
  first = plan.instructions[0]
  assert (first.width, first.ptx_type) == (8, "s64")
  halves = [dataclasses.replace(first, width=4, ptx_type="s32", parts=first.parts[:1])]
  broken = dataclasses.replace(plan, instructions=tuple(halves) + plan.instructions[1:])
  with pytest.raises(mas.AsyncStoreError, match="does not reduce int64 elements"):
    broken.verify()
