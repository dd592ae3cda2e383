"""The checker's floating-point arithmetic: exact against a reference computed another
way (rational arithmetic, rounded to binary32 by hand), or refused by name.

It used to run ``add.f32`` as an integer add of the bit patterns (1.0 + 1.0 gave
1.7e38), and ``sub``, ``neg``, ``min``, ``max`` the same way."""

import fractions
import struct

import numpy as np
import pytest

from mosaic_async_store.check.interp import PtxKernel
from test_interp_features import kernel


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


def _run(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """``op`` on 32 lanes of (a, b) bit patterns in the checker."""
  ptx = kernel(f"""
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  ld.global.b32 %r3, [%rd3];
  ld.global.b32 %r4, [%rd3+128];
  {op} %r5, %r3, %r4;
  st.global.b32 [%rd3+256], %r5;
""")
  buf = np.concatenate([a, b, np.zeros(32, np.uint32)]).astype(np.uint32)
  [out] = PtxKernel(ptx).launch([buf], cluster=1, smem_bytes=16, block=32)
  return out.view(np.uint32)[64:]


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


@pytest.mark.parametrize("op", ["fma.rn.f32", "fma.rn.bf16x2", "add.rz.f32", "add.f16",
                                "add.bf16x2", "min.f32", "max.NaN.f32", "mul.f64",
                                "add.sat.f32", "setp.lt.f32", "sub.rn.bf16", "neg.bf16x2",
                                "cvt.rn.f32.s32", "ex2.approx.f32"])
def test_what_is_not_exact_is_refused_by_name_at_parse(op):
  operands = {"fma": "%r5, %r3, %r4, %r4", "setp": "%p1, %r3, %r4", "cvt": "%r5, %r3",
              "ex2": "%r5, %r3", "neg": "%r5, %r3"}.get(op.split(".")[0], "%r5, %r3, %r4")
  ptx = kernel(f"  {op} {operands};")
  with pytest.raises(NotImplementedError, match=op.split(".")[0]):
    PtxKernel(ptx)


def test_neg_and_abs_are_sign_bit_operations():
  x = _samples(3)
  ptx_neg = _run_unary("neg.f32", x)
  assert ptx_neg.tolist() == [(int(v) ^ 0x80000000) for v in x]
  assert _run_unary("abs.f32", x).tolist() == [int(v) & 0x7FFFFFFF for v in x]


def _run_unary(op, a):
  ptx = kernel(f"""
  ld.param.u64 %rd1, [k_param_0];
  mul.wide.u32 %rd2, %r1, 4;
  add.s64 %rd3, %rd1, %rd2;
  ld.global.b32 %r3, [%rd3];
  {op} %r5, %r3;
  st.global.b32 [%rd3+128], %r5;
""")
  buf = np.concatenate([a, np.zeros(32, np.uint32)]).astype(np.uint32)
  [out] = PtxKernel(ptx).launch([buf], cluster=1, smem_bytes=16, block=32)
  return out.view(np.uint32)[32:]
