"""The checker's approximate float functions (``rcp``, ``rsqrt``, ``ex2``, ``lg2``,
``tanh``, ``sin``, ``cos`` with ``.approx``), the exactly rounded ``rcp.rn``, the
same-type ``cvt.f32.f32`` forms and float ``setp``: against NumPy, with the ISA's
special-case tables and error bounds, or refused by name.

The ISA bounds the approximations' error without fixing a value; the checker gives the
function in float64 rounded once to the destination (floats_approx.py), so
``approx_reference`` here computes that with NumPy's float64 functions and casts, the
special cases from the ISA's tables written out again, and the bound tests check the
values against the ISA's bounds with exact (Fraction) or float64 references.
test_opcode_table.py runs its examples against these references too."""

import fractions
import math
import struct

import ml_dtypes
import numpy as np
import pytest

from mosaic_async_store.check.floats_approx import float_function
from mosaic_async_store.check.interp import PtxKernel
from ptx_harness import kernel, output
from test_float_ops import _round_f32, _run_lanes

_NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
_UINT = {"f32": np.uint32, "f16": np.uint16, "bf16": np.uint16}
_EXP_MASK = {"f32": 0x7F800000, "f16": 0x7C00, "bf16": 0x7F80}
_SIGN = {"f32": 0x80000000, "f16": 0x8000, "bf16": 0x8000}
_NAN = 0x7FC00000
INF = math.inf
# PTX ISA, each instruction's table of results for -Inf, -0.0, +0.0, +Inf (None: NaN)
_ISA_TABLE = {"rcp": (-0.0, -INF, INF, 0.0), "rsqrt": (None, -INF, INF, 0.0),
              "ex2": (0.0, 1.0, 1.0, INF), "lg2": (None, -INF, -INF, INF),
              "tanh": (-1.0, -0.0, 0.0, 1.0), "sin": (None, -0.0, 0.0, None),
              "cos": (None, 1.0, 1.0, None)}
_NUMPY = {"rcp": np.reciprocal, "rsqrt": lambda x: 1.0 / np.sqrt(x), "ex2": np.exp2,
          "lg2": np.log2, "tanh": np.tanh, "sin": np.sin, "cos": np.cos}


def _decode(t, bits):
  return float(np.array([bits], _UINT[t]).view(_NP[t])[0])


def _encode(t, x):
  with np.errstate(over="ignore"):
    return int(np.array([x], np.float64).astype(_NP[t]).view(_UINT[t])[0])


def _subnormal(t, bits):
  return not bits & _EXP_MASK[t] and bits & ~_SIGN[t] & (_SIGN[t] - 1)


def _bits(x):
  return struct.unpack("<I", struct.pack("<f", x))[0]


def approx_reference(base, t, ftz, bits):
  """The bit pattern the checker gives ``base.approx{.ftz}.t`` of ``bits`` (one lane),
  or None where it must refuse (a NaN result, sin / cos beyond 100 pi, an f16 ex2 result
  below the smallest normal)."""
  if ftz and _subnormal(t, bits):
    bits &= _SIGN[t]
  if base == "tanh" and _subnormal(t, bits):
    return bits   # ("The subnormal inputs gets passed through to the output")
  x = _decode(t, bits)
  if x != x or (base in ("rsqrt", "lg2") and x < 0 and x != 0) or \
     (base in ("sin", "cos") and math.isfinite(x) and abs(x) > 100 * math.pi):
    return None
  if x == 0 or math.isinf(x):
    r = _ISA_TABLE[base][(0 if x < 0 else 3) if math.isinf(x) else
                         (1 if math.copysign(1, x) < 0 else 2)]
    if r is None:
      return None
  else:
    with np.errstate(over="ignore"):
      r = _NUMPY[base](np.float64(x))
  out = _encode(t, r)
  if _subnormal(t, out):
    if ftz:
      return out & _SIGN[t]
    if base == "ex2" and t == "f16":
      return None
  return out


