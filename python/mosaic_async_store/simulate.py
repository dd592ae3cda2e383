"""Executes a store plan on the CPU: what the destination SMEM holds afterwards.

The executor follows the plan instruction by instruction (lane exchanges, then
each writer thread's store or reduction at its swizzled address) on real bytes.
It is the reference for the runtime checks and the engine behind interpret-mode
execution; the tests compare it with ``hostdata.expected_smem``, which is
computed from the geometry alone.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store import hostdata
from mosaic_async_store.verify import _contents

__all__ = ["execute_plan"]


def _apply_reduction(ins, old: bytes, new: bytes, dtype) -> bytes:
  """One red/red.async on little-endian bytes (pairs for the x2 forms)."""
  esize = dtype.bits // 8
  n = len(new) // esize
  old_codes = np.frombuffer(old, np.uint8).reshape(n, esize)
  new_codes = np.frombuffer(new, np.uint8).reshape(n, esize)
  weights = (1 << (8 * np.arange(esize, dtype=np.uint64))).astype(np.uint64)
  o = (old_codes.astype(np.uint64) * weights).sum(-1)
  v = (new_codes.astype(np.uint64) * weights).sum(-1)
  res = hostdata._reduce(ins.op, o, v, dtype)
  return np.concatenate([((r >> (8 * np.arange(esize, dtype=np.uint64))) & 0xFF)
                         .astype(np.uint8) for r in res]).tobytes()


def execute_plan(plan, register_bytes: np.ndarray, smem: np.ndarray) -> np.ndarray:
  """Returns ``smem`` (uint8, the destination ref's bytes) after the plan ran.

  ``register_bytes[t, r, :]`` are the bytes of register ``r`` of thread ``t``
  (the layout the test kernels read from global memory).
  """
  out = np.array(smem, dtype=np.uint8, copy=True)
  flat_src = register_bytes.reshape(-1)
  contents = _contents(plan)
  writers = np.flatnonzero(plan.registers.writer)
  for ins in plan.instructions:
    addr = plan.geometry.byte_address(ins.dst)
    for t in writers:
      ids = np.concatenate([contents[p.value][t, p.byte:p.byte + p.size]
                            for p in ins.parts_for(int(t))])
      data = flat_src[ids]
      a = int(addr[t])
      if ins.kind in ("red", "red.async"):
        data = np.frombuffer(_apply_reduction(ins, out[a:a + ins.width].tobytes(),
                                               data.tobytes(), plan.dtype), np.uint8)
      out[a:a + ins.width] = data
  return out
