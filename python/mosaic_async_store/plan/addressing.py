"""How each store's address is computed at run time, decided on NumPy arrays.

Every address is a function of the thread index (0..127).  Computing the
swizzle for every store costs about five integer instructions; most stores can
instead reuse an earlier address plus an immediate offset (folded into the
``[addr+imm]`` operand for free) or XOR it with a constant (one instruction).
Each rule is accepted only if it holds for every writer thread.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.plan.geometry import WARPGROUP_SIZE
# The steps themselves (data, their one definition, apply and emit) are plan data.
from mosaic_async_store.plan.plan_types import IMMEDIATE_LIMIT, U32, AddressStep, Affine

__all__ = ["Affine", "AddressStep", "plan_addresses", "base_order", "affine_in_thread"]

_THREAD_BITS = 7  # 128 threads


def affine_in_thread(values: np.ndarray, writer: np.ndarray) -> Affine:
  """Expresses a per-thread table as an affine function of the thread bits.

  Consecutive bits whose coefficients double are merged into one digit term,
  so a lane digit of 4 values costs one shift, one and, one multiply.
  """
  tid = np.arange(WARPGROUP_SIZE)
  ref = np.flatnonzero(writer)[0]
  coeffs = []
  for b in range(_THREAD_BITS):
    other = ref ^ (1 << b)
    if writer[other]:
      sign = -1 if (ref >> b) & 1 else 1
      coeffs.append(sign * int(values[other] - values[ref]))
    else:
      coeffs.append(0)  # this bit never varies among writers
  base = int(values[ref]) - sum(((ref >> b) & 1) * c for b, c in enumerate(coeffs))
  terms, b = [], 0
  while b < _THREAD_BITS:
    if coeffs[b] == 0:
      b += 1
      continue
    n = 1
    while b + n < _THREAD_BITS and coeffs[b + n] == coeffs[b] << n:
      n += 1
    terms.append((b, (1 << n) - 1, coeffs[b]))
    b += n
  affine = Affine(int(base), tuple((int(s), int(m), int(c)) for s, m, c in terms))
  if np.any(affine.evaluate(U32(tid)).array[writer] != values[writer]):
    raise AsyncStoreError(
        "internal planner defect (store address is not affine in the thread "
        "index). Fix: report this configuration; optimized=False may avoid it",
        param="plan", value="address")
  return affine


def plan_addresses(linear: list[np.ndarray], swizzle_fn, writer: np.ndarray,
                   max_imm: int = IMMEDIATE_LIMIT) -> list[AddressStep]:
  """Chooses, for each store, the cheapest way to form its address."""
  bases: list[np.ndarray] = []
  steps: list[AddressStep] = []
  for lin in linear:
    addr = swizzle_fn(lin)
    step = None
    # The most recent base first: an address derived from it keeps older bases
    # from staying live (ptxas holds every base until its last use).
    for i in reversed(range(len(bases))):
      d = (addr - bases[i])[writer]
      if np.all(d == d[0]) and abs(int(d[0])) < max_imm:
        step = AddressStep("offset", base=i, constant=int(d[0]))
        break
    if step is None:
      for i in reversed(range(len(bases))):
        b = bases[i]
        x = (addr ^ b)[writer]
        if np.all(x == x[0]):
          step = AddressStep("xor", base=i, constant=int(x[0]))
          bases.append(addr)
          break
    if step is None:
      step = AddressStep("compute", linear=affine_in_thread(lin, writer))
      bases.append(addr)
    steps.append(step)
  return steps


def base_order(steps: list[AddressStep]) -> list[int]:
  """A store order in which each base's stores are consecutive: instruction
  indices sorted (stably) by the base their address comes from, so a base is
  live only while its own stores issue."""
  base_of, bases = [], 0
  for step in steps:
    if step.kind == "offset":
      base_of.append(step.base)
    else:
      base_of.append(bases)
      bases += 1
  return sorted(range(len(steps)), key=lambda n: base_of[n])
