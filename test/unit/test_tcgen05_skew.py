"""The ``tcgen05-commit-shared`` rule of ``mlir_skew``: what it rewrites, what it leaves,
and that the skew it bridges still exists in the pip ``mlir-opt`` (when that test fails,
mlir-opt has caught up with jaxlib's LLVM and the rule can go)."""

from __future__ import annotations

import subprocess

import pytest

from mosaic_async_store.tools import mlir_skew, toolchain

_CALL = ('"llvm.call_intrinsic"(%7{extra}) <{{fastmathFlags = #llvm.fastmath<none>, '
         'intrin = "llvm.nvvm.tcgen05.commit{kind}", op_bundle_sizes = array<i32>, '
         'operandSegmentSizes = array<i32: {n}, 0>}}> : ({types}) -> ()')


def _call(kind: str, space: str = "<3>") -> str:
  mc = ".mc" in kind
  return _CALL.format(extra=", %8" if mc else "", kind=kind, n=2 if mc else 1,
                      types=f"!llvm.ptr{space}" + (", i16" if mc else ""))


@pytest.mark.parametrize("kind, shared", [(".cg1", ".shared.cg1"), (".cg2", ".shared.cg2"),
                                          (".mc.cg2", ".mc.shared.cg2"),
                                          (".mc.cg1", ".mc.shared.cg1")])
def test_a_shared_barrier_gets_the_shared_intrinsic(kind, shared):
  assert mlir_skew.normalize_generic_mlir(_call(kind)) == _call(shared)


@pytest.mark.parametrize("kind", [".cg1", ".mc.cg2"])
def test_a_generic_pointer_and_a_rewritten_call_are_left_alone(kind):
  generic = _call(kind, space="")
  assert mlir_skew.normalize_generic_mlir(generic) == generic
  once = mlir_skew.normalize_generic_mlir(_call(kind))
  assert mlir_skew.normalize_generic_mlir(once) == once


def _kernel_module(call: str) -> str:
  return ('"builtin.module"() ({\n  "gpu.module"() <{sym_name = "m", targets = '
          '[#nvvm.target<chip = "sm_100a", features = "+ptx86">]}> ({\n'
          '    "llvm.func"() <{function_type = !llvm.func<void (ptr<3>)>, sym_name = "k"}>'
          ' ({\n    ^bb0(%7: !llvm.ptr<3>):\n      ' + call + '\n'
          '      "llvm.return"() : () -> ()\n    }) {nvvm.kernel} : () -> ()\n'
          '  }) : () -> ()\n}) {gpu.container_module} : () -> ()\n')


def test_the_skew_still_exists_and_the_rule_compiles_it():
  """mlir-opt 22 refuses jaxlib's call (the generic intrinsic on a shared pointer) and
  lowers the rewritten one to the instruction upstream's path emits."""
  opt = [str(toolchain.find_tool("mlir-opt")),
         "--pass-pipeline=builtin.module(gpu-module-to-binary{format=isa})"]
  text = _kernel_module(_call(".cg1"))
  raw = subprocess.run(opt, input=text, capture_output=True, text=True)
  assert raw.returncode != 0 and "expects ptr" in raw.stderr, raw.stderr
  fixed = subprocess.run(opt, input=mlir_skew.normalize_generic_mlir(text),
                         capture_output=True, text=True)
  assert fixed.returncode == 0, fixed.stderr
  assert "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64" in (
      fixed.stdout)
