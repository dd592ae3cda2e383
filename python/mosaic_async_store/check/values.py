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

import operator

from mosaic_async_store.check.floats import FLOAT_TYPE, float_cvt, float_op

from mosaic_async_store.check.ops import (ALU, TYPE, UNDEFINED, bfe, bfi, bits_of, prmt,
                                          sign_extend)

__all__ = ["ValueSemantics"]

# Qualifiers (other than types) each integer ALU opcode accepts.  mul/mad need
# exactly one of them.
_ALU_QUALIFIERS = {"mul": {"lo", "wide"}, "mad": {"lo", "wide"}}
_CMP = {"eq": "__eq__", "ne": "__ne__", "lt": "__lt__", "le": "__le__", "gt": "__gt__",
        "ge": "__ge__", "lo": "__lt__", "ls": "__le__", "hi": "__gt__", "hs": "__ge__"}
_CVTA_SPACES = {"to", "shared", "shared::cta", "shared::cluster", "global", "local", "param"}


def _fused(put, dest, bits, fn, ops, getters):
  """th -> None: ``dest = fn(*sources)``, masked to ``bits``.  With a register
  destination and one or two register or immediate sources (nearly every ALU
  instruction) the registers are read and written inline, not through a getter
  and a setter call each (same values: ``_get`` / ``_set`` do the same)."""
  kinds = [o[0] for o in ops]
  if dest[0] != "reg" or len(ops) not in (1, 2) or not set(kinds) <= {"reg", "imm"} or \
     kinds == ["imm", "imm"]:
    if len(getters) == 1:
      g, = getters
      return lambda th: put(th, fn(g(th)))
    if len(getters) == 2:
      a0, a1 = getters
      return lambda th: put(th, fn(a0(th), a1(th)))
    return lambda th: put(th, fn(*(g(th) for g in getters)))
  d, mask, U = dest[1], (1 << bits) - 1, UNDEFINED
  if len(ops) == 1:
    a = ops[0][1]
    if kinds[0] == "imm":
      def f1c(th):
        th.regs[d] = fn(a) & mask
      return f1c
    def f1(th):
      regs = th.regs
      regs[d] = fn(regs.get(a, U)) & mask
    return f1
  a, b = ops[0][1], ops[1][1]
  if kinds == ["reg", "reg"]:
    def frr(th):
      regs = th.regs
      regs[d] = fn(regs.get(a, U), regs.get(b, U)) & mask
    return frr
  if kinds == ["reg", "imm"]:
    def fri(th):
      regs = th.regs
      regs[d] = fn(regs.get(a, U), b) & mask
    return fri
  def fir(th):   # ["imm", "reg"]
    regs = th.regs
    regs[d] = fn(a, regs.get(b, U)) & mask
  return fir


def _identity(v):
  return v


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
    return _fused(self._set(d, bits), d, bits, _identity, [s], ins.src[1:])

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
    # (builtins where a lambda would compute the same: one Python frame fewer)
    fn = {"add": operator.add, "sub": operator.sub, "and": operator.and_,
          "or": operator.or_, "xor": operator.xor, "not": operator.invert,
          "neg": lambda a: -a, "shl": lambda a, b: a << b if b < bits else 0,
          "shr": lambda a, b: sv(a) >> min(b, bits - 1) if signed or b < bits else 0,
          "min": lambda a, b: min(sv(a), sv(b)), "max": lambda a, b: max(sv(a), sv(b)),
          "selp": lambda a, b, p: a if p else b, "bfe": bfe(bits, signed), "bfi": bfi(bits),
          "prmt": prmt, "mul": lambda a, b: sv(a) * sv(b),
          "mad": lambda a, b, c: sv(a) * sv(b) + c}[base]
    if not signed and base in ("min", "max", "mul"):
      fn = {"min": min, "max": max, "mul": operator.mul}[base]
    dbits = 2 * bits if "wide" in extras else bits
    return _fused(self._set(ins.ops[0], dbits), ins.ops[0], dbits, fn, ins.ops[1:],
                  ins.src[1:])

  def _setp(self, ins):
    """setp.<cmp>.<integer type> p, a, b (no boolean combination, no second
    destination); float comparisons are refused."""
    cmp = ins.mods[0] if ins.mods else None
    if cmp not in _CMP or len(ins.mods) != 2 or ins.t[0] == "f" or len(ins.ops) != 3 or \
       ins.ops[0][0] != "reg":
      _refuse(ins)
    put, a, b = self._set(ins.ops[0], 1), ins.src[1], ins.src[2]
    bits, method = ins.bits, _CMP[cmp]
    if not ins.signed:   # the same comparison of two ints, inlined
      return _fused(put, ins.ops[0], 1, getattr(operator, method.strip("_")), ins.ops[1:],
                    ins.src[1:])
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
    sbits, put = bits_of(types[1]), self._set(ins.ops[0], bits_of(types[0]))
    dbits, smask = bits_of(types[0]), (1 << sbits) - 1
    if types[1][0] == "s":   # sign-extend, then wrap to the destination
      return _fused(put, ins.ops[0], dbits, lambda v: sign_extend(v, sbits), ins.ops[1:2],
                    ins.src[1:2])
    return _fused(put, ins.ops[0], dbits, lambda v: v & smask, ins.ops[1:2], ins.src[1:2])
