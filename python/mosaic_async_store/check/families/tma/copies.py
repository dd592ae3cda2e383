"""Family: the bulk and tensor copies (TMA) and their groups, run by the machine.

The grammar is ``tma_forms.decode_bulk``'s, the geometry of a tensor copy
``tma_geometry``'s, the size and alignment rules ``bulk_rules``'; this module resolves
the operands (addresses, the tensor map parameter, the mbarrier), makes the copy an
asynchronous operation (``bulk_op.BulkOp``, which lands itself) and runs the bulk
groups.  It runs:

  * loads into shared memory, completing on an mbarrier (``complete_tx``):
    ``cp.async.bulk.tensor.Nd.shared::{cta,cluster}.global{.tile}.mbarrier::...``
    (out-of-bounds elements written as zeros, the swizzle applied) and
    ``cp.async.bulk.shared::{cta,cluster}.global.mbarrier::...``, each with
    ``.multicast::cluster`` (the same offsets in every CTA of ``ctaMask``, each CTA's
    own mbarrier counting the bytes); ``cp.async.bulk.shared::cluster.shared::cta``;
    a tensor load's ``.cta_group::1`` / ``::2``: its mbarrier operand is read as a
    ``.shared::cluster`` address (jax passes ``mapa`` of the leader CTA's barrier), and
    with ``::2`` the bytes count off that barrier even where it is the peer's
    ("When .cta_group::2 is specified, the mbarrier object mbar can be in shared memory
    of either the same CTA as the shared memory destination dstMem or in its
    peer-CTA", PTX ISA 9.7.9.25.5.1; ``bulk_rules.mbar_with_dst``);
  * stores from shared memory into a bulk group: ``cp.async.bulk.tensor.Nd.global.
    shared::cta{.tile}.bulk_group`` (elements past the tensor's end not written; a box
    starting at a negative coordinate is ``tensor-store-coords``: PTX ISA 9.7.9.25.5.1,
    "Starting co-ordinates for Bounding Box (tensorCoords) must be non-negative") and
    ``cp.async.bulk.global.shared::cta.bulk_group``;
  * ``cp.async.bulk.commit_group`` and ``cp.async.bulk.wait_group{.read} N``;
  * ``cp.reduce.async.bulk{.tensor}`` into global memory (a bulk group) or a peer's
    shared memory (an mbarrier);
  * ``prefetch{.param}.tensormap``, ``cp.async.bulk.prefetch*`` (hints: their address
    is checked, nothing else happens).

A copy reads its source when it lands (the schedule picks when), so a write to the
source before then is seen, as on hardware; a store lands in two steps, its reads of
shared memory, then its writes to global memory (``wait_group.read`` waits for the
first only).  Reductions (``cp.reduce.async.bulk{.tensor}``) reduce element by element
as ``red`` does (the integer operations, the ``.noftz`` f16 / bf16 and the f32 ``.add``;
f64 ``.add`` and a tensor form's float additions refused by name), each element's
reduction a strong ``.relaxed.gpu`` write (``bulk_op``: reductions of one element do not
race); a ``.L2::cache_hint`` operand is a hint (read, no effect).

The bulk groups (commit, wait, the clock slots a group's accesses are known by) are
``bulk_groups``'.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.check import addresses, asyncops, proxy, sync
from mosaic_async_store.check.families.tma import bulk_groups
from mosaic_async_store.check.families.tma import bulk_rules
from mosaic_async_store.check.families.tma import forms as tma_forms
from mosaic_async_store.check.families.tma import geometry as tma_geometry
from mosaic_async_store.check.families.tma.bulk_op import BulkOp, Moves
from mosaic_async_store.check.findings import Finding, Stop, fault
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.ops import RED_FORMS
from mosaic_async_store.check.outcomes import YIELD

__all__ = ["OPCODES"]


# -- operands -------------------------------------------------------------------------


def _rule(k, name, message):
  """A broken size or alignment rule (``bulk_rules.RULES``): the copy is undefined, so
  the run stops with it."""
  if message is not None:
    raise Stop(Finding(name, message))


def _smem(k, th, addr, space, n):
  """(CTA, offset) of ``n`` bytes of shared memory at ``addr`` in ``space``."""
  buf, off = addresses.mem(k, th, space, addr, 1)
  if off + n > len(buf):
    raise fault(f"CTA {th.cta} thread {th.tid}: {n} bytes of shared memory at "
                      f"{addr:#x} run past the end of CTA {k.smem_cta[id(buf)]}'s "
                      f"{len(buf)} bytes")
  return k.smem_cta[id(buf)], off


def _global(k, th, addr, n):
  """(buffer, offset) of ``n`` bytes of global memory at ``addr``."""
  buf, off = addresses.mem(k, th, "global", addr, 1)
  if off + n > len(buf):
    raise fault(f"CTA {th.cta} thread {th.tid}: {n} bytes of global memory at "
                      f"{addr:#x} run past the end of "
                      f"{k.gshadow.describe(buf, off, 1).split(' bytes')[0]}")
  return buf, off


def _signed32(v):
  v &= 0xFFFFFFFF
  return v - (1 << 32) if v >> 31 else v


def _tensor(k, th, form, getter, smem_off, into_global):
  """(map, global buffer, tensor base offset, layout runs) of a tensor operand; a copy
  ``into_global`` (a store or a reduction) must start at non-negative coordinates."""
  map_op, coord_ops = form.operand("tensorMap"), form.operand("tensorCoords")
  addr = getter(map_op)(th)
  _rule(k, "tensor-map-align", bulk_rules.tensor_map_aligned(addr))
  tmap = addresses.tensor_map(k, th, addr)
  _rule(k, "tensor-dims", bulk_rules.dims_match(form.dims, len(tmap.dims)))
  _rule(k, "tensor-traversal-stride", bulk_rules.traversal_stride_inner(tmap))
  moff = addresses.param_offset(addr)
  base_addr = int.from_bytes(k.param_buf[moff + 8:moff + 16], "little")
  buf, base = addresses.mem(k, th, "global", base_addr, 1)
  coords = [_signed32(getter(c)(th)) for c in coord_ops]
  if into_global:
    _rule(k, "tensor-store-coords", bulk_rules.store_coords_non_negative(coords))
  runs = tma_geometry.runs(tma_geometry.box_layout(tmap, coords, smem_off))
  return tmap, buf, base, runs


def _moves_of(runs, base, smem_off, load):
  """The ``bulk_op.Moves`` of a tensor copy's runs: a load's out-of-bounds runs read
  nothing (source -1: they land as zeros), a store's are left out."""
  smem, glob = smem_off + runs.smem_off, base + runs.global_off
  if load:
    return Moves(smem, np.where(runs.oob, -1, glob), runs.nbytes)
  keep = ~runs.oob
  return Moves(glob[keep], smem[keep], runs.nbytes[keep])


