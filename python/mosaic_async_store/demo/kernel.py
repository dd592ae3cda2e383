"""The store kernel of a StoreConfig: what the CLI compiles and the demo runs
(``StoreKernel``; test/harness/store_kernels.py replaces some of its steps for the
tests and benchmarks).

The kernel reads each thread's registers from global memory in *register
order* (thread-major, then register, then byte), so any layout and dtype can be
built without upstream's loaders and their limits; the host packs the input
with the planner's NumPy register map (``kernel_io.pack_registers``).  Then:

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
# The host side of the kernel's buffers (their sizes, the packed registers); this
# module's names too.
from mosaic_async_store.demo.kernel_io import KernelIO, kernel_io, pack_registers
from mosaic_async_store.plan.dtypes import as_dtype
from mosaic_async_store.lowering import debug, ptx
from mosaic_async_store.lowering.store import async_store

__all__ = ["KernelIO", "KernelParts", "Launch", "StoreKernel", "kernel_io", "build_store_module",
           "build_kernel", "pack_registers", "upstream_store", "WAIT_POLLS"]

# try_wait polls before a kernel gives up on its barrier (each poll may
# suspend the thread for a hardware-chosen time; this bounds the run to well
# under a second on an H100/H200).
WAIT_POLLS = 1 << 20


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

  def module(self):
    """The Mosaic GPU module of these parts (upstream's ``_kernel_to_module``; needs no
    GPU).  Must be called inside an MLIR context from ``compat.make_ir_context()``
    with a location."""
    with compat.enable_x64():
      module, *_ = compat.kernel_to_module(self.body, self.grid, self.block, self.in_shape,
                                           self.out_shape, self.scratch, cluster=self.cluster)
    return module

  def gpu_kernel(self):
    """These parts as a jax callable (upstream's ``as_gpu_kernel``; needs an sm_90 GPU
    to run).  Must be called inside an MLIR context from ``compat.make_ir_context()``
    with a location, with ``compat.enable_x64()``."""
    return compat.mosaic_gpu().as_gpu_kernel(self.body, self.grid, self.block, self.in_shape,
                                             self.out_shape, self.scratch,
                                             cluster=self.cluster)


@dataclasses.dataclass
class Launch:
  """What the body's steps share inside one kernel body: its refs and the values it
  computed (the executing CTA, its SMEM, the store's view and barrier, the peer)."""

  src_ref: object
  init_ref: object
  out_ref: object
  flags_ref: object
  smem_ref: object
  barriers: object             # the scratch barrier array (one barrier)
  cta: ir.Value                # i32: the executing CTA's rank along x
  smem_base: ir.Value          # i32: this CTA's byte offset in ``init`` and ``out``
  smem_ptr: ir.Value           # the SMEM allocation's pointer
  view: object = None          # the ref the store writes (a slice or transpose of smem_ref)
  peer: ir.Value | None = None  # index: (cta + 1) % cluster

  @property
  def barrier(self):
    """The store's barrier.  Indexing the array builds ops, so each use builds its
    own where it is used, as upstream's kernels do."""
    return self.barriers[0]


class StoreKernel:
  """``cfg``'s store kernel: its buffers and launch shape (``parts``), and its body as
  steps, each a method.

  Inputs: ``src`` (each CTA's registers in register order, CTA-major) and
  ``init`` (each CTA's initial SMEM bytes); outputs: each CTA's SMEM bytes
  after the store has landed, and each thread's wait flag.  CTA ``c`` stores into
  CTA ``(c + 1) % cluster`` (or into itself for a local target; every CTA reduces
  into CTA 0 for target "cta0", whose store branches at run time on whether it
  is CTA 0).  With ``offset_rows`` the store's ref is a slice of a larger
  allocation (the data starts ``offset_rows`` rows in).

  The body (``body``): ``init_smem`` (poison/initialise the own SMEM, then a
  cluster sync), ``load``, ``store``, ``finish`` (the bounded wait, then the
  copy-out).  ``bare=True`` keeps only the register loads, a fence and the store,
  so that the SASS holds the store's code and little else (the CLI's
  store-only kernel).  A subclass replaces a step by overriding its method
  (test/harness/store_kernels.py builds its test and cost kernels so).
  """

  def __init__(self, cfg: StoreConfig, *, bare: bool = False):
    self.cfg = cfg
    self.io = kernel_io(cfg)
    self.layout = resolve_layout(cfg.layout, cfg.shape, cfg.dtype)
    self.initialise = not bare   # init_smem before the loads
    self.fence = bare            # fence.acq_rel.cta after the loads
    self.finishes = not bare     # finish after the store

  def parts(self) -> KernelParts:
    """The body, launch shape and buffers (``KernelParts``)."""
    cfg, io = self.cfg, self.io
    mgpu = compat.mosaic_gpu()
    dt = as_dtype(cfg.dtype)
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
      smem_ref = scratch_refs[0]
      cta = arith.index_cast(ir.IntegerType.get_signless(32),
                             gpu.cluster_block_id(gpu.Dimension.x))
      base = arith.muli(cta, _i32(io.smem_bytes))
      self.body(Launch(src_ref, init_ref, out_ref, flags_ref, smem_ref, scratch_refs[-1],
                       cta, base, compat.mosaic_utils().memref_ptr(smem_ref)))

    return KernelParts(body, (cfg.cluster, 1, 1), (128, 1, 1), (src, init), out, scratch,
                       (cfg.cluster, 1, 1), io)

  def module(self):
    """The Mosaic GPU module (needs no GPU) and the ``KernelIO``.  Must be called
    inside an MLIR context from ``compat.make_ir_context()`` with a location."""
    with compat.enable_x64():
      p = self.parts()
      return p.module(), p.io

  def gpu_kernel(self):
    """The kernel as a jax callable (upstream's ``as_gpu_kernel``, in a context of its
    own; needs an sm_90 GPU to run).  Called (src, init), it returns (every CTA's
    SMEM bytes, every thread's wait flag)."""
    with compat.enable_x64(), compat.make_ir_context(), ir.Location.unknown():
      return self.parts().gpu_kernel()

  # -- the body's steps, in order ---------------------------------------------------

  def body(self, k: Launch) -> None:
    """Runs the steps.  The ops are built in this order whichever steps a subclass
    replaces, so that a kernel's IR text (hence its PTX) changes only where its
    steps do."""
    if self.initialise:
      self.init_smem(k)
    k.view = self.view(k)
    value = self.load(k)
    if self.fence:  # keep ptxas from sinking the register loads into the
      ptx.emit_fence_cta()   # store code, which would blur the measured store code
    index = ir.IndexType.get()
    k.peer = arith.remui(arith.addi(gpu.cluster_block_id(gpu.Dimension.x),
                                    arith.constant(index, 1)),
                         arith.constant(index, self.cfg.cluster))
    self.store(value, k)
    if self.finishes:
      self.finish(k)

  def init_smem(self, k: Launch) -> None:
    """Copies this CTA's slice of ``init`` into its SMEM, then a cluster barrier, so
    that every CTA has done so before any peer writes into it."""
    utils = compat.mosaic_utils()
    _copy_words(utils.memref_ptr(k.init_ref), k.smem_ptr, self.io.smem_bytes, k.smem_base,
                _i32(0))
    nvvm.cluster_arrive(aligned=True)
    nvvm.cluster_wait(aligned=True)

  def view(self, k: Launch):
    """The ref the store writes: the allocation, a slice of it along dim 0 (whole
    tiles; ``offset_rows``), or its transpose."""
    cfg, io, utils = self.cfg, self.io, compat.mosaic_utils()
    view = k.smem_ref
    if cfg.offset_rows:
      tile_rows = io.smem_shape[-2 if len(cfg.shape) > 1 else -1] if cfg.swizzle else 1
      start = cfg.offset_rows // tile_rows
      view = utils.memref_slice(k.smem_ref, slice(start, start + cfg.shape[0] // tile_rows))
    if cfg.transposed:
      view = utils.memref_transpose(k.smem_ref,
                                    transpose_permutation(len(io.smem_shape), cfg.swizzle))
    return view

  def load(self, k: Launch):
    """This CTA's registers from ``src`` (``_load_value``)."""
    utils = compat.mosaic_utils()
    return _load_value(self.cfg, utils.memref_ptr(k.src_ref), self.layout, self.io,
                       arith.muli(k.cta, _i32(self.io.src_bytes)))

  def store(self, value, k: Launch) -> None:
    """The store into the target CTA: this project's ``async_store``, or upstream's
    ``store_tiled_async`` for ``impl="upstream"`` (``upstream_store``)."""
    cfg = self.cfg
    if cfg.impl == "upstream":  # a local target: upstream's store into the own CTA
      own = gpu.cluster_block_id(gpu.Dimension.x)
      upstream_store(value, k.view, k.barrier, own if cfg.target == "local" else k.peer, cfg)
      return
    kwargs = {"peer": dict(cluster_dim=gpu.Dimension.x, cluster_idx=k.peer),
              "cta0": dict(cluster_dim=gpu.Dimension.x, cluster_idx=0),
              "local": {}}[cfg.target]
    async_store(value, k.view, k.barrier, swizzle=cfg.swizzle, optimized=cfg.optimized,
                atomic=cfg.atomic, arrival=cfg.arrival, **kwargs)

  def finish(self, k: Launch) -> None:
    """The bounded wait, then the copy-out of this CTA's SMEM."""
    self.wait(k)
    self.copy_out(k)

  def wait(self, k: Launch) -> None:
    """Each thread's bounded wait on its CTA's barrier, its flag stored into
    ``flags`` (target "cta0": ``_wait_in_cta0``)."""
    utils = compat.mosaic_utils()
    flag_off = arith.muli(arith.addi(arith.muli(k.cta, _i32(128)),
                                     arith.andi(_tid(), _i32(127))), _i32(4))
    flag_ptr = utils.getelementptr(utils.memref_ptr(k.flags_ref), [flag_off],
                                   ir.IntegerType.get_signless(8))
    if self.cfg.target == "cta0":
      _wait_in_cta0(k.cta, k.barrier, self.io, flag_ptr)
    else:
      llvm.store(_bounded_wait(k.barrier, self.io), flag_ptr)

  def copy_out(self, k: Launch) -> None:
    """Copies this CTA's SMEM into its slice of ``out``."""
    utils = compat.mosaic_utils()
    _copy_words(k.smem_ptr, utils.memref_ptr(k.out_ref), self.io.smem_bytes, _i32(0),
                k.smem_base)


def build_store_module(cfg: StoreConfig, *, bare: bool = False):
  """Builds the Mosaic GPU module of ``cfg``'s store kernel (``StoreKernel``; needs no
  GPU).  ``bare=True``: only the register loads, a fence and the store, for
  measuring the store's code size.  Returns (module, KernelIO).  Must be called
  inside an MLIR context from ``compat.make_ir_context()`` with a location."""
  return StoreKernel(cfg, bare=bare).module()


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


def build_kernel(cfg: StoreConfig):
  """``cfg``'s kernel as a jax callable (``StoreKernel.gpu_kernel``; needs an sm_90 GPU
  to run).  Called (src, init), it returns (every CTA's SMEM bytes, every
  thread's wait flag)."""
  return StoreKernel(cfg).gpu_kernel()
