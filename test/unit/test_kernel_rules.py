"""mlir_skew's rules for Mosaic's private passes: one test per rule, on text (exact
rewrites, what each leaves alone) and through mlir-opt (the PTX it gives), plus the
two-stage pipeline's promise that a kernel needing no rule compiles as before."""

import subprocess

import pytest

from mosaic_async_store.tools import mlir_skew, toolchain

# An outlined kernel as the pipeline's first stage prints it: a 256-byte descriptor blob
# read through a pointer cast, a pointer argument, an i64.
_KERNEL = '''"builtin.module"() ({
  "gpu.module"() <{sym_name = "k", targets = [#nvvm.target<O = 3, chip = "sm_90a", features = "+ptx86">]}> ({
    "llvm.func"() <{CConv = #llvm.cconv<ccc>, function_type = !llvm.func<void (array<256 x i8>, ptr, i64)>, linkage = #llvm.linkage<external>, sym_name = "k", visibility_ = 0 : i64}> ({
    ^bb0(%arg0: !llvm.array<256 x i8>, %arg1: !llvm.ptr, %arg2: i64):
      %0 = "builtin.unrealized_conversion_cast"(%arg0) : (!llvm.array<256 x i8>) -> !llvm.ptr
      %1 = "llvm.getelementptr"(%0) <{elem_type = i8, noWrapFlags = 0 : i32, rawConstantIndices = array<i32: 128>}> : (!llvm.ptr) -> !llvm.ptr
      %2 = "llvm.load"(%1) <{ordering = 0 : i64}> : (!llvm.ptr) -> i64
      %3 = "llvm.add"(%2, %arg2) <{overflowFlags = 0 : i32}> : (i64, i64) -> i64
      "llvm.store"(%3, %arg1) <{ordering = 0 : i64}> : (i64, !llvm.ptr) -> ()
      "llvm.return"() : () -> ()
    }) {gpu.kernel, nvvm.kernel, nvvm.maxntid = array<i32: 128, 1, 1>} : () -> ()
  }) : () -> ()
}) {gpu.container_module} : () -> ()
'''


def _rule(name):
  return next(r for r in mlir_skew.KERNEL_RULES if r.name == name)


def test_descriptor_blob_becomes_a_byval_pointer_exactly():
  out = _rule("tma-descriptor-byval").apply(_KERNEL)
  assert ("arg_attrs = [{llvm.align = 64 : i64, llvm.byval = !llvm.array<256 x i8>, "
          "nvvm.grid_constant}, {}, {}], function_type = !llvm.func<void (ptr, ptr, i64)>"
          in out)
  assert "^bb0(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: i64):" in out
  assert ('"builtin.unrealized_conversion_cast"(%arg0) : (!llvm.ptr) -> !llvm.ptr' in out)
  assert "array<256 x i8>) -> !llvm.ptr" not in out
  assert _rule("tma-descriptor-byval").apply(out) == out   # idempotent


def test_byval_merges_existing_argument_attributes():
  text = _KERNEL.replace("CConv = #llvm.cconv<ccc>, ", "CConv = #llvm.cconv<ccc>, arg_attrs = "
                         "[{llvm.noundef}, {llvm.noalias}, {}], ")
  out = _rule("tma-descriptor-byval").apply(text)
  assert ("arg_attrs = [{llvm.noundef, llvm.align = 64 : i64, llvm.byval = "
          "!llvm.array<256 x i8>, nvvm.grid_constant}, {llvm.noalias}, {}]" in out)
  assert out.count("arg_attrs") == 1


def test_byval_reads_argument_types_with_brackets_of_their_own():
  text = (_KERNEL.replace("void (array<256 x i8>, ptr, i64)",
                          "void (array<256 x i8>, struct<(ptr, i64)>, i64)")
          .replace("%arg1: !llvm.ptr,", "%arg1: !llvm.struct<(ptr, i64)>,")
          .replace('"llvm.store"(%3, %arg1)', '"llvm.store"(%3, %1)'))
  out = _rule("tma-descriptor-byval").apply(text)
  assert "function_type = !llvm.func<void (ptr, struct<(ptr, i64)>, i64)>" in out
  assert "^bb0(%arg0: !llvm.ptr, %arg1: !llvm.struct<(ptr, i64)>, %arg2: i64):" in out


def test_byval_leaves_a_blob_used_otherwise_alone():
  used = _KERNEL.replace('"llvm.return"() : () -> ()',
                         '"llvm.store"(%arg0, %arg1) <{ordering = 0 : i64}> : '
                         '(!llvm.array<256 x i8>, !llvm.ptr) -> ()\n      "llvm.return"() : () -> ()')
  assert _rule("tma-descriptor-byval").apply(used) == used
  not_kernel = _KERNEL.replace("gpu.kernel, nvvm.kernel, ", "")
  assert _rule("tma-descriptor-byval").apply(not_kernel) == not_kernel


