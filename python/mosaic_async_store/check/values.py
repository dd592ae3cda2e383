"""Register-to-register instructions of the PTX checker: moves, integer ALU,
comparisons, integer conversions, and floating point (``floats``).

Each handler, ``handler(k, ins)``, compiles one decoded instruction
(``opcodes.Instr``) into a function of the thread, or raises NotImplementedError
naming the opcode (``k``, the machine, is unused: values have no state).  Qualifiers are
checked exactly: one the checker does not implement (``.sat``, ``.cc``,
``.hi``, a ``prmt`` mode, a float ``setp``, ...) is refused, never
ignored.
"""

from __future__ import annotations

import operator

from mosaic_async_store.check import addresses, contraction, float_columns, program
from mosaic_async_store.check.findings import Stop
from mosaic_async_store.check.floats import FLOAT_TYPE, float_compare
from mosaic_async_store.check.floats_approx import float_function
from mosaic_async_store.check.floats_cvt import float_cvt, float_cvt_lanes
from mosaic_async_store.check.family import Family
from mosaic_async_store.check.opcodes import Opcode
from mosaic_async_store.check.ops import (ALU, TYPE, UNDEFINED, bfe, bfi, bits_of, prmt,
                                          sign_extend)
from mosaic_async_store.check.outcomes import FALLBACK
from mosaic_async_store.check.registers import read, write

__all__ = ["OPCODES", "FAMILY"]


# Qualifiers (other than types) each integer ALU opcode accepts.  mul/mad need
# exactly one of them.
_ALU_QUALIFIERS = {"mul": {"lo", "wide"}, "mad": {"lo", "wide"}}
_CMP = {"eq": "__eq__", "ne": "__ne__", "lt": "__lt__", "le": "__le__", "gt": "__gt__",
        "ge": "__ge__", "lo": "__lt__", "ls": "__le__", "hi": "__gt__", "hs": "__ge__"}
_CVTA_SPACES = {"to", "shared", "shared::cta", "shared::cluster", "global", "local", "param"}


def _fused(put, dest, bits, fn, ops, getters):
  """th -> None: ``dest = fn(*sources)``, masked to ``bits``.  With a register
  destination and one or two register or immediate sources (nearly every ALU
  instruction) the sources are read from their columns inline, not through a getter
  call each, and the warp form writes the destination's column at once
  (``registers.write``); lane by lane the result goes through ``put``."""
  kinds = [o[0] for o in ops]
  if dest[0] != "reg" or len(ops) not in (1, 2) or not set(kinds) <= {"reg", "imm"} or \
     kinds == ["imm", "imm"]:
    def general(th):
      put(th, fn(*[g(th) for g in getters]))
    columns = [program.lanes_getter(g) for g in getters]
    return _with_lanes(general, _computed_first(
        lambda lanes: [fn(*values) for values in zip(*(c(lanes) for c in columns))],
        put.lanes))
  col, regs, mask, U = put.column, put.registers, (1 << bits) - 1, UNDEFINED
  def store(lanes, out):
    write(regs, col, lanes, out)
  if len(ops) == 1:
    a = ops[0][1]
    if kinds[0] == "imm":
      value = fn(a) & mask
      def f1c(th):
        put(th, value)
      def f1c_lanes(lanes):
        write(regs, col, lanes, [value] * len(lanes))
      return _with_lanes(f1c, f1c_lanes)
    ca = regs.column(a)
    def f1(th):
      put(th, fn(ca[th.row] if ca else U))
    if fn is _identity:   # (a move: no call per lane)
      return _with_lanes(f1, _computed_first(
          lambda lanes: [x & mask for x in read(ca, lanes)], store))
    return _with_lanes(f1, _computed_first(
        lambda lanes: [fn(x) & mask for x in read(ca, lanes)], store))
  a, b = ops[0][1], ops[1][1]
  if kinds == ["reg", "reg"]:
    ca, cb = regs.column(a), regs.column(b)
    def frr(th):
      row = th.row
      put(th, fn(ca[row] if ca else U, cb[row] if cb else U))
    return _with_lanes(frr, _computed_first(
        lambda lanes: [fn(x, y) & mask for x, y in zip(read(ca, lanes), read(cb, lanes))],
        store))
  if kinds == ["reg", "imm"]:
    ca = regs.column(a)
    def fri(th):
      put(th, fn(ca[th.row] if ca else U, b))
    return _with_lanes(fri, _computed_first(
        lambda lanes: [fn(x, b) & mask for x in read(ca, lanes)], store))
  cb = regs.column(b)
  def fir(th):   # ["imm", "reg"]
    put(th, fn(a, cb[th.row] if cb else U))
  return _with_lanes(fir, _computed_first(
      lambda lanes: [fn(a, y) & mask for y in read(cb, lanes)], store))


