"""Host-side data for the GPU tests: random inputs and the expected SMEM.

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

from mosaic_async_store.demo.config import StoreConfig, view_geometry, view_offset_bytes
from mosaic_async_store.plan.dtypes import as_dtype
from mosaic_async_store.plan.executor import code_bits, reduce_codes, values_to_codes
from mosaic_async_store.plan.landing import element_bit_positions

__all__ = ["senders", "random_codes", "expected_smem"]


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
