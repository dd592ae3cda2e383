"""The checker's opcode table (``mosaic_async_store.check.opcodes``), walked whole.

* every example of every entry is accepted when a kernel is parsed, and every
  refused form (of an entry, or ``REFUSED``) is refused with NotImplementedError
  naming its opcode;
* every register-to-register example is run on random and edge-case operands and
  compared with a reference computed another way (NumPy's fixed-width integer
  types, bit lists, and for floats test_float_ops' exact values rounded by a
  search of their neighbours, infinities and NaNs by Python's doubles), so an entry cannot run an instruction wrongly.  An example without a
  reference here fails the test.
"""

import fractions
import re

import numpy as np
import pytest

from mosaic_async_store.check.interp import PtxKernel
from mosaic_async_store.check.opcodes import EXAMPLE_REGISTERS, OPCODES, REFUSED
from mosaic_async_store.check.floats import FLOAT_TYPE
from mosaic_async_store.check.floats_approx import APPROX_BASES
from mosaic_async_store.check.ops import split_operands
from test_float_approx import (approx_reference, cvt_f32_reference, cvt_int_to_f32_reference,
                               setp_float_reference)
from test_float_ops import _FMT, _round, _round_exact, _value

_VALUE_HANDLERS = ("_mov", "_arith", "_alu", "_setp", "_cvt")   # values.py's handlers
_WIDTH = {"%p": 1, "%h": 16, "%rd": 64, "%r": 32, "%f": 32}
_DTYPE = {("s", 16): np.int16, ("s", 32): np.int32, ("s", 64): np.int64,
          ("u", 16): np.uint16, ("u", 32): np.uint32, ("u", 64): np.uint64}


def _kernel(stmt):
  regs = "\n  ".join(EXAMPLE_REGISTERS)
  return f""".version 8.6
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{{
  {regs}
  .shared .align 16 .b8 __dynamic_shmem__0;
  {stmt};
L:
  ret;
}}
"""


def _handler_name(entry):
  """The name of an entry's handler (None for ``bra``, which the parser resolves)."""
  return None if entry.handler is None else entry.handler.__name__


def _examples(handlers=None):
  return [(base, stmt) for base, entry in OPCODES.items() for stmt in entry.examples
          if handlers is None or _handler_name(entry) in handlers]


@pytest.mark.parametrize("base,stmt", _examples(), ids=[s for _, s in _examples()])
def test_every_example_is_accepted(base, stmt):
  kernel = PtxKernel(_kernel(stmt))
  assert kernel.texts[0] == stmt and len(kernel.code) == 2


_REFUSED = [s for e in OPCODES.values() for s in e.refused] + list(REFUSED)


@pytest.mark.parametrize("stmt", _REFUSED, ids=_REFUSED)
def test_every_refused_form_is_refused_by_name(stmt):
  opcode = stmt.split()[0]
  with pytest.raises(NotImplementedError, match=re.escape(opcode)):
    PtxKernel(_kernel(stmt))


# -- running the register-to-register examples against a reference ---------------


def _width(reg):
  return next(w for prefix, w in _WIDTH.items() if reg.startswith(prefix))


def _typed(v, t):
  """v (bits) as a NumPy scalar of type t (b types as unsigned)."""
  bits = int(t[1:])
  u = np.array([v & ((1 << bits) - 1)], _DTYPE[("u", bits)])
  return u.view(_DTYPE[(t[0] if t[0] == "s" else "u", bits)])[0]


def _bits_of(x, bits):
  return int(np.array([x]).astype(_DTYPE[("s", bits)] if np.issubdtype(type(x), np.signedinteger)
                                  else _DTYPE[("u", bits)]).view(_DTYPE[("u", bits)])[0])


def _bit_list(v, n):
  return [(v >> i) & 1 for i in range(n)]


def _from_bits(bits):
  return sum(b << i for i, b in enumerate(bits))