# What a lane's own computation may raise (an undefined operand's use, an operand the
# checker does not run): the warp forms above compute every lane's value before they
# store any, and on these go lane by lane (``FALLBACK``), so the finding names the
# lane, not the piece's first (a piece may span the warps of a CTA: ``Program.wide``).
_LANE_ERRORS = (Stop, NotImplementedError)


def _computed_first(compute, store):
  """A warp form that computes every lane's value (``compute(lanes)`` -> a list) before
  it stores any (``store(lanes, values)``), and goes lane by lane (``FALLBACK``) where a
  lane's computation raises one of ``_LANE_ERRORS``."""
  def lanes_form(lanes):
    try:
      out = compute(lanes)
    except _LANE_ERRORS:
      return FALLBACK
    store(lanes, out)
  return lanes_form


def _with_lanes(fn, lanes_form):
  """``fn`` with its warp form (``program.Program.vcode``): the same, for each lane;
  a lane's own computation, so it runs lanes of several warps at once (``wide``)."""
  lanes_form.wide = True
  return program.with_lanes(fn, lanes_form)


def _constant(v):
  """The getter of an immediate ``v`` (with its warp form)."""
  def const(th):
    return v
  const.lanes = lambda lanes: [v] * len(lanes)
  return const


def _identity(v):
  return v


def _extras(ins):
  return [m for m in ins.mods if not TYPE.match(m)]


def _refuse(ins, why=""):
  raise NotImplementedError(f"opcode {ins.opcode}" + (f" ({why})" if why else ""))


# mov / cvta, the integer ALU, setp, cvt, and the float opcodes.


def _mov(k, ins):
  """mov (also packing ``{lo, ..., hi}`` into one register and unpacking), cvta
  (generic and specific addresses coincide in the checker's address map, but for
  the parameters: ``cvta.param`` adds ``addresses.PARAM_BASE``, ``cvta.to.param``
  takes it off)."""
  extras = _extras(ins)
  if (ins.base == "mov" and extras) or (ins.base == "cvta" and not set(extras) <= _CVTA_SPACES):
    _refuse(ins)
  if len(ins.ops) != 2:
    _refuse(ins, "two operands expected")
  d, s = ins.ops
  bits = ins.bits
  if s[0] == "vec":   # pack {lo, ..., hi} into one register
    w, parts, put = bits // len(s[1]), [k.program.getter(o) for o in s[1]], program.setter(k, d, bits)
    return lambda th: put(th, sum((g(th) & ((1 << w) - 1)) << (w * i)
                                  for i, g in enumerate(parts)))
  if d[0] == "vec":   # unpack one register into pieces
    w, g = bits // len(d[1]), ins.src[1]
    puts = [program.setter(k, o, w) for o in d[1]]
    return lambda th: [p(th, g(th) >> (w * i)) for i, p in enumerate(puts)] and None
  if ins.base == "cvta" and "param" in extras:   # the parameters' own generic window
    if bits != 64:
      _refuse(ins, "a 32-bit generic address of a parameter: the checker's parameter "
              "window, addresses.PARAM_BASE, lies above 4 GiB")
    return _fused(program.setter(k, d, bits), d, bits, _param_to_generic if "to" not in extras
                  else addresses.param_offset, [s], ins.src[1:])
  return _fused(program.setter(k, d, bits), d, bits, _identity, [s], ins.src[1:])


