"""sm_100a's packed f32 arithmetic (``add`` / ``sub`` / ``mul`` / ``fma`` ``.f32x2``, a
pair of f32 in a 64-bit register, the first in the low half): each half is the f32
operation's result, as NumPy's float32 gives it (one rounding to nearest), and an
unrounded ``mul`` then ``add`` may be contracted into an ``fma`` lane by lane
(schedule 0 unfused, 1 fused: docs/checker.md, "float contraction")."""

import numpy as np
import pytest

from ptx_harness import kernel, output

_BODY = """
  ld.param.u64 %rd1, [k_param_0];
  ld.global.v2.u64 {{%rd2, %rd3}}, [%rd1];
  ld.global.u64 %rd4, [%rd1+16];
  {op}
  st.global.u64 [%rd1+24], %rd5;
"""


def _pack(pair) -> int:
  return int(np.asarray(pair, np.float32).view(np.uint64)[0])


def _run(op, a, b, c=(0.0, 0.0), schedule=0):
  words = np.array([_pack(a), _pack(b), _pack(c), 0], np.uint64)
  ptx = kernel(_BODY.format(op=op), target="sm_100a")
  out = output(ptx, [words.view(np.uint32)], dtype=np.uint64, cluster=1, smem_bytes=16,
               block=1, schedule=schedule)
  return np.array([out[3]], np.uint64).view(np.float32)


@pytest.mark.parametrize("op, ref", [
    ("add.rn.f32x2 %rd5, %rd2, %rd3;", lambda a, b, c: a + b),
    ("sub.rn.f32x2 %rd5, %rd2, %rd3;", lambda a, b, c: a - b),
    ("mul.rn.f32x2 %rd5, %rd2, %rd3;", lambda a, b, c: a * b),
    ("fma.rn.f32x2 %rd5, %rd2, %rd3, %rd4;",
     lambda a, b, c: (a.astype(np.float64) * b + c).astype(np.float32)),
])
def test_each_half_is_the_f32_result(op, ref):
  a, b, c = (np.float32(1.1), np.float32(-3.7)), (np.float32(2.5), np.float32(0.3)), \
      (np.float32(0.7), np.float32(1e-3))
  got = _run(op, a, b, c)
  want = ref(np.array(a, np.float32), np.array(b, np.float32), np.array(c, np.float32))
  np.testing.assert_array_equal(got, want.astype(np.float32))


def test_an_unrounded_mul_then_add_is_fused_in_schedule_1():
  """1/3 * 3 - 1 differs fused (the product unrounded) and unfused (0 in f32)."""
  third = np.float32(1) / np.float32(3)
  op = "mul.f32x2 %rd6, %rd2, %rd3;\n  add.f32x2 %rd5, %rd6, %rd4;"
  a, b, c = (third, third), (np.float32(3), np.float32(3)), (np.float32(-1), np.float32(-1))
  unfused = _run(op, a, b, c, schedule=0)
  fused = _run(op, a, b, c, schedule=1)
  assert list(unfused) == [0.0, 0.0]
  exact = np.float32(np.float64(third) * 3 - 1)
  assert list(fused) == [exact, exact] and exact != 0
