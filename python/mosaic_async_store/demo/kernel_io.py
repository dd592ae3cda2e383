"""The host side of a store kernel's buffers: their sizes (``KernelIO``) and the
``src`` buffer of each CTA's registers in register order (``pack_registers``).

The kernel (``demo/kernel.py``) reads each thread's registers from global memory in
register order (thread-major, then register, then byte), so any layout and dtype can
be built without upstream's loaders; the host packs that buffer here with the
planner's NumPy register map.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mosaic_async_store.demo.config import StoreConfig, resolve_layout
from mosaic_async_store.plan.dtypes import as_dtype
from mosaic_async_store.plan.geometry import register_map
from mosaic_async_store.plan.validate import default_ref_shape

__all__ = ["KernelIO", "kernel_io", "pack_registers"]


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
  """The buffers of ``cfg``'s kernel.  The SMEM allocation has ``cfg.ref_shape`` where
  it is set (the store then writes that ref; ``StoreConfig`` refuses it together with
  ``transposed`` and ``offset_rows``), else the canonical tiled ref of
  ``cfg.ref_alloc_shape`` for ``cfg.swizzle``, as ``config.view_geometry`` has it."""
  dt = as_dtype(cfg.dtype)
  layout = resolve_layout(cfg.layout, cfg.shape, cfg.dtype)
  regs = register_map(layout, cfg.shape)
  if cfg.ref_shape is not None:  # async_store's plan refuses one that does not fit
    smem_shape = tuple(cfg.ref_shape)
  else:
    smem_shape, _ = default_ref_shape(cfg.ref_alloc_shape, dt, cfg.swizzle)
  smem_bytes = int(np.prod(smem_shape)) * dt.bits // 8
  reg_bytes = max(1, regs.vector_length * dt.bits // 8)
  return KernelIO(reg_bytes, 1 if regs.splat else regs.num_registers, smem_shape,
                  -(-smem_bytes // 4) * 4, cfg.cluster)


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