def _lane_inputs(base, seed, n=32):
  """f32 inputs for ``base``: special values, subnormals and random ones in its domain."""
  rng = np.random.default_rng(seed)
  if base in ("sin", "cos"):
    x = rng.uniform(-100 * np.pi, 100 * np.pi, n)
  elif base == "ex2":
    x = rng.uniform(-160, 140, n)
  else:
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-40, 38, n)
    if base in ("rsqrt", "lg2"):
      x = np.abs(x)
  bits = x.astype(np.float32).view(np.uint32).copy()
  bits[:6] = [0x00000001, 0x807FFFFF if base not in ("rsqrt", "lg2") else 0x007FFFFF,
              0x3F800000, 0x00800000, 0x7F7FFFFF if base not in ("sin", "cos") else 0x40490FDB,
              0x80000000 if base not in ("rsqrt", "lg2") else 0]
  return bits


_F32_FORMS = [f"{b}.approx{ftz}.f32" for b in ("rcp", "rsqrt", "ex2", "lg2", "sin", "cos")
              for ftz in ("", ".ftz")] + ["tanh.approx.f32"]


@pytest.mark.parametrize("op", _F32_FORMS)
def test_each_f32_approximation_gives_numpys_float64_value_rounded_once(op):
  """Each lane of a warp: the function in float64 (NumPy) rounded to nearest f32, with
  .ftz's flushes; subnormal inputs and results included."""
  base, ftz = op.split(".")[0], ".ftz" in op
  for seed in range(3):
    a = _lane_inputs(base, seed)
    got = _run_lanes(op, a)
    want = [approx_reference(base, "f32", ftz, int(v)) for v in a]
    assert got.tolist() == want, op


@pytest.mark.parametrize("op,lane", [("tanh.approx.f16x2", "f16"),
                                     ("tanh.approx.bf16x2", "bf16"),
                                     ("ex2.approx.f16x2", "f16"),
                                     ("ex2.approx.ftz.bf16x2", "bf16")])
def test_each_half_approximation_runs_lane_by_lane(op, lane):
  """The packed 16-bit forms: each half is the function rounded to its format (the low
  half is the first lane)."""
  base, ftz = op.split(".")[0], ".ftz" in op
  rng = np.random.default_rng(5)
  x = rng.uniform(-13.5, 15, 64) if base == "ex2" else rng.uniform(-5, 5, 64)
  halves = x.astype(_NP[lane]).view(np.uint16).astype(np.uint32)
  halves[:4] = [0x0001, 0x8000, 0x0000, 0x0003]   # subnormals, zeros
  a = halves[0::2] | halves[1::2] << 16
  got = _run_lanes(op, a)
  want = [approx_reference(base, lane, ftz, int(lo)) | approx_reference(base, lane, ftz, int(hi))
          << 16 for lo, hi in zip(halves[0::2], halves[1::2])]
  assert got.tolist() == want


_TABLE_INPUTS = (0xFF800000, 0x80000000, 0x00000000, 0x7F800000)


@pytest.mark.parametrize("base", sorted(_ISA_TABLE))
def test_the_isas_special_inputs_give_its_tables_results(base):
  """-Inf, -0.0, +0.0, +Inf as each instruction's table says; where it says NaN the run
  is refused (a NaN's bit pattern is not modelled)."""
  op = f"{base}.approx.f32"
  fn = float_function(base, op.split(".")[1:], op)
  for bits, want in zip(_TABLE_INPUTS, _ISA_TABLE[base]):
    if want is None:
      with pytest.raises(NotImplementedError, match="NaN"):
        fn(bits)
    else:
      assert fn(bits) == _bits(want), (op, hex(bits))
  with pytest.raises(NotImplementedError, match="of a NaN"):
    fn(_NAN)


