"""A target that is (or may be) the executing CTA, and refs at an offset.

red.async into the executing CTA is undefined (PTX ISA 9.1, red.async: the
destination's CTA "is different from the CTA of the executing thread"), so a
reduction whose target is the executing CTA takes the local form (plain
red.shared::cta) and one that may be, depending on which CTA runs it, branches
at run time on ``target rank == %cluster_ctarank``.  st.async may target the
executing CTA (its only requirement is a cluster of more than one CTA).
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jaxlib.mlir import ir  # noqa: E402
from jaxlib.mlir.dialects import arith, gpu  # noqa: E402

import mosaic_async_store as mas  # noqa: E402
from mosaic_async_store import compat
from mosaic_async_store.plan import validate  # noqa: E402
from mosaic_async_store.lowering import target  # noqa: E402
from mosaic_async_store.lowering.ref_offset import ref_offset  # noqa: E402

X = gpu.Dimension.x
RED_LOCAL = "red.relaxed.cluster.shared::cta.add.s32"
RED_ASYNC = "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.s32"
CTARANK = "mov.u32 $0, %cluster_ctarank;"
ARRIVE = "mbarrier.arrive.expect_tx{}.shared::cluster.b64 _, [$0], $1;"


def _kernel(use, *, cluster=(2, 1, 1), dtype=jnp.int32, smem=(64, 128)):
  """Builds a kernel whose body calls ``use(ns)``; returns (result, module text)."""
  mgpu, fa = compat.mosaic_gpu(), compat.fragmented_array()
  scratch = (jax.ShapeDtypeStruct(smem, dtype),
             mgpu.Barrier(arrival_count=128, num_barriers=1))
  out = {}

  def body(ctx, gmem, out_ref, s):
    del ctx, gmem, out_ref
    ref, bar = s
    el = compat.dtype_to_ir_type(np.dtype(dtype))
    one = arith.constant(el, 1) if isinstance(el, ir.IntegerType) else arith.constant(el, 1.0)
    value = fa.FragmentedArray.splat(one, (64, 128), fa.WGMMA_LAYOUT,
                                     is_signed=True if isinstance(el, ir.IntegerType) else None)
    own = gpu.cluster_block_id(X)
    out["result"] = use(dict(value=value, ref=ref, bar=bar[0], own=own))

  spec = jax.ShapeDtypeStruct((128,), jnp.float32)
  with compat.make_ir_context(), ir.Location.unknown():
    module, *_ = compat.kernel_to_module(body, (int(np.prod(cluster)), 1, 1), (128, 1, 1),
                                         (spec,), spec, scratch, cluster=cluster)
    return out["result"], module.operation.get_asm(enable_debug_info=False)


def _index(n):
  return arith.constant(ir.IndexType.get(), n)


def _store(**kwargs):
  return lambda ns: mas.async_store(ns["value"], ns["ref"], ns["bar"], **{
      k: (v(ns) if callable(v) else v) for k, v in kwargs.items()})


# -- which CTAs a cluster_idx names ----------------------------------------------


@pytest.mark.parametrize("make, shape, want", [
    (lambda own: own, (4, 1, 1), "local"),
    (lambda own: arith.remui(arith.addi(own, _index(1)), _index(4)), (4, 1, 1), "peer"),
    (lambda own: arith.subi(_index(1), own), (2, 1, 1), "peer"),   # Pallas' 1 - axis_index
    (lambda own: 0, (4, 1, 1), "either"),                          # CTA 0 is the target in CTA 0
    (lambda own: _index(3), (4, 1, 1), "either"),
    (lambda own: arith.andi(own, _index(2)), (4, 1, 1), "either"),  # own in CTAs 0 and 2
    (lambda own: gpu.thread_id(gpu.Dimension.y), (4, 1, 1), "either"),  # not traceable
    (lambda own: own, None, "local"),                              # no static cluster shape
    (lambda own: arith.addi(own, _index(1)), None, "peer"),
    (lambda own: arith.remui(arith.addi(own, _index(1)),
                             gpu.cluster_dim_blocks(X)), None, "either"),
])
def test_target_kind(make, shape, want):
  got, _ = _kernel(lambda ns: target.target_kind(X, make(ns["own"]), shape))
  assert got == want


def test_target_kind_of_a_dimension_of_one_cta_is_local():
  got, _ = _kernel(lambda ns: target.target_kind(gpu.Dimension.y, 0, (2, 1, 1)))
  assert got == "local"
  assert target.target_kind(None, None, (2, 1, 1)) == "local"


# -- what each kind emits --------------------------------------------------------


def test_constant_index_branches_on_the_rank():
  nbytes, text = _kernel(_store(cluster_dim=X, cluster_idx=0, atomic="add"))
  assert nbytes == 64 * 128 * 4
  head, _, rest = text.partition(CTARANK)
  assert rest, "no %cluster_ctarank read"
  then, _, orelse = rest.partition("} else {")
  assert "scf.if" in then.split("\n", 3)[2], "the branch must follow the rank comparison"
  assert "arith.cmpi eq" in then.split("\n", 2)[1]
  # local arm: plain reductions into the own CTA, no mapa, 0 tx bytes, release arrive
  assert then.count(RED_LOCAL) == 64 and RED_ASYNC not in then and "mapa" not in then
  assert ARRIVE.format(".release.cluster") in then
  # peer arm: mapa of buffer and barrier, red.async, 256 tx bytes per thread
  assert orelse.count("mapa.shared::cluster.u32") == 2
  assert orelse.count(RED_ASYNC) == 64 and RED_LOCAL not in orelse
  assert ARRIVE.format(".relaxed.cluster") in orelse and "%c256_i32" in orelse
  assert "mapa" not in head


def test_own_cluster_block_id_is_local_without_branch():
  _, text = _kernel(_store(cluster_dim=X, cluster_idx=lambda ns: ns["own"], atomic="add"))
  assert CTARANK not in text and "mapa" not in text and RED_ASYNC not in text
  assert text.count(RED_LOCAL) == 64


def test_always_a_peer_has_no_branch():
  peer = lambda ns: arith.subi(_index(1), ns["own"])  # noqa: E731
  _, text = _kernel(_store(cluster_dim=X, cluster_idx=peer, atomic="add"))
  assert CTARANK not in text and RED_LOCAL not in text
  assert text.count(RED_ASYNC) == 64


def test_st_async_may_target_the_executing_cta():
  """No branch for plain stores: st.async into the executing CTA is defined."""
  _, text = _kernel(_store(cluster_dim=X, cluster_idx=0))
  assert CTARANK not in text and "mapa.shared::cluster.u32" in text
  assert "st.async.shared::cluster" in text


def test_dimension_of_one_cta_takes_the_local_form():
  """Once refused ("st.async into a cluster of one CTA is undefined"): the only CTA
  along y is the executing one, and the cluster has two CTAs, so st.async stays."""
  _, text = _kernel(_store(cluster_dim=gpu.Dimension.y, cluster_idx=0))
  assert "mapa" not in text and CTARANK not in text and "st.async.shared::cluster" in text
  _, text = _kernel(_store(cluster_dim=gpu.Dimension.y, cluster_idx=0, atomic="add"))
  assert "mapa" not in text and text.count(RED_LOCAL) == 64


def test_cluster_of_one_cta_stores_plainly():
  _, text = _kernel(_store(cluster_dim=X, cluster_idx=0), cluster=(1, 1, 1))
  assert "mapa" not in text and "st.async" not in text and "st.shared::cta" in text
  assert ARRIVE.format(".release.cluster") in text


def test_out_of_range_int_index_in_a_dimension_of_one_is_refused():
  with pytest.raises(mas.AsyncStoreError, match="0 <= cluster_idx < 1"):
    _kernel(_store(cluster_dim=gpu.Dimension.y, cluster_idx=1))


# -- refs at an offset -----------------------------------------------------------


def _slice(start, rows):
  """Rows [start, start + rows) of the scratch ref along dim 0 (tiles if tiled)."""
  utils = compat.mosaic_utils()
  def view(ns):
    s = start(ns) if callable(start) else start
    return utils.memref_slice(ns["ref"], utils.ds(s, rows) if not isinstance(s, int)
                              else slice(s, s + rows))
  return view


def _sliced_store(view, **kwargs):
  def use(ns):
    ref = view(ns)
    return ref_offset(ref), mas.async_store(ns["value"], ref, ns["bar"], **kwargs)
  return use


def test_static_slice_at_whole_swizzle_tiles_is_stored_at_its_offset():
  # (128, 128) bf16 tiled for a 128-byte swizzle: (16, 2, 8, 64); tiles 8.. are rows 64..
  (offset, nbytes), text = _kernel(_sliced_store(_slice(8, 8), swizzle=128),
                                   dtype=jnp.bfloat16, smem=(16, 2, 8, 64))
  assert offset == (8 * 2 * 8 * 64, 0) and nbytes == 64 * 128 * 2
  assert "st.async.shared::cluster.mbarrier::complete_tx::bytes" in text


def test_static_slice_inside_a_swizzle_atom_is_refused():
  utils = compat.mosaic_utils()
  # (8, 2, 16, 64) bf16: rows 4..12 of each (16, 64) tile form (8, 64) tiles whose
  # shape and strides fit a 128-byte swizzle, but they start 4 rows (512 bytes) into
  # a 1024-byte swizzle atom: refused (rows 8..16 would be accepted).
  view = lambda ns: utils.memref_slice(ns["ref"], (slice(None), slice(None),  # noqa: E731
                                                   slice(4, 12)))
  with pytest.raises(mas.AsyncStoreError, match=r"ref=offset 256 elements \(512 bytes\)"):
    _kernel(_sliced_store(view, swizzle=128), dtype=jnp.bfloat16, smem=(8, 2, 16, 64))


def test_dynamic_slice_of_whole_tiles_is_traced_and_accepted():
  start = lambda ns: arith.muli(ns["own"], _index(8))  # noqa: E731
  ((offset, step), _), _ = _kernel(_sliced_store(_slice(start, 8), swizzle=128),
                                   dtype=jnp.bfloat16, smem=(16, 2, 8, 64))
  assert (offset, step) == (0, 2 * 8 * 64)


def test_dynamic_slice_by_single_elements_is_refused():
  utils = compat.mosaic_utils()
  view = lambda ns: utils.memref_slice(ns["ref"], (slice(None),  # noqa: E731
                                                   utils.ds(ns["own"], 128)))
  with pytest.raises(mas.AsyncStoreError, match=r"0 \+ 1\*k elements \(0 \+ 2\*k bytes\)"):
    _kernel(_sliced_store(view), dtype=jnp.bfloat16, smem=(64, 256))


def test_dynamic_strides_are_refused():
  with pytest.raises(mas.AsyncStoreError, match=r"ref_strides=\(\?, 1\)"):
    validate.check_strides((validate.DYNAMIC, 1), (64, 128))


@pytest.mark.parametrize("offset, step, bits, swizzle, widest, ok", [
    (0, 0, 16, 128, 16, True), (512, 0, 16, 128, 16, True), (256, 0, 16, 128, 16, False),
    (0, 512, 16, 128, 16, True), (512, 256, 16, 128, 16, False),
    (4, 0, 32, None, 16, True), (2, 0, 32, None, 16, False), (2, 0, 32, None, 8, True),
    (32, 0, 4, None, 16, True), (1, 0, 4, None, 1, False),      # half a byte
    (64, 0, 16, 16, 16, True), (8, 0, 16, 16, 16, False),      # 16-byte swizzle: 128-byte atom
])
def test_check_ref_offset(offset, step, bits, swizzle, widest, ok):
  if ok:
    assert validate.check_ref_offset(offset, step, bits, swizzle, widest) > 0
  else:
    with pytest.raises(mas.AsyncStoreError, match="ref="):
      validate.check_ref_offset(offset, step, bits, swizzle, widest)


def test_unknown_dynamic_offset_is_refused():
  with pytest.raises(mas.AsyncStoreError, match="not traced"):
    validate.check_ref_offset(0, None, 16, 128, 16)


@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
def test_pallas_cluster_idx_zero_branches_in_both_semantics(semantics):
  """Pallas' Warpgroup rule reaches the same async_store with a run-time index."""
  from kernel_text import pallas_module
  text = pallas_module(semantics=semantics, dtype="int32", atomic="add", swizzle=128,
                       target="cta0").operation.get_asm(enable_debug_info=False)
  then, _, orelse = text.partition(CTARANK)[2].partition("} else {")
  assert then.count(RED_LOCAL) == 64 and RED_ASYNC not in then
  assert orelse.count(RED_ASYNC) == 64 and RED_LOCAL not in orelse


@pytest.mark.parametrize("semantics", ["lane", "warpgroup"])
def test_pallas_one_minus_axis_index_is_a_peer(semantics):
  from kernel_text import pallas_module
  text = pallas_module(semantics=semantics, dtype="int32", atomic="add", swizzle=128,
                       ).operation.get_asm(enable_debug_info=False)
  assert CTARANK not in text and text.count(RED_ASYNC) == 64 and RED_LOCAL not in text
