"""Float mul/add/sub without a rounding modifier (check/contraction.py): the code
generator may contract them into one fma, so where both results differ the checker
runs the kernel under each: schedule 0 unfused, schedule 1 fused, the others either
(per pair of instructions, for the whole run).

PTX ISA, add / mul (floating point): "mul/add sequences with no rounding modifiers may
be optimized to use fused-multiply-add instructions on the target device".
"""

import numpy as np
import pytest

from mosaic_async_store.check import check_ptx
from ptx_harness import SCHEDULES, assemble, kernel, output

# a = b = 1 + 2**-12; c = -(1 + 2**-11): a * b rounds to 1 + 2**-11 (a tie, to even),
# so the sum of the rounded product is 0, and the fused result 2**-24.
_TIE = [0x3F800800, 0x3F800800, 0xBF801000]
_FUSED, _TWICE = 0x33800000, 0x00000000
_EXACT = [0x40000000, 0x40400000, 0x40800000]   # 2 * 3 + 4 = 10 either way
_TEN = 0x41200000


def _ptx(mul="mul.f32", combine="add.f32 %f5, %f4, %f3;", via_mov=False):
  """Thread 0 computes ``combine`` of f1 * f2 (f4) and f3, from words 0..2 of the
  buffer, into word 3; the other threads do nothing."""
  move = "mov.f32 %f6, %f4;\n  " if via_mov else ""
  if via_mov:
    combine = combine.replace("%f4", "%f6")
  return kernel(f"""
  setp.ne.u32 %p1, %r1, 0;
  @%p1 bra DONE;
  ld.param.u64 %rd1, [k_param_0];
  cvta.to.global.u64 %rd1, %rd1;
  ld.global.f32 %f1, [%rd1];
  ld.global.f32 %f2, [%rd1+4];
  ld.global.f32 %f3, [%rd1+8];
  {mul} %f4, %f1, %f2;
  {move}{combine}
  st.global.f32 [%rd1+12], %f5;
DONE:""", regs=".reg .f32 %f<8>;")


def _run(ptx, words, schedule=0):
  return int(output(ptx, [np.array(words + [0], np.uint32)], cluster=1, smem_bytes=16,
                    block=32, schedule=schedule)[3])


_DIFFERING = {
    "mul then add": _ptx(),
    "mul then add, the product second": _ptx(combine="add.f32 %f5, %f3, %f4;"),
    "mul then sub, the product first": _ptx(combine="sub.f32 %f5, %f4, %f3;"),
    "a product through a mov": _ptx(via_mov=True),
}


# (These three were refused by name before the checker ran both results; each now
# runs, unfused in schedule 0 and fused in schedule 1.)
@pytest.mark.parametrize("schedule", [0, 1])
@pytest.mark.parametrize("name", list(_DIFFERING))
def test_a_contractible_sum_whose_results_differ_runs_each_way(name, schedule):
  ptx = _DIFFERING[name]
  words = _TIE if "sub" not in name else [_TIE[0], _TIE[1], _TIE[2] ^ 0x80000000]
  assert _run(ptx, words, schedule) == (_FUSED if schedule == 1 else _TWICE)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_schedule_computes_one_of_the_two_legal_results(schedule):
  assert _run(_DIFFERING["mul then add"], _TIE, schedule) in (_FUSED, _TWICE)


def test_other_minus_a_product_runs_with_the_fused_form_in_schedule_1():
  # c - a*b with c = 1 + 2**-11 + 2**-22: 2**-22 rounded twice, 3 * 2**-24 fused
  ptx = _ptx(combine="sub.f32 %f5, %f3, %f4;")
  words = [_TIE[0], _TIE[1], 0x3F801002]
  assert _run(ptx, words, 0) == 0x34800000
  assert _run(ptx, words, 1) == 0x34400000


def test_check_ptx_accepts_it_and_reports_the_first_schedules_outputs():
  words = np.array(_TIE + [0], np.uint32)
  report = check_ptx(_ptx(), [words], smem_bytes=16, block=32, cluster=(1, 1, 1),
                     schedules=3)
  assert report.ok, report.findings
  assert int(report.outputs[0].view(np.uint32)[3]) == _TWICE   # schedule 0's: unfused


@pytest.mark.parametrize("mul,combine,want", [
    ("mul.rn.f32", "add.f32 %f5, %f4, %f3;", _TWICE),     # a rounded mul: not contracted
    ("mul.f32", "add.rn.f32 %f5, %f4, %f3;", _TWICE),     # a rounded add: not contracted
    ("mul.rz.f32", "add.rz.f32 %f5, %f4, %f3;", _TWICE),  # (1 + 2**-11 + 2**-24 -> rz)
])
def test_a_rounding_modifier_fixes_the_result(mul, combine, want):
  assert _run(_ptx(mul, combine), _TIE) == want


def test_a_sequence_whose_two_results_agree_runs():
  assert _run(_ptx(), _EXACT) == _TEN
  assert _run(_ptx(combine="sub.f32 %f5, %f4, %f3;"), _EXACT) == 0x40000000   # 6 - 4


def test_an_ftz_mul_feeding_a_plain_add_is_refused():
  with pytest.raises(NotImplementedError, match="qualifiers differ"):
    _run(_ptx(mul="mul.ftz.f32"), _EXACT)


def test_the_kernels_assemble():
  for ptx in [*_DIFFERING.values(), _ptx("mul.rn.f32"), _ptx(mul="mul.ftz.f32")]:
    assemble(ptx)