def test_subnormals_flush_under_ftz_and_pass_through_tanh():
  tiny, neg_tiny = 0x00000001, 0x80000005
  rcp = float_function("rcp", ["approx", "ftz", "f32"], "rcp.approx.ftz.f32")
  assert rcp(tiny) == 0x7F800000 and rcp(neg_tiny) == 0xFF800000   # 1 / +-0
  assert rcp(_bits(2.0 ** 127)) == 0   # 2^-127: a subnormal result, flushed
  assert float_function("rcp", ["approx", "f32"], "rcp")(_bits(2.0 ** 127)) == 0x00400000
  assert float_function("ex2", ["approx", "ftz", "f32"], "ex2")(neg_tiny) == _bits(1.0)
  assert float_function("ex2", ["approx", "ftz", "f32"], "ex2")(_bits(-130.0)) == 0
  assert float_function("ex2", ["approx", "f32"], "ex2")(_bits(-130.0)) == 0x00080000   # 2^-130
  assert float_function("lg2", ["approx", "ftz", "f32"], "lg2")(tiny) == 0xFF800000    # -Inf
  assert float_function("lg2", ["approx", "f32"], "lg2")(tiny) == _bits(-149.0)
  assert float_function("sin", ["approx", "ftz", "f32"], "sin")(neg_tiny) == 0x80000000
  assert float_function("cos", ["approx", "ftz", "f32"], "cos")(tiny) == _bits(1.0)
  assert float_function("tanh", ["approx", "f32"], "tanh")(neg_tiny) == neg_tiny
  # ex2.approx.ftz.bf16: "-subnormal -> +1.0", "+subnormal -> +1.0"
  assert float_function("ex2", ["approx", "ftz", "bf16"], "ex2")(0x8001) == 0x3F80


@pytest.mark.parametrize("op,bits,why", [
    ("rsqrt.approx.f32", _bits(-4.0), "negative"), ("rsqrt.approx.f32", 0x80000001, "negative"),
    ("lg2.approx.f32", _bits(-0.5), "negative"), ("sin.approx.f32", _bits(400.0), "100pi"),
    ("cos.approx.ftz.f32", _bits(-315.0), "100pi"), ("ex2.approx.f16", 0xCD00, "-14"),
    ("tanh.approx.bf16", 0x7FC0, "NaN")])
def test_values_the_isa_does_not_fix_are_refused(op, bits, why):
  base, *mods = op.split(".")
  with pytest.raises(NotImplementedError, match=why):
    float_function(base, mods, op)(bits)


@pytest.mark.parametrize("stmt", [
    "tanh.approx.ftz.f32 %f1, %f2", "ex2.approx.bf16 %h1, %h2", "ex2.approx.ftz.f16 %h1, %h2",
    "rcp.f32 %f1, %f2", "rcp.approx.ftz.f64 %rd1, %rd2", "sin.approx.f16 %h1, %h2",
    "lg2.f32 %f1, %f2", "rsqrt.approx.f64 %rd1, %rd2", "rcp.rn.approx.f32 %f1, %f2",
    "cvt.rn.f32.f32 %f1, %f2", "cvt.rni.rzi.f32.f32 %f1, %f2", "setp.lt.f16 %p1, %h2, %h3",
    "setp.lt.nand.f32 %p1, %f2, %f3"])
def test_forms_not_run_are_refused_by_name_when_parsed(stmt):
  opcode = stmt.split()[0]
  with pytest.raises(NotImplementedError, match=opcode.replace(".", r"\.")):
    PtxKernel(kernel(f"  {stmt};", regs=".reg .b16 %h<4>;\n  .reg .f32 %f<4>;"))


def _ulps(got_bits, exact):
  """|got - exact| in units of the last place of f32 at ``exact`` (a Fraction)."""
  e = max(math.frexp(float(abs(exact)))[1] - 24, -149)
  return abs(fractions.Fraction(struct.unpack("<f", struct.pack("<I", got_bits))[0]) - exact) \
      / fractions.Fraction(2) ** e


@pytest.mark.parametrize("base", ["rcp", "rsqrt", "ex2", "lg2", "sin", "cos", "tanh"])
def test_the_values_lie_within_the_isas_bounds(base):
  """rcp: 1 ulp; rsqrt: relative 2^-22.9; ex2: 2 ulp from the correctly rounded result;
  lg2: absolute 2^-22 in (0.5, 2), relative 2^-22 beyond; sin / cos: absolute 2^-20.5 in
  [-2pi, 2pi], 2^-14.7 to 100pi; tanh: relative 2^-11 (PTX ISA, each instruction)."""
  fn = float_function(base, ["approx", "f32"], base)
  for bits in _lane_inputs(base, 9, 400)[6:]:
    bits = int(bits)
    x, got = _decode("f32", bits), _decode("f32", fn(bits))
    if base == "rcp":
      exact = 1 / fractions.Fraction(x)
      assert abs(exact) > fractions.Fraction(2) ** 128 or _ulps(fn(bits), exact) <= 1
      continue
    ref = float(_NUMPY[base](np.float64(x)))
    if base == "ex2":
      if ref < 2.0 ** 128:
        assert abs(fn(bits) - _encode("f32", ref)) <= 2
    elif base == "lg2" and 0.5 < x < 2:
      assert abs(got - ref) <= 2.0 ** -22
    elif base in ("sin", "cos"):
      assert abs(got - ref) <= (2.0 ** -20.5 if abs(x) <= 2 * math.pi else 2.0 ** -14.7)
    elif ref not in (0.0, INF):
      bound = {"rsqrt": 2.0 ** -22.9, "lg2": 2.0 ** -22, "tanh": 2.0 ** -11}[base]
      assert abs(got - ref) <= bound * abs(ref), (base, x)


