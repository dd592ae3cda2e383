"""The float warp forms (``float_columns.lanes_form``: NumPy columns) give the bits of the lane
functions (``floats.float_op``), lane for lane, or decline (None) and leave the warp to
them: checked on random bit patterns of every kind (normal, subnormal, zero, the
largest, infinity, NaN) for f32 add, sub, mul, div, fma, min and max and for f16 / bf16
(scalar and packed) add, sub, mul, with and without ``.ftz``; on ordinary values they
must not decline (else the fast path is never run)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mosaic_async_store.check.floats import float_op
from mosaic_async_store.check.float_columns import lanes_form, on_lists

_FORMS = [("add", ["rn"]), ("sub", ["rn"]), ("mul", ["rn"]), ("div", ["rn"]),
          ("fma", ["rn"]), ("min", []), ("max", []), ("max", ["NaN"])]
_SPECIAL = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF,
            0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x3F800000, 0xBF800000,
            0x33800000, 0x4B000000]
_WORD = st.one_of(st.sampled_from(_SPECIAL), st.integers(0, 0xFFFFFFFF),
                  st.floats(-1e6, 1e6, width=32).map(
                      lambda x: int(np.float32(x).view(np.uint32))))


def _lane_results(fn, columns):
  """Each lane through the lane function; None where any lane is refused (a NaN)."""
  out = []
  for args in zip(*columns):
    try:
      out.append(fn(*args))
    except NotImplementedError:
      return None
  return out


def _check(base, quals, ftz, columns):
  mods = quals + (["ftz"] if ftz else []) + ["f32"]
  fn, form = float_op(base, mods, f"{base}.f32"), lanes_form(base, mods)
  assert form is not None
  got = on_lists(form, *columns)
  if got is not None:
    assert got == _lane_results(fn, columns), (base, mods)
  return got


@settings(max_examples=150, deadline=None, derandomize=True)
@given(form=st.sampled_from(_FORMS), ftz=st.booleans(),
       words=st.lists(st.tuples(_WORD, _WORD, _WORD), min_size=1, max_size=32))
def test_f32_warp_forms_give_the_lane_functions_bits(form, ftz, words):
  base, quals = form
  arity = 3 if base == "fma" else 2
  _check(base, quals, ftz, [[w[j] for w in words] for j in range(arity)])


@pytest.mark.parametrize("base, quals", _FORMS)
@pytest.mark.parametrize("ftz", [False, True])
def test_f32_warp_forms_run_on_ordinary_values(base, quals, ftz):
  rng = np.random.default_rng(7)
  columns = [(rng.standard_normal(32).astype(np.float32) * 100).view(np.uint32).tolist()
             for _ in range(3 if base == "fma" else 2)]
  assert _check(base, quals, ftz, columns) is not None


def test_fma_ties_in_the_double_sum_follow_the_exact_sum():
  """fma(a, b, c) whose double sum is 1 + 2^-24, half-way between two f32 values, with
  the exact sum 2^-70 above it (rounds up) or 2^-71 below it (rounds down): a = 1 +
  2^-23, b = 1 - 2^-24 (a * b = 1 + 2^-24 - 2^-47), c = 2^-47 + 2^-70 or 2^-47 - 2^-71."""
  columns = [[0x3F800001] * 2, [0x3F7FFFFF] * 2, [0x28000001, 0x27FFFFFF]]
  fn = float_op("fma", ["rn", "f32"], "fma.rn.f32")
  got = on_lists(lanes_form("fma", ["rn", "f32"]), *columns)
  assert got == [0x3F800001, 0x3F800000] == _lane_results(fn, columns)


_HALF_TYPES = ["f16", "bf16", "f16x2", "bf16x2"]
_HALF_WORD = st.one_of(st.integers(0, 0xFFFF), st.sampled_from(
    [0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x7C00, 0x7E00, 0x0080, 0x7F7F,
     0x7F80, 0x3C00, 0x3F80]))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(base=st.sampled_from(["add", "sub", "mul"]), t=st.sampled_from(_HALF_TYPES),
       ftz=st.booleans(), words=st.lists(st.tuples(_HALF_WORD, _HALF_WORD, _HALF_WORD,
                                                   _HALF_WORD), min_size=1, max_size=32))
def test_16_bit_warp_forms_give_the_lane_functions_bits(base, t, ftz, words):
  if ftz and t.startswith("bf16"):
    return   # (bf16 takes no .ftz)
  packed = t.endswith("x2")
  columns = [[w[j] | (w[j + 2] << 16 if packed else 0) for w in words] for j in (0, 1)]
  mods = ["rn"] + (["ftz"] if ftz else []) + [t]
  fn, form = float_op(base, mods, f"{base}.{t}"), lanes_form(base, mods)
  got = on_lists(form, *columns)
  if got is not None:
    assert got == _lane_results(fn, columns)


@pytest.mark.parametrize("base", ["add", "sub", "mul"])
@pytest.mark.parametrize("t", _HALF_TYPES)
def test_16_bit_warp_forms_run_on_ordinary_values(base, t):
  rng = np.random.default_rng(3)
  ftype = {"f": np.float16, "b": __import__("ml_dtypes").bfloat16}[t[0]]
  def column():
    words = (rng.standard_normal((2, 32)) * 10).astype(ftype).view(np.uint16).astype(np.uint64)
    return (words[0] | (words[1] << np.uint64(16)) if t.endswith("x2") else words[0]).tolist()
  columns = [column(), column()]
  fn, form = float_op(base, ["rn", t], f"{base}.rn.{t}"), lanes_form(base, ["rn", t])
  got = on_lists(form, *columns)
  assert got is not None and got == _lane_results(fn, columns)


def test_forms_without_a_warp_form():
  assert lanes_form("fma", ["rn", "f16"]) is None
  assert lanes_form("add", ["rz", "f32"]) is None
  assert lanes_form("ex2", ["approx", "f32"]) is None
  assert on_lists(None, [1]) is None


def test_f32_min_and_max_order_infinities_at_once():
  """min / max take infinities in their warp form (a NaN, or two zeros, still go lane by
  lane); the bits are the lane functions'."""
  columns = [[0xFF800000] * 16 + [0x3F800000] * 16, [0x40000000] * 16 + [0x7F800000] * 16]
  for base, quals in (("min", []), ("max", []), ("max", ["NaN"])):
    assert _check(base, quals, False, columns) is not None, base
  for base, quals in (("min", []), ("max", []), ("max", ["NaN"])):
    assert _check(base, quals, False, [[0x7FC00000, 0x3F800000], [0x3F800000, 0x40000000]]) \
        is None, base


def test_f32_sums_overflow_only_from_the_halfway_point_on():
  """The largest f32 plus half its last place rounds to infinity (a tie, to even): the
  warp form declines (the lane function rounds it); a quarter of it rounds back to the
  largest f32, at once."""
  largest, half_place, quarter_place = 0x7F7FFFFF, 0x73000000, 0x72800000
  assert _check("add", ["rn"], False, [[largest], [half_place]]) is None
  assert _check("add", ["rn"], False, [[largest], [quarter_place]]) == [largest]
  assert _check("fma", ["rn"], False, [[largest], [0x3F800000], [half_place]]) is None
  assert _check("fma", ["rn"], False, [[largest], [0x3F800000], [quarter_place]]) == [largest]
