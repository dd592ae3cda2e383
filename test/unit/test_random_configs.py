"""Random store configurations, compiled: a few dozen of them (drawn by
test/harness/random_store_configs.py) go through ``build_store_module`` +
``toolchain.compile_module`` and give PTX that ptxas accepted, whose store instructions
move what the verified plan says, or raise AsyncStoreError.  (Planning them alone, several
hundred: test/planner/test_random_plans.py.)

``MAS_RANDOM_COMPILES`` changes the example count; ``MAS_HYPOTHESIS_RANDOM=1`` draws new
examples instead of CI's fixed ones.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings

from mosaic_async_store.demo.config import StoreConfig
from mosaic_async_store.errors import AsyncStoreError
from random_store_configs import (COMPILES, DERANDOMIZE, check_plan, configs, planned,
                                  refused_cleanly, try_config)

_PTX_TYPE = re.compile(r"\.(?:v([248])\.)?(?:noftz\.)?(?:[bfsu]|bf)(\d+)(x2)?$")
_SHARED_STORE = re.compile(r"^(?:st|red)(?:\.async)?\.(?:[a-z]+\.)*shared")


def ptx_store_bytes_per_thread(stores: dict[str, int]) -> int:
  """Bytes one thread's shared-memory store/reduction instructions move."""
  total = 0
  for opcode, n in stores.items():
    if _SHARED_STORE.match(opcode):
      match = _PTX_TYPE.search(opcode)
      assert match, opcode
      vec, bits, pair = match.groups()
      total += n * int(vec or 1) * int(bits) // 8 * (2 if pair else 1)
  return total


def _compile(cfg: StoreConfig):
  from jaxlib.mlir import ir

  from mosaic_async_store import compat
  from mosaic_async_store.tools import toolchain
  from mosaic_async_store.demo.kernel import build_store_module
  with compat.make_ir_context(), ir.Location.unknown():
    module, _ = build_store_module(cfg, bare=True)
    return toolchain.compile_module(module)


@pytest.mark.long
@settings(max_examples=COMPILES, deadline=None, derandomize=DERANDOMIZE, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(kwargs=configs())
def test_random_kernels_compile_to_ptxas_accepted_ptx_or_refuse(kwargs):
  cfg = try_config(kwargs)
  if isinstance(cfg, AsyncStoreError):
    refused_cleanly(None, cfg)
    return
  try:
    compiled = _compile(cfg)
  except AsyncStoreError as e:
    refused_cleanly(cfg, e)
    with pytest.raises(AsyncStoreError):  # the planner refuses it too
      planned(cfg)
    return
  assert compiled.cubin, cfg.describe()  # ptxas accepted the PTX
  plan, report = planned(cfg)
  check_plan(cfg, plan, report)
  per_thread = sum(i.width for i in plan.instructions)
  assert ptx_store_bytes_per_thread(compiled.stats.stores) == per_thread, (
      cfg.describe(), compiled.stats.stores)
  arrives = sum(n for op, n in compiled.stats.stores.items() if op.startswith("mbarrier.arrive"))
  assert arrives == 1, (cfg.describe(), compiled.stats.stores)
