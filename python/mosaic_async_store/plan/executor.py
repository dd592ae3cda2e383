"""Executes a store plan on the CPU: what the destination SMEM holds afterwards.

The executor runs the plan's landing (``landing.plan_landing``: the same
replay of the register steps and instructions that ``verify`` checks) on real
bytes: each writer thread's store or reduction at its swizzled address, in
instruction order, with the GPU's reduction semantics (``reduce_codes``).  It
is the demo's runtime reference and the engine behind ``simulate_store``; the
tests compare it with ``expected_smem`` of test/harness/hostdata.py, which is
computed from the geometry alone.

Element values are handled as integer *codes* (the element's bit pattern,
``bits`` wide), so every dtype down to 4 bits is compared bit-exactly.
"""

from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers bfloat16 & co. with NumPy)
import numpy as np

from mosaic_async_store.plan.dtypes import as_dtype
from mosaic_async_store.plan.landing import element_bit_positions, plan_landing

__all__ = ["execute_plan", "simulate_store", "reduce_codes", "code_bits", "codes_to_values",
           "values_to_codes", "ATOMIC_REFERENCE"]


def code_bits(codes: np.ndarray, bits: int) -> np.ndarray:
  """[..., n] codes -> [..., n * bits] little-endian bits (uint8 0/1)."""
  shifts = np.arange(bits, dtype=np.uint64)
  return ((codes[..., None].astype(np.uint64) >> shifts) & 1).astype(np.uint8).reshape(
      *codes.shape[:-1], codes.shape[-1] * bits)


def codes_to_values(codes: np.ndarray, dtype) -> np.ndarray:
  """Bit patterns -> values of ``dtype`` (bytes-wide dtypes only)."""
  dt = as_dtype(dtype)
  width = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[dt.bits]
  return codes.astype(width).view(dt.numpy)


def values_to_codes(values: np.ndarray, dtype) -> np.ndarray:
  """Values of ``dtype`` -> their bit patterns as uint64 (bytes-wide dtypes only)."""
  dt = as_dtype(dtype)
  width = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[dt.bits]
  return np.asarray(values, dtype=dt.numpy).view(width).astype(np.uint64)


ATOMIC_REFERENCE = {
    "add": lambda a, b: a + b, "min": np.minimum, "max": np.maximum,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
}


def reduce_codes(op: str, old: np.ndarray, new: np.ndarray, dtype) -> np.ndarray:
  """``op`` (an atomic name) applied to codes of ``dtype``, as the GPU reduces them."""
  dt = as_dtype(dtype)
  a, b = codes_to_values(old, dt), codes_to_values(new, dt)
  if op in ("inc", "dec"):
    a, b = a.astype(np.uint32), b.astype(np.uint32)
    res = np.where(a >= b, 0, a + 1) if op == "inc" else np.where((a == 0) | (a > b), b, a - 1)
  else:
    res = ATOMIC_REFERENCE[op](a, b)
  return values_to_codes(np.asarray(res).astype(dt.numpy), dt)


def _apply_reduction(ins, old: np.ndarray, new: np.ndarray, dtype) -> np.ndarray:
  """One red/red.async per row on little-endian bytes [n, width] (pairs for x2 forms)."""
  if ins.op in ("and", "or", "xor"):  # bit by bit: any piece of an element (halves)
    return ATOMIC_REFERENCE[ins.op](old, new).astype(np.uint8)
  esize = dtype.bits // 8
  shape = new.shape
  weights = (1 << (8 * np.arange(esize, dtype=np.uint64))).astype(np.uint64)
  o = (old.reshape(-1, esize).astype(np.uint64) * weights).sum(-1)
  v = (new.reshape(-1, esize).astype(np.uint64) * weights).sum(-1)
  res = reduce_codes(ins.op, o, v, dtype)
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
  from mosaic_async_store.plan.planner import plan_store
  array = np.asarray(array)
  plan = plan_store(layout, array.shape, array.dtype, swizzle=swizzle, tiling_rank=tiling_rank,
                    atomic=atomic, ref_shape=ref_shape, ref_strides=ref_strides, peer=peer,
                    optimized=optimized)
  bits, geom, regs = plan.dtype.bits, plan.geometry, plan.source_registers
  codes = _codes(array, bits)
  if regs.splat:
    codes = np.full_like(codes, codes[0])
  reg_bits = code_bits(codes[regs.elements], bits)
  register_bytes = np.packbits(reg_bits, axis=-1, bitorder="little")
  pos = element_bit_positions(geom)
  smem_bits = np.zeros(max(geom.footprint_bytes, int(pos.max()) // 8 + 1) * 8, np.uint8)
  if initial is not None:
    init_codes = _codes(np.asarray(initial, dtype=array.dtype), bits)
    smem_bits[pos] = code_bits(init_codes[:, None], bits).reshape(pos.shape)
  smem = execute_plan(plan, register_bytes, np.packbits(smem_bits, bitorder="little"))
  out_bits = np.unpackbits(smem, bitorder="little")[pos]
  out_codes = (out_bits.astype(np.uint64) << np.arange(bits, dtype=np.uint64)).sum(-1)
  width = {4: np.uint8, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]
  return out_codes.astype(width).view(array.dtype).reshape(array.shape)
