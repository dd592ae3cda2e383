"""The checker's floating-point arithmetic: exact against a reference computed another
way (rational arithmetic, rounded to each format by a search of its neighbours by
hand; values decoded by NumPy and ml_dtypes), or refused by name.

It used to run ``add.f32`` as an integer add of the bit patterns (1.0 + 1.0 gave
1.7e38), and ``sub``, ``neg``, ``min``, ``max`` the same way."""

import fractions
import re
import struct

import ml_dtypes
import numpy as np
import pytest

from mosaic_async_store.check.interp import PtxKernel
from ptx_harness import finding, kernel, output


def _round_f32(q: fractions.Fraction) -> int:
  """The binary32 bit pattern nearest to the rational ``q`` (ties to even), by hand."""
  if q == 0:
    return 0
  sign, q = (0x80000000, -q) if q < 0 else (0, q)
  e = q.numerator.bit_length() - q.denominator.bit_length()
  while fractions.Fraction(2) ** e > q:
    e -= 1
  while fractions.Fraction(2) ** (e + 1) <= q:
    e += 1
  e = max(e, -126)                      # subnormals share the smallest exponent
  scaled = q / fractions.Fraction(2) ** (e - 23)   # 24 significant bits before rounding
  m = scaled.numerator // scaled.denominator
  rest = scaled - m
  if rest > fractions.Fraction(1, 2) or (rest == fractions.Fraction(1, 2) and m % 2):
    m += 1
  if m == 1 << 24:
    m, e = 1 << 23, e + 1
  if e > 127:
    return sign | 0x7F800000            # overflow: infinity
  if m < 1 << 23:                       # subnormal
    return sign | m
  return sign | (e + 127) << 23 | (m - (1 << 23))


def _exact(bits: int) -> fractions.Fraction:
  return fractions.Fraction(struct.unpack("<f", struct.pack("<I", bits))[0])


def _run_lanes(op: str, *sources: np.ndarray) -> np.ndarray:
  """``op d, s0, s1, ...`` on 32 lanes of bit patterns in the checker: lane i loads
  source k from word 32 k + i of one buffer, and stores d after the sources."""
  regs = [f"%r{3 + k + (k >= 2)}" for k in range(len(sources))]   # %r3, %r4, %r6
  loads = "\n".join(f"  ld.global.b32 {r}, [%rd3+{128 * k}];" for k, r in enumerate(regs))
  ptx = kernel(f"""
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
{loads}
  {op} %r5, {", ".join(regs)};
  st.global.b32 [%rd3+{128 * len(sources)}], %r5;
""")
  buf = np.concatenate([*sources, np.zeros(32, np.uint32)]).astype(np.uint32)
  return output(ptx, [buf], cluster=1, smem_bytes=16, block=32)[32 * len(sources):]