def test_rcp_with_a_rounding_modifier_is_the_exact_quotient_rounded_once():
  a = _lane_inputs("rcp", 4)
  got = _run_lanes("rcp.rn.f32", a)
  assert got.tolist() == [_round_f32(1 / fractions.Fraction(_decode("f32", int(v))))
                          if _decode("f32", int(v)) else int(v) & 0x80000000 | 0x7F800000
                          for v in a]
  rz, rn = (float_function("rcp", [mode, "f32"], f"rcp.{mode}.f32") for mode in ("rz", "rn"))
  assert rz(_bits(3.0)) == 0x3EAAAAAA and rn(_bits(3.0)) == 0x3EAAAAAB


def cvt_f32_reference(quals, bits):
  """``cvt{.irnd}{.ftz}{.sat}.f32.f32`` of ``bits`` by NumPy, or None where refused."""
  if "ftz" in quals and _subnormal("f32", bits):
    bits &= 0x80000000
  x = np.float32(_decode("f32", bits))
  if np.isnan(x):
    return 0 if "sat" in quals else None
  irnd = next((q for q in quals if q in ("rni", "rzi", "rmi", "rpi")), None)
  if irnd:
    y = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[irnd](x)
    if y == 0 and np.signbit(x) and x != 0:
      return None   # (a negative operand rounded to zero: -0.0 or +0.0 unspecified)
    x = y
  if "sat" in quals:
    if x == 0 and np.signbit(x):
      return None
    x = np.clip(x, np.float32(0), np.float32(1))
  out = int(np.float32(x).view(np.uint32))
  return out & 0x80000000 if "ftz" in quals and _subnormal("f32", out) else out


@pytest.mark.parametrize("op", ["cvt.sat.f32.f32", "cvt.ftz.sat.f32.f32", "cvt.rni.f32.f32",
                                "cvt.rzi.ftz.f32.f32", "cvt.rmi.sat.f32.f32",
                                "cvt.rpi.f32.f32", "cvt.ftz.f32.f32"])
def test_cvt_f32_to_f32_saturates_rounds_to_integers_and_flushes(op):
  """.sat "limits the result to the range [0.0, 1.0]. NaN results are flushed to
  positive zero"; .rni/.rzi/.rmi/.rpi round to an integral value; .ftz flushes."""
  rng = np.random.default_rng(2)
  a = (rng.standard_normal(32) * 3).astype(np.float32).view(np.uint32).copy()
  a[:8] = [0x3F000000, 0x3FC00000, 0x40200000, 0x7F800000, 0xFF800000, 0x00000003,
           0x7FC00000 if "sat" in op else 0x3F800000, 0x80000001 if "ftz" in op else 0x3F7FFFFF]
  quals = op.split(".")[1:-2]
  want = [cvt_f32_reference(quals, int(v)) for v in a]
  if None in want:
    with pytest.raises(NotImplementedError, match="negative operand|NaN"):
      _run_lanes(op, a)
    keep = [i for i, w in enumerate(want) if w is not None]
    a, want = a[keep], [want[i] for i in keep]
    a = np.concatenate([a, np.zeros(32 - len(a), np.uint32)])
    want += [cvt_f32_reference(quals, 0)] * (32 - len(want))
  assert _run_lanes(op, a).tolist() == want


