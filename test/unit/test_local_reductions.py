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

import pytest

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