def _float_lane_ref(base, fmt, mods, lanes):
  """One lane of a float opcode (test_float_ops' by-hand rounding; infinities and NaNs
  by Python's IEEE doubles): the bit pattern, or None where the checker must refuse."""
  width = 1 + _FMT[fmt][0] + _FMT[fmt][1]
  sign, man = 1 << (width - 1), _FMT[fmt][1]
  mode = next((m for m in mods if m in ("rn", "rz", "rm", "rp")), "rn")
  def flush(b):
    return b & sign if "ftz" in mods and b & (sign - 1) < 1 << man else b
  if base == "rcp" and "approx" not in mods:   # (exact: 1.0 / a, as div)
    return _float_lane_ref("div", fmt, mods, [0x3F800000, lanes[0]])
  if base in APPROX_BASES:   # (the ISA bounds the error: test_float_approx's value)
    return approx_reference(base, fmt, "ftz" in mods, lanes[0])
  lanes = [flush(b) for b in lanes]
  if base in ("neg", "abs"):
    return lanes[0] ^ sign if base == "neg" else lanes[0] & (sign - 1)
  vals = [_value(fmt, b) for b in lanes]
  if base in ("min", "max"):
    canonical = sign - 1
    if None in vals:
      return canonical if "NaN" in mods or vals == [None, None] else \
          lanes[1] if vals[0] is None else lanes[0]
    if vals[0] == vals[1] == 0 and lanes[0] != lanes[1]:
      return None
    return lanes[0] if (vals[0] <= vals[1]) == (base == "min") else lanes[1]
  if base == "div":
    if None in vals or (vals[0] == 0 and vals[1] == 0) or \
       all(v in (float("inf"), float("-inf")) for v in vals):
      return None
    negative = (lanes[0] ^ lanes[1]) & sign
    if vals[1] == 0 or vals[0] in (float("inf"), float("-inf")):
      return negative | ((1 << _FMT[fmt][0]) - 1) << man
    if vals[0] == 0 or vals[1] in (float("inf"), float("-inf")):
      return negative
    out = _round(fmt, fractions.Fraction(vals[0]) / fractions.Fraction(vals[1]), mode)
    return out & sign if "ftz" in mods and out & (sign - 1) < 1 << man else out
  if None in vals or any(v in (float("inf"), float("-inf")) for v in vals):
    f = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "fma": lambda a, b, c: a * b + c}[base]
    r = None if None in vals else f(*vals)
    if r is None or r != r:
      return None
    return _round(fmt, fractions.Fraction(0), mode) if r == 0 else \
        (sign if r < 0 else 0) | ((1 << _FMT[fmt][0]) - 1) << man
  out = _round_exact(base, fmt, lanes, mode)
  if "ftz" in mods and out & (sign - 1) < 1 << man:
    return out & sign
  return out


def _float_ref(base, mods, args, dest_bits):
  t = mods[-1]
  fmt, lanes = (t[:-2], 2) if t.endswith("x2") else (t, 1)
  lw = 1 + _FMT[fmt][0] + _FMT[fmt][1]
  out = 0
  for i in range(lanes):
    r = _float_lane_ref(base, fmt, mods[:-1], [(a >> (lw * i)) & ((1 << lw) - 1) for a in args])
    if r is None:
      return None
    out |= r << (lw * i)
  return out


def _cvt_ref(mods, args):
  quals = [m for m in mods if m in ("rn", "rz", "rm", "rp", "satfinite")]
  mode = next((m for m in quals if m != "satfinite"), "rn")
  dst, src = [m for m in mods if m not in quals]
  lanes = [dst[:-2]] * 2 if dst.endswith("x2") else [dst]
  out = 0
  for lane, a in zip(lanes, args):   # the first source goes to the upper half
    v = _value(src, a & ((1 << (1 + _FMT[src][0] + _FMT[src][1])) - 1))
    if v is None:
      return None
    lw = 1 + _FMT[lane][0] + _FMT[lane][1]
    lw = 1 + _FMT[lane][0] + _FMT[lane][1]
    if v in (float("inf"), float("-inf")):   # inf stays inf; satfinite: the largest finite
      huge = fractions.Fraction(2) ** 300
      bits = _round(lane, -huge if v < 0 else huge, "rn", "satfinite" in quals)
    else:
      bits = _round(lane, fractions.Fraction(v), mode, "satfinite" in quals)
    if v == 0 and np.signbit(v):
      bits |= 1 << (lw - 1)
    out = out << lw | bits
  return out