def _issue(k, th, op):
  op.fenced = proxy.fenced(k, op.vc) if op.reads or op.writes else None
  op.fenced_global = proxy.fenced(k, op.vc, "global") if "global" in (op.src[0], op.dst[0]) \
      else None
  asyncops.issue(k, th, op)


# -- the handlers ---------------------------------------------------------------------


# A tensor map's element type -> the PTX type of a tensor reduction (and/or/xor: .b).
_MAP_TYPES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
              "int32": "s32", "uint32": "u32", "int64": "s64", "uint64": "u64"}


def _reduction(opcode, red_op, t, tensor=False):
  """(operation, type) of a bulk reduction the checker runs exactly, else refused by
  name: ``ops.RED_FORMS`` (the reductions ``red`` runs).  Not in a tensor form, the
  .f32 .add too, exactly as ``red.add.f32`` on global memory runs it (the only place
  it may go): PTX ISA, cp.reduce.async.bulk: "The floating point operation .add rounds
  to the nearest even.  The current implementation of cp.reduce.async.bulk.add.f32
  flushes subnormal inputs and results to sign-preserving zero" (``floats.reduce_add``;
  a NaN result is refused there).  Refused: the f64 .add (no ``red.add.f64`` here) and
  a tensor reduction's float additions (the tensor form has no ``.noftz``, and its
  subnormal handling is not given)."""
  if red_op in ("and", "or", "xor") and t[0] in "su":
    t = "b" + t[1:]
  if (red_op, t) not in RED_FORMS or t == "f64" or \
     (tensor and t in ("f16", "bf16", "f32")):
    raise NotImplementedError(f"{opcode} (.{red_op}.{t}: the bulk reductions the checker "
                              "runs are the integer ones and, not in a tensor form, the "
                              ".noftz f16 / bf16 and the f32 .add)")
  return red_op, t


