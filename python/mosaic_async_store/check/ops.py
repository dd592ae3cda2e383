"""Value-level PTX semantics for ``interp``: operand parsing helpers and the
arithmetic of the instructions the store kernels use (no state, no memory)."""

from __future__ import annotations

import re
from itertools import chain

import numpy as np

from mosaic_async_store.check.floats import reduce_add

__all__ = ["TYPE", "ALU", "RED", "bits_of", "sign_extend", "immediate", "split_operands",
           "RED_FORMS", "reduce_op", "bfe", "bfi", "prmt", "UNDEFINED", "ints_array"]

UNDEFINED = 0xA5C3A5C3A5C3A5C3  # what an unwritten register holds (setters mask it)

TYPE = re.compile(r"^[busf](8|16|32|64)$|^(bf16|f16x2|bf16x2|f32x2|pred)$")
ALU = ("add", "sub", "and", "or", "xor", "not", "neg", "shl", "shr", "min", "max", "mul",
        "mad", "selp", "bfe", "bfi", "prmt")
RED = ("add", "min", "max", "and", "or", "xor", "inc", "dec")


def ints_array(rows) -> np.ndarray:
  """``rows`` (equally long sequences of Python ints in [0, 2**64): lanes' register
  values) as a uint64 array [len(rows), len(rows[0])], as ``np.array(rows, np.uint64)``
  makes it, without its search for the nesting (a warp's values, read often)."""
  width = len(rows[0]) if len(rows) else 0
  return np.fromiter(chain.from_iterable(rows), np.uint64,
                     len(rows) * width).reshape(len(rows), width)


def bits_of(t):
  """The bits of a type qualifier (a packed ``x2`` type: both halves; f32x2, sm_100a's
  packed f32, is 64)."""
  if t == "f32x2":
    return 64
  return 1 if t == "pred" else 32 if t.endswith("x2") else int(t.lstrip("bfsu"))


# What red / red.async run (PTX ISA, red): the integer operations on their types,
# and the float additions (f32; f16, bf16 and their x2 forms with .noftz; floats.py).
RED_FORMS = {("add", t) for t in ("u32", "s32", "u64", "f32", "f16", "bf16", "f16x2", "bf16x2")}
RED_FORMS |= {(op, t) for op in ("min", "max") for t in ("u32", "s32", "u64", "s64")}
RED_FORMS |= {(op, "u32") for op in ("inc", "dec")}
RED_FORMS |= {(op, t) for op in ("and", "or", "xor") for t in ("b32", "b64")}


def sign_extend(v, bits):
  """The signed value of the low ``bits`` bits of v."""
  v &= (1 << bits) - 1
  return v - (1 << bits) if v >> (bits - 1) else v


def immediate(tok):  # 12, -4, 0x3340U, 0f3F800000 (float bits)
  return int(tok[2:], 16) if tok[:2] in ("0f", "0d") else int(tok.rstrip("U"), 0)


def split_operands(s):
  """Splits on commas outside (), [] and {}."""
  out, depth, cur = [], 0, ""
  for ch in s:
    depth += (ch in "([{") - (ch in ")]}")
    if ch == "," and depth == 0:
      out, cur = out + [cur.strip()], ""
    else:
      cur += ch
  return out + [cur.strip()] if cur.strip() else out


def reduce_op(op, t, old, new, shared=False):
  """The bit pattern ``red.<op>.<t>`` leaves in memory (``shared``: the location is in
  shared memory, where red.add.f32 keeps subnormals: floats.reduce_add)."""
  bits = bits_of(t)
  if (op, t) not in RED_FORMS:
    raise NotImplementedError(f"red.{op}.{t}")
  if t[0] == "f" or t[:2] == "bf":
    return reduce_add(t, old, new, shared=shared)
  a, b = (sign_extend(old, bits), sign_extend(new, bits)) if t[0] == "s" else (old, new)
  res = {"add": a + b, "min": min(a, b), "max": max(a, b), "and": a & b, "or": a | b,
         "xor": a ^ b, "inc": 0 if a >= b else a + 1,
         "dec": b if a == 0 or a > b else a - 1}
  return res[op] & ((1 << bits) - 1)


def bfe(bits, signed):
  """bfe.{u,s}<bits> d, a, pos, len (PTX ISA, bfe): bit i of d is bit pos + i of a
  where i < len and pos + i < bits, else the sign bit (a's bit min(pos + len - 1,
  bits - 1) for .s types and len > 0; 0 otherwise); pos and len are their low 8 bits."""
  mask = (1 << bits) - 1

  def bfe(a, pos, ln):
    pos, ln = pos & 0xFF, ln & 0xFF
    take = max(0, min(ln, bits - pos))   # (the bits taken from a; the rest: the sign)
    field = ((a & mask) >> pos) & ((1 << take) - 1) if take else 0
    if signed and ln and (a >> min(pos + ln - 1, bits - 1)) & 1:
      field |= mask & ~((1 << take) - 1)
    return field
  return bfe


def bfi(bits):
  def insert(a, b, pos, ln):  # b with bits pos..pos+ln-1 replaced by a's low ln bits
    pos, ln = pos & 0xFF, ln & 0xFF
    field = ((1 << min(ln, max(bits - pos, 0))) - 1) << pos if pos < bits else 0
    return (b & ~field) | ((a << pos) & field)
  return insert


def prmt(a, b, c):
  """prmt.b32, default mode: 4 of the 8 bytes {b, a}; selector bit 3 = sign fill."""
  both, r = a | b << 32, 0
  for i in range(4):
    sel = (c >> (4 * i)) & 15
    byte = (both >> (8 * (sel & 7))) & 0xFF
    r |= ((0xFF if byte & 0x80 else 0) if sel & 8 else byte) << (8 * i)
  return r
