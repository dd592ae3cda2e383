"""``ops.bfe`` (closed form) against the PTX ISA's bit-by-bit definition of bfe: bit i of
d is bit pos + i of a where i < len and pos + i < bits, else the sign bit (for .s types
with len > 0: a's bit min(pos + len - 1, bits - 1)) or 0; pos and len are taken modulo
256 (their low 8 bits)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from mosaic_async_store.check.ops import bfe

_SMALL = st.integers(0, 70)   # (every position, length and their sums around 32 and 64)


def _isa_bfe(bits, signed, a, pos, ln):
  pos, ln = pos & 0xFF, ln & 0xFF
  sign = (a >> min(pos + ln - 1, bits - 1)) & 1 if signed and ln else 0
  out = 0
  for i in range(bits):
    bit = (a >> (pos + i)) & 1 if i < ln and pos + i < bits else sign
    out |= bit << i
  return out


@settings(max_examples=2000, deadline=None, derandomize=True)
@given(bits=st.sampled_from([32, 64]), signed=st.booleans(), a=st.integers(0, 2**64 - 1),
       pos=st.one_of(_SMALL, st.integers(0, 2**32 - 1)),
       ln=st.one_of(_SMALL, st.integers(0, 2**32 - 1)))
def test_bfe_is_the_isa_bit_by_bit(bits, signed, a, pos, ln):
  a &= (1 << bits) - 1
  assert bfe(bits, signed)(a, pos, ln) == _isa_bfe(bits, signed, a, pos, ln)
