"""The store kernel of a StoreConfig: what the CLI compiles and the demo runs (the
tests and benchmarks build theirs on it).

The kernel reads each thread's registers from global memory in *register
order* (thread-major, then register, then byte), so any layout and dtype can be
built without upstream's loaders and their limits; the host packs the input
with the planner's NumPy register map (``pack_registers``).  Then:

  init own SMEM from ``init`` -> cluster sync -> store into the target CTA ->
  bounded wait on the own barrier (flag per thread) -> copy own SMEM bytes to
  ``out``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir.dialects import arith, gpu, llvm, nvvm, scf, vector

from mosaic_async_store import compat
from mosaic_async_store.demo.config import StoreConfig, resolve_layout, transpose_permutation
from mosaic_async_store.plan.dtypes import as_dtype
from mosaic_async_store.plan.geometry import register_map
from mosaic_async_store.lowering import debug, ptx
from mosaic_async_store.lowering.store import async_store
from mosaic_async_store.plan.validate import default_ref_shape

__all__ = ["KernelIO", "KernelParts", "kernel_io", "kernel_parts", "build_store_module",
           "build_kernel", "pack_registers", "WAIT_POLLS"]

# try_wait polls before a kernel gives up on its barrier (each poll may
# suspend the thread for a hardware-chosen time; this bounds the run to well
# under a second on an H100/H200).
WAIT_POLLS = 1 << 20


@dataclasses.dataclass(frozen=True)
class KernelIO:
  """Buffer sizes of a store kernel (bytes per CTA unless said otherwise)."""

  register_bytes: int        # per thread per register
  num_registers: int
  smem_shape: tuple[int, ...]  # the SMEM allocation (tiled)
  smem_bytes: int
  cluster: int

  @property
  def src_bytes(self) -> int:
    """Register bytes of one CTA's warpgroup (each CTA reads its own slice)."""
    return 128 * self.num_registers * self.register_bytes


