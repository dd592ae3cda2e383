"""Which PTX store and reduction forms exist, as data (checked with ptxas, sm_90a).

The planner consults these tables; the emitters only spell what they say.
"""

from __future__ import annotations

import re

from mosaic_async_store.plan.dtypes import DType

__all__ = ["ATOMIC_OPS", "ST_ASYNC_TYPES", "PLAIN_ST_TYPES", "atomic_forms", "opcode",
           "state_space", "type_bytes"]

ATOMIC_OPS = ("add", "min", "max", "and", "or", "xor", "inc", "dec")

# Bytes per thread -> st.async type suffix.  .b128 needs PTX 9.2; .v4.b64 is
# rejected ("exceeds 128 bit limit"), so 16 bytes is the widest form.
ST_ASYNC_TYPES = {4: "b32", 8: "v2.b32", 16: "v4.b32"}

# Plain st.shared::cluster for leftovers that no st.async can carry.
PLAIN_ST_TYPES = {1: "u8", 2: "u16", 4: "b32", 8: "v2.b32", 16: "v4.b32"}


def _int_type(op: str, dtype: DType) -> str:
  letter = "s" if dtype.is_signed_int else "u"
  if op in ("and", "or", "xor"):
    return f"b{dtype.bits}"
  if op in ("min", "max"):
    return f"{letter}{dtype.bits}"  # signedness matters for min/max
  if op == "add":
    # Two's complement add is the same for both; red.async documents u32, s32, u64.
    return f"u{dtype.bits}" if dtype.bits == 64 else f"{letter}{dtype.bits}"
  return f"u{dtype.bits}"  # inc/dec exist for u32 only


# Bitwise reductions act on each bit alone, so a 64-bit element reduced as its two
# 32-bit halves ends the same.  ptxas makes a 64-bit and/or/xor into a generic ATOM
# with a state-space query and a compare-and-swap fallback (26 SASS instructions
# into a peer, 11 into the executing CTA); two red.async .b32 halves into a peer
# cost 2 REDAS (9 SASS, nothing to order), two red.shared::cta .b32 halves 2
# ATOMS (5).  bench/reduction_forms.py measures every candidate.
_SPLIT_64 = ("and", "or", "xor")


def atomic_forms(op: str, dtype: DType, peer: bool):
  """Returns (kind, element_ptx_type, pair_ptx_type | None) or None if impossible.

  kind is "red.async" (completes on the tx count; peer CTA only, 32-bit
  integers, 64-bit add, and 64-bit and/or/xor as two 32-bit halves) or "red"
  (plain red, ordered by the release arrive).  element_ptx_type says the bytes of
  one instruction (``type_bytes``): those of an element, or of half a 64-bit
  element for and/or/xor.  pair_ptx_type is the packed two-element form used for
  16-bit floats when a pair is 4-byte aligned.

  Every CTA reducing into the same bytes must use the same form (PTX ISA, memory
  consistency model: atomic operations are atomic with respect to each other
  only when they overlap completely), which the peer and the local plan of one
  store do.
  """
  if dtype.kind in ("int", "uint"):
    if dtype.bits == 32:
      return ("red.async" if peer else "red", _int_type(op, dtype), None)
    if dtype.bits == 64 and op in _SPLIT_64:
      return ("red.async" if peer else "red", "b32", None)
    if dtype.bits == 64 and op not in ("inc", "dec"):
      kind = "red.async" if (peer and op == "add") else "red"
      return (kind, _int_type(op, dtype), None)
    return None
  if op != "add":
    return None
  if dtype.name in ("float32", "float64"):
    return ("red", f"f{dtype.bits}", None)
  if dtype.name in ("float16", "bfloat16"):
    short = "f16" if dtype.name == "float16" else "bf16"
    return ("red", f"noftz.{short}", f"noftz.{short}x2")
  return None


def type_bytes(ptx_type: str) -> int:
  """Bytes one instruction of PTX type ``ptx_type`` carries (``noftz.bf16x2``: 4)."""
  bits, pair = re.search(r"(\d+)(x2)?$", ptx_type).groups()
  return int(bits) // 8 * (2 if pair else 1)


def state_space(kind: str, peer: bool) -> str:
  """The state space an instruction of ``kind`` addresses its destination in.

  st.async and red.async exist for ``.shared::cluster`` only.  A plain st/red
  into the executing CTA's own window (a local target) uses ``.shared::cta``:
  ptxas then emits the ordinary STS, or native shared-memory atomics (ATOMS,
  an ATOMS.CAST loop for float adds), instead of a generic ATOM with a
  state-space check and fallbacks (f32 add: 562 vs 1514 SASS).
  """
  if kind in ("st.async", "red.async") or peer:
    return "shared::cluster"
  return "shared::cta"


def opcode(kind: str, space: str, op: str, ptx_type: str) -> str:
  """The full PTX opcode of one store instruction, e.g. ``st.shared::cta.b32``."""
  if kind == "st.async":
    return f"st.async.{space}.mbarrier::complete_tx::bytes.{ptx_type}"
  if kind == "red.async":
    return f"red.async.relaxed.cluster.{space}.mbarrier::complete_tx::bytes.{op}.{ptx_type}"
  if kind == "red":
    return f"red.relaxed.cluster.{space}.{op}.{ptx_type}"
  if kind == "st":
    return f"st.{space}.{ptx_type}"
  raise ValueError(f"unknown instruction kind {kind!r}")
