"""The bulk and tensor copies' rules (``check.bulk_rules``): for each, one case that
breaks it (a message naming what is wrong) and one that keeps it (None / no message);
and every rule of ``RULES`` has its function and its source sentence."""

import pytest

from mosaic_async_store.check.families.tma import bulk_rules as R
from mosaic_async_store.check.families.tma.geometry import MapFields

# rule -> (arguments that break it, a word its message names, arguments that keep it)
CASES = {
    "bulk-size": ((40,), "multiple of 16", (48,)),
    "bulk-align": ((0x408, "dstMem"), "16-byte", (0x410, "dstMem")),
    "tensor-smem-align": ((0x440,), "128-byte", (0x480,)),
    "tensor-map-align": ((0x1020,), "64-byte", (0x1040,)),
    "tensor-map-space": (("shared",), ".shared", ("param",)),
    "multicast-mask": ((0b10011, 2), "[4]", (0b11, 2)),
    "bulk-mbar-dst": ((1, 0), "same CTA", (1, 1)),
    "bulk-shared-cta": ((1, 0, "srcMem"), "srcMem", (0, 0, "srcMem")),
    "tensor-dims": ((2, 3), "rank 3", (3, 3)),
    "tensor-store-coords": (([0, -1],), "c1 = -1", ([0, 7],)),
    "tensor-traversal-stride": ((MapFields((8, 16), (64, 4), (4, 4), 4,
                                           element_strides=(1, 2)),), "must be 1",
                                (MapFields((8, 16), (64, 4), (4, 4), 4,
                                           element_strides=(2, 1)),)),
    "bulk-s2s-peer": ((1, 1), "different CTA", (0, 1)),
}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_each_rule_breaks_and_keeps(rule):
  fn, _ = R.RULES[rule]
  bad, word, good = CASES[rule]
  message = fn(*bad)
  assert isinstance(message, str) and word in message
  assert fn(*good) is None


def test_size_zero_breaks_the_size_rule():
  assert "multiple of 16" in R.size_multiple_of_16(0)


def test_multicast_mask_of_a_full_16_cta_cluster_keeps_the_rule():
  assert R.multicast_mask(0xFFFF, 16) is None
  assert R.multicast_mask(0x8000, 8) is not None


_GOOD_MAP = MapFields((256, 64), (128, 2), (64, 64), 2, swizzle=128)


@pytest.mark.parametrize("bad,word", [
    (MapFields((256, 64), (120, 2), (64, 64), 2), "multiple of 16"),
    (MapFields((256, 512), (1024, 2), (64, 512), 2), "at most 256"),
    (MapFields((256, 64), (128, 2), (64, 4), 2), "multiple of 16"),
    (MapFields((256, 64), (128, 2), (64, 64), 2, swizzle=64), "at most 64"),
    (MapFields((256, 64), (128, 2), (64, 64), 2, element_strides=(9, 1)), "at most 8"),
    (MapFields((0, 64), (128, 2), (64, 64), 2), "non-zero"),
])
def test_tensor_map_rules(bad, word):
  messages = R.tensor_map_rules(bad)
  assert messages and any(word in m for m in messages)
  assert R.tensor_map_rules(_GOOD_MAP) == []


def test_tensor_map_global_address():
  assert any("16-byte" in m for m in R.tensor_map_rules(_GOOD_MAP, global_address=0x1008))
  assert R.tensor_map_rules(_GOOD_MAP, global_address=0x1000) == []


def test_every_rule_names_its_source():
  assert set(R.RULES) == set(CASES) | {"tensor-map"}
  for name, (fn, source) in R.RULES.items():
    assert callable(fn) and len(source) > 40, name
