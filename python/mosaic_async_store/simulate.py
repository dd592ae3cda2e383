"""Executes a store plan on the CPU: what the destination SMEM holds afterwards.

The executor runs the plan's landing (``landing.plan_landing``: the same
replay of the register steps and instructions that ``verify`` checks) on real
bytes: each writer thread's store or reduction at its swizzled address, in
instruction order.  It is the reference for the runtime checks and the engine
behind interpret-mode execution; the tests compare it with
``hostdata.expected_smem``, which is computed from the geometry alone.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store import hostdata
from mosaic_async_store.landing import element_bit_positions, plan_landing

__all__ = ["execute_plan", "simulate_store", "config_plan", "execute_config"]


def _apply_reduction(ins, old: np.ndarray, new: np.ndarray, dtype) -> np.ndarray:
  """One red/red.async per row on little-endian bytes [n, width] (pairs for x2 forms)."""
  esize = dtype.bits // 8
  shape = new.shape
  weights = (1 << (8 * np.arange(esize, dtype=np.uint64))).astype(np.uint64)
  o = (old.reshape(-1, esize).astype(np.uint64) * weights).sum(-1)
  v = (new.reshape(-1, esize).astype(np.uint64) * weights).sum(-1)
  res = hostdata.reduce_codes(ins.op, o, v, dtype)
  out = (res[:, None] >> (8 * np.arange(esize, dtype=np.uint64))) & 0xFF
  return out.astype(np.uint8).reshape(shape)


def execute_plan(plan, register_bytes: np.ndarray, smem: np.ndarray) -> np.ndarray:
  """Returns ``smem`` (uint8, the destination ref's bytes) after the plan ran.

  ``register_bytes[t, r, :]`` are the bytes of the array's register ``r`` of
  thread ``t`` (the layout the test kernels read from global memory).
  """
  landing = plan_landing(plan)
  register_bytes = np.asarray(register_bytes, dtype=np.uint8)
  if register_bytes.shape != landing.source_shape:
    raise ValueError(f"register_bytes has shape {register_bytes.shape}; the plan's "
                     f"registers are {landing.source_shape} (threads, registers, bytes)")
  source = np.unpackbits(register_bytes, axis=-1, bitorder="little").reshape(-1)
  out = np.array(smem, dtype=np.uint8, copy=True)
  for store in landing.stores:
    ins = store.instruction
    bits = np.where(store.source_bits >= 0, source[np.maximum(store.source_bits, 0)], 0)
    data = np.packbits(bits.astype(np.uint8), axis=-1, bitorder="little")  # [threads, width]
    where = store.address[:, None] + np.arange(ins.width)
    if np.unique(where).size != where.size:  # overlapping threads (a broken plan): in order
      rows = [(where[i:i + 1], data[i:i + 1]) for i in range(len(data))]
    else:
      rows = [(where, data)]
    for at, value in rows:
      if ins.kind in ("red", "red.async"):
        value = _apply_reduction(ins, out[at], value, plan.dtype)
      out[at] = value
  return out


def _codes(array: np.ndarray, bits: int) -> np.ndarray:
  """Element bit patterns of ``array`` (any dtype down to 4 bits)."""
  raw = np.ascontiguousarray(array).reshape(-1)
  width = {4: np.uint8, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]
  codes = raw.view(width).astype(np.uint64)
  return codes & 0xF if bits == 4 else codes


def simulate_store(array, layout, *, swizzle=None, tiling_rank=None, atomic=None,
                   initial=None, ref_shape=None, ref_strides=None, peer=True,
                   optimized=True) -> np.ndarray:
  """What the destination ref holds after ``async_store`` of ``array`` (CPU only).

  The same plan the GPU code is emitted from, executed on bytes: a
  substitute for Pallas interpret mode, which cannot run cluster stores (see
  docs/pallas.md).  ``initial`` is the destination's logical contents before
  the store (zeros if None); the result has the array's shape and dtype.
  """
  from mosaic_async_store.planner import plan_store
  array = np.asarray(array)
  plan = plan_store(layout, array.shape, array.dtype, swizzle=swizzle, tiling_rank=tiling_rank,
                    atomic=atomic, ref_shape=ref_shape, ref_strides=ref_strides, peer=peer,
                    optimized=optimized)
  bits, geom, regs = plan.dtype.bits, plan.geometry, plan.source_registers
  codes = _codes(array, bits)
  if regs.splat:
    codes = np.full_like(codes, codes[0])
  reg_bits = hostdata.code_bits(codes[regs.elements], bits)
  register_bytes = np.packbits(reg_bits, axis=-1, bitorder="little")
  pos = element_bit_positions(geom)
  smem_bits = np.zeros(max(geom.footprint_bytes, int(pos.max()) // 8 + 1) * 8, np.uint8)
  if initial is not None:
    init_codes = _codes(np.asarray(initial, dtype=array.dtype), bits)
    smem_bits[pos] = hostdata.code_bits(init_codes[:, None], bits).reshape(pos.shape)
  smem = execute_plan(plan, register_bytes, np.packbits(smem_bits, bitorder="little"))
  out_bits = np.unpackbits(smem, bitorder="little")[pos]
  out_codes = (out_bits.astype(np.uint64) << np.arange(bits, dtype=np.uint64)).sum(-1)
  width = {4: np.uint8, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]
  return out_codes.astype(width).view(array.dtype).reshape(array.shape)


def config_plan(cfg, peer: bool | None = None):
  """The plan ``async_store`` makes in ``cfg``'s test kernel (same ref view, same
  plain-store rule), for the CLI and the CPU reference of the runtime checks.

  ``peer`` picks the form for target "cta0" (CTA 0 takes the local form); by
  default the form of every CTA but CTA 0 (the peer form)."""
  from mosaic_async_store.config import resolve_layout
  from mosaic_async_store.planner import plan_store
  view = hostdata.view_geometry(cfg)
  if peer is None:
    peer = cfg.target != "local"
  return plan_store(resolve_layout(cfg.layout, cfg.shape, cfg.dtype), cfg.shape, cfg.dtype,
                    swizzle=cfg.swizzle, optimized=cfg.optimized, atomic=cfg.atomic,
                    ref_shape=view.ref_shape, ref_strides=view.strides, peer=peer,
                    cluster_size=cfg.cluster)


def execute_config(cfg, src: np.ndarray, init: np.ndarray) -> np.ndarray:
  """Every CTA's SMEM bytes after ``cfg``'s test kernel ran, executed on the CPU.

  ``src`` and ``init`` are the kernel's inputs (``hostdata.pack_registers`` and
  the initial SMEM, CTA-major); CTA ``c`` stores into ``(c + 1) % cluster``
  (or itself for a local target, CTA 0 for "cta0"), as the kernel does.
  """
  plans = {peer: config_plan(cfg, peer) for peer in (
      (True, False) if cfg.target == "cta0" else (cfg.target == "peer",))}
  first_plan = next(iter(plans.values()))
  regs = first_plan.source_registers
  src = src.reshape(cfg.cluster, -1)
  out = np.array(init, dtype=np.uint8).reshape(cfg.cluster, -1)
  start = hostdata.view_offset_bytes(cfg)
  for c in range(cfg.cluster):
    if regs.splat:  # the kernel broadcasts the first element into every register
      nbits = first_plan.dtype.bits
      first = np.unpackbits(src[c][:max(1, nbits // 8)], bitorder="little")[:nbits]
      code = (first.astype(np.uint64) << np.arange(nbits, dtype=np.uint64)).sum()
      bits = hostdata.code_bits(np.full(regs.elements.shape, code, np.uint64), nbits)
      register_bytes = np.packbits(bits, axis=-1, bitorder="little")
    else:
      register_bytes = src[c].reshape(128, regs.num_registers, -1)
    dest = {"local": c, "cta0": 0}.get(cfg.target, (c + 1) % cfg.cluster)
    plan = plans.get(dest != c, first_plan)
    out[dest, start:] = execute_plan(plan, register_bytes, out[dest, start:])
  return out.reshape(-1)