def _reference(stmt, regs):  # noqa: C901  (one reference per opcode)
  """The destination register(s) ``stmt`` leaves: {name: bits}; None where the
  checker must refuse the run (a NaN result)."""
  opcode, _, rest = stmt.partition(" ")
  base, *mods = opcode.split(".")
  ops = split_operands(rest)
  def val(tok):   # (a negated predicate, !%p: its bit flipped)
    if tok.startswith("!"):
      return 1 - (regs[tok[1:]] & 1)
    return regs[tok] if tok.startswith("%") else int(tok, 0)
  t = next((m for m in reversed(mods) if re.fullmatch(r"[bsuf]\d+|pred", m)), None)
  d = ops[0]
  if base in ("mov", "cvta"):
    if ops[1].startswith("{"):
      parts = split_operands(ops[1][1:-1])
      w = _width(parts[0])
      return {d: sum(val(p) << (w * i) for i, p in enumerate(parts))}
    if d.startswith("{"):
      parts = split_operands(d[1:-1])
      w = _width(parts[0])
      return {p: (val(ops[1]) >> (w * i)) & ((1 << w) - 1) for i, p in enumerate(parts)}
    return {d: val(ops[1]) & ((1 << _width(d)) - 1)}
  args = [val(o) for o in ops[1:]]
  if base == "cvt" and mods[-2:] == ["f32", "f32"]:
    return {d: cvt_f32_reference(mods[:-2], args[0] & 0xFFFFFFFF)}
  if base == "cvt" and mods[-2] == "f32" and mods[-1][0] in "su":
    return {d: cvt_int_to_f32_reference(mods[0], mods[-1], args[0])}
  if base == "setp" and FLOAT_TYPE.match(mods[-1]):   # (p = t BoolOp c, q = !t BoolOp c)
    boolop = next((m for m in mods if m in ("and", "or", "xor")), None)
    t0 = setp_float_reference(mods[0], "ftz" in mods, args[0] & 0xFFFFFFFF, args[1] & 0xFFFFFFFF)
    c = args[2] & 1 if boolop else 0
    return {dest: int({None: v, "and": v & c, "or": v | c, "xor": v ^ c}[boolop])
            for dest, v in zip(d.split("|"), (t0, 1 - t0))}
  if base == "cvt" and any(FLOAT_TYPE.match(m) for m in mods):
    return {d: _cvt_ref(mods, args)}
  if any(FLOAT_TYPE.match(m) for m in mods):
    return {d: _float_ref(base, mods, args, _width(d))}
  if t == "pred":
    a = [bool(x & 1) for x in args]
    return {d: int({"and": lambda: a[0] and a[1], "or": lambda: a[0] or a[1],
                    "xor": lambda: a[0] != a[1], "not": lambda: not a[0],
                    "mov": lambda: a[0]}[base]())}
  bits = int(t[1:])
  if base == "setp":
    x, y = _typed(args[0], t), _typed(args[1], t)
    cmp = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y,
           "lo": x < y, "ls": x <= y, "hi": x > y, "hs": x >= y}[mods[0]]
    if len(mods) == 2 and "|" not in d:
      return {d: int(cmp)}
    c = bool(args[2] & 1) if len(mods) == 3 else None
    both = {}
    for dest, v in zip(d.split("|"), (cmp, not cmp)):   # q: the comparison negated
      v = v if c is None else {"and": v and c, "or": v or c, "xor": v != c}[mods[1]]
      both[dest] = int(bool(v))
    return both
  if base == "cvt":
    dst, srct = mods[0], mods[1]
    x = np.array([_typed(args[0], srct)])
    return {d: _bits_of(x.astype(_DTYPE[(dst[0], int(dst[1:]))])[0], int(dst[1:]))}
  if base == "selp":
    return {d: (args[0] if args[2] else args[1]) & ((1 << bits) - 1)}
  if base == "bfe":
    a, pos, ln = _bit_list(args[0], bits), args[1] & 0xFF, args[2] & 0xFF
    field = [a[pos + i] if pos + i < bits else None for i in range(min(ln, bits))]
    fill = 0 if t[0] == "u" or ln == 0 else a[min(pos + ln - 1, bits - 1)]
    field = [fill if b is None else b for b in field]
    return {d: _from_bits(field + [fill] * (bits - len(field)))}
  if base == "bfi":
    a, b, pos, ln = _bit_list(args[0], bits), _bit_list(args[1], bits), args[2] & 0xFF, \
        args[3] & 0xFF
    for i in range(ln):
      if pos + i < bits:
        b[pos + i] = a[i]
    return {d: _from_bits(b)}
  if base == "prmt":
    data = list((args[0] | args[1] << 32).to_bytes(8, "little"))
    sel = [(args[2] >> (4 * i)) & 15 for i in range(4)]
    return {d: int.from_bytes(bytes((0xFF if data[s & 7] & 0x80 else 0) if s & 8 else data[s & 7]
                                    for s in sel), "little")}
  kind = "s" if t[0] == "s" else "u"
  x = [_typed(v, kind + str(bits)) for v in args]
  with np.errstate(over="ignore"):
    if "wide" in mods:
      wide = _DTYPE[(kind, 2 * bits)]
      prod = wide(x[0]) * wide(x[1]) + (wide(_typed(args[2], kind + str(2 * bits)))
                                        if base == "mad" else wide(0))
      return {d: _bits_of(prod, 2 * bits)}
    if base in ("shl", "shr"):
      n = args[1] & 0xFFFFFFFF
      if base == "shl":
        r = np.left_shift(x[0], type(x[0])(n)) if n < bits else type(x[0])(0)
      else:
        r = np.right_shift(x[0], type(x[0])(min(n, bits - 1) if kind == "s" else n)) \
            if kind == "s" or n < bits else type(x[0])(0)
      return {d: _bits_of(r, bits)}
    r = {"add": lambda: x[0] + x[1], "sub": lambda: x[0] - x[1], "and": lambda: x[0] & x[1],
         "or": lambda: x[0] | x[1], "xor": lambda: x[0] ^ x[1], "not": lambda: ~x[0],
         "neg": lambda: -x[0], "min": lambda: min(x[0], x[1]), "max": lambda: max(x[0], x[1]),
         "mul": lambda: x[0] * x[1], "mad": lambda: x[0] * x[1] + x[2]}[base]()
    if "relu" in mods:   # (min/max.relu.s32: "clamps the result to 0 if negative")
      r = max(r, type(r)(0))
  return {d: _bits_of(r, bits)}