def _copy(k, ins, form):
  """A load (tensor or not, multicast or not), a shared-to-cluster copy, a store or a
  reduction.  The ``.L2::cache_hint`` operand is a hint: read, no effect."""
  red = None if form.red_op is None or form.red_type is None else \
      _reduction(ins.opcode, form.red_op, form.red_type)
  insn, getter = len(k.program.code), k.program.getter
  tensor = form.dims is not None
  into_smem = form.dst.startswith("shared")
  dst_get = None if tensor and not into_smem else getter(form.operand("dstMem"))
  src_get = None if tensor and into_smem else getter(form.operand("srcMem"))
  size_get = None if tensor else getter(form.operand("size"))
  mbar_get = getter(form.operand("mbar")) if form.completion == tma_forms.MBAR else None
  mask_get = getter(form.operand("ctaMask")) if form.multicast else None
  name = ins.opcode

  def copy(th):
    reduction = red
    if tensor:
      smem_addr = (dst_get if into_smem else src_get)(th)
      _rule(k, "tensor-smem-align", bulk_rules.tensor_smem_aligned(smem_addr))
      cta, smem_off = _smem(k, th, smem_addr, form.dst if into_smem else form.src, 1)
      tmap, buf, base, runs = _tensor(k, th, form, getter, smem_off, not into_smem)
      n = tma_geometry.box_bytes(tmap)
      _smem(k, th, smem_addr, form.dst if into_smem else form.src, n)
      moves = _moves_of(runs, base, smem_off, into_smem)
      if form.red_op is not None:   # a tensor reduction: its type is the map's
        reduction = _reduction(ins.opcode, form.red_op, _MAP_TYPES.get(tmap.dtype, "none"),
                               tensor=True)
      if into_smem and tmap.oob_fill != "zero" and (moves.src < 0).any():
        tma_geometry.oob_fill_element(tmap)   # (refuses the NaN fill by name)
    else:
      n = size_get(th) & 0xFFFFFFFF
      _rule(k, "bulk-size", bulk_rules.size_multiple_of_16(n))
      d, s = dst_get(th), src_get(th)
      _rule(k, "bulk-align", bulk_rules.bulk_aligned(d, "dstMem"))
      _rule(k, "bulk-align", bulk_rules.bulk_aligned(s, "srcMem"))
      if form.src == "global":
        buf, g = _global(k, th, s, n)
        cta, smem_off = _smem(k, th, d, form.dst, n)
        moves = Moves([smem_off], [g], [n])
      elif form.dst == "global":
        buf, g = _global(k, th, d, n)
        cta, smem_off = _smem(k, th, s, form.src, n)
        moves = Moves([g], [smem_off], [n])
      else:   # shared::cta -> shared::cluster
        src_cta, src_off = _smem(k, th, s, form.src, n)
        _rule(k, "bulk-shared-cta", bulk_rules.shared_cta_is_own(src_cta, th.cta, "srcMem"))
        cta, smem_off = _smem(k, th, d, form.dst, n)
        if form.red_op is None:   # (the ISA says so of cp.async.bulk, not of the reduction)
          _rule(k, "bulk-s2s-peer", bulk_rules.copy_to_peer(cta, th.cta, name))
        moves = Moves([smem_off], [src_off], [n])
    if not into_smem:
      _rule(k, "bulk-shared-cta", bulk_rules.shared_cta_is_own(cta, th.cta, "srcMem"))
      groups = bulk_groups.groups_of(k, th)
      gid = groups.committed + 1
      counts = groups.pending.setdefault(gid, [0, 0])
      counts[0] += 1
      counts[1] += 1
      _issue(k, th, BulkOp(th, insn, name, ("smem", cta), ("global", buf), moves,
                           bulk_groups.BulkGroupDone(groups, gid), reduction))
      return YIELD if k.sched.pauses(k.step) else None
    mbar_cta, mbar_off = sync.mbarrier_key(k, th, "shared::cluster", mbar_get(th))
    if form.multicast:
      mask = mask_get(th) & 0xFFFF
      _rule(k, "multicast-mask", bulk_rules.multicast_mask(mask, len(k.smem)))
      targets = [r for r in range(len(k.smem)) if mask >> r & 1]
    else:
      _rule(k, "bulk-mbar-dst", bulk_rules.mbar_with_dst(cta, mbar_cta,
                                                         cta_group=form.cta_group or 1))
      targets = [cta]
    for r in targets:
      src = ("global", buf) if form.src == "global" else ("smem", th.cta)
      # (a multicast signals each destination's own barrier at mbar's offset; otherwise
      # the barrier mbar names, which .cta_group::2 lets be the peer's)
      bar = (r if form.multicast else mbar_cta, mbar_off)
      _issue(k, th, BulkOp(th, insn, name, src, ("smem", r), moves,
                           asyncops.MbarrierTx(bar, n), reduction))
      if r != th.cta and th.remote_since is None:
        th.remote_since = int(th.vc[th.slot])
    return YIELD if k.sched.pauses(k.step) else None
  return copy