def kernel_io(cfg: StoreConfig) -> KernelIO:
  dt = as_dtype(cfg.dtype)
  layout = resolve_layout(cfg.layout, cfg.shape, cfg.dtype)
  regs = register_map(layout, cfg.shape)
  smem_shape, _ = default_ref_shape(cfg.ref_alloc_shape, dt, cfg.swizzle)
  smem_bytes = int(np.prod(smem_shape)) * dt.bits // 8
  reg_bytes = max(1, regs.vector_length * dt.bits // 8)
  return KernelIO(reg_bytes, 1 if regs.splat else regs.num_registers, smem_shape,
                  -(-smem_bytes // 4) * 4, cfg.cluster)


def _i32(x):
  return arith.constant(ir.IntegerType.get_signless(32), x)


def _tid():
  return arith.index_cast(ir.IntegerType.get_signless(32), gpu.thread_id(gpu.Dimension.x))


def _copy_words(src_ptr, dst_ptr, nbytes: int, src_off, dst_off):
  """All 128 threads copy ``nbytes`` (multiple of 4) as 32-bit words."""
  utils = compat.mosaic_utils()
  i32, i8 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(8)
  index = ir.IndexType.get()
  words = nbytes // 4
  loop = scf.ForOp(arith.constant(index, 0), arith.constant(index, -(-words // 128)),
                   arith.constant(index, 1))
  with ir.InsertionPoint(loop.body):
    k = arith.index_cast(i32, loop.induction_variable)
    w = arith.addi(arith.muli(k, _i32(128)), _tid())
    in_range = arith.cmpi(arith.CmpIPredicate.ult, w, _i32(words))
    if_op = scf.IfOp(in_range)
    with ir.InsertionPoint(if_op.then_block):
      byte = arith.muli(w, _i32(4))
      val = llvm.load(i32, utils.getelementptr(src_ptr, [arith.addi(byte, src_off)], i8))
      llvm.store(val, utils.getelementptr(dst_ptr, [arith.addi(byte, dst_off)], i8))
      scf.yield_([])
    scf.yield_([])


def _load_value(cfg, src_ptr, layout, io: KernelIO, cta_offset):
  """The FragmentedArray whose registers are read from ``src`` in register order."""
  fa, utils = compat.fragmented_array(), compat.mosaic_utils()
  dt = as_dtype(cfg.dtype)
  el = _mlir_type(dt)
  signed = None if dt.is_float else dt.is_signed_int
  i8 = ir.IntegerType.get_signless(8)
  tid = arith.andi(_tid(), _i32(127))
  bytes_ty = ir.VectorType.get((io.register_bytes,), i8)
  if isinstance(layout, fa.WGSplatFragLayout):
    raw = llvm.load(bytes_ty, utils.getelementptr(src_ptr, [cta_offset], i8))
    # The scalar is the first element of the first byte(s); a 4-bit one is the
    # low nibble of byte 0 (element 0 of a 2-element vector).
    nbytes = max(1, dt.bits // 8)
    head = vector.shuffle(raw, raw, list(range(nbytes)))
    as_elems = vector.bitcast(ir.VectorType.get((nbytes * 8 // dt.bits,), el), head)
    scalar = vector.extract(as_elems, [], [0])
    return fa.FragmentedArray.splat(scalar, cfg.shape, layout, is_signed=signed)
  reg_ty = layout.registers_element_type(el)
  shape = layout.registers_shape(cfg.shape)
  regs = np.empty(shape, dtype=object)
  for r, idx in enumerate(np.ndindex(*shape)):
    off = arith.addi(cta_offset, arith.muli(
        arith.addi(arith.muli(tid, _i32(io.num_registers)), _i32(r)), _i32(io.register_bytes)))
    raw = llvm.load(bytes_ty, utils.getelementptr(src_ptr, [off], i8))
    reg_bits = ir.VectorType(reg_ty).shape[0] * dt.bits
    if reg_bits < 8:  # a sub-byte register sits in the low bits of its byte
      low = arith.trunci(ir.IntegerType.get_signless(reg_bits), vector.extract(raw, [], [0]))
      raw = vector.broadcast(ir.VectorType.get((1,), low.type), low)
    regs[idx] = vector.bitcast(reg_ty, raw)
  return fa.FragmentedArray(_registers=regs, _layout=layout, _is_signed=signed)


def _mlir_type(dt) -> ir.Type:
  """Mosaic's element type: integers are signless (signedness rides on the array)."""
  if not dt.is_float:
    return ir.IntegerType.get_signless(dt.bits)
  return compat.dtype_to_ir_type(np.dtype(dt.numpy))


def upstream_store(value, view, bar, peer_idx, cfg):
  """Upstream's Lane path as its Pallas rule drives it: every thread arrives on
  the target CTA's barrier (``peer_idx``: the peer, or the own CTA for a local
  target) announcing total/128 bytes, then store_tiled_async."""
  nbytes = int(np.prod(cfg.shape)) * as_dtype(cfg.dtype).bits // 8
  bar.remap_to_cluster(gpu.Dimension.x, peer_idx).arrive_expect_tx(nbytes // 128)
  value.store_tiled_async(view, bar, gpu.Dimension.x, peer_idx, swizzle=cfg.swizzle,
                          optimized=cfg.optimized, atomic=cfg.atomic)


@dataclasses.dataclass(frozen=True)
class KernelParts:
  """Arguments of upstream's kernel builders (``_kernel_to_module`` / ``as_gpu_kernel``)."""

  body: object
  grid: tuple[int, int, int]
  block: tuple[int, int, int]
  in_shape: tuple
  out_shape: object
  scratch: tuple
  cluster: tuple[int, int, int]
  io: KernelIO


def build_store_module(cfg: StoreConfig, *, bare: bool = False, cost: bool = False):
  """Builds the Mosaic GPU module of ``cfg``'s store kernel (needs no GPU).

  ``bare=True`` leaves out the SMEM initialisation, the wait and the copy-out,
  so that the SASS holds only the register loads and the store itself (used to
  measure the store's code size).  ``cost=True`` is the bare kernel with the
  bounded wait (and its flag store) kept: what bench/cost_measure.py compiles,
  a kernel that loads its registers, stores and waits.  Returns (module,
  KernelIO).  Must be called inside an MLIR context from
  ``compat.make_ir_context()`` with a location.
  """
  with compat.enable_x64():
    parts = kernel_parts(cfg, bare=bare, cost=cost)
    module, *_ = compat.kernel_to_module(
        parts.body, parts.grid, parts.block, parts.in_shape, parts.out_shape,
        parts.scratch, cluster=parts.cluster)
  return module, parts.io


def kernel_parts(cfg: StoreConfig, *, bare: bool = False, store=None,
                 after_store=None, cost: bool = False) -> KernelParts:
  """The body, launch shape and buffers of ``cfg``'s store kernel.

  Inputs: ``src`` (each CTA's registers in register order, CTA-major) and
  ``init`` (each CTA's initial SMEM bytes); output: each CTA's SMEM bytes
  after the store has landed.  CTA ``c`` stores into CTA ``(c + 1) % cluster``
  (or into itself for a local target; every CTA reduces into CTA 0 for target
  "cta0", whose store branches at run time on whether it is CTA 0).  With
  ``offset_rows`` the store's ref is a slice of a larger allocation (the data
  starts ``offset_rows`` rows in).  ``store(value, view, barrier)``, if
  given, replaces the store; it must complete the barrier's phase (tests use
  it to run upstream's local ``store_tiled`` as a reference).
  ``after_store(barrier, peer)``, if given, runs between the store and the
  wait (the debug-mode test announces bytes that never arrive there).
  ``bare`` / ``cost``: see build_store_module.
  """
  mgpu, utils = compat.mosaic_gpu(), compat.mosaic_utils()
  dt = as_dtype(cfg.dtype)
  layout = resolve_layout(cfg.layout, cfg.shape, cfg.dtype)
  io = kernel_io(cfg)
  src = jax.ShapeDtypeStruct((cfg.cluster * io.src_bytes,), jnp.uint8)
  init = jax.ShapeDtypeStruct((cfg.cluster * io.smem_bytes,), jnp.uint8)
  out = (jax.ShapeDtypeStruct((cfg.cluster * io.smem_bytes,), jnp.uint8),
         jax.ShapeDtypeStruct((cfg.cluster * 128,), jnp.int32))  # SMEM bytes, wait flags
  smem = jax.ShapeDtypeStruct(io.smem_shape, dt.numpy)
  # Each CTA receives one warpgroup's stores: 128 arrivals (one per thread), or one
  # (the warpgroup's elected arrival: cfg.arrival "warpgroup" / "tensor_core").
  # Mosaic places the barrier right after the buffer and needs it 8-byte
  # aligned, so a tiny buffer gets a pad.
  alloc = int(np.prod(io.smem_shape)) * dt.bits // 8
  pad = (jax.ShapeDtypeStruct((-alloc % 8,), jnp.uint8),) if alloc % 8 else ()
  # With target "cta0" CTA 0's barrier receives every CTA's warpgroup (the
  # others' barriers, initialised alike, receive nothing and are not waited on).
  arrivals = ((128 if cfg.arrival == "thread" else 1) *
              (cfg.cluster if cfg.target == "cta0" else 1))
  scratch = (smem, *pad, mgpu.Barrier(arrival_count=arrivals, num_barriers=1))

  def body(ctx, src_ref, init_ref, out_ref, flags_ref, scratch_refs):
    del ctx
    smem_ref, bar = scratch_refs[0], scratch_refs[-1]
    cta = arith.index_cast(ir.IntegerType.get_signless(32), gpu.cluster_block_id(gpu.Dimension.x))
    base = arith.muli(cta, _i32(io.smem_bytes))
    smem_ptr = utils.memref_ptr(smem_ref)
    if not (bare or cost):  # poison/initialise own SMEM, then make sure every CTA has
      _copy_words(utils.memref_ptr(init_ref), smem_ptr, io.smem_bytes, base, _i32(0))
      nvvm.cluster_arrive(aligned=True)  # done so before any peer writes into it
      nvvm.cluster_wait(aligned=True)
    view = smem_ref
    if cfg.offset_rows:  # a slice of the allocation along dim 0 (whole tiles)
      tile_rows = io.smem_shape[-2 if len(cfg.shape) > 1 else -1] if cfg.swizzle else 1
      start = cfg.offset_rows // tile_rows
      view = utils.memref_slice(smem_ref, slice(start, start + cfg.shape[0] // tile_rows))
    if cfg.transposed:
      view = utils.memref_transpose(smem_ref, transpose_permutation(len(io.smem_shape), cfg.swizzle))
    value = _load_value(cfg, utils.memref_ptr(src_ref), layout, io,
                        arith.muli(cta, _i32(io.src_bytes)))
    if bare or cost:  # keep ptxas from sinking the register loads into the
      ptx.emit_fence_cta()   # store code, which would blur the measured store code
    index = ir.IndexType.get()
    peer = arith.remui(arith.addi(gpu.cluster_block_id(gpu.Dimension.x),
                                  arith.constant(index, 1)),
                       arith.constant(index, cfg.cluster))
    if store is not None:
      store(value, view, bar[0])
    elif cfg.impl == "upstream":  # a local target: upstream's store into the own CTA
      own = gpu.cluster_block_id(gpu.Dimension.x)
      upstream_store(value, view, bar[0], own if cfg.target == "local" else peer, cfg)
    else:
      kwargs = {"peer": dict(cluster_dim=gpu.Dimension.x, cluster_idx=peer),
                "cta0": dict(cluster_dim=gpu.Dimension.x, cluster_idx=0),
                "local": {}}[cfg.target]
      async_store(value, view, bar[0], swizzle=cfg.swizzle, optimized=cfg.optimized,
                  atomic=cfg.atomic, arrival=cfg.arrival, **kwargs)
    if bare:
      return
    if after_store is not None:
      after_store(bar[0], peer)
    flag_off = arith.muli(arith.addi(arith.muli(cta, _i32(128)), arith.andi(_tid(), _i32(127))),
                          _i32(4))
    flag_ptr = utils.getelementptr(utils.memref_ptr(flags_ref), [flag_off],
                                   ir.IntegerType.get_signless(8))
    if cfg.target == "cta0":
      _wait_in_cta0(cta, bar[0], io, flag_ptr)
    else:
      llvm.store(_bounded_wait(bar[0], io), flag_ptr)
    if cost:
      return
    _copy_words(smem_ptr, utils.memref_ptr(out_ref), io.smem_bytes, _i32(0), base)

  return KernelParts(body, (cfg.cluster, 1, 1), (128, 1, 1), (src, init), out, scratch,
                     (cfg.cluster, 1, 1), io)


def _bounded_wait(bar, io):
  """A bounded wait: a tx count that never reaches zero gives flag 0 (and prints a
  report) instead of hanging the GPU."""
  return debug.wait(bar, debug=True, expected_bytes=io.smem_bytes, max_polls=WAIT_POLLS)


def _wait_in_cta0(cta, bar, io, flag_ptr):
  """Target "cta0": only CTA 0's barrier receives arrivals, so only CTA 0 waits (its
  flag: the wait completed); then a cluster barrier (release/acquire at cluster
  scope) keeps every CTA alive until CTA 0 has seen all stores land (the others'
  flag: 1, they got past it)."""
  is_cta0 = arith.cmpi(arith.CmpIPredicate.eq, cta, _i32(0))
  if_op = scf.IfOp(is_cta0, has_else=True)
  with ir.InsertionPoint(if_op.then_block):
    llvm.store(_bounded_wait(bar, io), flag_ptr)
    scf.yield_([])
  with ir.InsertionPoint(if_op.else_block):
    llvm.store(_i32(1), flag_ptr)
    scf.yield_([])
  nvvm.cluster_arrive(aligned=True)
  nvvm.cluster_wait(aligned=True)


def build_kernel(cfg: StoreConfig, **kwargs):
  """``cfg``'s kernel as a jax-callable (upstream's ``as_gpu_kernel``; needs an sm_90
  GPU to run).  ``kwargs`` go to ``kernel_parts``.  Called (src, init), it returns
  (every CTA's SMEM bytes, every thread's wait flag)."""
  mgpu = compat.mosaic_gpu()
  with compat.enable_x64(), compat.make_ir_context(), ir.Location.unknown():
    p = kernel_parts(cfg, **kwargs)
    return mgpu.as_gpu_kernel(p.body, p.grid, p.block, p.in_shape, p.out_shape, p.scratch,
                              cluster=p.cluster)


def pack_registers(cfg: StoreConfig, codes_per_cta: list[np.ndarray]) -> np.ndarray:
  """The kernel's ``src`` buffer: each CTA's registers in register order, from each
  CTA's element codes (bit patterns, row-major over the array)."""
  from mosaic_async_store.plan.executor import code_bits
  dt = as_dtype(cfg.dtype)
  regs = register_map(resolve_layout(cfg.layout, cfg.shape, cfg.dtype), cfg.shape)
  out = []
  for codes in codes_per_cta:
    if regs.splat:  # the kernel reads one scalar from the first bytes
      reg_bytes = max(1, regs.vector_length * dt.bits // 8)
      first = np.packbits(code_bits(codes[:1], dt.bits), bitorder="little")
      buf = np.zeros(128 * reg_bytes, np.uint8)
      buf[:first.size] = first
      out.append(buf)
      continue
    bits = code_bits(codes[regs.elements], dt.bits)   # [t, r, V*bits]
    out.append(np.packbits(bits, axis=-1, bitorder="little").reshape(-1))
  return np.concatenate(out)