def _run(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  return _run_lanes(op, a, b)


def _samples(seed):
  rng = np.random.default_rng(seed)
  vals = rng.standard_normal(32).astype(np.float32) * np.float32(10.0) ** rng.integers(
      -30, 30, 32).astype(np.float32)
  bits = vals.view(np.uint32).copy()
  bits[:4] = [0x3F800000, 0x00000001, 0x007FFFFF, 0x7F7FFFFF]   # 1.0, subnormals, max
  return bits


@pytest.mark.parametrize("op, fn", [("add.f32", lambda x, y: x + y),
                                    ("add.rn.f32", lambda x, y: x + y),
                                    ("sub.f32", lambda x, y: x - y),
                                    ("mul.rn.f32", lambda x, y: x * y)])
@pytest.mark.parametrize("seed", [0, 1])
def test_f32_arithmetic_is_exact(op, fn, seed):
  a, b = _samples(seed), _samples(seed + 10)
  got = _run(op, a, b)
  want = [_round_f32(fn(_exact(int(x)), _exact(int(y)))) for x, y in zip(a, b)]
  assert got.tolist() == want


def test_one_plus_one_is_two():
  one = np.full(32, 0x3F800000, np.uint32)
  assert (_run("add.f32", one, one) == 0x40000000).all()


def test_ftz_flushes_subnormal_inputs_and_results():
  tiny = np.full(32, 0x00000001, np.uint32)                 # the smallest subnormal
  assert (_run("add.ftz.f32", tiny, tiny) == 0).all()       # flushed in: 0 + 0
  assert (_run("add.f32", tiny, tiny) == 2).all()           # kept: 2 * 2^-149


@pytest.mark.parametrize("op", ["mul.f64", "add.sat.f32", "setp.lt.f16", "cvt.rn.f16.s32",
                                "ex2.f32", "div.full.f32", "fma.f32", "min.xorsign.abs.f32",
                                "add.ftz.bf16", "max.relu.f32", "add.rn.rz.f32",
                                "cvt.rn.e4m3x2.f32", "cvt.rn.relu.f16x2.f32"])
def test_what_is_not_exact_is_refused_by_name_at_parse(op):
  operands = {"fma": "%r5, %r3, %r4, %r4", "setp": "%p1, %r3, %r4", "cvt": "%r5, %r3",
              "ex2": "%r5, %r3", "neg": "%r5, %r3"}.get(op.split(".")[0], "%r5, %r3, %r4")
  ptx = kernel(f"  {op} {operands};")
  with pytest.raises(NotImplementedError, match=re.escape(op)):
    PtxKernel(ptx)


# -- every format and rounding mode, against a by-hand reference --------------------

# (exponent bits, mantissa bits, finite only) of each format, and its NumPy dtype
_FMT = {"f32": (8, 23, False, np.float32), "f16": (5, 10, False, np.float16),
        "bf16": (8, 7, False, ml_dtypes.bfloat16), "e4m3": (4, 3, True, ml_dtypes.float8_e4m3fn),
        "e5m2": (5, 2, False, ml_dtypes.float8_e5m2)}


def _value(fmt, bits):
  """The exact value of a bit pattern (NumPy / ml_dtypes decode it), None for NaN."""
  ebits, mbits, _, dt = _FMT[fmt]
  width = 1 + ebits + mbits
  raw = np.array([bits], {8: np.uint8, 16: np.uint16, 32: np.uint32}[width]).view(dt)
  with np.errstate(invalid="ignore"):   # NaN patterns (signalling ones warn)
    x = float(raw.astype(np.float64)[0])
  return None if x != x else x   # inf stays a float


def _round(fmt, q, mode="rn", satfinite=False):
  """The bit pattern nearest to the rational q in ``mode``, searched by hand."""
  ebits, mbits, finite_only, _ = _FMT[fmt]
  bias, width = (1 << (ebits - 1)) - 1, 1 + ebits + mbits
  sign = 1 << (width - 1) if q < 0 else 0
  q = abs(q)
  top_e = (1 << ebits) - 1 - (0 if finite_only else 1) - bias
  largest = (fractions.Fraction(2) - fractions.Fraction(2 if finite_only else 1, 1 << mbits)) \
      * fractions.Fraction(2) ** top_e
  # every finite magnitude, as (value, pattern), around q: scan the binade of q
  e = max(min(q.numerator.bit_length() - q.denominator.bit_length(), top_e), 1 - bias)
  while e > 1 - bias and fractions.Fraction(2) ** e > q:
    e -= 1
  step = fractions.Fraction(2) ** (e - mbits)
  lo = (q // step) * step
  hi = lo + step
  pick = {"rn": lo if q - lo < hi - q or (q - lo == hi - q and (lo / step) % 2 == 0) else hi,
          "rz": lo, "rm": hi if sign and q != lo else lo, "rp": lo if sign or q == lo else hi}[mode]
  if pick > largest:
    inf_ok = not finite_only and not satfinite and (mode == "rn" or mode == ("rm" if sign else "rp"))
    if inf_ok:
      return sign | ((1 << ebits) - 1) << mbits
    pick = largest
  if pick == 0:
    return sign
  # encode pick
  pe = max(pick.numerator.bit_length() - pick.denominator.bit_length(), 1 - bias)
  while pe > 1 - bias and fractions.Fraction(2) ** pe > pick:
    pe -= 1
  m = pick / fractions.Fraction(2) ** (pe - mbits)
  assert m.denominator == 1
  m = int(m)
  if m < 1 << mbits:
    return sign | m
  return sign | (pe + bias) << mbits | (m - (1 << mbits))


def _frac(fmt, bits):
  v = _value(fmt, bits)
  return None if v is None or v in (float("inf"), float("-inf")) else fractions.Fraction(v)


def _lane_samples(fmt, n, seed):
  ebits, mbits, _, dt = _FMT[fmt]
  rng = np.random.default_rng(seed)
  x = (rng.standard_normal(n) * 2.0 ** rng.integers(-8, 8, n)).astype(dt)
  width = 1 + ebits + mbits
  return x.view({8: np.uint8, 16: np.uint16, 32: np.uint32}[width]).astype(np.uint32)


_EXACT = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "fma": lambda a, b, c: a * b + c}


def _round_exact(base, fmt, bits, mode):
  """The reference result of ``base`` on bit patterns: the exact value rounded by
  hand; an exact zero takes IEEE 754's sign (a product: the operands' signs; a sum
  of zeros of one sign: that sign; any other exact zero sum: -0 when rounding
  down, else +0)."""
  xs = [_frac(fmt, b) for b in bits]
  exact = _EXACT[base](*xs)
  if exact != 0:
    return _round(fmt, exact, mode)
  width = 1 + _FMT[fmt][0] + _FMT[fmt][1]
  signs = [b >> (width - 1) & 1 for b in bits]
  if base == "mul":
    return (signs[0] ^ signs[1]) << (width - 1)
  terms = ([(signs[0] ^ signs[1], xs[0] * xs[1]), (signs[2], xs[2])] if base == "fma" else
           [(signs[0], xs[0]), (signs[1] ^ (base == "sub"), xs[1])])
  if all(v == 0 for _, v in terms) and terms[0][0] == terms[1][0]:
    return terms[0][0] << (width - 1)
  return int(mode == "rm") << (width - 1)


def _run3(op, a, b, c):
  return _run_lanes(op, a, b, c)


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
@pytest.mark.parametrize("base", ["add", "sub", "mul", "fma"])
def test_f32_every_rounding_mode_is_exact(base, mode):
  a, b, c = _samples(4), _samples(5), _samples(6)
  op = f"{base}.{mode}.f32"
  got = _run3(op, a, b, c) if base == "fma" else _run(op, a, b)
  args = zip(a, b, c) if base == "fma" else zip(a, b)
  want = [_round_exact(base, "f32", [int(v) for v in xs], mode) for xs in args]
  assert got.tolist() == want


@pytest.mark.parametrize("packed", [False, True], ids=["scalar", "x2"])
@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("base", ["add", "sub", "mul", "fma"])
def test_f16_and_bf16_arithmetic_is_exact(base, fmt, packed):
  lanes = [[_lane_samples(fmt, 32, 10 * k + j) for j in range(3)] for k in range(2)]
  pack = (lambda lo, hi: lo | hi << 16) if packed else (lambda lo, hi: lo)
  a, b, c = (pack(lanes[0][j], lanes[1][j]) for j in range(3))
  op = f"{base}.rn.{fmt}{'x2' if packed else ''}"
  got = _run3(op, a, b, c) if base == "fma" else _run(op, a, b)
  for i in range(32):
    for k in range(2 if packed else 1):
      want = _round_exact(base, fmt, [int(lanes[k][j][i])
                                      for j in range(3 if base == "fma" else 2)], "rn")
      assert (int(got[i]) >> (16 * k)) & 0xFFFF == want, (op, i, k)


_NAN, _QNAN = 0x7FC00001, 0x7FFFFFFF   # a NaN input; the canonical NaN


@pytest.mark.parametrize("base", ["min", "max"])
def test_min_max_follow_the_isa_nan_rules(base):
  one, two = 0x3F800000, 0x40000000
  a = np.array([one, _NAN, one, _NAN, 0xBF800000, 0x7F800000] + [one] * 26, np.uint32)
  b = np.array([two, two, _NAN, _NAN, 0x3F800000, 0xFF800000] + [two] * 26, np.uint32)
  pick = {"min": min, "max": max}[base]
  want = [pick(_value("f32", int(x)), _value("f32", int(y))) for x, y in zip(a[4:], b[4:])]
  got = _run(f"{base}.f32", a, b)
  assert got[:4].tolist() == [one if base == "min" else two, two, one, _QNAN]
  assert [_value("f32", int(g)) for g in got[4:]] == want
  got_nan = _run(f"{base}.NaN.f32", a, b)
  assert got_nan[1:4].tolist() == [_QNAN] * 3 and got_nan[0] == got[0]


def test_min_of_signed_zeros_is_refused_at_run_time():
  with pytest.raises(NotImplementedError, match=r"\+0 and -0"):
    _run("min.f32", np.zeros(32, np.uint32), np.full(32, 0x80000000, np.uint32))


@pytest.mark.parametrize("dst, mode", [("f16", "rn"), ("f16", "rz"), ("bf16", "rn"),
                                       ("bf16", "rm"), ("bf16", "rp")])
def test_cvt_f32_to_16_bits_rounds_exactly(dst, mode):
  x = _samples(8)
  got = _run_unary(f"cvt.{mode}.{dst}.f32", x)
  assert got.tolist() == [_round(dst, _frac("f32", int(v)), mode) for v in x]


@pytest.mark.parametrize("src", ["f16", "bf16"])
def test_cvt_16_bits_to_f32_is_exact(src):
  x = _lane_samples(src, 32, 3)
  got = _run_unary(f"cvt.f32.{src}", x)
  assert got.tolist() == [_round("f32", _frac(src, int(v))) for v in x]


@pytest.mark.parametrize("dst, lane_bits, satfinite", [
    ("f16x2", 16, False), ("bf16x2", 16, False), ("e4m3x2", 8, True), ("e5m2x2", 8, True)])
def test_cvt_packs_two_f32_with_the_first_in_the_upper_half(dst, lane_bits, satfinite):
  a, b = _samples(11), _samples(12)
  op = f"cvt.rn{'.satfinite' if satfinite else ''}.{dst}.f32"
  got = _run(op, a, b)
  lane = dst[:-2]
  for i in range(32):
    hi, lo = (_round(lane, _frac("f32", int(v)), "rn", satfinite) for v in (a[i], b[i]))
    assert int(got[i]) == hi << lane_bits | lo, (op, i)


@pytest.mark.parametrize("op", ["cvt.rn.f16x2.f32", "cvt.rn.bf16x2.f32"])
def test_cvt_of_a_nan_in_one_lane_is_refused_by_name(op):
  """The warp form converts every lane at once; a NaN in any lane's second operand
  (the bit pattern of the result is not modelled) is refused, never converted."""
  a, b = _samples(11), _samples(12)
  b[7] = _NAN
  with pytest.raises(NotImplementedError, match="of a NaN"):
    _run(op, a, b)


@pytest.mark.parametrize("op", ["ex2.approx.ftz.f32", "neg.f32"])
def test_a_warp_form_leaves_a_refused_lane_to_name_itself(op):
  """A float warp form runs each lane's function at once where no column form takes the
  warp; a lane it refuses (ex2 of a NaN) is named by lane by lane, not the piece's first
  lane; a lane it does not refuse (neg of a NaN: a sign bit) runs."""
  a = _samples(3)
  a[7] = _NAN
  if op.startswith("neg"):
    assert int(_run_lanes(op, a)[7]) == _NAN ^ 0x80000000
    return
  with pytest.raises(NotImplementedError, match=r"CTA 0 thread 7 at .*of a NaN"):
    _run_lanes(op, a)


def test_neg_and_abs_are_sign_bit_operations():
  x = _samples(3)
  ptx_neg = _run_unary("neg.f32", x)
  assert ptx_neg.tolist() == [(int(v) ^ 0x80000000) for v in x]
  assert _run_unary("abs.f32", x).tolist() == [int(v) & 0x7FFFFFFF for v in x]


def _run_unary(op, a):
  return _run_lanes(op, a)


@pytest.mark.parametrize("t", ["f32", "f16", "bf16", "f16x2", "bf16x2"])
def test_red_add_of_floats_rounds_once_and_f32_flushes(t):
  """``red.add`` on the float types: one rounding of the exact sum per lane; f32 flushes
  subnormal inputs and results (PTX ISA, red: "red.add.f32 rounds to nearest even and
  flushes subnormal inputs and results to sign-preserving zero")."""
  from mosaic_async_store.check.ops import reduce_op
  lane = t[:-2] if t.endswith("x2") else t
  lanes, lw = (2 if t.endswith("x2") else 1), 1 + _FMT[lane][0] + _FMT[lane][1]
  olds, news = _lane_samples(lane, 64, 1), _lane_samples(lane, 64, 2)
  for i in range(0, 64, lanes):
    old = sum(int(olds[i + k]) << (lw * k) for k in range(lanes))
    new = sum(int(news[i + k]) << (lw * k) for k in range(lanes))
    want = sum(_round_exact("add", lane, [int(olds[i + k]), int(news[i + k])], "rn") << (lw * k)
               for k in range(lanes))
    assert reduce_op("add", t, old, new) == want
  if t == "f32":
    tiny = 0x00000001                                     # 2^-149, a subnormal
    assert reduce_op("add", "f32", tiny, tiny) == 0       # flushed in: 0 + 0
    assert reduce_op("add", "f32", 0x3F800000, tiny) == 0x3F800000
    assert reduce_op("add", "f32", 0x00800001, 0x80800000) == 0   # a subnormal sum: flushed


def test_cvt_of_an_undefined_lane_names_that_lane():
  """The cvt warp form converts a piece's lanes at once; a lane whose source ``shfl``
  left undefined (lane 5 reads lane 20, outside membermask) goes lane by lane, so the
  finding ``undefined-value`` names thread 5, not the piece's first lane."""
  ptx = kernel("""
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  mov.u32 %r3, 7;
  setp.lt.u32 %p1, %r1, 16;
  @!%p1 bra DONE;
  setp.eq.u32 %p2, %r1, 5;
  selp.b32 %r6, 20, %r1, %p2;
  mov.b32 %r4, 0x3F800000;
  shfl.sync.idx.b32 %r3, %r4, %r6, 31, 0xffff;
  cvt.rn.f16x2.f32 %r5, %r3, %r3;
  mov.b32 %r3, %r5;
DONE:
  st.global.u32 [%rd3], %r3;
""")
  f = finding(ptx, [np.zeros(32, np.uint32)], cluster=1, smem_bytes=16, block=32)
  assert f.rule == "undefined-value" and f.thread == 5, f
