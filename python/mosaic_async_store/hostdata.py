"""Host-side data for runtime checks: random inputs, packing, and the expected SMEM.

Pure NumPy.  Element values are handled as integer *codes* (the element's bit
pattern, ``bits`` wide), so every dtype down to 4 bits is compared bit-exactly;
the expected destination is built from the ref geometry alone
(``landing.element_bit_positions``, the verifier's model of where each bit
belongs), independently of the planner.  Bytes outside the array keep their initial
(poisoned) value, so a stray write shows.
"""

from __future__ import annotations

import math

import ml_dtypes  # noqa: F401  (registers bfloat16 & co. with NumPy)
import numpy as np

from mosaic_async_store.config import StoreConfig, resolve_layout, transpose_permutation
from mosaic_async_store.dtypes import as_dtype
from mosaic_async_store.geometry import RefGeometry, register_map
from mosaic_async_store.landing import element_bit_positions
from mosaic_async_store.validate import default_ref_shape

__all__ = ["view_geometry", "view_offset_bytes", "senders", "random_codes",
           "pack_registers", "expected_smem", "codes_to_values", "values_to_codes",
           "code_bits", "reduce_codes", "ATOMIC_REFERENCE"]


def view_geometry(cfg: StoreConfig) -> RefGeometry:
  """The destination ref exactly as the test kernel passes it to the store
  (addresses from the view's own base, see ``view_offset_bytes``)."""
  dt = as_dtype(cfg.dtype)
  shape = cfg.ref_alloc_shape if cfg.transposed else tuple(cfg.shape)
  alloc, rank = default_ref_shape(shape, dt, cfg.swizzle)
  strides = [math.prod(alloc[i + 1:]) for i in range(len(alloc))]
  if cfg.transposed:
    perm = transpose_permutation(len(alloc), cfg.swizzle)
    alloc, strides = [alloc[p] for p in perm], [strides[p] for p in perm]
  return RefGeometry(tuple(cfg.shape), tuple(alloc), tuple(strides), rank, cfg.swizzle,
                     dt.bits)


def view_offset_bytes(cfg: StoreConfig) -> int:
  """Where the view starts in the SMEM allocation: ``offset_rows`` whole rows in."""
  return cfg.offset_rows * math.prod(cfg.shape[1:]) * as_dtype(cfg.dtype).bits // 8


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
  dt = as_dtype(dtype)
  width = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[dt.bits]
  return np.asarray(values, dtype=dt.numpy).view(width).astype(np.uint64)


def random_codes(cfg: StoreConfig, rng: np.random.Generator) -> np.ndarray:
  """Per-element bit patterns; never all zero, exact under the chosen atomic."""
  dt = as_dtype(cfg.dtype)
  size = math.prod(cfg.shape)
  if cfg.atomic is None:
    return rng.integers(1, 1 << dt.bits, size=size, dtype=np.uint64)
  if dt.is_float:  # small multiples of 1/4: sums are exact in every float type
    vals = rng.integers(-64, 65, size=size) / 4
  elif cfg.atomic in ("inc", "dec"):
    vals = rng.integers(1, 200, size=size)
  else:
    low = -1000 if dt.is_signed_int else 1
    vals = rng.integers(low, 1000, size=size)
  return values_to_codes(vals.astype(dt.numpy), dt)


def pack_registers(cfg: StoreConfig, codes_per_cta: list[np.ndarray]) -> np.ndarray:
  """The kernel's ``src`` buffer: each CTA's registers in register order."""
  dt = as_dtype(cfg.dtype)
  layout = resolve_layout(cfg.layout, cfg.shape, cfg.dtype)
  regs = register_map(layout, cfg.shape)
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


ATOMIC_REFERENCE = {
    "add": lambda a, b: a + b, "min": np.minimum, "max": np.maximum,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
}


def senders(cfg: StoreConfig, c: int) -> list[int]:
  """The CTAs whose store lands in CTA ``c``, in the order they are reduced."""
  n = cfg.cluster
  if cfg.target == "cta0":  # every CTA reduces into CTA 0 (commutative ops only)
    return list(range(n)) if c == 0 else []
  return [c if cfg.target == "local" else (c - 1) % n]


def expected_smem(cfg: StoreConfig, codes_per_cta: list[np.ndarray],
                  init: np.ndarray) -> np.ndarray:
  """Every CTA's SMEM bytes after the store (``init`` is CTA-major bytes)."""
  geom = view_geometry(cfg)
  pos = element_bit_positions(geom) + 8 * view_offset_bytes(cfg)
  per_cta = init.reshape(cfg.cluster, -1)
  out = []
  for c in range(cfg.cluster):
    bits = np.unpackbits(per_cta[c], bitorder="little")
    for sender in senders(cfg, c):
      codes = codes_per_cta[sender]
      if cfg.layout.upper() == "SPLAT":
        codes = np.full_like(codes, codes[0])
      if cfg.atomic is not None:
        old = (bits[pos].astype(np.uint64) << np.arange(geom.bits, dtype=np.uint64)).sum(-1)
        codes = reduce_codes(cfg.atomic, old, codes, cfg.dtype)
      bits[pos] = code_bits(codes[:, None], geom.bits).reshape(pos.shape)
    out.append(np.packbits(bits, bitorder="little"))
  return np.concatenate(out)
