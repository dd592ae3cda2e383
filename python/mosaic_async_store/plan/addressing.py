"""How each store's address is computed at run time, decided on NumPy arrays.

Every address is a function of the thread index (0..127).  Computing the
swizzle for every store costs about five integer instructions; most stores can
instead reuse an earlier address plus an immediate offset (folded into the
``[addr+imm]`` operand for free) or XOR its offset with a constant (an xor and
an add).  Where the xor-formed addresses make a grid (a few high variants times a
few low ones, as a staggered order inside a swizzled 16-byte chunk gives), each
xor is split into a shared high and low part and costs one add
(``AddressStep.low_mask``).  Each rule is accepted only if it holds for every
writer thread.
"""

from __future__ import annotations

import numpy as np

from mosaic_async_store.errors import AsyncStoreError
from mosaic_async_store.plan.geometry import WARPGROUP_SIZE
# The steps themselves (data, their one definition, apply and emit) are plan data.
from mosaic_async_store.plan.address_steps import IMMEDIATE_LIMIT, U32, AddressStep, Affine

__all__ = ["Affine", "AddressStep", "plan_addresses", "base_order", "affine_in_thread",
           "instruction_cost"]

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


# Low masks tried for split xor steps: (1 << bits) - 1 for bits 1..12, which covers
# every bit a swizzle (at most 128 bytes: bits 4..9) or a stagger inside it moves.
_SPLIT_BITS = 12
# What the cost model charges a computed base: an affine term costs a shift, an and
# and a multiply-add, the swizzle about four more; the same in every variant, so
# only its being there matters to the comparison.
_COMPUTE_COST = 8


def plan_addresses(linear: list[np.ndarray], swizzle_fn, writer: np.ndarray,
                   max_imm: int = IMMEDIATE_LIMIT, *,
                   base_add_free: bool = False) -> list[AddressStep]:
  """Chooses, for each store, the cheapest way to form its address: an immediate
  offset from a base (the most recent first: an address derived from it keeps older
  bases from staying live, as ptxas holds every base until its last use), else an
  xor of the most recent base it is a constant xor of, else a computed base.

  Where ``instruction_cost`` (told ``base_add_free``) says it is strictly cheaper,
  every xor step is instead split at one low mask (``AddressStep.low_mask``), each
  from the oldest computed base, so that the parts of all split steps come from one
  base and are shared.  Which stores are offsets, xors and computes is the same
  either way."""
  bases: list[np.ndarray] = []
  computed: list[int] = []          # indices of the computed bases
  steps: list[AddressStep] = []
  split: dict[int, tuple[int, int]] = {}   # xor step -> (computed base, constant)
  for lin in linear:
    addr = swizzle_fn(lin)
    step = None
    for i in reversed(range(len(bases))):
      d = (addr - bases[i])[writer]
      if np.all(d == d[0]) and abs(int(d[0])) < max_imm:
        step = AddressStep("offset", base=i, constant=int(d[0]))
        break
    if step is None:
      recent = _uniform_xor(addr, bases, reversed(range(len(bases))), writer)
      if recent is not None:  # a computed base's xor too (xor is transitive)
        step = AddressStep("xor", base=recent[0], constant=recent[1])
        split[len(steps)] = _uniform_xor(addr, bases, computed, writer)
      else:
        step = AddressStep("compute", linear=affine_in_thread(lin, writer))
        computed.append(len(bases))
      bases.append(addr)
    steps.append(step)
  best, best_cost = steps, instruction_cost(steps, base_add_free)
  for bits in range(1, _SPLIT_BITS + 1) if split else ():
    variant = list(steps)
    for n, (root, constant) in split.items():
      variant[n] = AddressStep("xor", base=root, constant=constant, low_mask=(1 << bits) - 1)
    cost = instruction_cost(variant, base_add_free)
    if cost < best_cost:
      best, best_cost = variant, cost
  return best


def _uniform_xor(addr, bases, candidates, writer) -> tuple[int, int] | None:
  """The first candidate base whose xor with ``addr`` is one constant for every
  writer thread, and that constant; None if there is none."""
  for i in candidates:
    x = (addr ^ bases[i])[writer]
    if np.all(x == x[0]):
      return i, int(x[0])
  return None


def instruction_cost(steps: list[AddressStep], base_add_free: bool = False) -> int:
  """About how many integer instructions the steps emit: a computed base
  ``_COMPUTE_COST`` plus its add, a plain xor two (xor, add), a split xor one add
  plus each part the first time it is formed (a high part two: xor-and, add; a low
  part one: xor-and, which ptxas makes one LOP3), an immediate offset nothing.

  ``base_add_free``: adding the ref's base costs nothing, as where the destination
  is the executing CTA (ptxas folds its shared base, a uniform register, into the
  address operand); then a plain xor is one instruction and splitting never pays,
  as measured (bench/static_cost.py: local TMEM-native reductions split cost 16
  SASS instructions more).  Into a peer the base is ``mapa``'s per-thread result
  and each add is an instruction."""
  base_add = 0 if base_add_free else 1
  cost, parts = 0, set()
  for s in steps:
    if s.kind == "compute":
      cost += _COMPUTE_COST + base_add
    elif s.kind == "xor" and not s.low_mask:
      cost += 1 + base_add
    elif s.kind == "xor":
      for key, price in zip(s.split_parts(), (1 + base_add, 1)):
        if key not in parts:
          parts.add(key)
          cost += price
      cost += 1
  return cost


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