def test_byval_kernel_translates_to_a_param_array_and_cvta_param():
  """Without the rule the translation fails (the unrealized cast); with it the PTX takes
  the blob as a 64-byte aligned .param array and reads the second descriptor at +128
  (a TMA kernel, whose address escapes into cp.async.bulk.tensor, takes it with
  cvta.param: test/lit/tma.py)."""
  opt = str(toolchain.find_tool("mlir-opt"))
  _, translate = toolchain.pipeline_stages("sm_90a")
  raw = subprocess.run([opt, f"--pass-pipeline={translate}"], input=_KERNEL,
                       capture_output=True, text=True)
  assert raw.returncode != 0 and "builtin.unrealized_conversion_cast" in raw.stderr
  ptx = toolchain.extract_ptx(subprocess.run(
      [opt, f"--pass-pipeline={translate}"], input=mlir_skew.prepare_outlined_kernels(_KERNEL),
      capture_output=True, text=True, check=True).stdout)
  assert ".param .align 64 .b8 k_param_0[256]" in ptx
  assert "ld.param.b64" in ptx and "[k_param_0+128]" in ptx
  toolchain.ptx_to_cubin(ptx, "sm_90a")   # ptxas takes it


@pytest.mark.parametrize("op", ['"nvvm.setmaxregister"() <{action = #nvvm<action decrease>, '
                                'regCount = 40 : i32}> : () -> ()',
                                '%9 = "llvm.inline_asm"() <{asm_string = "setmaxnreg.dec.sync.'
                                'aligned.u32 40;", constraints = "", has_side_effects} : () '
                                '-> !llvm.void'])
def test_setmaxnreg_kernel_gets_minctasm(op):
  text = _KERNEL.replace('"llvm.return"() : () -> ()', op + '\n      "llvm.return"() : () -> ()')
  out = _rule("setmaxnreg-minctasm").apply(text)
  assert "{gpu.kernel, nvvm.kernel, nvvm.minctasm = 1 : i32, nvvm.maxntid" in out
  assert _rule("setmaxnreg-minctasm").apply(out) == out
  assert _rule("setmaxnreg-minctasm").apply(_KERNEL) == _KERNEL   # no setmaxnreg: as it was


def test_extract_strided_slice_1d_becomes_a_shuffle_exactly():
  text = ('%5 = "vector.extract_strided_slice"(%4) <{offsets = [2], sizes = [3], strides = '
          '[1]}> : (vector<8xf16>) -> vector<3xf16>')
  assert mlir_skew.normalize_generic_mlir(text) == (
      '%5 = "vector.shuffle"(%4, %4) <{mask = array<i64: 2, 3, 4>}> : '
      '(vector<8xf16>, vector<8xf16>) -> vector<3xf16>')
  two_d = ('%5 = "vector.extract_strided_slice"(%4) <{offsets = [0, 2], sizes = [1, 2], '
           'strides = [1, 1]}> : (vector<2x8xf16>) -> vector<1x2xf16>')
  assert mlir_skew.normalize_generic_mlir(two_d) == two_d


_SLICE_KERNEL = """
module attributes {gpu.container_module} {
  gpu.module @m {
    gpu.func @k(%p: !llvm.ptr) kernel {
      %v = llvm.load %p : !llvm.ptr -> vector<4xf32>
      %s = vector.extract_strided_slice %v {offsets = [2], sizes = [2], strides = [1]} : vector<4xf32> to vector<2xf32>
      llvm.store %s, %p : vector<2xf32>, !llvm.ptr
      gpu.return
    }
  }
}
"""


def test_extract_strided_slice_lowers_only_after_the_rule():
  """The project's pipeline cannot translate the slice (what WGMMA kernels stop on with
  jax 0.12); after the rule the kernel compiles, the slice a shuffle of lanes 2 and 3."""
  generic = subprocess.run([str(toolchain.find_tool("mlir-opt")), "--mlir-print-op-generic"],
                           input=_SLICE_KERNEL, capture_output=True, text=True, check=True).stdout
  with pytest.raises(toolchain.CompileError, match="vector.extract_strided_slice"):
    toolchain._run_mlir_opt(generic, "sm_90a")
  ptx = toolchain.mlir_to_ptx(generic)   # mlir_to_ptx applies RULES
  toolchain.ptx_to_cubin(ptx, "sm_90a")
  assert "ld.global.v4.b32 \t{%r1, %r2, %r3, %r4}" in ptx
  assert "st.global.v2.b32 \t[%rd2], {%r3, %r4};" in ptx   # elements 2 and 3


def test_every_rule_is_named_and_explained():
  names = [r.name for r in (*mlir_skew.RULES, *mlir_skew.KERNEL_RULES)]
  assert len(set(names)) == len(names)
  for rule in (*mlir_skew.RULES, *mlir_skew.KERNEL_RULES):
    assert rule.name and len(rule.why) > 80


@pytest.mark.parametrize("peer", [True, False])
def test_two_stages_compile_a_store_kernel_as_one_pipeline(peer):
  """The PTX of a kernel that needs no rule is what one mlir-opt run of the whole
  pipeline gives, byte for byte."""
  from jaxlib.mlir import ir
  from mosaic_async_store import compat
  from mosaic_async_store.demo.config import StoreConfig
  from mosaic_async_store.demo.kernel import build_store_module
  cfg = StoreConfig() if peer else StoreConfig(target="local", atomic="add", dtype="f32")
  with compat.make_ir_context(), ir.Location.unknown():
    text = toolchain._prepare(build_store_module(cfg)[0])
  for arch in ("sm_90a", "sm_100a"):
    one = subprocess.run([str(toolchain.find_tool("mlir-opt")),
                          f"--pass-pipeline={toolchain.pipeline_for(arch)}"],
                         input=text, capture_output=True, text=True, check=True).stdout
    assert toolchain.extract_ptx(one) == toolchain.mlir_to_ptx(text, arch)