def _prefetch(k, ins, form):
  """A hint (``prefetch.tensormap``, ``cp.async.bulk.prefetch{.tensor}``): the tensor
  map's (or the data's) address is checked, nothing else happens."""
  if form.kind == "bulk_prefetch":
    src, size = k.program.getter(form.operand("srcMem")), k.program.getter(form.operand("size"))

    def bulk_prefetch(th):
      n, addr = size(th) & 0xFFFFFFFF, src(th)
      _rule(k, "bulk-size", bulk_rules.size_multiple_of_16(n, "cp.async.bulk.prefetch"))
      _rule(k, "bulk-align", bulk_rules.bulk_aligned(addr, "srcMem", "cp.async.bulk.prefetch"))
      _global(k, th, addr, n)
    return bulk_prefetch
  get = k.program.getter(form.operand("a" if form.kind == "prefetch_tensormap" else
                                      "tensorMap"))

  def prefetch(th):
    addresses.tensor_map(k, th, get(th))
  return prefetch


_HANDLERS = {"tensor_load": _copy, "tensor_store": _copy, "copy_g2s": _copy,
             "copy_s2g": _copy, "copy_s2s": _copy, "tensor_reduce": _copy,
             "reduce_s2g": _copy, "reduce_s2s": _copy, "commit": bulk_groups.commit_fn,
             "wait": bulk_groups.wait_fn,
             "prefetch_tensormap": _prefetch, "tensor_prefetch": _prefetch,
             "bulk_prefetch": _prefetch}


def _bulk(k, ins):
  form = tma_forms.decode_bulk(ins)
  handler = _HANDLERS.get(form.kind)
  if handler is None:
    raise NotImplementedError(f"opcode {ins.opcode} ({form.kind.replace('_', ' ')}: not "
                              "run by the checker yet)")
  return handler(k, ins, form)


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/checker/test_opcode_table.py compiles every one).
OPCODES = {
    "cp": Opcode(_bulk, (
        "cp.async.bulk.tensor.2d.shared::cta.global.mbarrier::complete_tx::bytes "
        "[%r1], [%rd1, {%r2, %r3}], [%r4]",
        "cp.async.bulk.tensor.4d.shared::cta.global.tile.mbarrier::complete_tx::bytes"
        ".cta_group::2 [%r1], [%rd1, {%r2, %r3, %r4, %r5}], [%r6]",
        "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%r5], [%rd1, {%r6}], [%r2], %h1",
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r31, %r30} ], [%r29]",
        "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group "
        "[%rd1, {%r2, %r3}], [%r1]",
        "cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [%r1], [%rd1], %r2, "
        "[%r3]",
        "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes "
        "[%r1], [%r2], %r3, [%r4]",
        "cp.async.bulk.global.shared::cta.bulk_group [%rd13], [%rd14], %r28",
        "cp.async.bulk.global.shared::cta.bulk_group.L2::cache_hint [%rd1], [%r1], 64, %rd2",
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.f16 [%rd1], [%r1], %r2",
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd1], [%r1], %r2",
        "cp.reduce.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes.add.u32 "
        "[%r1], [%r2], %r3, [%r4]",
        "cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%rd1, {%r1, %r2}]",
        "cp.async.bulk.prefetch.L2.global [%rd1], %r1",
        "cp.async.bulk.commit_group", "cp.async.bulk.wait_group 0",
        "cp.async.bulk.wait_group.read 1"), (
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f64 [%rd1], [%r1], %r2",
        "cp.reduce.async.bulk.global.shared::cta.bulk_group.min.f16 [%rd1], [%r1], %r2",
        "cp.async.bulk.tensor.4d.shared::cta.global.im2col.mbarrier::complete_tx::bytes "
        "[%r1], [%rd1, {%r2, %r3, %r4, %r5}], [%r6], {%h1, %h2}",
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster.cta_group::2 [%r1], [%rd1, {%r2, %r3}], [%r4], %h1",
        "cp.async.ca.shared.global [%r1], [%rd1], 16")),
    "prefetch": Opcode(_bulk, ("prefetch.tensormap [%rd1]", "prefetch.param.tensormap [%rd1]"),
                       ("prefetch.global.L2 [%rd1]",)),
}
