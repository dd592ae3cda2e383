"""Register-to-register instructions of the PTX checker: moves, integer ALU,
comparisons, integer conversions, and floating point (``floats``).

Mixed into ``interp.PtxKernel``, which provides ``_get`` / ``_set``; each method
compiles one decoded instruction (``opcodes.Instr``) into a function of the
thread, or raises NotImplementedError naming the opcode.  Qualifiers are
checked exactly: one the checker does not implement (``.sat``, ``.cc``,
``.hi``, a ``prmt`` mode, ``setp``'s boolean combination, ...) is refused, never
ignored.
"""

from __future__ import annotations

from mosaic_async_store.check.floats import FLOAT_TYPE, float_cvt, float_op
from mosaic_async_store.check.ops import ALU, TYPE, bfe, bfi, bits_of, prmt, sign_extend

__all__ = ["ValueSemantics"]

# Qualifiers (other than types) each integer ALU opcode accepts.  mul/mad need
# exactly one of them.
_ALU_QUALIFIERS = {"mul": {"lo", "wide"}, "mad": {"lo", "wide"}}
_CMP = {"eq": "__eq__", "ne": "__ne__", "lt": "__lt__", "le": "__le__", "gt": "__gt__",
        "ge": "__ge__", "lo": "__lt__", "ls": "__le__", "hi": "__gt__", "hs": "__ge__"}
_CVTA_SPACES = {"to", "shared", "shared::cta", "shared::cluster", "global", "local", "param"}


def _extras(ins):
  return [m for m in ins.mods if not TYPE.match(m)]


def _refuse(ins, why=""):
  raise NotImplementedError(f"opcode {ins.opcode}" + (f" ({why})" if why else ""))


class ValueSemantics:
  """mov / cvta, the integer ALU, setp, cvt, and the float opcodes."""

  def _mov(self, ins):
    """mov (also packing ``{lo, ..., hi}`` into one register and unpacking), cvta
    (generic and specific addresses coincide in the checker's address map)."""
    extras = _extras(ins)
    if (ins.base == "mov" and extras) or (ins.base == "cvta" and not set(extras) <= _CVTA_SPACES):
      _refuse(ins)
    if len(ins.ops) != 2:
      _refuse(ins, "two operands expected")
    d, s = ins.ops
    bits = ins.bits
    if s[0] == "vec":   # pack {lo, ..., hi} into one register
      w, parts, put = bits // len(s[1]), [self._get(o) for o in s[1]], self._set(d, bits)
      return lambda th: put(th, sum((g(th) & ((1 << w) - 1)) << (w * i)
                                    for i, g in enumerate(parts)))
    if d[0] == "vec":   # unpack one register into pieces
      w, g = bits // len(d[1]), ins.src[1]
      puts = [self._set(o, w) for o in d[1]]
      return lambda th: [p(th, g(th) >> (w * i)) for i, p in enumerate(puts)] and None
    put, g = self._set(d, bits), ins.src[1]
    return lambda th: put(th, g(th))

  def _arith(self, ins):
    """An arithmetic opcode: the float form (``floats.float_op``) when a type is a
    float type, else the integer ALU."""
    if any(FLOAT_TYPE.match(m) for m in ins.mods):
      fn = float_op(ins.base, ins.mods, ins.opcode)   # exact, or refused by name
      put, args = self._set(ins.ops[0], ins.bits), ins.src[1:]
      return lambda th: put(th, fn(*(a(th) for a in args)))
    return self._alu(ins)

  def _alu(self, ins):
    base, bits, signed = ins.base, ins.bits, ins.signed
    extras = _extras(ins)
    allowed = _ALU_QUALIFIERS.get(base, set())
    if base not in ALU or not set(extras) <= allowed or (allowed and len(extras) != 1) or not ins.types or \
       (base == "prmt" and ins.mods != ["b32"]):
      _refuse(ins)
    sv = (lambda v: sign_extend(v, bits)) if signed else (lambda v: v)
    fn = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "and": lambda a, b: a & b,
          "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b, "not": lambda a: ~a,
          "neg": lambda a: -a, "shl": lambda a, b: a << b if b < bits else 0,
          "shr": lambda a, b: sv(a) >> min(b, bits - 1) if signed or b < bits else 0,
          "min": lambda a, b: min(sv(a), sv(b)), "max": lambda a, b: max(sv(a), sv(b)),
          "selp": lambda a, b, p: a if p else b, "bfe": bfe(bits, signed), "bfi": bfi(bits),
          "prmt": prmt, "mul": lambda a, b: sv(a) * sv(b),
          "mad": lambda a, b, c: sv(a) * sv(b) + c}[base]
    put, args = self._set(ins.ops[0], 2 * bits if "wide" in extras else bits), ins.src[1:]
    if len(args) == 2:
      a0, a1 = args
      return lambda th: put(th, fn(a0(th), a1(th)))
    return lambda th: put(th, fn(*(a(th) for a in args)))

  def _setp(self, ins):
    """setp.<cmp>.<integer type> p, a, b (no boolean combination, no second
    destination); float comparisons are refused."""
    cmp = ins.mods[0] if ins.mods else None
    if cmp not in _CMP or len(ins.mods) != 2 or ins.t[0] == "f" or len(ins.ops) != 3 or \
       ins.ops[0][0] != "reg":
      _refuse(ins)
    put, a, b = self._set(ins.ops[0], 1), ins.src[1], ins.src[2]
    bits, method = ins.bits, _CMP[cmp]
    sv = (lambda v: sign_extend(v, bits)) if ins.signed else (lambda v: v)
    return lambda th: put(th, getattr(sv(a(th)), method)(sv(b(th))))

  def _cvt(self, ins):
    """cvt between integer types (sign- or zero-extension, or wrapping; no
    ``.sat``), or between float types (``floats.float_cvt``)."""
    if any(FLOAT_TYPE.match(m) for m in ins.mods):
      fn, dbits = float_cvt(ins.mods, ins.opcode, len(ins.ops) - 1)   # or refused
      put, args = self._set(ins.ops[0], dbits), ins.src[1:]
      return lambda th: put(th, fn(*(a(th) for a in args)))
    types = ins.types
    if len(types) != 2 or len(ins.mods) != 2 or "f" in types[0][0] + types[1][0]:
      _refuse(ins)
    sbits, put, g = bits_of(types[1]), self._set(ins.ops[0], bits_of(types[0])), ins.src[1]
    if types[1][0] == "s":   # sign-extend, then wrap to the destination
      return lambda th: put(th, sign_extend(g(th), sbits))
    return lambda th: put(th, g(th) & ((1 << sbits) - 1))