def _param_to_generic(v):
  """``cvta.param``: a parameter's offset as a generic address (``addresses``)."""
  return addresses.PARAM_BASE + v


def _arith(k, ins):
  """An arithmetic opcode: the float form (``floats_approx.float_function``) when a
  type is a float type, else the integer ALU."""
  if any(FLOAT_TYPE.match(m) for m in ins.mods):
    fn = float_function(ins.base, ins.mods, ins.opcode)   # exact, bounded, or refused
    put, args = program.setter(k, ins.ops[0], ins.bits), ins.src[1:]
    vec = float_columns.lanes_form(ins.base, ins.mods)   # (None: lane by lane)
    if not any(m in contraction.ROUNDING for m in ins.mods):   # may be fused with an fma
      if ins.base == "mul":
        return contraction.unrounded_mul(k, ins, fn, put, args, vec)
      if ins.base in ("add", "sub"):
        return contraction.unrounded_sum(k, ins, fn, put, args, vec)
    def arith(th):
      put(th, fn(*(a(th) for a in args)))
    getters = [program.lanes_getter(a) for a in args]
    def arith_lanes(lanes):   # at once (float_columns), else each lane's function
      columns = [g(lanes) for g in getters]
      out = None if vec is None else float_columns.on_lists(vec, *columns)
      if out is None:
        try:
          out = [fn(*values) for values in zip(*columns)]
        except NotImplementedError:   # (a case not modelled: lane by lane names the lane)
          return FALLBACK
      put.lanes(lanes, out)
    return _with_lanes(arith, arith_lanes)
  return _alu(k, ins)


def _alu(k, ins):
  base, bits, signed = ins.base, ins.bits, ins.signed
  extras = _extras(ins)
  # min/max.relu.s32 (PTX ISA, integer min / max: ".relu clamps the result to 0 if
  # negative"; s16x2 forms, not run here, stay refused by their type)
  relu = base in ("min", "max") and extras == ["relu"] and ins.types == ["s32"]
  if relu:
    extras = []
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
  if relu:
    fn = (lambda f: lambda a, b: max(f(a, b), 0))(fn)
  dbits = 2 * bits if "wide" in extras else bits
  return _fused(program.setter(k, ins.ops[0], dbits), ins.ops[0], dbits, fn, ins.ops[1:],
                ins.src[1:])


