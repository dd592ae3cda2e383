"""Random store configurations, planned: each one is planned and verified, or refused
cleanly (several hundred examples; test/harness/random_store_configs.py draws them).

The contract: ``plan_store`` + ``verify`` either give a verified plan that moves exactly
the array's bytes, or raise AsyncStoreError; never another exception, never an internal
planner defect.  Jax-free (the planner is): it runs once in .ci/run, on its first jax
version.  test/unit/test_random_configs.py compiles a few of the same configurations.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from mosaic_async_store.errors import AsyncStoreError
from random_store_configs import (DERANDOMIZE, PLANS, check_plan, configs, planned,
                                  refused_cleanly, try_config)


@settings(max_examples=PLANS, deadline=None, derandomize=DERANDOMIZE, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(kwargs=configs())
def test_random_plans_verify_or_refuse(kwargs):
  cfg = try_config(kwargs)
  if isinstance(cfg, AsyncStoreError):
    refused_cleanly(None, cfg)
    return
  try:
    plan, report = planned(cfg)
  except AsyncStoreError as e:
    refused_cleanly(cfg, e)
    return
  check_plan(cfg, plan, report)