def test_cvt_sat_of_minus_zero_and_the_nan_without_sat_are_refused():
  for op, bits, why in [("cvt.sat.f32.f32", 0x80000000, "negative operand"),
                        ("cvt.f32.f32", 0x7FC00000, "NaN"),
                        ("cvt.rni.f32.f32", _bits(-0.25), "negative operand")]:
    a = np.full(32, _bits(0.25), np.uint32)
    a[3] = bits
    with pytest.raises(NotImplementedError, match=why):
      _run_lanes(op, a)


def setp_float_reference(cmp, ftz, a, b):
  """setp.cmp{.ftz}.f32 of bit patterns a, b: 0 / 1 (PTX ISA, setp, Floating Point Notes)."""
  x, y = (np.float32(_decode("f32", v & 0x80000000 if ftz and _subnormal("f32", v) else v))
          for v in (a, b))
  if np.isnan(x) or np.isnan(y):
    return int(cmp == "nan" or (cmp.endswith("u") and cmp != "num"))
  if cmp in ("num", "nan"):
    return int(cmp == "num")
  return int({"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y,
              "ge": x >= y}[cmp.rstrip("u")])


_SETP_VALUES = [0x00000000, 0x80000000, 0x00000001, 0x3F800000, 0xBF800000, 0x7F800000,
                0xFF800000, _NAN, 0x00000002, 0x80000001]


@pytest.mark.parametrize("cmp", ["eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu",
                                 "leu", "gtu", "geu", "num", "nan"])
@pytest.mark.parametrize("ftz", ["", ".ftz"])
def test_float_setp_compares_with_the_isas_nan_rules(cmp, ftz):
  pairs = [(a, b) for a in _SETP_VALUES for b in _SETP_VALUES]
  ptx = kernel(f"""
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  ld.global.b32 %r3, [%rd3];
  ld.global.b32 %r4, [%rd3+512];
  setp.{cmp}{ftz}.f32 %p1, %r3, %r4;
  selp.u32 %r5, 1, 0, %p1;
  st.global.b32 [%rd3+1024], %r5;
""")
  for start in range(0, len(pairs), 128):
    chunk = pairs[start:start + 128]
    chunk += [(0, 0)] * (128 - len(chunk))
    buf = np.array([p[0] for p in chunk] + [p[1] for p in chunk] + [0] * 128, np.uint32)
    got = output(ptx, [buf], cluster=1, smem_bytes=16, block=128)[256:]
    assert got.tolist() == [setp_float_reference(cmp, bool(ftz), a, b) for a, b in chunk]


def cvt_int_to_f32_reference(mode, src, bits):
  """``cvt.mode.f32.src`` of a register's ``bits``: the integer (NumPy's view of the
  type's low bits) rounded once (test_float_ops' by-hand rounding to nearest; the
  directed modes by stepping to the neighbour on the far side)."""
  width = int(src[1:])
  v = int(np.array([bits & ((1 << width) - 1)], f"u{width // 8}").view(
      f"{'i' if src[0] == 's' else 'u'}{width // 8}")[0])
  out = _round_f32(fractions.Fraction(v))
  got = fractions.Fraction(_decode("f32", out))
  toward = {"rn": 0, "rz": -1 if abs(got) > abs(v) else 0,
            "rm": -1 if got > v else 0, "rp": 1 if got < v else 0}[mode]
  if toward and mode != "rz":   # one step of the magnitude's bits, by the sign
    out += toward if v >= 0 else -toward
  elif toward:
    out -= 1
  return out


@pytest.mark.parametrize("op", ["cvt.rn.f32.s32", "cvt.rz.f32.u32", "cvt.rm.f32.s32",
                                "cvt.rp.f32.s32"])
def test_cvt_from_integers_rounds_once(op):
  """Integer-to-float conversions: "Floating-point rounding is required ... for
  integer-to-float conversions" (the mode names the direction)."""
  rng = np.random.default_rng(8)
  a = rng.integers(0, 1 << 32, 32, dtype=np.uint64).astype(np.uint32)
  a[:6] = [0, 1, 0xFFFFFFFF, 16777217, 0x80000000, 0x7FFFFFFF]
  mode, src = op.split(".")[1], op.split(".")[3]
  assert _run_lanes(op, a).tolist() == [cvt_int_to_f32_reference(mode, src, int(v)) for v in a]