def _setp(k, ins):
  """setp.<cmp>{.<boolop>}.<integer type> p{|q}, a, b{, {!}c} (PTX ISA, setp: "p =
  (a CmpOp b) BoolOp c", "q = (!(a CmpOp b)) BoolOp c"; without BoolOp, p = a CmpOp b
  and q its negation); ``.f32`` comparisons by ``floats.float_compare``, others refused."""
  cmp = ins.mods[0] if ins.mods else None
  if FLOAT_TYPE.match(ins.t):   # (the f32 comparisons and their form, or refused)
    test, boolop = float_compare(ins.mods, ins.opcode, len(ins.ops) - 1)
    if ins.ops[0][0] not in ("reg", "pair"):
      _refuse(ins)
    return _predicates(k, ins, test, ins.src[1], ins.src[2], boolop)
  boolop = ins.mods[1] if len(ins.mods) == 3 else None
  if cmp not in _CMP or len(ins.mods) not in (2, 3) or \
     boolop not in (None, "and", "or", "xor") or len(ins.ops) != (4 if boolop else 3) or \
     ins.ops[0][0] not in ("reg", "pair"):
    _refuse(ins)
  bits, method = ins.bits, _CMP[cmp]
  ops, srcs = list(ins.ops[1:3]), list(ins.src[1:3])
  for i, op in enumerate(ops):   # an unsigned comparison's immediate is its bits (-2: 2^n - 2)
    if op[0] == "imm" and not ins.signed and op[1] != op[1] & ((1 << bits) - 1):
      ops[i] = ("imm", op[1] & ((1 << bits) - 1))
      srcs[i] = _constant(ops[i][1])
  a, b = srcs
  if ins.ops[0][0] == "reg" and boolop is None:
    put = program.setter(k, ins.ops[0], 1)
    if not ins.signed:   # the same comparison of two ints, inlined
      return _fused(put, ins.ops[0], 1, getattr(operator, method.strip("_")), ops, srcs)
    return lambda th: put(th, getattr(sign_extend(a(th), bits), method)(
        sign_extend(b(th), bits)))
  sv = (lambda v: sign_extend(v, bits)) if ins.signed else (lambda v: v)
  return _predicates(k, ins, lambda x, y: int(getattr(sv(x), method)(sv(y))), a, b, boolop)


def _predicates(k, ins, test, a, b, boolop):
  """setp's destinations p{|q}: ``t = test(a, b)``; p = t BoolOp c, q = !t BoolOp c."""
  dests = ins.ops[0][1:] if ins.ops[0][0] == "pair" else (ins.ops[0],)
  puts = [program.setter(k, d, 1) for d in dests]
  combine = {None: lambda t, c: t, "and": operator.and_, "or": operator.or_,
             "xor": operator.xor}[boolop]
  c = ins.src[3] if boolop else (lambda th: 0)

  def setp(th):
    t, cv = test(a(th), b(th)), c(th) & 1
    for put, v in zip(puts, (t, t ^ 1)):
      put(th, combine(v, cv))
  return setp


def _cvt(k, ins):
  """cvt between integer types (sign- or zero-extension, or wrapping; no
  ``.sat``), or between float types (``floats_cvt.float_cvt``)."""
  if any(FLOAT_TYPE.match(m) for m in ins.mods):
    fn, dbits = float_cvt(ins.mods, ins.opcode, len(ins.ops) - 1)   # or refused
    put, args = program.setter(k, ins.ops[0], dbits), ins.src[1:]
    def cvt(th):
      put(th, fn(*(a(th) for a in args)))
    vec = float_cvt_lanes(ins.mods, len(ins.ops) - 1)
    if vec is None or ins.ops[0][0] != "reg" or any(o[0] != "reg" for o in ins.ops[1:]):
      return cvt
    columns = [program.lanes_getter(a) for a in args]
    def column_form(operands):   # ([operand, lane]: vec takes them operand by operand)
      return vec(operands.ravel())
    def cvt_lanes(lanes):   # the lanes' sources as one NumPy column, converted at once
      out = float_columns.on_lists(column_form, *(c(lanes) for c in columns))
      if out is None:   # (a value shfl left undefined, or a NaN: lane by lane, which
        return FALLBACK   # names the lane)
      put.lanes(lanes, out)
    return _with_lanes(cvt, cvt_lanes)
  types = ins.types
  if len(types) != 2 or len(ins.mods) != 2 or "f" in types[0][0] + types[1][0]:
    _refuse(ins)
  sbits, put = bits_of(types[1]), program.setter(k, ins.ops[0], bits_of(types[0]))
  dbits, smask = bits_of(types[0]), (1 << sbits) - 1
  if types[1][0] == "s":   # sign-extend, then wrap to the destination
    return _fused(put, ins.ops[0], dbits, lambda v: sign_extend(v, sbits), ins.ops[1:2],
                  ins.src[1:2])
  return _fused(put, ins.ops[0], dbits, lambda v: v & smask, ins.ops[1:2], ins.src[1:2])


