"""Invalid inputs at every public surface, as data: one table for the tests and the docs.

Each :class:`Case` names a surface, the input (a Python expression, or a CLI
argv), the exception type it must raise and words its message must contain
(the parameter, the bad value, what to do).  ``test_errors.py`` asserts them;
``scripts/errors_table.py`` runs them and writes ``docs/errors.md``.

    python test/unit/error_cases.py async_store pallas   # one JSON line per case

Cases that build IR or run native tools go through that command in a
subprocess, so that a crash fails those cases instead of the test run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SURFACES = ("plan_store", "async_store", "pallas", "toolchain", "cli")
FIX = "Fix:"  # every AsyncStoreError / TypeError of the project says how to fix it


@dataclasses.dataclass(frozen=True)
class Case:
  surface: str
  id: str
  code: str                 # Python expression (see the namespaces below) or CLI argv
  error: str                # exception class name; CLI cases: "exit 2"
  words: tuple[str, ...]    # the message must contain each of these
  setup: str = "kernel"     # async_store: kernel | cluster1 | none | bare | noip | foreign


def _cases(surface, rows):
  return [Case(surface, *row) for row in rows]


# Namespace: mas, np, WGMMA (the (64, 128) bf16 WGMMA layout), layout(name, shape, dtype).
PLAN = _cases("plan_store", [
    ("layout-name", "mas.plan_store('WGMMA', (64, 128), 'bf16')", "TypeError",
     ("layout=", "'WGMMA'", "TiledLayout")),
    ("shape-int", "mas.plan_store(WGMMA, 64, 'bf16')", "TypeError", ("shape=", "64")),
    ("shape-empty", "mas.plan_store(WGMMA, (), 'bf16')", "AsyncStoreError",
     ("shape=()", "non-empty")),
    ("shape-negative", "mas.plan_store(WGMMA, (64, -128), 'bf16')", "AsyncStoreError",
     ("shape=(64, -128)", "positive")),
    ("shape-float", "mas.plan_store(WGMMA, (64.0, 128), 'bf16')", "TypeError",
     ("shape=", "64.0", "positive ints")),
    ("shape-str", "mas.plan_store(WGMMA, '64x128', 'bf16')", "TypeError",
     ("shape=", "'64x128'")),
    ("shape-vs-layout-tile", "mas.plan_store(WGMMA, (60, 128), 'bf16')", "AsyncStoreError",
     ("shape=(60, 128)", "base tile (64, 8)")),
    ("shape-beyond-smem", "mas.plan_store(WGMMA, (64, 1 << 20), 'f32')", "AsyncStoreError",
     ("shape=(64, 1048576)", "232448 bytes", "227 KiB")),
    ("shape-odd-4bit", "mas.plan_store(layout('WGMMA', (64, 8), 'i4'), (3, 5), 'i4')",
     "AsyncStoreError", ("shape=(3, 5)", "60 bits", "integer bytes")),
    ("dtype-unknown", "mas.plan_store(WGMMA, (64, 128), 'float17')", "AsyncStoreError",
     ("dtype=float17", "bfloat16")),
    ("dtype-bool", "mas.plan_store(WGMMA, (64, 128), np.bool_)", "AsyncStoreError",
     ("dtype=bool", "integer type")),
    ("dtype-complex", "mas.plan_store(WGMMA, (64, 128), np.complex64)", "AsyncStoreError",
     ("dtype=complex64",)),
    ("dtype-none", "mas.plan_store(WGMMA, (64, 128), None)", "TypeError",
     ("dtype=", "None", "NumPy/JAX dtype")),
    ("swizzle-8", "mas.plan_store(WGMMA, (64, 128), 'bf16', swizzle=8)", "AsyncStoreError",
     ("swizzle=8", "16, 32, 64 or 128")),
    ("swizzle-str", "mas.plan_store(WGMMA, (64, 128), 'bf16', swizzle='128')", "TypeError",
     ("swizzle=", "'128'", "as an int")),
    ("swizzle-float", "mas.plan_store(WGMMA, (64, 128), 'bf16', swizzle=128.0)", "TypeError",
     ("swizzle=", "128.0")),
    ("swizzle-bool", "mas.plan_store(WGMMA, (64, 128), 'bf16', swizzle=True)", "TypeError",
     ("swizzle=", "True")),
    ("swizzle-tile-too-wide",
     "mas.plan_store(layout('WGMMA', (64, 16), 'f32'), (64, 16), 'f32', swizzle=128)",
     "AsyncStoreError", ("shape=(64, 16)", "swizzle tile (8, 32)")),
    ("swizzle-vs-tiling",
     "mas.plan_store(WGMMA, (64, 128), 'bf16', swizzle=64, ref_shape=(8, 2, 8, 64))",
     "AsyncStoreError", ("swizzle=64", "128 contiguous bytes", "swizzle=128")),
    ("swizzle-plain-ref",
     "mas.plan_store(WGMMA, (64, 128), 'bf16', swizzle=128, ref_shape=(64, 128))",
     "AsyncStoreError", ("swizzle=128", "plain (untiled) ref", "swizzle=None")),
    ("tiling_rank-negative",
     "mas.plan_store(WGMMA, (64, 128), 'bf16', swizzle=128, tiling_rank=-1)",
     "AsyncStoreError", ("tiling_rank=-1", ">= 0")),
    ("tiling_rank-str", "mas.plan_store(WGMMA, (64, 128), 'bf16', swizzle=128, tiling_rank='2')",
     "TypeError", ("tiling_rank=", "'2'")),
    ("tiling_rank-wrong", "mas.plan_store(WGMMA, (64, 128), 'bf16', swizzle=128, tiling_rank=1)",
     "AsyncStoreError", ("tiling_rank=1", "ref rank 4 minus array rank 2")),
    ("optimized-str", "mas.plan_store(WGMMA, (64, 128), 'bf16', optimized='yes')", "TypeError",
     ("optimized=", "'yes'", "True or False")),
    ("optimized-conflicts",
     "mas.plan_store(layout('WGMMA', (64, 128), 'f64'), (64, 128), 'f64', swizzle=16)",
     "AsyncStoreError", ("optimized=True", "bank-conflict-free", "optimized=False")),
    ("peer-str", "mas.plan_store(WGMMA, (64, 128), 'bf16', peer='yes')", "TypeError",
     ("peer=", "'yes'")),
    ("target-type", "mas.plan_store(WGMMA, (64, 128), 'bf16', target='peer')", "TypeError",
     ("target=", "'peer'", "Target")),
    ("target-peer-conflict",
     "mas.plan_store(WGMMA, (64, 128), 'bf16', peer=True, target=Target(peer=False))",
     "AsyncStoreError", ("peer=True", "target=local", "either peer or target")),
    ("target-cluster-size-conflict",
     "mas.plan_store(WGMMA, (64, 128), 'bf16', cluster_size=4, "
     "target=Target(cluster_shape=(2, 1, 1)))",
     "AsyncStoreError", ("cluster_size=4", "2, as the target's cluster has")),
    ("atomic-unknown", "mas.plan_store(WGMMA, (64, 128), 'i32', atomic='mul')",
     "AsyncStoreError", ("atomic='mul'", "add, min, max")),
    ("atomic-upper-case", "mas.plan_store(WGMMA, (64, 128), 'i32', atomic='ADD')",
     "AsyncStoreError", ("atomic='ADD'", 'atomic="add"')),
    ("atomic-int", "mas.plan_store(WGMMA, (64, 128), 'i32', atomic=1)", "TypeError",
     ("atomic=", "1", "atomic=\"add\"")),
    ("atomic-float-min", "mas.plan_store(WGMMA, (64, 128), 'f32', atomic='min')",
     "AsyncStoreError", ("atomic=min", "float32 only add")),
    ("atomic-int8", "mas.plan_store(layout('WGMMA_8BIT', (64, 128), 'i8'), (64, 128), 'i8', "
     "atomic='add')", "AsyncStoreError", ("atomic=add", "only a plain store for int8")),
    ("ref_shape-mismatch", "mas.plan_store(WGMMA, (64, 128), 'bf16', ref_shape=(64, 64))",
     "AsyncStoreError", ("ref=shape (64, 64)", "(64, 128)")),
    ("ref_strides-count", "mas.plan_store(WGMMA, (64, 128), 'bf16', ref_strides=(128,))",
     "AsyncStoreError", ("ref_strides=(128,)", "2 strides")),
    ("ref_strides-zero", "mas.plan_store(WGMMA, (64, 128), 'bf16', ref_strides=(0, 1))",
     "AsyncStoreError", ("ref_strides=(0, 1)", "positive")),
    ("ref_strides-overlap", "mas.plan_store(WGMMA, (64, 128), 'bf16', ref_strides=(64, 1))",
     "AsyncStoreError", ("ref_strides=(64, 1)", "share an address")),
    ("ref_strides-str", "mas.plan_store(WGMMA, (64, 128), 'bf16', ref_strides=('128', 1))",
     "TypeError", ("ref_strides=", "'128'")),
    ("splat-size", "mas.plan_store(layout('SPLAT', (8, 8), 'f32'), (8, 8), 'f32')",
     "AsyncStoreError", ("shape=(8, 8)", "multiple of 128")),
    ("splat-int4-128", "mas.plan_store(layout('SPLAT', (128,), 'i4'), (128,), 'i4', swizzle=None)",
     "AsyncStoreError", ("a splat with whole bytes per thread", "256 elements")),
    ("strided-shape", "mas.plan_store(layout('STRIDED', (64, 128), 'f32'), (64, 64), 'f32')",
     "AsyncStoreError", ("layout=WGStridedFragLayout", "shape (64, 64)")),
    ("bytes_for_thread-range", "mas.plan_store(WGMMA, (64, 128), 'bf16').bytes_for_thread(128)",
     "AsyncStoreError", ("thread=128", "0 <= thread < 128")),
    ("bytes_for_thread-str", "mas.plan_store(WGMMA, (64, 128), 'bf16').bytes_for_thread('1')",
     "TypeError", ("thread=", "'1'")),
])

# Inside a 2-CTA kernel body (setup "kernel"): value (bf16 (64, 128) WGMMA array),
# tiled (its (8, 2, 8, 64) SMEM ref for a 128-byte swizzle), plain (bf16 (64, 128)),
# plain32 (f32 (64, 128)), ivalue / plain_i32 (an int32 (64, 128) WGMMA array and
# its ref), shifted(ref, n) (ref n elements further; None: a run-time offset), gmem
# (a kernel argument), bar (one barrier), bars (two), peer (index 1), gpu, ir, arith,
# mas, np.
_X = "cluster_dim=gpu.Dimension.x"
ASYNC = _cases("async_store", [
    ("outside-context", "mas.async_store(value, tiled, bar, swizzle=128)", "AsyncStoreError",
     ("context=", "outside any MLIR context", "kernel body"), "none"),
    ("bare-context", "mas.async_store(value, tiled, bar, swizzle=128)", "AsyncStoreError",
     ("context=", "without the dialects", "llvm.inline_asm", "make_ir_context"), "bare"),
    ("no-insertion-point", "mas.async_store(value, tiled, bar, swizzle=128)", "AsyncStoreError",
     ("context=", "no insertion point"), "noip"),
    ("foreign-context", "mas.async_store(value, tiled, bar, swizzle=128)", "AsyncStoreError",
     ("value=", "another MLIR context"), "foreign"),
    ("cluster_idx-f32", f"mas.async_store(value, tiled, bar, swizzle=128, {_X}, "
     "cluster_idx=arith.constant(ir.F32Type.get(), 1.0))", "TypeError",
     ("cluster_idx=", "type f32", "integer or index type")),
    ("cluster_idx-vector", f"mas.async_store(value, tiled, bar, swizzle=128, {_X}, "
     "cluster_idx=value.registers.flat[0])", "TypeError",
     ("cluster_idx=", "vector<2xbf16>")),
    ("cluster_idx-float", f"mas.async_store(value, tiled, bar, swizzle=128, {_X}, "
     "cluster_idx=1.5)", "TypeError", ("cluster_idx=", "1.5")),
    ("cluster_idx-bool", f"mas.async_store(value, tiled, bar, swizzle=128, {_X}, "
     "cluster_idx=True)", "TypeError", ("cluster_idx=", "True")),
    ("cluster_idx-range", f"mas.async_store(value, tiled, bar, swizzle=128, {_X}, "
     "cluster_idx=2)", "AsyncStoreError", ("cluster_idx=2", "0 <= cluster_idx < 2")),
    ("cluster_dim-str", "mas.async_store(value, tiled, bar, swizzle=128, cluster_dim='x', "
     "cluster_idx=peer)", "TypeError", ("cluster_dim=", "'x'", "gpu.Dimension")),
    ("cluster_dim-alone", f"mas.async_store(value, tiled, bar, swizzle=128, {_X})",
     "AsyncStoreError", ("cluster_idx=None", "whenever cluster_dim is given")),
    ("cluster_idx-alone", "mas.async_store(value, tiled, bar, swizzle=128, cluster_idx=peer)",
     "AsyncStoreError", ("cluster_dim=None", "whenever cluster_idx is given")),
    ("ref-dtype", "mas.async_store(value, plain32, bar)", "AsyncStoreError",
     ("ref=element type f32", "bf16", "astype")),
    ("ref-shape", "mas.async_store(value, mgpu.utils.memref_slice(plain, slice(0, 32)), bar)",
     "AsyncStoreError", ("ref=shape (32, 128)", "(64, 128)")),
    ("ref-offset-swizzle-phase", "mas.async_store(value, shifted(tiled, 64), bar, swizzle=128)",
     "AsyncStoreError", ("ref=offset 64 elements (128 bytes)", "multiple of 1024 bytes",
                         "whole swizzle tiles")),
    ("ref-offset-misaligned", "mas.async_store(value, shifted(plain, 1), bar)",
     "AsyncStoreError", ("ref=offset 1 elements (2 bytes)", "aligned bytes")),
    ("ref-offset-dynamic", "mas.async_store(value, shifted(plain, None), bar)",
     "AsyncStoreError", ("ref=a dynamic offset", "not traced", "memref_slice")),
    ("ref-gmem", "mas.async_store(value, gmem, bar)", "AsyncStoreError",
     ("ref=memref<128xf32>", "global memory", "shared memory")),
    ("ref-none", "mas.async_store(value, None, bar)", "TypeError", ("ref=", "None", "SMEM")),
    ("value-list", "mas.async_store([1.0, 2.0], tiled, bar, swizzle=128)", "TypeError",
     ("value=", "[1.0, 2.0]", "FragmentedArray")),
    ("barrier-group", "mas.async_store(value, tiled, bars, swizzle=128)", "AsyncStoreError",
     ("barrier=", "2 barriers", "barrier[0]")),
    ("barrier-none", "mas.async_store(value, tiled, None, swizzle=128)", "TypeError",
     ("barrier=", "None", "BarrierRef")),
    ("swizzle-vs-tiling", "mas.async_store(value, tiled, bar, swizzle=64)", "AsyncStoreError",
     ("swizzle=64", "128 contiguous bytes")),
    ("swizzle-left-out", "mas.async_store(value, tiled, bar)", "AsyncStoreError",
     ("swizzle=(left out)", "allowed swizzle=128, the swizzle this ref is tiled for",
      "Fix: pass swizzle=128")),
    ("swizzle-plain-ref", "mas.async_store(value, plain, bar, swizzle=128)", "AsyncStoreError",
     ("swizzle=128", "plain (untiled) ref")),
    ("swizzle-str", "mas.async_store(value, tiled, bar, swizzle='128')", "TypeError",
     ("swizzle=", "'128'")),
    ("tiling_rank-negative", "mas.async_store(value, tiled, bar, swizzle=128, tiling_rank=-1)",
     "AsyncStoreError", ("tiling_rank=-1", ">= 0")),
    ("optimized-none", "mas.async_store(value, tiled, bar, swizzle=128, optimized=None)",
     "TypeError", ("optimized=", "None", "True or False")),
    ("expect_tx-str", "mas.async_store(value, tiled, bar, swizzle=128, expect_tx='no')",
     "TypeError", ("expect_tx=", "'no'", "True or False")),
    ("arrival-unknown", "mas.async_store(value, tiled, bar, swizzle=128, arrival='elected')",
     "AsyncStoreError", ("arrival=elected", '"thread", "warpgroup", "tensor_core"',
                         "orders_tensor_core=True")),
    ("arrival-without-expect_tx", "mas.async_store(value, tiled, bar, swizzle=128, "
     "arrival='warpgroup', expect_tx=False)", "AsyncStoreError",
     ("arrival=warpgroup", "expect_tx=False", "pass expect_tx=True")),
    ("expect_tx-false-plain", f"mas.async_store(value, tiled, bar, swizzle=128, {_X}, "
     "cluster_idx=peer, atomic='add', expect_tx=False)", "AsyncStoreError",
     ("expect_tx=False", "release arrive")),
    ("remote-plain-refused", f"mas.async_store(value, tiled, bar, swizzle=128, {_X}, "
     "cluster_idx=peer, atomic='add', remote_plain_ok=False)", "AsyncStoreError",
     ("atomic=add", "bfloat16", ".acquire.cta", "install() first")),
    ("remote-plain-refused-strategy", f"mas.async_store(value, tiled, bar, swizzle=128, "
     f"{_X}, cluster_idx=peer, strategy='plain', remote_plain_ok=False)", "AsyncStoreError",
     ("strategy=plain", ".release.cluster arrive")),
    ("expect_tx-false-either", f"mas.async_store(ivalue, plain_i32, bar, {_X}, "
     "cluster_idx=0, atomic='add', expect_tx=False)", "AsyncStoreError",
     ("expect_tx=False", "executing CTA at run time", "always another CTA")),
    ("atomic-int", "mas.async_store(value, tiled, bar, swizzle=128, atomic=1)", "TypeError",
     ("atomic=", "1")),
    ("atomic-bf16-min", f"mas.async_store(value, tiled, bar, swizzle=128, {_X}, "
     "cluster_idx=peer, atomic='min')", "AsyncStoreError", ("atomic=min", "bfloat16 only add")),
])

# store(**overrides) lowers a 2-CTA int32 (64, 128) Pallas kernel whose body calls
# mas_pallas.async_store_smem(x, smem, bar.at[0], cluster_idx=peer,
# cluster_dim="cluster") with the given overrides (src=, ref=, barrier=: functions
# of the default), dtype=, shape= (of x and smem), cluster=, semantics=, api=
# ("mas" | "upstream").
PALLAS = _cases("pallas", [
    ("atomic-unknown", "store(atomic='mul')", "AsyncStoreError", ("atomic='mul'",)),
    ("atomic-unknown-warpgroup", "store(atomic='mul', semantics='warpgroup')",
     "AsyncStoreError", ("atomic='mul'",)),
    ("atomic-int", "store(atomic=3)", "TypeError", ("atomic=", "3")),
    ("atomic-float-min", "store(atomic='min', dtype='float32')", "AsyncStoreError",
     ("atomic=min", "float32 only add")),
    ("optimized-str", "store(optimized='no')", "TypeError", ("optimized=", "'no'")),
    ("cluster_dim-unknown", "store(cluster_dim='nope')", "AsyncStoreError",
     ("cluster_dim='nope'", "'cluster'")),
    ("cluster_dim-list", "store(cluster_dim=['cluster'])", "TypeError",
     ("cluster_dim=", "['cluster']")),
    ("cluster_idx-float", "store(cluster_idx=1.5)", "TypeError", ("cluster_idx=", "1.5")),
    ("cluster_idx-f32-array", "store(cluster_idx=lambda peer: peer.astype(jnp.float32))",
     "TypeError", ("cluster_idx=", "float32")),
    ("src-dtype", "store(src=lambda x: x.astype(jnp.float32))", "TypeError",
     ("src has dtype float32", "int32", "astype")),
    ("src-bool", "store(src=lambda x: x > 0, dtype='bool')", "AsyncStoreError",
     ("src=bool",)),
    ("ref-not-a-ref", "store(ref=lambda smem: jnp.zeros((64, 128), jnp.int32))", "TypeError",
     ("ref=", "Pallas Ref")),
    ("barrier-group", "store(barrier=lambda bar: bar)", "TypeError",
     ("barrier holds 2 barriers", "barrier.at[0]")),
    ("installed-upstream-float-min", "store(api='upstream', atomic='min', dtype='float32')",
     "AsyncStoreError", ("atomic=min", "float32 only add")),
    ("eager-call", "eager()", "AsyncStoreError",
     ("called outside a kernel", "Pallas Mosaic GPU kernel", "Fix: call it from the kernel body")),
    ("float-add-without-install", "store(atomic='add', dtype='float32')", "AsyncStoreError",
     ("atomic=add", ".release.cluster arrive", ".acquire.cta", "install() first")),
    # Warpgroup semantics: no register layout can hold these, so layout inference
    # would fail; the planner says why for the value's most natural layout (a splat).
    ("one-int4-warpgroup", "store(semantics='warpgroup', dtype='int4', shape=(1,), "
     "src=lambda x: jnp.full((1,), 3, jnp.int4))", "AsyncStoreError",
     ("shape=(1,)", "1 elements of int4 are 4 bits", "whole number of bytes",
      "Fix: pack pairs of 4-bit values")),
    ("splat-2-int8-warpgroup", "store(semantics='warpgroup', dtype='int8', shape=(2,), "
     "src=lambda x: jnp.full((2,), 3, jnp.int8))", "AsyncStoreError",
     ("shape=(2,)", "a splat whose element count is a multiple of 128", "Fix:")),
])

# toolchain, mas, with_env(var, value, fn), dialect_module() (a Warpgroup Pallas
# module before its dialect lowering), store_module() (the demo's bare store kernel).
TOOLCHAIN = _cases("toolchain", [
    ("arch-malformed", "toolchain.pipeline_for('sm90')", "AsyncStoreError",
     ("arch=sm90", "sm_<digits>", "arch='sm_90a'")),
    ("arch-no-suffix", "toolchain.compile_module('module {}', arch='sm_100')",
     "AsyncStoreError", ("arch=sm_100", "sm_90a, sm_100a, sm_103a", "arch='sm_100a'")),
    ("arch-unsupported", "toolchain.ptx_to_cubin('', arch='sm_80')", "AsyncStoreError",
     ("arch=sm_80", "allowed one of sm_90a, sm_100a, sm_103a")),
    ("arch-not-str", "toolchain.compile_module('module {}', arch=90)", "TypeError",
     ("arch=", "90", "arch='sm_90a'")),
    ("module-not-module", "toolchain.compile_module(42)", "TypeError",
     ("module=", "42", "ir.Module")),
    ("tool-unknown", "toolchain.find_tool('nvcc')", "AsyncStoreError",
     ("tool=nvcc", "ptxas")),
    ("tool-missing", "with_env('MAS_PTXAS', '/nonexistent/ptxas', "
     "lambda: toolchain.find_tool('ptxas'))", "ToolchainError",
     ("MAS_PTXAS=/nonexistent/ptxas", "pip install")),
    ("dialect-ops", "toolchain.compile_module(dialect_module())", "CompileError",
     ("Mosaic GPU dialect", "lower_warpgroup_dialect")),
    ("not-mlir", "toolchain.compile_module('this is not MLIR')", "CompileError",
     ("mlir-opt failed", "this is not MLIR")),
    ("arch-without-clusters", "toolchain.compile_module(store_module(), arch='sm_80')",
     "AsyncStoreError", ("arch=sm_80", "one of sm_90a, sm_100a, sm_103a")),
])

# mosaic-async-store ARGV: exit status 2 and exactly one line on stderr.
CLI = _cases("cli", [
    ("no-command", "", "exit 2", ("COMMAND",)),
    ("unknown-command", "frobnicate", "exit 2", ("frobnicate",)),
    ("dtype", "compile --dtype float128", "exit 2", ("dtype", "float128")),
    ("shape-malformed", "compile --shape 64by128", "exit 2", ("shape", "64by128")),
    ("shape-zero", "compile --shape 64x0 --emit plan", "exit 2", ("--shape 64x0", "positive")),
    ("swizzle", "compile --swizzle 48", "exit 2", ("swizzle", "48")),
    ("layout", "compile --layout WGMMA_9BIT", "exit 2", ("layout", "WGMMA_9BIT")),
    ("target", "compile --target remote", "exit 2", ("target", "remote")),
    ("cluster-zero", "compile --target local --cluster 0", "exit 2", ("--cluster 0", "1..16")),
    ("cluster-peer-of-one", "compile --cluster 1", "exit 2", ("--cluster 1", "--target local")),
    ("target-cta0-store", "compile --target cta0 --emit plan", "exit 2",
     ("no --atomic", "cta0", "--atomic add")),
    ("offset-rows-in-tile", "compile --offset-rows 3 --emit plan", "exit 2",
     ("--offset-rows 3", "multiple of 8")),
    ("atomic-unknown", "compile --atomic mul", "exit 2", ("atomic", "mul")),
    ("atomic-float-min", "compile --dtype f32 --atomic min --emit plan", "exit 2",
     ("--atomic min", "float32")),
    ("shape-vs-tile", "compile --shape 64x100 --emit plan", "exit 2",
     ("--shape 64x100", "--shape 64x128")),
    ("json-without-stats", "compile --emit ptx --json", "exit 2", ("--json", "stats")),
    ("sm-count-store-kernel", "compile --sm-count 4 --emit plan", "exit 2",
     ("--sm-count", "FILE.py:FUNCTION")),
    ("transposed-1d", "compile --transposed --shape 128 --layout WGMMA_ROW --swizzle none "
     "--emit plan", "exit 2", ("--transposed", "2-D")),
    ("output-dir-missing", "compile --emit plan --output /nonexistent/dir/plan.txt",
     "exit 2", ("--output", "/nonexistent/dir/plan.txt")),
    ("beyond-smem", "compile --dtype f32 --shape 64x1048576 --swizzle none --emit plan",
     "exit 2", ("232448 bytes",)),
    ("shape-vs-tile-wider-ref", "compile --shape 2x4x128 --layout STRIDED --emit plan",
     "exit 2", ("--shape 2x4x128 is not supported", "--ref-shape 1x1x2x2x4x64")),
    ("ref-shape-malformed", "compile --ref-shape 8by64 --emit plan", "exit 2",
     ("argument --ref-shape", "malformed shape '8by64'")),
    ("ref-shape-zero", "compile --ref-shape 8x0x8x64 --emit plan", "exit 2",
     ("--ref-shape 8x0x8x64 is not supported", "positive dims")),
    ("ref-shape-vs-shape", "compile --ref-shape 64x64 --emit plan", "exit 2",
     ("--ref-shape 64x64 is not supported", "(64, 128)", "a --ref-shape that untiles to --shape")),
    ("ref-shape-rank", "compile --ref-shape 1x2x3x4x5 --emit plan", "exit 2",
     ("--ref-shape 1x2x3x4x5 is not supported", "tiled by at most 2 trailing dims")),
    ("ref-shape-vs-swizzle", "compile --ref-shape 64x128 --emit plan", "exit 2",
     ("--swizzle 128 is not supported", "plain (untiled) ref", "--ref-shape in 8x64 tiles")),
    ("ref-shape-transposed", "compile --ref-shape 8x2x8x64 --transposed --emit plan", "exit 2",
     ("--ref-shape 8x2x8x64 is not supported", "drop --ref-shape or --transposed")),
])

CASES = PLAN + ASYNC + PALLAS + TOOLCHAIN + CLI


# --- running ------------------------------------------------------------------


def plan_namespace() -> dict:
  import numpy as np

  import mosaic_async_store as mas
  from mosaic_async_store.demo.config import resolve_layout
  from mosaic_async_store.plan.plan_types import Target
  return dict(mas=mas, np=np, layout=resolve_layout, Target=Target,
              WGMMA=resolve_layout("WGMMA", (64, 128), "bf16"))


def _outcome(fn) -> dict:
  try:
    result = fn()
  except Exception as e:  # noqa: BLE001  (the type is what is checked)
    return {"type": type(e).__name__, "message": str(e)}
  return {"type": "no error", "message": repr(result)[:200]}


def run_plan(case: Case, ns=None) -> dict:
  ns = ns or plan_namespace()
  return _outcome(lambda: eval(case.code, dict(ns)))  # noqa: S307


def run_cli(case: Case) -> dict:
  import contextlib
  import io

  from mosaic_async_store.tools import cli
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    status = cli.main(case.code.split())
  return {"type": f"exit {status}", "message": err.getvalue(), "stdout": out.getvalue()}


def main(argv) -> None:
  surfaces = argv or [s for s in SURFACES if s != "plan_store"]
  import error_runners  # noqa: F401  (IR harnesses; beside this file)
  runners = {"plan_store": run_plan, "cli": run_cli,
             "async_store": error_runners.run_async_store,
             "pallas": error_runners.run_pallas, "toolchain": error_runners.run_toolchain}
  for case in CASES:
    if case.surface in surfaces:
      result = runners[case.surface](case)
      print(json.dumps({"surface": case.surface, "id": case.id, **result}), flush=True)


if __name__ == "__main__":  # run as a script, this file's folder is sys.path[0]
  main(sys.argv[1:])