def _operand_values(stmt, rng, case):
  """Register values for one run: edge cases first, then random bit patterns."""
  regs = {}
  for reg in sorted(set(re.findall(r"%(?:rd|r|h|p|f)\d+", stmt))):
    w = _width(reg)
    edges = [0, 1, (1 << w) - 1, 1 << (w - 1), (1 << (w - 1)) - 1, 3, 31, 32, 33, 64]
    if reg.startswith("%f"):
      edges = [0, 0x80000000, 0x3F800000, 0x7F7FFFFF, 0x00000001, 0x807FFFFF, 0x7F800000,
               0xFF800000, 0x00800000, 0x4B000001]
    regs[reg] = (edges[(case + len(regs)) % len(edges)] if case < 2 * len(edges)
                 else int(rng.integers(0, 1 << w, dtype=np.uint64)) if w < 64
                 else int(rng.integers(0, 1 << 63)) * 2 + int(rng.integers(0, 2)))
  return regs


class _Thread:   # what a register-to-register instruction touches: its row of the
  def __init__(self):   # machine's register columns, its float products (contraction.py)
    self.row, self.products = 0, {}


_VALUE_EXAMPLES = _examples(_VALUE_HANDLERS)


@pytest.mark.parametrize("base,stmt", _VALUE_EXAMPLES, ids=[s for _, s in _VALUE_EXAMPLES])
def test_value_examples_match_a_reference(base, stmt):
  kernel = PtxKernel(_kernel(stmt))
  fn, registers = kernel.code[0], kernel.machine.registers
  rng = np.random.default_rng(7)
  for case in range(300):
    regs = _operand_values(stmt, rng, case)
    want = _reference(stmt, regs)
    registers.reset(1, {r: [v] for r, v in regs.items()})   # (one thread: row 0)
    th = _Thread()
    if None in want.values():   # a NaN result, or min/max of +0 and -0
      with pytest.raises(NotImplementedError):
        fn(th)
      continue
    fn(th)
    got = {r: registers.get(r, th) for r in want}
    assert got == want, f"{stmt} with {regs}"


def test_the_table_has_value_examples_of_every_register_opcode():
  # an entry whose handler computes values must show (and so test) its forms
  for base, entry in OPCODES.items():
    if _handler_name(entry) in _VALUE_HANDLERS:
      assert entry.examples, base