_ALU_REFUSED = ("add.sat.s32 %r1, %r2, %r3", "add.cc.u32 %r1, %r2, %r3",
                "sub.cc.u32 %r1, %r2, %r3")


# The opcodes this family runs (``opcodes.Opcode``: the handler, statements it runs,
# statements it refuses; test/checker/test_opcode_table.py compiles every one).
OPCODES = {
    "mov": Opcode(_mov, ("mov.u32 %r1, %r2", "mov.b64 %rd1, 42", "mov.pred %p1, %p2",
                         "mov.b32 %r1, {%h1, %h2}", "mov.b64 {%r1, %r2}, %rd3",
                         "mov.pred %p1, !%p2"),
                  ("mov.sat.u32 %r1, %r2",)),
    "cvta": Opcode(_mov, ("cvta.shared.u64 %rd1, %rd2", "cvta.to.global.u64 %rd1, %rd2"),
                   ("cvta.const.u64 %rd1, %rd2", "cvta.param.u32 %r1, %r2")),
    "add": Opcode(_arith, ("add.s32 %r1, %r2, %r3", "add.u64 %rd1, %rd2, 8",
                           "add.f32 %f1, %f2, %f3", "add.rn.ftz.f32 %f1, %f2, %f3",
                           "add.rz.f32 %f1, %f2, %f3", "add.rn.f16x2 %r1, %r2, %r3",
                           "add.rn.bf16 %h1, %h2, %h3", "add.f32x2 %rd1, %rd2, %rd3",
                           "add.rn.ftz.f32x2 %rd1, %rd2, %rd3"),
                  _ALU_REFUSED + ("add.sat.f32 %f1, %f2, %f3", "add.f64 %rd1, %rd2, %rd3",
                                "add.ftz.bf16 %h1, %h2, %h3")),
    "sub": Opcode(_arith, ("sub.s32 %r1, %r2, %r3", "sub.u64 %rd1, %rd2, %rd3",
                           "sub.f32 %f1, %f2, %f3"), _ALU_REFUSED[2:]),
    "mul": Opcode(_arith, ("mul.lo.s32 %r1, %r2, %r3", "mul.wide.u32 %rd1, %r2, %r3",
                           "mul.wide.s32 %rd1, %r2, -3", "mul.rn.f32 %f1, %f2, %f3",
                           "mul.rn.bf16x2 %r1, %r2, %r3", "mul.rn.f32x2 %rd1, %rd2, %rd3"),
                  ("mul.hi.u32 %r1, %r2, %r3", "mul.u32 %r1, %r2, %r3",
                   "mul.rn.sat.f32 %f1, %f2, %f3")),
    "mad": Opcode(_alu, ("mad.lo.s32 %r1, %r2, %r3, %r4", "mad.wide.u32 %rd1, %r2, %r3, %rd4"),
                  ("mad.hi.u32 %r1, %r2, %r3, %r4",)),
    "fma": Opcode(_arith, ("fma.rn.f32 %f1, %f2, %f3, %f4", "fma.rz.ftz.f32 %f1, %f2, %f3, %f4",
                           "fma.rn.bf16x2 %r1, %r2, %r3, %r4", "fma.rn.f16 %h1, %h2, %h3, %h4",
                           "fma.rn.f32x2 %rd1, %rd2, %rd3, %rd4"),
                  ("fma.f32 %f1, %f2, %f3, %f4", "fma.rn.sat.f32 %f1, %f2, %f3, %f4",
                   "fma.rn.relu.bf16x2 %r1, %r2, %r3, %r4", "fma.rn.f64 %rd1, %rd2, %rd3, %rd4")),
    "div": Opcode(_arith, ("div.rn.f32 %f1, %f2, %f3", "div.rz.ftz.f32 %f1, %f2, %f3"),
                  ("div.approx.f32 %f1, %f2, %f3", "div.full.f32 %f1, %f2, %f3",
                   "div.s32 %r1, %r2, %r3", "div.rn.f64 %rd1, %rd2, %rd3")),
    "ex2": Opcode(_arith, ("ex2.approx.ftz.f32 %f1, %f2", "ex2.approx.f32 %f1, %f2",
                           "ex2.approx.f16 %h1, %h2", "ex2.approx.f16x2 %r1, %r2",
                           "ex2.approx.ftz.bf16x2 %r1, %r2"),
                  ("ex2.approx.bf16 %h1, %h2", "ex2.f32 %f1, %f2",
                   "ex2.approx.ftz.f16 %h1, %h2")),
    "rcp": Opcode(_arith, ("rcp.approx.f32 %f1, %f2", "rcp.approx.ftz.f32 %f1, %f2",
                           "rcp.rn.f32 %f1, %f2", "rcp.rz.ftz.f32 %f1, %f2"),
                  ("rcp.f32 %f1, %f2", "rcp.approx.ftz.f64 %rd1, %rd2",
                   "rcp.rn.f64 %rd1, %rd2")),
    "rsqrt": Opcode(_arith, ("rsqrt.approx.f32 %f1, %f2", "rsqrt.approx.ftz.f32 %f1, %f2"),
                    ("rsqrt.approx.f64 %rd1, %rd2", "rsqrt.rn.f32 %f1, %f2")),
    **{b: Opcode(_arith, (f"{b}.approx.f32 %f1, %f2", f"{b}.approx.ftz.f32 %f1, %f2"),
                 (f"{b}.approx.f16 %h1, %h2", f"{b}.f32 %f1, %f2"))
       for b in ("lg2", "sin", "cos")},
    "tanh": Opcode(_arith, ("tanh.approx.f32 %f1, %f2", "tanh.approx.f16 %h1, %h2",
                            "tanh.approx.bf16x2 %r1, %r2"),
                   ("tanh.approx.ftz.f32 %f1, %f2", "tanh.f32 %f1, %f2")),
    "neg": Opcode(_arith, ("neg.s32 %r1, %r2", "neg.f32 %f1, %f2")),
    "abs": Opcode(_arith, ("abs.f32 %f1, %f2", "abs.ftz.f32 %f1, %f2"),
                  ("abs.s32 %r1, %r2",)),
    "min": Opcode(_arith, ("min.s32 %r1, %r2, %r3", "min.u32 %r1, %r2, %r3",
                           "min.relu.s32 %r1, %r2, %r3",
                           "min.f32 %f1, %f2, %f3", "min.NaN.bf16x2 %r1, %r2, %r3"),
                  ("min.relu.s16x2 %r1, %r2, %r3", "min.xorsign.abs.f32 %f1, %f2, %f3")),
    "max": Opcode(_arith, ("max.s32 %r1, %r2, %r3", "max.u64 %rd1, %rd2, %rd3",
                           "max.relu.s32 %r1, %r2, %r3",
                           "max.ftz.NaN.f32 %f1, %f2, %f3", "max.f16 %h1, %h2, %h3"),
                  ("max.relu.f32 %f1, %f2, %f3",)),
    "and": Opcode(_alu, ("and.b32 %r1, %r2, %r3", "and.pred %p1, %p2, %p3",
                         "and.pred %p1, %p2, !%p3"), ("and.b32 %r1, %r2, !%p3",)),
    "or": Opcode(_alu, ("or.b64 %rd1, %rd2, %rd3", "or.pred %p1, %p2, %p3",
                        "or.pred %p1, !%p2, %p3")),
    "xor": Opcode(_alu, ("xor.b32 %r1, %r2, 255", "xor.pred %p1, %p2, %p3",
                         "xor.pred %p1, !%p2, !%p3")),
    "not": Opcode(_alu, ("not.b32 %r1, %r2", "not.pred %p1, %p2", "not.pred %p1, !%p2")),
    "shl": Opcode(_alu, ("shl.b32 %r1, %r2, 3", "shl.b64 %rd1, %rd2, %r3")),
    "shr": Opcode(_alu, ("shr.u32 %r1, %r2, 3", "shr.s32 %r1, %r2, %r3",
                         "shr.u64 %rd1, %rd2, 40")),
    "selp": Opcode(_alu, ("selp.b32 %r1, %r2, %r3, %p1", "selp.u64 %rd1, %rd2, 7, %p1",
                          "selp.b32 %r1, %r2, %r3, !%p1"), ("selp.b32 %r1, !%p2, %r3, %p1",)),
    "bfe": Opcode(_alu, ("bfe.u32 %r1, %r2, 4, 8", "bfe.s32 %r1, %r2, %r3, %r4",
                         "bfe.u64 %rd1, %rd2, 30, 8")),
    "bfi": Opcode(_alu, ("bfi.b32 %r1, %r2, %r3, 4, 8",)),
    "prmt": Opcode(_alu, ("prmt.b32 %r1, %r2, %r3, 0x3210", "prmt.b32 %r1, %r2, %r3, %r4"),
                   ("prmt.b32.f4e %r1, %r2, %r3, %r4",)),
    "setp": Opcode(_setp, ("setp.eq.s32 %p1, %r2, %r3", "setp.lt.u32 %p1, %r2, 7",
                           "setp.ge.s64 %p1, %rd2, %rd3", "setp.hi.u64 %p1, %rd2, %rd3",
                           "setp.eq.and.s32 %p1, %r2, %r3, !%p2",
                           "setp.lt.or.u32 %p1|%p3, %r2, 5, %p2",
                           "setp.ne.xor.s64 %p1, %rd2, %rd3, %p2",
                           "setp.eq.s32 %p1|%p2, %r2, %r3", "setp.ge.f32 %p1, %f2, %f3",
                           "setp.ltu.ftz.f32 %p1, %f2, %f3", "setp.nan.f32 %p1, %f2, %f3",
                           "setp.neu.or.f32 %p1|%p2, %f2, %f3, %p3"),
                   ("setp.lt.f64 %p1, %rd2, %rd3", "setp.eq.nand.s32 %p1, %r2, %r3, %p2",
                    "setp.eq.s32 %p1, %r2, %r3, %p2", "setp.lo.f32 %p1, %f2, %f3",
                    "setp.lt.f16 %p1, %h2, %h3")),
    "cvt": Opcode(_cvt, ("cvt.u32.u64 %r1, %rd2", "cvt.s64.s32 %rd1, %r2",
                         "cvt.u64.u32 %rd1, %r2", "cvt.u16.u32 %h1, %r2",
                         "cvt.rn.bf16x2.f32 %r1, %f2, %f3", "cvt.rz.f16.f32 %h1, %f2",
                         "cvt.f32.bf16 %f1, %h2", "cvt.rn.satfinite.e4m3x2.f32 %h1, %f2, %f3",
                         "cvt.sat.f32.f32 %f1, %f2", "cvt.ftz.sat.f32.f32 %f1, %f2",
                         "cvt.rni.f32.f32 %f1, %f2", "cvt.rmi.ftz.sat.f32.f32 %f1, %f2",
                         "cvt.rn.f32.s32 %f1, %r2", "cvt.rz.f32.u64 %f1, %rd2"),
                  ("cvt.sat.s8.s32 %r1, %r2", "cvt.rn.f16.s32 %h1, %r2",
                   "cvt.rzi.s32.f32 %r1, %f2", "cvt.rn.e4m3x2.f32 %h1, %f2, %f3",
                   "cvt.rn.f32.f64 %f1, %rd2", "cvt.rn.f32.f32 %f1, %f2",
                   "cvt.sat.f16.f16 %h1, %h2")),
}

FAMILY = Family("values", OPCODES)
